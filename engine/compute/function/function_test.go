package function_test

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	pb "github.com/cellstore/cellstore/engine/api/cellstore/v1"
	"github.com/cellstore/cellstore/engine/cell"
	"github.com/cellstore/cellstore/engine/compute/function"
	"github.com/cellstore/cellstore/engine/compute/function/functiontest"
	"github.com/cellstore/cellstore/engine/region"
)

const testGuest = "github.com/cellstore/cellstore/engine/compute/function/testdata/testguest"

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

func open(t testing.TB, spec *pb.TableFunction) (*function.Runtime, *function.Set) {
	return openOn(t, function.NewRuntime(quiet), spec)
}

func openOn(t testing.TB, rt *function.Runtime, spec *pb.TableFunction) (*function.Runtime, *function.Set) {
	t.Helper()
	set, err := openTable(t, rt, "default:t", spec)
	if err != nil {
		t.Fatal(err)
	}
	return rt, set
}

// openTable opens the test guest as spec for table on rt.
func openTable(t testing.TB, rt *function.Runtime, table string, spec *pb.TableFunction) (*function.Set, error) {
	t.Helper()
	wasm := functiontest.Build(t, testGuest)
	sum := sha256.Sum256(wasm)
	spec.Sha256 = sum[:]
	if spec.TimeoutMs == 0 {
		spec.TimeoutMs = 5000 // the default 100 ms is short on a machine as busy as a test run's
	}
	t.Cleanup(rt.Close)
	set, err := rt.Open(context.Background(), table, []*pb.TableFunction{spec}, func(sha []byte) ([]byte, error) {
		if string(sha) != string(sum[:]) {
			return nil, fmt.Errorf("no module %x", sha)
		}
		return wasm, nil
	})
	if err != nil {
		return nil, err
	}
	t.Cleanup(set.Close)
	return set, nil
}

func put(row string, vals ...string) *region.Mutation {
	m := region.NewMutation([]byte(row))
	for i, v := range vals {
		m.Put([]byte("f"), []byte(fmt.Sprint("q", i)), 5, []byte(v))
	}
	return m
}

func kvs(row string, vals ...string) []region.KV {
	var out []region.KV
	for i, v := range vals {
		out = append(out, region.KV{Key: cell.AppendKey(nil, []byte(row), []byte("f"), []byte(fmt.Sprint("q", i)), 5, cell.Put), Value: []byte(v)})
	}
	return out
}

