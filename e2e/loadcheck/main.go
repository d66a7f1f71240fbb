// Command loadcheck is the end-to-end suite's Cellstore client: it runs inside the cluster (a Job or
// a pod of its own image), writes rows whose values it can recompute, and checks what it reads back.
//
//	loadcheck load   --masters M --table T --rows N [--splits K]   create T pre-split into K regions,
//	                                                               write rows 0..N-1 in batches
//	loadcheck verify --masters M --table T --rows N                scan T: exactly rows 0..N-1, right values
//	loadcheck run    --masters M --table T [--writers W --readers R --read-rate N --user U
//	                  --http :8080 --replication N --consistency strong|timeline]
//	        a continuous load: each writer puts one row per request, each reader gets a row a writer
//	        had acknowledged (at most N per second over all readers with --read-rate) and checks its value (with TIMELINE consistency, counting the answers
//	        read replicas gave: staleReads; the table is created with REGION_REPLICATION N). GET /stats reports the counts (failed requests with
//	        their errors, the slowest request); POST /reset zeroes them; POST /verify reads back every
//	        write acknowledged so far (the load goes on) and reports the counts with "lost"; POST
//	        /stop stops the load, then verifies.
//
// load and verify print one JSON line and exit 1 when anything failed.
package main

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"hash/fnv"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/time/rate"

	pb "github.com/cellstore/cellstore/engine/api/cellstore/v1"
	"github.com/cellstore/cellstore/engine/cell"
	"github.com/cellstore/cellstore/engine/client"
	"github.com/cellstore/cellstore/engine/security"
)

const family = "f"

func main() {
	if len(os.Args) < 2 {
		fail(errors.New("usage: loadcheck load|verify|run [flags] (see the package comment)"))
	}
	fs := flag.NewFlagSet(os.Args[1], flag.ExitOnError)
	masters := fs.String("masters", "", "master addresses, comma-separated (required)")
	table := fs.String("table", "loadcheck", "table name")
	rows := fs.Int("rows", 100000, "load/verify: number of rows")
	splits := fs.Int("splits", 8, "load: regions of the table it creates")
	batch := fs.Int("batch", 1000, "load: rows per batch")
	writers := fs.Int("writers", 2, "run: writer goroutines")
	readers := fs.Int("readers", 2, "run: reader goroutines")
	readRate := fs.Float64("read-rate", 0, "run: reads per second over all readers (0: as fast as they are answered)")
	user := fs.String("user", "", "user presented to the cluster (quotas)")
	httpAddr := fs.String("http", ":8080", "run: address of /stats, /reset and /stop")
	replication := fs.Int("replication", 1, "run: REGION_REPLICATION of the table it creates")
	consistency := fs.String("consistency", "strong", "run: consistency of the reads, strong or timeline")
	tlsDir := fs.String("tls-dir", "", "directory of ca.crt, tls.crt and tls.key (a mounted TLS Secret): connect with TLS as that certificate's user")
	_ = fs.Parse(os.Args[2:])
	if *masters == "" {
		fail(errors.New("--masters is required"))
	}
	cfg := client.Config{Masters: strings.Split(*masters, ","), User: *user, Logger: slog.New(traceHandler{})}
	if *tlsDir != "" {
		certs, err := security.LoadCerts(security.Files{CA: filepath.Join(*tlsDir, "ca.crt"), Cert: filepath.Join(*tlsDir, "tls.crt"), Key: filepath.Join(*tlsDir, "tls.key")})
		if err != nil {
			fail(err)
		}
		cfg.TLS = certs
	}
	c, err := client.New(cfg)
	if err != nil {
		fail(err)
	}
	defer c.Close()
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	switch os.Args[1] {
	case "load":
		report(load(ctx, c, *table, *rows, *splits, *batch))
	case "verify":
		report(verify(ctx, c, *table, *rows))
	case "run":
		// Writer rows spread over row00000000..row00099999 (spreadRow).
		if err := createTable(ctx, c, *table, splitKeys(100000, *splits), int32(*replication)); err != nil {
			fail(err)
		}
		r := &runner{c: c, t: c.Table(*table), writers: *writers, readers: *readers}
		if *readRate > 0 {
			r.readLimit = rate.NewLimiter(rate.Limit(*readRate), 1)
		}
		switch *consistency {
		case "strong":
		case "timeline":
			r.consistency = pb.Consistency_CONSISTENCY_TIMELINE
		default:
			fail(fmt.Errorf("--consistency %q: strong or timeline", *consistency))
		}
		fail(r.serve(ctx, *httpAddr))
	default:
		fail(fmt.Errorf("unknown command %q: load, verify or run", os.Args[1]))
	}
}

func fail(err error) {
	if err == nil {
		os.Exit(0)
	}
	fmt.Fprintln(os.Stderr, "loadcheck:", err)
	os.Exit(1)
}

