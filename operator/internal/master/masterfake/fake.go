// Package masterfake is an in-memory Cellstore master for the operator's tests: it records every
// call in a journal, and tests control its servers, their region counts and how drains progress.
package masterfake

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/cellstore/cellstore/operator/api/v1alpha1"
	"github.com/cellstore/cellstore/operator/internal/master"
	"k8s.io/apimachinery/pkg/types"
)

// Registry holds one fake master per StoreCluster.
type Registry struct {
	mu    sync.Mutex
	fakes map[types.NamespacedName]*Fake
}

// NewRegistry makes an empty registry.
func NewRegistry() *Registry { return &Registry{fakes: map[types.NamespacedName]*Fake{}} }

// For returns the fake master of a cluster, making it on first use.
func (r *Registry) For(key types.NamespacedName) *Fake {
	r.mu.Lock()
	defer r.mu.Unlock()
	f, ok := r.fakes[key]
	if !ok {
		f = New()
		r.fakes[key] = f
	}
	return f
}

// Factory is the master.Factory the reconcilers get in tests.
func (r *Registry) Factory(c *v1alpha1.StoreCluster) (master.Client, error) {
	f := r.For(types.NamespacedName{Namespace: c.Namespace, Name: c.Name})
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.unreachable != nil {
		return nil, f.unreachable
	}
	return client{f}, nil
}

type server struct {
	state   master.ServerState
	zone    string
	regions int32
}

// Fake is one in-memory master.
type Fake struct {
	mu          sync.Mutex
	active      string
	versions    []string
	servers     map[string]*server
	draining    map[string]bool
	quotas      map[master.QuotaKey]master.Quota
	grants      map[string]master.Permission // by user and scope
	replication int32
	inTransit   int32
	manualDrain bool
	unreachable error
	journal     []string
	statusCalls int
	// Backups: tables, snapshots in the cluster (name → table) and at the backup location,
	// copies in progress (calls left before done), copies to fail.
	tables     []string
	snapshots  map[string]string
	backups    map[string]string
	copies     map[string]int
	copyCalls  int
	failCopies int
	// failSnapshotDeletes fails that many DeleteSnapshot calls.
	failSnapshotDeletes int
	restored            []string
	disabled            map[string]bool
	restoreErrors       map[string]string // tables whose restore fails at the master, with why
	external            map[string]string
	// externalUnimpl: the external-address calls answer Unimplemented (an older engine).
	externalUnimpl bool
	// statusGate, when set, holds ClusterStatus calls until it is closed (a master that takes
	// long to answer); heldStatus counts the calls it holds.
	statusGate chan struct{}
	heldStatus int
}

// HoldStatus makes ClusterStatus calls wait until release is called (once or more).
func (f *Fake) HoldStatus() (release func()) {
	f.mu.Lock()
	defer f.mu.Unlock()
	gate := make(chan struct{})
	f.statusGate = gate
	var once sync.Once
	return func() {
		once.Do(func() {
			f.mu.Lock()
			defer f.mu.Unlock()
			if f.statusGate == gate {
				f.statusGate = nil
			}
			close(gate)
		})
	}
}

// HeldStatus is the number of ClusterStatus calls HoldStatus holds now.
func (f *Fake) HeldStatus() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.heldStatus
}

// New makes a fake master with no servers.
func New() *Fake {
	return &Fake{
		servers:       map[string]*server{},
		draining:      map[string]bool{},
		quotas:        map[master.QuotaKey]master.Quota{},
		replication:   1,
		snapshots:     map[string]string{},
		backups:       map[string]string{},
		copies:        map[string]int{},
		copyCalls:     1,
		disabled:      map[string]bool{},
		restoreErrors: map[string]string{},
	}
}

func (f *Fake) note(format string, args ...any) {
	f.journal = append(f.journal, fmt.Sprintf(format, args...))
}

// Note adds a test's own event to the journal (e.g. "delete pod x"), to check ordering.
func (f *Fake) Note(format string, args ...any) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.note(format, args...)
}

