package wal

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"

	"github.com/cellstore/cellstore/engine/storage"
)

// A writer is fenced while appending from several goroutines; the split puts every edit it
// acknowledged into its region's recovered edits, in order, whole; edits a region already flushed
// are left out; a second split (after a crash of the first) writes the same objects.
func TestSplitObjectLog(t *testing.T) {
	for _, backend := range []string{"dir", "s3"} {
		t.Run(backend, func(t *testing.T) {
			var b storage.Bucket
			if backend == "dir" {
				b = dirBucket(t)
			} else {
				b, _ = minioBucket(t, "split")
			}
			ctx := context.Background()
			const prefix = "wal/dead_1"
			l := openLog(t, b, prefix, 4)
			var mu sync.Mutex
			acked := map[uint64]Edit{}
			var wg sync.WaitGroup
			fenced := make(chan struct{})
			for g := range 6 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					// Bounded: an unfenced writer on a directory bucket must not fill the disk
					// while a slow round of the fence lists the directory.
					for i := 0; i < 3000; i++ {
						if i == 40 && g == 0 {
							close(fenced) // enough written: the master may fence now
						}
						e := testEdit(fmt.Sprintf("region-%d", g%3), g*10000+i)
						seq, err := l.Append(e)
						if err != nil {
							return // fenced
						}
						mu.Lock()
						acked[seq] = cloneEdit(e)
						mu.Unlock()
					}
				}()
			}
			<-fenced
			if _, err := FenceObjectLog(ctx, b, prefix, "master"); err != nil {
				t.Fatal(err)
			}
			wg.Wait()
			flushed := map[string]uint64{"region-2": 50} // region-2 flushed up to 50
			opts := SplitObjectLogOptions{Bucket: b, Prefix: prefix, MaxObjectBytes: 4 << 10,
				RecoveredEditsDir: func(r string) string { return "data/default/t/" + r + "/recovered.edits" },
				FlushedSeq:        func(r string) uint64 { return flushed[r] }}
			res, err := SplitObjectLog(ctx, opts)
			if err != nil {
				t.Fatal(err)
			}
			got := map[uint64]Edit{}
			for r := range 3 {
				region := fmt.Sprintf("region-%d", r)
				var last uint64
				if _, err := ReadRecoveredEdits(ctx, b, opts.RecoveredEditsDir(region), func(e *Edit) error {
					if string(e.Region) != region || e.Seq <= last || e.Seq <= flushed[region] {
						return fmt.Errorf("recovered edit %d of %s out of place (after %d)", e.Seq, e.Region, last)
					}
					last = e.Seq
					got[e.Seq] = cloneEdit(e)
					return nil
				}); err != nil {
					t.Fatal(err)
				}
			}
			n := 0
			for seq, e := range acked {
				if e.Seq <= flushed[string(e.Region)] {
					continue
				}
				n++
				r, ok := got[seq]
				if !ok || !sameEdit(&r, &e) {
					t.Fatalf("acknowledged edit %d of %s is not in the recovered edits", seq, e.Region)
				}
			}
			if n == 0 || res.Edits < n || len(res.Files) < 3 {
				t.Fatalf("split wrote %d edits in %d objects; %d acknowledged edits to recover", res.Edits, len(res.Files), n)
			}
			again, err := SplitObjectLog(ctx, opts)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(again.Files, res.Files) {
				t.Fatalf("a second split wrote other objects: %v then %v", res.Files, again.Files)
			}
		})
	}
}
