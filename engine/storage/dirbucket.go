package storage

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
)

// dirTempPrefix starts the names a DirBucket keeps for itself (temporary files, its lock): keys
// may not use it.
const dirTempPrefix = ".cs-"

// DirBucket is a Bucket in a directory (a local disk, or a ReadWriteMany volume shared by
// several processes): an object is a file at its key's path.
//
//   - A Put writes a temporary file, syncs it, and then publishes it: IfNoneMatch by link(2),
//     which fails if the name exists (atomic, even across processes); otherwise by rename(2)
//     under an exclusive flock of the bucket, which IfMatch holds while it compares the ETag, so
//     no other writer slips in between. The parent directory is synced: a Put that returned is
//     durable.
//   - An ETag is the file's inode, modification time (ns) and size: every published file is a
//     new inode, so a replaced object never keeps its ETag.
type DirBucket struct {
	root string
	mu   sync.Mutex // with the flock of lock: one mutation of the bucket at a time
	lock *os.File
}

var _ Bucket = (*DirBucket)(nil)

// NewDirBucket opens (creating) the directory as a bucket.
func NewDirBucket(dir string) (*DirBucket, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(abs, 0o755); err != nil {
		return nil, fmt.Errorf("storage: bucket directory %s: %w", abs, err)
	}
	f, err := os.OpenFile(filepath.Join(abs, dirTempPrefix+"lock"), os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, fmt.Errorf("storage: bucket directory %s: %w", abs, err)
	}
	return &DirBucket{root: abs, lock: f}, nil
}

// Close releases the bucket's lock file.
func (b *DirBucket) Close() error { return b.lock.Close() }

// Describe implements Bucket.
func (b *DirBucket) Describe() string { return "dir:" + b.root }

func (b *DirBucket) path(key string) string { return filepath.Join(b.root, filepath.FromSlash(key)) }

func (b *DirBucket) locked(fn func() error) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if err := flockWait(b.lock); err != nil {
		return fmt.Errorf("storage: lock %s: %w", b.Describe(), err)
	}
	defer flockRelease(b.lock)
	return fn()
}

// Put implements Bucket.
func (b *DirBucket) Put(ctx context.Context, key string, body []byte, cond Condition) (string, error) {
	if err := CheckKey(key); err != nil {
		return "", err
	}
	if err := ctx.Err(); err != nil {
		return "", err
	}
	dst := b.path(key)
	dir := filepath.Dir(dst)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("storage: put %s: %w", key, err)
	}
	tmp, etag, err := writeTemp(dir, body)
	if err != nil {
		return "", fmt.Errorf("storage: put %s: %w", key, err)
	}
	defer os.Remove(tmp) // after a link or a failure; gone already after a rename
	switch {
	case cond.IfNoneMatch: // link fails if the name exists: atomic without the bucket's lock
		if err = os.Link(tmp, dst); errors.Is(err, fs.ErrExist) {
			err = fmt.Errorf("%w: put %s: the object exists", ErrPrecondition, key)
		}
	case cond.IfMatch != "":
		err = b.locked(func() error {
			info, err := statObject(dst, key)
			if errors.Is(err, ErrNoObject) {
				return fmt.Errorf("%w: put %s if it has ETag %s: the object does not exist", ErrPrecondition, key, cond.IfMatch)
			}
			if err != nil {
				return err
			}
			if info.ETag != cond.IfMatch {
				return fmt.Errorf("%w: put %s if it has ETag %s: it has %s", ErrPrecondition, key, cond.IfMatch, info.ETag)
			}
			return os.Rename(tmp, dst)
		})
	default:
		err = b.locked(func() error { return os.Rename(tmp, dst) })
	}
	if err != nil {
		if errors.Is(err, ErrPrecondition) {
			// The object already being this body is success (see Bucket.Put).
			if data, info, gerr := b.Get(ctx, key); gerr == nil && bytes.Equal(data, body) {
				return info.ETag, nil
			}
			return "", err
		}
		return "", fmt.Errorf("storage: put %s: %w", key, err)
	}
	if err := syncDirPath(dir); err != nil {
		return "", fmt.Errorf("storage: put %s: sync directory: %w", key, err)
	}
	// The temporary file's ETag: a stat of the key now could see a later writer's object.
	return etag, nil
}

