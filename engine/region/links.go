package region

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path"
	"slices"
	"strings"

	"github.com/cellstore/cellstore/engine/storage"
)

// What a snapshot needs of regions (HBase's snapshot manifests and HFileLinks): the store files a
// region is made of, as paths of data files that never change, and new regions made of links to
// such files. A link is a reference file naming the whole of a data file; reading it falls back
// to archive/<path> once the file was compacted away or dropped with its table, and the region
// rewrites its links into its own files at its first compaction (requested when it opens).

// FileRef is one store file of a region: a data file, or the top or bottom half of one (a split
// daughter's reference).
type FileRef struct {
	Family string `json:"family"`
	// Path is the data file's path as written (data/...): it stays valid after the file is
	// archived, under archive/<Path>.
	Path string `json:"path"`
	// Half: only the rows of Path below SplitRow (bottom) or at and above it (Top).
	Half     bool   `json:"half,omitempty"`
	SplitRow []byte `json:"splitRow,omitempty"`
	Top      bool   `json:"top,omitempty"`
	Size     int64  `json:"size"`
	Entries  int64  `json:"entries"`
	MaxSeq   uint64 `json:"maxSeq"`
}

// RegionFiles reads the files a region is made of from its manifest on storage (the region may be
// open meanwhile: store files are immutable and the manifest is replaced whole) and the sequence
// id its files hold every edit up to. Like the memstore, the edits a move's close handed off in
// the manifest are in no file yet (an open region's flush writes them).
func RegionFiles(st Storage, info Info) (flushedSeq uint64, refs []FileRef, err error) {
	files := st.files()
	dir := info.Dir()
	man, _, _, err := readManifest(files, dir)
	if err != nil {
		return 0, nil, fmt.Errorf("region %s: %w", info.EncodedName(), err)
	}
	fams := make([]string, 0, len(man.Families))
	for f := range man.Families {
		fams = append(fams, f)
	}
	slices.Sort(fams)
	for _, fam := range fams {
		for _, mf := range man.Families[fam] {
			p := path.Join(dir, fam, mf.Name)
			ref := FileRef{Family: fam, Path: p, Size: mf.Size, Entries: mf.Entries, MaxSeq: mf.MaxSeq}
			if mf.Reference {
				b, err := files.readFile(p)
				if errors.Is(err, fs.ErrNotExist) { // compacted away since the manifest was read
					b, err = files.readFile(path.Join("archive", p))
				}
				if err != nil {
					return 0, nil, fmt.Errorf("region %s: reading reference %s: %w", info.EncodedName(), p, err)
				}
				var r reference
				if err := decodeChecked(b, &r); err != nil {
					return 0, nil, fmt.Errorf("region %s: reference file %s: %w: %w", info.EncodedName(), p, ErrCorrupt, err)
				}
				ref.Path, ref.Half, ref.SplitRow, ref.Top = r.ParentPath, !r.Whole, r.SplitRow, r.Top
				if !ref.Half {
					ref.SplitRow, ref.Top = nil, false
				}
			}
			refs = append(refs, ref)
		}
	}
	return man.FlushedSeq, refs, nil
}

// CreateLinked writes a new region made of links to refs (a region cloned or restored from a
// snapshot): its .regioninfo, a reference file per ref and its manifest, written last (a region
// directory without a manifest holds no files). Running it again rewrites the same files, so an
// interrupted clone is finished by running it again — also after a point-in-time recovery began
// replaying edits into the region, which starts over from the links; the region must not be open
// meanwhile.
func CreateLinked(st Storage, table TableDescriptor, info Info, refs []FileRef) error {
	return createLinked(st.files(), table, info, refs, false)
}

// CheckLinks says whether CreateLinked can make a region of table from refs: the table is valid,
// and each ref names one of its families and the path of a store file, which no other ref of that
// family names. (A clone or restore checks this before it changes its table.)
func CheckLinks(table TableDescriptor, refs []FileRef) error {
	if err := table.Validate(); err != nil {
		return err
	}
	known := map[string]bool{}
	for _, f := range table.Families {
		known[f.Name] = true
	}
	seen := map[string]bool{}
	for _, ref := range refs {
		if !known[ref.Family] {
			return fmt.Errorf("%w: the table has no family %q for %s", ErrInvalid, ref.Family, ref.Path)
		}
		if err := storage.CheckKey(ref.Path); err != nil || !strings.HasPrefix(ref.Path, "data/") {
			return fmt.Errorf("%w: %q is not the path of a store file", ErrInvalid, ref.Path)
		}
		name := linkName(ref)
		if seen[ref.Family+"/"+name] {
			return fmt.Errorf("%w: %s named twice", ErrInvalid, ref.Path)
		}
		seen[ref.Family+"/"+name] = true
	}
	return nil
}

// linkName is the name of a region's reference to a store file: <file>.<region it was written
// by>, as a daughter names its references; unique in the family, since a region's file names are.
func linkName(ref FileRef) string {
	return path.Base(ref.Path) + "." + path.Base(path.Dir(path.Dir(ref.Path)))
}

