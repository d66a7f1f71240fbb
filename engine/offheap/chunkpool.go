package offheap

import (
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
)

const (
	// DefaultChunkSize is the memstore chunk size (HBase's MSLAB default).
	DefaultChunkSize = 2 << 20
	// DefaultSlabSize is how much memory the pool maps at a time.
	DefaultSlabSize = 64 << 20
	// MaxChunkSize bounds ChunkPoolOptions.ChunkSize.
	MaxChunkSize = 1 << 30
)

// ChunkPoolOptions configures NewChunkPool.
type ChunkPoolOptions struct {
	// Name identifies the pool in logs and metrics (e.g. "memstore").
	Name string
	// ChunkSize is the fixed size of every chunk; 0 means DefaultChunkSize.
	ChunkSize int
	// SlabSize is how many bytes are mapped per arena when the pool grows;
	// 0 means DefaultSlabSize. It is rounded up to the arena's page size
	// (1 GiB with --hugepages=1Gi) and every whole chunk in it is used.
	SlabSize int64
	// Hugepages selects the page backing of the arenas.
	Hugepages HugepageMode
	// Budget bounds the bytes the pool may map (required). When it refuses,
	// Get returns an error matching ErrBudgetExceeded.
	Budget *Budget
	// Preallocate maps this many bytes at creation.
	Preallocate int64
	// Logger for arena mapping lines; nil means slog.Default().
	Logger *slog.Logger
}

// ChunkPool hands out fixed-size off-heap chunks for memstores (HBase's
// MSLAB chunk pool). Chunks are carved from arenas mapped a slab at a time,
// bounded by a Budget, and are reused after release rather than unmapped:
// once a memstore segment is flushed its chunks return to the pool for the
// next segment. All methods are safe for concurrent use.
type ChunkPool struct {
	name      string
	chunkSize int64
	slabSize  int64
	hugepages HugepageMode
	budget    *Budget
	log       *slog.Logger

	mu     sync.Mutex
	arenas []*Arena
	free   []*Chunk // LIFO: recently used chunks are warm
	closed bool

	all atomic.Pointer[[]*Chunk] // by id-1; replaced (copy-on-grow) under mu

	mapped atomic.Int64
	inUse  atomic.Int64
	gets   atomic.Int64
	reused atomic.Int64
}

// Chunk is one fixed-size piece of off-heap memory with a bump-pointer
// allocator. The memstore copies cells into views returned by Alloc. A chunk
// is reference counted: Get returns it with one reference (the owner's);
// scanners reading cells in it may Retain it, and every reference ends with
// Release. When the last reference goes the chunk returns to the pool; with
// the invariants build tag it is then poisoned, and any later write through
// a stale view is detected when the chunk is handed out again.
type Chunk struct {
	pool *ChunkPool
	id   uint32
	mem  []byte
	next atomic.Int64
	refs atomic.Int32
}

// NewChunkPool creates a pool. It maps opts.Preallocate bytes up front.
func NewChunkPool(opts ChunkPoolOptions) (*ChunkPool, error) {
	if opts.Budget == nil {
		return nil, fmt.Errorf("offheap: chunk pool %q: a Budget is required", opts.Name)
	}
	cs := int64(opts.ChunkSize)
	if cs == 0 {
		cs = DefaultChunkSize
	}
	if cs < 0 || cs > MaxChunkSize {
		return nil, fmt.Errorf("offheap: chunk pool %q: chunk size %d outside (0, %d]", opts.Name, cs, MaxChunkSize)
	}
	slab := opts.SlabSize
	if slab == 0 {
		slab = DefaultSlabSize
	}
	if slab < 0 {
		return nil, fmt.Errorf("offheap: chunk pool %q: negative slab size %d", opts.Name, slab)
	}
	slab = max(roundUp(slab, cs), cs)
	log := opts.Logger
	if log == nil {
		log = slog.Default()
	}
	p := &ChunkPool{name: opts.Name, chunkSize: cs, slabSize: slab, hugepages: opts.Hugepages,
		budget: opts.Budget, log: log}
	empty := []*Chunk{}
	p.all.Store(&empty)
	if opts.Preallocate > 0 {
		p.mu.Lock()
		for p.mapped.Load() < opts.Preallocate {
			if err := p.growLocked(min(slab, roundUp(opts.Preallocate-p.mapped.Load(), cs))); err != nil {
				p.mu.Unlock()
				_ = p.Close()
				return nil, err
			}
		}
		p.mu.Unlock()
	}
	return p, nil
}