// writeTemp writes body to a new temporary file in dir, syncs it, and returns its name and ETag
// (which the object keeps: link and rename keep the inode, modification time and size).
func writeTemp(dir string, body []byte) (string, string, error) {
	var rnd [8]byte
	_, _ = rand.Read(rnd[:])
	name := filepath.Join(dir, dirTempPrefix+"tmp-"+hex.EncodeToString(rnd[:]))
	f, err := os.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return "", "", err
	}
	_, err = f.Write(body)
	if err == nil {
		err = fdatasync(f)
	}
	var fi os.FileInfo
	if err == nil {
		fi, err = f.Stat()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(name)
		return "", "", err
	}
	return name, etagOf(fi), nil
}

func statObject(p, key string) (ObjectInfo, error) {
	fi, err := os.Stat(p)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ENOTDIR) {
			return ObjectInfo{}, fmt.Errorf("%w: %s", ErrNoObject, key)
		}
		return ObjectInfo{}, fmt.Errorf("storage: stat %s: %w", key, err)
	}
	if fi.IsDir() {
		return ObjectInfo{}, fmt.Errorf("%w: %s", ErrNoObject, key)
	}
	return ObjectInfo{Key: key, Size: fi.Size(), ModTime: fi.ModTime(), ETag: etagOf(fi)}, nil
}

func etagOf(fi os.FileInfo) string {
	var ino uint64
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		ino = st.Ino
	}
	return strconv.FormatUint(ino, 16) + "-" + strconv.FormatInt(fi.ModTime().UnixNano(), 16) + "-" + strconv.FormatInt(fi.Size(), 16)
}

// Get implements Bucket.
func (b *DirBucket) Get(ctx context.Context, key string) ([]byte, ObjectInfo, error) {
	if err := CheckKey(key); err != nil {
		return nil, ObjectInfo{}, err
	}
	f, info, err := b.open(key)
	if err != nil {
		return nil, ObjectInfo{}, err
	}
	defer f.Close()
	data, err := io.ReadAll(f)
	if err != nil {
		return nil, ObjectInfo{}, fmt.Errorf("storage: get %s: %w", key, err)
	}
	info.Size = int64(len(data))
	return data, info, nil
}

// open opens the object and describes the file opened (not a later replacement).
func (b *DirBucket) open(key string) (*os.File, ObjectInfo, error) {
	f, err := os.Open(b.path(key))
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ENOTDIR) {
			return nil, ObjectInfo{}, fmt.Errorf("%w: %s", ErrNoObject, key)
		}
		return nil, ObjectInfo{}, fmt.Errorf("storage: get %s: %w", key, err)
	}
	fi, err := f.Stat()
	if err != nil || fi.IsDir() {
		f.Close()
		if err == nil {
			err = fmt.Errorf("%w: %s", ErrNoObject, key)
		}
		return nil, ObjectInfo{}, err
	}
	return f, ObjectInfo{Key: key, Size: fi.Size(), ModTime: fi.ModTime(), ETag: etagOf(fi)}, nil
}

// GetRange implements Bucket.
func (b *DirBucket) GetRange(ctx context.Context, key string, off, n int64) ([]byte, error) {
	if err := CheckKey(key); err != nil {
		return nil, err
	}
	if off < 0 || n < 0 {
		return nil, fmt.Errorf("storage: get %s: bad range %d+%d", key, off, n)
	}
	f, info, err := b.open(key)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if off >= info.Size {
		return []byte{}, nil
	}
	n = min(n, info.Size-off)
	buf := make([]byte, n)
	if _, err := f.ReadAt(buf, off); err != nil && !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("storage: get %s: %w", key, err)
	}
	return buf, nil
}

// Stat implements Bucket.
func (b *DirBucket) Stat(ctx context.Context, key string) (ObjectInfo, error) {
	if err := CheckKey(key); err != nil {
		return ObjectInfo{}, err
	}
	return statObject(b.path(key), key)
}

