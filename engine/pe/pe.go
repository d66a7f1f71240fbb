// Package pe is `cellstore pe`, Cellstore's performance evaluation tool: HBase PerformanceEvaluation's
// commands and options against any cluster, with latency percentiles from an HDR histogram, live
// progress, and JSON output for scripts.
package pe

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"

	pb "github.com/cellstore/cellstore/engine/api/cellstore/v1"
	"github.com/cellstore/cellstore/engine/cell"
	"github.com/cellstore/cellstore/engine/client"
)

// Options are PE's options (HBase names).
type Options struct {
	Table       string
	Rows        int // per thread
	ValueSize   int
	ValueRandom bool
	Families    int
	Columns     int
	Presplit    int
	AutoFlush   bool // false: writes are batched in the client (a client.BufferedMutator)
	// BufferSize is the size of buffered writes at which a batch leaves when AutoFlush is false
	// (HBase PE's --bufferSize, the BufferedMutator's write buffer; default 2 MiB, HBase's).
	BufferSize int64
	// BatchSize, when > 0, also sends a batch once it holds this many rows.
	BatchSize int
	// InFlight is how many batches a thread may have under way when AutoFlush is false (the
	// mutator's MaxInFlight): HBase's BufferedMutator lets about two buffers be outstanding.
	InFlight    int
	Durability  pb.Durability
	Consistency pb.Consistency
	MultiGet    int // >0: randomRead reads this many rows per batch
	Caching     int
	Duration    time.Duration // >0: run for this long instead of Rows per thread
	Warmup      time.Duration
	// Rate paces the run at this many operations per second over all threads (0: as fast as
	// they go): comparisons at one load, such as the server's CPU per request under two
	// protocols (hack/pe-hbase.sh). Latencies count from when an operation is sent.
	Rate float64
	Seed uint64
	JSON bool
	// Progress is where live progress goes (nil: none); Terminal selects a redrawn bar over lines.
	Progress io.Writer
	Terminal bool
}

// Connections is how many clients the threads of a run share round-robin, each with connections of
// its own, as HBase PE's --oneCon and --connCount decide: one with oneCon, else connCount, else
// (connCount 0) one per thread — HBase PE's default, where every thread has its own Connection.
func Connections(oneCon bool, connCount, threads int) (int, error) {
	switch {
	case connCount < 0:
		return 0, fmt.Errorf("--connCount must be positive (or 0: one connection per thread), got %d", connCount)
	case oneCon:
		return 1, nil
	case connCount > 0:
		return connCount, nil
	}
	return max(threads, 1), nil
}

// DefaultBufferSize is the client's write buffer when AutoFlush is false: HBase PE's default
// --bufferSize, at which HBase's BufferedMutator sends a batch (about 9,000 rows of 100-byte values
// by the Go client's size estimate).
const DefaultBufferSize = 2 << 20

// DefaultInFlight is the batches a thread may have under way when AutoFlush is false: HBase's
// BufferedMutator (2.6) sends a full buffer in the background and blocks a writer only once about
// two buffers are unanswered.
const DefaultInFlight = 2

// Commands lists PE's commands.
var Commands = []string{
	"sequentialWrite", "randomWrite", "sequentialRead", "randomRead", "randomSeekScan", "scan",
	"scanRange10", "scanRange100", "scanRange1000", "scanRange10000",
	"increment", "append", "checkAndPut", "checkAndMutate", "filterScan",
}

// Report is the outcome of a run.
type Report struct {
	Command     string           `json:"command"`
	Threads     int              `json:"threads"`
	Connections int              `json:"connections"` // clients the threads shared, each with connections of its own
	Operations  int64            `json:"operations"`
	Rows        int64            `json:"rows"`
	Errors      map[string]int64 `json:"errors"`
	Seconds     float64          `json:"seconds"`
	OpsPerSec   float64          `json:"ops_per_sec"`
	RowsPerSec  float64          `json:"rows_per_sec"`
	LatencyUs   Latency          `json:"latency_us"`
}