func TestHooks(t *testing.T) {
	rt, set := open(t, &pb.TableFunction{Name: "tg", Args: map[string]string{"prefix": "r"}})
	h := set.Hooks()
	if !h.PreMutate || !h.PostMutate || !h.FilterRead || !h.FilterFile {
		t.Fatalf("hooks %+v: want all", h)
	}
	// Pre-mutate: through, refused (by value and by the prefix from the args), replaced.
	if err := set.PreMutate(put("r1", "a")); err != nil {
		t.Fatal(err)
	}
	for _, m := range []*region.Mutation{put("r1", "refuse"), put("x1", "a")} {
		err := set.PreMutate(m)
		if !errors.Is(err, region.ErrFunction) || !strings.Contains(err.Error(), "refused") {
			t.Fatalf("PreMutate(%q): %v, want a refusal", m.Row, err)
		}
	}
	m := put("r1", "double", "extra")
	if err := set.PreMutate(m); err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, op := range m.Ops {
		got = append(got, string(op.Qualifier)+"="+string(op.Value))
	}
	if want := "q0=doubledouble extra=added q1=extra"; strings.Join(got, " ") != want {
		t.Fatalf("replaced ops %q, want %q", got, want)
	}
	// Post-mutate runs: a trap there is counted (the write stands).
	set.PostMutate(put("r2", "a", "b"))
	set.PostMutate(put("r2", "posttrap"))
	if st := rt.Stats(); st[0].Failures != 1 || !strings.Contains(st[0].LastError, "asked to trap after a write") {
		t.Fatalf("stats after a post hook's trap: %+v", st[0])
	}
	// Reads: kept, hidden, replaced.
	if keep, repl, err := set.FilterRead([]byte("r1"), kvs("r1", "a", "b"), false); !keep || repl != nil || err != nil {
		t.Fatalf("FilterRead plain: %v %v %v", keep, repl, err)
	}
	if keep, _, err := set.FilterRead([]byte("r1"), kvs("r1", "a", "hidden"), true); keep || err != nil {
		t.Fatalf("FilterRead hidden: %v %v", keep, err)
	}
	keep, repl, err := set.FilterRead([]byte("r1"), kvs("r1", "a", "secret"), false)
	if !keep || err != nil || len(repl) != 2 || string(repl[1].Value) != "***" || string(repl[1].Key.Qualifier()) != "q1" {
		t.Fatalf("FilterRead secret: %v %v %v", keep, repl, err)
	}
	// File rows: a mask.
	mask := []bool{true, true, true}
	set.FilterFile(region.FileMajorCompaction, false, []byte("r1"), kvs("r1", "a", "garbage", "b"), mask)
	if fmt.Sprint(mask) != "[true false true]" {
		t.Fatalf("FilterFile mask %v", mask)
	}
	// An endpoint over rows, stopping where its argument says.
	var stopped bool
	out, err := set.RunEndpoint(context.Background(), "tg", "count", []byte("r2"), func(e *function.Endpoint) error {
		for i := 1; i <= 3; i++ {
			row := fmt.Sprint("r", i)
			stop, err := e.Row([]byte(row), kvs(row, "a", "b"))
			if err != nil {
				return err
			}
			if stop {
				stopped = true
				return nil
			}
		}
		return nil
	})
	if err != nil || !stopped || binary.LittleEndian.Uint64(out) != 2 || binary.LittleEndian.Uint64(out[8:]) != 4 {
		t.Fatalf("count endpoint: %x %v stopped=%v", out, err, stopped)
	}
	if _, err := set.RunEndpoint(context.Background(), "tg", "nope", nil, nil); !errors.Is(err, function.ErrNoEndpoint) {
		t.Fatalf("unknown endpoint: %v", err)
	}
}

func TestLimitsAndDisabling(t *testing.T) {
	rt, set := open(t, &pb.TableFunction{Name: "tg", TimeoutMs: 2000, MemoryMb: 8, MaxFailures: 3})
	for _, c := range []struct{ value, want string }{
		{"trap", "asked to trap"},
		{"loop", "ran out of its 2s"},
		{"oom", "out of memory"},
	} {
		err := set.PreMutate(put("row", c.value))
		if !errors.Is(err, region.ErrFunction) || !strings.Contains(err.Error(), c.want) {
			t.Fatalf("%s: %v, want an error saying %q", c.value, err, c.want)
		}
		// The failure cost only that call: the next one works (a success resets the count).
		if err := set.PreMutate(put("row", "fine")); err != nil {
			t.Fatalf("after %s: %v", c.value, err)
		}
	}
	st := rt.Stats()
	if len(st) != 1 || st[0].Failures != 3 || st[0].Disabled {
		t.Fatalf("stats %+v: want 3 failures, not disabled", st)
	}
	// Three failures in a row disable it: its hooks are then skipped (HBase unloads a
	// coprocessor that throws) and its endpoints refuse.
	for range 3 {
		if err := set.PreMutate(put("row", "trap")); err == nil {
			t.Fatal("a trap did not fail")
		}
	}
	if st := rt.Stats(); !st[0].Disabled || !strings.Contains(st[0].LastError, "asked to trap") {
		t.Fatalf("stats %+v: want disabled with the last error", st)
	}
	if err := set.PreMutate(put("row", "refuse")); err != nil {
		t.Fatalf("a disabled function still ran: %v", err)
	}
	if _, err := set.RunEndpoint(context.Background(), "tg", "count", nil, func(*function.Endpoint) error { return nil }); !errors.Is(err, function.ErrDisabled) {
		t.Fatalf("endpoint of a disabled function: %v", err)
	}
}

