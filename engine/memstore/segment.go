package memstore

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/cellstore/cellstore/engine/cell"
	"github.com/cellstore/cellstore/engine/offheap"
)

// Node layout in a chunk (8-byte aligned, native endian):
//
//	off  size  field
//	0    4     key length
//	4    4     value length (with cell.TaggedFlag: a tagged value, see cell.Tags)
//	8    8     sequence id
//	16   1     height (1..maxHeight)
//	17   1     flags (flagHeap: key and value live on the Go heap)
//	18   6     padding
//	24   8*h   tower: next links, level 0 first (atomic uint64 refs)
//	..   K     key   (or, with flagHeap, a uint32 index into Segment.heap)
//	..   V     value
//
// A ref is chunk id << 32 | offset; 0 is nil.
const (
	nodeHeader = 24
	maxHeight  = 20
	flagHeap   = 1
)

type ref = uint64

// ErrFull is matched (errors.Is) by the errors Reserve and Add return when
// the chunk pool's budget is exhausted: the region should flush and make
// writers wait. Such errors also match offheap.ErrBudgetExceeded.
var ErrFull = errors.New("memstore: off-heap memory budget exhausted")

// ErrClosed is returned by operations on a released segment or a closed
// memstore.
var ErrClosed = errors.New("memstore: closed")

type fullError struct{ cause error }

func (e *fullError) Error() string { return ErrFull.Error() + ": " + e.cause.Error() }
func (e *fullError) Is(target error) bool {
	return target == ErrFull || errors.Is(e.cause, target)
}
func (e *fullError) Unwrap() error { return e.cause }

// Segment is one skiplist of cells in off-heap chunks. The active segment of
// a memstore accepts Add; a frozen one (a snapshot) is read-only.
type Segment struct {
	pool      *offheap.ChunkPool
	chunkSize int
	maxInline int

	mu     sync.Mutex // chunk switching and the spare list
	cur    atomic.Pointer[offheap.Chunk]
	chunks []*offheap.Chunk
	// bases maps a chunk id to the address of the chunk's memory, for the
	// chunks this segment allocates nodes in (copy on write under mu).
	// Node references resolve through it without asking the pool: the
	// skiplist search does it for every node it visits.
	bases   atomic.Pointer[[]unsafe.Pointer]
	spare   []*offheap.Chunk
	pending int64 // reserved bytes not yet consumed (under mu)

	hmu  sync.RWMutex // heap-stored cells
	heap [][]byte

	headMem []uint64 // the head node's block (chunk id 0)

	head   ref
	height atomic.Int32
	refs   atomic.Int32
	frozen atomic.Bool

	dataSize   atomic.Int64
	heapSize   atomic.Int64
	cells      atomic.Int64
	chunkBytes atomic.Int64
	minTs      atomic.Int64
	maxTs      atomic.Int64
	maxSeq     atomic.Uint64
	minSeq     atomic.Uint64
}

// newSegment creates an empty segment holding one reference.
func newSegment(pool *offheap.ChunkPool) (*Segment, error) {
	s := &Segment{pool: pool, chunkSize: pool.ChunkSize()}
	s.maxInline = s.chunkSize / 4
	s.refs.Store(1)
	s.minTs.Store(math.MaxInt64)
	s.maxTs.Store(math.MinInt64)
	s.minSeq.Store(math.MaxUint64)
	s.height.Store(1)
	// The head node lives in the segment's own small block, chunk id 0 of the base table (pool
	// chunks are numbered from 1): an empty segment holds no chunk, so a region costs chunk memory
	// only once written, and a flush's new segment needs none.
	s.headMem = make([]uint64, (headOffset+nodeSize(maxHeight, 0))/8)
	bases := []unsafe.Pointer{unsafe.Pointer(unsafe.SliceData(s.headMem))}
	s.bases.Store(&bases)
	s.head = headOffset
	p := s.ptr(s.head)
	*(*uint8)(unsafe.Add(p, 16)) = maxHeight // zeroed memory: seq 0, no flags, empty tower
	return s, nil
}

// headOffset is the head node's offset in its block: a ref of 0 means nil.
const headOffset = 8

// ptr returns the address of node r.
func (s *Segment) ptr(r ref) unsafe.Pointer {
	b := s.bases.Load()
	if b == nil {
		panic("memstore: node reference into a segment whose chunks were released")
	}
	p := unsafe.Add((*b)[r>>32], uint32(r))
	s.checkRef(r, p)
	return p
}

