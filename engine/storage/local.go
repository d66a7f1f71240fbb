package storage

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"sync"
)

// Local is an FS over a directory of real files.
type Local struct {
	root string // absolute, OS-specific
}

var _ FS = (*Local)(nil)

// NewLocal returns a backend rooted at dir, creating dir if needed.
func NewLocal(dir string) (*Local, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, fmt.Errorf("storage: root %s: %w", dir, err)
	}
	if err := os.MkdirAll(abs, 0o755); err != nil {
		return nil, fmt.Errorf("storage: root %s: %w", dir, err)
	}
	return &Local{root: abs}, nil
}

// Root returns the absolute directory of the backend.
func (l *Local) Root() string { return l.root }

func (l *Local) resolve(op, name string) (string, string, error) {
	c, err := Clean(name)
	if err != nil {
		return "", "", &fs.PathError{Op: op, Path: name, Err: err}
	}
	return c, filepath.Join(l.root, filepath.FromSlash(c)), nil
}

// pathErr rewraps an os error with the operation and the full local path,
// keeping the errno so errors.Is works.
func pathErr(op, p string, err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		err = pe.Err
	}
	var le *os.LinkError
	if errors.As(err, &le) {
		err = le.Err
	}
	noteVolumeError(err)
	return &fs.PathError{Op: op, Path: p, Err: err}
}

func (l *Local) Create(name string) (File, error) {
	c, p, err := l.resolve("create", name)
	if err != nil {
		return nil, err
	}
	f, err := os.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return nil, pathErr("create", p, err)
	}
	return &localFile{f: f, name: c, path: p}, nil
}

func (l *Local) Open(name string) (ReadableFile, error) {
	_, p, err := l.resolve("open", name)
	if err != nil {
		return nil, err
	}
	f, err := os.Open(p)
	if err != nil {
		return nil, pathErr("open", p, err)
	}
	return &localReadFile{f: f, path: p}, nil
}

func (l *Local) List(dir string) ([]string, error) {
	_, p, err := l.resolve("list", dir)
	if err != nil {
		return nil, err
	}
	entries, err := os.ReadDir(p)
	if err != nil {
		return nil, pathErr("list", p, err)
	}
	names := make([]string, len(entries))
	for i, e := range entries {
		names[i] = e.Name()
	}
	return names, nil // os.ReadDir sorts by name
}

func (l *Local) Stat(name string) (FileInfo, error) {
	_, p, err := l.resolve("stat", name)
	if err != nil {
		return FileInfo{}, err
	}
	fi, err := os.Stat(p)
	if err != nil {
		return FileInfo{}, pathErr("stat", p, err)
	}
	return FileInfo{Name: fi.Name(), Size: fi.Size(), IsDir: fi.IsDir(), ModTime: fi.ModTime()}, nil
}

func (l *Local) Rename(oldname, newname string) error {
	_, op, err := l.resolve("rename", oldname)
	if err != nil {
		return err
	}
	_, np, err := l.resolve("rename", newname)
	if err != nil {
		return err
	}
	if fi, err := os.Lstat(np); err == nil && fi.IsDir() {
		// os.Rename would replace an empty directory; the contract is
		// that directories are never replaced (fencing relies on it).
		return &os.LinkError{Op: "rename", Old: op, New: np, Err: fs.ErrExist}
	}
	if err := os.Rename(op, np); err != nil {
		var le *os.LinkError
		if errors.As(err, &le) {
			err = le.Err
		}
		noteVolumeError(err)
		return &os.LinkError{Op: "rename", Old: op, New: np, Err: err}
	}
	return nil
}

func (l *Local) Remove(name string) error {
	c, p, err := l.resolve("remove", name)
	if err != nil {
		return err
	}
	if c == "." {
		return &fs.PathError{Op: "remove", Path: p, Err: fmt.Errorf("%w: refusing to remove the root", ErrInvalidPath)}
	}
	if err := os.Remove(p); err != nil {
		return pathErr("remove", p, err)
	}
	return nil
}

func (l *Local) RemoveAll(name string) error {
	c, p, err := l.resolve("removeall", name)
	if err != nil {
		return err
	}
	if c == "." {
		return &fs.PathError{Op: "removeall", Path: p, Err: fmt.Errorf("%w: refusing to remove the root", ErrInvalidPath)}
	}
	if err := os.RemoveAll(p); err != nil {
		return pathErr("removeall", p, err)
	}
	return nil
}

func (l *Local) MkdirAll(dir string) error {
	c, p, err := l.resolve("mkdir", dir)
	if err != nil {
		return err
	}
	if c == "." {
		return nil
	}
	// Create missing components one by one, syncing each new directory's
	// parent so the new entries are durable.
	cur := ""
	for _, part := range splitPath(c) {
		parent := cur
		cur = path.Join(cur, part)
		full := filepath.Join(l.root, filepath.FromSlash(cur))
		err := os.Mkdir(full, 0o755)
		switch {
		case err == nil:
			if err := syncDirPath(filepath.Join(l.root, filepath.FromSlash(parent))); err != nil {
				return err
			}
		case errors.Is(err, fs.ErrExist):
			if fi, serr := os.Stat(full); serr != nil || !fi.IsDir() {
				return pathErr("mkdir", p, fmt.Errorf("%s exists and is not a directory", full))
			}
		default:
			return pathErr("mkdir", full, err)
		}
	}
	return nil
}

