package region

import (
	"bytes"
	"errors"
	"fmt"
	"maps"
	"path"

	"github.com/cellstore/cellstore/engine/sfile"
	"github.com/cellstore/cellstore/engine/storage"
)

// SplitPoint returns the row to split at: the middle key of the largest
// store file of the largest family (HBase's default split point). It fails
// with ErrCannotSplit when the region holds references (a daughter that
// has not compacted them away yet) or has no usable midpoint.
func (r *Region) SplitPoint() ([]byte, error) {
	if r.replica {
		return nil, ErrReadOnlyReplica
	}
	if err := r.checkOpen(); err != nil {
		return nil, err
	}
	set := r.files.Load()
	var best *storeFile
	var bestFam int64 = -1
	for _, fs := range set.byFamily {
		var total int64
		var largest *storeFile
		for _, f := range fs {
			if f.ref != nil {
				return nil, fmt.Errorf("%w: region %s still holds reference files", ErrCannotSplit, r.name)
			}
			total += f.size
			if largest == nil || f.size > largest.size {
				largest = f
			}
		}
		if largest != nil && total > bestFam {
			best, bestFam = largest, total
		}
	}
	if best == nil {
		return nil, fmt.Errorf("%w: region %s has no store files", ErrCannotSplit, r.name)
	}
	// Held while read: a compaction's commit may release the set's reference meanwhile.
	if !best.retain() {
		return nil, fmt.Errorf("%w: region %s's files changed (a compaction): try again", ErrCannotSplit, r.name)
	}
	defer best.release()
	row, err := midRowOf(best.reader)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrCannotSplit, err)
	}
	return checkSplitRow(r.info, row)
}

// CheckSplitRow returns row if a region can split there (inside it, not its start row), or an
// ErrCannotSplit.
func CheckSplitRow(parent Info, row []byte) ([]byte, error) { return checkSplitRow(parent, row) }

func checkSplitRow(parent Info, row []byte) ([]byte, error) {
	if len(row) == 0 || bytes.Equal(row, parent.StartKey) || !parent.ContainsRow(row) {
		return nil, fmt.Errorf("%w: split row %q is not inside region %s (%q, %q)", ErrCannotSplit, row,
			parent.EncodedName(), parent.StartKey, parent.EndKey)
	}
	return row, nil
}

// Split closes the region (flushing it) and creates the two daughter
// regions [start, splitRow) and [splitRow, end), whose stores are
// reference files to the bottom and top halves of the parent's files. Each
// daughter's directory is complete (.regioninfo, references, manifest)
// before Split returns; open them with Open. The parent's files must stay
// until both daughters have compacted their references away (HasReferences
// false); cleaning the parent up is the master's job. Both daughters get
// the id daughterID (their encoded names differ by start key).
func (r *Region) Split(splitRow []byte, daughterID uint64) (Info, Info, error) {
	if r.replica {
		return Info{}, Info{}, ErrReadOnlyReplica
	}
	if err := r.checkOpen(); err != nil {
		return Info{}, Info{}, err
	}
	if _, err := checkSplitRow(r.info, splitRow); err != nil {
		return Info{}, Info{}, err
	}
	if r.HasReferences() {
		return Info{}, Info{}, fmt.Errorf("%w: region %s still holds reference files", ErrCannotSplit, r.name)
	}
	if daughterID <= r.info.ID {
		daughterID = r.info.ID + 1
	}
	if err := r.Close(); err != nil {
		return Info{}, Info{}, fmt.Errorf("region %s: closing for split: %w", r.name, err)
	}
	lo := Info{Namespace: r.info.Namespace, Table: r.info.Table, StartKey: bytes.Clone(r.info.StartKey), EndKey: bytes.Clone(splitRow), ID: daughterID}
	hi := Info{Namespace: r.info.Namespace, Table: r.info.Table, StartKey: bytes.Clone(splitRow), EndKey: bytes.Clone(r.info.EndKey), ID: daughterID}
	if _, err := splitClosed(r.store, r.info, lo, hi, splitRow); err != nil {
		return Info{}, Info{}, err
	}
	lo.Parent, hi.Parent = r.name, r.name
	return lo, hi, nil
}

// SplitClosed writes the daughters lo and hi of a closed region (the
// master's split step; storage is shared, so no region server is needed).
// splitRow nil picks the middle key of the largest store file of the
// largest family. lo and hi must be the parent's range cut at splitRow
// (their StartKey/EndKey are set here); their ids and names are the
// caller's. It is idempotent: a repeated call rewrites the same files. It
// fails with ErrCannotSplit when the parent holds references, has edits
// that were never replayed (recovered.edits, or edits a move's close
// handed off in the manifest: open it first), or has no
// usable split row; nothing is written then. It returns the split row.
func SplitClosed(st Storage, parent Info, lo, hi Info, splitRow []byte) ([]byte, error) {
	return splitClosed(st.files(), parent, lo, hi, splitRow)
}

