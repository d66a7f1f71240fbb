package sfile

import (
	"errors"
	"fmt"
	"sync"

	"github.com/cellstore/cellstore/engine/blockcache"
	"github.com/cellstore/cellstore/engine/cell"
)

const defaultPrefetchBytes = 1 << 20

// NewScanner returns a scanner over the file's cells (cell.Scanner). Key
// and Value point into the current data block: with a cache, straight
// into the off-heap L2 slot (no copy); the scanner holds the block's
// reference until it moves to another block, passes the file's last cell,
// is parked (cell.Parker) or is closed.
func (r *Reader) NewScanner(opts ScanOptions) cell.Scanner {
	if opts.PrefetchBytes <= 0 {
		opts.PrefetchBytes = defaultPrefetchBytes
	}
	var s *scanner
	if opts.Recycle {
		// A recycled scanner keeps only its scratch buffers.
		s = scannerPool.Get().(*scanner)
		path := s.path[:cap(s.path)]
		for i := range path {
			path[i].blk, path[i].pos = indexBlock{}, 0
		}
		if len(path) >= r.levels {
			path = path[:r.levels]
		} else {
			path = make([]indexCursor, r.levels)
		}
		*s = scanner{r: r, opts: opts, path: path, seekBuf: s.seekBuf[:0], rowBuf: s.rowBuf[:0],
			it: blockIter{keyBuf: s.it.keyBuf[:0]}}
	} else {
		s = &scanner{r: r, opts: opts, path: make([]indexCursor, r.levels)}
	}
	s.leaf = r.levels - 1
	s.path[0].blk = r.root
	return s
}

type scanner struct {
	r    *Reader
	opts ScanOptions
	path []indexCursor // path[0] is the root, path[leaf] the leaf level
	leaf int

	it        blockIter
	blkLoaded bool
	blkOff    uint64
	ref       blockcache.BlockRef
	hasRef    bool
	// parked: Park released the block; the current cell is a copy in
	// parkBuf, and it.off and it.next still say where it is in the block
	// at blkOff (the leaf of path), to be loaded again by the next Next.
	parked  bool
	parkBuf []byte

	valid  bool
	err    error
	closed bool

	readBuf  []byte
	blockBuf []byte
	pfBuf    []byte // prefetched bytes, from file offset pfOff
	pfOff    uint64
	seekBuf  []byte
	rowBuf   []byte
	val      validator
}

// indexCursor is a position in an index block of one level.
type indexCursor struct {
	blk indexBlock
	pos int
	buf []byte // block memory when there is no L1 cache
}

var (
	_ cell.Scanner = (*scanner)(nil)
	_ cell.Parker  = (*scanner)(nil)
)

var errBadBlock = errors.New("sfile: bad block")

func (s *scanner) Key() cell.Key { return s.it.key }
func (s *scanner) Value() []byte { return s.it.val }
func (s *scanner) Tags() []byte  { return s.it.tags }
func (s *scanner) Seq() uint64   { return s.it.seq }

// Current implements cell.Current.
func (s *scanner) Current() (cell.Key, []byte, []byte, uint64) {
	return s.it.key, s.it.val, s.it.tags, s.it.seq
}
func (s *scanner) Err() error         { return s.err }
func (s *scanner) blockOffHeap() bool { return s.hasRef && s.ref.OffHeap() }

// Close releases the current block. It is safe to call more than once.
func (s *scanner) Close() error {
	if s.closed {
		return nil
	}
	s.closed = true
	s.valid = false
	s.releaseBlock()
	s.readBuf, s.blockBuf, s.pfBuf = nil, nil, nil
	if s.opts.Recycle {
		s.r, s.it.data, s.it.key, s.it.val, s.it.tags, s.val = nil, nil, nil, nil, nil, validator{}
		scannerPool.Put(s)
	}
	return nil
}

// scannerPool holds closed scanners made with ScanOptions.Recycle.
var scannerPool = sync.Pool{New: func() any { return new(scanner) }}

// ready starts a positioning call: false after Close or an error.
func (s *scanner) ready() bool {
	s.valid = false
	s.parked = false // a seek finds its block itself
	if s.closed {
		if s.err == nil {
			s.err = ErrClosed
		}
		return false
	}
	return s.err == nil
}

func (s *scanner) fail(err error) bool {
	s.err = err
	s.valid = false
	s.releaseBlock()
	return false
}

