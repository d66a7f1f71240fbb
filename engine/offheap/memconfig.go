package offheap

import (
	"errors"
	"fmt"
	"log/slog"
	"math"
	"os"
	"runtime/debug"
	"strconv"
	"strings"

	"github.com/spf13/pflag"
)

const (
	// DefaultMemoryOverhead is the memory the process uses outside the Go
	// heap limit and the off-heap budgets: the binary and its data, OS
	// thread stacks, page tables for the off-heap arenas (about 0.2% of
	// memory on 4 KiB pages), rounding of arenas to hugepage sizes, kernel
	// memory charged to the cgroup (socket buffers, dentries) and dirty page
	// cache of WAL and store-file writes, which the memory cgroup counts.
	// Raise it (--memory-overhead) for very large off-heap budgets on base
	// pages or for write-heavy servers.
	DefaultMemoryOverhead = 256 << 20

	// minHeapForRequests is the least heap (beyond the on-heap block cache)
	// a derived heap limit may leave for request state and metadata.
	minHeapForRequests = 64 << 20

	// DefaultGCPercent is the region server's GOGC. With bulk data off the
	// heap the live heap is small (tens of MiB), and GOGC=100 would start a
	// GC cycle every few tens of MiB of request garbage; 400 cuts the cycle
	// count (and with it GC CPU and the number of stop-the-world pauses)
	// about fourfold while the heap stays far below the heap limit, which
	// still bounds it (docs/offheap.md has the measurements).
	DefaultGCPercent = 400

	// DefaultRequestQueue is the largest derived request queue (HBase's
	// hbase.ipc.server.max.callqueue.size is 1 GiB of a larger heap).
	DefaultRequestQueue = 256 << 20
	// minRequestQueue is the least derived request queue.
	minRequestQueue = 8 << 20
	// DefaultFunctionMemory is the largest derived memory of table functions'
	// instances; minFunctionMemory the least (two functions of the default
	// MEMORY_MB, each keeping a hook and an endpoint instance).
	DefaultFunctionMemory = 1 << 30
	minFunctionMemory     = 64 << 20

	// maxOnheapCacheShare: the on-heap cache may use at most this share of
	// the heap limit (as HBase keeps caches and memstores under 80% of heap).
	maxOnheapCacheShare = 0.8
)

// MemoryConfig holds the region server's memory budgets. Register the
// flags with AddFlags, then call Validate and apply the returned plan.
type MemoryConfig struct {
	// HeapLimit is the Go heap limit (GOMEMLIMIT). 0 derives it: the
	// GOMEMLIMIT environment variable if set, else the memory limit minus
	// the off-heap budgets and the overhead.
	HeapLimit Quantity
	// MemstoreOffheap is the off-heap budget of the memstore chunk pool.
	MemstoreOffheap Quantity
	// BlockCacheOffheap is the off-heap budget of the L2 bucket cache.
	BlockCacheOffheap Quantity
	// BlockCacheOnheap is the size of the L1 on-heap cache (index and bloom
	// blocks). It lives inside the heap limit.
	BlockCacheOnheap Quantity
	// RequestQueue bounds the bytes of client requests read and not yet
	// answered plus answers not yet sent (the data path's admission
	// control). It lives inside the heap limit. 0 derives it: a quarter of
	// the heap beyond the on-heap cache, at most DefaultRequestQueue.
	RequestQueue Quantity
	// FunctionMemory bounds what table functions' instances may reach
	// together (the sum of their MEMORY_MB: their linear memories live on the
	// Go heap). It lives inside the heap limit. 0 derives it: a quarter of
	// the heap beyond the on-heap cache, between 64 MiB and
	// DefaultFunctionMemory.
	FunctionMemory Quantity
	// Overhead is memory used outside heap and off-heap budgets; see
	// DefaultMemoryOverhead.
	Overhead Quantity
	// Hugepages selects the page backing of the off-heap arenas.
	Hugepages HugepageMode
	// GCPercent is the Go GC's target percentage (GOGC). 0 uses the GOGC
	// environment variable if set, else DefaultGCPercent; -1 turns the
	// proportional trigger off (the heap limit alone starts cycles).
	GCPercent int
	// Root is the file system root /proc and /sys are read from ("" = "/").
	// Tests point it at sample trees.
	Root string
}

