package master

import (
	"bytes"
	"fmt"
	"testing"

	pb "github.com/cellstore/cellstore/engine/api/cellstore/v1"
)

func TestNames(t *testing.T) {
	for _, tc := range []struct {
		server string
		sc     int64
		want   string
	}{
		{"rs-0.rs.ns.svc:16020", 1700000000000, "rs-0.rs.ns.svc_16020_1700000000000"},
		{"[::1]:16020", 7, "___1__16020_7"},
		{"UPPER_case:1", 1, "UPPER_case_1_1"},
	} {
		if got := WALDirName(tc.server, tc.sc); got != tc.want {
			t.Errorf("WALDirName(%q, %d) = %q, want %q", tc.server, tc.sc, got, tc.want)
		}
	}
	if got := WALDir("h:1", 2); got != "wal/h_1_2" {
		t.Errorf("WALDir = %q", got)
	}
	if RegionName(0x1a2b) != "0000000000001a2b" || ReplicaName(0x1a2b, 2) != "0000000000001a2b_2" || ReplicaName(5, 0) != RegionName(5) {
		t.Error("region names")
	}
	if PrimaryName("0000000000001a2b_2") != "0000000000001a2b" || PrimaryName("0000000000001a2b") != "0000000000001a2b" {
		t.Error("PrimaryName")
	}
	ri := &pb.RegionInfo{Table: &pb.TableName{Namespace: "ns", Name: "t"}, Name: ReplicaName(3, 1)}
	if RegionDir(ri) != "data/ns/t/0000000000000003" || RecoveredEditsDir(ri) != "data/ns/t/0000000000000003/recovered.edits" {
		t.Errorf("dirs %s %s", RegionDir(ri), RecoveredEditsDir(ri))
	}
	sn, err := ParseServerName("host.example:16020")
	if err != nil || sn.GetHost() != "host.example" || sn.GetPort() != 16020 || ServerName(sn) != "host.example:16020" {
		t.Errorf("ParseServerName: %v %v", sn, err)
	}
	for _, bad := range []string{"", "host", ":1", "h:0", "h:99999", "h:x"} {
		if _, err := ParseServerName(bad); err == nil {
			t.Errorf("ParseServerName(%q) accepted", bad)
		}
	}
}

func TestSplitKeys(t *testing.T) {
	keys, err := splitKeysFor(nil, 8)
	if err != nil || len(keys) != 7 {
		t.Fatalf("%v %v", keys, err)
	}
	for i, k := range keys {
		if want := []byte{byte(0x20 * (i + 1))}; !bytes.Equal(k, want) {
			t.Errorf("key %d = %x, want %x", i, k, want)
		}
	}
	keys, _ = splitKeysFor(nil, 3)
	if fmt.Sprintf("%x", keys) != "[5555555555555555 aaaaaaaaaaaaaaaa]" {
		t.Errorf("3 regions: %x", keys)
	}
	for _, n := range []int32{0, 1} {
		if keys, err := splitKeysFor(nil, n); err != nil || len(keys) != 0 {
			t.Errorf("%d regions: %v %v", n, keys, err)
		}
	}
	keys, err = splitKeysFor([][]byte{[]byte("m"), []byte("c"), []byte("x")}, 0)
	if err != nil || fmt.Sprintf("%s", keys) != "[c m x]" {
		t.Errorf("given keys not sorted: %s %v", keys, err)
	}
	for _, bad := range []struct {
		keys [][]byte
		n    int32
	}{{[][]byte{[]byte("a"), []byte("a")}, 0}, {[][]byte{{}}, 0}, {[][]byte{[]byte("a")}, 2}, {nil, -1}, {nil, MaxSplitKeys + 2}} {
		if _, err := splitKeysFor(bad.keys, bad.n); err == nil {
			t.Errorf("accepted %q / %d", bad.keys, bad.n)
		}
	}
}

// The master uses the schema package's rules (tested there); this checks it applies them.
func TestNameValidationIsSchemas(t *testing.T) {
	if err := validFamilyName(bytes.Repeat([]byte("f"), 128)); err == nil {
		t.Error("a 128-byte family was accepted")
	}
	if _, err := checkTableDescriptor(&pb.TableDescriptor{Name: &pb.TableName{Namespace: "hbase", Name: "meta"},
		Families: []*pb.ColumnFamilyDescriptor{{Name: []byte("f")}}}); err == nil {
		t.Error("a table in the hbase namespace was accepted")
	}
}

// FuzzCheckTableDescriptor: descriptors from a request never make the checks panic.
func FuzzCheckTableDescriptor(f *testing.F) {
	f.Add("ns", "t", []byte("f"), int32(1), []byte("k"))
	f.Add("", ".", []byte{}, int32(-1), []byte{})
	f.Fuzz(func(t *testing.T, ns, name string, fam []byte, repl int32, key []byte) {
		td := &pb.TableDescriptor{Name: &pb.TableName{Namespace: ns, Name: name}, RegionReplication: repl,
			Families: []*pb.ColumnFamilyDescriptor{{Name: fam}}}
		_, _ = checkTableDescriptor(td)
		_, _ = splitKeysFor([][]byte{key, key}, 0)
		_, _ = splitKeysFor(nil, repl)
	})
}