func TestFileRowFailureKeepsEverything(t *testing.T) {
	_, set := open(t, &pb.TableFunction{Name: "tg"})
	mask := []bool{true, true}
	set.FilterFile(region.FileFlush, false, []byte("r"), kvs("r", "garbage", "filetrap"), mask)
	if fmt.Sprint(mask) != "[true true]" {
		t.Fatalf("mask after a trap %v: a failing file hook must keep every cell", mask)
	}
	if _, _, err := set.FilterRead([]byte("r"), kvs("r", "readtrap"), false); !errors.Is(err, region.ErrFunction) {
		t.Fatalf("a read hook's trap: %v, want it to fail the read", err)
	}
}

func TestConcurrentCalls(t *testing.T) {
	_, set := open(t, &pb.TableFunction{Name: "tg"})
	doublingCalls(t, []*function.Set{set}, 200, func() {})
}

// doublingCalls makes eight goroutines each run calls pre-mutate hooks of the test guest (which
// double a value) over sets in turn, checking each answer, then after().
func doublingCalls(t *testing.T, sets []*function.Set, calls int, after func()) {
	t.Helper()
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range calls {
				m := put(fmt.Sprint("row", g, i), "double")
				if err := sets[(g+i)%len(sets)].PreMutate(m); err != nil {
					errs <- err
					return
				}
				if string(m.Ops[0].Value) != "doubledouble" {
					errs <- fmt.Errorf("row%d-%d: %q", g, i, m.Ops[0].Value)
					return
				}
				after()
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
}

func TestInitFailure(t *testing.T) {
	wasm := functiontest.Build(t, testGuest)
	sum := sha256.Sum256(wasm)
	rt := function.NewRuntime(quiet)
	defer rt.Close()
	_, err := rt.Open(context.Background(), "default:t", []*pb.TableFunction{{Name: "tg", Sha256: sum[:], Args: map[string]string{"fail_init": "yes"}}},
		func([]byte) ([]byte, error) { return wasm, nil })
	if err == nil || !strings.Contains(err.Error(), "init refused") {
		t.Fatalf("Open with an init that refuses: %v", err)
	}
	// A stored module that does not match its digest is damaged.
	_, err = rt.Open(context.Background(), "default:t", []*pb.TableFunction{{Name: "tg", Sha256: sum[:]}},
		func([]byte) ([]byte, error) { return append([]byte{}, wasm[:len(wasm)-1]...), nil })
	if err == nil || !strings.Contains(err.Error(), "damaged") {
		t.Fatalf("Open of a damaged module: %v", err)
	}
}

// Minimal modules written out by hand: the magic and version, then sections.
var (
	emptyModule    = []byte{0, 'a', 's', 'm', 1, 0, 0, 0}
	importsEnvFunc = append(append([]byte{}, emptyModule...),
		1, 4, 1, 0x60, 0, 0, // type section: one func type () -> ()
		2, 9, 1, 3, 'e', 'n', 'v', 1, 'f', 0, 0) // import section: env.f, func of type 0
)

func TestCheck(t *testing.T) {
	ctx := context.Background()
	wasm := functiontest.Build(t, testGuest)
	if err := function.Check(ctx, []*pb.TableFunction{{Name: "tg", Module: wasm}}); err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(wasm)
	for _, c := range []struct {
		name string
		fns  []*pb.TableFunction
		want string
	}{
		{"bad name", []*pb.TableFunction{{Name: "a b", Module: wasm}}, "function name"},
		{"twice", []*pb.TableFunction{{Name: "a", Module: wasm}, {Name: "a", Module: wasm}}, "listed twice"},
		{"memory", []*pb.TableFunction{{Name: "a", Module: wasm, MemoryMb: 1024}}, "MEMORY_MB"},
		{"timeout", []*pb.TableFunction{{Name: "a", Module: wasm, TimeoutMs: -1}}, "TIMEOUT_MS"},
		{"nothing", []*pb.TableFunction{{Name: "a"}}, "neither a module"},
		{"digest", []*pb.TableFunction{{Name: "a", Module: wasm, Sha256: make([]byte, 32)}}, "SHA-256 is"},
		{"not wasm", []*pb.TableFunction{{Name: "a", Module: []byte("hello")}}, "not a WebAssembly module"},
		{"no alloc", []*pb.TableFunction{{Name: "a", Module: emptyModule}}, "exports no cellstore_alloc"},
		{"imports", []*pb.TableFunction{{Name: "a", Module: importsEnvFunc}}, "imports env.f"},
		// A Go module declares its data and a megabyte more as its least memory: no instance of
		// it could start with less, on any server.
		{"memory under the module's", []*pb.TableFunction{{Name: "a", Module: wasm, MemoryMb: 1}}, "raise MEMORY_MB"},
	} {
		err := function.Check(ctx, c.fns)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want an error saying %q", c.name, err, c.want)
		}
	}
	if err := function.Check(ctx, []*pb.TableFunction{{Name: "a", Sha256: sum[:]}}); err != nil {
		t.Fatalf("a function naming a stored module: %v", err)
	}
}

