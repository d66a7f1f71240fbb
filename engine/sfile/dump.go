package sfile

import (
	"bufio"
	"fmt"
	"io"
	"sort"
	"time"

	"github.com/cellstore/cellstore/engine/cell"
	"github.com/cellstore/cellstore/engine/storage"
)

// Dump prints a store file for people, like `hbase hfile`: with Meta the
// trailer and file info (-m), with Index every index block (-i), with
// Blocks every data block (-b), with Cells every cell (-p). It reads the
// file without a cache and stops at the first error, which it returns
// (after printing what it could).
func Dump(w io.Writer, fsys storage.FS, path string, opts DumpOptions) error {
	r, err := Open(fsys, path, ReaderOptions{})
	if err != nil {
		return err
	}
	defer r.Close()
	bw := bufio.NewWriter(w)
	defer bw.Flush()
	d := &dumper{w: bw, r: r, maxVal: opts.MaxValueLen}
	if d.maxVal == 0 {
		d.maxVal = 64
	}
	fmt.Fprintf(bw, "store file %s\n", path)
	if opts.Meta {
		d.meta()
	}
	if opts.Index {
		if err := d.index(); err != nil {
			return err
		}
	}
	if opts.Blocks {
		if err := d.blocks(); err != nil {
			return err
		}
	}
	if opts.Cells {
		if err := d.cells(); err != nil {
			return err
		}
	}
	return nil
}

type dumper struct {
	w      *bufio.Writer
	r      *Reader
	maxVal int
}

func (d *dumper) meta() {
	r, m, tr := d.r, d.r.meta, d.r.tr
	fmt.Fprintf(d.w, "trailer:\n  version=%d size=%d data-blocks=%d index-levels=%d\n", FormatVersion, m.Size, m.DataBlocks, m.IndexLevels)
	fmt.Fprintf(d.w, "  root-index=%d/%d file-info=%d/%d bloom-index=%d/%d\n",
		tr.rootIndex.off, tr.rootIndex.size, tr.fileInfo.off, tr.fileInfo.size, tr.bloomIndex.off, tr.bloomIndex.size)
	fmt.Fprintf(d.w, "file info:\n  entries=%d delete-family-markers=%d major-compacted=%v\n",
		m.EntryCount, m.DeleteFamilyCount, m.MajorCompacted)
	fmt.Fprintf(d.w, "  seq=%d..%d timestamps=%d..%d\n", m.MinSeq, m.MaxSeq, m.MinTimestamp, m.MaxTimestamp)
	if m.EntryCount > 0 {
		fmt.Fprintf(d.w, "  first-key=%v\n  last-key=%v\n", m.FirstKey, m.LastKey)
		if mid, err := r.MidKey(); err == nil {
			fmt.Fprintf(d.w, "  mid-key=%v\n", mid)
		} else {
			fmt.Fprintf(d.w, "  mid-key: %v\n", err)
		}
	}
	fmt.Fprintf(d.w, "  encoding=%s compression=%s block-size=%d\n", m.Encoding, m.Compression, m.BlockSize)
	if r.bloom != nil {
		fmt.Fprintf(d.w, "  bloom=%s fp-rate=%g probes=%d keys=%d chunks=%d\n", m.Bloom, m.BloomFPRate, r.bloom.k,
			r.bloom.totalKeys, len(r.bloom.chunks))
	} else {
		fmt.Fprintf(d.w, "  bloom=%s\n", m.Bloom)
	}
	fmt.Fprintf(d.w, "  created=%s\n", m.CreatedAt.Format(time.RFC3339Nano))
	names := make([]string, 0, len(m.Info))
	for n := range m.Info {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		fmt.Fprintf(d.w, "  info %q=%s\n", n, d.value(m.Info[n]))
	}
}

func (d *dumper) value(v []byte) string {
	if d.maxVal >= 0 && len(v) > d.maxVal {
		return fmt.Sprintf("%q...(%d bytes)", v[:d.maxVal], len(v))
	}
	return fmt.Sprintf("%q", v)
}

func (d *dumper) index() error {
	fmt.Fprintf(d.w, "index: %d levels\n", d.r.levels)
	return d.indexBlock(d.r.root, d.r.tr.rootIndex, "  ")
}

func (d *dumper) indexBlock(ib indexBlock, h blockHandle, indent string) error {
	fmt.Fprintf(d.w, "%slevel %d block at %d (%d bytes): %d entries\n", indent, ib.level, h.off, h.size, ib.n)
	for i := 0; i < ib.n; i++ {
		key, ch := ib.entry(i)
		fmt.Fprintf(d.w, "%s  [%d] %v -> %d/%d\n", indent, i, cell.Key(key), ch.off, ch.size)
		if ib.level > 1 {
			var buf []byte
			child, err := d.r.loadIndexBlock(ch, ib.level-1, &buf)
			if err != nil {
				return err
			}
			if err := d.indexBlock(child, ch, indent+"    "); err != nil {
				return err
			}
		}
	}
	return nil
}

// leaves calls fn for every data block handle in order.
func (d *dumper) leaves(ib indexBlock, fn func(i int, first []byte, h blockHandle) error, n *int) error {
	for i := 0; i < ib.n; i++ {
		key, h := ib.entry(i)
		if ib.level == 1 {
			if err := fn(*n, key, h); err != nil {
				return err
			}
			*n++
			continue
		}
		var buf []byte
		child, err := d.r.loadIndexBlock(h, ib.level-1, &buf)
		if err != nil {
			return err
		}
		if err := d.leaves(child, fn, n); err != nil {
			return err
		}
	}
	return nil
}

func (d *dumper) blocks() error {
	fmt.Fprintf(d.w, "data blocks: %d\n", d.r.tr.dataBlocks)
	var raw, buf []byte
	var v validator
	n := 0
	return d.leaves(d.r.root, func(i int, first []byte, h blockHandle) error {
		fr, err := d.r.readFrame(h, kindData, &raw)
		if err != nil {
			return err
		}
		payload, err := d.r.payloadOf(fr, h, &buf)
		if err != nil {
			return err
		}
		if reason := validateDataBlock(payload, &v); reason != "" {
			return corruptf(d.r.path, int64(h.off), "%s", reason)
		}
		var it blockIter
		it.init(payload)
		cells := 0
		for o := 0; o < it.end; o = it.next {
			it.decode(o)
			cells++
		}
		fmt.Fprintf(d.w, "  [%d] at %d: %d bytes on disk, %d uncompressed, %s, %s, %d cells, %d restarts, first %v\n",
			i, h.off, h.size, fr.ulen, fr.codec, Encoding(payload[len(payload)-1]), cells, it.nRestarts, cell.Key(first))
		return nil
	}, &n)
}

func (d *dumper) cells() error {
	s := d.r.NewScanner(ScanOptions{})
	defer s.Close()
	fmt.Fprintf(d.w, "cells:\n")
	for ok := s.Seek(cell.AppendFirstOnRow(nil, nil)); ok; ok = s.Next() {
		tags := ""
		if t := s.Tags(); len(t) > 0 {
			tags = fmt.Sprintf(" T[%d]", len(t))
			if ttl, ok := cell.TTLOf(t); ok {
				tags += fmt.Sprintf(" ttl=%dms", ttl)
			}
		}
		fmt.Fprintf(d.w, "  K: %v/vlen=%d/seqid=%d V: %s%s\n", s.Key(), len(s.Value()), s.Seq(), d.value(s.Value()), tags)
	}
	return s.Err()
}
