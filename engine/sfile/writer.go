package sfile

import (
	"bytes"
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"
	"time"

	"github.com/cellstore/cellstore/engine/blockcache"
	"github.com/cellstore/cellstore/engine/cell"
	"github.com/cellstore/cellstore/engine/storage"
)

// Writer writes one store file. Cells are appended in store order; Finish
// writes the index, bloom filter, file info and trailer, syncs and closes
// the file. A Writer is used by one goroutine.
type Writer struct {
	f      storage.File
	opts   WriterOptions
	off    uint64
	err    error // sticky write error
	done   bool
	tagged []byte // scratch for the tagged value of a cell with tags

	block      blockBuilder
	blockFirst []byte
	comp       compressor
	out        []byte

	leaf        indexBuilder
	leafBlocks  int  // data blocks in the current leaf
	leafFlushed bool // a leaf index block was written inline
	level1      []childEntry
	dataBlocks  int

	bloomBPK    float64
	bloomK      int
	chunkKeys   int
	hashes      []uint64
	chunkFirst  []byte
	bloomChunks []bloomChunkRef
	bloomKeys   uint64

	hasLast bool
	lastKey []byte
	lastSeq uint64
	fi      fileInfo
	info    map[string][]byte

	cow  bool // cache on write
	prio blockcache.Priority
	now  func() time.Time
}

// childEntry is an entry of an index level above the leaves, kept in
// memory until Finish.
type childEntry struct {
	key        []byte
	h          blockHandle
	dataBlocks int
}

// NewWriter starts a store file on f, which must be empty (just created).
func NewWriter(f storage.File, opts WriterOptions) (*Writer, error) {
	if opts.BlockSize < 0 || opts.IndexBlockSize < 0 || opts.BloomBlockSize < 0 || opts.RestartInterval < 0 ||
		opts.ExpectedEntries < 0 {
		return nil, fmt.Errorf("sfile: negative size in writer options %+v", opts)
	}
	if opts.BlockSize == 0 {
		opts.BlockSize = DefaultBlockSize
	}
	if opts.IndexBlockSize == 0 {
		opts.IndexBlockSize = DefaultIndexBlockSize
	}
	if opts.BloomBlockSize == 0 {
		opts.BloomBlockSize = DefaultBloomBlockSize
	}
	if opts.RestartInterval == 0 {
		opts.RestartInterval = DefaultRestartInterval
	}
	if opts.BloomFPRate == 0 {
		opts.BloomFPRate = DefaultBloomFPRate
	}
	if opts.Encoding >= numEncodings {
		return nil, fmt.Errorf("sfile: unknown encoding %d", opts.Encoding)
	}
	if opts.Compression >= numCompressions {
		return nil, fmt.Errorf("sfile: unknown compression %d", opts.Compression)
	}
	if opts.Bloom >= numBloomTypes {
		return nil, fmt.Errorf("sfile: unknown bloom type %d", opts.Bloom)
	}
	if !(opts.BloomFPRate > 0 && opts.BloomFPRate < 1) {
		return nil, fmt.Errorf("sfile: bloom false-positive rate %v outside (0, 1)", opts.BloomFPRate)
	}
	w := &Writer{
		f:     f,
		opts:  opts,
		block: blockBuilder{enc: opts.Encoding, interval: opts.RestartInterval},
		comp:  compressor{codec: opts.Compression},
		info:  map[string][]byte{},
		now:   time.Now,
		prio:  blockcache.PrioritySingle,
	}
	if opts.InMemory {
		w.prio = blockcache.PriorityMemory
	}
	w.cow = opts.Cache != nil && opts.Cache.CacheOnWrite()
	w.fi.minTs, w.fi.maxTs = math.MaxInt64, math.MinInt64
	w.fi.earliestPutTs, w.fi.hasEarliestPut = math.MaxInt64, true
	w.fi.minSeq = math.MaxUint64
	if opts.Bloom != BloomNone {
		w.bloomBPK, w.bloomK = bloomParams(opts.BloomFPRate)
		w.chunkKeys = max(1, int(float64(opts.BloomBlockSize*8)/w.bloomBPK))
		w.hashes = make([]uint64, 0, min(w.chunkKeys, max(opts.ExpectedEntries, 1024)))
	}
	return w, nil
}

// Append adds a cell. Cells must come in store order (cell.CompareWithSeq:
// key order, and for equal keys the higher sequence id first); a cell out
// of order fails with ErrOutOfOrder and leaves the writer usable. A write
// error is sticky: later calls return it, and the caller should Abort.
func (w *Writer) Append(key cell.Key, value []byte, seq uint64) error {
	return w.AppendTagged(key, value, nil, seq)
}