// nodeAddrs resolves node references through one load of the chunks' addresses: a search
// resolves dozens. Chunk addresses never change while the segment is alive, and the list only
// gains entries (copied on write), so an older list resolves every node it has an address for;
// a chunk added since may sit past its end or in one of its gaps (the list is indexed by the
// pool's chunk ids, of which a segment holds only some), and is found in the current list.
type nodeAddrs struct {
	s *Segment
	b []unsafe.Pointer
}

func (s *Segment) addrs() nodeAddrs {
	b := s.bases.Load()
	if b == nil {
		panic("memstore: node reference into a segment whose chunks were released")
	}
	return nodeAddrs{s, *b}
}

// ptr returns the address of node r.
func (a *nodeAddrs) ptr(r ref) unsafe.Pointer {
	if id := r >> 32; id < uint64(len(a.b)) && a.b[id] != nil {
		p := unsafe.Add(a.b[id], uint32(r))
		a.s.checkRef(r, p)
		return p
	}
	return a.s.ptr(r) // a node in a chunk added since the list was loaded
}

// addBaseLocked records the address of chunk c's memory (under mu, before
// any node is allocated in c).
func (s *Segment) addBaseLocked(c *offheap.Chunk) {
	var old []unsafe.Pointer
	if b := s.bases.Load(); b != nil {
		old = *b
	}
	id := int(c.ID())
	bases := make([]unsafe.Pointer, max(len(old), id+1))
	copy(bases, old)
	bases[id] = unsafe.Pointer(unsafe.SliceData(c.Bytes()))
	s.bases.Store(&bases)
}

func nodeKeyLen(p unsafe.Pointer) uint32 { return *(*uint32)(p) }
func nodeValLen(p unsafe.Pointer) uint32 { return *(*uint32)(unsafe.Add(p, 4)) }
func nodeSeq(p unsafe.Pointer) uint64    { return *(*uint64)(unsafe.Add(p, 8)) }
func nodeHeight(p unsafe.Pointer) int    { return int(*(*uint8)(unsafe.Add(p, 16))) }
func nodeFlags(p unsafe.Pointer) uint8   { return *(*uint8)(unsafe.Add(p, 17)) }
func nodeLink(p unsafe.Pointer, level int) *atomic.Uint64 {
	return (*atomic.Uint64)(unsafe.Add(p, nodeHeader+8*level))
}

// nodeKV returns the key, value and tags of the node at p.
func (s *Segment) nodeKV(p unsafe.Pointer) (cell.Key, []byte, []byte) {
	k, v := s.nodeStored(p)
	if nodeValLen(p)&cell.TaggedFlag != 0 {
		v, t := cell.SplitTagged(v)
		return k, v, t
	}
	return k, v, nil
}

// nodeStored returns the key and stored value (a tagged value for a cell
// with tags) of the node at p.
func (s *Segment) nodeStored(p unsafe.Pointer) (cell.Key, []byte) {
	kl, vl := nodeKeyLen(p), nodeValLen(p)&^cell.TaggedFlag
	data := unsafe.Add(p, nodeHeader+8*nodeHeight(p))
	if nodeFlags(p)&flagHeap != 0 {
		idx := *(*uint32)(data)
		s.hmu.RLock()
		b := s.heap[idx]
		s.hmu.RUnlock()
		return cell.Key(b[:kl:kl]), b[kl : kl+vl : kl+vl]
	}
	kv := unsafe.Slice((*byte)(data), kl+vl)
	return cell.Key(kv[:kl:kl]), kv[kl : kl+vl : kl+vl]
}

func nodeSize(height, kvLen int) int {
	return (nodeHeader + 8*height + kvLen + 7) &^ 7
}

// alloc carves n bytes (n a multiple of 8) from the current chunk, switching
// to a spare or a new chunk when it is full.
func (s *Segment) alloc(n int) (ref, unsafe.Pointer, error) {
	for {
		c := s.cur.Load()
		if c != nil {
			if b, ok := c.Alloc(n); ok {
				base := unsafe.Pointer(unsafe.SliceData(c.Bytes()))
				p := unsafe.Pointer(unsafe.SliceData(b))
				off := uintptr(p) - uintptr(base)
				return ref(c.ID())<<32 | ref(off), p, nil
			}
		}
		if err := s.nextChunk(c); err != nil {
			return 0, nil, err
		}
	}
}

