package schema

import (
	"bytes"
	"strings"
	"testing"
	"unicode/utf8"

	pb "github.com/cellstore/cellstore/engine/api/cellstore/v1"
)

func TestTableNames(t *testing.T) {
	good := []*pb.TableName{{Namespace: "default", Name: "t1"}, {Namespace: "ns_1", Name: "a.b-c_D9"}, {Name: "t"}}
	for _, tn := range good {
		if err := TableName(tn); err != nil {
			t.Errorf("%v: %v", tn, err)
		}
	}
	bad := []*pb.TableName{nil, {Namespace: "default"}, {Namespace: "default", Name: "-x"}, {Namespace: "default", Name: "a b"},
		{Namespace: "n.s", Name: "t"}, {Namespace: "default", Name: strings.Repeat("x", 256)},
		{Namespace: strings.Repeat("n", 129), Name: "t"}, {Namespace: "default", Name: "caf\xe9"}}
	for _, tn := range bad {
		err := TableName(tn)
		if err == nil {
			t.Errorf("%v accepted", tn)
			continue
		}
		if !utf8.ValidString(err.Error()) {
			t.Errorf("error text is not UTF-8: %q", err.Error())
		}
	}
	if err := Namespace(""); err == nil {
		t.Error("empty namespace accepted")
	}
	if err := UserTable(&pb.TableName{Namespace: SystemNamespace, Name: "meta"}); err == nil || !strings.Contains(err.Error(), "reserved") {
		t.Errorf("hbase:meta as a user table: %v", err)
	}
	if err := UserTable(&pb.TableName{Name: "meta"}); err != nil {
		t.Errorf("default:meta: %v", err)
	}
}

func TestFamilyNames(t *testing.T) {
	for _, f := range []string{"", ".f", "a/b", "a:b", "a b", "\x00", `a\b`, "caf\xc3\xa9"} {
		if err := Family(f); err == nil {
			t.Errorf("family %q accepted", f)
		}
		if err := Family([]byte(f)); err == nil {
			t.Errorf("family %q accepted as bytes", f)
		}
	}
	for _, f := range []string{"cf-1.x", "f", strings.Repeat("f", 127)} {
		if err := Family(f); err != nil {
			t.Errorf("family of %d bytes: %v", len(f), err)
		}
	}
	// The family's length is one signed byte in a cell's key: 128 bytes is refused everywhere.
	if err := Family(bytes.Repeat([]byte("f"), 128)); err == nil {
		t.Error("a 128-byte family was accepted")
	}
}

// A byte above 0x7f in a name is shown as \xNN, not as the Latin-1 character fmt's %q of a byte
// would print (a name holding byte 0xE9 does not hold "é").
func TestNameErrorsShowBytesNotLatin1(t *testing.T) {
	for _, err := range []error{Family("caf\xe9"), Table("default", "caf\xe9"), Namespace("caf\xe9")} {
		if err == nil || !strings.Contains(err.Error(), `'\xe9'`) || strings.Contains(err.Error(), "é") {
			t.Errorf("want the byte as '\\xe9' and no é: %v", err)
		}
	}
	if err := Family("a:b"); err == nil || !strings.Contains(err.Error(), "':'") {
		t.Errorf("want the ASCII byte quoted: %v", err)
	}
}

func TestDescriptor(t *testing.T) {
	ok := func() *pb.TableDescriptor {
		return &pb.TableDescriptor{Name: &pb.TableName{Name: "t"}, Families: []*pb.ColumnFamilyDescriptor{{Name: []byte("f"), MaxVersions: 3}}}
	}
	if err := Descriptor(ok()); err != nil {
		t.Fatal(err)
	}
	for name, mutate := range map[string]func(*pb.TableDescriptor){
		"no families": func(td *pb.TableDescriptor) { td.Families = nil },
		"twice":       func(td *pb.TableDescriptor) { td.Families = append(td.Families, td.Families[0]) },
		"min>max":     func(td *pb.TableDescriptor) { td.Families[0].MinVersions = 4 },
		// VERSIONS unset is 1: the regions refused it, so every open failed after the master took it.
		"min>default max": func(td *pb.TableDescriptor) { td.Families[0].MaxVersions, td.Families[0].MinVersions = 0, 2 },
		"negative ttl":    func(td *pb.TableDescriptor) { td.Families[0].TtlSeconds = -1 },
		"replication 17":  func(td *pb.TableDescriptor) { td.RegionReplication = MaxReplication + 1 },
		"bad family":      func(td *pb.TableDescriptor) { td.Families[0].Name = []byte("a:b") },
		"no name":         func(td *pb.TableDescriptor) { td.Name = nil },
	} {
		td := ok()
		mutate(td)
		if err := Descriptor(td); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	td := ok()
	td.Families[0].MaxVersions, td.Families[0].MinVersions = 0, 1
	if err := Descriptor(td); err != nil {
		t.Errorf("MIN_VERSIONS 1 with the default VERSIONS: %v", err)
	}
	if err := Descriptor(nil); err == nil {
		t.Error("nil descriptor accepted")
	}
}

// Key renders bytes as UTF-8 text with escapes: never a Latin-1 reading of a byte, always valid
// UTF-8 (error texts travel in protobuf strings).
func TestKeyRendering(t *testing.T) {
	for in, want := range map[string]string{
		"row1":       `"row1"`,
		"café":       `"café"`,
		"caf\xe9":    `"caf\xe9"`, // a lone 0xE9 byte is not "é"
		"a\x00b\n":   `"a\x00b\n"`,
		"\xff\xfe日本": `"\xff\xfe日本"`,
	} {
		got := Key(in)
		if got != want {
			t.Errorf("Key(%q) = %s, want %s", in, got, want)
		}
		if got != Key([]byte(in)) {
			t.Errorf("Key differs for string and bytes of %q", in)
		}
		if !utf8.ValidString(got) {
			t.Errorf("Key(%q) is not UTF-8", in)
		}
	}
}

// FuzzNames: no name makes the checks panic, and every error text is valid UTF-8.
func FuzzNames(f *testing.F) {
	f.Add("default", "t", []byte("f"))
	f.Add("", "\xff", []byte{0xff})
	f.Fuzz(func(t *testing.T, ns, name string, fam []byte) {
		for _, err := range []error{Table(ns, name), Family(fam), Descriptor(&pb.TableDescriptor{Name: &pb.TableName{Namespace: ns, Name: name},
			Families: []*pb.ColumnFamilyDescriptor{{Name: fam}}})} {
			if err != nil && !utf8.ValidString(err.Error()) {
				t.Fatalf("error text is not UTF-8: %q", err.Error())
			}
		}
	})
}
