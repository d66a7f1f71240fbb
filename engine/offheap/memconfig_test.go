package offheap

import (
	"errors"
	"math"
	"runtime/debug"
	"strings"
	"testing"

	"github.com/spf13/pflag"
)

// noGOMEMLIMIT makes the process's memory limit unset for the test, so
// Validate's derivation does not depend on the environment.
func noGOMEMLIMIT(t *testing.T) {
	prev := debug.SetMemoryLimit(math.MaxInt64)
	t.Cleanup(func() { debug.SetMemoryLimit(prev) })
}

func TestMemoryFlags(t *testing.T) {
	cfg := DefaultMemoryConfig()
	fs := pflag.NewFlagSet("regionserver", pflag.ContinueOnError)
	cfg.AddFlags(fs)
	usage := fs.FlagUsages()
	for _, want := range []string{"--heap-limit quantity", "--memstore-offheap-size quantity", "(default 1Gi)",
		"--blockcache-onheap-size quantity", "(default 128Mi)", "--memory-overhead quantity", "(default 256Mi)",
		"--hugepages off|auto|2Mi|1Gi", "(default auto)"} {
		if !strings.Contains(usage, want) {
			t.Errorf("usage lacks %q:\n%s", want, usage)
		}
	}
	err := fs.Parse([]string{"--heap-limit=2Gi", "--memstore-offheap-size", "512Mi", "--blockcache-offheap-size=3221225472",
		"--blockcache-onheap-size=0.25Gi", "--hugepages=2Mi", "--memory-overhead=300Mi"})
	if err != nil {
		t.Fatal(err)
	}
	if cfg.HeapLimit != 2<<30 || cfg.MemstoreOffheap != 512<<20 || cfg.BlockCacheOffheap != 3<<30 ||
		cfg.BlockCacheOnheap != 256<<20 || cfg.Hugepages != Hugepages2Mi || cfg.Overhead != 300<<20 {
		t.Fatalf("parsed %+v", cfg)
	}
	for _, bad := range []struct{ arg, want string }{
		{"--heap-limit=2GB!", `invalid size "2GB!"`},
		{"--memstore-offheap-size=-1Gi", "negative"},
		{"--blockcache-offheap-size=lots", "must start with a number"},
		{"--hugepages=4Mi", "want off, auto, 2Mi or 1Gi"},
	} {
		fs := pflag.NewFlagSet("x", pflag.ContinueOnError)
		fs.SetOutput(new(strings.Builder))
		c := DefaultMemoryConfig()
		c.AddFlags(fs)
		err := fs.Parse([]string{bad.arg})
		if err == nil || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("%s: error %v, want %q", bad.arg, err, bad.want)
		}
	}
}

func cfgFor(tree string, heap, memstore, blockcache int64, mode HugepageMode) MemoryConfig {
	c := DefaultMemoryConfig()
	c.Root = sample(tree)
	c.HeapLimit = Quantity(heap)
	c.MemstoreOffheap = Quantity(memstore)
	c.BlockCacheOffheap = Quantity(blockcache)
	c.Hugepages = mode
	return c
}

const gi = int64(1) << 30

func TestValidateFits(t *testing.T) {
	c := cfgFor("v2-nested", gi, gi, gi, HugepagesAuto)
	plan, err := c.Validate()
	if err != nil {
		t.Fatal(err)
	}
	if plan.Limit != 4*gi || plan.Total != 3*gi+256<<20 || plan.RegularOffheap != 2*gi || plan.HugepageBacked != 0 ||
		!strings.Contains(plan.LimitSource, "cgroup v2") || plan.HeapLimitSource != "--heap-limit" {
		t.Fatalf("plan %+v", plan)
	}
	if len(plan.Notes) == 0 || !strings.Contains(plan.Notes[0], "hugepages=auto") {
		t.Fatalf("notes %v", plan.Notes)
	}
}