// nextChunk installs a new current chunk unless another writer already
// replaced old.
func (s *Segment) nextChunk(old *offheap.Chunk) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cur.Load() != old {
		return nil
	}
	var c *offheap.Chunk
	if n := len(s.spare); n > 0 {
		c = s.spare[n-1]
		s.spare = s.spare[:n-1]
	} else {
		var err error
		if c, err = s.getChunkLocked(); err != nil {
			return err
		}
	}
	s.chunks = append(s.chunks, c)
	s.addBaseLocked(c)
	s.cur.Store(c)
	return nil
}

func (s *Segment) getChunkLocked() (*offheap.Chunk, error) {
	if s.refs.Load() <= 0 {
		return nil, ErrClosed
	}
	c, err := s.pool.Get()
	if err != nil {
		if errors.Is(err, offheap.ErrBudgetExceeded) {
			return nil, &fullError{cause: err}
		}
		return nil, err
	}
	s.chunkBytes.Add(int64(s.chunkSize))
	return c, nil
}

// reserve makes sure that n more bytes of nodes can be allocated without
// asking the pool: it keeps spare chunks worth twice the pending
// reservations (a node never straddles chunks, so at most half a chunk is
// lost to tail fragmentation per node of up to maxInline+header bytes).
func (s *Segment) reserve(n int64) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	need := s.pending + n
	had := len(s.spare)
	for int64(len(s.spare))*int64(s.chunkSize) < 2*need {
		c, err := s.getChunkLocked()
		if err != nil {
			// The chunks taken for this reservation go back: kept as spares of a segment that
			// may get no cell (and so no flush), they would be held from every other writer.
			for _, c := range s.spare[had:] {
				c.Release()
				s.chunkBytes.Add(-int64(s.chunkSize))
			}
			clear(s.spare[had:])
			s.spare = s.spare[:had]
			return err
		}
		s.spare = append(s.spare, c)
	}
	s.pending = need
	return nil
}

func (s *Segment) unreserve(n int64) {
	s.mu.Lock()
	s.pending = max(s.pending-n, 0)
	s.mu.Unlock()
}

// A node reaches the next level with probability 1/e, the branching factor that makes a search
// compare the fewest nodes on average: about e·ln n = 1.88·log2 n, against 2·log2 n with 1/2 or
// 1/4 (BenchmarkAddRandom: 7 % less time per insert than with 1/4). Its towers hold 1.58 links on
// average, against 1.33 with 1/4: 2 bytes more per cell.
// heightThresholds[k] is 2^32·e^-k: a draw below it reaches level k+1.
var heightThresholds = func() (t [maxHeight]uint64) {
	for k := range t {
		t[k] = uint64(math.Exp(-float64(k)) * (1 << 32))
	}
	return t
}()

// randomHeight draws a height with P(h > k) = e^-k.
func randomHeight() int {
	r := uint64(rand.Uint32())
	h := 1
	for h < maxHeight && r < heightThresholds[h] {
		h++
	}
	return h
}

// allocNode allocates a node of the given height for a cell of kvLen bytes
// and writes its header and an empty tower. heap says the key and value go
// to the Go heap.
func (s *Segment) allocNode(height int, kvLen int, heap bool) (ref, error) {
	inline := kvLen
	if heap {
		inline = 4
	}
	r, p, err := s.alloc(nodeSize(height, inline))
	if err != nil {
		return 0, err
	}
	*(*uint64)(unsafe.Add(p, 8)) = 0
	*(*uint8)(unsafe.Add(p, 16)) = uint8(height)
	var fl uint8
	if heap {
		fl = flagHeap
	}
	*(*uint8)(unsafe.Add(p, 17)) = fl
	for i := 0; i < height; i++ {
		nodeLink(p, i).Store(0)
	}
	return r, nil
}

// EncodedCellSize is the memstore's estimate of the chunk bytes a cell
// takes (node header, average tower and the key and value). Regions pass
// sums of it to Memstore.Reserve.
func EncodedCellSize(keyLen, valueLen int) int64 {
	return int64(nodeSize(maxHeight, keyLen+valueLen))
}

