package offheap

import (
	"errors"
	"strings"
	"sync"
	"testing"
)

func TestBudgetReserveRelease(t *testing.T) {
	parent, err := NewBudget("offheap", 100, nil)
	if err != nil {
		t.Fatal(err)
	}
	child, _ := NewBudget("memstore", 80, parent)
	other, _ := NewBudget("blockcache", 80, parent)

	if err := child.Reserve(60); err != nil {
		t.Fatalf("Reserve(60): %v", err)
	}
	// other fits its own limit but not the parent's.
	err = other.Reserve(50)
	if !errors.Is(err, ErrBudgetExceeded) {
		t.Fatalf("Reserve over parent: got %v, want ErrBudgetExceeded", err)
	}
	var be *BudgetError
	if !errors.As(err, &be) || be.Budget != "offheap" || be.Used != 60 || be.Limit != 100 || be.Requested != 50 {
		t.Fatalf("BudgetError = %+v", be)
	}
	if other.Used() != 0 || parent.Used() != 60 {
		t.Fatalf("failed reservation leaked: other %d parent %d", other.Used(), parent.Used())
	}
	if got := other.Available(); got != 40 {
		t.Fatalf("Available = %d, want 40", got)
	}
	if err := child.Reserve(21); !errors.Is(err, ErrBudgetExceeded) || !strings.Contains(err.Error(), `"memstore"`) {
		t.Fatalf("Reserve over own limit: %v", err)
	}
	child.Release(60)
	if child.Used() != 0 || parent.Used() != 0 {
		t.Fatalf("after release: %d %d", child.Used(), parent.Used())
	}
	if child.Peak() != 60 || parent.Refused() != 1 || child.Refused() != 1 {
		t.Fatalf("peak %d refused %d/%d", child.Peak(), parent.Refused(), child.Refused())
	}
	if err := child.Reserve(-1); err == nil {
		t.Fatal("negative reservation accepted")
	}
	if _, err := NewBudget("x", -1, nil); err == nil {
		t.Fatal("negative limit accepted")
	}
}

func TestBudgetConcurrentNeverExceeds(t *testing.T) {
	parent, _ := NewBudget("offheap", 1000, nil)
	a, _ := NewBudget("a", 700, parent)
	b, _ := NewBudget("b", 700, parent)
	var wg sync.WaitGroup
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func(bud *Budget) {
			defer wg.Done()
			for i := 0; i < 2000; i++ {
				if bud.Reserve(7) == nil {
					if u := parent.Used(); u > parent.Limit() {
						t.Errorf("parent over limit: %d", u)
					}
					bud.Release(7)
				}
			}
		}([]*Budget{a, b}[g%2])
	}
	wg.Wait()
	if parent.Used() != 0 || a.Used() != 0 || b.Used() != 0 {
		t.Fatalf("leak: %d %d %d", parent.Used(), a.Used(), b.Used())
	}
	if parent.Peak() > 1000 || a.Peak() > 700 {
		t.Fatalf("peak over limit: %d %d", parent.Peak(), a.Peak())
	}
}
