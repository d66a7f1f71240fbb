// Package function runs a table's WebAssembly functions (docs/functions.md) in a sandbox: wazero,
// a pure-Go runtime, with no access to anything but the two host functions of engine/compute/function/abi
// and a WASI that has no files, no environment, no network and fake clocks. Each call gets a time
// limit and each instance a memory limit; a call that traps or overruns fails alone, is counted,
// and a function that fails MaxFailures times in a row is disabled on this server.
package function

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"log/slog"
	"regexp"
	"runtime"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"
	"github.com/tetratelabs/wazero/imports/wasi_snapshot_preview1"

	pb "github.com/cellstore/cellstore/engine/api/cellstore/v1"
	"github.com/cellstore/cellstore/engine/compute/function/abi"
	"github.com/cellstore/cellstore/engine/region"
)

// Limits and their defaults (TableFunction's fields).
const (
	DefaultMemoryMB    = 16
	MaxMemoryMB        = 256
	DefaultTimeoutMs   = 100
	MaxTimeoutMs       = 10000
	DefaultMaxFailures = 5
	// MaxModuleSize bounds a module's size, MaxModulesSize all of one request's.
	MaxModuleSize  = 8 << 20
	MaxModulesSize = 16 << 20
	// MaxOutput bounds what one call may output.
	MaxOutput = 4 << 20
	// MaxFunctions bounds a table's functions.
	MaxFunctions = 8
	// maxLogLine bounds one log line of a module; maxStderr what is kept of its stderr.
	maxLogLine = 1024
	maxStderr  = 2048
	// instantiateTimeout bounds starting an instance (its runtime's init and the init hook).
	instantiateTimeout = 5 * time.Second
)

// loadWait bounds how long a load waits for memory taken by running instances.
var loadWait = 5 * time.Second

// enforceTimeLimits makes the compiled code check for a call's deadline (a benchmark turns it
// off to measure what the checks cost).
var enforceTimeLimits = true

// ErrDisabled is the error of calling a function this server disabled after failures.
var ErrDisabled = errors.New("function disabled after repeated failures")

var nameRE = regexp.MustCompile(`^[A-Za-z0-9_.-]{1,64}$`)

// Hooks are what a module implements.
type Hooks struct {
	PreMutate, PostMutate, FilterRow, FileRow bool
	Endpoints                                 []string
	// endpoints: the module exports the endpoint hooks (their names come from running it).
	endpoints bool
	// minPages is the least memory the module declares (64 KiB pages): an instance limited to
	// less cannot start.
	minPages uint32
}

// Check validates a table's functions as a CreateTable or ModifyTable request sends them and
// returns their digests: names, limits, and each module given (size, compiles, imports only what
// the sandbox offers, exports cellstore_alloc and at least one hook). Functions without a module
// must name the digest of one already stored (known reports whether it is).
func Check(ctx context.Context, fns []*pb.TableFunction) error {
	if len(fns) > MaxFunctions {
		return fmt.Errorf("a table has at most %d functions, not %d", MaxFunctions, len(fns))
	}
	seen := map[string]bool{}
	total := 0
	for _, f := range fns {
		if total += len(f.GetModule()); total > MaxModulesSize {
			return fmt.Errorf("the modules sent add up to over %d bytes: send them in several alters", MaxModulesSize)
		}
		if !nameRE.MatchString(f.GetName()) {
			return fmt.Errorf("function name %q: want 1 to 64 of A-Z a-z 0-9 _ . -", f.GetName())
		}
		if seen[f.GetName()] {
			return fmt.Errorf("function %q listed twice", f.GetName())
		}
		seen[f.GetName()] = true
		if m := f.GetMemoryMb(); m < 0 || m > MaxMemoryMB {
			return fmt.Errorf("function %q: MEMORY_MB %d (1 to %d)", f.GetName(), m, MaxMemoryMB)
		}
		if t := f.GetTimeoutMs(); t < 0 || t > MaxTimeoutMs {
			return fmt.Errorf("function %q: TIMEOUT_MS %d (1 to %d)", f.GetName(), t, MaxTimeoutMs)
		}
		if f.GetMaxFailures() < 0 {
			return fmt.Errorf("function %q: negative MAX_FAILURES", f.GetName())
		}
		if len(f.GetModule()) == 0 {
			if len(f.GetSha256()) != sha256.Size {
				return fmt.Errorf("function %q has neither a module nor the SHA-256 of one", f.GetName())
			}
			continue
		}
		if len(f.GetModule()) > MaxModuleSize {
			return fmt.Errorf("function %q: module of %d bytes (at most %d)", f.GetName(), len(f.GetModule()), MaxModuleSize)
		}
		sum := sha256.Sum256(f.GetModule())
		if len(f.GetSha256()) > 0 && !bytes.Equal(f.GetSha256(), sum[:]) {
			return fmt.Errorf("function %q: the module's SHA-256 is %x, not %x", f.GetName(), sum, f.GetSha256())
		}
		if err := CheckModule(ctx, f, f.GetModule()); err != nil {
			return err
		}
	}
	return nil
}

// CheckModule checks a function's module (given, or stored under its digest) against the
// function's limits: it compiles and imports only what the sandbox offers (Inspect), and it fits
// in MEMORY_MB — else every region of the table would fail to open on every server.
func CheckModule(ctx context.Context, spec *pb.TableFunction, wasm []byte) error {
	h, err := Inspect(ctx, wasm)
	if err != nil {
		return fmt.Errorf("function %q: %w", spec.GetName(), err)
	}
	if mem, _, _ := limits(spec); h.minPages > uint32(mem)*16 {
		return fmt.Errorf("function %q: the module declares at least %d KiB of memory, more than its MEMORY_MB %d: raise MEMORY_MB to %d or more",
			spec.GetName(), h.minPages*64, mem, (h.minPages+15)/16)
	}
	return nil
}

