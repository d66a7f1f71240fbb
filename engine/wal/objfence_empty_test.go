package wal

import (
	"context"
	"errors"
	"testing"
)

// A log whose every object was flushed and deleted (an idle writer) is fenced all the same: the
// writer's next object, numbered past every marker a fence of an empty listing would place, must
// not be acknowledged.
func TestObjectLogFencedAfterEverythingDropped(t *testing.T) {
	b := dirBucket(t)
	l := openLog(t, b, "wal/empty_1", 1)
	var last uint64
	for i := range 200 {
		seq, err := l.Append(testEdit("a", i))
		if err != nil {
			t.Fatal(err)
		}
		last = seq
	}
	if err := l.MarkFlushed("a", last); err != nil {
		t.Fatal(err)
	}
	if err := l.DropFlushed(); err != nil {
		t.Fatal(err)
	}
	if _, err := FenceObjectLog(context.Background(), b, "wal/empty_1", "master"); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Append(testEdit("a", 1000)); !errors.Is(err, ErrFenced) {
		t.Fatalf("an append after the fence of a log whose objects were all dropped: %v, want ErrFenced", err)
	}
}
