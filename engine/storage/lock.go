package storage

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// LockFileName is the file in a directory that LockDir locks.
const LockFileName = "LOCK"

// ErrLocked is returned by LockDir when another process holds the directory.
var ErrLocked = errors.New("storage: directory is in use by another process")

// DirLock is an exclusive lock on a directory, held until Release or the process's end (the
// kernel drops it with the last descriptor, so a crashed holder never leaves a stale lock).
type DirLock struct {
	f *os.File
}

// LockDir takes an exclusive advisory lock (flock) on dir/LOCK, creating it, and writes who holds
// it (pid, host, start time) into it. A second process — or a second LockDir in this one — gets
// an error that wraps ErrLocked and names the holder.
func LockDir(dir string) (*DirLock, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("storage: lock %s: %w", dir, err)
	}
	p := filepath.Join(dir, LockFileName)
	f, err := os.OpenFile(p, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, fmt.Errorf("storage: lock %s: %w", dir, err)
	}
	held, err := flockExclusive(f)
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("storage: lock %s: %w", p, err)
	}
	if held {
		holder, _ := os.ReadFile(p)
		f.Close()
		who := strings.TrimSpace(string(holder))
		if who == "" {
			who = "unknown holder"
		}
		return nil, fmt.Errorf("%w: %s is locked by %s; stop that process first or use another directory", ErrLocked, dir, who)
	}
	host, _ := os.Hostname()
	info := fmt.Sprintf("pid %d on host %s since %s\n", os.Getpid(), host, time.Now().UTC().Format(time.RFC3339))
	if err := f.Truncate(0); err == nil {
		_, _ = f.WriteAt([]byte(info), 0)
	}
	return &DirLock{f: f}, nil
}

// Release drops the lock.
func (l *DirLock) Release() error {
	if l == nil || l.f == nil {
		return nil
	}
	err := l.f.Close()
	l.f = nil
	return err
}
