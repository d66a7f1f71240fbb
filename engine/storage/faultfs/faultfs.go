// Package faultfs wraps a storage.FS to inject faults in tests: errors,
// short writes, delays and crashes at the Nth matching operation, and
// counts every operation by kind.
//
// A crash stops the wrapped filesystem: the operation that crashes is not
// performed and every later operation, through the FS or through files
// opened from it, fails with ErrCrashed, as if the process had died. Over a
// *storage.Mem, CrashClone then returns the state a power loss could leave:
// only synced bytes and namespace changes made durable by a directory sync
// survive. Reopening that clone is how tests check recovery.
//
//	mem := storage.NewMem()
//	ffs := faultfs.New(mem)
//	ffs.AddRule(faultfs.Rule{Ops: faultfs.OpsMutating, Nth: 7, Action: faultfs.Crash})
//	... run the workload until it fails with faultfs.ErrCrashed ...
//	after := ffs.CrashClone(storage.CrashOptions{})
//	... reopen on `after`, check every acknowledged write is there ...
package faultfs

import (
	"errors"
	"fmt"
	"io"
	"math/bits"
	"path"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cellstore/cellstore/engine/storage"
)

// Op is a bit set of operation kinds.
type Op uint32

// Operation kinds.
const (
	OpCreate Op = 1 << iota
	OpWrite
	OpSync
	OpClose
	OpOpen
	OpRead
	OpList
	OpStat
	OpRename
	OpRemove
	OpRemoveAll
	OpMkdirAll
	OpTruncate
	OpSyncDir
	numOps = iota

	// OpsMutating is every operation that changes the filesystem or its
	// durable state.
	OpsMutating = OpCreate | OpWrite | OpSync | OpRename | OpRemove | OpRemoveAll | OpMkdirAll | OpTruncate | OpSyncDir
	// OpsAll is every operation.
	OpsAll Op = 1<<numOps - 1
)

var opNames = [numOps]string{"create", "write", "sync", "close", "open", "read", "list", "stat",
	"rename", "remove", "removeall", "mkdirall", "truncate", "syncdir"}

func (o Op) String() string {
	var parts []string
	for i := 0; i < numOps; i++ {
		if o&(1<<i) != 0 {
			parts = append(parts, opNames[i])
		}
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, "|")
}

// Action is what a rule does when it fires.
type Action int

const (
	// Fail returns the rule's error without performing the operation.
	Fail Action = iota
	// ShortWrite performs half of a write, then returns the error. On
	// other operations it behaves like Fail.
	ShortWrite
	// Crash does not perform the operation and stops the filesystem:
	// this and every later operation returns ErrCrashed.
	Crash
	// Delay sleeps for the rule's Delay, then performs the operation.
	Delay
	// Call calls the rule's Fn (which may block, e.g. on a channel), then
	// performs the operation.
	Call
)

// Errors returned by injected faults.
var (
	ErrInjected = errors.New("faultfs: injected error")
	ErrCrashed  = errors.New("faultfs: filesystem crashed")
)

// Rule describes a fault.
type Rule struct {
	// Ops selects the operation kinds the rule applies to.
	Ops Op
	// Path, if set, is a path.Match pattern the operation's cleaned name
	// must match (for Rename: either name; for file operations: the
	// file's name).
	Path string
	// Nth fires the rule at the Nth matching operation only (1-based).
	// Zero fires it at every matching operation. Rules are tried in the
	// order they were added and the first that fires takes the
	// operation: later rules do not see (or count) it. So two rules for
	// the first and the second sync of a file both say Nth: 1.
	Nth int64
	// Action is what happens when the rule fires.
	Action Action
	// Err is the error returned by Fail and ShortWrite (ErrInjected when
	// nil). It is wrapped with the operation and name.
	Err error
	// Delay is the sleep of the Delay action.
	Delay time.Duration
	// Fn is called by the Call action.
	Fn func()
}

type rule struct {
	Rule
	seen int64
}