// Latency percentiles in microseconds.
type Latency struct {
	Min, P50, P95, P99, P999, Max int64
}

// MarshalJSON writes the percentiles with conventional names.
func (l Latency) MarshalJSON() ([]byte, error) {
	return json.Marshal(map[string]int64{"min": l.Min, "p50": l.P50, "p95": l.P95, "p99": l.P99, "p99.9": l.P999, "max": l.Max})
}

// rowKey is HBase PE's row key: the row number zero-padded to 26 digits, so keys sort like the
// numbers (no fmt: a benchmark's client should spend its CPU on the client under test).
func rowKey(i int) []byte {
	if i < 0 {
		return []byte(fmt.Sprintf("%026d", i))
	}
	b := make([]byte, 26)
	for j := len(b) - 1; j >= 0; j-- {
		b[j] = byte('0' + i%10)
		i /= 10
	}
	return b
}

const family = "info"

func familyName(i int) string {
	if i == 0 {
		return family
	}
	return fmt.Sprintf("info%d", i)
}

func column(i int) string { return fmt.Sprintf("%d", i) }

// worker is one client thread's state.
type worker struct {
	id    int
	opts  *Options
	table *client.Table
	rng   *rand.Rand
	vrng  *rand.Rand // values' bytes and lengths
	rows  int        // this thread's share of the key space
	total int        // all threads' rows
	// mut buffers the writes when AutoFlush is false; each batch it sends is one operation,
	// recorded when it is answered (rec).
	mut *client.BufferedMutator
	rec *recorder
	// scanner is the "scan" command's open scanner: as in HBase's PE, one
	// scanner per thread over its rows, and each operation is one row.
	scanner *client.Scanner
}

// makeValue returns a new value whose bytes are as HBase's PerformanceEvaluation makes them:
// random capital letters, each repeated eight times (so values compress about as well as there,
// neither all alike nor random bytes); ValueSize long, or of a random length below twice that
// (ValueRandom). Values have their own random source: a seed picks the same rows whatever they are.
func (w *worker) makeValue() []byte {
	n := w.opts.ValueSize
	if w.opts.ValueRandom {
		n = max(1, w.vrng.IntN(w.opts.ValueSize*2))
	}
	v := make([]byte, n)
	for i := 0; i < n; i += 8 {
		c := byte('A' + w.vrng.IntN(26))
		for j := i; j < min(i+8, n); j++ {
			v[j] = c
		}
	}
	return v
}

func (w *worker) put(row int) *client.Mutation {
	m := client.NewPut(rowKey(row))
	m.Durability = w.opts.Durability
	for f := 0; f < w.opts.Families; f++ {
		for c := 0; c < w.opts.Columns; c++ {
			m.Add(familyName(f), column(c), cell.LatestTimestamp, w.makeValue())
		}
	}
	return m
}

// buffered is op's row count for a write kept in the client's batch: not
// an operation of its own (the batch's flush is).
const buffered = -1