// AppendTagged is Append for a cell with tags (none when tags is empty).
func (w *Writer) AppendTagged(key cell.Key, value, tags []byte, seq uint64) error {
	if w.done {
		return ErrFinished
	}
	if w.err != nil {
		return w.err
	}
	k, err := cell.ParseKey(key)
	if err != nil {
		return fmt.Errorf("%w: %v", ErrInvalidCell, err)
	}
	if err := cell.Validate(k.Row(), k.Family(), k.Qualifier(), k.Timestamp(), k.Type(), value, cell.MaxKeyValueSize); err != nil {
		return fmt.Errorf("%w: %v", ErrInvalidCell, err)
	}
	if len(tags) > 0 {
		if err := cell.ParseTags(tags); err != nil {
			return fmt.Errorf("%w: %v", ErrInvalidCell, err)
		}
	}
	if w.hasLast && cell.CompareWithSeq(w.lastKey, w.lastSeq, key, seq) > 0 {
		return fmt.Errorf("%w: %v seq %d after %v seq %d", ErrOutOfOrder, k, seq, cell.Key(w.lastKey), w.lastSeq)
	}
	switch w.opts.Bloom {
	case BloomRow:
		if !w.hasLast || !cell.SameRow(w.lastKey, key) {
			w.addBloom(rowBloomHash(k.Row()), key, false)
		}
	case BloomRowCol:
		if !w.hasLast || !cell.SameColumn(w.lastKey, key) {
			w.addBloom(colBloomHash(key), key, true)
		}
	}

	fi := &w.fi
	if !w.hasLast {
		fi.firstKey = append([]byte(nil), key...)
	}
	fi.entryCount++
	fi.minSeq, fi.maxSeq = min(fi.minSeq, seq), max(fi.maxSeq, seq)
	ts := k.Timestamp()
	fi.minTs, fi.maxTs = min(fi.minTs, ts), max(fi.maxTs, ts)
	switch k.Type() {
	case cell.Put:
		fi.earliestPutTs = min(fi.earliestPutTs, ts)
	case cell.DeleteFamily:
		fi.deleteFamilyCount++
	}

	if w.block.empty() {
		w.blockFirst = append(w.blockFirst[:0], key...)
	}
	stored, vlField := cell.StoredValue(w.tagged, value, tags)
	if len(tags) > 0 {
		w.tagged = stored
	}
	w.block.add(key, stored, vlField, seq)
	w.lastKey = append(w.lastKey[:0], key...)
	w.lastSeq = seq
	w.hasLast = true
	if w.block.size() >= w.opts.BlockSize {
		return w.finishDataBlock()
	}
	return nil
}

// SetInfo adds a file-info entry (replacing one of the same name). The
// value is copied.
func (w *Writer) SetInfo(name string, value []byte) {
	if !w.done {
		w.info[name] = bytes.Clone(value)
	}
}

// SetMajorCompacted records whether the file is the output of a major
// compaction.
func (w *Writer) SetMajorCompacted(v bool) { w.fi.majorCompacted = v }

// Abort closes the file without finishing it (the caller removes it). It
// is a no-op after Finish or a previous Abort.
func (w *Writer) Abort() {
	if w.done {
		return
	}
	w.done = true
	_ = w.f.Close()
}

func (w *Writer) addBloom(h uint64, key cell.Key, col bool) {
	if len(w.hashes) == 0 {
		if col {
			w.chunkFirst = cell.AppendFirstOnColumn(w.chunkFirst[:0], key.Row(), key.Family(), key.Qualifier())
		} else {
			w.chunkFirst = cell.AppendFirstOnRow(w.chunkFirst[:0], key.Row())
		}
	}
	w.hashes = append(w.hashes, h)
	w.bloomKeys++
	if len(w.hashes) >= w.chunkKeys {
		w.flushBloomChunk()
	}
}

func (w *Writer) flushBloomChunk() {
	if len(w.hashes) == 0 || w.err != nil {
		return
	}
	chunk := buildBloomChunk(w.hashes, w.bloomBPK, w.bloomK)
	h, err := w.writeMetaBlock(kindBloomChunk, chunk)
	if err != nil {
		return
	}
	w.bloomChunks = append(w.bloomChunks, bloomChunkRef{firstKey: bytes.Clone(w.chunkFirst), h: h, keys: uint64(len(w.hashes))})
	w.hashes = w.hashes[:0]
}