// Inspect compiles a module and says which hooks it exports, without running it. The last few
// modules it compiled stay compiled, so that a region server of the same process (standalone,
// tests) loading one right after the master checked it does not compile it again.
func Inspect(ctx context.Context, wasm []byte) (Hooks, error) {
	inspector.mu.Lock()
	defer inspector.mu.Unlock()
	if inspector.r == nil {
		inspector.r = wazero.NewRuntimeWithConfig(context.Background(), wazero.NewRuntimeConfig().WithCompilationCache(compiled).
			WithCloseOnContextDone(enforceTimeLimits))
	}
	cm, err := inspector.r.CompileModule(ctx, wasm)
	if err != nil {
		return Hooks{}, fmt.Errorf("not a WebAssembly module: %w", err)
	}
	h, err := exportedHooks(cm)
	if err != nil {
		_ = cm.Close(ctx)
		return Hooks{}, err
	}
	inspector.recent = append(inspector.recent, cm)
	if len(inspector.recent) > keptInspected {
		_ = inspector.recent[0].Close(ctx)
		inspector.recent = inspector.recent[1:]
	}
	return h, nil
}

// keptInspected is how many modules Inspect keeps compiled.
const keptInspected = 2

var inspector struct {
	mu     sync.Mutex
	r      wazero.Runtime
	recent []wazero.CompiledModule
}

var hookSig = map[string][2]int{ // export: params, results
	abi.ExportAlloc: {1, 1}, abi.ExportInit: {2, 1}, abi.ExportPreMutate: {2, 1}, abi.ExportPostMutate: {2, 1},
	abi.ExportFilterRow: {2, 1}, abi.ExportFileRow: {2, 1}, abi.ExportEndpointBegin: {2, 1},
	abi.ExportEndpointRow: {2, 1}, abi.ExportEndpointEnd: {0, 1}, abi.ExportEndpoints: {0, 1}, abi.ExportHooks: {0, 1},
}

func exportedHooks(cm wazero.CompiledModule) (Hooks, error) {
	if ms := cm.ImportedMemories(); len(ms) > 0 {
		mod, name, _ := ms[0].Import()
		return Hooks{}, fmt.Errorf("imports its memory (%s.%s): a function must define its own", mod, name)
	}
	var minPages uint32
	for _, m := range cm.ExportedMemories() {
		minPages = max(minPages, m.Min())
	}
	for _, f := range cm.ImportedFunctions() {
		mod, name, _ := f.Import()
		switch mod {
		case abi.HostModule:
			if name != abi.HostOutput && name != abi.HostLog {
				return Hooks{}, fmt.Errorf("imports %s.%s, which the sandbox does not offer (only %s and %s)", mod, name, abi.HostOutput, abi.HostLog)
			}
		case wasi_snapshot_preview1.ModuleName:
		default:
			return Hooks{}, fmt.Errorf("imports %s.%s: a function may import only %q and WASI preview 1", mod, name, abi.HostModule)
		}
	}
	exp := cm.ExportedFunctions()
	for name, sig := range hookSig {
		f, ok := exp[name]
		if !ok {
			continue
		}
		if len(f.ParamTypes()) != sig[0] || len(f.ResultTypes()) != sig[1] {
			return Hooks{}, fmt.Errorf("export %s takes %d values and returns %d (want %d and %d)", name, len(f.ParamTypes()), len(f.ResultTypes()), sig[0], sig[1])
		}
		for _, t := range append(slices.Clone(f.ParamTypes()), f.ResultTypes()...) {
			if t != api.ValueTypeI32 {
				return Hooks{}, fmt.Errorf("export %s: want i32 parameters and result", name)
			}
		}
	}
	if _, ok := exp[abi.ExportAlloc]; !ok {
		return Hooks{}, fmt.Errorf("exports no %s", abi.ExportAlloc)
	}
	has := func(n string) bool { _, ok := exp[n]; return ok }
	h := Hooks{PreMutate: has(abi.ExportPreMutate), PostMutate: has(abi.ExportPostMutate), FilterRow: has(abi.ExportFilterRow),
		FileRow: has(abi.ExportFileRow), endpoints: has(abi.ExportEndpointBegin) && has(abi.ExportEndpointRow) && has(abi.ExportEndpointEnd),
		minPages: minPages}
	if !h.PreMutate && !h.PostMutate && !h.FilterRow && !h.FileRow && !h.endpoints {
		return Hooks{}, errors.New("exports no hook (docs/functions.md lists them)")
	}
	return h, nil
}

// Runtime holds a server's loaded functions: compiled once per module and limits, shared by
// every region of the table.
type Runtime struct {
	log   *slog.Logger
	cache wazero.CompilationCache

	mu      sync.Mutex
	loaded  map[string]*Function     // by table, name, digest and limits
	loading map[string]chan struct{} // keys being loaded: closed when done
	// retired: by table and name, the calls and failures of versions unloaded while another
	// version of the function is loaded (an alter reaching the table's regions one after the
	// other), which Stats adds to a loaded version's so that the function's counters do not go
	// down.
	retired map[[2]string]Stats
	// budget bounds what the instances' memories may reach together (0: no bound); reserved is
	// what is counted against it. Every pool in use keeps one instance's memory reserved from its
	// function's load to its close, so a call always gets an instance of each function it needs
	// in the end (an endpoint's rows run read hooks: a hook instance while it holds an endpoint
	// one); an instance beyond its pool's first reserves its memory from its start to its close.
	budget, reserved int64
}

