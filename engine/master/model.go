package master

import (
	"bytes"
	"fmt"
	"slices"
	"strings"
	"time"

	"google.golang.org/protobuf/proto"

	pb "github.com/cellstore/cellstore/engine/api/cellstore/v1"
	"github.com/cellstore/cellstore/engine/layout"
)

// Catalog rows (docs/master.md, "Catalog layout"). Values are the messages of catalog.proto.
const (
	rowTable  = "table/"  // + ns:name → CatalogTable
	rowRegion = "region/" // + region name → CatalogRegion
	rowProc   = "proc/"   // + region name → RegionProcedure
	rowDead   = "dead/"   // + WAL dir name → DeadServer
	rowServer = "server/" // + server name → CatalogServer
	rowQuotas = "quotas"  // CatalogQuotas
	rowACL    = "acl"     // CatalogACL
	rowConfig = "config"  // CatalogConfig
	rowState  = "master"  // CatalogMasterState
)

// model is the active master's in-memory copy of the catalog, plus the volatile state of the
// procedures. Every field is guarded by Master.mu. Stored messages are never modified in place:
// a change clones, edits and puts the clone through a batch, so a failed catalog write leaves the
// model as it was — except a group's (reports.go), whose batches are applied as they are made and
// whose failed write stops the master at once (commitGroupLocked).
type model struct {
	tables  map[string]*pb.CatalogTable  // by ns:name
	regions map[string]*pb.CatalogRegion // by region name (replicas included)
	// primaries of each table sorted by start key (replica i of primary p is layout.ReplicaName(p.id, i))
	index   map[string][]*pb.CatalogRegion
	procs   map[string]*proc       // by region name
	dead    map[string]*deadServer // by WAL dir name
	servers map[string]*pb.CatalogServer
	quotas  *pb.CatalogQuotas
	acl     *pb.CatalogACL
	config  *pb.CatalogConfig
	state   *pb.CatalogMasterState

	// Counted as changes are applied, for the metrics (no scan to count).
	inTransition int
	nextGen      uint64
}

// proc is a region procedure with its volatile dispatch state.
type proc struct {
	p *pb.RegionProcedure
	// gen changes whenever the step, target or abort flag changes: results of RPCs sent for an
	// older generation are ignored.
	gen       uint64
	stepStart time.Time // the master's clock, when this generation began
	sending   bool      // an Open/CloseRegion RPC is under way
	accepted  bool      // the server took the order: waiting for its report
	lastSend  time.Time
}

// deadServer is a dead-server record with its volatile state.
type deadServer struct {
	d       *pb.DeadServer
	running bool // a goroutine works on its current step
	lastTry time.Time
}

func newModel() *model {
	return &model{
		tables: map[string]*pb.CatalogTable{}, regions: map[string]*pb.CatalogRegion{},
		index: map[string][]*pb.CatalogRegion{}, procs: map[string]*proc{}, dead: map[string]*deadServer{},
		servers: map[string]*pb.CatalogServer{}, quotas: &pb.CatalogQuotas{}, acl: &pb.CatalogACL{}, config: &pb.CatalogConfig{},
		state: &pb.CatalogMasterState{},
	}
}

