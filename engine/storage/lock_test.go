package storage

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
)

func TestLockDirIsExclusive(t *testing.T) {
	dir := t.TempDir()
	l, err := LockDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	// flock locks belong to an open file description, so a second LockDir in this process
	// conflicts exactly as a second process would.
	_, err = LockDir(dir)
	if !errors.Is(err, ErrLocked) || !strings.Contains(err.Error(), fmt.Sprintf("pid %d on host", os.Getpid())) {
		t.Fatalf("second lock: want ErrLocked naming this process, got %v", err)
	}
	if err := l.Release(); err != nil {
		t.Fatal(err)
	}
	l2, err := LockDir(dir)
	if err != nil {
		t.Fatalf("lock after release: %v", err)
	}
	l2.Release()
}
