package snapshot

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	pb "github.com/cellstore/cellstore/engine/api/cellstore/v1"
	"github.com/cellstore/cellstore/engine/layout"
	"github.com/cellstore/cellstore/engine/region"
	"github.com/cellstore/cellstore/engine/storage"
	"github.com/cellstore/cellstore/engine/storage/buckettest"
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
	ms, bad, err := list(st)
	if err != nil || len(ms) != 1 || ms[0].GetName() != "s" || len(bad) != 1 || bad[ManifestKey("s2")] == nil {
		t.Fatalf("list: %v, bad %v, err %v", ms, bad, err)
	}
}

// A manifest read by its snapshot's name that names another snapshot (renamed or copied by hand)
// is refused as corrupt by every reader: read by name, listed, copied.
func TestAManifestNamingAnotherSnapshotIsRefused(t *testing.T) {
	ctx := context.Background()
	st := region.Storage{Bucket: dirBucket(t)}
	const p = "data/default/t/0000000000000001/f/a"
	if _, err := st.WriteStream(ctx, p, strings.NewReader("data")); err != nil {
		t.Fatal(err)
	}
	m := &pb.SnapshotManifest{Name: "s", Table: &pb.TableDescriptor{Name: &pb.TableName{Namespace: "default", Name: "t"}},
		Regions: []*pb.SnapshotRegion{{RegionId: 1, Files: []*pb.SnapshotFile{{Family: "f", Path: p, Size: 4}}}}}
	if err := Write(st, m); err != nil {
		t.Fatal(err)
	}
	b, err := Encode(m)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.WriteObject(ManifestKey("other"), b, true); err != nil {
		t.Fatal(err)
	}
	if got, err := ReadNamed(st, "s"); err != nil || !proto.Equal(got, m) {
		t.Fatalf("read s by its name: %v", err)
	}
	if _, err := ReadNamed(st, "other"); !errors.Is(err, ErrCorrupt) || !strings.Contains(fmt.Sprint(err), `names snapshot "s"`) {
		t.Fatalf("read of a manifest at other naming s: %v, want ErrCorrupt naming both", err)
	}
	ms, bad, err := list(st)
	if err != nil || len(ms) != 1 || ms[0].GetName() != "s" || len(bad) != 1 || !errors.Is(bad[ManifestKey("other")], ErrCorrupt) {
		t.Fatalf("list: %v, bad %v, err %v", ms, bad, err)
	}
	dst := region.Storage{Bucket: dirBucket(t)}
	if _, err := Copy(ctx, st, dst, "other", CopyOptions{}); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("copy of a manifest at other naming s: %v, want ErrCorrupt", err)
	}
	for _, dir := range []string{"archive", Dir} {
		if err := dst.WalkFiles(dir, func(p string) error { return fmt.Errorf("the refused copy wrote %s", p) }); err != nil {
			t.Fatal(err)
		}
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

// corruptingBucket flips a byte of every object written under archive/: silent corruption on
// the way, which no real store produces on demand.
type corruptingBucket struct{ storage.Bucket }

func (c corruptingBucket) Put(ctx context.Context, key string, body []byte, cond storage.Condition) (string, error) {
	if strings.HasPrefix(key, "archive/") && len(body) > 0 {
		body = append([]byte(nil), body...)
		body[len(body)/2] ^= 1
	}
	return c.Bucket.Put(ctx, key, body, cond)
}

func dirBucket(t *testing.T) *storage.DirBucket { return buckettest.Dir(t) }

// Copy puts a snapshot's files under archive/ and its manifest at the destination, verifies each
// file, copies nothing twice, refuses another snapshot of the same name, and leaves no manifest when
// a file fails verification.
func TestCopy(t *testing.T) {
	ctx := context.Background()
	src := region.Storage{Bucket: dirBucket(t)}
	files := map[string][]byte{
		"data/default/t/0000000000000001/f/a": bytes.Repeat([]byte("a"), 5<<20+3), // more than a read buffer
		"data/default/t/0000000000000001/f/b": []byte("bee"),
		"data/default/t/0000000000000002/f/c": []byte("sea"),
	}
	for p, body := range files {
		key := p
		if strings.HasSuffix(p, "/c") { // compacted away since: in the archive
			key = "archive/" + p
		}
		if _, err := src.WriteStream(context.Background(), key, bytes.NewReader(body)); err != nil {
			t.Fatal(err)
		}
	}
	man := &pb.SnapshotManifest{Name: "s", Table: &pb.TableDescriptor{Name: &pb.TableName{Namespace: "default", Name: "t"}},
		Regions: []*pb.SnapshotRegion{
			{RegionId: 1, EndKey: []byte("m"), Files: []*pb.SnapshotFile{{Family: "f", Path: "data/default/t/0000000000000001/f/a"}, {Family: "f", Path: "data/default/t/0000000000000001/f/b"}}},
			{RegionId: 2, StartKey: []byte("m"), Files: []*pb.SnapshotFile{{Family: "f", Path: "data/default/t/0000000000000002/f/c"},
				{Family: "f", Path: "data/default/t/0000000000000001/f/b", Half: true, SplitRow: []byte("m"), Top: true}}}}}
	if err := Write(src, man); err != nil {
		t.Fatal(err)
	}
	dst := region.Storage{FS: storage.NewMem()}
	prog, err := Copy(ctx, src, dst, "s", CopyOptions{Parallel: 2})
	if err != nil {
		t.Fatal(err)
	}
	if prog.Files != 3 || prog.Skipped != 0 || prog.FilesTotal != 3 {
		t.Fatalf("first copy: %+v", prog)
	}
	for p, body := range files {
		got, err := dst.ReadObject("archive/" + p)
		if err != nil || !bytes.Equal(got, body) {
			t.Fatalf("%s at the destination: %d bytes, %v", p, len(got), err)
		}
	}
	if got, err := Read(dst, ManifestKey("s")); err != nil || !proto.Equal(got, man) {
		t.Fatalf("manifest at the destination: %v", err)
	}
	prog, err = Copy(ctx, src, dst, "s", CopyOptions{})
	if err != nil || prog.Skipped != 3 {
		t.Fatalf("second copy: %+v %v", prog, err)
	}
	// Another snapshot named s at the destination is refused.
	other := proto.CloneOf(man)
	other.CreatedMs = 99
	b, _ := Encode(other)
	if err := dst.WriteObject(ManifestKey("s"), b, false); err != nil {
		t.Fatal(err)
	}
	if _, err := Copy(ctx, src, dst, "s", CopyOptions{}); err == nil || !strings.Contains(err.Error(), "another snapshot") {
		t.Fatalf("copy over another snapshot of the same name: %v", err)
	}
	// A destination that changes bytes: the copy fails, no manifest appears, nothing damaged stays.
	bad := region.Storage{Bucket: corruptingBucket{dirBucket(t)}}
	if _, err := Copy(ctx, src, bad, "s", CopyOptions{}); !errors.Is(err, ErrVerify) {
		t.Fatalf("copy to a corrupting destination: %v", err)
	}
	if _, err := bad.ReadObject(ManifestKey("s")); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("a failed copy left a manifest: %v", err)
	}
	if _, err := Copy(ctx, src, dst, "missing", CopyOptions{}); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("copy of a missing snapshot: %v", err)
	}
}