// loadModel reads every row of the catalog.
func loadModel(c *Catalog, now time.Time) (*model, error) {
	m := newModel()
	bad := func(key string, err error) error {
		return fmt.Errorf("master: catalog row %q does not decode: %w", key, err)
	}
	for _, row := range c.Scan(rowTable) {
		t := &pb.CatalogTable{}
		if err := proto.Unmarshal(row.Value, t); err != nil {
			return nil, bad(row.Key, err)
		}
		m.tables[layout.TableKey(t.GetTable().GetName())] = t
	}
	for _, row := range c.Scan(rowRegion) {
		r := &pb.CatalogRegion{}
		if err := proto.Unmarshal(row.Value, r); err != nil {
			return nil, bad(row.Key, err)
		}
		m.setRegion(r)
	}
	for _, row := range c.Scan(rowProc) {
		p := &pb.RegionProcedure{}
		if err := proto.Unmarshal(row.Value, p); err != nil {
			return nil, bad(row.Key, err)
		}
		m.setProc(p, now)
	}
	for _, row := range c.Scan(rowDead) {
		d := &pb.DeadServer{}
		if err := proto.Unmarshal(row.Value, d); err != nil {
			return nil, bad(row.Key, err)
		}
		m.dead[d.GetWalDir()] = &deadServer{d: d}
	}
	for _, row := range c.Scan(rowServer) {
		s := &pb.CatalogServer{}
		if err := proto.Unmarshal(row.Value, s); err != nil {
			return nil, bad(row.Key, err)
		}
		m.servers[s.GetServer()] = s
	}
	if b := c.Get(rowQuotas); b != nil {
		if err := proto.Unmarshal(b, m.quotas); err != nil {
			return nil, bad(rowQuotas, err)
		}
	}
	if b := c.Get(rowACL); b != nil {
		if err := proto.Unmarshal(b, m.acl); err != nil {
			return nil, bad(rowACL, err)
		}
	}
	if b := c.Get(rowConfig); b != nil {
		if err := proto.Unmarshal(b, m.config); err != nil {
			return nil, bad(rowConfig, err)
		}
	}
	if b := c.Get(rowState); b != nil {
		if err := proto.Unmarshal(b, m.state); err != nil {
			return nil, bad(rowState, err)
		}
	}
	return m, nil
}

// inTransition: the region has a procedure or is between states.
func (m *model) regionInTransition(r *pb.CatalogRegion) bool {
	if r == nil {
		return false
	}
	if m.procs[r.GetInfo().GetName()] != nil {
		return true
	}
	switch r.GetState() {
	case pb.RegionState_REGION_STATE_OPENING, pb.RegionState_REGION_STATE_CLOSING, pb.RegionState_REGION_STATE_SPLITTING,
		pb.RegionState_REGION_STATE_MERGING:
		return true
	}
	return false
}

func (m *model) setRegion(r *pb.CatalogRegion) {
	name := r.GetInfo().GetName()
	old := m.regions[name]
	if m.regionInTransition(old) {
		m.inTransition--
	}
	m.regions[name] = r
	if m.regionInTransition(r) {
		m.inTransition++
	}
	if r.GetInfo().GetReplicaId() == 0 {
		key := layout.TableKey(r.GetInfo().GetTable())
		if r.GetInfo().GetSplit() {
			// A split parent leaves the index: its daughters cover its rows.
			m.unindex(key, name)
			return
		}
		idx := m.index[key]
		i, found := slices.BinarySearchFunc(idx, r, compareStart)
		if found {
			idx[i] = r // this region again, or a split parent replaced by its first daughter
		} else {
			m.index[key] = slices.Insert(idx, i, r)
		}
	}
}

func (m *model) deleteRegion(name string) {
	old := m.regions[name]
	if old == nil {
		return
	}
	if m.regionInTransition(old) {
		m.inTransition--
	}
	delete(m.regions, name)
	if old.GetInfo().GetReplicaId() == 0 {
		m.unindex(layout.TableKey(old.GetInfo().GetTable()), name)
	}
}

// unindex removes a primary from its table's index.
func (m *model) unindex(key, name string) {
	m.index[key] = slices.DeleteFunc(m.index[key], func(r *pb.CatalogRegion) bool { return r.GetInfo().GetName() == name })
	if len(m.index[key]) == 0 {
		delete(m.index, key)
	}
}

func compareStart(a, b *pb.CatalogRegion) int {
	return bytes.Compare(a.GetInfo().GetStartKey(), b.GetInfo().GetStartKey())
}

func (m *model) setProc(p *pb.RegionProcedure, now time.Time) {
	name := p.GetRegion()
	r := m.regions[name]
	before := m.regionInTransition(r)
	old := m.procs[name]
	if old != nil && old.p.GetId() == p.GetId() && old.p.GetStep() == p.GetStep() &&
		old.p.GetTarget() == p.GetTarget() && old.p.GetAborting() == p.GetAborting() {
		old.p = p // same generation: keep the dispatch state
	} else {
		m.nextGen++
		m.procs[name] = &proc{p: p, gen: m.nextGen, stepStart: now}
	}
	if after := m.regionInTransition(r); after != before {
		if after {
			m.inTransition++
		} else {
			m.inTransition--
		}
	}
}