// DefaultMemoryConfig returns the defaults used for the flags.
func DefaultMemoryConfig() MemoryConfig {
	return MemoryConfig{
		MemstoreOffheap:   1 << 30,
		BlockCacheOffheap: 1 << 30,
		BlockCacheOnheap:  128 << 20,
		Overhead:          DefaultMemoryOverhead,
		Hugepages:         HugepagesAuto,
	}
}

// AddFlags registers --heap-limit, --memstore-offheap-size,
// --blockcache-offheap-size, --blockcache-onheap-size, --memory-overhead
// and --hugepages on fs, with c's current values as defaults. Sizes accept
// Kubernetes quantities (512Mi, 2Gi) and plain bytes.
func (c *MemoryConfig) AddFlags(fs *pflag.FlagSet) {
	fs.Var(&c.HeapLimit, "heap-limit",
		"Go heap limit (sets GOMEMLIMIT); 0 uses GOMEMLIMIT if set, else the memory limit minus off-heap budgets and --memory-overhead")
	fs.Var(&c.MemstoreOffheap, "memstore-offheap-size", "off-heap memory for memstore chunks")
	fs.Var(&c.BlockCacheOffheap, "blockcache-offheap-size", "off-heap memory for the L2 bucket cache (data blocks)")
	fs.Var(&c.BlockCacheOnheap, "blockcache-onheap-size", "on-heap L1 block cache (index and bloom blocks); counted inside the heap limit")
	fs.Var(&c.RequestQueue, "request-queue-size",
		"bytes of client requests being served and answers not yet sent, over all connections; past it no connection is read (backpressure); "+
			"counted inside the heap limit; 0 derives a quarter of the heap beyond the on-heap cache, at most 256Mi")
	fs.Var(&c.FunctionMemory, "function-memory",
		"memory table functions' instances may reach together (the sum of their MEMORY_MB); a loaded function keeps two, further instances take what is left; "+
			"counted inside the heap limit; 0 derives a quarter of the heap beyond the on-heap cache, between 64Mi and 1Gi")
	fs.Var(&c.Overhead, "memory-overhead",
		"memory used outside the heap limit and off-heap budgets (binary, thread stacks, page tables, kernel and dirty page cache charged to the cgroup)")
	fs.Var(&c.Hugepages, "hugepages",
		"page backing for off-heap memory: off, auto (hugetlb 2Mi, else transparent hugepages, else base pages), 2Mi or 1Gi (hugetlb pages required)")
	fs.IntVar(&c.GCPercent, "gc-percent", c.GCPercent,
		fmt.Sprintf("Go GC target percentage; 0 uses GOGC if set, else %d (the live heap is small: bulk data is off-heap); -1 leaves GC to the heap limit alone", DefaultGCPercent))
}

// MemoryPlan is a validated configuration with every number Validate used.
type MemoryPlan struct {
	HeapLimit          int64
	HeapLimitSource    string // "--heap-limit", "GOMEMLIMIT" or "derived"
	MemstoreOffheap    int64
	BlockCacheOffheap  int64
	BlockCacheOnheap   int64
	RequestQueue       int64
	RequestQueueSource string // "--request-queue-size" or "derived"
	FunctionMemory     int64
	FunctionMemorySrc  string // "--function-memory" or "derived"
	Overhead           int64
	Hugepages          HugepageMode
	GCPercent          int    // -1 = off
	GCPercentSource    string // "--gc-percent", "GOGC" or "default"

	// HugepageBacked is the off-heap memory expected on hugetlb pages
	// (explicit 2Mi/1Gi modes, rounded to whole pages). Unless the cgroup
	// accounts hugetlb in memory.max it is outside the memory limit.
	HugepageBacked int64
	// RegularOffheap is the off-heap memory on ordinary or transparent huge
	// pages, charged to the memory cgroup. In auto mode all off-heap memory
	// is counted here, since the hugetlb attempt may fall back.
	RegularOffheap int64
	// Total is what the memory limit must hold: heap + regular off-heap +
	// overhead (+ hugepage-backed memory when the cgroup accounts it).
	Total int64
	// Limit is the memory limit checked against (Unlimited if unknown).
	Limit       int64
	LimitSource string
	Cgroup      CgroupMemory
	// HugepagePool is the hugetlb pool consulted (nil if not read).
	HugepagePool *HugepagePool
	// Notes are informational findings (fallbacks to expect and the like).
	Notes []string
}

