package storage

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path"
	"strings"
	"syscall"
	"time"
)

// FS is a storage backend. Implementations are safe for concurrent use.
type FS interface {
	// Create creates a new file for writing. It fails with an error
	// wrapping fs.ErrExist if the name exists, and with fs.ErrNotExist if
	// the parent directory does not exist.
	Create(name string) (File, error)
	// Open opens an existing file for random reads.
	Open(name string) (ReadableFile, error)
	// List returns the names (not paths) of the entries of a directory,
	// sorted.
	List(dir string) ([]string, error)
	// Stat describes a file or directory.
	Stat(name string) (FileInfo, error)
	// Rename renames a file or directory atomically. An existing file at
	// newname is replaced; an existing directory is not.
	Rename(oldname, newname string) error
	// Remove removes a file or an empty directory.
	Remove(name string) error
	// RemoveAll removes a file or a directory tree. A missing name is not
	// an error. It refuses to remove the root.
	RemoveAll(name string) error
	// MkdirAll creates a directory and any missing parents, durably.
	MkdirAll(dir string) error
	// Truncate shrinks (or extends with zeros) a file to size bytes and
	// syncs it.
	Truncate(name string, size int64) error
	// SyncDir makes the creates, renames and removes of entries in dir
	// durable.
	SyncDir(dir string) error
}

// Preallocator is implemented by files whose space can be reserved ahead
// of the writes (local files on Linux). Preallocate sets the file's size to
// size bytes, reading as zeros, without moving the write position: later
// writes overwrite the zeros. Syncs of overwritten, allocated space are
// cheaper than syncs of appends, which also journal the new size and
// blocks. The writer must Trim the file to what it wrote before anyone may
// read it as complete. Trim works on the open file, so it also reaches a
// file whose directory was renamed meanwhile (a fenced WAL).
type Preallocator interface {
	Preallocate(size int64) error
	// Trim cuts the file to size bytes and syncs that.
	Trim(size int64) error
}

// Zeroer is implemented by preallocated files (Preallocator) whose reserved space can be written
// with zeros ahead of the writer (local files). On ext4 and XFS preallocated space is "unwritten":
// the first write into each block converts it, a change to the file's extents that the next
// sync must journal, so a log appending small records into preallocated space pays a journal
// commit every few syncs. Blocks written with zeros beforehand are overwritten in place, and the
// writer's syncs flush data alone.
//
// WriteZeros writes zeros over [off, off+n) without moving the write position and without
// syncing; the caller must make sure no data it wrote (or will write before the call returns)
// lies in that range. A failed WriteZeros does not fail the file's other writes. StartWriteback
// starts writing [off, off+n) to the disk and returns at once (so that the zeros do not ride on
// the writer's next sync); the zeros' write-back errors reach the file's next Sync (or Trim).
type Zeroer interface {
	WriteZeros(off, n int64) error
	StartWriteback(off, n int64) error
}

// File is a file open for writing. Writes append.
type File interface {
	io.Writer
	// Sync makes every byte written so far durable.
	Sync() error
	// Close closes the file. It does not sync.
	Close() error
	// Name returns the name the file was created with.
	Name() string
}

// ReadableFile is a file open for random reads.
type ReadableFile interface {
	io.ReaderAt
	// Size returns the current size of the file.
	Size() (int64, error)
	Close() error
}

// FileInfo describes a file or directory.
type FileInfo struct {
	Name    string // base name
	Size    int64
	IsDir   bool
	ModTime time.Time
}

// ErrInvalidPath is wrapped by errors for names that are not valid relative
// paths.
var ErrInvalidPath = errors.New("storage: invalid path")

// Clean returns the canonical form of a name: slash-separated, relative to
// the root, without a leading slash, "." for the root. Names that escape the
// root, contain NUL or backslashes are rejected.
func Clean(name string) (string, error) {
	if strings.ContainsAny(name, "\x00\\") {
		return "", fmt.Errorf("%w: %q", ErrInvalidPath, name)
	}
	c := path.Clean("/" + name) // rooted: ".." cannot climb above "/"
	// path.Clean("/../x") is "/x": detect escapes on the unrooted form.
	if u := path.Clean(name); u == ".." || strings.HasPrefix(u, "../") {
		return "", fmt.Errorf("%w: %q escapes the root", ErrInvalidPath, name)
	}
	if c == "/" {
		return ".", nil
	}
	return c[1:], nil
}

// Exists reports whether name exists.
func Exists(f FS, name string) (bool, error) {
	_, err := f.Stat(name)
	if err == nil {
		return true, nil
	}
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	return false, err
}

// IsNoSpace reports whether err says the device is full (ENOSPC) or over
// quota (EDQUOT).
func IsNoSpace(err error) bool {
	return errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EDQUOT)
}

// ReadFile reads a whole file.
func ReadFile(f FS, name string) ([]byte, error) {
	r, err := f.Open(name)
	if err != nil {
		return nil, err
	}
	defer r.Close()
	size, err := r.Size()
	if err != nil {
		return nil, err
	}
	buf := make([]byte, size)
	n, err := r.ReadAt(buf, 0)
	if err == io.EOF && int64(n) == size {
		err = nil
	}
	if err != nil {
		return nil, err
	}
	return buf[:n], nil
}

// WriteFile atomically and durably creates name with data: it writes a
// temporary file next to it, syncs it, renames it into place and syncs the
// directory. An existing file is replaced.
func WriteFile(f FS, name string, data []byte) error {
	name, err := Clean(name)
	if err != nil {
		return err
	}
	tmp := name + ".tmp"
	if err := f.RemoveAll(tmp); err != nil {
		return err
	}
	w, err := f.Create(tmp)
	if err != nil {
		return err
	}
	if _, err := w.Write(data); err != nil {
		w.Close()
		return err
	}
	if err := w.Sync(); err != nil {
		w.Close()
		return err
	}
	if err := w.Close(); err != nil {
		return err
	}
	if err := f.Rename(tmp, name); err != nil {
		return err
	}
	return f.SyncDir(path.Dir(name))
}
