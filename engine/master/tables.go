package master

import (
	"bytes"
	"context"
	"regexp"
	"slices"
	"sort"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/cellstore/cellstore/engine/access"
	pb "github.com/cellstore/cellstore/engine/api/cellstore/v1"
	"github.com/cellstore/cellstore/engine/layout"
	"github.com/cellstore/cellstore/engine/pattern"
	"github.com/cellstore/cellstore/engine/schema"
	"github.com/cellstore/cellstore/engine/security"
	"github.com/cellstore/cellstore/engine/wal"
)

// DDL (HBase's table procedures). Each call makes one catalog write that changes the table and
// starts the region procedures; the loop finishes the work (enabling → enabled, disabling →
// disabled, archive and forget a dropped table) and the call waits up to DDLWait for it.

// checkTableDescriptor normalises and checks a descriptor from a request.
func checkTableDescriptor(td *pb.TableDescriptor) (*pb.TableDescriptor, error) {
	if td == nil {
		return nil, errInvalid("no table descriptor given")
	}
	td = proto.CloneOf(td)
	td.Name = normTableName(td.GetName())
	if err := schema.UserTable(td.GetName()); err != nil {
		return nil, errInvalid("%v", err)
	}
	if err := validDescriptor(td); err != nil {
		return nil, errInvalid("%v", err)
	}
	return td, nil
}

// checkTableName normalises and checks a table name from a request.
func checkTableName(t *pb.TableName) (*pb.TableName, error) {
	t = normTableName(t)
	if err := validTableName(t); err != nil {
		return nil, errInvalid("%v", err)
	}
	return t, nil
}

// newRegionsLocked makes the regions of a table split at keys (OFFLINE, with ASSIGN procedures
// when assign), and returns their infos.
func (m *Master) newRegionsLocked(b *batch, td *pb.TableDescriptor, keys [][]byte, assign bool) []*pb.RegionInfo {
	st := b.counters(m.st)
	base := max(st.GetLastRegionId()+1, uint64(m.clock().UnixMilli()))
	n := len(keys) + 1
	st.LastRegionId = base + uint64(n) - 1
	now := m.clock().UnixMilli()
	var infos []*pb.RegionInfo
	for i := range n {
		id := base + uint64(i)
		var start, end []byte
		if i > 0 {
			start = keys[i-1]
		}
		if i < len(keys) {
			end = keys[i]
		}
		for rep := range td.GetRegionReplication() {
			info := &pb.RegionInfo{RegionId: id, Table: proto.CloneOf(td.GetName()), StartKey: bytes.Clone(start),
				EndKey: bytes.Clone(end), ReplicaId: rep, Name: layout.ReplicaName(id, rep)}
			infos = append(infos, info)
			b.putRegion(&pb.CatalogRegion{Info: info, State: stateOffline, StateSinceMs: now})
			if assign {
				b.putProc(m.newProcLocked(b, info.Name, kindAssign, stepOpen))
			}
		}
	}
	return infos
}