// MemoryLimitError is returned when budgets do not fit the memory limit.
// It matches ErrMemoryLimit.
type MemoryLimitError struct {
	Plan   MemoryPlan
	Reason string // what is wrong, in one sentence
}

func (e *MemoryLimitError) Error() string {
	p := e.Plan
	var b strings.Builder
	fmt.Fprintf(&b, "%s: heap limit %s (%s, includes on-heap block cache %s) + memstore off-heap %s + block cache off-heap %s",
		e.Reason, FormatQuantity(p.HeapLimit), p.HeapLimitSource, FormatQuantity(p.BlockCacheOnheap),
		FormatQuantity(p.MemstoreOffheap), FormatQuantity(p.BlockCacheOffheap))
	if p.HugepageBacked > 0 {
		if p.Cgroup.HugetlbAccounting {
			fmt.Fprintf(&b, " (%s on hugetlb pages, counted: cgroup has memory_hugetlb_accounting)", FormatQuantity(p.HugepageBacked))
		} else {
			fmt.Fprintf(&b, " (%s on hugetlb pages, not counted against the memory limit)", FormatQuantity(p.HugepageBacked))
		}
	}
	limit := "unknown"
	if p.Limit >= 0 {
		limit = FormatQuantity(p.Limit)
	}
	fmt.Fprintf(&b, " + overhead %s = total %s; memory limit %s (%s)",
		FormatQuantity(p.Overhead), FormatQuantity(p.Total), limit, p.LimitSource)
	if p.Limit >= 0 && p.Total > p.Limit {
		fmt.Fprintf(&b, "; %s over: lower the budgets or raise the memory limit", FormatQuantity(p.Total-p.Limit))
	}
	return b.String()
}

// Unwrap makes errors.Is(err, ErrMemoryLimit) true.
func (e *MemoryLimitError) Unwrap() error { return ErrMemoryLimit }

// HugepageError is returned when an explicit hugepage mode cannot be
// satisfied. It matches ErrHugepagesUnavailable.
type HugepageError struct {
	PageSize    int64
	NeededPages int64
	Pool        HugepagePool
	// CgroupAvailable is what the hugetlb cgroup still allows in bytes, or
	// Unlimited.
	CgroupAvailable int64
	ReadErr         error
}

func (e *HugepageError) Error() string {
	size := FormatQuantity(e.PageSize)
	need := FormatQuantity(e.NeededPages * e.PageSize)
	var b strings.Builder
	fmt.Fprintf(&b, "--hugepages=%s needs %d hugepages of %s (%s for the off-heap memstore and block cache) but ",
		size, e.NeededPages, size, need)
	switch {
	case e.ReadErr != nil:
		fmt.Fprintf(&b, "the hugepage pool could not be read: %v", e.ReadErr)
	case e.CgroupAvailable >= 0 && e.CgroupAvailable < e.NeededPages*e.PageSize:
		fmt.Fprintf(&b, "the hugetlb cgroup allows only %s more; in Kubernetes request and limit hugepages-%s: %s in the pod",
			FormatQuantity(e.CgroupAvailable), size, need)
		return b.String()
	default:
		fmt.Fprintf(&b, "only %d are available (%s)", e.Pool.Available(), e.Pool)
	}
	fmt.Fprintf(&b, "; reserve them on the node (sysctl vm.nr_hugepages=%d for the default size, or echo %d > /sys/kernel/mm/hugepages/hugepages-%dkB/nr_hugepages), "+
		"request hugepages-%s: %s in the pod, or run with --hugepages=auto or off",
		e.Pool.Total+e.NeededPages-e.Pool.Available(), e.Pool.Total+e.NeededPages-e.Pool.Available(), e.PageSize>>10, size, need)
	return b.String()
}