// A source file whose size is not the one the snapshot's manifest records (truncated or replaced
// since the snapshot) fails the copy, which writes no manifest: the copy is not a backup that
// only fails when it is restored. Halves of split parents record an estimate, and are not checked.
func TestCopyRefusesASourceFileOfAnotherSize(t *testing.T) {
	ctx := context.Background()
	src := region.Storage{Bucket: dirBucket(t)}
	const a, half = "data/default/t/0000000000000001/f/a", "data/default/t/0000000000000009/f/p"
	for key, n := range map[string]int{a: 1 << 20, half: 1000} {
		if _, err := src.WriteStream(ctx, key, bytes.NewReader(bytes.Repeat([]byte("a"), n))); err != nil {
			t.Fatal(err)
		}
	}
	man := &pb.SnapshotManifest{Name: "s", Table: &pb.TableDescriptor{Name: &pb.TableName{Namespace: "default", Name: "t"}},
		Regions: []*pb.SnapshotRegion{{RegionId: 1, Files: []*pb.SnapshotFile{{Family: "f", Path: a, Size: 1 << 20},
			{Family: "f", Path: half, Size: 500, Half: true, SplitRow: []byte("m")}}}}}
	if err := Write(src, man); err != nil {
		t.Fatal(err)
	}
	if _, err := Copy(ctx, src, region.Storage{FS: storage.NewMem()}, "s", CopyOptions{}); err != nil {
		t.Fatalf("a copy of files of the sizes the manifest records: %v", err)
	}
	if err := src.DeleteObject(a); err != nil {
		t.Fatal(err)
	}
	if _, err := src.WriteStream(ctx, a, bytes.NewReader(bytes.Repeat([]byte("a"), 512<<10))); err != nil {
		t.Fatal(err)
	}
	dst := region.Storage{FS: storage.NewMem()}
	if _, err := Copy(ctx, src, dst, "s", CopyOptions{}); !errors.Is(err, ErrVerify) || !strings.Contains(err.Error(), "manifest says 1048576") {
		t.Fatalf("a copy of a truncated file: %v", err)
	}
	if _, err := dst.ReadObject(ManifestKey("s")); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("a failed copy left a manifest: %v", err)
	}
}