func (m *Master) createTable(ctx context.Context, req *pb.CreateTableRequest) (*pb.CreateTableResponse, error) {
	td, err := checkTableDescriptor(req.GetTable())
	if err != nil {
		return nil, err
	}
	if err := m.storeFunctions(ctx, td); err != nil {
		return nil, err
	}
	keys, err := splitKeysFor(req.GetSplitKeys(), req.GetNumRegions())
	if err != nil {
		return nil, errInvalid("table %s: %v", layout.TableKey(td.GetName()), err)
	}
	if err := m.lock(); err != nil {
		return nil, err
	}
	defer m.mu.Unlock()
	key := layout.TableKey(td.GetName())
	if t := m.st.tables[key]; t != nil {
		if t.GetDeleting() {
			return nil, errDetail(pb.ErrorCode_ERROR_CODE_TABLE_EXISTS, true, "table %s is being deleted: retry shortly", key)
		}
		return nil, errDetail(pb.ErrorCode_ERROR_CODE_TABLE_EXISTS, false, "table %s already exists", key)
	}
	if td.GetRegionReplication() == 0 {
		td.RegionReplication = m.defaultReplicationLocked()
	}
	if err := m.checkCapacityLocked(key, (len(keys)+1)*int(max(td.GetRegionReplication(), 1))); err != nil {
		return nil, err
	}
	var b batch
	infos := m.newRegionsLocked(&b, td, keys, true)
	now := m.clock().UnixMilli()
	b.putTable(&pb.CatalogTable{Table: td, State: pb.TableState_TABLE_STATE_ENABLING, CreatedMs: now, StateSinceMs: now})
	owner := m.ownerGrantLocked(ctx, &b, td.GetName())
	if err := m.commit(&b); err != nil {
		return nil, err
	}
	m.log.Info("table created", "table", key, "regions", len(keys)+1, "replication", td.GetRegionReplication(), "owner", owner)
	m.waitTableState(ctx, key, pb.TableState_TABLE_STATE_ENABLED)
	return &pb.CreateTableResponse{Regions: infos}, nil
}

// DefaultMaxRegionsPerServer is Config.MaxRegionsPerServer's default.
const DefaultMaxRegionsPerServer = 10000

// checkCapacityLocked refuses to add n regions (replicas counted) to table key when the live
// servers would then be asked to hold more than MaxRegionsPerServer each. With no live server
// nothing is refused (regions wait for one).
func (m *Master) checkCapacityLocked(key string, n int) error {
	live := 0
	for _, s := range m.reg.All() {
		if s.Live && !s.Draining {
			live++
		}
	}
	if live == 0 {
		return nil
	}
	limit := live * m.cfg.MaxRegionsPerServer
	if have := len(m.st.regions); have+n > limit {
		return errDetail(pb.ErrorCode_ERROR_CODE_FAILED_PRECONDITION, false,
			"table %s needs %d regions but the cluster holds %d of at most %d (%d live servers x %d, --max-regions-per-server): "+
				"create it with fewer regions, drop tables or add region servers", key, n, have, limit, live, m.cfg.MaxRegionsPerServer)
	}
	return nil
}

// waitTableState waits (m.mu held) until the table reaches state or is gone. The change it waits
// for is written: a master that stops meanwhile answers it done (the next one finishes it).
func (m *Master) waitTableState(ctx context.Context, key string, state pb.TableState) {
	_, _ = m.waitFor(ctx, func() bool {
		t := m.st.tables[key]
		return t == nil || (t.GetState() == state && !t.GetDeleting())
	})
}

// tableRegionsBusyLocked: some region of the table has a procedure.
func (m *Master) tableRegionsBusyLocked(key string) bool {
	for _, r := range m.st.tableRegions(key) {
		if m.st.procs[r.GetInfo().GetName()] != nil {
			return true
		}
	}
	return false
}

