package resources

import (
	"fmt"
	"strings"

	"github.com/cellstore/cellstore/operator/api/v1alpha1"
	"k8s.io/apimachinery/pkg/api/resource"
)

const (
	mi = int64(1) << 20
	gi = int64(1) << 30

	// MinOverhead is the least memory a region server keeps outside its heap and off-heap budgets
	// (the engine's --memory-overhead default: binary, thread stacks, page tables, kernel memory and
	// dirty page cache charged to the cgroup). The overhead is the larger of it and OverheadPercent
	// of the limit.
	MinOverhead = 256 * mi
	// OverheadDivisor: a tenth of the memory limit is the overhead on large containers.
	OverheadDivisor = 10
	// MinHeapForRequests is the least heap a region server keeps beyond the on-heap block cache.
	MinHeapForRequests = 64 * mi
	// MaxOnHeapCachePercent is the most of the heap the on-heap block cache may use.
	MaxOnHeapCachePercent = 80
	// MinRegionServerMemory is the smallest memory limit of a region server.
	MinRegionServerMemory = gi
	// DefaultRegionServerMemory is memory.limit when unset (the CRD's default).
	DefaultRegionServerMemory = 2 * gi
)

// MemoryPlan is a region server's memory, every number in bytes.
type MemoryPlan struct {
	// Limit is the container's memory request and limit.
	Limit int64
	// Heap is the Go heap limit (--heap-limit), including the on-heap block cache.
	Heap int64
	// HeapSource says where Heap comes from: "memory.heapLimit", "memory.heapPercent" or
	// "derived" (what the limit leaves).
	HeapSource        string
	MemstoreOffHeap   int64
	BlockCacheOffHeap int64
	BlockCacheOnHeap  int64
	// Overhead is max(MinOverhead, Limit/10).
	Overhead int64
	// HugePageSize is 0 without hugepages, else 2Mi or 1Gi; HugePageName is "2Mi" or "1Gi".
	HugePageSize int64
	HugePageName string
	// HugePages is the hugepage memory requested (requests = limits).
	HugePages int64
	// InMemoryOffHeap is the off-heap memory charged to the memory limit (0 with hugepages).
	InMemoryOffHeap int64
}

// Total is what the memory limit must hold.
func (p MemoryPlan) Total() int64 { return p.Heap + p.InMemoryOffHeap + p.Overhead }

// HugepagesFlag is the engine's --hugepages value.
func (p MemoryPlan) HugepagesFlag() string {
	if p.HugePageName == "" {
		return "off"
	}
	return p.HugePageName
}

// MemoryError says why a region server's memory does not fit; it carries the plan.
type MemoryError struct {
	Plan   MemoryPlan
	Reason string
}

func (e *MemoryError) Error() string {
	p := e.Plan
	var b strings.Builder
	fmt.Fprintf(&b, "%s: heap %s (%s, includes on-heap block cache %s) + off-heap memstore %s + off-heap block cache %s",
		e.Reason, FormatBytes(p.Heap), p.HeapSource, FormatBytes(p.BlockCacheOnHeap), FormatBytes(p.MemstoreOffHeap), FormatBytes(p.BlockCacheOffHeap))
	if p.HugePageSize > 0 {
		fmt.Fprintf(&b, " (in %s of hugepages-%s, outside the memory limit)", FormatBytes(p.HugePages), p.HugePageName)
	}
	fmt.Fprintf(&b, " + overhead %s = %s; spec.regionServers.memory.limit is %s", FormatBytes(p.Overhead), FormatBytes(p.Total()), FormatBytes(p.Limit))
	if p.Total() > p.Limit {
		fmt.Fprintf(&b, " (%s over): lower the budgets or raise the limit", FormatBytes(p.Total()-p.Limit))
	}
	return b.String()
}

// FormatBytes writes n as a Kubernetes quantity (1792Mi, 2Gi, or plain bytes).
func FormatBytes(n int64) string {
	return resource.NewQuantity(n, resource.BinarySI).String()
}