// SetMemoryBudget bounds the memory of the runtime's instances: the sum of their MEMORY_MB,
// what their linear memories (on the Go heap) may grow to. A function's load reserves one
// instance for its hooks and one for its endpoints (if it has any), waiting a few seconds for
// room, then failing; a further instance takes room as it starts, first closing idle further
// instances of any function when that makes room; while there is none a call waits for an
// instance as for a busy pool (then fails as busy). 0: no bound.
func (rt *Runtime) SetMemoryBudget(bytes int64) {
	rt.mu.Lock()
	rt.budget = max(bytes, 0)
	rt.mu.Unlock()
}

// Memory reports what is counted against the budget and the budget (0: none).
func (rt *Runtime) Memory() (reserved, budget int64) {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	return rt.reserved, rt.budget
}

// errNoRoom: the budget is taken (by loaded functions and instances running calls).
var errNoRoom = errors.New("the memory this server gives table functions (--function-memory) is taken")

// reserveLocked counts n more bytes against the budget, closing idle instances beyond their
// pool's first (which give their memory back) when that makes room, and returns those for the
// caller to close outside the lock; false, closing nothing, when there is no room. Under rt.mu;
// the caller may hold held's lock.
func (rt *Runtime) reserveLocked(n int64, held *pool) ([]*instance, bool) {
	if rt.budget == 0 || rt.reserved+n <= rt.budget {
		rt.reserved += n
		return nil, true
	}
	// The pools with instances to close stay locked until they are closed: calls taking idle
	// instances meanwhile would leave less to close than counted.
	var pools []*pool
	defer func() {
		for _, p := range pools {
			p.mu.Unlock()
		}
	}()
	var spare int64
	for _, g := range rt.loaded {
		for _, p := range []*pool{&g.hookPool, &g.endpointPool} {
			if p == held {
				continue
			}
			p.mu.Lock() // (several pools' locks are taken only under rt.mu)
			if e := p.evictable(); e > 0 {
				spare += int64(e) * g.memory
				pools = append(pools, p)
			} else {
				p.mu.Unlock()
			}
		}
	}
	if rt.reserved-spare+n > rt.budget {
		return nil, false
	}
	var victims []*instance
	for _, p := range pools {
		for p.evictable() > 0 && rt.reserved+n > rt.budget {
			in := p.popIdleLocked()
			p.live--
			rt.reserved -= p.f.memory
			victims = append(victims, in)
		}
	}
	rt.reserved += n
	return victims, true
}

// reserveFirsts reserves the first instance of each of pools (of one function) for as long as
// the function is loaded, all at once, waiting up to loadWait for room.
func (rt *Runtime) reserveFirsts(ctx context.Context, f *Function, pools ...*pool) error {
	n := int64(len(pools)) * f.memory
	deadline := time.Now().Add(loadWait)
	for {
		rt.mu.Lock()
		if rt.budget > 0 && n > rt.budget {
			b := rt.budget
			rt.mu.Unlock()
			return fmt.Errorf("%d instances of MEMORY_MB %d (one for hooks, one for endpoints) are more than this server's memory for table functions, %d MiB (--function-memory): lower MEMORY_MB or raise --function-memory",
				len(pools), f.memory>>20, b>>20)
		}
		victims, ok := rt.reserveLocked(n, nil)
		if ok {
			for _, p := range pools {
				p.mu.Lock()
				p.first = true
				p.mu.Unlock()
			}
		}
		used, b := rt.reserved, rt.budget
		rt.mu.Unlock()
		closeAll(victims)
		if ok {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%w: %d of %d MiB are reserved by loaded functions and running instances, and this function needs %d MiB; raise --function-memory or lower the functions' MEMORY_MB",
				errNoRoom, used>>20, b>>20, n>>20)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w: waiting for memory: %w", errNoRoom, ctx.Err())
		case <-time.After(10 * time.Millisecond):
		}
	}
}

func closeAll(ins []*instance) {
	for _, in := range ins {
		_ = in.mod.Close(context.Background())
	}
}

// compiled is the process's compiled code, shared by its runtimes and the master's checks (a
// standalone process compiles a module once): wazero counts its users and frees a module's code
// when the last one closes it.
var compiled = wazero.NewCompilationCache()

// NewRuntime returns an empty runtime.
func NewRuntime(log *slog.Logger) *Runtime {
	if log == nil {
		log = slog.Default()
	}
	return &Runtime{log: log, cache: compiled, loaded: map[string]*Function{}, loading: map[string]chan struct{}{}, retired: map[[2]string]Stats{}}
}

// Close closes every function.
func (rt *Runtime) Close() {
	rt.mu.Lock()
	fns := rt.loaded
	rt.loaded = map[string]*Function{}
	rt.mu.Unlock()
	for _, f := range fns {
		f.close()
	}
	if rt.cache != compiled {
		_ = rt.cache.Close(context.Background())
	}
}

// Stats is what a server reports of a function.
type Stats struct {
	Table, Name       string
	Calls, Failures   int64
	Disabled          bool
	LastError         string
	Instances, Active int
}