func (m *Master) modifyTable(ctx context.Context, req *pb.ModifyTableRequest) error {
	td, err := checkTableDescriptor(req.GetTable())
	if err != nil {
		return err
	}
	if err := m.storeFunctions(ctx, td); err != nil {
		return err
	}
	if err := m.lock(); err != nil {
		return err
	}
	defer m.mu.Unlock()
	key := layout.TableKey(td.GetName())
	t := m.st.table(td.GetName())
	if t == nil {
		return errTableNotFound(key)
	}
	if d := errRestoring(key, t); d != nil {
		return d
	}
	if s := t.GetState(); s == pb.TableState_TABLE_STATE_ENABLING || s == pb.TableState_TABLE_STATE_DISABLING {
		return errDetail(pb.ErrorCode_ERROR_CODE_FAILED_PRECONDITION, true, "table %s is %s: retry when that is done", key, tableStateName(s))
	}
	if m.tableRegionsBusyLocked(key) {
		return errDetail(pb.ErrorCode_ERROR_CODE_FAILED_PRECONDITION, true, "regions of table %s are in transition: retry when they settle", key)
	}
	if req.ExpectVersion != nil && req.GetExpectVersion() != t.GetVersion() {
		return errDetail(pb.ErrorCode_ERROR_CODE_CONCURRENT_MODIFICATION, false,
			"table %s was altered since it was described (version %d, not %d): describe it again and apply the change to that", key,
			t.GetVersion(), req.GetExpectVersion())
	}
	old := t.GetTable()
	if td.GetRegionReplication() == 0 {
		td.RegionReplication = old.GetRegionReplication()
	}
	oldRepl, newRepl := old.GetRegionReplication(), td.GetRegionReplication()
	a, c := proto.CloneOf(old), proto.CloneOf(td)
	a.RegionReplication, c.RegionReplication = 0, 0
	reopen := !proto.Equal(a, c)
	enabled := t.GetState() == pb.TableState_TABLE_STATE_ENABLED

	var b batch
	nt := proto.CloneOf(t)
	nt.Table = td
	nt.Version++
	b.putTable(nt)
	now := m.clock().UnixMilli()
	for _, p := range m.st.index[key] {
		for rep := newRepl; rep < oldRepl; rep++ { // replicas removed
			name := layout.ReplicaName(p.GetInfo().GetRegionId(), rep)
			r := m.st.regions[name]
			switch {
			case r == nil:
			case r.GetState() == stateOpen && r.GetServer() != "":
				m.closeLocked(&b, r, kindUnassign, closeOpts{deleteAfter: true})
			default:
				b.deleteRegion(name)
			}
		}
		for rep := oldRepl; rep < newRepl; rep++ { // replicas added
			info := proto.CloneOf(p.GetInfo())
			info.ReplicaId, info.Name = rep, layout.ReplicaName(info.GetRegionId(), rep)
			b.putRegion(&pb.CatalogRegion{Info: info, State: stateOffline, StateSinceMs: now})
			if enabled {
				b.putProc(m.newProcLocked(&b, info.Name, kindAssign, stepOpen))
			}
		}
		if !reopen || !enabled {
			continue
		}
		for rep := range min(oldRepl, newRepl) {
			r := m.st.regions[layout.ReplicaName(p.GetInfo().GetRegionId(), rep)]
			if r != nil && r.GetState() == stateOpen && r.GetServer() != "" {
				m.closeLocked(&b, r, kindReopen, closeOpts{target: r.GetServer()})
			}
		}
	}
	if err := m.commit(&b); err != nil {
		return err
	}
	m.log.Info("table modified", "table", key, "reopen", reopen && enabled, "replication", newRepl)
	_, _ = m.waitFor(ctx, func() bool { return !m.tableRegionsBusyLocked(key) }) // written: done even if this master stops meanwhile
	return nil
}

