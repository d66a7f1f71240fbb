package wal

import (
	"fmt"
	"path"
	"slices"

	"github.com/cellstore/cellstore/engine/storage"
)

// SplitOptions configures Split.
type SplitOptions struct {
	// FS is the storage backend. Required.
	FS storage.FS
	// Dir is the dead server's WAL directory, already fenced (renamed to
	// "wal/<server>-splitting"). Required.
	Dir string
	// RecoveredEditsDir returns the directory that receives the recovered
	// edits of a region, e.g. "data/<ns>/<table>/<region>/recovered.edits".
	// Required.
	RecoveredEditsDir func(region string) string
	// FlushedSeq, if set, returns the highest sequence id a region has
	// already flushed; older edits are not written.
	FlushedSeq func(region string) uint64
	// BufferSize is the per-region write buffer. Default 1 MiB.
	BufferSize int
}

// SplitResult is the outcome of Split.
type SplitResult struct {
	// MaxSeq is the highest sequence id written per region.
	MaxSeq map[string]uint64
	// Files lists the recovered-edits files written.
	Files []string
	// Edits is the number of edits written.
	Edits int
	// TornTails: the last segment (of each group of a MultiWAL) ended in a torn tail (ignored).
	TornTails []TornTail
}

// Split reads every segment of a dead server's WAL directory and writes
// each region's edits, in order and in the WAL record format, to a
// recovered-edits file in the region's directory. Each file is written
// under a temporary name, synced, renamed to "<max seq>.edits" (20 digits)
// and its directory synced, so a file either exists whole or not at all,
// and running Split again after a crash rewrites the same files. The WAL
// directory is not modified: the caller archives it once Split succeeds.
// Corruption (other than a torn tail of the last segment) fails Split and
// no recovered-edits file is committed.
func Split(opts SplitOptions) (*SplitResult, error) {
	if opts.FS == nil || opts.RecoveredEditsDir == nil {
		return nil, fmt.Errorf("wal: split: FS and RecoveredEditsDir are required")
	}
	if opts.BufferSize <= 0 {
		opts.BufferSize = 1 << 20
	}
	r, err := NewReader(opts.FS, opts.Dir, ReplayOptions{})
	if err != nil {
		return nil, err
	}
	defer r.Close()

	type out struct {
		dir, tmp string
		f        storage.File
		buf      []byte
		maxSeq   uint64
	}
	outs := map[string]*out{}
	var order []string
	cleanup := func() {
		for _, o := range outs {
			if o.f != nil {
				o.f.Close()
				opts.FS.Remove(o.tmp)
			}
		}
	}
	flushOut := func(o *out) error {
		if len(o.buf) == 0 {
			return nil
		}
		if _, err := o.f.Write(o.buf); err != nil {
			return fmt.Errorf("wal: split: write %s: %w", o.tmp, err)
		}
		o.buf = o.buf[:0]
		return nil
	}
	res := &SplitResult{MaxSeq: map[string]uint64{}}
	for r.Next() {
		e := r.Edit()
		o := outs[string(e.Region)]
		if o == nil {
			region := string(e.Region)
			if opts.FlushedSeq != nil && e.Seq <= opts.FlushedSeq(region) {
				continue
			}
			dir, err := storage.Clean(opts.RecoveredEditsDir(region))
			if err != nil {
				cleanup()
				return nil, fmt.Errorf("wal: split: region %q: %w", region, err)
			}
			o = &out{dir: dir, tmp: path.Join(dir, fmt.Sprintf("%0*d%s%s", segmentNameDigits, e.Seq, recoveredSuffix, recoveredTmpExt))}
			if err := opts.FS.MkdirAll(dir); err != nil {
				cleanup()
				return nil, fmt.Errorf("wal: split: %w", err)
			}
			if err := opts.FS.RemoveAll(o.tmp); err != nil { // left by an earlier, crashed split
				cleanup()
				return nil, fmt.Errorf("wal: split: %w", err)
			}
			f, err := opts.FS.Create(o.tmp)
			if err != nil {
				cleanup()
				return nil, fmt.Errorf("wal: split: %w", err)
			}
			o.f = f
			o.buf = appendHeader(make([]byte, 0, opts.BufferSize), kindRecovered, 0)
			outs[region] = o
			order = append(order, region)
		} else if opts.FlushedSeq != nil && e.Seq <= opts.FlushedSeq(string(e.Region)) {
			continue
		}
		o.buf = append(o.buf, r.raw...) // the record bytes are the same format
		o.maxSeq = e.Seq
		res.Edits++
		if len(o.buf) >= opts.BufferSize {
			if err := flushOut(o); err != nil {
				cleanup()
				return nil, err
			}
		}
	}
	if err := r.Err(); err != nil {
		cleanup()
		return nil, fmt.Errorf("wal: split %s: %w", opts.Dir, err)
	}
	if t := r.TornTails(); len(t) > 0 {
		res.TornTails = t
	}
	// Commit: sync every file first, then rename them into place.
	for _, region := range order {
		o := outs[region]
		if err := flushOut(o); err != nil {
			cleanup()
			return nil, err
		}
		if err := o.f.Sync(); err != nil {
			cleanup()
			return nil, fmt.Errorf("wal: split: sync %s: %w", o.tmp, err)
		}
	}
	dirs := map[string]bool{}
	for _, region := range order {
		o := outs[region]
		if err := o.f.Close(); err != nil {
			o.f = nil
			cleanup()
			return nil, fmt.Errorf("wal: split: close %s: %w", o.tmp, err)
		}
		o.f = nil
		final := path.Join(o.dir, fmt.Sprintf("%0*d%s", segmentNameDigits, o.maxSeq, recoveredSuffix))
		if err := opts.FS.Rename(o.tmp, final); err != nil {
			cleanup()
			return nil, fmt.Errorf("wal: split: %w", err)
		}
		dirs[o.dir] = true
		res.MaxSeq[region] = o.maxSeq
		res.Files = append(res.Files, final)
	}
	sorted := make([]string, 0, len(dirs))
	for d := range dirs {
		sorted = append(sorted, d)
	}
	slices.Sort(sorted)
	for _, d := range sorted {
		if err := opts.FS.SyncDir(d); err != nil {
			return nil, fmt.Errorf("wal: split: %w", err)
		}
	}
	return res, nil
}