// createLinked is CreateLinked; once says how a region that has a manifest already is treated:
// rewritten (false), or left alone when it is the same and refused otherwise (createWithManifest:
// a merge's storage step, which must never rewrite a merged region that has lived).
func createLinked(files regionFiles, table TableDescriptor, info Info, refs []FileRef, once bool) error {
	if err := CheckLinks(table, refs); err != nil {
		return fmt.Errorf("region %s: %w", info.EncodedName(), err)
	}
	dir := info.Dir()
	m := &manifest{Version: 1, Families: map[string][]manifestFile{}}
	var small []smallFile
	for _, ref := range refs {
		name := linkName(ref)
		r := reference{ParentPath: ref.Path, Whole: !ref.Half}
		if ref.Half {
			r.SplitRow, r.Top = bytes.Clone(ref.SplitRow), ref.Top
		}
		b, err := encodeChecked(r)
		if err != nil {
			return err
		}
		small = append(small, smallFile{path.Join(dir, ref.Family, name), b})
		m.Families[ref.Family] = append(m.Families[ref.Family], manifestFile{Name: name, Reference: true,
			Size: ref.Size, MaxSeq: ref.MaxSeq, Entries: ref.Entries})
		m.MaxSeq = max(m.MaxSeq, ref.MaxSeq)
	}
	// Every edit of the files is in them: nothing to replay (the region is new, no log names it).
	m.FlushedSeq = m.MaxSeq
	b, err := encodeChecked(m)
	if err != nil {
		return err
	}
	if once {
		return createWithManifest(files, table, info, small, b)
	}
	if err := create(files, table, info); err != nil {
		return err
	}
	for _, f := range append(small, smallFile{path.Join(dir, manifestName), b}) {
		if err := files.writeFile(f.path, f.data); err != nil {
			return err
		}
	}
	return nil
}

// Small objects beside the regions (snapshot manifests) on either kind of storage.

// ReadObject reads a small file or object whole; a missing one matches fs.ErrNotExist.
func (s Storage) ReadObject(p string) ([]byte, error) { return s.files().readFile(p) }

// WriteObject writes a small file or object whole, durably, replacing one that exists; with
// createOnly it fails with an error matching fs.ErrExist when p exists.
func (s Storage) WriteObject(p string, b []byte, createOnly bool) error {
	if s.Bucket != nil {
		_, err := s.Bucket.Put(context.Background(), p, b, storage.Condition{IfNoneMatch: createOnly})
		if errors.Is(err, storage.ErrPrecondition) {
			return fmt.Errorf("%s: %w", p, fs.ErrExist)
		}
		return err
	}
	if createOnly {
		if ok, err := storage.Exists(s.FS, p); err != nil {
			return err
		} else if ok {
			return fmt.Errorf("%s: %w", p, fs.ErrExist)
		}
	}
	if err := s.FS.MkdirAll(path.Dir(p)); err != nil {
		return err
	}
	return storage.WriteFile(s.FS, p, b)
}

// DeleteObject removes a file or object; a missing one is not an error.
func (s Storage) DeleteObject(p string) error {
	if s.Bucket != nil {
		return s.Bucket.Delete(context.Background(), p)
	}
	err := s.FS.Remove(p)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	return err
}

// WalkFiles calls fn with the path of every file (object) under the directory (prefix) dir, in
// path order; fn may delete the file it is given. A missing dir has none.
func (s Storage) WalkFiles(dir string, fn func(p string) error) error {
	if s.Bucket != nil {
		return storage.Walk(context.Background(), s.Bucket, dir+"/", func(o storage.ObjectInfo) error { return fn(o.Key) })
	}
	ok, err := storage.Exists(s.FS, dir)
	if err != nil || !ok {
		return err
	}
	names, err := s.FS.List(dir)
	if err != nil {
		return err
	}
	for _, n := range names {
		p := path.Join(dir, n)
		fi, err := s.FS.Stat(p)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return err
		}
		if fi.IsDir {
			err = s.WalkFiles(p, fn)
		} else {
			err = fn(p)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// OpenObject opens a file or object for random reads; a missing one matches fs.ErrNotExist.
func (s Storage) OpenObject(p string) (storage.ReadableFile, error) { return s.files().open(p) }

// StatObject returns the size of a file or object; a missing one matches fs.ErrNotExist.
func (s Storage) StatObject(p string) (int64, error) {
	if s.Bucket != nil {
		info, err := s.Bucket.Stat(context.Background(), p)
		return info.Size, storage.NotExist(err)
	}
	fi, err := s.FS.Stat(p)
	return fi.Size, err
}

// WriteStream writes a file or object of any size from r, durably and create-only (an error
// matching fs.ErrExist when p exists): nothing is at p unless all of it was written. On a bucket a
// large object goes up in parts (its requests end with ctx); on a directory tree it is written
// under a temporary name and renamed.
func (s Storage) WriteStream(ctx context.Context, p string, r io.Reader) (int64, error) {
	buf := make([]byte, 4<<20)
	if s.Bucket != nil {
		w, err := storage.NewObjectWriterContext(ctx, s.Bucket, p, 0)
		if err != nil {
			return 0, err
		}
		defer w.Close()
		n, err := io.CopyBuffer(w, r, buf)
		if err != nil {
			return n, err
		}
		if err := w.Sync(); err != nil {
			if errors.Is(err, storage.ErrPrecondition) {
				return n, fmt.Errorf("%s: %w", p, fs.ErrExist)
			}
			return n, err
		}
		return n, nil
	}
	if ok, err := storage.Exists(s.FS, p); err != nil {
		return 0, err
	} else if ok {
		return 0, fmt.Errorf("%s: %w", p, fs.ErrExist)
	}
	if err := s.FS.MkdirAll(path.Dir(p)); err != nil {
		return 0, err
	}
	tmp := p + ".partial"
	if err := s.FS.RemoveAll(tmp); err != nil {
		return 0, err
	}
	f, err := s.FS.Create(tmp)
	if err != nil {
		return 0, err
	}
	n, err := io.CopyBuffer(struct{ io.Writer }{f}, r, buf)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = s.FS.Rename(tmp, p)
	}
	if err != nil {
		_ = s.FS.Remove(tmp)
		return n, err
	}
	return n, s.FS.SyncDir(path.Dir(p))
}