// ParseBytes parses a ByteSize; field names it in the error.
func ParseBytes(field string, s v1alpha1.ByteSize) (int64, error) {
	q, err := resource.ParseQuantity(string(s))
	if err != nil {
		return 0, fmt.Errorf("%s: %q is not a size such as 512Mi or 8Gi", field, string(s))
	}
	n, ok := q.AsInt64()
	if !ok || n < 0 {
		return 0, fmt.Errorf("%s: %q is not a whole, non-negative number of bytes below 8Ei", field, string(s))
	}
	return n, nil
}

func optionalBytes(field string, s *v1alpha1.ByteSize) (n int64, set bool, err error) {
	if s == nil {
		return 0, false, nil
	}
	n, err = ParseBytes(field, *s)
	return n, err == nil, err
}

func roundUp(n, unit int64) int64 {
	if unit <= 0 || n%unit == 0 {
		return n
	}
	return (n/unit + 1) * unit
}

func floorMi(n int64) int64 { return n / mi * mi }

// Overhead is the memory a region server with this limit keeps outside its budgets.
func Overhead(limit int64) int64 {
	return max(MinOverhead, limit/OverheadDivisor)
}

// PlanRegionServerMemory computes a region server's memory from spec.regionServers.memory, filling
// in the defaults, and checks that it fits. On error the returned plan holds the numbers it checked.
//
//   - limit: memory.limit (2Gi when unset); overhead = max(256Mi, 10% of the limit).
//   - heap: memory.heapLimit, or memory.heapPercent of the limit, or else what the limit leaves
//     after the off-heap budgets charged to it and the overhead.
//   - off-heap budgets left unset: with hugepages, half of the hugepages each (rounded to pages);
//     with an explicit heap, an equal share of what the limit leaves; otherwise a quarter of the
//     limit each (rounded down to MiB).
//   - on-heap block cache left unset: a tenth of the heap (rounded down to MiB).
//   - checks: heap + off-heap outside hugepages + overhead <= limit; the off-heap budgets, each
//     rounded up to whole pages, fit the hugepages; the heap keeps 64Mi beyond the on-heap block
//     cache, which may use at most 80% of it.
func PlanRegionServerMemory(m v1alpha1.RegionServerMemory) (MemoryPlan, error) {
	const field = "spec.regionServers.memory."
	p := MemoryPlan{Limit: DefaultRegionServerMemory}
	if m.Limit != nil {
		n, err := ParseBytes(field+"limit", *m.Limit)
		if err != nil {
			return p, err
		}
		p.Limit = n
	}
	if p.Limit < MinRegionServerMemory {
		return p, &MemoryError{Plan: p, Reason: fmt.Sprintf("memory.limit %s is below the minimum %s", FormatBytes(p.Limit), FormatBytes(MinRegionServerMemory))}
	}
	p.Overhead = Overhead(p.Limit)

	ms, msSet, err := optionalBytes(field+"memstoreOffHeapSize", m.MemstoreOffHeapSize)
	if err != nil {
		return p, err
	}
	bc, bcSet, err := optionalBytes(field+"blockCacheOffHeapSize", m.BlockCacheOffHeapSize)
	if err != nil {
		return p, err
	}
	oh, ohSet, err := optionalBytes(field+"blockCacheOnHeapSize", m.BlockCacheOnHeapSize)
	if err != nil {
		return p, err
	}
	heap, heapSet, err := optionalBytes(field+"heapLimit", m.HeapLimit)
	if err != nil {
		return p, err
	}
	switch {
	case heapSet && m.HeapPercent != nil:
		return p, fmt.Errorf("%sheapLimit and %sheapPercent are both set: set one", field, field)
	case heapSet:
		p.HeapSource = "memory.heapLimit"
	case m.HeapPercent != nil:
		pct := int64(*m.HeapPercent)
		if pct < 10 || pct > 90 {
			return p, fmt.Errorf("%sheapPercent %d is outside 10..90", field, pct)
		}
		heap, heapSet = p.Limit/100*pct+p.Limit%100*pct/100, true
		p.HeapSource = "memory.heapPercent"
	default:
		p.HeapSource = "derived"
	}

	if hp := m.HugePages; hp != nil {
		switch hp.PageSize {
		case "2Mi":
			p.HugePageSize = 2 * mi
		case "1Gi":
			p.HugePageSize = gi
		default:
			return p, fmt.Errorf("%shugePages.pageSize %q is not 2Mi or 1Gi", field, hp.PageSize)
		}
		p.HugePageName = hp.PageSize
		if p.HugePages, err = ParseBytes(field+"hugePages.amount", hp.Amount); err != nil {
			return p, err
		}
		if p.HugePages <= 0 || p.HugePages%p.HugePageSize != 0 {
			return p, fmt.Errorf("%shugePages.amount %s must be a positive multiple of the page size %s", field, FormatBytes(p.HugePages), hp.PageSize)
		}
		switch {
		case !msSet && !bcSet:
			ms = p.HugePages / 2 / p.HugePageSize * p.HugePageSize
			bc = p.HugePages - ms
		case !msSet:
			ms = max(0, p.HugePages-roundUp(bc, p.HugePageSize))
		case !bcSet:
			bc = max(0, p.HugePages-roundUp(ms, p.HugePageSize))
		}
		p.MemstoreOffHeap, p.BlockCacheOffHeap = ms, bc
		if !heapSet {
			heap = p.Limit - p.Overhead
		}
	} else {
		if heapSet {
			unset := 0
			left := p.Limit - p.Overhead - heap
			for _, s := range []struct {
				set bool
				n   int64
			}{{msSet, ms}, {bcSet, bc}} {
				if s.set {
					left -= s.n
				} else {
					unset++
				}
			}
			share := int64(0)
			if unset > 0 && left > 0 {
				share = floorMi(left / int64(unset))
			}
			if !msSet {
				ms = share
			}
			if !bcSet {
				bc = share
			}
		} else {
			if !msSet {
				ms = floorMi(p.Limit / 4)
			}
			if !bcSet {
				bc = floorMi(p.Limit / 4)
			}
			heap = p.Limit - p.Overhead - ms - bc
		}
		p.MemstoreOffHeap, p.BlockCacheOffHeap = ms, bc
		p.InMemoryOffHeap = ms + bc
	}
	p.Heap = heap
	if ohSet {
		p.BlockCacheOnHeap = oh
	} else {
		p.BlockCacheOnHeap = floorMi(max(0, heap) / 10)
	}

	switch {
	case p.HugePageSize > 0 && roundUp(p.MemstoreOffHeap, p.HugePageSize)+roundUp(p.BlockCacheOffHeap, p.HugePageSize) > p.HugePages:
		return p, &MemoryError{Plan: p, Reason: fmt.Sprintf(
			"the off-heap memstore %s and block cache %s, each rounded up to whole %s pages, need %s but memory.hugePages.amount is %s",
			FormatBytes(p.MemstoreOffHeap), FormatBytes(p.BlockCacheOffHeap), p.HugePageName,
			FormatBytes(roundUp(p.MemstoreOffHeap, p.HugePageSize)+roundUp(p.BlockCacheOffHeap, p.HugePageSize)), FormatBytes(p.HugePages))}
	case p.Total() > p.Limit:
		return p, &MemoryError{Plan: p, Reason: "region server memory budgets exceed the memory limit"}
	case p.Heap < p.BlockCacheOnHeap+MinHeapForRequests:
		return p, &MemoryError{Plan: p, Reason: fmt.Sprintf("the heap %s leaves less than %s beyond the on-heap block cache %s",
			FormatBytes(p.Heap), FormatBytes(MinHeapForRequests), FormatBytes(p.BlockCacheOnHeap))}
	case p.BlockCacheOnHeap*100 > p.Heap*MaxOnHeapCachePercent:
		return p, &MemoryError{Plan: p, Reason: fmt.Sprintf("the on-heap block cache %s is more than %d%% of the heap %s",
			FormatBytes(p.BlockCacheOnHeap), MaxOnHeapCachePercent, FormatBytes(p.Heap))}
	}
	return p, nil
}

// MasterHeapLimit is the masters' GOMEMLIMIT: the memory limit minus the overhead, or 0 (unset) when
// there is no memory limit or it is too small to leave 64Mi.
func MasterHeapLimit(limit int64) int64 {
	if limit <= 0 {
		return 0
	}
	h := limit - Overhead(limit)
	if h < MinHeapForRequests {
		return 0
	}
	return h
}