// add inserts a copy of the cell.
func (s *Segment) add(key cell.Key, value, tags []byte, seq uint64) error {
	if s.frozen.Load() {
		return errors.New("memstore: add to a frozen segment")
	}
	value, vlField := cell.StoredValue(nil, value, tags)
	kvLen := len(key) + len(value)
	if uint64(len(key)) > math.MaxUint32 || uint64(len(value)) >= cell.TaggedFlag {
		return fmt.Errorf("memstore: cell of %d bytes too large", kvLen)
	}
	height := randomHeight()
	heap := kvLen > s.maxInline
	nr, err := s.allocNode(height, kvLen, heap)
	if err != nil {
		return err
	}
	np := s.ptr(nr)
	*(*uint32)(np) = uint32(len(key))
	*(*uint32)(unsafe.Add(np, 4)) = vlField
	*(*uint64)(unsafe.Add(np, 8)) = seq
	data := unsafe.Add(np, nodeHeader+8*height)
	if heap {
		b := make([]byte, kvLen)
		copy(b, key)
		copy(b[len(key):], value)
		s.hmu.Lock()
		idx := len(s.heap)
		s.heap = append(s.heap, b)
		s.hmu.Unlock()
		*(*uint32)(data) = uint32(idx)
		s.heapSize.Add(int64(kvLen))
	} else {
		dst := unsafe.Slice((*byte)(data), kvLen)
		copy(dst, key)
		copy(dst[len(key):], value)
	}

	// Raise the list height if needed.
	for {
		h := s.height.Load()
		if int32(height) <= h || s.height.CompareAndSwap(h, int32(height)) {
			break
		}
	}

	// Find the splice at every level, then link bottom-up with CAS.
	var prev, next [maxHeight]ref
	s.findSplice(key, seq, &prev, &next, int(s.height.Load()))
	for level := 0; level < height; level++ {
		for {
			p, n := prev[level], next[level]
			nodeLink(np, level).Store(n)
			if nodeLink(s.ptr(p), level).CompareAndSwap(n, nr) {
				break
			}
			// Somebody inserted between p and n: recompute this level
			// starting from p (which still precedes our key).
			prev[level], next[level] = s.findSpliceLevel(key, seq, p, level)
		}
	}

	s.cells.Add(1)
	s.dataSize.Add(int64(kvLen))
	ts := key.Timestamp()
	for {
		v := s.minTs.Load()
		if ts >= v || s.minTs.CompareAndSwap(v, ts) {
			break
		}
	}
	for {
		v := s.maxTs.Load()
		if ts <= v || s.maxTs.CompareAndSwap(v, ts) {
			break
		}
	}
	for {
		v := s.maxSeq.Load()
		if seq <= v || s.maxSeq.CompareAndSwap(v, seq) {
			break
		}
	}
	for {
		v := s.minSeq.Load()
		if seq >= v || s.minSeq.CompareAndSwap(v, seq) {
			break
		}
	}
	return nil
}

// less reports whether the node at p sorts before (key, seq); equal
// elements are not less, so a new node goes after existing equal ones.
func (s *Segment) nodeLess(p unsafe.Pointer, key cell.Key, seq uint64) bool {
	k, _ := s.nodeStored(p)
	return cell.CompareWithSeq(k, nodeSeq(p), key, seq) <= 0
}

func (s *Segment) findSplice(key cell.Key, seq uint64, prev, next *[maxHeight]ref, height int) {
	a := s.addrs()
	x := s.head
	px := a.ptr(x)
	var bound ref // the node that ended the level above: known not to be less, no need to compare
	for level := height - 1; level >= 0; level-- {
		for {
			n := nodeLink(px, level).Load()
			if n == 0 || n == bound {
				prev[level], next[level] = x, n
				break
			}
			pn := a.ptr(n)
			if !s.nodeLess(pn, key, seq) {
				prev[level], next[level] = x, n
				break
			}
			x, px = n, pn
		}
		bound = next[level]
	}
	for level := height; level < maxHeight; level++ {
		prev[level], next[level] = s.head, 0
	}
}

func (s *Segment) findSpliceLevel(key cell.Key, seq uint64, from ref, level int) (ref, ref) {
	x, px := from, s.ptr(from)
	for {
		n := nodeLink(px, level).Load()
		if n == 0 {
			return x, 0
		}
		pn := s.ptr(n)
		if !s.nodeLess(pn, key, seq) {
			return x, n
		}
		x, px = n, pn
	}
}

// seekGE returns the first node whose key is >= key in Compare order (for equal keys the first,
// i.e. the newest), or 0. It is the node the search saw after the last one before key, not a
// second load of that node's link: a node inserted in between since would sort before key.
func (s *Segment) seekGE(key cell.Key) ref {
	_, n := s.search(key)
	return n
}