// op runs one operation of command number i and returns the rows it
// returned (or buffered).
func (w *worker) op(ctx context.Context, cmd string, i int) (int, error) {
	t := w.table
	random := func() int { return w.rng.IntN(w.total) }
	switch cmd {
	case "sequentialWrite", "randomWrite":
		row := w.id*w.rows + i%w.rows
		if cmd == "randomWrite" {
			row = random()
		}
		if w.opts.AutoFlush {
			return 1, t.Put(ctx, w.put(row))
		}
		if err := w.mut.Mutate(ctx, w.put(row)); err != nil && !isMutationsError(err) {
			w.rec.fail(err) // not taken (the run is ending); the batches' own failures are counted when answered
		}
		return buffered, nil
	case "sequentialRead", "randomRead":
		row := w.id*w.rows + i%w.rows
		if cmd == "randomRead" {
			row = random()
		}
		if w.opts.MultiGet > 0 {
			ops := make([]client.BatchOp, w.opts.MultiGet)
			for j := range ops {
				ops[j] = client.BatchOp{Get: &pb.Get{Row: rowKey(random()), Consistency: w.opts.Consistency}}
			}
			for _, r := range t.Batch(ctx, ops) {
				if r.Err != nil {
					return 0, r.Err
				}
			}
			return len(ops), nil
		}
		r, err := t.Get(ctx, &pb.Get{Row: rowKey(row), Consistency: w.opts.Consistency})
		if err == nil && len(r.Cells) == 0 {
			err = errMissing
		}
		return 1, err
	case "scan":
		for range 2 {
			if w.scanner == nil {
				w.scanner = t.Scan(ctx, &pb.Scan{StartRow: rowKey(w.id * w.rows), StopRow: rowKey((w.id + 1) * w.rows),
					Caching: int32(w.caching()), Consistency: w.opts.Consistency})
			}
			if _, ok := w.scanner.Next(); ok {
				return 1, nil
			}
			// The range is exhausted (a --duration run wraps around) or failed.
			err := w.scanner.Err()
			w.closeScanner()
			if err != nil {
				return 1, err
			}
		}
		return 1, errMissing
	case "randomSeekScan":
		return w.scan(ctx, &pb.Scan{StartRow: rowKey(random()), Caching: 30, Consistency: w.opts.Consistency}, 25)
	case "scanRange10", "scanRange100", "scanRange1000", "scanRange10000":
		n := map[string]int{"scanRange10": 10, "scanRange100": 100, "scanRange1000": 1000, "scanRange10000": 10000}[cmd]
		start := w.rng.IntN(max(1, w.total-n))
		return w.scan(ctx, &pb.Scan{StartRow: rowKey(start), StopRow: rowKey(start + n), Caching: int32(min(n, w.caching())), Consistency: w.opts.Consistency}, 0)
	case "filterScan":
		// A value filter that matches nothing: the server reads every row of the range.
		f := &pb.Filter{Filter: &pb.Filter_Value{Value: &pb.CompareFilter{Op: pb.CompareOp_COMPARE_OP_EQUAL,
			Comparator: &pb.Comparator{Kind: &pb.Comparator_Binary{Binary: []byte("no such value")}}}}}
		start := w.rng.IntN(max(1, w.total-1000))
		return w.scan(ctx, &pb.Scan{StartRow: rowKey(start), StopRow: rowKey(start + 1000), Filter: f, Caching: 1000}, 0)
	case "increment":
		m := client.NewIncrement(rowKey(random())).AddAmount(family, "counter", 1)
		m.Durability = w.opts.Durability
		_, err := t.Mutate(ctx, m)
		return 1, err
	case "append":
		m := client.NewAppend(rowKey(random())).Add(family, "appended", cell.LatestTimestamp, []byte("x"))
		m.Durability, m.ReturnResults = w.opts.Durability, false
		_, err := t.Mutate(ctx, m)
		return 1, err
	case "checkAndPut", "checkAndMutate":
		// As HBase's PE: put a known value, then a check that it is there guards the mutation,
		// so every operation writes twice (the check always passes).
		row := rowKey(random())
		known := client.NewPut(row).Add(family, "cas", cell.LatestTimestamp, row)
		known.Durability = w.opts.Durability
		if _, err := t.Mutate(ctx, known); err != nil {
			return 1, err
		}
		cond := &pb.Condition{Row: row, Family: []byte(family), Qualifier: []byte("cas"), Op: pb.CompareOp_COMPARE_OP_EQUAL,
			Comparator: &pb.Comparator{Kind: &pb.Comparator_Binary{Binary: row}}}
		put := client.NewPut(row).Add(family, "cas", cell.LatestTimestamp, row)
		put.Durability = w.opts.Durability
		ms := []*client.Mutation{put}
		if cmd == "checkAndMutate" {
			ms = append(ms, client.NewDelete(row).AddMarker(cell.DeleteColumn, family, "cas-old", cell.LatestTimestamp))
		}
		ok, err := t.CheckAndMutate(ctx, cond, ms...)
		if err == nil && !ok {
			err = fmt.Errorf("checkAndMutate of %s: the check failed although the value was just written", row)
		}
		return 1, err
	}
	return 0, fmt.Errorf("unknown command %q (known: %s)", cmd, strings.Join(Commands, ", "))
}