// Journal returns the calls and notes so far, in order.
func (f *Fake) Journal() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.journal)
}

// Count returns how many journal entries start with prefix.
func (f *Fake) Count(prefix string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := 0
	for _, e := range f.journal {
		if strings.HasPrefix(e, prefix) {
			n++
		}
	}
	return n
}

// StatusCalls is the number of ClusterStatus calls, a measure of reconciles that reached the master.
func (f *Fake) StatusCalls() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.statusCalls
}

// SetUnreachable makes the factory fail with err (nil: reachable again).
func (f *Fake) SetUnreachable(err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.unreachable = err
}

// SetVersions sets the release versions the processes report (ClusterStatus.Versions).
func (f *Fake) SetVersions(vs ...string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.versions = slices.Clone(vs)
}

// SetActiveMaster sets the active master's identity.
func (f *Fake) SetActiveMaster(name string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.active = name
}

// ActiveMaster returns the active master's identity.
func (f *Fake) ActiveMaster() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.active
}

// RegisterServer makes a server Online (keeping its drain mark, if any) with no regions.
func (f *Fake) RegisterServer(name string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if s, ok := f.servers[name]; ok {
		s.state = master.ServerOnline
		return
	}
	f.servers[name] = &server{state: master.ServerOnline}
}

// ServerGone removes a server (its pod was deleted): what it held is reassigned to the others, as
// crash recovery does.
func (f *Fake) ServerGone(name string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	s, ok := f.servers[name]
	if !ok {
		return
	}
	delete(f.servers, name)
	f.spread(s.regions)
}

// SetRegions sets how many regions a server holds.
func (f *Fake) SetRegions(name string, n int32) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if s, ok := f.servers[name]; ok {
		s.regions = n
	}
}

// Regions returns how many regions a server holds (-1 if unknown).
func (f *Fake) Regions(name string) int32 {
	f.mu.Lock()
	defer f.mu.Unlock()
	if s, ok := f.servers[name]; ok {
		return s.regions
	}
	return -1
}

// Zone returns the zone the master was told for a server.
func (f *Fake) Zone(name string) string {
	f.mu.Lock()
	defer f.mu.Unlock()
	if s, ok := f.servers[name]; ok {
		return s.zone
	}
	return ""
}

// Draining says whether a server is marked draining.
func (f *Fake) Draining(name string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.draining[name]
}

// SetManualDrain: when true, Drain only marks the server and its regions stay until
// MoveRegionsAway (a slow or stuck drain); when false (the default) they move at once.
func (f *Fake) SetManualDrain(manual bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.manualDrain = manual
}

// MoveRegionsAway finishes a drain: the server's regions go to the other servers.
func (f *Fake) MoveRegionsAway(name string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.moveAway(name)
}

// SetRegionsInTransition sets the reported regions in transition.
func (f *Fake) SetRegionsInTransition(n int32) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.inTransit = n
}

// Quotas returns the throttles by identity string.
func (f *Fake) Quotas() map[string]master.Quota {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := map[string]master.Quota{}
	for k, q := range f.quotas {
		out[k.String()] = q
	}
	return out
}

// PutQuota sets a throttle directly, as a person with the shell would (not journaled).
func (f *Fake) PutQuota(q master.Quota) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.quotas[q.Key()] = q
}

// Replication returns the default region replication.
func (f *Fake) Replication() int32 {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.replication
}

func (f *Fake) moveAway(name string) {
	s, ok := f.servers[name]
	if !ok || s.regions == 0 {
		return
	}
	if len(f.targets(name)) == 0 {
		return // nowhere to go: the drain is stuck
	}
	n := s.regions
	s.regions = 0
	f.spread(n)
}

// targets are the servers that can take regions: Online, not draining, not except.
func (f *Fake) targets(except string) []string {
	var out []string
	for name, s := range f.servers {
		if name != except && s.state == master.ServerOnline && !f.draining[name] {
			out = append(out, name)
		}
	}
	sort.Strings(out)
	return out
}

