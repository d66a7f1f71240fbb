package region

import (
	"bytes"
	"fmt"
	"path"

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
	mid, err := best.reader.MidKey()
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrCannotSplit, err)
	}
	row := bytes.Clone(mid.Row())
	if bytes.Equal(row, r.info.StartKey) || !r.info.ContainsRow(row) {
		return nil, fmt.Errorf("%w: midpoint %q is the region's first row", ErrCannotSplit, row)
	}
	return row, nil
}

// Split closes the region (flushing it) and creates the two daughter
// regions [start, splitRow) and [splitRow, end), whose stores are
// reference files to the bottom and top halves of the parent's files. Each
// daughter's directory is complete (.regioninfo, references, manifest)
// before Split returns; open them with Open. The parent's files must stay
// until both daughters have compacted their references away (HasReferences
// false); cleaning the parent up is the master's job.
func (r *Region) Split(splitRow []byte, daughterID uint64) (Info, Info, error) {
	if r.replica {
		return Info{}, Info{}, ErrReadOnlyReplica
	}
	if err := r.checkOpen(); err != nil {
		return Info{}, Info{}, err
	}
	if bytes.Equal(splitRow, r.info.StartKey) || !r.info.ContainsRow(splitRow) || len(splitRow) == 0 {
		return Info{}, Info{}, fmt.Errorf("%w: split row %q not inside (%q, %q)", ErrCannotSplit, splitRow, r.info.StartKey, r.info.EndKey)
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
	r.filesMu.Lock()
	man := r.man
	r.filesMu.Unlock()
	lo := Info{Namespace: r.info.Namespace, Table: r.info.Table, StartKey: bytes.Clone(r.info.StartKey), EndKey: bytes.Clone(splitRow), ID: daughterID, Parent: r.name}
	hi := Info{Namespace: r.info.Namespace, Table: r.info.Table, StartKey: bytes.Clone(splitRow), EndKey: bytes.Clone(r.info.EndKey), ID: daughterID, Parent: r.name}
	for _, d := range []struct {
		info Info
		top  bool
	}{{lo, false}, {hi, true}} {
		if err := r.writeDaughter(d.info, man, splitRow, d.top); err != nil {
			return Info{}, Info{}, err
		}
	}
	return lo, hi, nil
}

func (r *Region) writeDaughter(info Info, man *manifest, splitRow []byte, top bool) error {
	if err := Create(r.fs, r.table, info); err != nil {
		return err
	}
	dir := info.Dir()
	dm := &manifest{Version: 1, FlushedSeq: man.FlushedSeq, MaxSeq: man.MaxSeq, Families: map[string][]manifestFile{}}
	for _, f := range r.fams {
		famDir := path.Join(dir, f.Name)
		for _, mf := range man.Families[f.Name] {
			ref := reference{ParentPath: path.Join(r.dir, f.Name, mf.Name), SplitRow: splitRow, Top: top}
			b, err := encodeChecked(ref)
			if err != nil {
				return err
			}
			name := mf.Name + "." + r.name
			if err := storage.WriteFile(r.fs, path.Join(famDir, name), b); err != nil {
				return err
			}
			dm.Families[f.Name] = append(dm.Families[f.Name], manifestFile{Name: name, Reference: true,
				Size: mf.Size / 2, MaxSeq: mf.MaxSeq, Entries: mf.Entries / 2})
		}
	}
	return writeManifest(r.fs, dir, dm)
}