func (s *scanner) releaseBlock() {
	if s.hasRef {
		s.ref.Release()
		s.ref, s.hasRef = blockcache.BlockRef{}, false
	}
	s.blkLoaded, s.parked = false, false
	s.it.data, s.it.key, s.it.val, s.it.tags = nil, nil, nil, nil
}

// Park implements cell.Parker: it gives the current block's cache
// reference back (an idle scanner pins no L2 slot) and keeps a copy of the
// current cell. Next loads the block again (usually a cache hit) and goes
// on from the same entry; a seek finds its block as always. A scanner on a
// block of its own (not cached) keeps it: there is nothing to give back.
func (s *scanner) Park() {
	if s.closed || s.err != nil || !s.hasRef {
		return
	}
	if !s.valid {
		s.releaseBlock() // only a seek can position it again
		return
	}
	it := &s.it
	buf := append(append(append(s.parkBuf[:0], it.key...), it.val...), it.tags...)
	kl, ve := len(it.key), len(it.key)+len(it.val)
	it.key, it.val = buf[:kl:kl], buf[kl:ve:ve]
	if it.tags != nil {
		it.tags = buf[ve:len(buf):len(buf)]
	}
	s.parkBuf = buf
	s.ref.Release()
	s.ref, s.hasRef = blockcache.BlockRef{}, false
	s.blkLoaded, s.parked = false, true
	it.data = nil
}

// unpark loads the parked block again and restores the position in it,
// so that decoding goes on from it.next (PREFIX and DIFF decoding needs
// only the state the iterator kept: keyBuf and the DIFF fields).
func (s *scanner) unpark() error {
	s.parked = false
	h := s.leafHandle()
	if h.off != s.blkOff {
		return fmt.Errorf("sfile: %s: a parked scanner's index path is at block %d, its block at %d", s.r.path, h.off, s.blkOff)
	}
	off, next := s.it.off, s.it.next
	if err := s.loadData(h, false); err != nil {
		return err
	}
	s.it.off, s.it.next = off, next
	return nil
}

// Seek positions the scanner at the first cell at or after key.
func (s *scanner) Seek(key cell.Key) bool {
	if !s.ready() {
		return false
	}
	// Copy: key may point into the current block or key buffer.
	s.seekBuf = append(s.seekBuf[:0], key...)
	return s.seek(s.seekBuf)
}

// SeekToPreviousRow positions the scanner at the first cell of the last
// row before key's row.
func (s *scanner) SeekToPreviousRow(key cell.Key) bool {
	if !s.ready() {
		return false
	}
	s.rowBuf = append(s.rowBuf[:0], key.Row()...)
	if s.r.tr.dataBlocks == 0 {
		return false
	}
	s.seekBuf = cell.AppendFirstOnRow(s.seekBuf[:0], s.rowBuf)
	found, err := s.lastBefore(s.seekBuf)
	if err != nil {
		return s.fail(err)
	}
	if !found {
		s.releaseBlock() // before the first row: nothing to hold
		return false
	}
	s.seekBuf = cell.AppendFirstOnRow(s.seekBuf[:0], s.rowBuf)
	return s.seek(s.seekBuf)
}

// SeekToLastRow positions the scanner at the first cell of the last row.
func (s *scanner) SeekToLastRow() bool {
	if !s.ready() || s.r.tr.dataBlocks == 0 {
		return false
	}
	s.seekBuf = cell.AppendFirstOnRow(s.seekBuf[:0], s.r.meta.LastKey.Row())
	return s.seek(s.seekBuf)
}

// Next moves to the following cell, crossing into the next block.
func (s *scanner) Next() bool {
	if !s.valid {
		return false
	}
	if s.parked && s.it.next < s.it.end {
		if err := s.unpark(); err != nil {
			return s.fail(err)
		}
	}
	s.parked = false // at the block's end: the next block needs nothing of it
	if it := &s.it; it.next < it.end {
		if it.enc == EncodingNone {
			it.decodeNone(it.next)
		} else {
			it.decode(it.next)
		}
		return true
	}
	s.valid = false
	return s.nextBlock()
}

// seek positions at the first cell >= k; k is scanner-owned.
func (s *scanner) seek(k []byte) bool {
	if s.r.tr.dataBlocks == 0 {
		return false
	}
	if !s.inCurrentBlock(k) {
		if _, err := s.descend(k); err != nil {
			return s.fail(err)
		}
		if err := s.loadData(s.leafHandle(), false); err != nil {
			return s.fail(err)
		}
	}
	if s.seekInBlock(k) {
		s.valid = true
		return true
	}
	return s.nextBlock()
}