// summary is what load and verify print.
type summary struct {
	Rows     int      `json:"rows"`
	Failed   int      `json:"failed"`
	Missing  int      `json:"missing"`
	Wrong    int      `json:"wrong"`
	Extra    int      `json:"extra"`
	Seconds  float64  `json:"seconds"`
	Errors   []string `json:"errors,omitempty"`
	Complete bool     `json:"complete"`
}

func report(s summary) {
	b, _ := json.Marshal(s)
	fmt.Println(string(b))
	if !s.Complete || s.Failed+s.Missing+s.Wrong+s.Extra > 0 {
		os.Exit(1)
	}
}

func rowKey(i int) []byte     { return fmt.Appendf(nil, "row%08d", i) }
func value(row []byte) []byte { return append([]byte("value-of-"), row...) }

// splitKeys are n-1 keys dividing row00000000..row(rows-1) evenly.
func splitKeys(rows, n int) [][]byte {
	var out [][]byte
	for i := 1; i < n; i++ {
		out = append(out, rowKey(rows*i/n))
	}
	return out
}

func createTable(ctx context.Context, c *client.Client, name string, splits [][]byte, replication int32) error {
	td := &pb.TableDescriptor{Name: client.ParseTableName(name), Families: []*pb.ColumnFamilyDescriptor{{Name: []byte(family)}},
		RegionReplication: replication}
	_, err := c.CreateTable(ctx, td, splits)
	if d, ok := pb.DetailOf(err); ok && d.GetCode() == pb.ErrorCode_ERROR_CODE_TABLE_EXISTS {
		return nil
	}
	return err
}

func (s *summary) addError(err error) {
	if len(s.Errors) < 10 {
		s.Errors = append(s.Errors, err.Error())
	}
}

func load(ctx context.Context, c *client.Client, name string, rows, splits, batch int) summary {
	start := time.Now()
	s := summary{Rows: rows}
	if err := createTable(ctx, c, name, splitKeys(rows, splits), 0); err != nil {
		s.addError(fmt.Errorf("create table %s: %w", name, err))
		return s
	}
	t := c.Table(name)
	for i := 0; i < rows && ctx.Err() == nil; i += batch {
		var ops []client.BatchOp
		for j := i; j < min(i+batch, rows); j++ {
			k := rowKey(j)
			ops = append(ops, client.BatchOp{Mutation: client.NewPut(k).Add(family, "q", cell.LatestTimestamp, value(k))})
		}
		for _, r := range t.Batch(ctx, ops) {
			if r.Err != nil {
				s.Failed++
				s.addError(r.Err)
			}
		}
	}
	s.Complete = ctx.Err() == nil
	s.Seconds = time.Since(start).Seconds()
	return s
}

func verify(ctx context.Context, c *client.Client, name string, rows int) summary {
	start := time.Now()
	s := summary{Rows: rows}
	sc := c.Table(name).Scan(ctx, &pb.Scan{Caching: 1000})
	defer sc.Close()
	next := 0
	for {
		r, ok := sc.Next()
		if !ok {
			break
		}
		var i int
		if _, err := fmt.Sscanf(string(r.Row), "row%08d", &i); err != nil || i >= rows || i < next {
			s.Extra++
			continue
		}
		s.Missing += i - next
		next = i + 1
		if got := r.Value(family, "q"); string(got) != string(value(r.Row)) {
			s.Wrong++
			s.addError(fmt.Errorf("row %s: value %q", r.Row, got))
		}
	}
	if err := sc.Err(); err != nil {
		s.Failed++
		s.addError(fmt.Errorf("scan: %w", err))
		s.Seconds = time.Since(start).Seconds()
		return s
	}
	s.Missing += rows - next
	s.Complete = true
	s.Seconds = time.Since(start).Seconds()
	return s
}

// runner is the continuous load of `loadcheck run`.
type runner struct {
	c                *client.Client
	t                *client.Table
	writers, readers int
	readLimit        *rate.Limiter // nil: unpaced
	consistency      pb.Consistency

	acked []atomic.Int64 // per writer: rows w<i>-0..acked-1 are acknowledged

	mu    sync.Mutex
	stats stats
}

// stats are the counts GET /stats reports.
type stats struct {
	Since        time.Time `json:"since"`
	Writes       int64     `json:"writes"`
	Reads        int64     `json:"reads"`
	StaleReads   int64     `json:"staleReads"`
	StaleBehind  int64     `json:"staleBehind"` // stale answers without the acknowledged write yet
	FailedWrites int64     `json:"failedWrites"`
	FailedReads  int64     `json:"failedReads"`
	Mismatches   int64     `json:"mismatches"`
	MaxLatencyMs float64   `json:"maxLatencyMs"`
	MaxLatencyAt time.Time `json:"maxLatencyAt"`
	// Slowest are the slowest requests (at most maxSlowest), slowest first, with the client's
	// retries: what each waited for.
	Slowest       []slowRequest `json:"slowest,omitempty"`
	Errors        []string      `json:"errors,omitempty"`
	Stopped       bool          `json:"stopped"`
	Acknowledged  int64         `json:"acknowledged"`
	Lost          int64         `json:"lost"`
	VerifyFailed  int64         `json:"verifyFailed"`
	VerifySeconds float64       `json:"verifySeconds"`
}