// Endpoint calls hold an instance for their whole scan, whose rows run the same function's read
// hook: the hooks have instances of their own, so calls as many as the endpoints' pool holds
// neither wait for each other nor keep the hooks waiting.
// endpointsRunningHooks runs n endpoint calls at once whose rows (after first()) run a write hook
// and a read hook, and fails the test if one fails.
func endpointsRunningHooks(t *testing.T, set *function.Set, n int, first func()) {
	t.Helper()
	errs := make(chan error, n)
	for range n {
		go func() {
			_, err := set.RunEndpoint(context.Background(), "tg", "count", nil, func(e *function.Endpoint) error {
				first()
				if err := set.PreMutate(put("row", "fine")); err != nil {
					return err
				}
				_, _, err := set.FilterRead([]byte("r"), kvs("r", "a"), false)
				return err
			})
			errs <- err
		}()
	}
	for range n {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
}

func TestEndpointScansRunReadHooks(t *testing.T) {
	rt, set := open(t, &pb.TableFunction{Name: "tg", TimeoutMs: 100})
	var holding sync.WaitGroup
	holding.Add(2)
	endpointsRunningHooks(t, set, 2, func() {
		holding.Done()
		holding.Wait() // both calls hold an endpoint instance: that pool (2) is empty
	})
	if st := rt.Stats(); st[0].Failures != 0 || st[0].Instances < 3 {
		t.Fatalf("stats %+v: want no failure, instances of both pools", st[0])
	}
}

// A call that finds no instance in time — every one busy, or no room in the server's memory
// for another — fails as busy (region.ErrFunctionBusy, which servers answer as retryable), not as
// the function's failure: nothing counts against MAX_FAILURES.
func TestBusyIsRetryableNotAFailure(t *testing.T) {
	holdAll := func(t *testing.T, rt *function.Runtime, set *function.Set, n int, want string) {
		t.Helper()
		var holding sync.WaitGroup
		holding.Add(n)
		release := make(chan struct{})
		errs := make(chan error, n)
		for range n {
			go func() {
				_, err := set.RunEndpoint(context.Background(), "tg", "count", nil, func(*function.Endpoint) error {
					holding.Done()
					<-release
					return nil
				})
				errs <- err
			}()
		}
		holding.Wait()
		_, err := set.RunEndpoint(context.Background(), "tg", "count", nil, func(*function.Endpoint) error { return nil })
		close(release)
		if !errors.Is(err, region.ErrFunctionBusy) || !errors.Is(err, region.ErrFunction) || !strings.Contains(err.Error(), want) {
			t.Errorf("a call with every instance held: %v, want a busy error saying %q", err, want)
		}
		for range n {
			if err := <-errs; err != nil {
				t.Errorf("a call holding an instance: %v", err)
			}
		}
		if st := rt.Stats(); st[0].Failures != 0 || st[0].Disabled {
			t.Errorf("stats %+v: a busy call counted as the function's failure", st[0])
		}
	}
	t.Run("instances", func(t *testing.T) {
		rt, set := open(t, &pb.TableFunction{Name: "tg", TimeoutMs: 100, MaxFailures: 1})
		holdAll(t, rt, set, max(2, runtime.GOMAXPROCS(0)), "instances): retry later")
	})
	t.Run("memory", func(t *testing.T) {
		rt := function.NewRuntime(quiet)
		rt.SetMemoryBudget(32 << 20) // the reserved pair only
		_, set := openOn(t, rt, &pb.TableFunction{Name: "tg", TimeoutMs: 100, MaxFailures: 1, MemoryMb: 16})
		holdAll(t, rt, set, 1, "--function-memory")
	})
}

// A server's instances together stay within its memory budget (the sum of their MEMORY_MB):
// each loaded function keeps one hook and one endpoint instance reserved; further instances take
// the room left, closing idle further instances of other functions when a load needs it; a load
// with no room waits, then fails naming --function-memory, as does one whose instance alone is
// larger than the budget; closing every function gives everything back.
func TestMemoryBudget(t *testing.T) {
	defer function.SetLoadWait(function.SetLoadWait(200 * time.Millisecond))
	const mib = 1 << 20
	rt := function.NewRuntime(quiet)
	rt.SetMemoryBudget(192 * mib)
	within := func(when string) {
		t.Helper()
		if used, b := rt.Memory(); used > b || used < 0 {
			t.Errorf("%s: %d MiB counted, budget %d MiB", when, used>>20, b>>20) // (also from goroutines)
		}
	}
	var sets []*function.Set
	for i := range 5 {
		set, err := openTable(t, rt, fmt.Sprint("default:t", i), &pb.TableFunction{Name: "tg", MemoryMb: 16})
		if err != nil {
			t.Fatalf("loading table %d's function: %v", i, err)
		}
		sets = append(sets, set)
	}
	if used, _ := rt.Memory(); used != 5*32*mib {
		t.Fatalf("five loaded functions reserve %d MiB, want 160 (a hook and an endpoint instance each)", used>>20)
	}

	// Calls of all five at once: they share the 32 MiB left for further instances.
	doublingCalls(t, sets, 40, func() { within("during calls") })

	// A sixth function fits (idle further instances are closed for it); a seventh does not.
	if _, err := openTable(t, rt, "default:t5", &pb.TableFunction{Name: "tg", MemoryMb: 16}); err != nil {
		t.Fatalf("a sixth function with %v", err)
	}
	within("after a sixth load")
	if _, err := openTable(t, rt, "default:t6", &pb.TableFunction{Name: "tg", MemoryMb: 16}); err == nil || !strings.Contains(err.Error(), "raise --function-memory") {
		t.Fatalf("a seventh function in a full budget: %v", err)
	}
	if _, err := openTable(t, rt, "default:big", &pb.TableFunction{Name: "tg", MemoryMb: 256}); err == nil || !strings.Contains(err.Error(), "--function-memory") {
		t.Fatalf("a function of 256 MiB instances under a 192 MiB budget: %v", err)
	}
	within("after refused loads")
	for _, set := range sets {
		set.Close()
	}
	if used, _ := rt.Memory(); used != 32*mib {
		t.Errorf("%d MiB counted with one function left, want 32", used>>20)
	}
}

// Endpoint calls whose rows run read hooks need a hook instance while they hold an endpoint
// one: with a budget of only the reserved pair, they all complete, one after another.
func TestMemoryBudgetEndpointRowsRunHooks(t *testing.T) {
	rt := function.NewRuntime(quiet)
	rt.SetMemoryBudget(32 << 20)
	_, set := openOn(t, rt, &pb.TableFunction{Name: "tg", MemoryMb: 16})
	endpointsRunningHooks(t, set, 3, func() {})
	if used, b := rt.Memory(); used > b {
		t.Errorf("%d MiB counted, budget %d MiB", used>>20, b>>20)
	}
	if st := rt.Stats(); st[0].Failures != 0 {
		t.Errorf("stats %+v: want no failure", st[0])
	}
}

// A table's regions open together: their loads of one function wait for a single load and share
// it, within a budget of one function's reserved pair.
func TestMemoryBudgetConcurrentLoadsShareOne(t *testing.T) {
	rt := function.NewRuntime(quiet)
	rt.SetMemoryBudget(32 << 20)
	errs := make(chan error, 4)
	for range 4 {
		go func() {
			_, err := openTable(t, rt, "default:t", &pb.TableFunction{Name: "tg", MemoryMb: 16})
			errs <- err
		}()
	}
	for range 4 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	if used, _ := rt.Memory(); used != 32<<20 {
		t.Errorf("%d MiB counted for one function loaded by four regions, want 32", used>>20)
	}
	if st := rt.Stats(); len(st) != 1 {
		t.Errorf("%d functions loaded, want 1: %+v", len(st), st)
	}
}

// What a caller does wrong is not the module's failure: calls whose caller gave up (a short
// deadline: the instance is stopped mid-call) and inputs too large for the module's memory are
// refused without counting, so no client can switch off a table's read filter and write checks
// (MAX_FAILURES) by calling that way.
func TestCallersFailuresDoNotDisable(t *testing.T) {
	rt, set := open(t, &pb.TableFunction{Name: "tg", MemoryMb: 8, MaxFailures: 3})
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	for range 5 {
		_, err := set.RunEndpoint(cancelled, "tg", "count", nil, func(*function.Endpoint) error { return nil })
		if !errors.Is(err, region.ErrFunctionBusy) || !errors.Is(err, context.Canceled) {
			t.Fatalf("an endpoint call whose caller gave up: %v, want a retryable error saying so", err)
		}
	}
	big := strings.Repeat("x", 5<<20) // over half of MEMORY_MB 8
	for range 5 {
		if err := set.PreMutate(put("row", big)); !errors.Is(err, region.ErrInvalid) || !strings.Contains(err.Error(), "MEMORY_MB") {
			t.Fatalf("a mutation too large for the module: %v, want an invalid-argument error naming MEMORY_MB", err)
		}
	}
	if st := rt.Stats(); st[0].Failures != 0 || st[0].Disabled {
		t.Fatalf("stats %+v: the callers' failures were counted against the function", st[0])
	}
	if keep, _, err := set.FilterRead([]byte("r1"), kvs("r1", "a", "hidden"), false); keep || err != nil {
		t.Fatalf("the read filter after the callers' failures: keep %v, %v; want the row hidden", keep, err)
	}
	if err := set.PreMutate(put("row", "refuse")); !errors.Is(err, region.ErrFunction) {
		t.Fatalf("the write check after the callers' failures: %v; want a refusal", err)
	}
}

// A set its region released (a scan running through the region's close) fails its hooks with
// region.ErrClosed, so the client finds the region again: it never lets a row through unfiltered,
// or a write unchecked.
func TestClosedSetFailsClosed(t *testing.T) {
	_, set := open(t, &pb.TableFunction{Name: "tg"})
	set.Close()
	if keep, _, err := set.FilterRead([]byte("r1"), kvs("r1", "a", "hidden"), false); !errors.Is(err, region.ErrClosed) {
		t.Fatalf("FilterRead after Close: keep %v, %v; want region.ErrClosed", keep, err)
	}
	if err := set.PreMutate(put("r1", "refuse")); !errors.Is(err, region.ErrClosed) {
		t.Fatalf("PreMutate after Close: %v; want region.ErrClosed", err)
	}
	if _, err := set.RunEndpoint(context.Background(), "tg", "count", nil, func(*function.Endpoint) error { return nil }); !errors.Is(err, region.ErrClosed) {
		t.Fatalf("RunEndpoint after Close: %v; want region.ErrClosed", err)
	}
}
