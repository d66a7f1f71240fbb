package region

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/cellstore/cellstore/engine/storage"
	"github.com/cellstore/cellstore/engine/storage/filecache"
)

// ErrFenced: the region's manifest was replaced by another writer since this region read it — the
// region was opened elsewhere (on object storage, a conditional write is how two servers holding
// one region are told apart). The region is broken: it must not acknowledge anything more.
var ErrFenced = errors.New("region: fenced: another writer replaced the manifest")

// regionFiles is where a region keeps its durable files — store files, references, the manifest
// and .regioninfo: a directory tree (storage.FS: the shared volume, or the tests' in-memory and
// fault-injecting file systems) or a bucket (storage.Bucket: an object store, or a directory
// through storage.DirBucket). The operations are what both can do: a store file is written once
// and published under its final name; the manifest — the commit point of flushes and compactions
// — is replaced whole, on a bucket by a conditional write against the version this region read.
type regionFiles interface {
	// newStoreFile starts a store file to be published at p: write it, let the store-file writer
	// sync it, then publish; abort drops it (best effort).
	newStoreFile(regionDir, p string) (f storage.File, publish func() error, abort func(), err error)
	// open opens a store file for random reads.
	open(p string) (storage.ReadableFile, error)
	// openSized is open of a store file whose size the caller knows from its records (the
	// manifest; 0 when it does not): on a bucket a small one is read whole by one GET, without a
	// HEAD first.
	openSized(p string, size int64) (storage.ReadableFile, error)
	// openWritten opens the store file f that newStoreFile returned, once written and published:
	// on a bucket with a file cache nothing is read back (the writer kept its bytes).
	openWritten(f storage.File, p string) (storage.ReadableFile, error)
	// readFile reads a small file whole; a missing one matches fs.ErrNotExist.
	readFile(p string) ([]byte, error)
	// writeFile replaces a small file whole (.regioninfo, references), durably.
	writeFile(p string, b []byte) error
	// writeNew writes a small file that should not exist yet, durably; one that does is left as
	// it is (create-only on a bucket; a directory tree, fenced by the catalog lock, replaces it).
	writeNew(p string, b []byte) error
	// readManifest reads the manifest and its version (what commitManifest must replace).
	readManifest(p string) (b []byte, version string, err error)
	// commitManifest replaces the manifest: version "" creates it, otherwise the version read or
	// committed last must still be the current one (ErrFenced when not; a directory tree is
	// fenced by its WAL instead and ignores versions).
	commitManifest(p string, b []byte, version string) (string, error)
	// list returns the names of the files directly in dir (none when it does not exist).
	list(dir string) ([]string, error)
	// archive moves a file to archive/<the same path>.
	archive(p string) error
	// mkdirs creates directories (a bucket has none).
	mkdirs(dirs ...string) error
	// cleanTemp removes what an interrupted writer left in the region's temporary space.
	cleanTemp(regionDir string)
	// fs is the directory tree, nil on a bucket (recovered edits and splits are still on FS only).
	fs() storage.FS
}

// Storage names where regions keep their files, for what is done to them without opening a
// region (the master's splits): a directory tree (FS) or a bucket (Bucket, when set).
type Storage struct {
	FS     storage.FS
	Bucket storage.Bucket
}

func (s Storage) files() regionFiles { return filesOf(s.FS, s.Bucket) }

func filesOf(fsys storage.FS, b storage.Bucket) regionFiles {
	if b != nil {
		return bucketFiles{b: b}
	}
	return fsFiles{fsys}
}

// fsFiles: a directory tree. New store files are written under <region>/.tmp and renamed into
// their family directory; the manifest is replaced by write-and-rename.
type fsFiles struct{ fsys storage.FS }

func (f fsFiles) fs() storage.FS { return f.fsys }

func (f fsFiles) newStoreFile(regionDir, p string) (storage.File, func() error, func(), error) {
	tmpDir := path.Join(regionDir, ".tmp")
	if err := f.fsys.MkdirAll(tmpDir); err != nil {
		return nil, nil, nil, err
	}
	tmp := path.Join(tmpDir, path.Base(p))
	file, err := f.fsys.Create(tmp)
	if err != nil {
		return nil, nil, nil, err
	}
	publish := func() error {
		if err := f.fsys.Rename(tmp, p); err != nil {
			return err
		}
		return f.fsys.SyncDir(path.Dir(p))
	}
	abort := func() { _ = f.fsys.Remove(tmp) }
	return file, publish, abort, nil
}