// FS is a fault-injecting storage.FS.
type FS struct {
	inner storage.FS

	mu    sync.Mutex
	rules []*rule

	crashed atomic.Bool
	counts  [numOps]atomic.Int64
}

var _ storage.FS = (*FS)(nil)

// New wraps inner.
func New(inner storage.FS) *FS { return &FS{inner: inner} }

// Inner returns the wrapped filesystem.
func (f *FS) Inner() storage.FS { return f.inner }

// AddRule adds a rule. Rules are checked in the order they were added; the
// first that fires decides.
func (f *FS) AddRule(r Rule) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.rules = append(f.rules, &rule{Rule: r})
}

// ClearRules removes every rule.
func (f *FS) ClearRules() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.rules = nil
}

// Count returns how many operations of the given kinds were attempted
// (including failed ones and the one that crashed).
func (f *FS) Count(ops Op) int64 {
	var n int64
	for i := 0; i < numOps; i++ {
		if ops&(1<<i) != 0 {
			n += f.counts[i].Load()
		}
	}
	return n
}

// Crash stops the filesystem now: every later operation fails with
// ErrCrashed.
func (f *FS) Crash() { f.crashed.Store(true) }

// Crashed reports whether the filesystem has crashed.
func (f *FS) Crashed() bool { return f.crashed.Load() }

// CrashClone stops the filesystem (if it is not yet stopped) and returns
// the post-power-loss state of the wrapped *storage.Mem. It fails if the
// wrapped filesystem is not a *storage.Mem.
func (f *FS) CrashClone(opts storage.CrashOptions) (*storage.Mem, error) {
	f.Crash()
	m, ok := f.inner.(*storage.Mem)
	if !ok {
		return nil, fmt.Errorf("faultfs: CrashClone needs a *storage.Mem, have %T", f.inner)
	}
	return m.CrashClone(opts), nil
}

// fault is the outcome of checking the rules for one operation.
type fault struct {
	action Action
	err    error
}

// check counts the operation and applies the rules. It returns nil when the
// operation should proceed normally.
func (f *FS) check(op Op, names ...string) *fault {
	f.counts[bits.TrailingZeros32(uint32(op))].Add(1)
	if f.crashed.Load() {
		return &fault{action: Crash, err: ErrCrashed}
	}
	f.mu.Lock()
	var fired *rule
	for _, r := range f.rules {
		if r.Ops&op == 0 || !matchAny(r.Path, names) {
			continue
		}
		r.seen++
		if r.Nth == 0 || r.seen == r.Nth {
			fired = r
			break
		}
	}
	f.mu.Unlock()
	if fired == nil {
		return nil
	}
	err := fired.Err
	if err == nil {
		err = ErrInjected
	}
	switch fired.Action {
	case Delay:
		time.Sleep(fired.Delay)
		return nil
	case Call:
		if fired.Fn != nil {
			fired.Fn()
		}
		return nil
	case Crash:
		f.crashed.Store(true)
		return &fault{action: Crash, err: ErrCrashed}
	}
	return &fault{action: fired.Action, err: err}
}

func matchAny(pattern string, names []string) bool {
	if pattern == "" {
		return true
	}
	for _, n := range names {
		c, err := storage.Clean(n)
		if err != nil {
			c = n
		}
		if ok, _ := path.Match(pattern, c); ok {
			return true
		}
	}
	return false
}

// opError wraps an injected error with the operation and name.
type opError struct {
	op   string
	name string
	err  error
}

func (e *opError) Error() string { return e.op + " " + e.name + ": " + e.err.Error() }
func (e *opError) Unwrap() error { return e.err }

func wrap(op Op, name string, ft *fault) error {
	return &opError{op: op.String(), name: name, err: ft.err}
}

func (f *FS) Create(name string) (storage.File, error) {
	if ft := f.check(OpCreate, name); ft != nil {
		return nil, wrap(OpCreate, name, ft)
	}
	w, err := f.inner.Create(name)
	if err != nil {
		return nil, err
	}
	return &file{fs: f, inner: w}, nil
}

