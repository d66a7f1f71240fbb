package master

import (
	"bytes"
	"fmt"
	"testing"

	pb "github.com/cellstore/cellstore/engine/api/cellstore/v1"
)

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