func (f fsFiles) open(p string) (storage.ReadableFile, error) { return f.fsys.Open(p) }

func (f fsFiles) openSized(p string, _ int64) (storage.ReadableFile, error) { return f.fsys.Open(p) }

func (f fsFiles) openWritten(_ storage.File, p string) (storage.ReadableFile, error) {
	return f.fsys.Open(p)
}
func (f fsFiles) readFile(p string) ([]byte, error)  { return storage.ReadFile(f.fsys, p) }
func (f fsFiles) writeFile(p string, b []byte) error { return storage.WriteFile(f.fsys, p, b) }
func (f fsFiles) writeNew(p string, b []byte) error  { return storage.WriteFile(f.fsys, p, b) }

func (f fsFiles) readManifest(p string) ([]byte, string, error) {
	b, err := storage.ReadFile(f.fsys, p)
	return b, "", err
}

func (f fsFiles) commitManifest(p string, b []byte, _ string) (string, error) {
	return "", storage.WriteFile(f.fsys, p, b)
}

func (f fsFiles) list(dir string) ([]string, error) {
	ok, err := storage.Exists(f.fsys, dir)
	if err != nil || !ok {
		return nil, err
	}
	return f.fsys.List(dir)
}

func (f fsFiles) archive(p string) error {
	dst := archivePath(p)
	if err := f.fsys.MkdirAll(path.Dir(dst)); err != nil {
		return err
	}
	if err := f.fsys.Rename(p, dst); err != nil {
		return err
	}
	_ = f.fsys.SyncDir(path.Dir(dst))
	_ = f.fsys.SyncDir(path.Dir(p))
	return nil
}

func (f fsFiles) mkdirs(dirs ...string) error {
	for _, d := range dirs {
		if err := f.fsys.MkdirAll(d); err != nil {
			return err
		}
	}
	return nil
}

func (f fsFiles) cleanTemp(regionDir string) { _ = f.fsys.RemoveAll(path.Join(regionDir, ".tmp")) }

// bucketFiles: a bucket. A store file is buffered and written once, by a create-only PUT under
// its final key (no temporary name, no rename; a file larger than a part is uploaded in parts as
// it is written, so only one part is in memory); the manifest is replaced by a conditional PUT.
// A crash mid-flush leaves an object no manifest names, archived when the region next opens.
type bucketFiles struct {
	b     storage.Bucket
	cache *filecache.Cache // nil: no local file cache
}

func (f bucketFiles) fs() storage.FS { return nil }

func (f bucketFiles) newStoreFile(_ string, p string) (storage.File, func() error, func(), error) {
	w, err := storage.NewObjectWriter(f.b, p, 0)
	if err != nil {
		return nil, nil, nil, err
	}
	if f.cache != nil {
		// openWritten puts a file the cache would fetch whole into it without a GET.
		w.KeepWritten(int(f.cache.PrefetchBelow()))
	}
	publish := func() error {
		if !w.Written() {
			return fmt.Errorf("region: store file %s was not written", p)
		}
		return nil
	}
	abort := func() {
		if w.Written() {
			_ = f.b.Delete(context.Background(), p)
		}
	}
	return w, publish, abort, nil
}

func (f bucketFiles) open(p string) (storage.ReadableFile, error) {
	return f.link(p)(f.openObject(p))
}

// openObject opens the object at p, without link's move to the archive.
func (f bucketFiles) openObject(p string) (storage.ReadableFile, error) {
	if f.cache != nil {
		return f.cache.OpenObject(context.Background(), f.b, p)
	}
	return storage.OpenObject(context.Background(), f.b, p)
}

func (f bucketFiles) openSized(p string, size int64) (storage.ReadableFile, error) {
	if f.cache != nil {
		return f.link(p)(f.cache.OpenSmall(context.Background(), f.b, p, size))
	}
	return f.open(p)
}