// Stats reports every loaded function, by table and name.
func (rt *Runtime) Stats() []Stats {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	out := make([]Stats, 0, len(rt.loaded))
	for _, f := range rt.loaded {
		s := Stats{Table: f.table, Name: f.name, Calls: f.calls.Load(), Failures: f.failures.Load(), Disabled: f.disabled.Load()}
		if e := f.lastErr.Load(); e != nil {
			s.LastError = *e
		}
		for _, p := range []*pool{&f.hookPool, &f.endpointPool} {
			p.mu.Lock()
			s.Instances, s.Active = s.Instances+p.live, s.Active+p.live-len(p.idle)
			p.mu.Unlock()
		}
		out = append(out, s)
	}
	for k, r := range rt.retired {
		if i := slices.IndexFunc(out, func(s Stats) bool { return s.Table == k[0] && s.Name == k[1] }); i >= 0 {
			out[i].Calls += r.Calls // (one of its loaded versions carries the unloaded ones' counts)
			out[i].Failures += r.Failures
		} else {
			delete(rt.retired, k) // no version left: the function, or its table, went
		}
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Table != out[j].Table {
			return out[i].Table < out[j].Table
		}
		return out[i].Name < out[j].Name
	})
	return out
}

// Function is a loaded module of a table: its compiled code and a pool of instances.
type Function struct {
	rt          *Runtime
	table, name string
	key         string
	timeout     time.Duration
	maxFailures int64
	args        []byte
	r           wazero.Runtime
	cm          wazero.CompiledModule
	hooks       Hooks
	refs        int   // under rt.mu
	memory      int64 // what each instance may reach (MEMORY_MB), counted against the runtime's budget

	// hookPool serves the observer hooks, endpointPool the endpoint calls (which hold an instance for
	// a whole scan, whose rows may run the same function's read hook).
	hookPool, endpointPool pool

	calls, failures, consecutive atomic.Int64
	disabled                     atomic.Bool
	lastErr                      atomic.Pointer[string]
}

// Load returns the table's function spec (its module read by read), loading it if this server
// has not yet; Release gives it back.
func (rt *Runtime) Load(ctx context.Context, table string, spec *pb.TableFunction, read func(sha []byte) ([]byte, error)) (*Function, error) {
	mem, timeout, maxF := limits(spec)
	argKeys := make([]string, 0, len(spec.GetArgs()))
	for k := range spec.GetArgs() {
		argKeys = append(argKeys, k)
	}
	sort.Strings(argKeys)
	argVals := make([]string, len(argKeys))
	for i, k := range argKeys {
		argVals[i] = spec.GetArgs()[k]
	}
	args := abi.EncodeArgs(argKeys, argVals)
	key := fmt.Sprintf("%s/%s/%x/%d/%d/%d/%x", table, spec.GetName(), spec.GetSha256(), mem, timeout, maxF, sha256.Sum256(args))
	// One load of a key at a time (a table's regions open together): the others wait for it and
	// share what it loaded.
	for {
		rt.mu.Lock()
		if f := rt.loaded[key]; f != nil {
			f.refs++
			rt.mu.Unlock()
			return f, nil
		}
		ch := rt.loading[key]
		if ch == nil {
			ch = make(chan struct{})
			rt.loading[key] = ch
			rt.mu.Unlock()
			f, err := rt.load(ctx, table, spec, read, key, args, mem, timeout, maxF)
			rt.mu.Lock()
			delete(rt.loading, key)
			rt.mu.Unlock()
			close(ch)
			return f, err
		}
		rt.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return nil, fmt.Errorf("function %q of %s: waiting for its load: %w", spec.GetName(), table, ctx.Err())
		}
	}
}

