package offheap

import (
	"fmt"
	"sync/atomic"
)

// Budget bounds and accounts off-heap bytes. Reservations are lock-free
// (compare-and-swap on one counter per budget). A budget may have a parent:
// a reservation must fit both, so a process-wide "offheap" budget can bound
// the sum of the memstore and block-cache budgets.
//
// The zero value is not usable; create budgets with NewBudget.
type Budget struct {
	name    string
	limit   int64
	parent  *Budget
	used    atomic.Int64
	peak    atomic.Int64
	refused atomic.Int64
}

// NewBudget returns a budget of limit bytes. A limit of 0 refuses every
// non-empty reservation; parent may be nil.
func NewBudget(name string, limit int64, parent *Budget) (*Budget, error) {
	if limit < 0 {
		return nil, fmt.Errorf("off-heap budget %q: negative limit %d", name, limit)
	}
	return &Budget{name: name, limit: limit, parent: parent}, nil
}

// Name returns the budget's name.
func (b *Budget) Name() string { return b.name }

// Limit returns the budget's limit in bytes.
func (b *Budget) Limit() int64 { return b.limit }

// Used returns the bytes currently reserved.
func (b *Budget) Used() int64 { return b.used.Load() }

// Peak returns the highest reservation seen.
func (b *Budget) Peak() int64 { return b.peak.Load() }

// Refused returns how many reservations this budget refused.
func (b *Budget) Refused() int64 { return b.refused.Load() }

// Parent returns the parent budget or nil.
func (b *Budget) Parent() *Budget { return b.parent }

// Reserve reserves n bytes in b and all its parents. If any of them would
// exceed its limit nothing is reserved and a *BudgetError (matching
// ErrBudgetExceeded) is returned.
func (b *Budget) Reserve(n int64) error {
	if n < 0 {
		return fmt.Errorf("off-heap budget %q: negative reservation %d", b.name, n)
	}
	for cur := b; cur != nil; cur = cur.parent {
		if err := cur.reserveOne(n); err != nil {
			for undo := b; undo != cur; undo = undo.parent {
				undo.used.Add(-n)
			}
			return err
		}
	}
	return nil
}

func (b *Budget) reserveOne(n int64) error {
	for {
		used := b.used.Load()
		if n > b.limit-used {
			b.refused.Add(1)
			return &BudgetError{Budget: b.name, Requested: n, Used: used, Limit: b.limit}
		}
		if b.used.CompareAndSwap(used, used+n) {
			for {
				p := b.peak.Load()
				if used+n <= p || b.peak.CompareAndSwap(p, used+n) {
					break
				}
			}
			return nil
		}
	}
}

// Release returns n bytes reserved earlier with Reserve to b and its
// parents. Releasing more than is reserved is a bug: it is reported as an
// invariant violation and the counter is clamped at zero.
func (b *Budget) Release(n int64) {
	for cur := b; cur != nil; cur = cur.parent {
		if v := cur.used.Add(-n); v < 0 {
			cur.used.Add(-v)
			invariantViolation(fmt.Sprintf("off-heap budget %q released %d bytes more than reserved", cur.name, -v))
		}
	}
}

func (b *Budget) String() string {
	return fmt.Sprintf("%s: %s of %s", b.name, FormatQuantity(b.Used()), FormatQuantity(b.limit))
}

// Available returns how many more bytes b (and every parent) would accept
// right now. Concurrent reservations may change it at any time; Reserve is
// the authority.
func (b *Budget) Available() int64 {
	avail := int64(1<<63 - 1)
	for cur := b; cur != nil; cur = cur.parent {
		avail = min(avail, cur.limit-cur.used.Load())
	}
	return max(avail, 0)
}
