// Command cachebench compares the off-heap L2 bucket cache with the same
// blocks kept on the Go heap. It fills a cache of -size bytes with blocks of
// -block bytes, then reads random cached blocks from -readers goroutines for
// -duration, touching -touch words of each block, and reports read
// throughput, Go heap, RSS, GC CPU share and GC pause percentiles, with
// progress lines while it runs.
//
//	go run ./engine/blockcache/cachebench -size 8GiB -duration 60s -mode offheap
//	go run ./engine/blockcache/cachebench -size 8GiB -duration 60s -mode heap
//
// The heap mode is a baseline kept only here: a sharded map of []byte.
package main

import (
	"bufio"
	"encoding/binary"
	"flag"
	"fmt"
	"log/slog"
	"math"
	"math/rand/v2"
	"os"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cellstore/cellstore/engine/blockcache"
	"github.com/cellstore/cellstore/engine/offheap"
)

type quantity struct{ n int64 }

func (q *quantity) String() string { return offheap.FormatQuantity(q.n) }
func (q *quantity) Set(s string) (err error) {
	q.n, err = offheap.ParseQuantity(s)
	return err
}

func main() {
	size := quantity{8 << 30}
	blockSize := quantity{64 << 10}
	memLimit := quantity{0}
	flag.Var(&size, "size", "cache memory to fill (Kubernetes quantity or GiB/MiB)")
	flag.Var(&blockSize, "block", "block size")
	flag.Var(&memLimit, "memlimit", "Go memory limit (GOMEMLIMIT) to set; 0 leaves it")
	duration := flag.Duration("duration", 60*time.Second, "read phase duration")
	mode := flag.String("mode", "offheap", "offheap (L2 bucket cache) or heap (map of []byte on the Go heap)")
	readers := flag.Int("readers", 4, "reader goroutines")
	touch := flag.Int("touch", 64, "8-byte words read from each block, spread evenly (0: every word)")
	alloc := flag.Int("alloc", 256, "bytes of garbage each read allocates, standing in for per-request state")
	hugepages := flag.String("hugepages", "auto", "offheap mode: off, auto, 2Mi or 1Gi")
	interval := flag.Duration("interval", 5*time.Second, "progress line interval")
	flag.Parse()

	hp, err := offheap.ParseHugepageMode(*hugepages)
	if err != nil {
		fail(err)
	}
	if *mode != "offheap" && *mode != "heap" {
		fail(fmt.Errorf("-mode must be offheap or heap, got %q", *mode))
	}
	if blockSize.n <= 16 || blockSize.n > 512<<10 {
		fail(fmt.Errorf("-block must be in (16, 512Ki]"))
	}
	if memLimit.n > 0 {
		debug.SetMemoryLimit(memLimit.n)
	}
	slog.SetDefault(slog.New(slog.NewTextHandler(os.Stderr, nil)))

	var store store
	var n int
	switch *mode {
	case "offheap":
		budget, _ := offheap.NewBudget("blockcache", size.n+(1<<30), nil)
		c, err := blockcache.NewBucketCache(blockcache.BucketCacheOptions{Capacity: size.n, Hugepages: hp, Budget: budget})
		if err != nil {
			fail(err)
		}
		// As many blocks as the cache holds without evicting.
		for _, cs := range c.Stats().Classes {
			if cs.SlotSize >= blockSize.n {
				n = int(c.Capacity() / blockcache.DefaultBucketSize * (blockcache.DefaultBucketSize / cs.SlotSize))
				break
			}
		}
		store = &offheapStore{c: c}
		fmt.Printf("mode=offheap backing=%s capacity=%s blocks=%d block=%s\n", c.Backing(), offheap.FormatQuantity(c.Capacity()), n, &blockSize)
	case "heap":
		// The same number of blocks as the off-heap cache of this size holds.
		slot := int64(0)
		for _, s := range blockcache.DefaultSizeClasses {
			if int64(s) >= blockSize.n {
				slot = int64(s)
				break
			}
		}
		n = int(size.n / blockcache.DefaultBucketSize * (blockcache.DefaultBucketSize / slot))
		store = newHeapStore(n)
		fmt.Printf("mode=heap blocks=%d block=%s\n", n, &blockSize)
	}
	fmt.Printf("GOMAXPROCS=%d readers=%d touch=%d alloc=%d GOGC=%s GOMEMLIMIT=%s go=%s\n", runtime.GOMAXPROCS(0), *readers, *touch, *alloc,
		envOr("GOGC", "100"), limitString(), runtime.Version())

	mon := newMonitor()
	// Fill.
	fillStart := mon.sample()
	t0 := time.Now()
	for i := 0; i < n; i++ {
		if err := store.put(i, int(blockSize.n)); err != nil {
			fail(fmt.Errorf("filling block %d: %w", i, err))
		}
		if i%(n/8+1) == 0 && i > 0 {
			s := mon.sample()
			fmt.Printf("fill %3.0f%% %s\n", 100*float64(i)/float64(n), mon.line(s))
		}
	}
	fillEnd := mon.sample()
	fillDur := time.Since(t0)
	fmt.Printf("filled %d blocks (%s) in %v: %s\n", n, offheap.FormatQuantity(int64(n)*blockSize.n), fillDur.Round(time.Millisecond), mon.line(fillEnd))

	// Read.
	var stop atomic.Bool
	counters := make([]paddedCounter, *readers)
	var wg sync.WaitGroup
	readStart := mon.sample()
	start := time.Now()
	for r := 0; r < *readers; r++ {
		wg.Add(1)
		go func(r int) {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(r), 42))
			var sink []byte
			var sum uint64
			ctr := &counters[r]
			for !stop.Load() {
				for j := 0; j < 64; j++ {
					i := rng.IntN(n)
					if *alloc > 0 {
						sink = make([]byte, *alloc)
						sink[0] = byte(i)
					}
					s, ok := store.read(i, *touch)
					if !ok {
						ctr.errors.Add(1)
					}
					sum += s
				}
				ctr.ops.Add(64)
			}
			ctr.sum.Store(sum + uint64(len(sink)))
		}(r)
	}
	total := func() (ops, errs int64) {
		for i := range counters {
			ops += counters[i].ops.Load()
			errs += counters[i].errors.Load()
		}
		return
	}
	tick := time.NewTicker(*interval)
	deadline := time.After(*duration)
	last, lastOps := start, int64(0)
	maxHeap, maxRSS := readStart.heapObjects, readStart.rss