// spreadRow is writer w's row seq, behind a hashed prefix that spreads the rows over the table's
// regions.
func spreadRow(w int, seq int64) []byte {
	k := fmt.Appendf(nil, "w%d-%010d", w, seq)
	h := fnv.New32a()
	h.Write(k)
	return fmt.Appendf(nil, "row%08d-%s", int(h.Sum32()%100000), k)
}

// slowRequest is one of the slowest requests: when it started, what it was, how long it took,
// and the retries the client made (each "+ms since the start: the error, the pause").
type slowRequest struct {
	Start   time.Time `json:"start"`
	Op      string    `json:"op"`
	Row     string    `json:"row"`
	Ms      float64   `json:"ms"`
	Retries []string  `json:"retries,omitempty"`
}

const maxSlowest = 5

// trace gathers the client's retry records of one request: the client logs them at Debug with
// the request's context, which carries the trace.
type trace struct {
	start time.Time
	mu    sync.Mutex
	steps []string
}

type traceKey struct{}

func traced(ctx context.Context) (context.Context, *trace) {
	t := &trace{start: time.Now()}
	return context.WithValue(ctx, traceKey{}, t), t
}

func (t *trace) retries() []string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return slices.Clone(t.steps)
}

// traceHandler is the client's slog handler: it keeps the records of traced requests (at most
// 20 each) and drops the rest.
type traceHandler struct{}

func (traceHandler) Enabled(ctx context.Context, _ slog.Level) bool {
	return ctx != nil && ctx.Value(traceKey{}) != nil
}

func (traceHandler) Handle(ctx context.Context, rec slog.Record) error {
	t, _ := ctx.Value(traceKey{}).(*trace)
	if t == nil {
		return nil
	}
	var b strings.Builder
	fmt.Fprintf(&b, "+%dms %s", rec.Time.Sub(t.start).Milliseconds(), rec.Message)
	rec.Attrs(func(a slog.Attr) bool {
		fmt.Fprintf(&b, " %s=%v", a.Key, a.Value)
		return true
	})
	t.mu.Lock()
	if len(t.steps) < 20 {
		t.steps = append(t.steps, b.String())
	}
	t.mu.Unlock()
	return nil
}

func (h traceHandler) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h traceHandler) WithGroup(string) slog.Handler      { return h }

func (r *runner) record(d time.Duration, write bool, err error, mismatch, stale bool, row []byte, tr *trace) {
	r.mu.Lock()
	defer r.mu.Unlock()
	s := &r.stats
	ms := float64(d.Microseconds()) / 1000
	if ms > s.MaxLatencyMs {
		s.MaxLatencyMs, s.MaxLatencyAt = ms, time.Now()
	}
	if len(s.Slowest) < maxSlowest || ms > s.Slowest[len(s.Slowest)-1].Ms {
		op := "get"
		if write {
			op = "put"
		}
		sr := slowRequest{Start: tr.start.UTC(), Op: op, Row: string(row), Ms: ms, Retries: tr.retries()}
		i, _ := slices.BinarySearchFunc(s.Slowest, ms, func(e slowRequest, ms float64) int { return cmp.Compare(ms, e.Ms) })
		s.Slowest = slices.Insert(s.Slowest, i, sr)
		if len(s.Slowest) > maxSlowest {
			s.Slowest = s.Slowest[:maxSlowest]
		}
	}
	switch {
	case write:
		s.Writes++
	default:
		s.Reads++
	}
	if err != nil {
		if write {
			s.FailedWrites++
		} else {
			s.FailedReads++
		}
		if len(s.Errors) < 20 {
			s.Errors = append(s.Errors, time.Now().UTC().Format(time.RFC3339Nano)+" "+err.Error())
		}
	}
	if mismatch {
		s.Mismatches++
	}
	if stale {
		s.StaleReads++
	}
}

func (r *runner) write(ctx context.Context, w int) {
	for seq := int64(0); ctx.Err() == nil; {
		k := spreadRow(w, seq)
		tctx, tr := traced(ctx)
		err := r.t.Put(tctx, client.NewPut(k).Add(family, "q", cell.LatestTimestamp, value(k)))
		if ctx.Err() != nil {
			return // stopped: this write's outcome is unknown, and not counted
		}
		r.record(time.Since(tr.start), true, err, false, false, k, tr)
		if err == nil {
			seq++
			r.acked[w].Store(seq)
		}
	}
}