// lastBefore returns the last node whose key is < key in Compare order, or the head when there
// is none.
func (s *Segment) lastBefore(key cell.Key) ref {
	x, _ := s.search(key)
	return x
}

// search descends the levels to the last node whose key is < key (or the head) and returns it
// with the node that followed it at level 0 when the search looked (0 at the end): the first
// node >= key. Writers only insert, so a node another writer links between the two afterwards
// sorts between them too — past the last node before key or before the first one at or after
// it — and a second load of the link could return a node that is still before key.
func (s *Segment) search(key cell.Key) (last, next ref) {
	a := s.addrs()
	x := s.head
	px := a.ptr(x)
	var bound ref // the node that ended the level above: not before key
	for level := int(s.height.Load()) - 1; level >= 0; level-- {
		for {
			n := nodeLink(px, level).Load()
			if n == 0 || n == bound {
				next = n
				break
			}
			pn := a.ptr(n)
			k, _ := s.nodeStored(pn)
			if cell.Compare(k, key) >= 0 {
				bound, next = n, n
				break
			}
			x, px = n, pn
		}
	}
	return x, next
}

// seekLT returns the last node whose key is < key in Compare order, or 0.
func (s *Segment) seekLT(key cell.Key) ref {
	x := s.lastBefore(key)
	if x == s.head {
		return 0
	}
	return x
}

// last returns the last node, or 0.
func (s *Segment) last() ref {
	x := s.head
	for level := int(s.height.Load()) - 1; level >= 0; level-- {
		for {
			n := nodeLink(s.ptr(x), level).Load()
			if n == 0 {
				break
			}
			x = n
		}
	}
	if x == s.head {
		return 0
	}
	return x
}

// retain adds a reference unless the segment is already released.
func (s *Segment) retain() bool {
	for {
		r := s.refs.Load()
		if r <= 0 {
			return false
		}
		if s.refs.CompareAndSwap(r, r+1) {
			return true
		}
	}
}

// release drops a reference; the last one returns the chunks to the pool.
func (s *Segment) release() {
	r := s.refs.Add(-1)
	switch {
	case r > 0:
		return
	case r < 0:
		s.refs.Add(1)
		invariantViolation("segment released more times than retained")
		return
	}
	s.releaseChunks()
}

func (s *Segment) releaseChunks() {
	s.mu.Lock()
	chunks := append(s.chunks, s.spare...)
	s.chunks, s.spare = nil, nil
	s.cur.Store(nil)
	s.bases.Store(nil) // a use after release panics instead of reading reused memory
	s.mu.Unlock()
	s.hmu.Lock()
	s.heap = nil
	s.hmu.Unlock()
	for _, c := range chunks {
		c.Release()
	}
	s.chunkBytes.Store(0)
}

// Stats describes a segment or a memstore.
type Stats struct {
	DataBytes  int64  // key and value bytes of the cells
	HeapBytes  int64  // of which stored on the Go heap (large cells)
	ChunkBytes int64  // chunk memory held (whole chunks)
	Cells      int64  // cell count
	MinTs      int64  // smallest timestamp (math.MaxInt64 when empty)
	MaxTs      int64  // largest timestamp (math.MinInt64 when empty)
	MinSeq     uint64 // smallest sequence id (math.MaxUint64 when empty)
	MaxSeq     uint64 // largest sequence id (0 when empty)
}

// Stats returns the segment's accounting.
func (s *Segment) Stats() Stats {
	return Stats{
		DataBytes:  s.dataSize.Load(),
		HeapBytes:  s.heapSize.Load(),
		ChunkBytes: s.chunkBytes.Load(),
		Cells:      s.cells.Load(),
		MinTs:      s.minTs.Load(),
		MaxTs:      s.maxTs.Load(),
		MinSeq:     s.minSeq.Load(),
		MaxSeq:     s.maxSeq.Load(),
	}
}

// Empty reports whether the segment holds no cell.
func (s *Segment) Empty() bool { return s.cells.Load() == 0 }

// NewScanner returns a scanner over the segment that skips cells with a
// sequence id above readPoint. It holds a reference on the segment until
// Close. It returns an error if the segment was already released.
func (s *Segment) NewScanner(readPoint uint64) (*Scanner, error) {
	if !s.retain() {
		return nil, ErrClosed
	}
	checkScannerOpened(s)
	return &Scanner{seg: s, readPoint: readPoint}, nil
}