// align returns the page size arenas of this pool are rounded to.
func (p *ChunkPool) align() int64 {
	switch p.hugepages {
	case Hugepages1Gi:
		return 1 << 30
	case HugepagesOff:
		return basePageSize
	}
	return 2 << 20
}

// growLocked maps one more arena of about size bytes and carves it into
// free chunks. Called with p.mu held.
func (p *ChunkPool) growLocked(size int64) error {
	align := p.align()
	minSize := roundUp(p.chunkSize, align)
	size = max(roundUp(size, align), minSize)
	if avail := p.budget.Available() / align * align; avail < size {
		size = max(avail, minSize) // the last slab may be smaller than SlabSize
	}
	a, err := NewArena(ArenaOptions{Name: p.name, Size: size, Hugepages: p.hugepages, Budget: p.budget, Logger: p.log})
	if err != nil {
		return fmt.Errorf("offheap: chunk pool %q: %w", p.name, err)
	}
	mem, err := a.Bytes()
	if err != nil {
		_ = a.Close()
		return err
	}
	n := a.Size() / p.chunkSize
	old := *p.all.Load()
	all := make([]*Chunk, len(old), len(old)+int(n))
	copy(all, old)
	for i := int64(0); i < n; i++ {
		c := &Chunk{pool: p, id: uint32(len(all) + 1), mem: mem[i*p.chunkSize : (i+1)*p.chunkSize : (i+1)*p.chunkSize]}
		poisonChunk(c)
		all = append(all, c)
	}
	// Push in reverse so the lowest ids are handed out first.
	for i := len(all) - 1; i >= len(old); i-- {
		p.free = append(p.free, all[i])
	}
	p.arenas = append(p.arenas, a)
	p.all.Store(&all)
	p.mapped.Add(a.Size())
	return nil
}

// Get returns an empty chunk holding one reference. It reuses a released
// chunk when one is pooled and maps a new slab otherwise. When the budget
// is exhausted the error matches ErrBudgetExceeded: the memstore should
// flush (and release chunks) or make writers wait.
func (p *ChunkPool) Get() (*Chunk, error) {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil, fmt.Errorf("offheap: chunk pool %q: %w", p.name, ErrClosed)
	}
	p.gets.Add(1)
	fresh := len(p.free) == 0
	if fresh {
		if err := p.growLocked(p.slabSize); err != nil {
			p.mu.Unlock()
			return nil, err
		}
	} else {
		p.reused.Add(1)
	}
	c := p.free[len(p.free)-1]
	p.free[len(p.free)-1] = nil
	p.free = p.free[:len(p.free)-1]
	p.inUse.Add(1)
	p.mu.Unlock()

	checkChunkPoison(c)
	c.next.Store(0)
	c.refs.Store(1)
	return c, nil
}

// Chunk returns the chunk with the given id (see Chunk.ID), or nil. Ids are
// stable for the pool's lifetime, so a memstore index may refer to cells by
// (chunk id, offset). Lock-free.
func (p *ChunkPool) Chunk(id uint32) *Chunk {
	all := *p.all.Load()
	if id == 0 || int(id) > len(all) {
		return nil
	}
	return all[id-1]
}

// ChunkSize returns the size of every chunk.
func (p *ChunkPool) ChunkSize() int { return int(p.chunkSize) }

// Name returns the pool's name.
func (p *ChunkPool) Name() string { return p.name }

func (p *ChunkPool) put(c *Chunk) {
	poisonChunk(c)
	p.mu.Lock()
	p.free = append(p.free, c)
	p.inUse.Add(-1)
	p.mu.Unlock()
}

// ChunkPoolStats is a snapshot of a pool's accounting.
type ChunkPoolStats struct {
	ChunkSize   int64 // bytes per chunk
	Chunks      int64 // chunks carved so far
	InUse       int64 // chunks handed out and not yet released
	Free        int64 // chunks pooled for reuse
	MappedBytes int64 // bytes of arenas mapped (charged to the budget)
	// HeldBytes is the chunk memory held by memstores: InUse * ChunkSize.
	HeldBytes int64
	// DataBytes is the bytes allocated (Alloc) in chunks in use: the data
	// size. HeldBytes - DataBytes is the overhead (chunk tails, unused
	// space of open chunks).
	DataBytes     int64
	OverheadBytes int64
	Gets          int64 // successful and failed Get calls
	Reused        int64 // Gets served from pooled chunks
}

