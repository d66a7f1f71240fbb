package regionserver

import (
	"context"
	"crypto/sha256"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	pb "github.com/cellstore/cellstore/engine/api/cellstore/v1"
	"github.com/cellstore/cellstore/engine/cell"
	"github.com/cellstore/cellstore/engine/client"
	"github.com/cellstore/cellstore/engine/compute/function"
	"github.com/cellstore/cellstore/engine/compute/function/functiontest"
	"github.com/cellstore/cellstore/engine/layout"
	"github.com/cellstore/cellstore/engine/master"
	"github.com/cellstore/cellstore/engine/region"
	"github.com/cellstore/cellstore/engine/rpc"
	"github.com/cellstore/cellstore/engine/storage"
	"github.com/prometheus/client_golang/prometheus"
)

const examples = "github.com/cellstore/cellstore/engine/compute/function/examples/"

// compiledGuest builds a guest and compiles it once in this process, whose compilation cache the
// master's check and the servers share: under -race on a busy machine a compile takes tens of
// seconds (46 s measured for the queue-cleanup example), longer than the client gives an alter.
func compiledGuest(t *testing.T, pkg string) []byte {
	t.Helper()
	wasm := functiontest.Build(t, pkg)
	if _, err := function.Inspect(context.Background(), wasm); err != nil {
		t.Fatal(err)
	}
	return wasm
}

