package wal

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/cellstore/cellstore/engine/cell"
	"github.com/cellstore/cellstore/engine/storage"
)

// testEdit builds a deterministic edit: the value encodes the region and i,
// so replay can check contents.
func testEdit(region string, i int) *Edit {
	val := bytes.Repeat([]byte(fmt.Sprintf("%s-%08d|", region, i)), 10)[:100]
	kv := cell.AppendKeyValue(nil, []byte(fmt.Sprintf("row%08d", i)), []byte("f"), []byte("q"), int64(i), cell.Put, val)
	e := &Edit{Region: []byte(region), Cells: []cell.KeyValue{kv}}
	if i%3 == 0 {
		e.HasNonce, e.NonceGroup, e.Nonce = true, 7, uint64(i)
	}
	return e
}

func cloneEdit(e *Edit) Edit {
	c := *e
	c.Region = slices.Clone(e.Region)
	c.Cells = make([]cell.KeyValue, len(e.Cells))
	for i, kv := range e.Cells {
		c.Cells[i] = slices.Clone(kv)
	}
	return c
}

func sameEdit(a, b *Edit) bool {
	if !bytes.Equal(a.Region, b.Region) || a.Seq != b.Seq || a.HasNonce != b.HasNonce ||
		a.NonceGroup != b.NonceGroup || a.Nonce != b.Nonce || len(a.Cells) != len(b.Cells) {
		return false
	}
	for i := range a.Cells {
		if !bytes.Equal(a.Cells[i], b.Cells[i]) {
			return false
		}
	}
	return true
}

// replayAll reads a WAL directory and returns copies of its edits.
func replayAll(t testing.TB, fs storage.FS, dir string, opts ReplayOptions) ([]Edit, *Reader, error) {
	t.Helper()
	r, err := NewReader(fs, dir, opts)
	if err != nil {
		return nil, nil, err
	}
	defer r.Close()
	var out []Edit
	for r.Next() {
		out = append(out, cloneEdit(r.Edit()))
	}
	return out, r, r.Err()
}

func mustReplay(t testing.TB, fs storage.FS, dir string) []Edit {
	t.Helper()
	edits, _, err := replayAll(t, fs, dir, ReplayOptions{})
	if err != nil {
		t.Fatalf("replay: %v", err)
	}
	return edits
}

func mustOpen(t testing.TB, opts Options) *WAL {
	t.Helper()
	w, err := Open(opts)
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	return w
}

// waitFor polls cond until it holds or the deadline passes.
func waitFor(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", timeout, what)
		}
		time.Sleep(time.Millisecond)
	}
}

// putRecordHeader fills the length and checksum of a record whose payload
// follows an 8-byte header placeholder.
func putRecordHeader(rec []byte) {
	binary.LittleEndian.PutUint32(rec[4:], uint32(len(rec)-recordHeaderSize))
	binary.LittleEndian.PutUint32(rec, crc32.Checksum(rec[4:], castagnoli))
}

// commitConfigs are the group-commit configurations the concurrency, crash and failure tests run
// under: who commits, and how many syncs may overlap.
var commitConfigs = []struct {
	name  string
	mode  CommitMode
	slots int
	delay time.Duration
}{
	{"leader-1", LeaderCommit, 1, 0},
	{"leader-1-delay", LeaderCommit, 1, 200 * time.Microsecond},
	{"leader-2", LeaderCommit, 2, 0},
	{"syncer-1", SyncerCommit, 1, 0},
	{"syncer-3", SyncerCommit, 3, 0},
}

// forEachCommitConfig runs fn as a subtest per configuration, with opts set for it.
func forEachCommitConfig(t *testing.T, fn func(t *testing.T, set func(*Options))) {
	for _, c := range commitConfigs {
		t.Run(c.name, func(t *testing.T) {
			fn(t, func(o *Options) { o.GroupCommit, o.SyncSlots, o.CommitDelay = c.mode, c.slots, c.delay })
		})
	}
}

// appendFrom runs writers goroutines that each append each edits of a region of their own through
// add, one after the other, and waits for them all.
func appendFrom(t *testing.T, writers, each int, add func(*Edit) error) {
	t.Helper()
	var wg sync.WaitGroup
	for g := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range each {
				if err := add(testEdit(fmt.Sprintf("region-%d", g), g*each+i)); err != nil {
					t.Errorf("append: %v", err)
					return
				}
			}
		}()
	}
	wg.Wait()
}