func (f *Fake) spread(n int32) {
	t := f.targets("")
	if len(t) == 0 {
		return
	}
	for i := int32(0); i < n; i++ {
		f.servers[t[int(i)%len(t)]].regions++
	}
}

type client struct{ f *Fake }

func (c client) ClusterStatus(context.Context) (*master.ClusterStatus, error) {
	f := c.f
	f.mu.Lock()
	if gate := f.statusGate; gate != nil {
		f.heldStatus++
		f.mu.Unlock()
		<-gate
		f.mu.Lock()
		f.heldStatus--
	}
	defer f.mu.Unlock()
	f.statusCalls++
	st := &master.ClusterStatus{ActiveMaster: f.active, RegionsInTransition: f.inTransit, DefaultRegionReplication: f.replication,
		Versions: slices.Clone(f.versions)}
	for name, s := range f.servers {
		st.Servers = append(st.Servers, master.ServerStatus{Name: name, State: s.state, Draining: f.draining[name], Zone: s.zone, Regions: s.regions})
		st.RegionsTotal += s.regions
	}
	sort.Slice(st.Servers, func(i, j int) bool { return st.Servers[i].Name < st.Servers[j].Name })
	return st, nil
}

func (c client) Drain(_ context.Context, name string) error {
	f := c.f
	f.mu.Lock()
	defer f.mu.Unlock()
	f.note("Drain %s", name)
	f.draining[name] = true
	if !f.manualDrain {
		f.moveAway(name)
	}
	return nil
}

func (c client) Undrain(_ context.Context, name string) error {
	f := c.f
	f.mu.Lock()
	defer f.mu.Unlock()
	f.note("Undrain %s", name)
	delete(f.draining, name)
	return nil
}

func (c client) Balance(context.Context) error {
	f := c.f
	f.mu.Lock()
	defer f.mu.Unlock()
	f.note("Balance")
	t := f.targets("")
	if len(t) == 0 {
		return nil
	}
	var total int32
	for _, name := range t {
		total += f.servers[name].regions
		f.servers[name].regions = 0
	}
	f.spread(total)
	return nil
}

// External is what SetExternalAddresses last set.
func (f *Fake) External() map[string]string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return maps.Clone(f.external)
}

// SetExternalUnimplemented makes the external-address calls fail as an engine that predates them.
func (f *Fake) SetExternalUnimplemented(on bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.externalUnimpl = on
}

func (c client) ExternalAddresses(context.Context) (map[string]string, error) {
	c.f.mu.Lock()
	unimpl := c.f.externalUnimpl
	c.f.mu.Unlock()
	if unimpl {
		return nil, status.Error(codes.Unimplemented, "unknown method GetExternalAddresses")
	}
	return c.f.External(), nil
}

func (c client) SetExternalAddresses(_ context.Context, addrs map[string]string) error {
	f := c.f
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.externalUnimpl {
		return status.Error(codes.Unimplemented, "unknown method SetExternalAddresses")
	}
	f.note("SetExternalAddresses %d", len(addrs))
	f.external = maps.Clone(addrs)
	return nil
}

func (c client) SetServerZone(_ context.Context, name, zone string) error {
	f := c.f
	f.mu.Lock()
	defer f.mu.Unlock()
	f.note("SetServerZone %s %s", name, zone)
	s, ok := f.servers[name]
	if !ok {
		return fmt.Errorf("server %s is not registered", name)
	}
	s.zone = zone
	return nil
}

func (c client) SetQuota(_ context.Context, q master.Quota) error {
	f := c.f
	f.mu.Lock()
	defer f.mu.Unlock()
	f.note("SetQuota %s %d/%s", q.Key(), q.Limit, q.TimeUnit)
	f.quotas[q.Key()] = q
	return nil
}

