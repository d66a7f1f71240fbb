package offheap

import (
	"errors"
	"fmt"
)

var (
	// ErrBudgetExceeded is returned (wrapped in a *BudgetError) when a
	// reservation would take a Budget, or one of its parents, past its limit.
	// Callers are expected to handle it: a memstore flushes or blocks writers,
	// a cache evicts or declines to cache.
	ErrBudgetExceeded = errors.New("off-heap budget exceeded")

	// ErrClosed is returned when an Arena, ChunkPool or a cache built on them
	// is used after Close.
	ErrClosed = errors.New("off-heap memory already closed")

	// ErrInUse is returned by Close when memory handed out is still referenced
	// (chunks not released); the memory stays mapped so no reader faults.
	ErrInUse = errors.New("off-heap memory still in use")

	// ErrHugepagesUnavailable is returned when hugepages of an explicitly
	// requested size (--hugepages=2Mi or 1Gi) cannot be obtained.
	ErrHugepagesUnavailable = errors.New("hugepages unavailable")

	// ErrMemoryLimit is returned (wrapped in a *MemoryLimitError) by
	// MemoryConfig.Validate when the configured budgets do not fit the memory
	// limit of the process's cgroup (or of the machine).
	ErrMemoryLimit = errors.New("memory budgets exceed the memory limit")

	// ErrUnsupported is returned on platforms without the required mmap
	// features (off-heap arenas need Linux).
	ErrUnsupported = errors.New("off-heap arenas are only supported on Linux")
)

// BudgetError describes a refused reservation. It matches ErrBudgetExceeded
// with errors.Is.
type BudgetError struct {
	Budget    string // name of the budget that refused (may be a parent)
	Requested int64  // bytes asked for
	Used      int64  // bytes already reserved in that budget
	Limit     int64  // the budget's limit in bytes
}

func (e *BudgetError) Error() string {
	return fmt.Sprintf("off-heap budget %q exceeded: requested %s with %s of %s already in use (%s free)",
		e.Budget, FormatQuantity(e.Requested), FormatQuantity(e.Used), FormatQuantity(e.Limit),
		FormatQuantity(max(e.Limit-e.Used, 0)))
}

// Unwrap makes errors.Is(err, ErrBudgetExceeded) true.
func (e *BudgetError) Unwrap() error { return ErrBudgetExceeded }
