package sfile

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"sync/atomic"

	"github.com/cellstore/cellstore/engine/blockcache"
	"github.com/cellstore/cellstore/engine/cell"
	"github.com/cellstore/cellstore/engine/storage"
)

// maxIndexLevels bounds the index depth a file may claim. Every index
// block above the leaves holds at least two entries, so 40 levels would
// need 2^39 data blocks.
const maxIndexLevels = 40

// Cache key tags. Keys are (file id, block offset); in L1, bloom chunks
// and data blocks (which go to L1 only when there is no L2) carry a tag
// bit in the offset, so that no block can ever be found under another
// kind's key, even in a damaged file whose index points at the wrong
// block. Real offsets stay far below these bits.
const (
	tagL1Data  = 1 << 62
	tagL1Bloom = 1 << 61
)

// Reader reads a store file. It is safe for concurrent use: any number of
// scanners and bloom checks may run at once. The root index, the bloom
// index and the file info are loaded at Open; data blocks come from the L2
// cache (or the file), leaf/intermediate index blocks and bloom chunks
// from the L1 cache (or the file).
type Reader struct {
	path   string
	f      storage.ReadableFile
	size   int64
	limit  uint64 // end of the blocks (start of the trailer)
	cache  *blockcache.Combined
	l1     *blockcache.LRU
	l2     *blockcache.BucketCache
	fileID uint64
	prio   blockcache.Priority
	evict  bool

	meta     Meta
	tr       trailer
	root     indexBlock
	levels   int
	bloom    *bloomIndex
	midLeaf  blockHandle
	midEntry uint64
	firstRow []byte
	lastRow  []byte

	closed atomic.Bool
}

// Open opens the store file at path and loads its trailer, file info,
// root index and bloom index. A damaged file fails with an error matching
// ErrCorruption; a file of another format version with one wrapping
// ErrUnsupportedVersion.
func Open(fsys storage.FS, path string, opts ReaderOptions) (*Reader, error) {
	f, err := fsys.Open(path)
	if err != nil {
		return nil, fmt.Errorf("sfile: opening %s: %w", path, err)
	}
	r, err := newReader(f, path, opts)
	if err != nil {
		_ = f.Close()
		return nil, err
	}
	return r, nil
}

// OpenFile opens a store file already open for reading (an object: storage.OpenObject); path
// names it in errors. The Reader owns f: it is closed with the Reader, or here on failure.
func OpenFile(f storage.ReadableFile, path string, opts ReaderOptions) (*Reader, error) {
	r, err := newReader(f, path, opts)
	if err != nil {
		_ = f.Close()
		return nil, err
	}
	return r, nil
}

// InMemory reports whether the reader caches blocks with priority IN_MEMORY (ReaderOptions).
func (r *Reader) InMemory() bool { return r.prio == blockcache.PriorityMemory }