// Unwrap makes errors.Is(err, ErrHugepagesUnavailable) true.
func (e *HugepageError) Unwrap() error { return ErrHugepagesUnavailable }

// Validate checks the budgets against the memory limit of the process's
// cgroup (v1 or v2; the machine's MemTotal when no cgroup limit applies)
// and, separately, checks that hugepages of an explicitly requested size are
// available. It returns the plan (also on error, for logging) and an error
// joining a *MemoryLimitError and/or a *HugepageError.
func (c *MemoryConfig) Validate() (*MemoryPlan, error) {
	p := &MemoryPlan{
		HeapLimit:         int64(c.HeapLimit),
		MemstoreOffheap:   int64(c.MemstoreOffheap),
		BlockCacheOffheap: int64(c.BlockCacheOffheap),
		BlockCacheOnheap:  int64(c.BlockCacheOnheap),
		RequestQueue:      int64(c.RequestQueue),
		FunctionMemory:    int64(c.FunctionMemory),
		Overhead:          int64(c.Overhead),
		Hugepages:         c.Hugepages,
		Limit:             Unlimited,
	}
	for _, v := range []struct {
		flag string
		n    int64
	}{{"--heap-limit", p.HeapLimit}, {"--memstore-offheap-size", p.MemstoreOffheap},
		{"--blockcache-offheap-size", p.BlockCacheOffheap}, {"--blockcache-onheap-size", p.BlockCacheOnheap},
		{"--request-queue-size", p.RequestQueue}, {"--function-memory", p.FunctionMemory}, {"--memory-overhead", p.Overhead}} {
		if v.n < 0 {
			return p, fmt.Errorf("%s must not be negative, got %d", v.flag, v.n)
		}
	}
	if c.Hugepages > Hugepages1Gi {
		return p, fmt.Errorf("invalid hugepage mode %v", c.Hugepages)
	}
	switch env := os.Getenv("GOGC"); {
	case c.GCPercent < -1:
		return p, fmt.Errorf("--gc-percent must be a positive percentage, 0 (GOGC or the default) or -1 (off), got %d", c.GCPercent)
	case c.GCPercent != 0:
		p.GCPercent, p.GCPercentSource = c.GCPercent, "--gc-percent"
	case env != "":
		p.GCPercent, p.GCPercentSource = parseGOGC(env), "GOGC"
	default:
		p.GCPercent, p.GCPercentSource = DefaultGCPercent, "default"
	}

	// Where off-heap memory will live.
	if ps := c.Hugepages.PageSize(); ps > 0 {
		p.HugepageBacked = roundUp(p.MemstoreOffheap, ps) + roundUp(p.BlockCacheOffheap, ps)
	} else {
		p.RegularOffheap = p.MemstoreOffheap + p.BlockCacheOffheap
		if c.Hugepages == HugepagesAuto && p.RegularOffheap > 0 {
			p.Notes = append(p.Notes, "hugepages=auto: off-heap memory is counted against the memory limit "+
				"because hugetlb pages may not be obtained; use --hugepages=2Mi or 1Gi with reserved hugepages to keep it outside")
		}
	}

	// The limit.
	cg, err := ReadCgroupMemory(c.Root)
	if err != nil {
		return p, fmt.Errorf("reading the cgroup memory limit: %w", err)
	}
	p.Cgroup = cg
	if cg.Limited() {
		p.Limit = cg.Limit
		p.LimitSource = fmt.Sprintf("cgroup v%d %s", cg.Version, cg.LimitFile)
	} else if mi, err := ReadMeminfo(c.Root); err == nil && mi["MemTotal"] > 0 {
		p.Limit = mi["MemTotal"]
		p.LimitSource = "no cgroup memory limit; physical memory (MemTotal)"
	} else {
		p.LimitSource = "unknown (no cgroup limit, /proc/meminfo unreadable)"
	}
	charged := p.RegularOffheap + p.Overhead
	if cg.HugetlbAccounting {
		charged += p.HugepageBacked
	}

	// The heap limit.
	switch {
	case p.HeapLimit > 0:
		p.HeapLimitSource = "--heap-limit"
	case currentMemoryLimit() != math.MaxInt64:
		p.HeapLimit = currentMemoryLimit()
		p.HeapLimitSource = "GOMEMLIMIT"
	case p.Limit >= 0:
		p.HeapLimit = p.Limit - charged
		p.HeapLimitSource = "derived: limit - off-heap - overhead"
	default:
		p.HeapLimitSource = "unset"
	}
	p.Total = p.HeapLimit + charged

	if p.RequestQueue > 0 {
		p.RequestQueueSource = "--request-queue-size"
	} else {
		p.RequestQueueSource = "derived"
		p.RequestQueue = max(min(DefaultRequestQueue, (p.HeapLimit-p.BlockCacheOnheap)/4), minRequestQueue)
	}
	if p.FunctionMemory > 0 {
		p.FunctionMemorySrc = "--function-memory"
	} else {
		p.FunctionMemorySrc = "derived"
		p.FunctionMemory = max(min(DefaultFunctionMemory, (p.HeapLimit-p.BlockCacheOnheap)/4), minFunctionMemory)
	}

	var errs []error
	switch {
	case p.HeapLimitSource == "unset":
		errs = append(errs, fmt.Errorf("%w: no memory limit is known and no --heap-limit or GOMEMLIMIT is set; "+
			"set --heap-limit", ErrMemoryLimit))
	case p.Limit >= 0 && p.Total > p.Limit:
		errs = append(errs, &MemoryLimitError{Plan: *p, Reason: "memory budgets exceed the memory limit"})
	case p.HeapLimit < p.BlockCacheOnheap+minHeapForRequests:
		errs = append(errs, &MemoryLimitError{Plan: *p, Reason: fmt.Sprintf(
			"heap limit %s leaves less than %s beyond the on-heap block cache %s",
			FormatQuantity(p.HeapLimit), FormatQuantity(minHeapForRequests), FormatQuantity(p.BlockCacheOnheap))})
	case p.RequestQueueSource == "--request-queue-size" && p.HeapLimit < p.BlockCacheOnheap+p.RequestQueue+minHeapForRequests:
		errs = append(errs, &MemoryLimitError{Plan: *p, Reason: fmt.Sprintf(
			"heap limit %s leaves less than %s beyond the on-heap block cache %s and the request queue %s",
			FormatQuantity(p.HeapLimit), FormatQuantity(minHeapForRequests), FormatQuantity(p.BlockCacheOnheap), FormatQuantity(p.RequestQueue))})
	case p.FunctionMemorySrc == "--function-memory" && p.HeapLimit < p.BlockCacheOnheap+p.FunctionMemory+minHeapForRequests:
		errs = append(errs, &MemoryLimitError{Plan: *p, Reason: fmt.Sprintf(
			"heap limit %s leaves less than %s beyond the on-heap block cache %s and table functions' memory %s",
			FormatQuantity(p.HeapLimit), FormatQuantity(minHeapForRequests), FormatQuantity(p.BlockCacheOnheap), FormatQuantity(p.FunctionMemory))})
	case float64(p.BlockCacheOnheap) > maxOnheapCacheShare*float64(p.HeapLimit):
		errs = append(errs, &MemoryLimitError{Plan: *p, Reason: fmt.Sprintf(
			"on-heap block cache %s is more than %.0f%% of the heap limit %s",
			FormatQuantity(p.BlockCacheOnheap), maxOnheapCacheShare*100, FormatQuantity(p.HeapLimit))})
	}

	// Hugepages, separately.
	if err := c.checkHugepages(p); err != nil {
		errs = append(errs, err)
	}
	return p, errors.Join(errs...)
}