func TestValidateRefusesOverLimit(t *testing.T) {
	c := cfgFor("v2-nested", 2*gi, gi, gi, HugepagesAuto)
	plan, err := c.Validate()
	if !errors.Is(err, ErrMemoryLimit) {
		t.Fatalf("got %v, want ErrMemoryLimit", err)
	}
	if errors.Is(err, ErrHugepagesUnavailable) {
		t.Fatalf("auto mode must not fail the hugepage check: %v", err)
	}
	var le *MemoryLimitError
	if !errors.As(err, &le) || le.Plan.Total != plan.Total {
		t.Fatalf("not a MemoryLimitError: %v", err)
	}
	msg := err.Error()
	for _, want := range []string{"heap limit 2Gi", "memstore off-heap 1Gi", "block cache off-heap 1Gi",
		"on-heap block cache 128Mi", "overhead 256Mi", "total 4352Mi", "memory limit 4Gi",
		"cgroup v2 /sys/fs/cgroup/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod1234.slice/memory.max",
		"256Mi over"} {
		if !strings.Contains(msg, want) {
			t.Errorf("message lacks %q:\n%s", want, msg)
		}
	}

	// cgroup v1, the same check.
	c = cfgFor("v1", 2*gi, gi, 512<<20, HugepagesOff)
	if _, err := c.Validate(); !errors.Is(err, ErrMemoryLimit) || !strings.Contains(err.Error(), "memory limit 3Gi (cgroup v1") {
		t.Fatalf("v1: %v", err)
	}
	// No cgroup limit: the machine's memory is the limit.
	c = cfgFor("v2-unlimited", 12*gi, 2*gi, 2*gi, HugepagesOff)
	if _, err := c.Validate(); !errors.Is(err, ErrMemoryLimit) || !strings.Contains(err.Error(), "memory limit 16Gi (no cgroup memory limit; physical memory (MemTotal))") {
		t.Fatalf("unlimited: %v", err)
	}
	c = cfgFor("v2-unlimited", 8*gi, 2*gi, 2*gi, HugepagesOff)
	if _, err := c.Validate(); err != nil {
		t.Fatalf("fits the machine: %v", err)
	}
}

// Hugetlb memory is outside the memory cgroup, so the same budgets fit with
// --hugepages=2Mi; the hugepage check is separate and here the pod's hugetlb
// limit is too small.
func TestValidateHugepages(t *testing.T) {
	c := cfgFor("v2-nested", 2*gi, gi, gi, Hugepages2Mi)
	plan, err := c.Validate()
	if errors.Is(err, ErrMemoryLimit) {
		t.Fatalf("hugetlb memory counted against memory.max: %v", err)
	}
	if plan.HugepageBacked != 2*gi || plan.RegularOffheap != 0 || plan.Total != 2*gi+256<<20 {
		t.Fatalf("plan %+v", plan)
	}
	var he *HugepageError
	if !errors.Is(err, ErrHugepagesUnavailable) || !errors.As(err, &he) {
		t.Fatalf("got %v, want a HugepageError", err)
	}
	if he.NeededPages != 1024 || he.CgroupAvailable != 768<<20 {
		t.Fatalf("%+v", he)
	}
	if msg := err.Error(); !strings.Contains(msg, "hugetlb cgroup allows only 768Mi") || !strings.Contains(msg, "hugepages-2Mi: 2Gi") {
		t.Fatalf("message: %s", msg)
	}

	// Within the pod's hugetlb limit and the node's pool: fine.
	c = cfgFor("v2-nested", 2*gi, 256<<20, 256<<20, Hugepages2Mi)
	if _, err := c.Validate(); err != nil {
		t.Fatalf("fits: %v", err)
	}

	// The node's pool is too small.
	c = cfgFor("v1", gi, gi, 0, Hugepages2Mi)
	_, err = c.Validate()
	if !errors.Is(err, ErrHugepagesUnavailable) || errors.Is(err, ErrMemoryLimit) {
		t.Fatalf("v1 pool: %v", err)
	}
	for _, want := range []string{"needs 512 hugepages of 2Mi", "only 10 are available", "sysctl vm.nr_hugepages=512",
		"/sys/kernel/mm/hugepages/hugepages-2048kB/nr_hugepages", "request hugepages-2Mi: 1Gi in the pod", "--hugepages=auto or off"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("message lacks %q:\n%v", want, err)
		}
	}

	// 1Gi pages: none reserved; sizes round up to whole pages.
	c = cfgFor("v2-nested", gi, 1536<<20, 0, Hugepages1Gi)
	plan, err = c.Validate()
	if !errors.Is(err, ErrHugepagesUnavailable) || plan.HugepageBacked != 2*gi || !strings.Contains(err.Error(), "needs 2 hugepages of 1Gi") {
		t.Fatalf("1Gi: %v %+v", err, plan)
	}

	// Both problems at once are both reported.
	c = cfgFor("v1", 3*gi, gi, 0, Hugepages2Mi)
	_, err = c.Validate()
	if !errors.Is(err, ErrHugepagesUnavailable) || !errors.Is(err, ErrMemoryLimit) {
		t.Fatalf("both: %v", err)
	}

	// auto: no error, a note about the fallback.
	c = cfgFor("v1", gi, gi, 0, HugepagesAuto)
	plan, err = c.Validate()
	if err != nil || !strings.Contains(strings.Join(plan.Notes, "\n"), "10 of the 512 2Mi hugetlb pages wanted are available") {
		t.Fatalf("auto: %v %v", err, plan.Notes)
	}
}