func (r *runner) read(ctx context.Context, rnd *rand.Rand) {
	for ctx.Err() == nil {
		if r.readLimit != nil && r.readLimit.Wait(ctx) != nil {
			return
		}
		w := rnd.IntN(r.writers)
		n := r.acked[w].Load()
		if n == 0 {
			select {
			case <-ctx.Done():
			case <-time.After(10 * time.Millisecond):
			}
			continue
		}
		k := spreadRow(w, rnd.Int64N(n))
		tctx, tr := traced(ctx)
		res, err := r.t.Get(tctx, &pb.Get{Row: k, Consistency: r.consistency})
		if ctx.Err() != nil {
			return
		}
		mismatch, behind := false, false
		if err == nil {
			got := res.Value(family, "q")
			switch {
			case got == nil && res.Stale:
				behind = true // a read replica that has not received the write yet: TIMELINE allows it
			case string(got) != string(value(k)):
				mismatch = true
				err = fmt.Errorf("get %s: value %q, want %q (stale %v)", k, got, value(k), res.Stale)
			}
		}
		r.record(time.Since(tr.start), false, err, mismatch, err == nil && res.Stale, k, tr)
		if behind {
			r.mu.Lock()
			r.stats.StaleBehind++
			r.mu.Unlock()
		}
	}
}

// verifyAll reads back every acknowledged write, 500 rows per batch.
func (r *runner) verifyAll(ctx context.Context) {
	start := time.Now()
	var acked, lost, failed int64
	var errs []string
	for w := range r.writers {
		n := r.acked[w].Load()
		acked += n
		for i := int64(0); i < n; i += 500 {
			var ops []client.BatchOp
			for seq := i; seq < min(i+500, n); seq++ {
				ops = append(ops, client.BatchOp{Get: &pb.Get{Row: spreadRow(w, seq)}})
			}
			for j, res := range r.t.Batch(ctx, ops) {
				k := ops[j].Get.Row
				switch {
				case res.Err != nil:
					failed++
					if len(errs) < 10 {
						errs = append(errs, fmt.Sprintf("read back %s: %v", k, res.Err))
					}
				case string(res.Result.Value(family, "q")) != string(value(k)):
					lost++
					if len(errs) < 10 {
						errs = append(errs, fmt.Sprintf("acknowledged write %s lost (read %q)", k, res.Result.Value(family, "q")))
					}
				}
			}
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.stats.Acknowledged, r.stats.Lost, r.stats.VerifyFailed = acked, lost, failed
	r.stats.VerifySeconds = time.Since(start).Seconds()
	r.stats.Errors = append(r.stats.Errors, errs...)
}

func (r *runner) serve(ctx context.Context, addr string) error {
	r.acked = make([]atomic.Int64, r.writers)
	r.stats.Since = time.Now()
	loadCtx, stopLoad := context.WithCancel(ctx)
	var wg sync.WaitGroup
	for w := range r.writers {
		wg.Go(func() { r.write(loadCtx, w) })
	}
	for i := range r.readers {
		rnd := rand.New(rand.NewPCG(uint64(i), uint64(time.Now().UnixNano())))
		wg.Go(func() { r.read(loadCtx, rnd) })
	}
	var verifying sync.Mutex
	verify := func() {
		verifying.Lock()
		defer verifying.Unlock()
		vctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		r.verifyAll(vctx)
	}
	var once sync.Once
	stopAndVerify := func() {
		once.Do(func() {
			stopLoad()
			wg.Wait()
			r.mu.Lock()
			r.stats.Stopped = true
			r.mu.Unlock()
		})
		verify()
	}
	snapshot := func(w http.ResponseWriter) {
		r.mu.Lock()
		b, _ := json.Marshal(r.stats)
		r.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(b)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /stats", func(w http.ResponseWriter, _ *http.Request) { snapshot(w) })
	mux.HandleFunc("POST /reset", func(w http.ResponseWriter, _ *http.Request) {
		r.mu.Lock()
		r.stats = stats{Since: time.Now(), Stopped: r.stats.Stopped}
		r.mu.Unlock()
		snapshot(w)
	})
	mux.HandleFunc("POST /verify", func(w http.ResponseWriter, _ *http.Request) {
		verify()
		snapshot(w)
	})
	mux.HandleFunc("POST /stop", func(w http.ResponseWriter, _ *http.Request) {
		stopAndVerify()
		snapshot(w)
	})
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok")) })
	srv := &http.Server{Addr: addr, Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		<-ctx.Done()
		stopLoad()
		_ = srv.Close()
	}()
	err := srv.ListenAndServe()
	if errors.Is(err, http.ErrServerClosed) {
		return nil
	}
	return err
}