// load loads a function no other load of the same key is loading.
func (rt *Runtime) load(ctx context.Context, table string, spec *pb.TableFunction, read func(sha []byte) ([]byte, error),
	key string, args []byte, mem int, timeout time.Duration, maxF int) (*Function, error) {
	wasm, err := read(spec.GetSha256())
	if err != nil {
		return nil, fmt.Errorf("function %q of %s: reading its module: %w", spec.GetName(), table, err)
	}
	if sum := sha256.Sum256(wasm); !bytes.Equal(sum[:], spec.GetSha256()) {
		return nil, fmt.Errorf("function %q of %s: the stored module's SHA-256 is %x, not %x: it is damaged", spec.GetName(), table, sum, spec.GetSha256())
	}
	cfg := wazero.NewRuntimeConfig().WithCompilationCache(rt.cache).WithCloseOnContextDone(enforceTimeLimits).
		WithMemoryLimitPages(uint32(mem) * 16) // 64 KiB pages
	r := wazero.NewRuntimeWithConfig(ctx, cfg)
	fail := func(err error) (*Function, error) {
		_ = r.Close(ctx)
		return nil, fmt.Errorf("function %q of %s: %w", spec.GetName(), table, err)
	}
	if _, err := wasi_snapshot_preview1.Instantiate(ctx, r); err != nil {
		return fail(err)
	}
	f := &Function{rt: rt, table: table, name: spec.GetName(), key: key, timeout: timeout, maxFailures: int64(maxF), args: args,
		r: r, refs: 1, memory: int64(mem) << 20}
	f.hookPool = pool{f: f, max: max(2, runtime.GOMAXPROCS(0)), wake: make(chan struct{}, 1)}
	f.endpointPool = pool{f: f, max: max(2, runtime.GOMAXPROCS(0)), wake: make(chan struct{}, 1)}
	if _, err := r.NewHostModuleBuilder(abi.HostModule).
		NewFunctionBuilder().WithFunc(hostOutput).Export(abi.HostOutput).
		NewFunctionBuilder().WithFunc(f.hostLog).Export(abi.HostLog).
		Instantiate(ctx); err != nil {
		return fail(err)
	}
	if f.cm, err = r.CompileModule(ctx, wasm); err != nil {
		return fail(fmt.Errorf("compiling: %w", err))
	}
	compiled := fail
	fail = func(err error) (*Function, error) {
		_ = f.cm.Close(ctx) // (closing the runtime leaves it compiled in the cache)
		return compiled(err)
	}
	if f.hooks, err = exportedHooks(f.cm); err != nil {
		return fail(err)
	}
	// A first instance says which hooks it has (guest modules export all) and its endpoints; the
	// hook pool keeps its memory reserved (and the endpoint pool one more, below).
	pools := []*pool{&f.hookPool}
	if f.hooks.endpoints {
		pools = append(pools, &f.endpointPool)
	}
	if err := rt.reserveFirsts(ctx, f, pools...); err != nil {
		return fail(err)
	}
	started := fail
	fail = func(err error) (*Function, error) {
		for _, p := range pools { // (none of its instances is in a pool yet)
			p.shut()
		}
		return started(err)
	}
	inst, err := f.instantiate(ctx)
	if err != nil {
		return fail(err)
	}
	if h, ok := inst.fns[abi.ExportHooks]; ok {
		res, err := h.Call(ctx)
		if err != nil {
			return fail(fmt.Errorf("%s: %w", abi.ExportHooks, err))
		}
		bits := int32(res[0])
		f.hooks.PreMutate = f.hooks.PreMutate && bits&abi.HookPreMutate != 0
		f.hooks.PostMutate = f.hooks.PostMutate && bits&abi.HookPostMutate != 0
		f.hooks.FilterRow = f.hooks.FilterRow && bits&abi.HookFilterRow != 0
		f.hooks.FileRow = f.hooks.FileRow && bits&abi.HookFileRow != 0
		f.hooks.endpoints = f.hooks.endpoints && bits&abi.HookEndpoints != 0
	}
	if f.hooks.endpoints {
		if _, ok := inst.fns[abi.ExportEndpoints]; ok {
			st, out, err := inst.call(ctx, f.timeout, abi.ExportEndpoints, nil)
			if err != nil || st != abi.StatusOK {
				return fail(fmt.Errorf("%s: %v (status %d)", abi.ExportEndpoints, err, st))
			}
			for _, n := range strings.Split(string(out), "\n") {
				if n != "" {
					f.hooks.Endpoints = append(f.hooks.Endpoints, n)
				}
			}
			sort.Strings(f.hooks.Endpoints)
		}
	}
	if len(f.hooks.Endpoints) == 0 { // it exports the endpoint hooks but names no endpoint
		f.endpointPool.shut()
	}
	f.hookPool.live = 1
	f.hookPool.put(inst)

	rt.mu.Lock()
	defer rt.mu.Unlock()
	if g := rt.loaded[key]; g != nil { // loaded meanwhile by another region
		g.refs++
		go f.close()
		return g, nil
	}
	rt.loaded[key] = f
	rt.log.Info("table function loaded", "table", table, "function", f.name, "sha256", fmt.Sprintf("%x", spec.GetSha256()),
		"memoryMB", mem, "timeout", timeout, "hooks", f.hookNames())
	return f, nil
}

func limits(spec *pb.TableFunction) (memMB int, timeout time.Duration, maxFailures int) {
	memMB, ms, maxFailures := int(spec.GetMemoryMb()), int(spec.GetTimeoutMs()), int(spec.GetMaxFailures())
	if memMB <= 0 {
		memMB = DefaultMemoryMB
	}
	if ms <= 0 {
		ms = DefaultTimeoutMs
	}
	if maxFailures <= 0 {
		maxFailures = DefaultMaxFailures
	}
	return min(memMB, MaxMemoryMB), time.Duration(min(ms, MaxTimeoutMs)) * time.Millisecond, maxFailures
}

// Release gives back a Load: the last one closes the function.
func (f *Function) Release() {
	rt := f.rt
	rt.mu.Lock()
	f.refs--
	last := f.refs == 0 && rt.loaded[f.key] == f
	if last {
		delete(rt.loaded, f.key)
		k := [2]string{f.table, f.name}
		r := rt.retired[k]
		r.Table, r.Name = f.table, f.name
		r.Calls += f.calls.Load()
		r.Failures += f.failures.Load()
		rt.retired[k] = r
	}
	rt.mu.Unlock()
	if last {
		f.close()
	}
}

func (f *Function) close() {
	ctx := context.Background()
	for _, p := range []*pool{&f.hookPool, &f.endpointPool} {
		closeAll(p.shut())
	}
	if f.cm != nil {
		// With a compilation cache, closing the runtime leaves the machine code compiled: only
		// the compiled module's Close frees it.
		_ = f.cm.Close(ctx)
	}
	_ = f.r.Close(ctx)
}

// Name is the function's name in its table.
func (f *Function) Name() string { return f.name }

// Hooks says what the function does.
func (f *Function) Hooks() Hooks { return f.hooks }

// Disabled says whether this server stopped running it.
func (f *Function) Disabled() bool { return f.disabled.Load() }