func (f bucketFiles) openWritten(file storage.File, p string) (storage.ReadableFile, error) {
	w, ok := file.(*storage.ObjectWriter)
	if !ok {
		return f.open(p)
	}
	info, data, written := w.WrittenObject()
	switch {
	case !written:
		return nil, fmt.Errorf("region: store file %s was not written", p)
	case f.cache != nil:
		return f.link(p)(f.cache.OpenWritten(context.Background(), f.b, info, data))
	}
	return f.link(p)(storage.OpenWrittenObject(f.b, info), nil)
}

// link returns what makes a store file opened at p (with err) a fileLink: one that reads its
// archived copy once its object is gone. Files already in the archive, and any not under data/,
// are returned as they are.
func (f bucketFiles) link(p string) func(storage.ReadableFile, error) (storage.ReadableFile, error) {
	return func(rf storage.ReadableFile, err error) (storage.ReadableFile, error) {
		if err != nil || !strings.HasPrefix(p, "data/") {
			return rf, err
		}
		size, err := rf.Size()
		if err != nil {
			_ = rf.Close()
			return nil, err
		}
		l := &fileLink{files: f, key: p, size: size, orig: rf}
		l.cur.Store(&linkTarget{f: rf})
		return l, nil
	}
}

// fileLink reads a store file of a bucket at its data/ key and, from the first read that finds that
// object gone, at archive/<key> (HBase's FileLink). The primary moves a file a compaction replaced
// to the archive once it no longer reads it itself; a replica that opened the same object reads it
// until it applies that compaction, and its scanners opened before then read it after; a
// reference's (a daughter's, a clone's) file is archived by the region that owns it. Object stores
// have no rename an open reader survives, so the reader follows the file. A read that finds the
// object costs no more than before (no HEAD first); the move is made once, by the first read that
// misses, and every read after goes to the archive. With a file cache, reads of the data/ key are
// served from its entries under that key until one misses them; the archived copy is then read
// through the cache under its own key.
type fileLink struct {
	files bucketFiles
	key   string // the data/ key
	size  int64
	orig  storage.ReadableFile // what was opened at key

	cur    atomic.Pointer[linkTarget] // orig, then the archived copy
	mu     sync.Mutex                 // moving to the archive; Close
	closed bool                       // under mu
}

type linkTarget struct {
	f        storage.ReadableFile
	archived bool
}

// objectGone reports whether a read failed because the object is not there.
func objectGone(err error) bool {
	return errors.Is(err, storage.ErrNoObject) || errors.Is(err, fs.ErrNotExist)
}

func (l *fileLink) ReadAt(p []byte, off int64) (int, error) {
	t := l.cur.Load()
	n, err := t.f.ReadAt(p, off)
	if err == nil || t.archived || !objectGone(err) {
		return n, err
	}
	a, aerr := l.toArchive(t)
	if aerr != nil {
		return n, fmt.Errorf("%w (nor is it in the archive: %v)", err, aerr)
	}
	return a.f.ReadAt(p, off)
}

// toArchive makes the archived copy what l reads, unless a read did since seen was current.
func (l *fileLink) toArchive(seen *linkTarget) (*linkTarget, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return nil, fs.ErrClosed
	}
	if t := l.cur.Load(); t != seen {
		return t, nil
	}
	f, err := l.files.openObject(archivePath(l.key))
	if err != nil {
		return nil, err
	}
	if size, err := f.Size(); err != nil || size != l.size {
		_ = f.Close()
		if err == nil {
			err = fmt.Errorf("region: %s holds %d bytes, the store file %d", archivePath(l.key), size, l.size)
		}
		return nil, err
	}
	t := &linkTarget{f: f, archived: true}
	l.cur.Store(t)
	return t, nil
}

func (l *fileLink) Size() (int64, error) { return l.size, nil }

func (l *fileLink) Close() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return nil
	}
	l.closed = true // (no read after this opens the archived copy)
	err := l.orig.Close()
	if t := l.cur.Load(); t.archived {
		err = errors.Join(err, t.f.Close())
	}
	return err
}

func (f bucketFiles) readFile(p string) ([]byte, error) {
	b, _, err := storage.ReadObject(context.Background(), f.b, p)
	return b, err
}

func (f bucketFiles) writeFile(p string, b []byte) error {
	_, err := f.b.Put(context.Background(), p, b, storage.Condition{})
	return err
}

