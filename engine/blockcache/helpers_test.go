package blockcache

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"log/slog"
	"testing"

	"github.com/cellstore/cellstore/engine/offheap"
)

func quietLogger() *slog.Logger { return slog.New(slog.NewTextHandler(new(bytes.Buffer), nil)) }

// newCache makes a small cache on base pages with its own budget.
func newCache(t *testing.T, capacity, bucket int64, classes []int) (*BucketCache, *offheap.Budget) {
	t.Helper()
	budget, _ := offheap.NewBudget("blockcache", capacity, nil)
	c, err := NewBucketCache(BucketCacheOptions{Capacity: capacity, BucketSize: bucket, SizeClasses: classes,
		Hugepages: offheap.HugepagesOff, Budget: budget, Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c, budget
}

// block returns n bytes whose content is determined by the key, so readers
// can tell their block from any other.
func block(k Key, n int) []byte {
	b := make([]byte, n)
	fillBlock(k, b)
	return b
}

func fillBlock(k Key, b []byte) {
	seed := k.hash()
	for i := range b {
		b[i] = byte(seed>>(8*(i%8)) ^ uint64(i/8))
	}
	if len(b) >= 16 {
		binary.LittleEndian.PutUint64(b, k.File)
		binary.LittleEndian.PutUint64(b[8:], uint64(k.Offset))
	}
}

func checkBlock(k Key, b []byte, n int) error {
	if len(b) != n {
		return fmt.Errorf("block %v: length %d, want %d", k, len(b), n)
	}
	want := block(k, n)
	if !bytes.Equal(b, want) {
		for i := range b {
			if b[i] != want[i] {
				return fmt.Errorf("block %v: byte %d is %#x, want %#x (overwritten)", k, i, b[i], want[i])
			}
		}
	}
	return nil
}

func mustPut(t *testing.T, c *BucketCache, k Key, n int, prio Priority) {
	t.Helper()
	if err := c.Put(k, block(k, n), prio); err != nil {
		t.Fatalf("Put(%v, %d): %v", k, n, err)
	}
}