func newReader(f storage.ReadableFile, path string, opts ReaderOptions) (*Reader, error) {
	r := &Reader{path: path, f: f, cache: opts.Cache, fileID: opts.FileID, prio: blockcache.PrioritySingle,
		evict: opts.EvictOnClose}
	if opts.InMemory {
		r.prio = blockcache.PriorityMemory
	}
	if r.cache != nil {
		r.l1, r.l2 = r.cache.L1, r.cache.L2
	}
	size, err := f.Size()
	if err != nil {
		return nil, fmt.Errorf("sfile: %s: %w", path, err)
	}
	r.size = size
	if size < trailerSize {
		return nil, corruptf(path, 0, "file of %d bytes is shorter than the %d-byte trailer: truncated, or not a store file",
			size, trailerSize)
	}
	tb := make([]byte, trailerSize)
	if err := r.readAt(tb, size-trailerSize, "trailer"); err != nil {
		return nil, err
	}
	tr, err := decodeTrailer(tb, path, size-trailerSize)
	if err != nil {
		return nil, err
	}
	r.tr = tr
	r.limit = uint64(size - trailerSize)
	if tr.levels < 1 || tr.levels > maxIndexLevels {
		return nil, corruptf(path, size-trailerSize, "trailer: %d index levels", tr.levels)
	}
	if tr.dataBlocks > r.limit/blockOverhead {
		return nil, corruptf(path, size-trailerSize, "trailer: %d data blocks cannot fit in %d bytes", tr.dataBlocks, r.limit)
	}
	r.levels = int(tr.levels)

	// File info.
	payload, err := r.readMetaBlock(tr.fileInfo, kindFileInfo)
	if err != nil {
		return nil, err
	}
	fi, reason := decodeFileInfo(payload)
	if reason != "" {
		return nil, corruptf(path, int64(tr.fileInfo.off), "%s", reason)
	}
	if (fi.entryCount == 0) != (tr.dataBlocks == 0) || fi.entryCount < tr.dataBlocks {
		return nil, corruptf(path, int64(tr.fileInfo.off), "file info: %d cells in %d data blocks", fi.entryCount, tr.dataBlocks)
	}

	// Root index.
	payload, err = r.readMetaBlock(tr.rootIndex, kindIndex)
	if err != nil {
		return nil, err
	}
	root, reason := parseIndexBlock(payload, r.limit)
	if reason != "" {
		return nil, corruptf(path, int64(tr.rootIndex.off), "root %s", reason)
	}
	if root.level != r.levels {
		return nil, corruptf(path, int64(tr.rootIndex.off), "root index block has level %d, trailer says %d levels", root.level, r.levels)
	}
	if (root.n == 0) != (tr.dataBlocks == 0) || r.levels == 1 && uint64(root.n) != tr.dataBlocks {
		return nil, corruptf(path, int64(tr.rootIndex.off), "root index has %d entries for %d data blocks", root.n, tr.dataBlocks)
	}
	r.root = root

	// Bloom index.
	if tr.bloomIndex.size != 0 {
		payload, err = r.readMetaBlock(tr.bloomIndex, kindBloomIndex)
		if err != nil {
			return nil, err
		}
		bi, reason := decodeBloomIndex(payload, r.limit)
		if reason != "" {
			return nil, corruptf(path, int64(tr.bloomIndex.off), "%s", reason)
		}
		if bi.typ != fi.bloom {
			return nil, corruptf(path, int64(tr.bloomIndex.off), "bloom index of type %s, file info says %s", bi.typ, fi.bloom)
		}
		r.bloom = &bi
	} else if fi.bloom != BloomNone {
		return nil, corruptf(path, size-trailerSize, "file info says bloom %s but the trailer has no bloom index", fi.bloom)
	}

	r.midLeaf, r.midEntry = fi.midLeaf, fi.midEntry
	if tr.dataBlocks > 0 {
		r.firstRow = cell.Key(fi.firstKey).Row()
		r.lastRow = cell.Key(fi.lastKey).Row()
		if cell.Compare(fi.firstKey, fi.lastKey) > 0 {
			return nil, corruptf(path, int64(tr.fileInfo.off), "file info: first key sorts after the last key")
		}
	}
	r.meta = metaOf(&fi, &tr, size)
	if r.bloom != nil {
		r.meta.BloomKeys = int64(r.bloom.totalKeys)
	}
	return r, nil
}

// readAt reads len(p) bytes at off; a short read is corruption (the file
// is shorter than its structures say).
func (r *Reader) readAt(p []byte, off int64, what string) error {
	n, err := r.f.ReadAt(p, off)
	if n == len(p) {
		return nil
	}
	if err == nil || errors.Is(err, io.EOF) {
		return corruptf(r.path, off, "%s of %d bytes extends past the end of the file (%d bytes read)", what, len(p), n)
	}
	return fmt.Errorf("sfile: reading %s at offset %d of %s: %w", what, off, r.path, err)
}

// checkHandle rejects handles outside the blocks region.
func (r *Reader) checkHandle(h blockHandle, kind blockKind) error {
	if h.size < blockOverhead || h.off > r.limit || h.size > r.limit-h.off {
		return corruptf(r.path, int64(min(h.off, uint64(r.size))), "%s block of %d bytes at offset %d lies outside the file's blocks (end %d)",
			kind, h.size, h.off, r.limit)
	}
	return nil
}