func (f bucketFiles) writeNew(p string, b []byte) error {
	_, err := f.b.Put(context.Background(), p, b, storage.Condition{IfNoneMatch: true})
	if errors.Is(err, storage.ErrPrecondition) {
		// There already — or another conditional write of the key was under way (S3's 409), which
		// may still fail: only an object that is there now counts as written.
		if _, serr := f.b.Stat(context.Background(), p); serr != nil {
			return fmt.Errorf("region: %s: a concurrent write of it did not leave it there: %w", p, serr)
		}
		return nil
	}
	return err
}

func (f bucketFiles) readManifest(p string) ([]byte, string, error) {
	b, info, err := storage.ReadObject(context.Background(), f.b, p)
	return b, info.ETag, err
}

func (f bucketFiles) commitManifest(p string, b []byte, version string) (string, error) {
	cond := storage.Condition{IfMatch: version, IfNoneMatch: version == ""}
	etag, err := f.b.Put(context.Background(), p, b, cond)
	switch {
	case errors.Is(err, storage.ErrConflict):
		// Another conditional write of the key under way, perhaps this one's own earlier
		// attempt: an unknown outcome, not a fence; the caller asks again.
		return "", fmt.Errorf("%w: %s in %s: %w", storage.ErrUnavailable, p, f.b.Describe(), err)
	case errors.Is(err, storage.ErrPrecondition):
		return "", fmt.Errorf("%w: %s in %s: %w", ErrFenced, p, f.b.Describe(), err)
	}
	return etag, err
}

func (f bucketFiles) list(dir string) ([]string, error) {
	var names []string
	err := storage.Walk(context.Background(), f.b, dir+"/", func(o storage.ObjectInfo) error {
		if rel := strings.TrimPrefix(o.Key, dir+"/"); !strings.Contains(rel, "/") {
			names = append(names, rel)
		}
		return nil
	})
	return names, err
}

// archive copies the object to archive/<key> (create-only: a retry finds its own copy) and
// deletes it. Object stores have no rename; the copy goes through this process.
func (f bucketFiles) archive(p string) error {
	return storage.MoveObject(context.Background(), f.b, p, archivePath(p))
}

// archivePath is where the file at p goes when it is archived: archive/<p>.
func archivePath(p string) string { return path.Join("archive", p) }

func (f bucketFiles) mkdirs(...string) error { return nil }
func (f bucketFiles) cleanTemp(string)       {}

// smallFile is a small file to write whole: a reference, a manifest.
type smallFile struct {
	path string
	data []byte
}

// createWithManifest writes a new region made of the files given (a split daughter, a merged
// region): its .regioninfo, those files, then its first manifest, create-only on a
// bucket. A region whose manifest is there already is left alone when it holds these same bytes —
// this step ran before (a retry, or a new master resuming it) — and refused otherwise: the region
// has lived since (opened, altered, flushed, compacted), and this step is stale — a deposed
// master's, resumed after its successor finished it — which must not put the region back to its
// first files and descriptor (ErrFenced). A directory tree has no conditional write; its masters
// are fenced by the catalog lock instead.
func createWithManifest(files regionFiles, table TableDescriptor, info Info, small []smallFile, man []byte) error {
	p := path.Join(info.Dir(), manifestName)
	if done, err := sameManifest(files, p, man); err != nil || done {
		return err
	}
	// Create-only below too: a stale run that passed the check just before its successor's run
	// finished must not put back an older .regioninfo (opening the region after an ALTER rewrites
	// it). A reference file it writes again after the region compacted it away is named by no
	// manifest: the region archives it when it opens.
	if err := createDir(files, table, info, files.writeNew); err != nil {
		return err
	}
	for _, f := range small {
		if err := files.writeNew(f.path, f.data); err != nil {
			return err
		}
	}
	_, err := files.commitManifest(p, man, "")
	if errors.Is(err, ErrFenced) { // another run got there between the check and this write
		if done, serr := sameManifest(files, p, man); done || serr != nil {
			return serr
		}
	}
	return err
}

// sameManifest reports whether the manifest at p exists and holds b; ErrFenced when it holds
// anything else.
func sameManifest(files regionFiles, p string, b []byte) (bool, error) {
	have, err := files.readFile(p)
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	if !bytes.Equal(have, b) {
		return false, fmt.Errorf("%w: %s holds another manifest: the region changed since this step first ran", ErrFenced, p)
	}
	return true, nil
}
