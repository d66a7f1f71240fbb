package offheap

import (
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"unsafe"
)

// ArenaOptions configures NewArena.
type ArenaOptions struct {
	// Name identifies the arena in logs and errors ("memstore", "blockcache").
	Name string
	// Size is the number of usable bytes wanted. It is rounded up to the page
	// size of the backing obtained (2 MiB for THP and 2Mi hugetlb, 1 GiB for
	// 1Gi hugetlb).
	Size int64
	// Hugepages selects the page backing; see HugepageMode.
	Hugepages HugepageMode
	// Budget, if not nil, is charged the rounded size for the arena's lifetime.
	Budget *Budget
	// Logger receives the line saying which backing was obtained; nil means
	// slog.Default().
	Logger *slog.Logger
}

// Arena is one anonymous private mmap region outside the Go heap. The garbage
// collector neither scans nor counts it. Views returned by Slice and Bytes
// are valid until Close; Close unmaps the memory, so a view used after Close
// faults. Owners (ChunkPool, the bucket cache) therefore refuse to Close
// while they have views outstanding.
type Arena struct {
	name      string
	region    region
	mem       []byte
	requested HugepageMode
	budget    *Budget
	reserved  int64

	mu     sync.Mutex
	closed atomic.Bool
}

// live arena accounting by backing, exported as metrics.
var (
	liveArenas [numBackings]atomic.Int64
	liveBytes  [numBackings]atomic.Int64
)

// roundUp rounds n up to a multiple of m (m > 0).
func roundUp(n, m int64) int64 { return (n + m - 1) / m * m }

// NewArena maps a new arena. Errors: a *BudgetError (ErrBudgetExceeded) if
// the budget refuses the size; ErrHugepagesUnavailable if an explicit
// hugepage size was asked for and the kernel refused it; ErrUnsupported off
// Linux. The backing actually obtained is logged and exported as a metric.
func NewArena(opts ArenaOptions) (*Arena, error) {
	if opts.Size <= 0 {
		return nil, fmt.Errorf("offheap: arena %q: size must be positive, got %d", opts.Name, opts.Size)
	}
	log := opts.Logger
	if log == nil {
		log = slog.Default()
	}
	// Round for the coarsest page size this mode can produce, so every
	// fallback maps (and the budget is charged) exactly the same size.
	var align int64
	switch opts.Hugepages {
	case Hugepages1Gi:
		align = 1 << 30
	case Hugepages2Mi, HugepagesAuto:
		align = 2 << 20
	case HugepagesOff:
		align = basePageSize
	default:
		return nil, fmt.Errorf("offheap: arena %q: unknown hugepage mode %d", opts.Name, opts.Hugepages)
	}
	if opts.Size > (1<<62)-align {
		return nil, fmt.Errorf("offheap: arena %q: size %d too large", opts.Name, opts.Size)
	}
	size := roundUp(opts.Size, align)
	if opts.Budget != nil {
		if err := opts.Budget.Reserve(size); err != nil {
			return nil, fmt.Errorf("offheap: arena %q of %s: %w", opts.Name, FormatQuantity(size), err)
		}
	}
	r, notes, err := mapRegion(size, opts.Hugepages)
	if err != nil {
		if opts.Budget != nil {
			opts.Budget.Release(size)
		}
		log.Error("off-heap arena not mapped", "arena", opts.Name, "size", FormatQuantity(size),
			"hugepages", opts.Hugepages.String(), "error", err)
		return nil, fmt.Errorf("offheap: arena %q: %w", opts.Name, err)
	}
	a := &Arena{
		name:      opts.Name,
		region:    r,
		mem:       unsafe.Slice((*byte)(r.addr), r.size),
		requested: opts.Hugepages,
		budget:    opts.Budget,
		reserved:  size,
	}
	liveArenas[r.backing].Add(1)
	liveBytes[r.backing].Add(int64(r.size))
	attrs := []any{"arena", opts.Name, "size", FormatQuantity(int64(r.size)),
		"hugepages", opts.Hugepages.String(), "backing", r.backing.String()}
	if len(notes) > 0 {
		attrs = append(attrs, "fallback", notes)
		log.Warn("off-heap arena mapped without hugetlb pages", attrs...)
	} else {
		log.Info("off-heap arena mapped", attrs...)
	}
	return a, nil
}

// Name returns the arena's name.
func (a *Arena) Name() string { return a.name }

// Size returns the usable size in bytes (the requested size rounded up).
func (a *Arena) Size() int64 { return int64(len(a.mem)) }

// Backing returns the kind of pages actually obtained.
func (a *Arena) Backing() Backing { return a.region.backing }

// Requested returns the hugepage mode that was asked for.
func (a *Arena) Requested() HugepageMode { return a.requested }

// Closed reports whether Close has been called.
func (a *Arena) Closed() bool { return a.closed.Load() }

// Slice returns a view of n bytes at offset off. Its capacity is n, so
// append never writes past it. It fails after Close and for out-of-range
// requests.
func (a *Arena) Slice(off, n int64) ([]byte, error) {
	if a.closed.Load() {
		return nil, fmt.Errorf("offheap: arena %q: %w", a.name, ErrClosed)
	}
	if off < 0 || n < 0 || off > int64(len(a.mem)) || n > int64(len(a.mem))-off {
		return nil, fmt.Errorf("offheap: arena %q: range [%d, %d+%d) outside %d bytes", a.name, off, off, n, len(a.mem))
	}
	return a.mem[off : off+n : off+n], nil
}

// Bytes returns a view of the whole arena.
func (a *Arena) Bytes() ([]byte, error) { return a.Slice(0, int64(len(a.mem))) }

// Close unmaps the arena and returns its bytes to the budget. Closing twice
// returns ErrClosed. Every view taken from the arena is invalid afterwards.
func (a *Arena) Close() error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.closed.Load() {
		return fmt.Errorf("offheap: arena %q: %w", a.name, ErrClosed)
	}
	a.closed.Store(true)
	if err := a.region.unmap(); err != nil {
		return fmt.Errorf("offheap: arena %q: munmap: %w", a.name, err)
	}
	liveArenas[a.region.backing].Add(-1)
	liveBytes[a.region.backing].Add(-int64(a.region.size))
	if a.budget != nil {
		a.budget.Release(a.reserved)
	}
	return nil
}