// readFrame reads a block into *buf (grown as needed) and checks its
// checksum and header.
func (r *Reader) readFrame(h blockHandle, kind blockKind, buf *[]byte) (frame, error) {
	if err := r.checkHandle(h, kind); err != nil {
		return frame{}, err
	}
	*buf = grow(*buf, int(h.size))
	if err := r.readAt(*buf, int64(h.off), kind.String()+" block"); err != nil {
		return frame{}, err
	}
	return r.checkFrame(*buf, h, kind)
}

func (r *Reader) checkFrame(raw []byte, h blockHandle, kind blockKind) (frame, error) {
	fr, reason := parseFrame(raw, kind)
	if reason != "" {
		return frame{}, corruptf(r.path, int64(h.off), "%s", reason)
	}
	return fr, nil
}

// payloadOf returns the uncompressed payload of a frame: the frame's own
// bytes when it is not compressed, else decoded into *dst (grown).
func (r *Reader) payloadOf(fr frame, h blockHandle, dst *[]byte) ([]byte, error) {
	if fr.codec == CompressionNone {
		return fr.payload, nil
	}
	*dst = grow(*dst, fr.ulen)
	if reason := decompress(fr.codec, fr.payload, *dst); reason != "" {
		return nil, corruptf(r.path, int64(h.off), "%s block: %s", fr.kind, reason)
	}
	return *dst, nil
}

// readMetaBlock reads a block into fresh memory and returns its payload.
func (r *Reader) readMetaBlock(h blockHandle, kind blockKind) ([]byte, error) {
	var raw, dst []byte
	fr, err := r.readFrame(h, kind, &raw)
	if err != nil {
		return nil, err
	}
	return r.payloadOf(fr, h, &dst)
}

// loadIndexBlock returns the index block at h, which must have the given
// level, from L1 or the file (cached in L1 then). Without L1 the block is
// read into *buf.
func (r *Reader) loadIndexBlock(h blockHandle, level int, buf *[]byte) (indexBlock, error) {
	key := blockcache.Key{File: r.fileID, Offset: int64(h.off)}
	if r.l1 != nil {
		if b, ok := r.l1.Get(key); ok {
			if ib := indexBlockOf(b); ib.level == level {
				return ib, nil
			}
			return indexBlock{}, corruptf(r.path, int64(h.off), "index block has level %d, want %d", indexBlockOf(b).level, level)
		}
	}
	var payload []byte
	var err error
	if r.l1 != nil {
		payload, err = r.readMetaBlock(h, kindIndex)
	} else {
		var fr frame
		if fr, err = r.readFrame(h, kindIndex, buf); err == nil {
			var dst []byte
			payload, err = r.payloadOf(fr, h, &dst)
		}
	}
	if err != nil {
		return indexBlock{}, err
	}
	ib, reason := parseIndexBlock(payload, r.limit)
	if reason != "" {
		return indexBlock{}, corruptf(r.path, int64(h.off), "%s", reason)
	}
	if ib.level != level {
		return indexBlock{}, corruptf(r.path, int64(h.off), "index block has level %d, want %d", ib.level, level)
	}
	if ib.n == 0 {
		return indexBlock{}, corruptf(r.path, int64(h.off), "index block of level %d has no entries", level)
	}
	if r.l1 != nil {
		_ = r.l1.Put(key, payload)
	}
	return ib, nil
}

// bloomChunk returns bloom chunk i from L1 or the file.
func (r *Reader) bloomChunk(i int) ([]byte, error) {
	h := r.bloom.chunks[i].h
	key := blockcache.Key{File: r.fileID, Offset: int64(h.off) | tagL1Bloom}
	if r.l1 != nil {
		if b, ok := r.l1.Get(key); ok {
			return b, nil
		}
	}
	payload, err := r.readMetaBlock(h, kindBloomChunk)
	if err != nil {
		return nil, err
	}
	if len(payload) < bloomLineBytes || len(payload)%bloomLineBytes != 0 {
		return nil, corruptf(r.path, int64(h.off), "bloom chunk of %d bytes is not a whole number of %d-byte lines",
			len(payload), bloomLineBytes)
	}
	if r.l1 != nil {
		_ = r.l1.Put(key, payload)
	}
	return payload, nil
}