func (f *Function) hookNames() []string {
	var n []string
	for _, h := range []struct {
		on   bool
		name string
	}{{f.hooks.PreMutate, "pre_mutate"}, {f.hooks.PostMutate, "post_mutate"}, {f.hooks.FilterRow, "filter_row"}, {f.hooks.FileRow, "file_row"}} {
		if h.on {
			n = append(n, h.name)
		}
	}
	for _, e := range f.hooks.Endpoints {
		n = append(n, "endpoint:"+e)
	}
	return n
}

// instance is one running copy of the module: calls on it take turns.
type instance struct {
	f      *Function
	mod    api.Module
	mem    api.Memory
	fns    map[string]api.Function
	out    []byte
	outErr error
	stderr boundedBuffer
}

type instanceKey struct{}

// instantiate starts an instance (its memory is counted by its pool or by Load).
func (f *Function) instantiate(ctx context.Context) (*instance, error) {
	in := &instance{f: f, fns: map[string]api.Function{}}
	ictx, cancel := context.WithTimeout(context.WithValue(ctx, instanceKey{}, in), instantiateTimeout)
	defer cancel()
	mod, err := f.r.InstantiateModule(ictx, f.cm, wazero.NewModuleConfig().WithName("").
		WithStartFunctions("_initialize").WithStderr(&in.stderr).WithSysWalltime().WithSysNanotime())
	if err != nil {
		return nil, fmt.Errorf("starting: %w%s", err, in.stderr.suffix())
	}
	in.mod, in.mem = mod, mod.Memory()
	if in.mem == nil {
		_ = mod.Close(ctx)
		return nil, errors.New("the module has no memory")
	}
	for name := range hookSig {
		if fn := mod.ExportedFunction(name); fn != nil {
			in.fns[name] = fn
		}
	}
	if _, ok := in.fns[abi.ExportInit]; ok {
		st, out, err := in.call(ctx, instantiateTimeout, abi.ExportInit, f.args)
		if err == nil && st != abi.StatusOK {
			err = fmt.Errorf("init refused the table's args (status %d): %s", st, out)
		}
		if err != nil {
			_ = mod.Close(ctx)
			return nil, err
		}
	}
	return in, nil
}

// call runs one export with input and returns its status and output (valid until the next
// call on the instance).
func (in *instance) call(ctx context.Context, timeout time.Duration, export string, input []byte) (int32, []byte, error) {
	fn := in.fns[export]
	if fn == nil {
		return 0, nil, fmt.Errorf("the module does not export %s", export)
	}
	cctx, cancel := context.WithTimeout(context.WithValue(ctx, instanceKey{}, in), timeout)
	defer cancel()
	in.out, in.outErr = in.out[:0], nil
	var res []uint64
	var err error
	if hookSig[export][0] == 2 {
		var ptr []uint64
		if ptr, err = in.fns[abi.ExportAlloc].Call(cctx, uint64(len(input))); err == nil {
			p := uint32(ptr[0])
			if len(input) > 0 && !in.mem.Write(p, input) {
				return 0, nil, fmt.Errorf("%s returned memory out of bounds (%d bytes at %d)", abi.ExportAlloc, len(input), p)
			}
			res, err = fn.Call(cctx, uint64(p), uint64(len(input)))
		}
	} else {
		res, err = fn.Call(cctx)
	}
	if err != nil {
		if cctx.Err() != nil && ctx.Err() == nil {
			return 0, nil, fmt.Errorf("%s ran out of its %v%s", export, timeout, in.stderr.suffix())
		}
		return 0, nil, fmt.Errorf("%s trapped: %w%s", export, err, in.stderr.suffix())
	}
	if in.outErr != nil {
		return 0, nil, in.outErr
	}
	return int32(res[0]), in.out, nil
}

func hostOutput(ctx context.Context, m api.Module, ptr, n uint32) {
	in, _ := ctx.Value(instanceKey{}).(*instance)
	if in == nil {
		return
	}
	if int(n)+len(in.out) > MaxOutput {
		in.outErr = fmt.Errorf("output over %d bytes", MaxOutput)
		return
	}
	b, ok := m.Memory().Read(ptr, n)
	if !ok {
		in.outErr = fmt.Errorf("output out of bounds (%d bytes at %d)", n, ptr)
		return
	}
	in.out = append(in.out, b...)
}

func (f *Function) hostLog(ctx context.Context, m api.Module, ptr, n uint32) {
	b, ok := m.Memory().Read(ptr, min(n, maxLogLine))
	if !ok {
		return
	}
	f.rt.log.Info("table function says", "table", f.table, "function", f.name, "line", strings.ToValidUTF8(string(b), "?"))
}

// pool holds the instances of one use of a function, up to max.
type pool struct {
	f      *Function
	mu     sync.Mutex
	idle   []*instance
	live   int
	max    int
	closed bool // the function closed: instances coming back are closed
	// first: one instance's memory is reserved for as long as the pool is open (the pool's
	// first instance); each instance beyond it reserves its own. Changed under rt.mu and mu.
	first bool
	wake  chan struct{} // signalled when an instance comes back
}

