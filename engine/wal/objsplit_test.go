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

// What the regions' buffers hold together is bounded: past it the largest is written, every edit
// still reaches its region in order, and a split run again writes the same objects.
func TestSplitObjectLogBoundsItsBuffers(t *testing.T) {
	ctx := context.Background()
	b := dirBucket(t)
	const prefix = "wal/dead_1"
	l := openLog(t, b, prefix, 4)
	want := map[string][]uint64{}
	for i := range 400 {
		region := fmt.Sprintf("region-%d", (i*7)%8)
		seq, err := l.Append(testEdit(region, i))
		if err != nil {
			t.Fatal(err)
		}
		want[region] = append(want[region], seq)
	}
	if _, err := FenceObjectLog(ctx, b, prefix, "master"); err != nil {
		t.Fatal(err)
	}
	const bound = 2 << 10
	opts := SplitObjectLogOptions{Bucket: b, Prefix: prefix, MaxObjectBytes: 1 << 20, MaxBufferedBytes: bound,
		RecoveredEditsDir: func(r string) string { return "data/default/t/" + r + "/recovered.edits" }}
	res, err := SplitObjectLog(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Files) <= 8 {
		t.Fatalf("%d objects for 8 regions: the bound wrote nothing early", len(res.Files))
	}
	record := len(appendRecord(nil, testEdit("region-0", 0), 1, 1, payloadSize(testEdit("region-0", 0))))
	for _, key := range res.Files {
		info, err := b.Stat(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		if info.Size > int64(headerSize+bound+record) {
			t.Errorf("%s holds %d bytes: more than the bound (%d) and one record", key, info.Size, bound)
		}
	}
	for region, seqs := range want {
		var got []uint64
		if _, err := ReadRecoveredEdits(ctx, b, opts.RecoveredEditsDir(region), func(e *Edit) error {
			got = append(got, e.Seq)
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(got, seqs) {
			t.Fatalf("%s recovered %v, want %v", region, got, seqs)
		}
	}
	again, err := SplitObjectLog(ctx, opts)
	if err != nil || !slices.Equal(again.Files, res.Files) {
		t.Fatalf("a second split wrote %v (%v), want the same objects %v", again.Files, err, res.Files)
	}
}