// Path returns the file's path.
func (r *Reader) Path() string { return r.path }

// Meta returns the file's metadata. Its slices and map are shared: do not
// modify them.
func (r *Reader) Meta() Meta { return r.meta }

// MayContainRow reports whether the file may hold cells of row: false
// when the row is outside the file's key range or the ROW bloom filter
// excludes it. Files with a ROWCOL filter (or none) answer from the key
// range only. A bloom chunk that cannot be read answers true (the read
// path then meets the error itself).
func (r *Reader) MayContainRow(row []byte) bool {
	if !r.rowInRange(row) {
		return false
	}
	if r.bloom == nil || r.bloom.typ != BloomRow {
		return true
	}
	var arr [128]byte
	probe := cell.AppendFirstOnRow(arr[:0], row)
	return r.bloomMayContain(probe, rowBloomHash(row))
}

// MayContainRowCol reports whether the file may hold cells of the column
// row/family:qualifier (with a ROW filter: of the row).
func (r *Reader) MayContainRowCol(row, family, qualifier []byte) bool {
	if !r.rowInRange(row) || len(family) > cell.MaxFamilyLength {
		return false
	}
	if r.bloom == nil {
		return true
	}
	var arr [128]byte
	if r.bloom.typ == BloomRow {
		probe := cell.AppendFirstOnRow(arr[:0], row)
		return r.bloomMayContain(probe, rowBloomHash(row))
	}
	probe := cell.AppendFirstOnColumn(arr[:0], row, family, qualifier)
	return r.bloomMayContain(probe, colBloomHash(probe))
}

func (r *Reader) rowInRange(row []byte) bool {
	return r.tr.dataBlocks > 0 && len(row) <= cell.MaxRowLength &&
		bytes.Compare(row, r.firstRow) >= 0 && bytes.Compare(row, r.lastRow) <= 0
}

func (r *Reader) bloomMayContain(probe []byte, h uint64) bool {
	i := r.bloom.chunkFor(probe)
	if i < 0 {
		return false
	}
	chunk, err := r.bloomChunk(i)
	if err != nil {
		return true
	}
	return bloomChunkMayContain(chunk, h, r.bloom.k)
}

// MidKey returns the first key of the middle data block (data block
// DataBlocks/2): an approximate middle key for splits. It returns ErrEmpty
// for a file without cells.
func (r *Reader) MidKey() (cell.Key, error) {
	if r.tr.dataBlocks == 0 {
		return nil, ErrEmpty
	}
	leaf := r.root
	if r.levels > 1 {
		var buf []byte
		var err error
		if leaf, err = r.loadIndexBlock(r.midLeaf, 1, &buf); err != nil {
			return nil, err
		}
	} else if r.midLeaf != r.tr.rootIndex {
		return nil, corruptf(r.path, int64(r.tr.fileInfo.off), "file info: middle leaf %d is not the root index %d",
			r.midLeaf.off, r.tr.rootIndex.off)
	}
	if r.midEntry >= uint64(leaf.n) {
		return nil, corruptf(r.path, int64(r.midLeaf.off), "file info: middle entry %d of a leaf index block of %d entries",
			r.midEntry, leaf.n)
	}
	key, _ := leaf.entry(int(r.midEntry))
	return cell.Key(bytes.Clone(key)), nil
}

// Close closes the file (and, with EvictOnClose, evicts its blocks).
// Scanners must be closed first.
func (r *Reader) Close() error {
	if r.closed.Swap(true) {
		return ErrClosed
	}
	if r.evict && r.cache != nil {
		r.cache.EvictFile(r.fileID)
	}
	return r.f.Close()
}