loop:
	for {
		select {
		case <-tick.C:
			s := mon.sample()
			maxHeap, maxRSS = max(maxHeap, s.heapObjects), max(maxRSS, s.rss)
			ops, _ := total()
			now := time.Now()
			fmt.Printf("read t=%3.0fs %8.0f reads/s %s\n", now.Sub(start).Seconds(), float64(ops-lastOps)/now.Sub(last).Seconds(), mon.line(s))
			last, lastOps = now, ops
		case <-deadline:
			break loop
		}
	}
	stop.Store(true)
	wg.Wait()
	elapsed := time.Since(start)
	tick.Stop()
	readEnd := mon.sample()
	maxHeap, maxRSS = max(maxHeap, readEnd.heapObjects), max(maxRSS, readEnd.rss)
	ops, errs := total()
	if errs > 0 {
		fail(fmt.Errorf("%d reads missed or returned the wrong block", errs))
	}

	fmt.Printf("\n== %s: %d blocks of %s (%s), %d readers, %v ==\n", *mode, n, &blockSize,
		offheap.FormatQuantity(int64(n)*blockSize.n), *readers, elapsed.Round(time.Millisecond))
	fmt.Printf("read throughput: %.0f reads/s (%.2f GiB/s of blocks)\n", float64(ops)/elapsed.Seconds(),
		float64(ops)*float64(blockSize.n)/elapsed.Seconds()/(1<<30))
	fmt.Printf("go heap objects: %s at end of read, %s max while reading; live heap %s\n",
		mib(readEnd.heapObjects), mib(maxHeap), mib(readEnd.liveHeap))
	fmt.Printf("go runtime memory total: %s\n", mib(readEnd.runtimeTotal))
	fmt.Printf("RSS: %s at end of read, %s max while reading\n", mib(readEnd.rss), mib(maxRSS))
	report("fill", fillStart, fillEnd, fillDur)
	report("read", readStart, readEnd, elapsed)
	report("whole run", sample{pauses: emptyLike(readEnd.pauses)}, readEnd, 0)
	store.close()
}

type paddedCounter struct {
	ops, errors atomic.Int64
	sum         atomic.Uint64
	_           [40]byte
}

func envOr(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}

func limitString() string {
	l := debug.SetMemoryLimit(-1)
	if l == math.MaxInt64 {
		return "off"
	}
	return offheap.FormatQuantity(l)
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "cachebench:", err)
	os.Exit(1)
}

