package region

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"sync/atomic"

	"github.com/cellstore/cellstore/engine/cell"
	"github.com/cellstore/cellstore/engine/sfile"
	"github.com/cellstore/cellstore/engine/storage"
)

// fileIDs gives every opened store file a process-unique block cache id.
var fileIDs atomic.Uint64

// reference says a daughter's store file is the top or bottom half of a
// parent's file (HBase's Reference). It is stored as a small file in the
// daughter's family directory and named in its manifest.
type reference struct {
	// ParentPath is the parent's store file, relative to the FS root.
	ParentPath string `json:"parentPath"`
	// SplitRow divides the halves: bottom holds rows < SplitRow, top rows
	// >= SplitRow.
	SplitRow []byte `json:"splitRow"`
	Top      bool   `json:"top"`
	// Whole: the reference names all of the parent's file (HBase's HFileLink), not a half: a
	// region cloned or restored from a snapshot is made of these until it compacts them away.
	Whole bool `json:"whole,omitempty"`
}

// half reports whether the reference bounds its file to a half (a split daughter's).
func (ref *reference) half() bool { return ref != nil && !ref.Whole }

// storeFile is an open store file of one family (or a reference to half of
// a parent's file). It is reference counted: the region's live file set
// holds one reference and every scanner one more; once a compaction
// replaced it and the last reference is gone, the reader closes and the
// file moves to the archive.
type storeFile struct {
	r      *Region
	name   string // file name in the family directory
	path   string // path of the file (for references: the reference file)
	family int
	reader *sfile.Reader
	meta   sfile.Meta
	ref    *reference
	size   int64 // bytes on storage (for a reference: its half of the parent's size, estimated)

	refs      atomic.Int32
	compacted atomic.Bool // replaced by a compaction (archive on last release)
}

func (f *storeFile) String() string { return f.path }

func (f *storeFile) retain() bool {
	for {
		n := f.refs.Load()
		if n <= 0 {
			return false
		}
		if f.refs.CompareAndSwap(n, n+1) {
			return true
		}
	}
}

func (f *storeFile) release() {
	n := f.refs.Add(-1)
	if n > 0 {
		return
	}
	if n < 0 {
		f.refs.Add(1)
		storeFileOverReleased(f)
		return
	}
	_ = f.reader.Close()
	if f.compacted.Load() && f.r != nil {
		f.r.archiveFile(f)
	}
}

// minTs/maxTs of the cells (for time range and TTL pruning).
func (f *storeFile) maxTs() int64 { return f.meta.MaxTimestamp }

// rowInRange reports whether the file may hold rows in [start, stop).
func (f *storeFile) mayOverlap(start, stop []byte) bool {
	if f.meta.EntryCount == 0 {
		return false
	}
	first, last := f.meta.FirstKey.Row(), f.meta.LastKey.Row()
	if f.ref.half() {
		if f.ref.Top {
			if bytes.Compare(last, f.ref.SplitRow) < 0 {
				return false
			}
		} else if bytes.Compare(first, f.ref.SplitRow) >= 0 {
			return false
		}
	}
	if len(stop) > 0 && bytes.Compare(first, stop) >= 0 {
		return false
	}
	return bytes.Compare(last, start) >= 0
}

func (f *storeFile) mayContainRow(row []byte) bool {
	if f.ref.half() && (f.ref.Top != (bytes.Compare(row, f.ref.SplitRow) >= 0)) {
		return false
	}
	return f.reader.MayContainRow(row)
}

func (f *storeFile) mayContainRowCol(row, fam, q []byte) bool {
	if f.ref.half() && (f.ref.Top != (bytes.Compare(row, f.ref.SplitRow) >= 0)) {
		return false
	}
	return f.reader.MayContainRowCol(row, fam, q)
}