func TestValidateHugetlbAccounting(t *testing.T) {
	c := cfgFor("v2-hugetlb-accounting", 4*gi, 2*gi, 2*gi, Hugepages2Mi)
	_, err := c.Validate()
	if !errors.Is(err, ErrMemoryLimit) || !strings.Contains(err.Error(), "counted: cgroup has memory_hugetlb_accounting") {
		t.Fatalf("got %v", err)
	}
}

func TestValidateHeapLimit(t *testing.T) {
	noGOMEMLIMIT(t)
	c := cfgFor("v2-nested", 0, gi, gi, HugepagesOff)
	plan, err := c.Validate()
	if err != nil {
		t.Fatal(err)
	}
	if plan.HeapLimit != 4*gi-2*gi-256<<20 || !strings.HasPrefix(plan.HeapLimitSource, "derived") || plan.Total != plan.Limit {
		t.Fatalf("derived heap: %+v", plan)
	}
	prev := plan.Apply()
	if got := debug.SetMemoryLimit(-1); got != plan.HeapLimit || prev != math.MaxInt64 {
		t.Fatalf("Apply: limit %d (prev %d), want %d", got, prev, plan.HeapLimit)
	}
	// GOMEMLIMIT (now set by Apply) is used when --heap-limit is 0.
	plan, err = c.Validate()
	if err != nil || plan.HeapLimitSource != "GOMEMLIMIT" {
		t.Fatalf("GOMEMLIMIT: %v %+v", err, plan)
	}
	debug.SetMemoryLimit(math.MaxInt64)

	// Off-heap takes nearly everything: no room for a heap.
	c = cfgFor("v2-nested", 0, 2*gi, 1700<<20, HugepagesOff)
	if _, err := c.Validate(); !errors.Is(err, ErrMemoryLimit) || !strings.Contains(err.Error(), "leaves less than 64Mi beyond the on-heap block cache") {
		t.Fatalf("tiny heap: %v", err)
	}
	// On-heap cache larger than 80% of the heap.
	c = cfgFor("v2-nested", gi, 0, 0, HugepagesOff)
	c.BlockCacheOnheap = 900 << 20
	if _, err := c.Validate(); !errors.Is(err, ErrMemoryLimit) || !strings.Contains(err.Error(), "more than 80% of the heap limit 1Gi") {
		t.Fatalf("big on-heap cache: %v", err)
	}
	// The request queue: derived as a quarter of the heap beyond the on-heap cache (at most
	// 256Mi), or given, and then it must fit the heap with the cache.
	c = cfgFor("v2-nested", gi, 0, 0, HugepagesOff)
	c.BlockCacheOnheap = 128 << 20
	if plan, err := c.Validate(); err != nil || plan.RequestQueue != (gi-128<<20)/4 || plan.RequestQueueSource != "derived" {
		t.Fatalf("derived request queue: %v %d %s", err, plan.RequestQueue, plan.RequestQueueSource)
	}
	c = cfgFor("v2-nested", 3*gi, 0, 0, HugepagesOff)
	if plan, err := c.Validate(); err != nil || plan.RequestQueue != DefaultRequestQueue {
		t.Fatalf("derived request queue of a big heap: %v %d", err, plan.RequestQueue)
	}
	c = cfgFor("v2-nested", gi, 0, 0, HugepagesOff)
	c.BlockCacheOnheap, c.RequestQueue = 128<<20, 900<<20
	if _, err := c.Validate(); !errors.Is(err, ErrMemoryLimit) || !strings.Contains(err.Error(), "and the request queue 900Mi") {
		t.Fatalf("request queue too big for the heap: %v", err)
	}
	// Table functions' memory: the same way, between 64Mi and 1Gi.
	c = cfgFor("v2-nested", gi, 0, 0, HugepagesOff)
	c.BlockCacheOnheap = 128 << 20
	if plan, err := c.Validate(); err != nil || plan.FunctionMemory != (gi-128<<20)/4 || plan.FunctionMemorySrc != "derived" {
		t.Fatalf("derived function memory: %v %d %s", err, plan.FunctionMemory, plan.FunctionMemorySrc)
	}
	c = cfgFor("v2-nested", 200<<20, 0, 0, HugepagesOff)
	c.BlockCacheOnheap = 128 << 20
	if plan, err := c.Validate(); err != nil || plan.FunctionMemory != minFunctionMemory {
		t.Fatalf("derived function memory of a small heap: %v %d", err, plan.FunctionMemory)
	}
	c = cfgFor("v2-nested", gi, 0, 0, HugepagesOff)
	c.BlockCacheOnheap, c.FunctionMemory = 128<<20, 900<<20
	if _, err := c.Validate(); !errors.Is(err, ErrMemoryLimit) || !strings.Contains(err.Error(), "and table functions' memory 900Mi") {
		t.Fatalf("function memory too big for the heap: %v", err)
	}
	c = cfgFor("v2-nested", gi, -1, 0, HugepagesOff)
	if _, err := c.Validate(); err == nil || !strings.Contains(err.Error(), "--memstore-offheap-size must not be negative") {
		t.Fatalf("negative: %v", err)
	}
	c = cfgFor("malformed", gi, 0, 0, HugepagesOff)
	if _, err := c.Validate(); err == nil || !strings.Contains(err.Error(), "cgroup memory limit") {
		t.Fatalf("malformed cgroup: %v", err)
	}
}