func mib(b uint64) string { return fmt.Sprintf("%.1f MiB", float64(b)/(1<<20)) }

// touchWords sums words 8-byte words spread over b (all when words is 0).
func touchWords(b []byte, words int) uint64 {
	var s uint64
	nw := len(b) / 8
	if words <= 0 || words > nw {
		words = nw
	}
	stride := nw / words * 8
	for i := 0; i < words; i++ {
		s += binary.LittleEndian.Uint64(b[i*stride:])
	}
	return s
}

func fillBlock(i int, b []byte) {
	for j := 0; j+8 <= len(b); j += 8 {
		binary.LittleEndian.PutUint64(b[j:], uint64(i)<<20|uint64(j))
	}
	binary.LittleEndian.PutUint64(b, uint64(i))
}

type store interface {
	put(i, size int) error
	// read returns a sum over the touched words; ok is false on a miss or
	// the wrong block.
	read(i, words int) (uint64, bool)
	close()
}

func key(i int) blockcache.Key { return blockcache.Key{File: 1, Offset: int64(i) << 16} }

type offheapStore struct{ c *blockcache.BucketCache }

func (s *offheapStore) put(i, size int) error {
	return s.c.PutFrom(key(i), size, blockcache.PrioritySingle, func(dst []byte) error {
		fillBlock(i, dst)
		return nil
	})
}

func (s *offheapStore) read(i, words int) (uint64, bool) {
	r, ok := s.c.Get(key(i))
	if !ok {
		return 0, false
	}
	b := r.Bytes()
	ok = binary.LittleEndian.Uint64(b) == uint64(i)
	sum := touchWords(b, words)
	r.Release()
	return sum, ok
}

func (s *offheapStore) close() { _ = s.c.Close() }

// heapStore is the baseline: the same blocks as []byte on the Go heap in a
// sharded map guarded like the bucket cache's index.
type heapStore struct {
	shards [64]struct {
		mu sync.RWMutex
		m  map[blockcache.Key][]byte
		_  [32]byte
	}
}

func newHeapStore(n int) *heapStore {
	h := &heapStore{}
	for i := range h.shards {
		h.shards[i].m = make(map[blockcache.Key][]byte, n/64+1)
	}
	return h
}

func shardOf(k blockcache.Key) int {
	x := uint64(k.Offset)*0x9E3779B97F4A7C15 ^ k.File
	return int(x >> 58)
}

func (h *heapStore) put(i, size int) error {
	b := make([]byte, size)
	fillBlock(i, b)
	k := key(i)
	sh := &h.shards[shardOf(k)]
	sh.mu.Lock()
	sh.m[k] = b
	sh.mu.Unlock()
	return nil
}

func (h *heapStore) read(i, words int) (uint64, bool) {
	k := key(i)
	sh := &h.shards[shardOf(k)]
	sh.mu.RLock()
	b := sh.m[k]
	sh.mu.RUnlock()
	if b == nil {
		return 0, false
	}
	return touchWords(b, words), binary.LittleEndian.Uint64(b) == uint64(i)
}

func (h *heapStore) close() {}

// Runtime and process measurements.

type sample struct {
	at                                       time.Time
	heapObjects, liveHeap, runtimeTotal, rss uint64
	gcCPU, totalCPU, idleCPU                 float64
	gcCycles                                 uint64
	pauses                                   *metrics.Float64Histogram
}

type monitor struct {
	samples []metrics.Sample
	prev    sample
}

var metricNames = []string{
	"/memory/classes/heap/objects:bytes",
	"/gc/heap/live:bytes",
	"/memory/classes/total:bytes",
	"/cpu/classes/gc/total:cpu-seconds",
	"/cpu/classes/total:cpu-seconds",
	"/cpu/classes/idle:cpu-seconds",
	"/gc/cycles/total:gc-cycles",
	"/sched/pauses/total/gc:seconds",
}

func newMonitor() *monitor {
	m := &monitor{}
	for _, n := range metricNames {
		m.samples = append(m.samples, metrics.Sample{Name: n})
	}
	m.prev = m.sample()
	return m
}