// inCurrentBlock reports whether the loaded data block is the last one
// whose first key sorts before k (so the first cell >= k and the last cell
// < k are in it or, for the former, at the start of the next block).
func (s *scanner) inCurrentBlock(k []byte) bool {
	if !s.blkLoaded {
		return false
	}
	c := &s.path[s.leaf]
	if cell.Compare(c.blk.key(c.pos), k) >= 0 {
		return false
	}
	if c.pos+1 < c.blk.n {
		return cell.Compare(c.blk.key(c.pos+1), k) >= 0
	}
	for l := range s.path {
		if s.path[l].pos != s.path[l].blk.n-1 {
			return false // the next block is under another leaf: search
		}
	}
	return true // the last data block
}

// descend positions the index path at the last data block whose first
// key sorts before k (the first block if none does, reported by any =
// false).
func (s *scanner) descend(k []byte) (any bool, err error) {
	any = true
	for l := range s.path {
		c := &s.path[l]
		i := c.blk.searchLT(k)
		if i < 0 {
			if l == 0 {
				any = false
			}
			i = 0
		}
		c.pos = i
		if l < s.leaf {
			if err := s.loadChild(l); err != nil {
				return false, err
			}
		}
	}
	return any, nil
}

// loadChild loads the index block under path[l]'s current entry into
// path[l+1], positioned at its first entry.
func (s *scanner) loadChild(l int) error {
	_, h := s.path[l].blk.entry(s.path[l].pos)
	c := &s.path[l+1]
	ib, err := s.r.loadIndexBlock(h, s.leaf-l, &c.buf)
	if err != nil {
		s.releaseBlock() // the path no longer matches the loaded block
		return err
	}
	c.blk, c.pos = ib, 0
	return nil
}

func (s *scanner) leafHandle() blockHandle {
	c := &s.path[s.leaf]
	_, h := c.blk.entry(c.pos)
	return h
}

// seekInBlock positions at the first cell >= k in the loaded block; false
// if every cell sorts before k.
func (s *scanner) seekInBlock(k []byte) bool {
	it := &s.it
	lo, hi, decoded := 0, it.nRestarts, -1
	for lo < hi {
		mid := int(uint(lo+hi) >> 1)
		it.decode(it.restart(mid))
		decoded = mid
		if cell.Compare(it.key, k) < 0 {
			lo = mid + 1
		} else {
			hi = mid
		}
	}
	start := max(lo-1, 0)
	if decoded != start {
		it.decode(it.restart(start))
	}
	for cell.Compare(it.key, k) < 0 {
		if it.next >= it.end {
			return false
		}
		it.decode(it.next)
	}
	return true
}

// nextBlock moves to the first cell of the next data block.
func (s *scanner) nextBlock() bool {
	l := s.leaf
	for ; l >= 0; l-- {
		if c := &s.path[l]; c.pos+1 < c.blk.n {
			c.pos++
			break
		}
	}
	if l < 0 {
		s.releaseBlock() // past the last block: nothing to hold
		return false
	}
	for ; l < s.leaf; l++ {
		if err := s.loadChild(l); err != nil {
			return s.fail(err)
		}
	}
	if err := s.loadData(s.leafHandle(), true); err != nil {
		return s.fail(err)
	}
	s.it.decode(0)
	s.valid = true
	return true
}

// lastBefore finds the last cell < k and copies its row into rowBuf.
func (s *scanner) lastBefore(k []byte) (bool, error) {
	if !s.inCurrentBlock(k) {
		any, err := s.descend(k)
		if err != nil || !any {
			return false, err
		}
		if err := s.loadData(s.leafHandle(), false); err != nil {
			return false, err
		}
	}
	it := &s.it
	lo, hi := 0, it.nRestarts
	for lo < hi {
		mid := int(uint(lo+hi) >> 1)
		it.decode(it.restart(mid))
		if cell.Compare(it.key, k) < 0 {
			lo = mid + 1
		} else {
			hi = mid
		}
	}
	if lo == 0 {
		return false, nil // the index said otherwise: a damaged file
	}
	it.decode(it.restart(lo - 1))
	found := false
	for cell.Compare(it.key, k) < 0 {
		s.rowBuf = append(s.rowBuf[:0], cell.Key(it.key).Row()...)
		found = true
		if it.next >= it.end {
			break
		}
		it.decode(it.next)
	}
	return found, nil
}

