package snapshot

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"strings"
	"testing"
	"time"

	pb "github.com/cellstore/cellstore/engine/api/cellstore/v1"
	"github.com/cellstore/cellstore/engine/region"
	"github.com/cellstore/cellstore/engine/storage"
)

// sharedFilesFixture: a source holding snapshot s of files, and a destination holding the same
// files under archive/ with no manifest naming them (a snapshot that shared them was deleted):
// a prune there deletes them, and a copy of s finds them there and does not copy them again.
func sharedFilesFixture(t *testing.T, files int) (src, dst region.Storage, paths []string) {
	t.Helper()
	src = region.Storage{Bucket: dirBucket(t)}
	dst = region.Storage{Bucket: dirBucket(t)}
	man := &pb.SnapshotManifest{Name: "s", Table: &pb.TableDescriptor{Name: &pb.TableName{Namespace: "default", Name: "t"}},
		Regions: []*pb.SnapshotRegion{{RegionId: 1}}}
	for i := range files {
		p := fmt.Sprintf("data/default/t/0000000000000001/f/%03d", i)
		paths = append(paths, p)
		man.Regions[0].Files = append(man.Regions[0].Files, &pb.SnapshotFile{Family: "f", Path: p})
		body := bytes.Repeat([]byte{byte(i)}, 100+i)
		for _, w := range []struct {
			st  region.Storage
			key string
		}{{src, p}, {dst, "archive/" + p}} {
			if _, err := w.st.WriteStream(context.Background(), w.key, bytes.NewReader(body)); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := Write(src, man); err != nil {
		t.Fatal(err)
	}
	return src, dst, paths
}

func countFiles(t *testing.T, st region.Storage, dir string) int {
	t.Helper()
	n := 0
	if err := st.WalkFiles(dir, func(string) error { n++; return nil }); err != nil {
		t.Fatal(err)
	}
	return n
}

// A prune that finds a copy under way deletes nothing; a copy that finds a prune under way waits
// for it (and gives up with its context, having written nothing); an intent whose owner stopped
// rewriting it counts for nothing once expired.
func TestCopiesAndPrunesExcludeEachOther(t *testing.T) {
	src, dst, paths := sharedFilesFixture(t, 3)

	copying, err := beginIntent(dst, intentCopy, "a copy in another process")
	if err != nil {
		t.Fatal(err)
	}
	n, err := Prune(dst)
	if !errors.Is(err, ErrCopyUnderway) || n != 0 || !strings.Contains(err.Error(), "a copy in another process") {
		t.Fatalf("prune beside a copy: %d deleted, %v", n, err)
	}
	if got := countFiles(t, dst, "archive"); got != len(paths) {
		t.Fatalf("a prune beside a copy left %d of %d files", got, len(paths))
	}
	copying.end()
	if n, err := Prune(dst); err != nil || n != len(paths) {
		t.Fatalf("prune after the copy ended: %d deleted, %v", n, err)
	}
	if got := countFiles(t, dst, IntentDir); got != 0 {
		t.Fatalf("%d intents left behind", got)
	}

	pruning, err := beginIntent(dst, intentPrune, "a prune in another process")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	_, err = Copy(ctx, src, dst, "s", CopyOptions{})
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "a prune in another process") {
		t.Fatalf("copy beside a prune: %v", err)
	}
	if got := countFiles(t, dst, "archive"); got != 0 {
		t.Fatalf("a copy waiting for a prune wrote %d files", got)
	}
	done := make(chan error, 1)
	go func() {
		_, err := Copy(context.Background(), src, dst, "s", CopyOptions{})
		done <- err
	}()
	pruning.end()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("copy after the prune ended: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the copy did not go on after the prune ended")
	}
	if got := countFiles(t, dst, "archive"); got != len(paths) {
		t.Fatalf("the copy wrote %d of %d files", got, len(paths))
	}

	// A copy whose intent a reader removed (it looked expired: the copy stalled) writes no manifest.
	if err := Delete(dst, "s"); err != nil {
		t.Fatal(err)
	}
	stalled := holdingBucket{Bucket: dst.Bucket, statted: make(chan string, 1), release: make(chan struct{})}
	go func() {
		_, err := Copy(context.Background(), src, region.Storage{Bucket: stalled}, "s", CopyOptions{Parallel: 1})
		done <- err
	}()
	<-stalled.statted
	if err := dst.WalkFiles(IntentDir, dst.DeleteObject); err != nil {
		t.Fatal(err)
	}
	close(stalled.release)
	if err := <-done; err == nil || !strings.Contains(err.Error(), "removed by another process") {
		t.Fatalf("a copy whose intent was removed: %v", err)
	}
	if _, err := dst.ReadObject(ManifestKey("s")); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("a copy whose intent was removed wrote its manifest: %v", err)
	}

	// The intent of a copy that died long ago: the prune goes on and removes it.
	dead := IntentDir + "/copy-00000000deadbeef"
	old := time.Now().Add(-IntentExpiry - time.Minute).UTC().Format(time.RFC3339Nano)
	if err := dst.WriteObject(dead, []byte(old+" copy of snapshot gone\n"), false); err != nil {
		t.Fatal(err)
	}
	if n, err := Prune(dst); err != nil || n != len(paths) {
		t.Fatalf("prune beside an expired intent: %d deleted, %v", n, err)
	}
	if _, err := dst.ReadObject(dead); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("the expired intent is still there: %v", err)
	}
}