func (c client) Grant(_ context.Context, p master.Permission) error {
	f := c.f
	f.mu.Lock()
	defer f.mu.Unlock()
	f.note("Grant %s %s", p.User, p)
	if f.grants == nil {
		f.grants = map[string]master.Permission{}
	}
	f.grants[p.User+" "+p.Scope()] = p
	return nil
}

func (c client) Revoke(_ context.Context, p master.Permission) error {
	f := c.f
	f.mu.Lock()
	defer f.mu.Unlock()
	f.note("Revoke %s %s", p.User, p.Scope())
	delete(f.grants, p.User+" "+p.Scope())
	return nil
}

// Grants are the permissions granted, "user scope: actions", sorted.
func (f *Fake) Grants() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []string
	for _, p := range f.grants {
		out = append(out, p.User+" "+p.String())
	}
	slices.Sort(out)
	return out
}

func (c client) RemoveQuota(_ context.Context, k master.QuotaKey) error {
	f := c.f
	f.mu.Lock()
	defer f.mu.Unlock()
	f.note("RemoveQuota %s", k)
	delete(f.quotas, k)
	return nil
}

func (c client) ListQuotas(context.Context) ([]master.Quota, error) {
	f := c.f
	f.mu.Lock()
	defer f.mu.Unlock()
	out := make([]master.Quota, 0, len(f.quotas))
	for _, q := range f.quotas {
		out = append(out, q)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Key().String() < out[j].Key().String() })
	return out, nil
}

func (c client) SetDefaultRegionReplication(_ context.Context, n int32) error {
	f := c.f
	f.mu.Lock()
	defer f.mu.Unlock()
	f.note("SetDefaultRegionReplication %d", n)
	f.replication = n
	return nil
}

func (c client) Close() error { return nil }

// SetTables sets the tables the fake has ("namespace:table").
func (f *Fake) SetTables(tables ...string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.tables = append([]string(nil), tables...)
}

// SetCopyCalls makes a copy answer Running that many times before Done (default 1: done at the
// second call).
func (f *Fake) SetCopyCalls(n int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.copyCalls = n
}

// FailCopies makes the next n copies fail (as a master that lost the backup location would).
func (f *Fake) FailCopies(n int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.failCopies = n
}

// FailSnapshotDeletes makes the next n DeleteSnapshot calls fail (a master that went away).
func (f *Fake) FailSnapshotDeletes(n int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.failSnapshotDeletes = n
}

// Snapshots are the snapshots in the cluster (name → table); Backups those at the backup location.
func (f *Fake) Snapshots() map[string]string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return maps.Clone(f.snapshots)
}

// Backups are the snapshots at the backup location (name → table).
func (f *Fake) Backups() map[string]string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return maps.Clone(f.backups)
}

// PutBackup puts a snapshot at the backup location (another cluster's backup).
func (f *Fake) PutBackup(name, table string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.backups[name] = table
}

// Restored lists the snapshots restored, in order.
func (f *Fake) Restored() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.restored)
}

func (c client) ListTables(context.Context) ([]string, error) {
	c.f.mu.Lock()
	defer c.f.mu.Unlock()
	return slices.Clone(c.f.tables), nil
}

func (c client) Snapshot(_ context.Context, table, name string) error {
	f := c.f
	f.mu.Lock()
	defer f.mu.Unlock()
	if !slices.Contains(f.tables, table) {
		return fmt.Errorf("%w: %s", master.ErrTableNotFound, table)
	}
	if _, ok := f.snapshots[name]; !ok {
		f.snapshots[name] = table
		f.note("snapshot %s %s", table, name)
	}
	return nil
}

