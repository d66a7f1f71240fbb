package snapshot

import (
	"errors"
	"testing"

	"google.golang.org/protobuf/proto"

	pb "github.com/cellstore/cellstore/engine/api/cellstore/v1"
	"github.com/cellstore/cellstore/engine/region"
	"github.com/cellstore/cellstore/engine/storage"
)

func TestManifestRoundTripAndCorruption(t *testing.T) {
	m := &pb.SnapshotManifest{Name: "s", Table: &pb.TableDescriptor{Name: &pb.TableName{Namespace: "default", Name: "t"}},
		CreatedMs: 1, Regions: []*pb.SnapshotRegion{{RegionId: 7, EndKey: []byte("m"), Files: []*pb.SnapshotFile{
			{Family: "f", Path: "data/default/t/0000000000000007/f/a", Size: 10}}}}}
	b, err := Encode(m)
	if err != nil {
		t.Fatal(err)
	}
	got, err := Decode(b)
	if err != nil || !proto.Equal(got, m) {
		t.Fatalf("round trip: %v %v", got, err)
	}
	for i := range b {
		bad := append([]byte(nil), b...)
		bad[i] ^= 0x10
		if _, err := Decode(bad); !errors.Is(err, ErrCorrupt) {
			t.Fatalf("a flipped byte %d was not caught: %v", i, err)
		}
	}
	for _, short := range [][]byte{nil, {1, 2, 3}} {
		if _, err := Decode(short); !errors.Is(err, ErrCorrupt) {
			t.Errorf("%d bytes: %v", len(short), err)
		}
	}
	// List reports a damaged manifest and still lists the others.
	st := region.Storage{FS: storage.NewMem()}
	if err := Write(st, m); err != nil {
		t.Fatal(err)
	}
	if err := Write(st, m); err == nil {
		t.Fatal("a snapshot was written twice under one name")
	}
	m2 := proto.CloneOf(m)
	m2.Name = "s2"
	if err := Write(st, m2); err != nil {
		t.Fatal(err)
	}
	if err := st.WriteObject(ManifestKey("s2"), b[:len(b)-1], false); err != nil {
		t.Fatal(err)
	}
	ms, bad, err := List(st)
	if err != nil || len(ms) != 1 || ms[0].GetName() != "s" || len(bad) != 1 || bad[ManifestKey("s2")] == nil {
		t.Fatalf("list: %v, bad %v, err %v", ms, bad, err)
	}
}

func TestCheckName(t *testing.T) {
	for _, ok := range []string{"s", "snap-1", "a.b_c", "0"} {
		if err := CheckName(ok); err != nil {
			t.Errorf("%q: %v", ok, err)
		}
	}
	for _, bad := range []string{"", ".s", "-s", "a/b", "a b", "../x", string(make([]byte, 201))} {
		if err := CheckName(bad); err == nil {
			t.Errorf("%q was accepted", bad)
		}
	}
}