func (w *Writer) write(b []byte) error {
	if w.err != nil {
		return w.err
	}
	n, err := w.f.Write(b)
	w.off += uint64(n)
	if err == nil && n != len(b) {
		err = fmt.Errorf("sfile: short write to %s: %d of %d bytes", w.f.Name(), n, len(b))
	}
	if err != nil {
		w.err = fmt.Errorf("sfile: writing %s: %w", w.f.Name(), err)
	}
	return w.err
}

func (w *Writer) finishDataBlock() error {
	payload := w.block.finish()
	off := w.off
	if w.cow {
		// L2 copies the block; errors (too large, full) just skip caching.
		_ = w.opts.Cache.Put(blockcache.Key{File: w.opts.FileID, Offset: int64(off)}, blockcache.KindData, payload, w.prio)
	}
	comp, codec := w.comp.compress(payload)
	w.out = appendFramed(w.out[:0], kindData, codec, len(payload), comp)
	if err := w.write(w.out); err != nil {
		return err
	}
	h := blockHandle{off: off, size: uint64(len(w.out))}
	w.leaf.add(w.blockFirst, h)
	w.leafBlocks++
	w.dataBlocks++
	w.block.reset()
	if w.leaf.size() >= w.opts.IndexBlockSize && w.leaf.n() >= 2 {
		return w.flushLeaf()
	}
	return nil
}

func (w *Writer) flushLeaf() error {
	first := bytes.Clone(w.leaf.firstKey)
	h, err := w.writeMetaBlock(kindIndex, w.leaf.finish(1))
	if err != nil {
		return err
	}
	w.level1 = append(w.level1, childEntry{key: first, h: h, dataBlocks: w.leafBlocks})
	w.leaf.reset()
	w.leafBlocks = 0
	w.leafFlushed = true
	return nil
}

// writeMetaBlock writes an uncompressed index, bloom or file info block
// and caches index and bloom blocks in L1 on write.
func (w *Writer) writeMetaBlock(kind blockKind, payload []byte) (blockHandle, error) {
	off := w.off
	w.out = appendFramed(w.out[:0], kind, CompressionNone, len(payload), payload)
	if err := w.write(w.out); err != nil {
		return blockHandle{}, err
	}
	if w.cow && w.opts.Cache.L1 != nil && (kind == kindIndex || kind == kindBloomChunk) {
		key := blockcache.Key{File: w.opts.FileID, Offset: int64(off)}
		if kind == kindBloomChunk {
			key.Offset |= tagL1Bloom
		}
		// L1 keeps the slice it is given.
		_ = w.opts.Cache.L1.Put(key, bytes.Clone(payload))
	}
	return blockHandle{off: off, size: uint64(len(w.out))}, nil
}

// Finish writes the rest of the file, syncs and closes it. On error the
// file is closed and the caller removes it.
func (w *Writer) Finish() (Meta, error) {
	if w.done {
		return Meta{}, ErrFinished
	}
	m, err := w.finish()
	w.done = true
	if err != nil {
		_ = w.f.Close()
		return Meta{}, err
	}
	if err := w.f.Close(); err != nil {
		return Meta{}, fmt.Errorf("sfile: closing %s: %w", w.f.Name(), err)
	}
	return m, nil
}