// newScanner returns a scanner over the file (bounded to its half for a
// reference). The caller holds a reference on f while the scanner is open.
// recycle: the caller closes it exactly once and never uses it after (a
// Get's scanner), so it can come from and go back to a pool.
func (f *storeFile) newScanner(cacheBlocks, recycle bool) cell.Scanner {
	s := f.reader.NewScanner(sfile.ScanOptions{CacheBlocks: cacheBlocks, Recycle: recycle})
	if f.ref.half() {
		return newHalfScanner(s, f.ref.SplitRow, f.ref.Top)
	}
	return s
}

// openStoreFile opens a store file or reference named in the manifest; written is the file this
// region has just written it through (a flush's or a compaction's; nil for files it did not).
func (r *Region) openStoreFile(fam int, mf manifestFile, written storage.File) (*storeFile, error) {
	p := r.storeFilePath(fam, mf.Name)
	sf := &storeFile{r: r, name: mf.Name, path: p, family: fam}
	dataPath := p
	if mf.Reference {
		b, err := r.readReplicaAware(p)
		if err != nil {
			return nil, fmt.Errorf("region %s: reading reference %s: %w", r.name, p, err)
		}
		ref := &reference{}
		if err := decodeChecked(b, ref); err != nil {
			return nil, fmt.Errorf("region %s: reference file %s: %w: %w", r.name, p, ErrCorrupt, err)
		}
		sf.ref = ref
		dataPath = ref.ParentPath
	}
	opts := sfile.ReaderOptions{Cache: r.cfg.Cache, FileID: fileIDs.Add(1), InMemory: r.fams[fam].InMemory, EvictOnClose: true}
	var f storage.ReadableFile
	var err error
	switch {
	case written != nil:
		f, err = r.store.openWritten(written, dataPath)
	case !mf.Reference:
		f, err = r.store.openSized(dataPath, mf.Size)
	default:
		f, err = r.store.open(dataPath)
	}
	rd, err := openReader(dataPath, opts, f, err)
	if err != nil && (r.replica || sf.ref != nil) && errors.Is(err, fs.ErrNotExist) {
		// The primary compacted the file away after naming it (a replica), or the file a
		// reference names was compacted away or dropped with its table (a region cloned from a
		// snapshot): it is read from the archive, where it keeps its path (HBase's FileLink).
		rd, err = openFile(r.store, archivePath(dataPath), opts)
	}
	if err != nil {
		return nil, fmt.Errorf("region %s: opening store file %s: %w", r.name, dataPath, err)
	}
	sf.reader = rd
	sf.meta = rd.Meta()
	sf.size = sf.meta.Size
	if sf.ref.half() {
		sf.size /= 2
	}
	sf.refs.Store(1)
	return sf, nil
}

// storeFilePath is the path of a store file of family fam.
func (r *Region) storeFilePath(fam int, name string) string {
	return path.Join(r.dir, r.fams[fam].Name, name)
}

// readReplicaAware reads a small region file; a replica falls back to the
// archive, where the primary may have moved it.
func (r *Region) readReplicaAware(p string) ([]byte, error) {
	b, err := r.store.readFile(p)
	if err != nil && r.replica && errors.Is(err, fs.ErrNotExist) {
		b, err = r.store.readFile(path.Join("archive", p))
	}
	return b, err
}

// halfScanner bounds a scanner to rows < split (bottom) or >= split (top).
type halfScanner struct {
	s     cell.Scanner
	split []byte
	top   bool
	valid bool
	key   []byte
}

func newHalfScanner(s cell.Scanner, split []byte, top bool) *halfScanner {
	return &halfScanner{s: s, split: split, top: top}
}

func (h *halfScanner) inHalf(k cell.Key) bool {
	c := cell.CompareRow(k, h.split)
	if h.top {
		return c >= 0
	}
	return c < 0
}

func (h *halfScanner) check(ok bool) bool {
	h.valid = ok && h.inHalf(h.s.Key())
	return h.valid
}

func (h *halfScanner) Seek(key cell.Key) bool {
	if h.top && cell.CompareRow(key, h.split) < 0 {
		h.key = cell.AppendFirstOnRow(h.key[:0], h.split)
		return h.check(h.s.Seek(h.key))
	}
	return h.check(h.s.Seek(key))
}