// get takes an idle instance, starts one, or waits for one.
func (p *pool) get(ctx context.Context) (*instance, error) {
	deadline := time.Now().Add(max(10*p.f.timeout, time.Second))
	noRoom := false
	for {
		p.mu.Lock()
		if in := p.popIdleLocked(); in != nil {
			p.mu.Unlock()
			return in, nil
		}
		full := p.live >= p.max
		p.mu.Unlock()
		if !full {
			in, started, err := p.start(ctx)
			if in != nil || err != nil {
				return in, err
			}
			noRoom = noRoom || !started
		}
		if time.Now().After(deadline) {
			if noRoom {
				return nil, fmt.Errorf("%w, and %w", errBusy, errNoRoom)
			}
			return nil, errBusy
		}
		// A wake-up can be missed when several instances come back at once: look again soon.
		t := time.NewTimer(10 * time.Millisecond)
		select {
		case <-p.wake:
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return nil, ctx.Err()
		}
		t.Stop()
	}
}

// start starts an instance if the pool has fewer than max and there is memory for it: the
// instance, or nil and started false when there was no memory, true when the pool is full.
func (p *pool) start(ctx context.Context) (in *instance, started bool, err error) {
	rt := p.f.rt
	rt.mu.Lock()
	p.mu.Lock()
	if in = p.popIdleLocked(); in != nil { // one came back meanwhile
		p.mu.Unlock()
		rt.mu.Unlock()
		return in, true, nil
	}
	if p.closed {
		p.mu.Unlock()
		rt.mu.Unlock()
		return nil, true, errUnloaded
	}
	if p.live >= p.max {
		p.mu.Unlock()
		rt.mu.Unlock()
		return nil, true, nil
	}
	var victims []*instance
	ok := true
	if p.live >= p.reservedFirst() { // beyond the first: its own memory
		victims, ok = rt.reserveLocked(p.f.memory, p)
	}
	if ok {
		p.live++
	}
	p.mu.Unlock()
	rt.mu.Unlock()
	closeAll(victims)
	if !ok {
		return nil, false, nil
	}
	if in, err = p.f.instantiate(ctx); err != nil {
		p.drop()
		return nil, true, err
	}
	return in, true, nil
}

// reservedFirst is 1 when the pool's first instance is reserved, else 0. Under mu.
func (p *pool) reservedFirst() int {
	if p.first {
		return 1
	}
	return 0
}

// evictable is how many idle instances beyond the pool's first could be closed. Under mu.
func (p *pool) evictable() int {
	if p.closed {
		return 0
	}
	return max(0, min(len(p.idle), p.live-p.reservedFirst()))
}

// drop counts one instance of the pool gone (closed, or failed to start).
func (p *pool) drop() {
	rt := p.f.rt
	rt.mu.Lock()
	p.mu.Lock()
	p.dropLocked()
	p.mu.Unlock()
	rt.mu.Unlock()
	p.signal()
}

// dropLocked gives back what an instance gone from the pool reserved: its own memory if it was
// beyond the first; the first's once the pool closed and has none left. Under rt.mu and mu.
func (p *pool) dropLocked() {
	p.live--
	if p.live >= p.reservedFirst() {
		p.f.rt.reserved -= p.f.memory
	}
	p.closedEmptyLocked()
}

// closedEmptyLocked gives back the first instance's reservation of a closed pool with no
// instance left. Under rt.mu and mu.
func (p *pool) closedEmptyLocked() {
	if p.closed && p.live == 0 && p.first {
		p.first = false
		p.f.rt.reserved -= p.f.memory
	}
}

// shut closes the pool: its idle instances are taken off (returned, to be closed outside the
// locks) and what they and, once no instance is left, its first reserved is given back;
// instances coming back later are closed.
func (p *pool) shut() []*instance {
	rt := p.f.rt
	rt.mu.Lock()
	defer rt.mu.Unlock()
	p.mu.Lock()
	defer p.mu.Unlock()
	idle := p.idle
	p.idle, p.closed = nil, true
	for range idle {
		p.dropLocked()
	}
	p.closedEmptyLocked()
	return idle
}

// popIdleLocked takes the most recently used idle instance (nil: none). Under mu.
func (p *pool) popIdleLocked() *instance {
	n := len(p.idle)
	if n == 0 {
		return nil
	}
	in := p.idle[n-1]
	p.idle = p.idle[:n-1]
	return in
}

// errBusy: every instance stayed busy while a call waited for one (the waiting is bounded).
var errBusy = errors.New("every instance of the function stayed busy")

func (p *pool) put(in *instance) {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		p.discard(in)
		return
	}
	if in.stderr.Len() > 0 {
		in.stderr.Reset()
	}
	p.idle = append(p.idle, in)
	p.mu.Unlock()
	p.signal()
}

// discard drops an instance whose state cannot be trusted (it trapped or overran).
func (p *pool) discard(in *instance) {
	_ = in.mod.Close(context.Background())
	p.drop()
}

func (p *pool) signal() {
	select {
	case p.wake <- struct{}{}:
	default:
	}
}

// Call runs export with input on an instance and hands the status and output to use (which
// must not keep the output). A trap, overrun or negative status counts as a failure, and so does
// an error of use (the module answered wrongly).
func (f *Function) Call(ctx context.Context, export string, input []byte, use func(status int32, out []byte) error) error {
	return f.callOn(ctx, &f.hookPool, func(call func(string, []byte) (int32, []byte, error)) error {
		st, out, err := call(export, input)
		if err != nil || use == nil {
			return err
		}
		return use(st, out)
	})
}

// CallOn runs several exports on one instance of the endpoints' pool in turn (an endpoint's
// begin, rows and end), so that they share the module's state; each call has its own time
// limit.
func (f *Function) CallOn(ctx context.Context, run func(call func(export string, input []byte) (int32, []byte, error)) error) error {
	return f.callOn(ctx, &f.endpointPool, run)
}