func currentMemoryLimit() int64 { return debug.SetMemoryLimit(-1) }

// parseGOGC reads GOGC as the runtime does: "off" is -1, a number is the
// percentage; anything else leaves the runtime's default of 100.
func parseGOGC(v string) int {
	if strings.EqualFold(v, "off") {
		return -1
	}
	if n, err := strconv.Atoi(v); err == nil && n >= 0 {
		return n
	}
	return 100
}

func (c *MemoryConfig) checkHugepages(p *MemoryPlan) error {
	switch c.Hugepages {
	case HugepagesOff:
		return nil
	case HugepagesAuto:
		pool, err := ReadHugepagePool(c.Root, 2<<20)
		if err != nil {
			p.Notes = append(p.Notes, fmt.Sprintf("hugepages=auto: hugetlb pool unreadable (%v); expect transparent hugepages or base pages", err))
			return nil
		}
		p.HugepagePool = &pool
		need := (roundUp(p.MemstoreOffheap, 2<<20) + roundUp(p.BlockCacheOffheap, 2<<20)) / (2 << 20)
		if pool.Available() < need {
			p.Notes = append(p.Notes, fmt.Sprintf("hugepages=auto: %d of the %d 2Mi hugetlb pages wanted are available (%s); "+
				"arenas that do not fit fall back to transparent hugepages or base pages", pool.Available(), need, pool))
		}
		return nil
	}
	ps := c.Hugepages.PageSize()
	need := p.HugepageBacked / ps
	if need == 0 {
		return nil
	}
	pool, err := ReadHugepagePool(c.Root, ps)
	if err != nil {
		return &HugepageError{PageSize: ps, NeededPages: need, CgroupAvailable: Unlimited, ReadErr: err}
	}
	p.HugepagePool = &pool
	cgAvail, limited, err := ReadCgroupHugetlb(c.Root, ps)
	if err != nil {
		return &HugepageError{PageSize: ps, NeededPages: need, Pool: pool, CgroupAvailable: Unlimited, ReadErr: err}
	}
	if !limited {
		cgAvail = Unlimited
	}
	if pool.Available() < need || limited && cgAvail < need*ps {
		return &HugepageError{PageSize: ps, NeededPages: need, Pool: pool, CgroupAvailable: cgAvail}
	}
	return nil
}