// A file of another size at the destination, at the path a snapshot's file goes to, belongs to
// something else there (files never change): the copy fails naming it, and leaves it as it is.
func TestCopyReplacesNoFileAtTheDestination(t *testing.T) {
	ctx := context.Background()
	src := region.Storage{Bucket: dirBucket(t)}
	const p = "data/default/t/0000000000000001/f/a"
	if _, err := src.WriteStream(ctx, p, strings.NewReader("the snapshot's file")); err != nil {
		t.Fatal(err)
	}
	man := &pb.SnapshotManifest{Name: "s", Table: &pb.TableDescriptor{Name: &pb.TableName{Namespace: "default", Name: "t"}},
		Regions: []*pb.SnapshotRegion{{RegionId: 1, Files: []*pb.SnapshotFile{{Family: "f", Path: p}}}}}
	if err := Write(src, man); err != nil {
		t.Fatal(err)
	}
	dst := region.Storage{Bucket: dirBucket(t)}
	const theirs = "a file another table at the destination reads"
	if _, err := dst.WriteStream(ctx, "archive/"+p, strings.NewReader(theirs)); err != nil {
		t.Fatal(err)
	}
	_, err := Copy(ctx, src, dst, "s", CopyOptions{})
	if !errors.Is(err, ErrDestinationConflict) || !strings.Contains(fmt.Sprint(err), "archive/"+p) {
		t.Fatalf("copy onto another file at its path: %v, want ErrDestinationConflict naming the file", err)
	}
	if got, err := dst.ReadObject("archive/" + p); err != nil || string(got) != theirs {
		t.Fatalf("the destination's file after the refused copy: %q, %v", got, err)
	}
	if _, err := dst.ReadObject(ManifestKey("s")); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("a failed copy left a manifest: %v", err)
	}
}

// A snapshot's files include its table functions' modules, so that copies (exports, backups)
// carry them to where the table may be cloned.
func TestPathsIncludeFunctionModules(t *testing.T) {
	sha := make([]byte, 32)
	sha[0] = 0xab
	m := &pb.SnapshotManifest{Table: &pb.TableDescriptor{Functions: []*pb.TableFunction{{Name: "f", Sha256: sha}}},
		Regions: []*pb.SnapshotRegion{{Files: []*pb.SnapshotFile{{Path: "data/default/t/r/f/file1"}}}}}
	got := Paths(m)
	if len(got) != 2 || got[0] != "data/default/t/r/f/file1" || got[1] != layout.FunctionModuleKey(sha) {
		t.Fatalf("Paths = %q", got)
	}
}

// list reads every snapshot's manifest (Walk).
func list(st region.Storage) (ms []*pb.SnapshotManifest, bad map[string]error, err error) {
	bad, err = Walk(st, func(m *pb.SnapshotManifest) error {
		ms = append(ms, m)
		return nil
	})
	return ms, bad, err
}