func (h *halfScanner) Next() bool {
	if !h.valid {
		return false
	}
	return h.check(h.s.Next())
}

func (h *halfScanner) SeekToPreviousRow(key cell.Key) bool {
	if !h.top && cell.CompareRow(key, h.split) > 0 {
		h.key = cell.AppendFirstOnRow(h.key[:0], h.split)
		return h.check(h.s.SeekToPreviousRow(h.key))
	}
	return h.check(h.s.SeekToPreviousRow(key))
}

func (h *halfScanner) SeekToLastRow() bool {
	if h.top {
		return h.check(h.s.SeekToLastRow())
	}
	h.key = cell.AppendFirstOnRow(h.key[:0], h.split)
	return h.check(h.s.SeekToPreviousRow(h.key))
}

func (h *halfScanner) Key() cell.Key { return h.s.Key() }
func (h *halfScanner) Value() []byte { return h.s.Value() }
func (h *halfScanner) Tags() []byte  { return h.s.Tags() }
func (h *halfScanner) Seq() uint64   { return h.s.Seq() }
func (h *halfScanner) Err() error    { return h.s.Err() }
func (h *halfScanner) Close() error  { return h.s.Close() }

// Park implements cell.Parker.
func (h *halfScanner) Park() {
	if p, ok := h.s.(cell.Parker); ok {
		p.Park()
	}
}

// manifest is the durable list of a region's store files, one JSON file
// ("MANIFEST", with a checksum line) replaced atomically by
// storage.WriteFile. A store file is part of the region exactly when the
// manifest names it: flushes and compactions write their new files first,
// then commit by writing a new manifest; files in the family directories
// that the manifest does not name are leftovers of an interrupted flush or
// compaction and are archived when the region opens.
type manifest struct {
	Version int `json:"version"`
	// FlushedSeq: every edit of the region with a sequence id <= it is in
	// the store files; replay starts after it.
	FlushedSeq uint64 `json:"flushedSeq"`
	// MaxSeq is the highest sequence id in the store files.
	MaxSeq   uint64                    `json:"maxSeq"`
	Families map[string][]manifestFile `json:"families"`
	// FamilyFlushedSeq: a family that a per-family flush wrote further than FlushedSeq: every
	// cell of it with a sequence id <= its entry is in its files (replay skips them). Families
	// not named are flushed to FlushedSeq.
	FamilyFlushedSeq map[string]uint64 `json:"familyFlushedSeq,omitempty"`
	// Handoff: edits above FlushedSeq that a move's close left here rather than in a store file
	// (handoff.go), in sequence order; the next open replays them, a flush that takes them into
	// store files drops them.
	Handoff []handoffEdit `json:"handoff,omitempty"`
}

// familyFlushed is the sequence id a family's files hold every cell of the family up to.
func (m *manifest) familyFlushed(family string) uint64 {
	return max(m.FlushedSeq, m.FamilyFlushedSeq[family])
}

type manifestFile struct {
	Name      string `json:"name"`
	Reference bool   `json:"reference,omitempty"`
	Size      int64  `json:"size"`
	MaxSeq    uint64 `json:"maxSeq"`
	Entries   int64  `json:"entries"`
}

const manifestName = "MANIFEST"

// readManifest reads a region's manifest and its version (on a bucket, what the next commit must
// replace); a region without one has no store files.
func readManifest(store regionFiles, dir string) (*manifest, string, bool, error) {
	p := path.Join(dir, manifestName)
	b, version, err := store.readManifest(p)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return &manifest{Version: 1, Families: map[string][]manifestFile{}}, "", false, nil
		}
		return nil, "", false, err
	}
	m := &manifest{}
	if err := decodeChecked(b, m); err != nil {
		return nil, "", false, fmt.Errorf("%w: manifest %s: %w", ErrCorrupt, p, err)
	}
	if m.Families == nil {
		m.Families = map[string][]manifestFile{}
	}
	return m, version, true, nil
}