func (w *Writer) finish() (Meta, error) {
	if !w.block.empty() {
		if err := w.finishDataBlock(); err != nil {
			return Meta{}, err
		}
	}
	if w.opts.Bloom != BloomNone {
		w.flushBloomChunk()
	}
	if w.err != nil {
		return Meta{}, w.err
	}

	// Block index.
	var tr trailer
	mid := w.dataBlocks / 2
	if !w.leafFlushed {
		h, err := w.writeMetaBlock(kindIndex, w.leaf.finish(1))
		if err != nil {
			return Meta{}, err
		}
		tr.rootIndex, tr.levels = h, 1
		w.fi.midLeaf, w.fi.midEntry = h, uint64(mid)
	} else {
		if w.leaf.n() > 0 {
			if err := w.flushLeaf(); err != nil {
				return Meta{}, err
			}
		}
		seen := 0
		for _, e := range w.level1 {
			if mid < seen+e.dataBlocks {
				w.fi.midLeaf, w.fi.midEntry = e.h, uint64(mid-seen)
				break
			}
			seen += e.dataBlocks
		}
		list, level := w.level1, 2
		for {
			size := indexTrailerLen
			for _, e := range list {
				size += indexEntrySize(len(e.key), e.h)
			}
			if size <= w.opts.IndexBlockSize {
				break
			}
			parts := w.partitionIndex(list)
			if len(parts) == 1 {
				break // one block either way: make it the root
			}
			next := make([]childEntry, 0, len(parts))
			for _, p := range parts {
				var b indexBuilder
				for _, e := range list[p[0]:p[1]] {
					b.add(e.key, e.h)
				}
				h, err := w.writeMetaBlock(kindIndex, b.finish(level))
				if err != nil {
					return Meta{}, err
				}
				next = append(next, childEntry{key: list[p[0]].key, h: h})
			}
			list = next
			level++
		}
		var root indexBuilder
		for _, e := range list {
			root.add(e.key, e.h)
		}
		h, err := w.writeMetaBlock(kindIndex, root.finish(level))
		if err != nil {
			return Meta{}, err
		}
		tr.rootIndex, tr.levels = h, uint32(level)
	}
	tr.dataBlocks = uint64(w.dataBlocks)

	// Bloom index.
	if w.opts.Bloom != BloomNone {
		bi := bloomIndex{typ: w.opts.Bloom, k: w.bloomK, totalKeys: w.bloomKeys, chunks: w.bloomChunks}
		h, err := w.writeMetaBlock(kindBloomIndex, bi.encode())
		if err != nil {
			return Meta{}, err
		}
		tr.bloomIndex = h
	}

	// File info.
	fi := &w.fi
	if fi.entryCount == 0 {
		fi.minSeq, fi.maxSeq, fi.minTs, fi.maxTs = 0, 0, 0, 0
	} else {
		fi.lastKey = bytes.Clone(w.lastKey)
	}
	fi.createdAt = w.now().UnixNano()
	fi.encoding, fi.compression, fi.bloom = w.opts.Encoding, w.opts.Compression, w.opts.Bloom
	fi.blockSize = uint64(w.opts.BlockSize)
	fi.bloomFPRate = w.opts.BloomFPRate
	fi.info = w.info
	h, err := w.writeMetaBlock(kindFileInfo, fi.encode())
	if err != nil {
		return Meta{}, err
	}
	tr.fileInfo = h
	if tr.rootIndex.size > math.MaxUint32 || tr.fileInfo.size > math.MaxUint32 || tr.bloomIndex.size > math.MaxUint32 {
		return Meta{}, errors.New("sfile: index, bloom index or file info block exceeds 4 GiB")
	}
	if err := w.write(tr.encode()); err != nil {
		return Meta{}, err
	}
	if err := w.f.Sync(); err != nil {
		return Meta{}, fmt.Errorf("sfile: syncing %s: %w", w.f.Name(), err)
	}
	m := metaOf(fi, &tr, int64(w.off))
	m.BloomKeys = int64(w.bloomKeys)
	m.Info = maps.Clone(w.info)
	return m, nil
}

// partitionIndex splits index entries into blocks: a block closes once it
// reaches IndexBlockSize and holds at least two entries (so every level
// has at most half the entries of the one below).
func (w *Writer) partitionIndex(list []childEntry) [][2]int {
	var parts [][2]int
	start, size := 0, indexTrailerLen
	for i, e := range list {
		size += indexEntrySize(len(e.key), e.h)
		if size >= w.opts.IndexBlockSize && i+1-start >= 2 {
			parts = append(parts, [2]int{start, i + 1})
			start, size = i+1, indexTrailerLen
		}
	}
	if start < len(list) {
		parts = append(parts, [2]int{start, len(list)})
	}
	return parts
}

func metaOf(fi *fileInfo, tr *trailer, size int64) Meta {
	m := Meta{
		EntryCount:        int64(fi.entryCount),
		MinSeq:            fi.minSeq,
		MaxSeq:            fi.maxSeq,
		MinTimestamp:      fi.minTs,
		MaxTimestamp:      fi.maxTs,
		DeleteFamilyCount: int64(fi.deleteFamilyCount),
		MajorCompacted:    fi.majorCompacted,
		Size:              size,
		DataBlocks:        int(tr.dataBlocks),
		IndexLevels:       int(tr.levels),
		Bloom:             fi.bloom,
		Encoding:          fi.encoding,
		Compression:       fi.compression,
		CreatedAt:         fi.createdTime(),
		Info:              fi.info,
		BlockSize:         int(fi.blockSize),
		BloomFPRate:       fi.bloomFPRate,
	}
	m.EarliestPutTimestamp = math.MinInt64 // unknown: an older file
	if fi.hasEarliestPut {
		m.EarliestPutTimestamp = fi.earliestPutTs
	}
	if fi.entryCount > 0 {
		m.FirstKey = slices.Clip(cell.Key(fi.firstKey))
		m.LastKey = slices.Clip(cell.Key(fi.lastKey))
	}
	return m
}