// List implements Bucket.
func (b *DirBucket) List(ctx context.Context, prefix, startAfter string, limit int) ([]ObjectInfo, error) {
	// Walk the deepest directory that holds every key with the prefix.
	base := prefix
	if i := strings.LastIndexByte(base, '/'); i >= 0 {
		base = base[:i]
	} else {
		base = ""
	}
	if base != "" {
		if err := CheckKey(base); err != nil {
			return nil, err
		}
	}
	// Keys first (names only), then a stat of each key given: a page of a large listing
	// (storage.Walk asks for 1,000 at a time) stats its page, not every key after startAfter,
	// and skips the directories wholly before startAfter or outside the prefix.
	var keys []string
	walkRoot := b.path(base)
	if base == "" {
		walkRoot = b.root
	}
	err := filepath.WalkDir(walkRoot, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil // removed meanwhile, or no such prefix
			}
			return err
		}
		if strings.HasPrefix(d.Name(), dirTempPrefix) {
			if d.IsDir() {
				return filepath.SkipDir
			}
			return nil
		}
		rel, err := filepath.Rel(b.root, p)
		if err != nil {
			return err
		}
		key := filepath.ToSlash(rel)
		if d.IsDir() {
			if p == walkRoot {
				return nil
			}
			// Every key in it begins dir ("key/").
			dir := key + "/"
			if !strings.HasPrefix(dir, prefix) && !strings.HasPrefix(prefix, dir) {
				return filepath.SkipDir
			}
			if dir < startAfter && !strings.HasPrefix(startAfter, dir) {
				return filepath.SkipDir // every key in it sorts before startAfter
			}
			return nil
		}
		if strings.HasPrefix(key, prefix) && key > startAfter {
			keys = append(keys, key)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("storage: list %s: %w", path.Join(b.Describe(), prefix), err)
	}
	// WalkDir visits in lexical order of names per directory, which is not the byte order of
	// whole keys ("a/b" < "a-b" as names, "a-b" < "a/b" as keys): sort.
	slices.Sort(keys)
	var out []ObjectInfo
	for _, key := range keys {
		if limit > 0 && len(out) == limit {
			break
		}
		o, err := statObject(b.path(key), key)
		if errors.Is(err, ErrNoObject) {
			continue // deleted meanwhile
		}
		if err != nil {
			return nil, fmt.Errorf("storage: list %s: %w", path.Join(b.Describe(), prefix), err)
		}
		out = append(out, o)
	}
	return out, nil
}

// Delete implements Bucket.
func (b *DirBucket) Delete(ctx context.Context, key string) error {
	if err := CheckKey(key); err != nil {
		return err
	}
	p := b.path(key)
	err := b.locked(func() error {
		err := os.Remove(p)
		if errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ENOTDIR) {
			return nil
		}
		return err
	})
	if err != nil {
		return fmt.Errorf("storage: delete %s: %w", key, err)
	}
	if err := syncDirPath(filepath.Dir(p)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("storage: delete %s: sync directory: %w", key, err)
	}
	return nil
}

var _ MultipartBucket = (*DirBucket)(nil)

// StartUpload implements MultipartBucket: the parts go to a temporary file beside the key,
// published by link(2) (create-only) at Complete.
func (b *DirBucket) StartUpload(ctx context.Context, key string) (Upload, error) {
	if err := CheckKey(key); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	dst := b.path(key)
	dir := filepath.Dir(dst)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("storage: upload %s: %w", key, err)
	}
	var rnd [8]byte
	_, _ = rand.Read(rnd[:])
	name := filepath.Join(dir, dirTempPrefix+"upload-"+hex.EncodeToString(rnd[:]))
	f, err := os.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return nil, fmt.Errorf("storage: upload %s: %w", key, err)
	}
	return &dirUpload{key: key, dst: dst, tmp: name, f: f}, nil
}

// dirUpload is an object being written to a temporary file.
type dirUpload struct {
	key, dst, tmp string
	f             *os.File
	parts         int
	done          bool
}

func (u *dirUpload) WritePart(ctx context.Context, part []byte) error {
	if u.done {
		return fmt.Errorf("storage: upload %s: part after Complete or Abort", u.key)
	}
	if u.parts++; u.parts > MaxParts {
		return fmt.Errorf("storage: upload %s: more than %d parts", u.key, MaxParts)
	}
	if _, err := u.f.Write(part); err != nil {
		return fmt.Errorf("storage: upload %s: %w", u.key, err)
	}
	return nil
}

func (u *dirUpload) Complete(ctx context.Context) (string, error) {
	if u.done {
		return "", fmt.Errorf("storage: upload %s: already completed or aborted", u.key)
	}
	u.done = true
	defer os.Remove(u.tmp) // after the link, or on failure
	err := fdatasync(u.f)
	var fi os.FileInfo
	if err == nil {
		fi, err = u.f.Stat()
	}
	if cerr := u.f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		if err = os.Link(u.tmp, u.dst); errors.Is(err, fs.ErrExist) {
			return "", fmt.Errorf("%w: upload %s: the object exists", ErrPrecondition, u.key)
		}
	}
	if err == nil {
		err = syncDirPath(filepath.Dir(u.dst))
	}
	if err != nil {
		return "", fmt.Errorf("storage: upload %s: %w", u.key, err)
	}
	return etagOf(fi), nil
}

func (u *dirUpload) Abort(ctx context.Context) error {
	if u.done {
		return nil
	}
	u.done = true
	u.f.Close()
	if err := os.Remove(u.tmp); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("storage: abort upload %s: %w", u.key, err)
	}
	return nil
}