var errMissing = errors.New("row not found (load the table first, e.g. with sequentialWrite)")

func (w *worker) closeScanner() {
	if w.scanner != nil {
		_ = w.scanner.Close()
		w.scanner = nil
	}
}

func (w *worker) caching() int {
	if w.opts.Caching > 0 {
		return w.opts.Caching
	}
	return 100
}

// isMutationsError tells the failures of buffered mutations (counted per batch by the recorder)
// from the mutator's own errors.
func isMutationsError(err error) bool {
	var me *client.MutationsError
	return errors.As(err, &me)
}

// recorder is one thread's latencies, counts and errors; the buffered mutator's batches are
// answered on goroutines of their own, hence the lock.
type recorder struct {
	mu          sync.Mutex
	hist        *hdrhistogram.Histogram
	errs        map[string]int64
	ops, rows   *atomic.Int64
	measureFrom time.Time
}

// record counts one operation started at t0 that returned n rows.
func (r *recorder) record(t0 time.Time, n int, err error) {
	if t0.Before(r.measureFrom) {
		return
	}
	r.mu.Lock()
	if err != nil {
		r.errs[errorKind(err)]++
	}
	_ = r.hist.RecordValue(max(1, time.Since(t0).Microseconds()))
	r.mu.Unlock()
	r.ops.Add(1)
	r.rows.Add(int64(n))
}

// fail counts an error that is no operation of its own.
func (r *recorder) fail(err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.errs[errorKind(err)]++
}

// batchAnswered records a buffered batch as one operation, with its first failure.
func (r *recorder) batchAnswered(ms []*client.Mutation, results []client.BatchResult, sent time.Time) {
	var err error
	for _, res := range results {
		if res.Err != nil {
			err = res.Err
			break
		}
	}
	r.record(sent, len(ms), err)
}

func (w *worker) scan(ctx context.Context, s *pb.Scan, limit int) (int, error) {
	if limit > 0 {
		s.Limit = int32(limit)
	}
	sc := w.table.Scan(ctx, s)
	defer sc.Close()
	n := 0
	for {
		if _, ok := sc.Next(); !ok {
			break
		}
		n++
	}
	return n, sc.Err()
}

// errorKind names an error for the per-kind counts.
func errorKind(err error) string {
	if d, ok := pb.DetailOf(err); ok {
		return strings.TrimPrefix(d.GetCode().String(), "ERROR_CODE_")
	}
	switch {
	case errors.Is(err, context.DeadlineExceeded):
		return "TIMEOUT"
	case errors.Is(err, errMissing):
		return "MISSING_ROW"
	}
	return "OTHER"
}

// CheckCommand says what is wrong with running command on threads goroutines, if anything.
func CheckCommand(command string, threads int) error {
	if !slices.Contains(Commands, command) {
		return fmt.Errorf("unknown command %q; known: %s", command, strings.Join(Commands, ", "))
	}
	if threads <= 0 {
		return fmt.Errorf("threads must be positive, got %d", threads)
	}
	return nil
}