func TestPlanBudgets(t *testing.T) {
	plan := &MemoryPlan{MemstoreOffheap: 1536 << 20, BlockCacheOffheap: gi, Hugepages: Hugepages1Gi}
	total, ms, bc := plan.NewBudgets()
	if ms.Limit() != 2*gi || bc.Limit() != gi || total.Limit() != 3*gi || ms.Parent() != total || bc.Parent() != total {
		t.Fatalf("budgets %v %v %v", total, ms, bc)
	}
	plan.Hugepages = HugepagesAuto
	_, ms, _ = plan.NewBudgets()
	if ms.Limit() != 1536<<20 {
		t.Fatalf("auto budget %v", ms)
	}
}

func TestValidateGCPercent(t *testing.T) {
	noGOMEMLIMIT(t)
	prevGC := debug.SetGCPercent(100)
	t.Cleanup(func() { debug.SetGCPercent(prevGC) })
	for _, tc := range []struct {
		flag       int
		env        string
		want       int
		wantSource string
		wantErr    string
	}{
		{flag: 0, want: DefaultGCPercent, wantSource: "default"},
		{flag: 0, env: "150", want: 150, wantSource: "GOGC"},
		{flag: 0, env: "off", want: -1, wantSource: "GOGC"},
		{flag: 0, env: "nonsense", want: 100, wantSource: "GOGC"},
		{flag: 250, env: "150", want: 250, wantSource: "--gc-percent"},
		{flag: -1, want: -1, wantSource: "--gc-percent"},
		{flag: -2, wantErr: "--gc-percent must be a positive percentage"},
	} {
		t.Setenv("GOGC", tc.env)
		c := cfgFor("v2-nested", gi, 0, 0, HugepagesOff)
		c.GCPercent = tc.flag
		plan, err := c.Validate()
		if tc.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("flag %d: error %v, want %q", tc.flag, err, tc.wantErr)
			}
			continue
		}
		if err != nil || plan.GCPercent != tc.want || plan.GCPercentSource != tc.wantSource {
			t.Fatalf("flag %d GOGC=%q: got %d from %q (%v), want %d from %q", tc.flag, tc.env, plan.GCPercent, plan.GCPercentSource, err, tc.want, tc.wantSource)
		}
	}
	// Apply sets it.
	c := cfgFor("v2-nested", gi, 0, 0, HugepagesOff)
	c.GCPercent = 300
	plan, err := c.Validate()
	if err != nil {
		t.Fatal(err)
	}
	plan.Apply()
	t.Cleanup(func() { debug.SetMemoryLimit(math.MaxInt64) })
	if got := debug.SetGCPercent(100); got != 300 {
		t.Fatalf("Apply: GC percent %d, want 300", got)
	}
}