// loadData makes the data block at h the current block.
func (s *scanner) loadData(h blockHandle, sequential bool) error {
	if s.blkLoaded && s.blkOff == h.off {
		return nil
	}
	s.releaseBlock()
	payload, err := s.fetchData(h, sequential)
	if err != nil {
		return err
	}
	s.it.init(payload)
	s.blkLoaded, s.blkOff = true, h.off
	return nil
}

// fetchData returns a data block's payload: from the cache (setting
// s.ref for L2), else read, checked, validated and, with CacheBlocks,
// cached.
func (s *scanner) fetchData(h blockHandle, sequential bool) ([]byte, error) {
	r := s.r
	key := blockcache.Key{File: r.fileID, Offset: int64(h.off)}
	l1key := blockcache.Key{File: r.fileID, Offset: int64(h.off) | tagL1Data}
	if r.l2 != nil {
		if ref, ok := r.l2.Get(key); ok {
			s.ref, s.hasRef = ref, true
			return ref.Bytes(), nil
		}
	} else if r.l1 != nil {
		if b, ok := r.l1.Get(l1key); ok {
			return b, nil
		}
	}
	raw, err := s.readRaw(h, sequential)
	if err != nil {
		return nil, err
	}
	fr, err := r.checkFrame(raw, h, kindData)
	if err != nil {
		return nil, err
	}
	if s.opts.CacheBlocks && r.l2 != nil {
		// Decompress straight into the off-heap slot.
		var reason string
		err := r.l2.PutFrom(key, fr.ulen, r.prio, func(dst []byte) error {
			if reason = decompress(fr.codec, fr.payload, dst); reason == "" {
				reason = validateDataBlock(dst, &s.val)
			}
			if reason != "" {
				return errBadBlock
			}
			return nil
		})
		if reason != "" {
			return nil, corruptf(r.path, int64(h.off), "data block: %s", reason)
		}
		if err == nil {
			if ref, ok := r.l2.Acquire(key); ok {
				s.ref, s.hasRef = ref, true
				return ref.Bytes(), nil
			}
		}
		// Not cached (too large for a slot, every slot in use, cache
		// closed): use a private copy.
	} else if s.opts.CacheBlocks && r.l1 != nil {
		b := make([]byte, fr.ulen)
		if reason := decompress(fr.codec, fr.payload, b); reason != "" {
			return nil, corruptf(r.path, int64(h.off), "data block: %s", reason)
		}
		if reason := validateDataBlock(b, &s.val); reason != "" {
			return nil, corruptf(r.path, int64(h.off), "%s", reason)
		}
		_ = r.l1.Put(l1key, b)
		return b, nil
	}
	payload, err := r.payloadOf(fr, h, &s.blockBuf)
	if err != nil {
		return nil, err
	}
	if reason := validateDataBlock(payload, &s.val); reason != "" {
		return nil, corruptf(r.path, int64(h.off), "%s", reason)
	}
	return payload, nil
}

// readRaw returns the on-disk bytes of a block, from the prefetch buffer
// or the file. With Prefetch, a sequential miss reads PrefetchBytes ahead.
func (s *scanner) readRaw(h blockHandle, sequential bool) ([]byte, error) {
	r := s.r
	if err := r.checkHandle(h, kindData); err != nil {
		return nil, err
	}
	if h.off >= s.pfOff && h.off+h.size <= s.pfOff+uint64(len(s.pfBuf)) {
		o := h.off - s.pfOff
		return s.pfBuf[o : o+h.size], nil
	}
	if sequential && s.opts.Prefetch {
		n := min(max(h.size, uint64(s.opts.PrefetchBytes)), r.limit-h.off)
		s.pfBuf = grow(s.pfBuf, int(n))
		s.pfOff = h.off
		if err := r.readAt(s.pfBuf, int64(h.off), "data blocks"); err != nil {
			s.pfBuf = s.pfBuf[:0]
			return nil, err
		}
		return s.pfBuf[:h.size], nil
	}
	s.readBuf = grow(s.readBuf, int(h.size))
	if err := r.readAt(s.readBuf, int64(h.off), "data block"); err != nil {
		return nil, err
	}
	return s.readBuf, nil
}