// Run runs command on threads goroutines and returns the report; thread i uses
// clients[i % len(clients)] (see Connections).
func Run(ctx context.Context, clients []*client.Client, command string, threads int, opts Options) (*Report, error) {
	if len(clients) == 0 {
		return nil, errors.New("pe: no client to run with")
	}
	c := clients[0]
	if err := CheckCommand(command, threads); err != nil {
		return nil, err
	}
	if opts.Rows <= 0 && opts.Duration <= 0 {
		return nil, errors.New("give --rows (per thread) or --duration")
	}
	if opts.Rate < 0 {
		return nil, fmt.Errorf("--rate must be positive (operations per second over all threads) or 0 for no pacing, got %g", opts.Rate)
	}
	if opts.Rows <= 0 {
		opts.Rows = 1_000_000
	}
	if opts.Families <= 0 {
		opts.Families = 1
	}
	if opts.Columns <= 0 {
		opts.Columns = 1
	}
	if opts.ValueSize <= 0 {
		opts.ValueSize = 1000
	}
	if opts.BufferSize <= 0 {
		opts.BufferSize = DefaultBufferSize
	}
	opts.BatchSize = max(opts.BatchSize, 0)
	if opts.InFlight <= 0 {
		opts.InFlight = DefaultInFlight
	}
	if err := ensureTable(ctx, c, &opts, threads); err != nil {
		return nil, err
	}
	hists := make([]*hdrhistogram.Histogram, threads)
	var ops, rows, sent atomic.Int64
	errs := make([]map[string]int64, threads)
	var wg sync.WaitGroup
	start := time.Now()
	measureFrom := start.Add(opts.Warmup)
	deadline := time.Time{}
	if opts.Duration > 0 {
		deadline = measureFrom.Add(opts.Duration)
	}
	stopProgress := progress(opts, threads, &ops, &rows, start)
	for id := range threads {
		hists[id] = hdrhistogram.New(1, int64(time.Minute/time.Microsecond), 3)
		errs[id] = map[string]int64{}
		w := &worker{id: id, opts: &opts, table: clients[id%len(clients)].Table(opts.Table), rng: rand.New(rand.NewPCG(opts.Seed, uint64(id))),
			vrng: rand.New(rand.NewPCG(opts.Seed^0x76616c756573, uint64(id))),
			rows: opts.Rows, total: opts.Rows * threads,
			rec: &recorder{hist: hists[id], errs: errs[id], ops: &ops, rows: &rows, measureFrom: measureFrom}}
		if !opts.AutoFlush {
			w.mut = w.table.BufferedMutator(ctx, client.MutatorOptions{WriteBufferSize: opts.BufferSize,
				MaxMutations: opts.BatchSize, MaxInFlight: opts.InFlight, OnBatch: w.rec.batchAnswered})
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				if ctx.Err() != nil || deadline.IsZero() && i >= opts.Rows || !deadline.IsZero() && time.Now().After(deadline) {
					break
				}
				if opts.Rate > 0 {
					if !pace(ctx, dueAt(start, sent.Add(1)-1, opts.Rate)) {
						break
					}
				}
				t0 := time.Now()
				n, err := w.op(ctx, command, i)
				if n == buffered {
					continue
				}
				w.rec.record(t0, n, err)
			}
			w.closeScanner()
			if w.mut != nil {
				// The last batch is sent here and counted when answered, like the others. Close
				// waits for every batch even when the run was interrupted (they then fail fast,
				// their context being the run's), so none is answered after the report.
				if err := w.mut.Close(context.WithoutCancel(ctx)); err != nil && !isMutationsError(err) {
					w.rec.fail(err)
				}
			}
		}()
	}
	wg.Wait()
	stopProgress()
	elapsed := time.Since(measureFrom).Seconds()
	all := hdrhistogram.New(1, int64(time.Minute/time.Microsecond), 3)
	rep := &Report{Command: command, Threads: threads, Connections: min(len(clients), threads), Operations: ops.Load(), Rows: rows.Load(), Errors: map[string]int64{}, Seconds: elapsed}
	for id := range threads {
		all.Merge(hists[id])
		for k, v := range errs[id] {
			rep.Errors[k] += v
		}
	}
	if elapsed > 0 {
		rep.OpsPerSec = float64(rep.Operations) / elapsed
		rep.RowsPerSec = float64(rep.Rows) / elapsed
	}
	rep.LatencyUs = Latency{Min: all.Min(), P50: all.ValueAtQuantile(50), P95: all.ValueAtQuantile(95), P99: all.ValueAtQuantile(99),
		P999: all.ValueAtQuantile(99.9), Max: all.Max()}
	return rep, ctx.Err()
}