func (m *monitor) sample() sample {
	metrics.Read(m.samples)
	s := sample{at: time.Now(), rss: readRSS()}
	for _, x := range m.samples {
		switch x.Name {
		case "/memory/classes/heap/objects:bytes":
			s.heapObjects = x.Value.Uint64()
		case "/gc/heap/live:bytes":
			s.liveHeap = x.Value.Uint64()
		case "/memory/classes/total:bytes":
			s.runtimeTotal = x.Value.Uint64()
		case "/cpu/classes/gc/total:cpu-seconds":
			s.gcCPU = x.Value.Float64()
		case "/cpu/classes/total:cpu-seconds":
			s.totalCPU = x.Value.Float64()
		case "/cpu/classes/idle:cpu-seconds":
			s.idleCPU = x.Value.Float64()
		case "/gc/cycles/total:gc-cycles":
			s.gcCycles = x.Value.Uint64()
		case "/sched/pauses/total/gc:seconds":
			h := x.Value.Float64Histogram()
			s.pauses = &metrics.Float64Histogram{Counts: append([]uint64(nil), h.Counts...), Buckets: h.Buckets}
		}
	}
	return s
}

// line formats a progress line for the interval since the previous one.
func (m *monitor) line(s sample) string {
	p := m.prev
	m.prev = s
	d := diff(p.pauses, s.pauses)
	return fmt.Sprintf("heap=%s rss=%s gc_cpu=%.1f%% gc_cycles=%d pauses(p50/p99/max)=%s/%s/%s",
		mib(s.heapObjects), mib(s.rss), gcShare(p, s), s.gcCycles-p.gcCycles,
		dur(quantile(d, 0.5)), dur(quantile(d, 0.99)), dur(quantile(d, 1)))
}

// gcShare is GC CPU as a share of the CPU the process used (not idle).
func gcShare(a, b sample) float64 {
	busy := (b.totalCPU - b.idleCPU) - (a.totalCPU - a.idleCPU)
	if busy <= 0 {
		return 0
	}
	return 100 * (b.gcCPU - a.gcCPU) / busy
}

func report(phase string, a, b sample, d time.Duration) {
	h := diff(a.pauses, b.pauses)
	var n uint64
	for _, c := range h.Counts {
		n += c
	}
	avail := 0.0
	if b.totalCPU-a.totalCPU > 0 {
		avail = 100 * (b.gcCPU - a.gcCPU) / (b.totalCPU - a.totalCPU)
	}
	fmt.Printf("%s: GC cpu %.2f%% of busy CPU (%.2f%% of GOMAXPROCS), %d GC cycles, %d GC pauses p50 %s p99 %s max %s\n",
		phase, gcShare(a, b), avail, b.gcCycles-a.gcCycles, n, dur(quantile(h, 0.5)), dur(quantile(h, 0.99)), dur(quantile(h, 1)))
}

func emptyLike(h *metrics.Float64Histogram) *metrics.Float64Histogram {
	return &metrics.Float64Histogram{Counts: make([]uint64, len(h.Counts)), Buckets: h.Buckets}
}

func diff(a, b *metrics.Float64Histogram) *metrics.Float64Histogram {
	d := &metrics.Float64Histogram{Counts: make([]uint64, len(b.Counts)), Buckets: b.Buckets}
	for i := range b.Counts {
		d.Counts[i] = b.Counts[i]
		if a != nil && i < len(a.Counts) {
			d.Counts[i] -= a.Counts[i]
		}
	}
	return d
}

// quantile returns the upper bound of the bucket holding the q-quantile
// (q = 1: the largest pause), or 0 without samples.
func quantile(h *metrics.Float64Histogram, q float64) float64 {
	var total uint64
	for _, c := range h.Counts {
		total += c
	}
	if total == 0 {
		return 0
	}
	target := uint64(math.Ceil(q * float64(total)))
	if target == 0 {
		target = 1
	}
	var cum uint64
	for i, c := range h.Counts {
		cum += c
		if cum >= target {
			ub := h.Buckets[i+1]
			if math.IsInf(ub, 1) {
				ub = h.Buckets[i]
			}
			return ub
		}
	}
	return h.Buckets[len(h.Buckets)-1]
}

func dur(sec float64) string {
	switch {
	case sec == 0:
		return "0"
	case sec < 1e-3:
		return fmt.Sprintf("%.0fµs", sec*1e6)
	default:
		return fmt.Sprintf("%.2fms", sec*1e3)
	}
}

func readRSS() uint64 {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "VmRSS:"); ok {
			kb, _ := strconv.ParseUint(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			return kb << 10
		}
	}
	return 0
}