func (c client) CopySnapshot(_ context.Context, name string, export bool) (master.CopyStatus, error) {
	f := c.f
	f.mu.Lock()
	defer f.mu.Unlock()
	from, to := f.backups, f.snapshots
	key := "import/" + name
	if export {
		from, to, key = f.snapshots, f.backups, "export/"+name
	}
	table, ok := from[name]
	if !ok {
		return master.CopyStatus{}, fmt.Errorf("snapshot %s does not exist", name)
	}
	left, running := f.copies[key]
	if !running {
		if f.failCopies > 0 {
			f.failCopies--
			f.note("copy %s failed", key)
			return master.CopyStatus{State: master.CopyFailed, Error: "injected failure"}, nil
		}
		f.copies[key] = f.copyCalls
		f.note("copy %s started", key)
		return master.CopyStatus{State: master.CopyRunning, FilesTotal: 2}, nil
	}
	if left > 0 {
		f.copies[key] = left - 1
		return master.CopyStatus{State: master.CopyRunning, Files: 1, FilesTotal: 2}, nil
	}
	to[name] = table
	return master.CopyStatus{State: master.CopyDone, Files: 2, FilesTotal: 2, Bytes: 2048}, nil
}

func (c client) RestoreSnapshot(_ context.Context, name string, until time.Time) error {
	f := c.f
	f.mu.Lock()
	defer f.mu.Unlock()
	table, ok := f.snapshots[name]
	if !ok {
		return fmt.Errorf("snapshot %s does not exist", name)
	}
	if slices.Contains(f.tables, table) {
		return fmt.Errorf("table %s is enabled: disable it before restoring a snapshot into it", table)
	}
	f.tables = append(f.tables, table)
	f.restored = append(f.restored, name)
	if until.IsZero() {
		f.note("restore %s", name)
	} else {
		f.note("restore %s until %s", name, until.UTC().Format(time.RFC3339))
	}
	return nil
}

func (c client) DeleteSnapshot(_ context.Context, name string) error {
	c.f.mu.Lock()
	defer c.f.mu.Unlock()
	if c.f.failSnapshotDeletes > 0 {
		c.f.failSnapshotDeletes--
		return fmt.Errorf("deleting snapshot %s: injected failure", name)
	}
	delete(c.f.snapshots, name)
	delete(c.f.copies, "export/"+name)
	delete(c.f.copies, "import/"+name)
	return nil
}

func (c client) DeleteBackup(_ context.Context, name string) error {
	c.f.mu.Lock()
	defer c.f.mu.Unlock()
	if _, ok := c.f.backups[name]; ok {
		c.f.note("delete backup %s", name)
	}
	delete(c.f.backups, name)
	return nil
}

// Disabled reports whether the fake's table is disabled.
func (f *Fake) Disabled(table string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.disabled[table]
}

// DisableForTest disables a table (one a person disabled).
func (f *Fake) DisableForTest(table string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.disabled[table] = true
}

// FailRestoreForTest makes the restore of table fail at the master, as its writing of the regions
// does (a gap in the WAL archive): the table stays ENABLING, its error listed; "" ends it.
func (f *Fake) FailRestoreForTest(table, why string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if why == "" {
		delete(f.restoreErrors, table)
	} else {
		f.restoreErrors[table] = why
	}
}

func (c client) TableEnabled(_ context.Context, table string) (bool, string, error) {
	f := c.f
	f.mu.Lock()
	defer f.mu.Unlock()
	if why := f.restoreErrors[table]; why != "" && slices.Contains(f.tables, table) {
		return false, why, nil
	}
	return slices.Contains(f.tables, table) && !f.disabled[table], "", nil
}

func (c client) EnabledTables(context.Context) ([]string, error) {
	f := c.f
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []string
	for _, t := range f.tables {
		if !f.disabled[t] {
			out = append(out, t)
		}
	}
	return out, nil
}

func (c client) DisableTable(_ context.Context, table string) error {
	f := c.f
	f.mu.Lock()
	defer f.mu.Unlock()
	if slices.Contains(f.tables, table) && !f.disabled[table] {
		f.disabled[table] = true
		f.note("disable %s", table)
	}
	return nil
}

func (c client) EnableTable(_ context.Context, table string) error {
	f := c.f
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.disabled[table] {
		delete(f.disabled, table)
		f.note("enable %s", table)
	}
	return nil
}