// dueAt is when the n-th operation (from 0) of a run paced at rate operations per second is due.
func dueAt(start time.Time, n int64, rate float64) time.Time {
	return start.Add(time.Duration(float64(n) / rate * float64(time.Second)))
}

// pace waits until due; false when ctx ended first.
func pace(ctx context.Context, due time.Time) bool {
	d := time.Until(due)
	if d <= 0 {
		return ctx.Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// ensureTable creates the table (pre-split when asked) when it does not exist yet.
func ensureTable(ctx context.Context, c *client.Client, opts *Options, threads int) error {
	td := &pb.TableDescriptor{Name: client.ParseTableName(opts.Table), Durability: opts.Durability}
	for f := 0; f < opts.Families; f++ {
		td.Families = append(td.Families, &pb.ColumnFamilyDescriptor{Name: []byte(familyName(f))})
	}
	var splits [][]byte
	if opts.Presplit > 1 {
		total := opts.Rows * threads
		for i := 1; i < opts.Presplit; i++ {
			splits = append(splits, rowKey(total*i/opts.Presplit))
		}
	}
	_, err := c.CreateTable(ctx, td, splits)
	if d, ok := pb.DetailOf(err); ok && d.GetCode() == pb.ErrorCode_ERROR_CODE_TABLE_EXISTS {
		return nil
	}
	return err
}

// progress prints live throughput until the returned function is called.
func progress(opts Options, threads int, ops, rows *atomic.Int64, start time.Time) func() {
	if opts.Progress == nil {
		return func() {}
	}
	done := make(chan struct{})
	stopped := make(chan struct{})
	total := int64(opts.Rows * threads)
	go func() {
		defer close(stopped)
		tick := time.NewTicker(time.Second)
		defer tick.Stop()
		last, lastT := int64(0), start
		for {
			select {
			case <-done:
				if opts.Terminal {
					fmt.Fprintln(opts.Progress)
				}
				return
			case now := <-tick.C:
				r := rows.Load()
				rate := float64(r-last) / now.Sub(lastT).Seconds()
				last, lastT = r, now
				if opts.Terminal && opts.Duration == 0 && total > 0 {
					pct := min(100, float64(r)*100/float64(total))
					bar := strings.Repeat("#", int(pct/4)) + strings.Repeat(".", 25-int(pct/4))
					fmt.Fprintf(opts.Progress, "\r[%s] %5.1f%% %d rows, %.0f rows/s   ", bar, pct, r, rate)
				} else {
					fmt.Fprintf(opts.Progress, "%6.0fs: %d ops, %d rows, %.0f rows/s\n", now.Sub(start).Seconds(), ops.Load(), r, rate)
				}
			}
		}
	}()
	return func() { close(done); <-stopped }
}

// Print writes the report for people.
func (r *Report) Print(w io.Writer) {
	fmt.Fprintf(w, "%s, %d threads on %d connection(s): %d operations (%d rows) in %.2f s\n", r.Command, r.Threads, r.Connections, r.Operations, r.Rows, r.Seconds)
	fmt.Fprintf(w, "throughput: %.0f ops/s, %.0f rows/s\n", r.OpsPerSec, r.RowsPerSec)
	l := r.LatencyUs
	fmt.Fprintf(w, "latency (us): min %d, p50 %d, p95 %d, p99 %d, p99.9 %d, max %d\n", l.Min, l.P50, l.P95, l.P99, l.P999, l.Max)
	if len(r.Errors) == 0 {
		fmt.Fprintln(w, "errors: none")
		return
	}
	kinds := make([]string, 0, len(r.Errors))
	for k := range r.Errors {
		kinds = append(kinds, k)
	}
	sort.Strings(kinds)
	for _, k := range kinds {
		fmt.Fprintf(w, "errors %s: %d\n", k, r.Errors[k])
	}
}