// holdingBucket holds a stat of a file under archive/ (a copy asking whether the destination has
// the file already) until release is closed, after reporting it on statted: the moment between a
// copy's finding a file there and its manifest, which no real store holds open on demand.
type holdingBucket struct {
	storage.Bucket
	statted chan string
	release chan struct{}
}

func (h holdingBucket) Stat(ctx context.Context, key string) (storage.ObjectInfo, error) {
	info, err := h.Bucket.Stat(ctx, key)
	if strings.HasPrefix(key, "archive/") {
		select {
		case h.statted <- key:
		default:
		}
		<-h.release
	}
	return info, err
}

// A prune that runs while a copy has found a file at the destination (and so will not copy it
// again) but not yet written its manifest must not delete that file: before copies and prunes
// announced themselves, it did, and the copied snapshot named a file that was gone.
func TestPruneKeepsTheFilesACopyFound(t *testing.T) {
	src, base, paths := sharedFilesFixture(t, 2)
	hold := holdingBucket{Bucket: base.Bucket, statted: make(chan string, 1), release: make(chan struct{})}
	dst := region.Storage{Bucket: hold}
	done := make(chan error, 1)
	go func() {
		_, err := Copy(context.Background(), src, dst, "s", CopyOptions{Parallel: 1})
		done <- err
	}()
	select {
	case <-hold.statted:
	case err := <-done:
		t.Fatalf("the copy ended before it looked for a file at the destination: %v", err)
	case <-time.After(30 * time.Second):
		t.Fatal("the copy did not look for a file at the destination")
	}
	n, err := Prune(base)
	if !errors.Is(err, ErrCopyUnderway) || n != 0 {
		t.Errorf("prune while a copy runs: %d deleted, %v", n, err)
	}
	close(hold.release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	for _, p := range paths {
		if _, err := base.StatObject("archive/" + p); err != nil {
			t.Errorf("the copied snapshot names %s, which is gone from the destination: %v", p, err)
		}
	}
}

// An intent that may have expired for others is lost for good: its owner's refresher does not
// write it again (a reader that removed it may have acted on that), a prune stops deleting, and a
// copy writes no manifest.
func TestALostIntentStaysLost(t *testing.T) {
	defer func(r, e time.Duration) { IntentRefresh, IntentExpiry = r, e }(IntentRefresh, IntentExpiry)
	IntentRefresh = time.Hour // the test calls refresh, as each tick does
	st := region.Storage{Bucket: dirBucket(t)}

	// Removed by another process: the refresher notices and does not put it back.
	in, err := beginIntent(st, intentCopy, "test")
	if err != nil {
		t.Fatal(err)
	}
	if err := st.DeleteObject(in.key); err != nil {
		t.Fatal(err)
	}
	in.refresh()
	if err := in.held(); err == nil || !strings.Contains(err.Error(), "removed by another process") {
		t.Fatalf("an intent removed by another process: %v", err)
	}
	in.refresh()
	if _, err := st.ReadObject(in.key); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("a lost intent was written again: %v", err)
	}
	in.end()

	// Not rewritten for half the expiry (the process stalled): lost, and not written again.
	in, err = beginIntent(st, intentCopy, "test")
	if err != nil {
		t.Fatal(err)
	}
	in.mu.Lock()
	in.lastOK = time.Now().Add(-IntentExpiry)
	in.mu.Unlock()
	if err := in.held(); err == nil || !strings.Contains(err.Error(), "last rewritten") {
		t.Fatalf("a stalled intent: %v", err)
	}
	if err := st.DeleteObject(in.key); err != nil {
		t.Fatal(err)
	}
	in.refresh()
	if _, err := st.ReadObject(in.key); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("a stalled intent was written again: %v", err)
	}
	in.end()

	// A prune and a copy whose intents cannot be held delete nothing and write no manifest.
	src, dst, paths := sharedFilesFixture(t, 2)
	IntentExpiry = time.Nanosecond
	if n, err := Prune(dst); err == nil || n != 0 {
		t.Fatalf("a prune that could not hold its intent: %d deleted, %v", n, err)
	}
	if got := countFiles(t, dst, "archive"); got != len(paths) {
		t.Fatalf("a prune that could not hold its intent left %d of %d files", got, len(paths))
	}
	if _, err := Copy(context.Background(), src, dst, "s", CopyOptions{}); err == nil {
		t.Fatal("a copy that could not hold its intent succeeded")
	}
	if _, err := dst.ReadObject(ManifestKey("s")); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("a copy that could not hold its intent wrote its manifest: %v", err)
	}
}