func (f *FS) Open(name string) (storage.ReadableFile, error) {
	if ft := f.check(OpOpen, name); ft != nil {
		return nil, wrap(OpOpen, name, ft)
	}
	r, err := f.inner.Open(name)
	if err != nil {
		return nil, err
	}
	return &readFile{fs: f, inner: r, name: name}, nil
}

func (f *FS) List(dir string) ([]string, error) {
	if ft := f.check(OpList, dir); ft != nil {
		return nil, wrap(OpList, dir, ft)
	}
	return f.inner.List(dir)
}

func (f *FS) Stat(name string) (storage.FileInfo, error) {
	if ft := f.check(OpStat, name); ft != nil {
		return storage.FileInfo{}, wrap(OpStat, name, ft)
	}
	return f.inner.Stat(name)
}

func (f *FS) Rename(oldname, newname string) error {
	if ft := f.check(OpRename, oldname, newname); ft != nil {
		return wrap(OpRename, oldname+" -> "+newname, ft)
	}
	return f.inner.Rename(oldname, newname)
}

func (f *FS) Remove(name string) error {
	if ft := f.check(OpRemove, name); ft != nil {
		return wrap(OpRemove, name, ft)
	}
	return f.inner.Remove(name)
}

func (f *FS) RemoveAll(name string) error {
	if ft := f.check(OpRemoveAll, name); ft != nil {
		return wrap(OpRemoveAll, name, ft)
	}
	return f.inner.RemoveAll(name)
}

func (f *FS) MkdirAll(dir string) error {
	if ft := f.check(OpMkdirAll, dir); ft != nil {
		return wrap(OpMkdirAll, dir, ft)
	}
	return f.inner.MkdirAll(dir)
}

func (f *FS) Truncate(name string, size int64) error {
	if ft := f.check(OpTruncate, name); ft != nil {
		return wrap(OpTruncate, name, ft)
	}
	return f.inner.Truncate(name, size)
}

func (f *FS) SyncDir(dir string) error {
	if ft := f.check(OpSyncDir, dir); ft != nil {
		return wrap(OpSyncDir, dir, ft)
	}
	return f.inner.SyncDir(dir)
}

type file struct {
	fs    *FS
	inner storage.File
}

func (w *file) Name() string { return w.inner.Name() }

func (w *file) Write(p []byte) (int, error) {
	ft := w.fs.check(OpWrite, w.inner.Name())
	if ft == nil {
		return w.inner.Write(p)
	}
	if ft.action == ShortWrite && len(p) > 1 {
		n, err := w.inner.Write(p[:len(p)/2])
		if err != nil {
			return n, err
		}
		return n, wrap(OpWrite, w.inner.Name(), ft)
	}
	return 0, wrap(OpWrite, w.inner.Name(), ft)
}

func (w *file) Sync() error {
	if ft := w.fs.check(OpSync, w.inner.Name()); ft != nil {
		return wrap(OpSync, w.inner.Name(), ft)
	}
	return w.inner.Sync()
}

func (w *file) Close() error {
	if ft := w.fs.check(OpClose, w.inner.Name()); ft != nil {
		// Release the inner handle anyway; report the fault.
		w.inner.Close()
		return wrap(OpClose, w.inner.Name(), ft)
	}
	return w.inner.Close()
}

type readFile struct {
	fs    *FS
	inner storage.ReadableFile
	name  string
}

func (r *readFile) ReadAt(p []byte, off int64) (int, error) {
	if ft := r.fs.check(OpRead, r.name); ft != nil {
		return 0, wrap(OpRead, r.name, ft)
	}
	return r.inner.ReadAt(p, off)
}

func (r *readFile) Size() (int64, error) {
	if r.fs.crashed.Load() {
		return 0, &opError{op: "size", name: r.name, err: ErrCrashed}
	}
	return r.inner.Size()
}

func (r *readFile) Close() error {
	if ft := r.fs.check(OpClose, r.name); ft != nil {
		r.inner.Close()
		return wrap(OpClose, r.name, ft)
	}
	return r.inner.Close()
}

var _ io.ReaderAt = (*readFile)(nil)