// Apply sets the Go memory limit (GOMEMLIMIT) to the plan's heap limit and
// returns the previous limit.
func (p *MemoryPlan) Apply() (previous int64) {
	if p.GCPercentSource != "" {
		debug.SetGCPercent(p.GCPercent)
	}
	if p.HeapLimit <= 0 {
		return currentMemoryLimit()
	}
	prev := debug.SetMemoryLimit(p.HeapLimit)
	slog.Info("memory budgets applied", "heap_limit", FormatQuantity(p.HeapLimit), "heap_limit_source", p.HeapLimitSource,
		"gc_percent", p.GCPercent, "gc_percent_source", p.GCPercentSource,
		"memstore_offheap", FormatQuantity(p.MemstoreOffheap), "blockcache_offheap", FormatQuantity(p.BlockCacheOffheap),
		"blockcache_onheap", FormatQuantity(p.BlockCacheOnheap), "request_queue", FormatQuantity(p.RequestQueue),
		"request_queue_source", p.RequestQueueSource, "function_memory", FormatQuantity(p.FunctionMemory),
		"function_memory_source", p.FunctionMemorySrc, "overhead", FormatQuantity(p.Overhead),
		"hugepages", p.Hugepages.String(), "total", FormatQuantity(p.Total), "limit", FormatQuantity(p.Limit),
		"limit_source", p.LimitSource)
	return prev
}

// NewBudgets returns the off-heap budgets of the plan: a process-wide
// "offheap" budget and the memstore and block-cache budgets under it. With
// an explicit hugepage size the budgets are rounded up to whole hugepages,
// as Validate counted them.
func (p *MemoryPlan) NewBudgets() (total, memstore, blockcache *Budget) {
	ms, bc := p.MemstoreOffheap, p.BlockCacheOffheap
	if ps := p.Hugepages.PageSize(); ps > 0 {
		ms, bc = roundUp(ms, ps), roundUp(bc, ps)
	}
	total, _ = NewBudget("offheap", ms+bc, nil)
	memstore, _ = NewBudget("memstore", ms, total)
	blockcache, _ = NewBudget("blockcache", bc, total)
	return total, memstore, blockcache
}