// recordTableReset records a truncate, drop or restore of a table in the WAL archive at the
// backup location, when this cluster archives its WAL, before the change is made and outside the
// master's lock (a record of a change that is then refused only refuses some recoveries): a
// point-in-time recovery must not replay the table's edits across it (its regions before and
// after are not one history).
func (m *Master) recordTableReset(ctx context.Context, table *pb.TableName, what string) error {
	if m.cfg.Backup == nil || !m.cfg.WALArchive {
		return nil
	}
	// Only for a change the table's state allows (the call checks again under the lock): a drop
	// or truncate of an enabled table is refused, and its record would refuse recoveries for
	// nothing.
	key, t, err := m.lockTable(table)
	if err != nil {
		return err
	}
	allowed := t.GetState() == pb.TableState_TABLE_STATE_DISABLED || what == "drop" && t.GetRestore() != nil
	m.mu.Unlock()
	if !allowed {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := wal.RecordTableReset(ctx, m.cfg.Backup, key, m.clock(), what); err != nil {
		return errDetail(pb.ErrorCode_ERROR_CODE_FAILED_PRECONDITION, true, "%v: the backup location must take it before the %s (retry once it does)", err, what)
	}
	return nil
}

// errRestoring refuses a change to a table a snapshot is being restored or cloned into: enabling
// it would open the new regions before the restore wrote them (and before a point-in-time
// recovery replayed its edits), truncating would drop them under the restore, and a new
// descriptor would not be the one the restore writes the regions with.
func errRestoring(key string, t *pb.CatalogTable) error {
	if r := t.GetRestore(); r != nil {
		return errDetail(pb.ErrorCode_ERROR_CODE_FAILED_PRECONDITION, true, "snapshot %s is being restored into table %s: retry when that is done", r.GetSnapshot(), key)
	}
	return nil
}

func (m *Master) enableTable(ctx context.Context, req *pb.TableRequest) error {
	key, t, err := m.lockTable(req.GetTable())
	if err != nil {
		return err
	}
	defer m.mu.Unlock()
	if d := errRestoring(key, t); d != nil {
		return d
	}
	switch t.GetState() {
	case pb.TableState_TABLE_STATE_ENABLED:
		return errPrecondition("table %s is already enabled", key)
	case pb.TableState_TABLE_STATE_DISABLING:
		return errDetail(pb.ErrorCode_ERROR_CODE_FAILED_PRECONDITION, true, "table %s is being disabled: enable it when that is done", key)
	case pb.TableState_TABLE_STATE_DISABLED:
		var b batch
		nt := proto.CloneOf(t)
		nt.State, nt.StateSinceMs = pb.TableState_TABLE_STATE_ENABLING, m.clock().UnixMilli()
		b.putTable(nt)
		for _, r := range m.st.tableRegions(key) {
			if m.st.procs[r.GetInfo().GetName()] == nil && r.GetServer() == "" && !b.full() {
				m.assignLocked(&b, r) // the rest by the table loop (ENABLING), when full
			}
		}
		if err := m.commit(&b); err != nil {
			return err
		}
		m.log.Info("enabling table", "table", key)
	}
	m.waitTableState(ctx, key, pb.TableState_TABLE_STATE_ENABLED)
	return nil
}

func (m *Master) disableTable(ctx context.Context, req *pb.TableRequest) error {
	key, t, err := m.lockTable(req.GetTable())
	if err != nil {
		return err
	}
	defer m.mu.Unlock()
	switch t.GetState() {
	case pb.TableState_TABLE_STATE_DISABLED:
		return errDetail(pb.ErrorCode_ERROR_CODE_TABLE_DISABLED, false, "table %s is already disabled", key)
	case pb.TableState_TABLE_STATE_ENABLING:
		return errDetail(pb.ErrorCode_ERROR_CODE_FAILED_PRECONDITION, true, "table %s is being enabled: disable it when that is done", key)
	case pb.TableState_TABLE_STATE_ENABLED:
		var b batch
		nt := proto.CloneOf(t)
		nt.State, nt.StateSinceMs = pb.TableState_TABLE_STATE_DISABLING, m.clock().UnixMilli()
		b.putTable(nt)
		if err := m.commit(&b); err != nil {
			return err
		}
		m.log.Info("disabling table", "table", key)
		m.kick()
	}
	m.waitTableState(ctx, key, pb.TableState_TABLE_STATE_DISABLED)
	return nil
}

func (m *Master) deleteTable(ctx context.Context, req *pb.TableRequest) error {
	if err := m.recordTableReset(ctx, req.GetTable(), "drop"); err != nil {
		return err
	}
	key, t, err := m.lockTable(req.GetTable())
	if err != nil {
		return err
	}
	defer m.mu.Unlock()
	// A table a snapshot is being cloned into is ENABLING until the clone is done, which a
	// failing clone (a corrupt archive object, say) never is: dropping it cancels the clone.
	if t.GetState() != pb.TableState_TABLE_STATE_DISABLED && t.GetRestore() == nil {
		return errPrecondition("table %s is %s: disable it before deleting it", key, tableStateName(t.GetState()))
	}
	if r := t.GetRestore(); r != nil {
		m.log.Warn("dropping a table cancels the snapshot restore into it", "table", key, "snapshot", r.GetSnapshot())
	}
	var b batch
	nt := proto.CloneOf(t)
	nt.Deleting = true
	b.putTable(nt)
	// The table's grants go with it (HBase's postDeleteTable): a table created later under the
	// name must not inherit them.
	dropped := 0
	m.stageACLLocked(&b, func(next *pb.CatalogACL) (bool, *pb.ErrorDetail) {
		next.Permissions = slices.DeleteFunc(next.Permissions, func(p *pb.Permission) bool {
			return p.GetTable().GetName() != "" && layout.TableKey(p.GetTable()) == key
		})
		dropped = len(m.st.acl.GetPermissions()) - len(next.Permissions)
		return dropped > 0, nil
	})
	if err := m.commit(&b); err != nil {
		return err
	}
	m.log.Info("deleting table", "table", key, "permissions dropped", dropped)
	_, _ = m.waitFor(ctx, func() bool { return m.st.tables[key] == nil }) // written: done even if this master stops meanwhile
	return nil
}

func (m *Master) truncateTable(ctx context.Context, req *pb.TruncateTableRequest) error {
	if err := m.recordTableReset(ctx, req.GetTable(), "truncate"); err != nil {
		return err
	}
	key, t, err := m.lockTable(req.GetTable())
	if err != nil {
		return err
	}
	defer m.mu.Unlock()
	if d := errRestoring(key, t); d != nil {
		return d
	}
	if t.GetState() != pb.TableState_TABLE_STATE_DISABLED {
		return errPrecondition("table %s is %s: disable it before truncating it", key, tableStateName(t.GetState()))
	}
	var keys [][]byte
	var b batch
	nt := proto.CloneOf(t)
	for _, p := range m.st.index[key] {
		if req.GetPreserveSplits() && len(p.GetInfo().GetStartKey()) > 0 {
			keys = append(keys, p.GetInfo().GetStartKey())
		}
	}
	m.dropRegionsLocked(&b, nt, key)
	m.newRegionsLocked(&b, t.GetTable(), keys, true)
	nt.State, nt.StateSinceMs = pb.TableState_TABLE_STATE_ENABLING, m.clock().UnixMilli()
	b.putTable(nt)
	if err := m.commit(&b); err != nil {
		return err
	}
	m.log.Info("table truncated", "table", key, "regions", len(keys)+1)
	m.waitTableState(ctx, key, pb.TableState_TABLE_STATE_ENABLED)
	return nil
}

// dropRegionsLocked takes every region of table key out of the catalog (replicas and split parents
// included) and names their directories (and merged regions' parents') in nt.ArchiveDirs, which the
// table loop moves to archive/ (truncate and restore_snapshot replace a table's regions so).
func (m *Master) dropRegionsLocked(b *batch, nt *pb.CatalogTable, key string) {
	for _, p := range m.st.index[key] {
		nt.ArchiveDirs = append(nt.ArchiveDirs, layout.RegionDir(p.GetInfo()))
	}
	// A merged region's parents: the merge janitor archives them from its row, which goes (a
	// split parent may be a merged region too).
	mergeParents := func(r *pb.CatalogRegion) {
		for _, p := range r.GetMergeParents() {
			nt.ArchiveDirs = append(nt.ArchiveDirs, layout.RegionDir(&pb.RegionInfo{Table: r.GetInfo().GetTable(), Name: p}))
		}
	}
	for _, r := range m.st.tableRegions(key) {
		b.deleteRegion(r.GetInfo().GetName())
		mergeParents(r)
	}
	for _, r := range m.st.splitParents(key) {
		nt.ArchiveDirs = append(nt.ArchiveDirs, layout.RegionDir(r.GetInfo()))
		b.deleteRegion(r.GetInfo().GetName())
		mergeParents(r)
	}
}

func tableStateName(s pb.TableState) string {
	switch s {
	case pb.TableState_TABLE_STATE_ENABLED:
		return "enabled"
	case pb.TableState_TABLE_STATE_DISABLED:
		return "disabled"
	case pb.TableState_TABLE_STATE_ENABLING:
		return "being enabled"
	case pb.TableState_TABLE_STATE_DISABLING:
		return "being disabled"
	}
	return s.String()
}

// wholeMatch compiles a listing's pattern, which must match a whole name; nil for "".
func wholeMatch(p string) (*regexp.Regexp, error) {
	re, err := pattern.Whole(p)
	if err != nil {
		return nil, errInvalid("%v", err)
	}
	return re, nil
}

func (m *Master) listTables(req *pb.ListTablesRequest) (*pb.ListTablesResponse, error) {
	re, err := wholeMatch(req.GetPattern())
	if err != nil {
		return nil, err
	}
	if err := m.lock(); err != nil {
		return nil, err
	}
	type named struct{ key, ns, name string }
	names := make([]named, 0, len(m.st.tables))
	for k, t := range m.st.tables {
		if !t.GetDeleting() {
			tn := t.GetTable().GetName()
			names = append(names, named{k, tn.GetNamespace(), tn.GetName()})
		}
	}
	m.mu.Unlock()
	// Matched off the master's lock: a pattern costs up to its size per byte of every name.
	keys := make([]string, 0, len(names))
	for _, n := range names {
		if re == nil || re.MatchString(n.key) || n.ns == DefaultNamespace && re.MatchString(n.name) {
			keys = append(keys, n.key)
		}
	}
	sort.Strings(keys)
	if err := m.lock(); err != nil {
		return nil, err
	}
	defer m.mu.Unlock()
	resp := &pb.ListTablesResponse{}
	for _, k := range keys {
		t := m.st.tables[k]
		if t == nil || t.GetDeleting() { // dropped meanwhile
			continue
		}
		ts := &pb.TableSummary{Table: proto.CloneOf(t.GetTable()), State: t.GetState(), Regions: int32(len(m.st.index[k]))}
		if f := m.restoreFailed[k]; f != nil && t.GetRestore() != nil && f.link == t.GetRestore().GetLinkManifest() {
			ts.RestoreError = f.err
		}
		resp.Tables = append(resp.Tables, ts)
	}
	return resp, nil
}

func (m *Master) describeTable(req *pb.TableRequest) (*pb.DescribeTableResponse, error) {
	_, t, err := m.lockTable(req.GetTable())
	if err != nil {
		return nil, err
	}
	defer m.mu.Unlock()
	return &pb.DescribeTableResponse{Table: proto.CloneOf(t.GetTable()), State: t.GetState(), Version: t.GetVersion()}, nil
}

// locationLocked is a region's location as clients see it: the server only while it is OPEN.
func (m *Master) locationLocked(r *pb.CatalogRegion) *pb.RegionLocation {
	loc := &pb.RegionLocation{Region: proto.CloneOf(r.GetInfo()), State: r.GetState(), Seq: r.GetLocationSeq()}
	// A CLOSING region is still served where it is until that server reports it closed (a
	// move's pre-close flush runs meanwhile): clients go there, and are told when it moved.
	if (r.GetState() == stateOpen || r.GetState() == stateClosing) && r.GetServer() != "" {
		if sn, err := layout.ParseServerName(r.GetServer()); err == nil {
			sn.StartCode = r.GetServerStartCode()
			loc.Server = sn
			if st, ok := m.reg.Get(r.GetServer()); ok && st.StartCode == sn.StartCode {
				loc.AdminAddress = st.AdminAddress
			}
		}
	}
	return loc
}

// locateRegion answers LocateRegion from the model, with the channel that closes on its next change.
func (m *Master) locateRegion(req *pb.LocateRegionRequest) (*pb.LocateRegionResponse, <-chan struct{}, error) {
	key, t, err := m.lockTable(req.GetTable())
	if err != nil {
		return nil, nil, err
	}
	defer m.mu.Unlock()
	resp, err := m.locateRegionLocked(key, t, req)
	return resp, m.changed, err
}

func (m *Master) locateRegionLocked(key string, t *pb.CatalogTable, req *pb.LocateRegionRequest) (*pb.LocateRegionResponse, error) {
	if s := t.GetState(); s == pb.TableState_TABLE_STATE_DISABLED || s == pb.TableState_TABLE_STATE_DISABLING {
		return nil, errDetail(pb.ErrorCode_ERROR_CODE_TABLE_DISABLED, false, "table %s is %s", key, tableStateName(s))
	}
	idx := m.st.index[key]
	row := req.GetRow()
	var i int
	if req.GetBefore() {
		if len(row) == 0 {
			i = len(idx) - 1 // the rows before the end of the table
		} else { // the last region starting before row
			i = sort.Search(len(idx), func(i int) bool { return bytes.Compare(idx[i].GetInfo().GetStartKey(), row) >= 0 }) - 1
		}
	} else { // the last region starting at or before row
		i = sort.Search(len(idx), func(i int) bool { return bytes.Compare(idx[i].GetInfo().GetStartKey(), row) > 0 }) - 1
	}
	if i < 0 || i >= len(idx) {
		return nil, errInvalid("no region of table %s holds the rows before %q", key, row)
	}
	p := idx[i]
	resp := &pb.LocateRegionResponse{Locations: []*pb.RegionLocation{m.locationLocked(p)}}
	if req.GetAllReplicas() {
		for _, r := range m.st.replicas(p) {
			resp.Locations = append(resp.Locations, m.locationLocked(r))
		}
	}
	return resp, nil
}

func (m *Master) getTableRegions(req *pb.TableRequest) (*pb.GetTableRegionsResponse, error) {
	key, t, err := m.lockTable(req.GetTable())
	if err != nil {
		return nil, err
	}
	defer m.mu.Unlock()
	resp := &pb.GetTableRegionsResponse{State: t.GetState()}
	for _, r := range m.st.tableRegions(key) {
		resp.Locations = append(resp.Locations, m.locationLocked(r))
	}
	return resp, nil
}

// lockTable checks a table name, takes the master's lock and finds the table. On success the caller
// holds m.mu and must unlock it; on failure the lock is not held.
func (m *Master) lockTable(name *pb.TableName) (string, *pb.CatalogTable, error) {
	tn, err := checkTableName(name)
	if err != nil {
		return "", nil, err
	}
	if err := m.lock(); err != nil {
		return "", nil, err
	}
	key := layout.TableKey(tn)
	t := m.st.table(tn)
	if t == nil {
		m.mu.Unlock()
		return "", nil, errTableNotFound(key)
	}
	return key, t, nil
}

// ownerGrantLocked adds to b, with authorization on, a grant of every action on the new table tn to
// the user creating it, unless a superuser (HBase's postCompletedCreateTableAction): a user allowed
// to create tables in a namespace can use the ones they create. It returns the owner ("" for none).
func (m *Master) ownerGrantLocked(ctx context.Context, b *batch, tn *pb.TableName) string {
	if !m.cfg.Authorization {
		return ""
	}
	id, ok := security.FromContext(ctx)
	if !ok || id.User == "" {
		return ""
	}
	if access.NewChecker(0, nil, m.cfg.Superusers).Superuser(id) { // superusers come from the configuration alone
		return ""
	}
	p := &pb.Permission{User: id.User, Table: proto.CloneOf(tn), Actions: uint32(access.All)}
	m.stageACLLocked(b, func(next *pb.CatalogACL) (bool, *pb.ErrorDetail) {
		next.Permissions = append(slices.DeleteFunc(next.Permissions, func(q *pb.Permission) bool { return access.SameScope(q, p) }), p)
		return true, nil
	})
	return id.User
}