func (l *Local) Truncate(name string, size int64) error {
	_, p, err := l.resolve("truncate", name)
	if err != nil {
		return err
	}
	f, err := os.OpenFile(p, os.O_WRONLY, 0)
	if err != nil {
		return pathErr("truncate", p, err)
	}
	if err := truncateSynced(f, p, size); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return pathErr("close", p, err)
	}
	return nil
}

func (l *Local) SyncDir(dir string) error {
	_, p, err := l.resolve("syncdir", dir)
	if err != nil {
		return err
	}
	return syncDirPath(p)
}

// syncDirPath fsyncs the directory at local path p (its entries' creates, renames and removes).
func syncDirPath(p string) error {
	d, err := os.Open(p)
	if err != nil {
		return pathErr("syncdir", p, err)
	}
	if err := d.Sync(); err != nil {
		d.Close()
		return pathErr("syncdir", p, err)
	}
	if err := d.Close(); err != nil {
		return pathErr("syncdir", p, err)
	}
	return nil
}

func splitPath(c string) []string {
	if c == "." || c == "" {
		return nil
	}
	var parts []string
	for c != "" {
		i := 0
		for i < len(c) && c[i] != '/' {
			i++
		}
		parts = append(parts, c[:i])
		if i == len(c) {
			break
		}
		c = c[i+1:]
	}
	return parts
}

type localFile struct {
	f    *os.File
	name string
	path string

	mu  sync.Mutex // guards err (not held during I/O)
	err error      // sticky error after a failed write or sync
}

func (f *localFile) Name() string { return f.name }

func (f *localFile) stickyErr() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.err
}

func (f *localFile) setErr(err error) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.err == nil {
		f.err = err
	}
	return f.err
}

func (f *localFile) Write(p []byte) (int, error) {
	if err := f.stickyErr(); err != nil {
		return 0, err
	}
	n, err := f.f.Write(p)
	if err != nil {
		// A failed or short write leaves the file in an unknown state:
		// refuse further writes so no record lands after a hole.
		return n, f.setErr(pathErr("write", f.path, err))
	}
	return n, nil
}

func (f *localFile) Sync() error {
	if err := f.stickyErr(); err != nil {
		return err
	}
	if err := fdatasync(f.f); err != nil {
		return f.setErr(pathErr("sync", f.path, err))
	}
	return nil
}

// Preallocate implements Preallocator.
func (f *localFile) Preallocate(size int64) error {
	if err := fallocate(f.f, size); err != nil {
		return pathErr("preallocate", f.path, err)
	}
	return nil
}

// zeros is the source of WriteZeros (read-only; the WAL writes 64 KiB at a time).
var zeros = make([]byte, 64<<10)

// WriteZeros implements Zeroer.
func (f *localFile) WriteZeros(off, n int64) error {
	if err := f.stickyErr(); err != nil {
		return err
	}
	for n > 0 {
		k := min(n, int64(len(zeros)))
		if _, err := f.f.WriteAt(zeros[:k], off); err != nil {
			return pathErr("write zeros", f.path, err)
		}
		off, n = off+k, n-k
	}
	return nil
}

// StartWriteback implements Zeroer.
func (f *localFile) StartWriteback(off, n int64) error {
	if err := startWriteback(f.f, off, n); err != nil {
		return pathErr("start write-back", f.path, err)
	}
	return nil
}

// Trim implements Preallocator.
func (f *localFile) Trim(size int64) error { return truncateSynced(f.f, f.path, size) }

// truncateSynced cuts an open file to size bytes and syncs it (Truncate and
// Trim).
func truncateSynced(f *os.File, path string, size int64) error {
	if err := f.Truncate(size); err != nil {
		return pathErr("truncate", path, err)
	}
	if err := f.Sync(); err != nil {
		return pathErr("sync", path, err)
	}
	return nil
}

func (f *localFile) Close() error {
	if err := f.f.Close(); err != nil {
		return pathErr("close", f.path, err)
	}
	return nil
}

type localReadFile struct {
	f    *os.File
	path string
}

func (r *localReadFile) ReadAt(p []byte, off int64) (int, error) {
	n, err := r.f.ReadAt(p, off)
	if err != nil && !errors.Is(err, io.EOF) {
		return n, pathErr("read", r.path, err)
	}
	return n, err
}

func (r *localReadFile) Size() (int64, error) {
	fi, err := r.f.Stat()
	if err != nil {
		return 0, pathErr("stat", r.path, err)
	}
	return fi.Size(), nil
}

func (r *localReadFile) Close() error {
	if err := r.f.Close(); err != nil {
		return pathErr("close", r.path, err)
	}
	return nil
}