func splitClosed(files regionFiles, parent Info, lo, hi Info, splitRow []byte) ([]byte, error) {
	src, err := readSplitSource(files, parent)
	if err != nil {
		return nil, err
	}
	if err := src.man.checkNoHandoff(parent.EncodedName(), ErrCannotSplit); err != nil {
		return nil, err
	}
	if err := checkRecoveredReplayed(files, src.dir, src.man, parent.EncodedName(), ErrCannotSplit); err != nil {
		return nil, err
	}
	if splitRow == nil {
		if splitRow, err = src.splitRow(); err != nil {
			return nil, err
		}
	} else if _, err := checkSplitRow(parent, splitRow); err != nil {
		return nil, err
	}
	lo.StartKey, lo.EndKey = bytes.Clone(parent.StartKey), bytes.Clone(splitRow)
	hi.StartKey, hi.EndKey = bytes.Clone(splitRow), bytes.Clone(parent.EndKey)
	lo.Parent, hi.Parent = parent.EncodedName(), parent.EncodedName()
	for _, d := range []struct {
		info Info
		top  bool
	}{{lo, false}, {hi, true}} {
		if err := src.writeDaughter(d.info, splitRow, d.top); err != nil {
			return nil, fmt.Errorf("region %s: writing daughter %s: %w", parent.EncodedName(), d.info.EncodedName(), err)
		}
	}
	return splitRow, nil
}

// SplitRowOf returns the row an open or closed region would split at (the
// middle key of the largest store file of its largest family), reading its
// directory on storage: store files are immutable and the manifest is
// replaced atomically, so the region may be open on a server meanwhile. It
// fails with ErrCannotSplit when the region holds references or has no
// usable midpoint.
func SplitRowOf(st Storage, info Info) ([]byte, error) {
	src, err := readSplitSource(st.files(), info)
	if err != nil {
		return nil, err
	}
	return src.splitRow()
}

// splitSource is a region's directory as a split reads it: its table,
// families and manifest.
type splitSource struct {
	files regionFiles
	info  Info
	dir   string
	table TableDescriptor
	fams  []Family
	man   *manifest
	spans map[string]rowSpan // by parent file path, read once (halfHasRows)
}

// readSplitSource reads a region's .regioninfo and manifest; a region that
// still holds references cannot split (ErrCannotSplit).
func readSplitSource(files regionFiles, info Info) (*splitSource, error) {
	src := &splitSource{files: files, info: info, dir: info.Dir()}
	_, table, err := readRegionInfo(files, src.dir)
	if err != nil {
		return nil, fmt.Errorf("region %s: %w", info.EncodedName(), err)
	}
	if src.man, _, _, err = readManifest(files, src.dir); err != nil {
		return nil, fmt.Errorf("region %s: %w", info.EncodedName(), err)
	}
	if src.man.hasReferences() {
		return nil, fmt.Errorf("%w: region %s still holds reference files", ErrCannotSplit, info.EncodedName())
	}
	src.table, src.fams = table, sortedFamilies(table.Families)
	return src, nil
}

// splitRow is the middle row of the region's largest file (see midRow),
// checked to lie inside the region.
func (src *splitSource) splitRow() ([]byte, error) {
	row, err := midRow(src.files, src.dir, src.fams, src.man)
	if err != nil {
		return nil, fmt.Errorf("%w: region %s: %w", ErrCannotSplit, src.info.EncodedName(), err)
	}
	return checkSplitRow(src.info, row)
}

// midRow is the row of the middle key of the largest file of the family
// with the most bytes.
func midRow(files regionFiles, dir string, fams []Family, man *manifest) ([]byte, error) {
	var best string
	var bestFam int64 = -1
	for _, f := range fams {
		var total, largest int64
		var name string
		for _, mf := range man.Families[f.Name] {
			total += mf.Size
			if name == "" || mf.Size > largest {
				name, largest = path.Join(dir, f.Name, mf.Name), mf.Size
			}
		}
		if name != "" && total > bestFam {
			best, bestFam = name, total
		}
	}
	if best == "" {
		return nil, errors.New("no store files")
	}
	rd, err := openFile(files, best, sfile.ReaderOptions{})
	if err != nil {
		return nil, err
	}
	defer rd.Close()
	return midRowOf(rd)
}