// Stats returns the pool's accounting. It walks the chunk table (O(chunks))
// and takes no lock; it is meant for metrics and tests, not hot paths.
func (p *ChunkPool) Stats() ChunkPoolStats {
	all := *p.all.Load()
	var inUse, data int64
	for _, c := range all {
		if c.refs.Load() > 0 {
			inUse++
			data += min(c.next.Load(), p.chunkSize)
		}
	}
	s := ChunkPoolStats{
		ChunkSize:   p.chunkSize,
		Chunks:      int64(len(all)),
		InUse:       inUse,
		Free:        int64(len(all)) - inUse,
		MappedBytes: p.mapped.Load(),
		HeldBytes:   inUse * p.chunkSize,
		DataBytes:   data,
		Gets:        p.gets.Load(),
		Reused:      p.reused.Load(),
	}
	s.OverheadBytes = s.HeldBytes - s.DataBytes
	return s
}

// Close unmaps every arena and returns the memory to the budget. It fails
// with ErrInUse (and unmaps nothing) while chunks are still referenced, so
// that no stale view can fault.
func (p *ChunkPool) Close() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return fmt.Errorf("offheap: chunk pool %q: %w", p.name, ErrClosed)
	}
	if n := p.inUse.Load(); n > 0 {
		return fmt.Errorf("offheap: chunk pool %q: %d chunks not released: %w", p.name, n, ErrInUse)
	}
	p.closed = true
	var errs []error
	for _, a := range p.arenas {
		errs = append(errs, a.Close())
	}
	p.arenas = nil
	p.free = nil
	p.mapped.Store(0)
	return errors.Join(errs...)
}

// ID returns the chunk's id, unique and stable within its pool (never 0).
func (c *Chunk) ID() uint32 { return c.id }

// Size returns the chunk's size in bytes.
func (c *Chunk) Size() int { return len(c.mem) }

// Used returns the bytes allocated so far.
func (c *Chunk) Used() int { return int(c.next.Load()) }

// Alloc reserves n bytes and returns a view of them (capacity n) to copy a
// cell into. It is lock-free and safe for concurrent use. ok is false when
// the chunk has less than n bytes left (the caller takes a new chunk) or n
// is negative; cells larger than the chunk cannot be placed in chunks and
// belong on the heap (as in HBase's MSLAB, which caps allocations at
// 256 KiB).
func (c *Chunk) Alloc(n int) (b []byte, ok bool) {
	checkChunkLive(c, "Alloc")
	size := int64(len(c.mem))
	if n < 0 || int64(n) > size {
		return nil, false
	}
	for {
		off := c.next.Load()
		end := off + int64(n)
		if end > size {
			return nil, false
		}
		if c.next.CompareAndSwap(off, end) {
			return c.mem[off:end:end], true
		}
	}
}

// Bytes returns a view of the whole chunk (length Size). Cells written
// through Alloc are at the offsets where Alloc placed them.
func (c *Chunk) Bytes() []byte {
	checkChunkLive(c, "Bytes")
	return c.mem
}

// Retain adds a reference (for a scanner reading cells in the chunk).
func (c *Chunk) Retain() {
	if r := c.refs.Add(1); r <= 1 {
		c.refs.Add(-1)
		invariantViolation(fmt.Sprintf("Retain on chunk %d of pool %q after its last release", c.id, c.pool.name))
	}
}

// Release drops a reference. The last release returns the chunk to the
// pool. Releasing more often than Get/Retain is a bug, detected and reported
// as an invariant violation (a panic under the invariants tag); the chunk is
// not pooled twice.
func (c *Chunk) Release() {
	r := c.refs.Add(-1)
	switch {
	case r > 0:
		return
	case r < 0:
		c.refs.Add(1)
		invariantViolation(fmt.Sprintf("chunk %d of pool %q released more times than it was acquired", c.id, c.pool.name))
		return
	}
	c.pool.put(c)
}