func (f *Function) callOn(ctx context.Context, p *pool, run func(call func(export string, input []byte) (int32, []byte, error)) error) error {
	if f.disabled.Load() {
		return fmt.Errorf("%w: %s (function %q of %s)", ErrDisabled, f.lastError(), f.name, f.table)
	}
	f.calls.Add(1)
	in, err := p.get(ctx)
	if errors.Is(err, errNoRoom) {
		return fmt.Errorf("%w %q of %s: %w: %w: retry later (raise --function-memory if this persists)", region.ErrFunction, f.name, f.table, region.ErrFunctionBusy, err)
	}
	if errors.Is(err, errBusy) {
		return fmt.Errorf("%w %q of %s: %w: %w (%d instances): retry later", region.ErrFunction, f.name, f.table, region.ErrFunctionBusy, err, p.max)
	}
	if err != nil {
		if d := f.notItsFailure(ctx, p, err); d != nil {
			return d
		}
		return f.failed(err) // its start failed
	}
	broken := false
	var tooLarge error
	err = run(func(export string, input []byte) (int32, []byte, error) {
		if broken {
			return 0, nil, errors.New("the instance failed")
		}
		if int64(len(input)) > f.memory/2 {
			// The module could not take it in (its allocator would fail): the caller's doing,
			// not the module's, so it is refused without counting against the function.
			tooLarge = fmt.Errorf("%w: %s of function %q of %s: its input of %d bytes is over half the function's memory (MEMORY_MB %d): "+
				"raise MEMORY_MB or send less at once", region.ErrInvalid, export, f.name, f.table, len(input), f.memory>>20)
			return 0, nil, tooLarge
		}
		st, out, err := in.call(ctx, f.timeout, export, input)
		if err != nil {
			broken = true
			return 0, nil, err
		}
		if st < 0 {
			return st, nil, fmt.Errorf("%s failed (status %d): %s", export, st, limitText(out))
		}
		return st, out, nil
	})
	if broken {
		p.discard(in)
	} else {
		p.put(in)
	}
	if err != nil {
		if tooLarge != nil && errors.Is(err, tooLarge) {
			return err
		}
		if d := f.notItsFailure(ctx, p, err); d != nil {
			return d
		}
		return f.failed(err)
	}
	f.consecutive.Store(0)
	return nil
}

// notItsFailure returns the error to answer when a call failed for a reason of the caller or of
// the server rather than the module's — the caller's context ended (its deadline, or it went
// away: the instance was stopped mid-call), or the function was unloaded (its regions closed) —
// and nil when the failure is the module's. Those are not counted: else a client could switch off
// a table's read filter and write checks (MAX_FAILURES) by calling with a short deadline.
func (f *Function) notItsFailure(ctx context.Context, p *pool, err error) error {
	switch {
	case ctx.Err() != nil:
		return fmt.Errorf("%w %q of %s: %w: the call's deadline passed or its caller went away: %w", region.ErrFunction, f.name, f.table,
			region.ErrFunctionBusy, ctx.Err())
	case p.isClosed():
		return fmt.Errorf("function %q of %s: %w", f.name, f.table, errUnloaded)
	}
	return nil
}

// errUnloaded is the error of a call on a function its regions released meanwhile: the region
// closed (a move, an alter), so the client finds it again (NOT_SERVING).
var errUnloaded = fmt.Errorf("%w: the function was unloaded here (its table altered, or its regions closed): retry", region.ErrClosed)

func (p *pool) isClosed() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.closed
}

func (f *Function) failed(err error) error {
	f.failures.Add(1)
	msg := err.Error()
	f.lastErr.Store(&msg)
	if n := f.consecutive.Add(1); n >= f.maxFailures && f.disabled.CompareAndSwap(false, true) {
		f.rt.log.Error("table function disabled on this server after failing repeatedly: alter the table to load a fixed module",
			"table", f.table, "function", f.name, "failures", n, "lastError", msg)
	} else {
		f.rt.log.Warn("table function failed", "table", f.table, "function", f.name, "error", msg)
	}
	return fmt.Errorf("%w %q of %s: %w", region.ErrFunction, f.name, f.table, err)
}

func (f *Function) lastError() string {
	if e := f.lastErr.Load(); e != nil {
		return "last: " + *e
	}
	return ""
}

func limitText(b []byte) string {
	if len(b) > 512 {
		b = b[:512]
	}
	return strings.ToValidUTF8(string(b), "?")
}

// boundedBuffer keeps the first maxStderr bytes written (a module's stderr: a Go panic's text).
type boundedBuffer struct {
	mu sync.Mutex
	b  []byte
}

func (w *boundedBuffer) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if room := maxStderr - len(w.b); room > 0 {
		w.b = append(w.b, p[:min(room, len(p))]...)
	}
	return len(p), nil
}

func (w *boundedBuffer) Len() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.b)
}

func (w *boundedBuffer) Reset() {
	w.mu.Lock()
	w.b = w.b[:0]
	w.mu.Unlock()
}

func (w *boundedBuffer) suffix() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	s := strings.TrimSpace(strings.ToValidUTF8(string(w.b), "?"))
	if s == "" {
		return ""
	}
	// The first lines say what happened (a Go panic's message); the goroutine dumps after do not.
	if lines := strings.SplitN(s, "\n", 4); len(lines) > 3 {
		s = strings.Join(lines[:3], "; ") + " ..."
	} else {
		s = strings.Join(lines, "; ")
	}
	return " (stderr: " + s + ")"
}