// midRowOf is a file's middle row; a file whose middle row is its first
// one (one big row) has none: neither half would take anything from it.
func midRowOf(rd *sfile.Reader) ([]byte, error) {
	mid, err := rd.MidKey()
	if err != nil {
		return nil, err
	}
	if first := rd.Meta().FirstKey; first != nil && bytes.Equal(first.Row(), mid.Row()) {
		return nil, fmt.Errorf("the middle of %s is its first row %q", rd.Path(), mid.Row())
	}
	return bytes.Clone(mid.Row()), nil
}

// writeDaughter writes a daughter's directory: .regioninfo, a reference
// per parent file with rows in its half, and its manifest (written last:
// a daughter directory without one is not opened). A daughter that has its
// manifest already is left alone (createWithManifest).
func (src *splitSource) writeDaughter(info Info, splitRow []byte, top bool) error {
	files, man := src.files, src.man
	dir := info.Dir()
	parentName := path.Base(src.dir)
	dm := &manifest{Version: 1, FlushedSeq: man.FlushedSeq, MaxSeq: man.MaxSeq, Families: map[string][]manifestFile{},
		FamilyFlushedSeq: maps.Clone(man.FamilyFlushedSeq)}
	var refs []smallFile
	for _, f := range src.fams {
		famDir := path.Join(dir, f.Name)
		for _, mf := range man.Families[f.Name] {
			parentPath := path.Join(src.dir, f.Name, mf.Name)
			if has, err := src.halfHasRows(parentPath, splitRow, top); err != nil {
				return err
			} else if !has {
				continue
			}
			ref := reference{ParentPath: parentPath, SplitRow: splitRow, Top: top}
			b, err := encodeChecked(ref)
			if err != nil {
				return err
			}
			name := mf.Name + "." + parentName
			refs = append(refs, smallFile{path.Join(famDir, name), b})
			dm.Families[f.Name] = append(dm.Families[f.Name], manifestFile{Name: name, Reference: true,
				Size: mf.Size / 2, MaxSeq: mf.MaxSeq, Entries: mf.Entries / 2})
		}
	}
	b, err := encodeChecked(dm)
	if err != nil {
		return err
	}
	return createWithManifest(files, src.table, info, refs, b)
}

// rowSpan is a parent file's first and last rows (first nil: no cells).
type rowSpan struct{ first, last []byte }

// halfHasRows tells whether the file at p has rows in a half: a half
// outside its first and last rows gets no reference. Each file is read
// once for both daughters.
func (src *splitSource) halfHasRows(p string, splitRow []byte, top bool) (bool, error) {
	sp, ok := src.spans[p]
	if !ok {
		rd, err := openFile(src.files, p, sfile.ReaderOptions{})
		if err != nil {
			return false, err
		}
		meta := rd.Meta()
		if meta.EntryCount > 0 && meta.FirstKey != nil && meta.LastKey != nil {
			sp = rowSpan{first: bytes.Clone(meta.FirstKey.Row()), last: bytes.Clone(meta.LastKey.Row())}
		}
		rd.Close()
		if src.spans == nil {
			src.spans = map[string]rowSpan{}
		}
		src.spans[p] = sp
	}
	switch {
	case sp.first == nil:
		return false, nil
	case top:
		return bytes.Compare(sp.last, splitRow) >= 0, nil
	default:
		return bytes.Compare(sp.first, splitRow) < 0, nil
	}
}

// HasReferenceFiles reports whether the region's manifest on storage
// still names reference files (a daughter that has not compacted its
// parent's halves away). A region without a directory has none.
func HasReferenceFiles(st Storage, info Info) (bool, error) {
	man, _, _, err := readManifest(st.files(), info.Dir())
	if err != nil {
		return false, err
	}
	return man.hasReferences(), nil
}

// hasReferences: the manifest names a reference file.
func (m *manifest) hasReferences() bool {
	for _, files := range m.Families {
		for _, mf := range files {
			if mf.Reference {
				return true
			}
		}
	}
	return false
}

// openFile opens a store file for reading.
func openFile(files regionFiles, p string, opts sfile.ReaderOptions) (*sfile.Reader, error) {
	f, err := files.open(p)
	return openReader(p, opts, f, err)
}

// openReader opens the store file at p on f, what one of regionFiles' openers returned for it
// (with err).
func openReader(p string, opts sfile.ReaderOptions, f storage.ReadableFile, err error) (*sfile.Reader, error) {
	if err != nil {
		return nil, fmt.Errorf("sfile: opening %s: %w", p, err)
	}
	return sfile.OpenFile(f, p, opts)
}