func scanRows(t *testing.T, tbl *client.Table, s *pb.Scan) []string {
	t.Helper()
	sc := tbl.Scan(context.Background(), s)
	defer sc.Close()
	var rows []string
	for {
		r, ok := sc.Next()
		if !ok {
			break
		}
		rows = append(rows, string(r.Row))
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return rows
}

// Table functions end to end on real servers: the queue-cleanup example as an observer (writes
// checked, reads filtered on primaries and replicas, done items dropped by a major compaction,
// the module following a region that moves), the first-source example as an endpoint over
// several regions merged by the client, and a misbehaving function failing its calls alone,
// then disabled.
func TestTableFunctions(t *testing.T) {
	c := startClusterWith(t, 2, nil, func(mc *master.Config) { mc.ArchiveTTL = time.Nanosecond })
	ctx := context.Background()

	// The queue: two regions, each with a read replica on the other server.
	td := &pb.TableDescriptor{Name: client.ParseTableName("queue"), RegionReplication: 2,
		Families: []*pb.ColumnFamilyDescriptor{{Name: []byte("q"), MaxVersions: 3}}}
	if _, err := c.client.CreateTable(ctx, td, [][]byte{[]byte("item5")}); err != nil {
		t.Fatal(err)
	}
	c.waitOpen("queue", 4, "", 30*time.Second)
	if err := c.client.SetFunction(ctx, "queue", &pb.TableFunction{Name: "cleanup", Module: compiledGuest(t, examples+"queuecleanup"),
		Args: map[string]string{"retain_ms": "0"}, TimeoutMs: generous}); err != nil {
		t.Fatal(err)
	}
	c.waitOpen("queue", 4, "", 30*time.Second)
	var desc *pb.DescribeTableResponse
	if err := c.client.Master(ctx, func(ctx context.Context, m pb.MasterClient) error {
		var err error
		desc, err = m.DescribeTable(ctx, &pb.TableRequest{Table: client.ParseTableName("queue")})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	fns := desc.GetTable().GetFunctions()
	if len(fns) != 1 || len(fns[0].GetSha256()) != 32 || len(fns[0].GetModule()) != 0 || fns[0].GetSize() == 0 {
		t.Fatalf("the catalog keeps %v: want the digest and size, not the module", fns)
	}
	if ok, err := storage.Exists(c.fs, layout.FunctionModuleKey(fns[0].GetSha256())); err != nil || !ok {
		t.Fatalf("module object: %v %v", ok, err)
	}

	tbl := c.client.Table("queue")
	item := func(i int, state string) *client.Mutation {
		return client.NewPut(fmt.Appendf(nil, "item%d", i)).Add("q", "payload", cell.LatestTimestamp, []byte("work")).
			Add("q", "state", cell.LatestTimestamp, []byte(state))
	}
	var ms []*client.Mutation
	for i := range 10 {
		ms = append(ms, item(i, "ready"))
	}
	putAll(t, tbl, ms)
	// Writes the function refuses fail with its reason, and nothing of them is written.
	for _, m := range []*client.Mutation{
		client.NewPut([]byte("item1")).Add("q", "colour", cell.LatestTimestamp, []byte("red")),
		client.NewPut([]byte("item1")).Add("q", "state", cell.LatestTimestamp, []byte("eaten")),
	} {
		err := tbl.Put(ctx, m)
		wantCode(t, "a refused write", err, pb.ErrorCode_ERROR_CODE_FUNCTION_FAILED)
		if !strings.Contains(err.Error(), "queue item has payload") && !strings.Contains(err.Error(), "state must be") {
			t.Fatalf("refusal without the function's reason: %v", err)
		}
	}
	// Items 2 and 7 (one per region) are done: reads no longer see them.
	putAll(t, tbl, []*client.Mutation{item(2, "done"), item(7, "done")})
	want := "item0 item1 item3 item4 item5 item6 item8 item9"
	if got := strings.Join(scanRows(t, tbl, &pb.Scan{}), " "); got != want {
		t.Fatalf("scan: %s, want %s", got, want)
	}
	if r, err := tbl.Get(ctx, &pb.Get{Row: []byte("item7")}); err != nil || len(r.Cells) != 0 {
		t.Fatalf("get of a done item: %v %v", r, err)
	}
	// Replicas run the function too: a read sent to each replica directly.
	locs, err := c.fetchRegions("queue")
	if err != nil {
		t.Fatal(err)
	}
	replicas := 0
	for _, l := range locs {
		if l.GetRegion().GetReplicaId() == 0 {
			continue
		}
		replicas++
		conn, err := rpc.Dial(ctx, layout.ServerName(l.GetServer()), rpc.ClientOptions{})
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		for _, row := range []string{"item2", "item7"} {
			waitFor(t, "the replica of "+l.GetRegion().GetName()+" to have the done state of "+row, 10*time.Second, func() bool {
				raw := &pb.GetResponse{}
				_, err := conn.Call(ctx, pb.Method_METHOD_GET, &pb.GetRequest{Region: &pb.RegionSpecifier{Name: l.GetRegion().GetName()},
					Get: &pb.Get{Row: []byte(row), Consistency: pb.Consistency_CONSISTENCY_TIMELINE}}, nil, raw, nil)
				if d, ok := pb.DetailOf(err); ok && d.GetCode() == pb.ErrorCode_ERROR_CODE_WRONG_REGION {
					return true // the other region's row
				}
				return err == nil && raw.GetResult().GetCellCount() == 0
			})
		}
	}
	if replicas != 2 {
		t.Fatalf("%d replicas, want 2", replicas)
	}
	// A major compaction drops the done items from the files; raw scans (which no function
	// filters) show what is stored.
	if err := c.client.Master(ctx, func(ctx context.Context, m pb.MasterClient) error {
		_, err := m.FlushCompact(ctx, &pb.FlushCompactRequest{Table: client.ParseTableName("queue"), Kind: pb.FlushCompactRequest_KIND_FLUSH})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(scanRows(t, tbl, &pb.Scan{Raw: true}), " "); !strings.Contains(got, "item2") {
		t.Fatalf("raw scan after a flush: %s (a flush must keep done items)", got)
	}
	if err := c.client.Master(ctx, func(ctx context.Context, m pb.MasterClient) error {
		_, err := m.FlushCompact(ctx, &pb.FlushCompactRequest{Table: client.ParseTableName("queue"), Kind: pb.FlushCompactRequest_KIND_MAJOR_COMPACT})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the major compaction to drop the done items", 20*time.Second, func() bool {
		return strings.Join(scanRows(t, tbl, &pb.Scan{Raw: true}), " ") == want
	})

	// A region that moves loads the function on its new server.
	regionName, conn0 := locate(t, c, "queue", []byte("item0"))
	conn0.Close()
	dst := c.startServer() // the others hold the region or its replica
	for _, st := range dst.functions.Stats() {
		t.Fatalf("a new server has function %s of %s loaded", st.Name, st.Table)
	}
	if err := c.client.Master(ctx, func(ctx context.Context, m pb.MasterClient) error {
		_, err := m.MoveRegion(ctx, &pb.MoveRegionRequest{Region: regionName, Destination: dst.Name()})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the region to open on "+dst.Name(), 30*time.Second, func() bool { return c.serves(dst.Name(), regionName) })
	putAll(t, tbl, []*client.Mutation{item(0, "done")})
	if got := strings.Join(scanRows(t, tbl, &pb.Scan{StopRow: []byte("item5")}), " "); got != "item1 item3 item4" {
		t.Fatalf("scan after the move: %s", got)
	}
	if st := dst.functions.Stats(); len(st) != 1 || st[0].Table != "default:queue" || st[0].Calls == 0 {
		t.Fatalf("functions on the region's new server: %+v", st)
	}

	// The endpoint example over three regions: each answers its rows, the client concatenates.
	td = &pb.TableDescriptor{Name: client.ParseTableName("prices"), Families: []*pb.ColumnFamilyDescriptor{{Name: []byte("s")}}}
	if _, err := c.client.CreateTable(ctx, td, [][]byte{[]byte("g"), []byte("p")}); err != nil {
		t.Fatal(err)
	}
	c.waitOpen("prices", 3, "", 30*time.Second)
	if err := c.client.SetFunction(ctx, "prices", &pb.TableFunction{Name: "first", Module: compiledGuest(t, examples+"firstsource"),
		Args: map[string]string{"sources": "exchange,vendor1,vendor2"}, TimeoutMs: generous}); err != nil {
		t.Fatal(err)
	}
	c.waitOpen("prices", 3, "", 30*time.Second)
	ptbl := c.client.Table("prices")
	var wantLines []string
	ms = nil
	for i, sym := range []string{"AAPL", "GOOG", "IBM", "MSFT", "ORCL", "SAP", "TSLA", "VOD"} {
		m := client.NewPut([]byte(sym))
		src := []string{"exchange", "vendor1", "vendor2"}[i%3]
		if i%3 > 0 {
			m.Add("s", "exchange", cell.LatestTimestamp, []byte("STALE"))
		}
		m.Add("s", src, cell.LatestTimestamp, fmt.Appendf(nil, "OK %d", i))
		if src != "vendor2" {
			m.Add("s", "vendor2", cell.LatestTimestamp, []byte("OK backup"))
		}
		ms = append(ms, m)
		wantLines = append(wantLines, fmt.Sprintf("%s\t%s\tOK %d\n", sym, src, i))
	}
	putAll(t, ptbl, ms)
	res, err := ptbl.CallFunction(ctx, &pb.Scan{}, "first", "first", []byte("OK"))
	if err != nil {
		t.Fatal(err)
	}
	if len(res) != 3 {
		t.Fatalf("%d answers, want one per region", len(res))
	}
	if got := string(client.Concat(res)); got != strings.Join(wantLines, "") {
		t.Fatalf("first sources:\n%s\nwant\n%s", got, strings.Join(wantLines, ""))
	}
	_, err = ptbl.CallFunction(ctx, &pb.Scan{}, "first", "nope", nil)
	wantCode(t, "an unknown endpoint", err, pb.ErrorCode_ERROR_CODE_INVALID_ARGUMENT)
	_, err = tbl.CallFunction(ctx, &pb.Scan{}, "first", "first", nil)
	wantCode(t, "a function of another table", err, pb.ErrorCode_ERROR_CODE_INVALID_ARGUMENT)

	// A module that is not one, and one naming a digest the cluster does not have, are refused
	// by the alter.
	err = c.client.SetFunction(ctx, "prices", &pb.TableFunction{Name: "junk", Module: []byte("not wasm")})
	wantCode(t, "a module that is not WebAssembly", err, pb.ErrorCode_ERROR_CODE_INVALID_ARGUMENT)
	err = c.client.SetFunction(ctx, "prices", &pb.TableFunction{Name: "junk", Sha256: make([]byte, 32)})
	wantCode(t, "an unknown digest", err, pb.ErrorCode_ERROR_CODE_INVALID_ARGUMENT)

	// A misbehaving function: its traps fail those writes only; two in a row disable it on the
	// server, whose metrics say so; then its hooks no longer run.
	createTable(t, c, "bad", nil)
	if err := c.client.SetFunction(ctx, "bad", &pb.TableFunction{Name: "tg", Module: compiledGuest(t, testGuest), MaxFailures: 2,
		Args: map[string]string{"prefix": ""}, TimeoutMs: generous}); err != nil {
		t.Fatal(err)
	}
	c.waitOpen("bad", 1, "", 30*time.Second)
	btbl := c.client.Table("bad")
	put := func(v string) error {
		return btbl.Put(ctx, client.NewPut([]byte("r")).Add("f", "q", cell.LatestTimestamp, []byte(v)))
	}
	wantCode(t, "a refused put", put("refuse"), pb.ErrorCode_ERROR_CODE_FUNCTION_FAILED)
	if err := put("fine"); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		err := put("trap")
		wantCode(t, "a trapping put", err, pb.ErrorCode_ERROR_CODE_FUNCTION_FAILED)
		if !strings.Contains(err.Error(), "asked to trap") {
			t.Fatalf("a trap's error does not say what the module said: %v", err)
		}
	}
	if err := put("refuse"); err != nil {
		t.Fatalf("a disabled function still refused: %v", err)
	}
	disabled := false
	for _, s := range c.servers {
		for _, st := range s.functions.Stats() {
			if st.Table == "default:bad" {
				disabled = st.Disabled && st.Failures == 2
			}
		}
	}
	if !disabled {
		t.Fatal("no server reports the function disabled after its failures")
	}
	// Removing a function reopens the regions without it.
	if err := c.client.RemoveFunction(ctx, "queue", "cleanup"); err != nil {
		t.Fatal(err)
	}
	c.waitOpen("queue", 4, "", 30*time.Second)
	waitFor(t, "done items to be readable without the function", 10*time.Second, func() bool {
		return strings.Contains(strings.Join(scanRows(t, tbl, &pb.Scan{}), " "), "item0")
	})
	_, err = tbl.CallFunction(ctx, &pb.Scan{}, "cleanup", "first", nil)
	wantCode(t, "an endpoint of a table without functions", err, pb.ErrorCode_ERROR_CODE_INVALID_ARGUMENT)
	// The cleaner deletes the module no table uses any more, and only it.
	modules := func() []string {
		var out []string
		if err := (region.Storage{FS: c.fs}).WalkFiles(layout.FunctionsDir, func(p string) error { out = append(out, p); return nil }); err != nil {
			t.Fatal(err)
		}
		return out
	}
	if n := len(modules()); n != 3 {
		t.Fatalf("%d modules stored, want 3: %q", n, modules())
	}
	c.clean(t)
	left := modules()
	if len(left) != 2 || slices.Contains(left, layout.FunctionModuleKey(fns[0].GetSha256())) {
		t.Fatalf("modules after the cleaner: %q (want the two in use)", left)
	}
}

const testGuest = "github.com/cellstore/cellstore/engine/compute/function/testdata/testguest"

// generous is the time limit of the tests' function calls: the default 100 ms is short for a
// call on a machine as busy as a test run's (-race, packages in parallel).
const generous = 5000

// While an alter changing a function's limits reaches a table's regions, two regions here hold
// two loaded versions of it, with the same table and name: /metrics still answers, one series
// per function with the versions' calls added up and disabled if one of them is.
func TestFunctionMetricsTwoVersions(t *testing.T) {
	wasm := functiontest.Build(t, "github.com/cellstore/cellstore/engine/compute/function/testdata/testguest")
	sum := sha256.Sum256(wasm)
	read := func(sha []byte) ([]byte, error) { return wasm, nil }
	rt := function.NewRuntime(slog.New(slog.DiscardHandler))
	t.Cleanup(rt.Close)
	open := func(timeoutMs, maxFailures int32) *function.Set {
		t.Helper()
		spec := &pb.TableFunction{Name: "tg", Sha256: sum[:], TimeoutMs: timeoutMs, MaxFailures: maxFailures}
		set, err := rt.Open(context.Background(), "default:t", []*pb.TableFunction{spec}, read)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(set.Close)
		return set
	}
	old, altered := open(5000, 1), open(6000, 5)
	put := func(set *function.Set, value string) error {
		m := region.NewMutation([]byte("row1"))
		m.Put([]byte("f"), []byte("q"), 5, []byte(value))
		return set.PreMutate(m)
	}
	for range 2 {
		if err := put(old, "a"); err != nil {
			t.Fatal(err)
		}
	}
	if err := put(old, "trap"); err == nil { // its one failure allowed: disabled
		t.Fatal("a trap did not fail")
	}
	for range 3 {
		if err := put(altered, "a"); err != nil {
			t.Fatal(err)
		}
	}
	if st := rt.Stats(); len(st) != 2 {
		t.Fatalf("stats %+v: want two loaded versions", st)
	}

	reg := prometheus.NewRegistry()
	reg.MustRegister(&functionCollector{s: &Server{functions: rt}})
	gather := func(when string, want map[string]string) {
		t.Helper()
		mfs, err := reg.Gather()
		if err != nil {
			t.Fatalf("gathering %s: %v", when, err)
		}
		got := map[string]string{}
		for _, mf := range mfs {
			for _, m := range mf.GetMetric() {
				var labels []string
				for _, l := range m.GetLabel() {
					labels = append(labels, l.GetName()+"="+l.GetValue())
				}
				v := m.GetCounter().GetValue() + m.GetGauge().GetValue()
				got[mf.GetName()+"{"+strings.Join(labels, ",")+"}"] = fmt.Sprint(v)
			}
		}
		for name, want := range want {
			if got[name] != want {
				t.Errorf("%s: %s = %q, want %s (all: %v)", when, name, got[name], want, got)
			}
		}
	}
	gather("with two versions of a function loaded", map[string]string{
		"cellstore_regionserver_function_calls_total{function=tg,table=default:t}":    "6",
		"cellstore_regionserver_function_failures_total{function=tg,table=default:t}": "1",
		"cellstore_regionserver_function_disabled{function=tg,table=default:t}":       "1",
	})
	// The old version unloads (the last region holding it reopened): the counters keep its calls.
	old.Close()
	gather("after the old version unloaded", map[string]string{
		"cellstore_regionserver_function_calls_total{function=tg,table=default:t}":    "6",
		"cellstore_regionserver_function_failures_total{function=tg,table=default:t}": "1",
		"cellstore_regionserver_function_disabled{function=tg,table=default:t}":       "0",
	})
}