func (m *model) deleteProc(name string) {
	if m.procs[name] == nil {
		return
	}
	r := m.regions[name]
	before := m.regionInTransition(r)
	delete(m.procs, name)
	if before && !m.regionInTransition(r) {
		m.inTransition--
	}
}

// table finds a visible table (not being deleted).
func (m *model) table(t *pb.TableName) *pb.CatalogTable {
	tb := m.tables[layout.TableKey(t)]
	if tb == nil || tb.GetDeleting() {
		return nil
	}
	return tb
}

// tableRegions returns every region (replicas included) of a table, primaries in key order each
// followed by its replicas.
func (m *model) tableRegions(key string) []*pb.CatalogRegion {
	var out []*pb.CatalogRegion
	for _, p := range m.index[key] {
		out = append(out, p)
		out = append(out, m.replicas(p)...)
	}
	return out
}

// replicas returns the replicas (1..) of a primary, in order; they are numbered without gaps.
func (m *model) replicas(primary *pb.CatalogRegion) []*pb.CatalogRegion {
	var out []*pb.CatalogRegion
	for i := int32(1); i < maxReplication; i++ {
		r := m.regions[layout.ReplicaName(primary.GetInfo().GetRegionId(), i)]
		if r == nil {
			break
		}
		out = append(out, r)
	}
	return out
}

// batch collects row changes applied by one catalog write, then to the model. Values are
// marshalled at commit, so a message put in a batch may still be completed before the commit
// (and must not change after it).
type batch struct {
	changes []rowChange
	apply   []func(m *model, now time.Time)
	state   *pb.CatalogMasterState // a changed copy of the counters, written once at commit
	// size's count so far: the bytes of changes[:sized].
	sized, sizedBytes int
}

// rowChange is one row of a batch: msg nil deletes it.
type rowChange struct {
	key string
	msg proto.Message
}

// catalogChanges marshals the batch.
func (b *batch) catalogChanges() ([]CatalogChange, error) {
	out := make([]CatalogChange, 0, len(b.changes)+1)
	for _, c := range b.changes {
		ch := CatalogChange{Key: c.key}
		if c.msg != nil {
			v, err := marshal(c.msg)
			if err != nil {
				return nil, err
			}
			ch.Value = v
		}
		out = append(out, ch)
	}
	if b.state != nil {
		v, err := marshal(b.state)
		if err != nil {
			return nil, err
		}
		out = append(out, CatalogChange{Key: rowState, Value: v})
	}
	return out, nil
}

func marshal(msg proto.Message) ([]byte, error) {
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(msg)
	if err != nil {
		// Only invalid UTF-8 in a string field fails (gRPC refuses such requests before).
		return nil, fmt.Errorf("master: encode %T: %w", msg, err)
	}
	if b == nil {
		b = []byte{} // an empty message is a row, not a deletion
	}
	return b, nil
}

func (b *batch) empty() bool { return len(b.changes) == 0 && b.state == nil }

// full says whether the batch has reached maxBatchBytes: a write of many regions takes no more.
func (b *batch) full() bool { return b.size() >= maxBatchBytes }

// size is about what the batch's rows take in a catalog write (each change is measured once:
// changes are only appended).
func (b *batch) size() int {
	for _, c := range b.changes[b.sized:] {
		b.sizedBytes += len(c.key) + proto.Size(c.msg)
	}
	b.sized = len(b.changes)
	return b.sizedBytes + proto.Size(b.state)
}

func (b *batch) putTable(t *pb.CatalogTable) {
	key := layout.TableKey(t.GetTable().GetName())
	b.changes = append(b.changes, rowChange{key: rowTable + key, msg: t})
	b.apply = append(b.apply, func(m *model, _ time.Time) { m.tables[key] = t })
}

func (b *batch) deleteTable(key string) {
	b.changes = append(b.changes, rowChange{key: rowTable + key})
	b.apply = append(b.apply, func(m *model, _ time.Time) { delete(m.tables, key) })
}

func (b *batch) putRegion(r *pb.CatalogRegion) {
	b.changes = append(b.changes, rowChange{key: rowRegion + r.GetInfo().GetName(), msg: r})
	b.apply = append(b.apply, func(m *model, _ time.Time) { m.setRegion(r) })
}

func (b *batch) deleteRegion(name string) {
	b.changes = append(b.changes, rowChange{key: rowRegion + name})
	b.apply = append(b.apply, func(m *model, _ time.Time) { m.deleteRegion(name) })
}

func (b *batch) putProc(p *pb.RegionProcedure) {
	b.changes = append(b.changes, rowChange{key: rowProc + p.GetRegion(), msg: p})
	b.apply = append(b.apply, func(m *model, now time.Time) { m.setProc(p, now) })
}

// touchesProc says whether the batch writes or deletes the procedure of region name.
func (b *batch) touchesProc(name string) bool {
	for _, c := range b.changes {
		if c.key == rowProc+name {
			return true
		}
	}
	return false
}

func (b *batch) deleteProc(name string) {
	b.changes = append(b.changes, rowChange{key: rowProc + name})
	b.apply = append(b.apply, func(m *model, _ time.Time) { m.deleteProc(name) })
}

func (b *batch) putDead(d *pb.DeadServer) {
	b.changes = append(b.changes, rowChange{key: rowDead + d.GetWalDir(), msg: d})
	b.apply = append(b.apply, func(m *model, _ time.Time) {
		if old := m.dead[d.GetWalDir()]; old != nil {
			old.d = d
		} else {
			m.dead[d.GetWalDir()] = &deadServer{d: d}
		}
	})
}

func (b *batch) deleteDead(dir string) {
	b.changes = append(b.changes, rowChange{key: rowDead + dir})
	b.apply = append(b.apply, func(m *model, _ time.Time) { delete(m.dead, dir) })
}

func (b *batch) putServer(s *pb.CatalogServer) {
	b.changes = append(b.changes, rowChange{key: rowServer + s.GetServer(), msg: s})
	b.apply = append(b.apply, func(m *model, _ time.Time) { m.servers[s.GetServer()] = s })
}

func (b *batch) deleteServer(name string) {
	b.changes = append(b.changes, rowChange{key: rowServer + name})
	b.apply = append(b.apply, func(m *model, _ time.Time) { delete(m.servers, name) })
}

func (b *batch) putACL(a *pb.CatalogACL) {
	b.changes = append(b.changes, rowChange{key: rowACL, msg: a})
	b.apply = append(b.apply, func(m *model, _ time.Time) { m.acl = a })
}

func (b *batch) putQuotas(q *pb.CatalogQuotas) {
	b.changes = append(b.changes, rowChange{key: rowQuotas, msg: q})
	b.apply = append(b.apply, func(m *model, _ time.Time) { m.quotas = q })
}

func (b *batch) putConfig(c *pb.CatalogConfig) {
	b.changes = append(b.changes, rowChange{key: rowConfig, msg: c})
	b.apply = append(b.apply, func(m *model, _ time.Time) { m.config = c })
}

// counters returns the batch's copy of the master state row, made on first use.
func (b *batch) counters(m *model) *pb.CatalogMasterState {
	if b.state == nil {
		b.state = proto.CloneOf(m.state)
	}
	return b.state
}

// rows lists the batch's keys, for logs and errors.
func (b *batch) rows() string {
	const most = 8
	keys := make([]string, 0, most+1)
	for _, c := range b.changes[:min(len(b.changes), most)] {
		keys = append(keys, c.key)
	}
	if len(b.changes) > most {
		keys = append(keys, fmt.Sprintf("and %d more rows", len(b.changes)-most))
	}
	return strings.Join(keys, ",")
}
