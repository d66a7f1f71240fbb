package master

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"slices"
	"sort"
	"sync"
	"time"

	"google.golang.org/protobuf/proto"

	pb "github.com/cellstore/cellstore/engine/api/cellstore/v1"
	"github.com/cellstore/cellstore/engine/layout"
	"github.com/cellstore/cellstore/engine/region"
	"github.com/cellstore/cellstore/engine/snapshot"
	"github.com/cellstore/cellstore/engine/wal"
)

// Snapshots (HBase's snapshot, list_snapshots, delete_snapshot, clone_snapshot and
// restore_snapshot; engine/snapshot has the manifests and the links).
//
// Taking a snapshot flushes the table's regions (unless SKIP_FLUSH) and records the store files
// their manifests name; its one durable write is the snapshot's manifest, create-only, so a master
// that fails midway leaves no snapshot and the call is retried. Clone and restore are procedures
// in the catalog: one commit makes the new regions (unassigned) and names the snapshot in the
// table's restore field; the loop writes the regions' directories — links to the snapshot's files —
// and then a second commit assigns them (clone) or leaves the table disabled (restore). A new
// master finds the restore field and writes the directories again.
//
// The archive cleaner (cleaner.go) never deletes a file a snapshot names, nor one that a table
// cloned or restored from a snapshot still links to (its copy of the manifest, link_manifests),
// and runs only while no snapshot, clone or restore is being recorded (snapGuard).

// snapGuard: snapshot calls hold it shared while they record files; the cleaner holds it
// exclusively while it decides what to delete.
type snapGuard struct{ sync.RWMutex }

func errSnapshotNotFound(name string) *pb.ErrorDetail {
	return errDetail(pb.ErrorCode_ERROR_CODE_SNAPSHOT_NOT_FOUND, false, "snapshot %s does not exist: list_snapshots shows those that do", name)
}

// readSnapshot reads a snapshot's manifest for a call.
func (m *Master) readSnapshot(name string) (*pb.SnapshotManifest, error) {
	if err := snapshot.CheckName(name); err != nil {
		return nil, errInvalid("%v", err)
	}
	man, err := snapshot.ReadNamed(m.regionStorage(), name)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil, errSnapshotNotFound(name)
	case errors.Is(err, snapshot.ErrCorrupt):
		return nil, errDetail(pb.ErrorCode_ERROR_CODE_CORRUPTION, false, "snapshot %s: %v", name, err)
	case err != nil:
		return nil, err
	}
	return man, nil
}

func (m *Master) takeSnapshot(ctx context.Context, req *pb.SnapshotRequest) (*pb.SnapshotResponse, error) {
	name := req.GetName()
	if err := snapshot.CheckName(name); err != nil {
		return nil, errInvalid("%v", err)
	}
	m.snapGuard.RLock()
	defer m.snapGuard.RUnlock()
	st := m.regionStorage()
	if _, err := st.ReadObject(snapshot.ManifestKey(name)); err == nil {
		return nil, errDetail(pb.ErrorCode_ERROR_CODE_SNAPSHOT_EXISTS, false, "snapshot %s already exists: delete it or choose another name", name)
	}
	type target struct {
		info  *pb.RegionInfo
		admin string // the Admin address of its server while OPEN
	}
	// What the table is made of now; the same must hold after the files were read.
	regionsNow := func() (string, *pb.TableDescriptor, []target, error) {
		key, t, err := m.lockTable(req.GetTable())
		if err != nil {
			return "", nil, nil, err
		}
		defer m.mu.Unlock()
		if s := t.GetState(); s == pb.TableState_TABLE_STATE_ENABLING || s == pb.TableState_TABLE_STATE_DISABLING || t.GetRestore() != nil {
			return "", nil, nil, errDetail(pb.ErrorCode_ERROR_CODE_FAILED_PRECONDITION, true, "table %s is changing state: retry when that is done", key)
		}
		if m.tableRegionsBusyLocked(key) {
			return "", nil, nil, errDetail(pb.ErrorCode_ERROR_CODE_FAILED_PRECONDITION, true, "regions of table %s are in transition: retry when they settle", key)
		}
		var out []target
		for _, p := range m.st.index[key] {
			tg := target{info: proto.CloneOf(p.GetInfo())}
			switch {
			case p.GetState() == stateOpen && p.GetServer() != "":
				// Open on a process that is not the live one (it died, or restarted under a new
				// start code, and its recovery has not reassigned the region): its unflushed edits
				// are in that process's WAL, not in the files this snapshot would record.
				if !m.serverLiveLocked(p.GetServer(), p.GetServerStartCode()) || m.deadPendingLocked(p.GetServer(), p.GetServerStartCode()) {
					return "", nil, nil, errDetail(pb.ErrorCode_ERROR_CODE_FAILED_PRECONDITION, true,
						"region %s of %s is being recovered from its server's WAL: retry once it is reassigned", p.GetInfo().GetName(), key)
				}
				s, _ := m.reg.Get(p.GetServer())
				tg.admin = s.AdminAddress
			case t.GetState() == pb.TableState_TABLE_STATE_ENABLED && p.GetState() != stateOpen:
				// Not served although its table is enabled (no server could take it, or it awaits
				// one after a crash): recovered edits may wait for its next open.
				return "", nil, nil, errDetail(pb.ErrorCode_ERROR_CODE_FAILED_PRECONDITION, true,
					"region %s of %s is %s, not open: retry once it is open", p.GetInfo().GetName(), key, p.GetState())
			case p.GetState() == stateFailedOpen:
				// It may hold recovered edits not yet replayed into its files.
				return "", nil, nil, errDetail(pb.ErrorCode_ERROR_CODE_FAILED_PRECONDITION, true,
					"region %s of %s failed to open: fix that (its edits may not be in its files yet), then retry", p.GetInfo().GetName(), key)
			}
			out = append(out, tg)
		}
		return key, proto.CloneOf(t.GetTable()), out, nil
	}
	flushStarted := m.clock().UnixMilli()
	key, td, targets, err := regionsNow()
	if err != nil {
		return nil, err
	}
	if !req.GetSkipFlush() {
		for _, tg := range targets {
			if tg.admin == "" {
				continue // closed (its table disabled): everything it holds is in its files
			}
			if err := m.flushRegion(ctx, tg.admin, tg.info.GetName()); err != nil {
				return nil, errDetail(pb.ErrorCode_ERROR_CODE_FAILED_PRECONDITION, true, "snapshot %s: flushing region %s: %v (retry, or snapshot with SKIP_FLUSH)", name, tg.info.GetName(), err)
			}
		}
	}
	for _, tg := range targets {
		if tg.admin != "" {
			continue
		}
		// Closed: a move's close may have left its last edits in the manifest (its destination
		// never opened it before the table was disabled); they are in no file yet.
		if n, err := region.HandedOffEdits(st, layout.StorageInfo(tg.info)); err != nil {
			return nil, fmt.Errorf("snapshot %s: %w", name, err)
		} else if n > 0 {
			return nil, errDetail(pb.ErrorCode_ERROR_CODE_FAILED_PRECONDITION, false,
				"snapshot %s: region %s holds %d edits that are in no store file yet (a move's close left them in its manifest): enable the table and disable it again (its regions open and flush them), then retry",
				name, tg.info.GetName(), n)
		}
		// Nor edits recovered for it (split from a dead server's log, or a point-in-time
		// recovery's replay into a restored table, which stays disabled): the snapshot would say
		// it holds the table without them.
		if n, err := region.PendingRecoveredEdits(st, layout.StorageInfo(tg.info)); err != nil {
			return nil, fmt.Errorf("snapshot %s: %w", name, err)
		} else if n > 0 {
			return nil, errDetail(pb.ErrorCode_ERROR_CODE_FAILED_PRECONDITION, false,
				"snapshot %s: region %s has %d recovered edits that are in no store file yet (they are applied when it opens): enable the table, then snapshot it (or disable it again first)",
				name, tg.info.GetName(), n)
		}
	}
	man := &pb.SnapshotManifest{Name: name, Table: td, CreatedMs: m.clock().UnixMilli(), SkipFlush: req.GetSkipFlush(), FlushStartedMs: flushStarted}
	for _, tg := range targets {
		sr, err := snapshot.RegionOf(st, tg.info)
		if err != nil {
			return nil, fmt.Errorf("snapshot %s: %w", name, err)
		}
		man.Regions = append(man.Regions, sr)
	}
	_, _, after, err := regionsNow()
	if err != nil {
		return nil, err
	}
	if !sameRegions(targets, after, func(t target) string { return t.info.GetName() }) {
		return nil, errDetail(pb.ErrorCode_ERROR_CODE_FAILED_PRECONDITION, true, "snapshot %s: the regions of %s changed while it was taken (a split or merge): retry", name, key)
	}
	if err := snapshot.Write(st, man); err != nil {
		if errors.Is(err, fs.ErrExist) {
			return nil, errDetail(pb.ErrorCode_ERROR_CODE_SNAPSHOT_EXISTS, false, "snapshot %s already exists: delete it or choose another name", name)
		}
		return nil, err
	}
	d := snapshot.Describe(man)
	m.log.Info("snapshot taken", "snapshot", name, "table", key, "regions", d.GetRegions(), "files", d.GetFiles(), "bytes", d.GetSizeBytes(),
		"skip_flush", req.GetSkipFlush())
	return &pb.SnapshotResponse{Snapshot: d}, nil
}

func sameRegions[T any](a, b []T, name func(T) string) bool {
	return slices.EqualFunc(a, b, func(x, y T) bool { return name(x) == name(y) })
}

// flushRegion asks a region server to flush a region.
func (m *Master) flushRegion(ctx context.Context, addr, region string) error {
	c, err := m.admin.client(addr)
	if err != nil {
		return err
	}
	cctx, cancel := context.WithTimeout(ctx, m.cfg.RPCTimeout*6)
	defer cancel()
	_, err = c.FlushRegion(cctx, &pb.RegionRequest{Region: region})
	return err
}

func (m *Master) listSnapshots(req *pb.ListSnapshotsRequest) (*pb.ListSnapshotsResponse, error) {
	re, err := wholeMatch(req.GetPattern())
	if err != nil {
		return nil, err
	}
	if err := m.lock(); err != nil {
		return nil, err
	}
	m.mu.Unlock()
	st := m.regionStorage()
	if req.GetBackup() {
		if st, err = m.backupStorage(); err != nil {
			return nil, err
		}
	}
	resp := &pb.ListSnapshotsResponse{}
	bad, err := snapshot.Walk(st, func(man *pb.SnapshotManifest) error {
		if re == nil || re.MatchString(man.GetName()) {
			resp.Snapshots = append(resp.Snapshots, snapshot.Describe(man))
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	for key, err := range bad {
		m.log.Error("a snapshot manifest cannot be read", "key", key, "err", err)
	}
	sort.Slice(resp.Snapshots, func(i, j int) bool { return resp.Snapshots[i].GetName() < resp.Snapshots[j].GetName() })
	return resp, nil
}

func (m *Master) deleteSnapshot(req *pb.SnapshotNameRequest) error {
	if err := m.lock(); err != nil {
		return err
	}
	m.mu.Unlock()
	if _, err := m.readSnapshot(req.GetName()); err != nil {
		var d *pb.ErrorDetail
		if !errors.As(err, &d) || d.GetCode() != pb.ErrorCode_ERROR_CODE_CORRUPTION {
			return err
		}
	}
	if err := snapshot.Delete(m.regionStorage(), req.GetName()); err != nil {
		return err
	}
	m.log.Info("snapshot deleted", "snapshot", req.GetName())
	return nil
}

// cloneSnapshot makes a new table from a snapshot (HBase's clone_snapshot): the snapshot's
// descriptor under the new name, its regions' boundaries, each region made of links to the
// snapshot's files; enabled when done.
func (m *Master) cloneSnapshot(ctx context.Context, req *pb.CloneSnapshotRequest) error {
	tn, err := checkTableName(req.GetTable())
	if err != nil {
		return err
	}
	man, err := m.readSnapshot(req.GetName())
	if err != nil {
		return err
	}
	return m.restoreFrom(ctx, man, tn, true, req.GetUntilMs())
}

// restoreSnapshot returns a disabled table to a snapshot (HBase's restore_snapshot): its
// descriptor and regions become the snapshot's, the regions it had go to archive/; the table
// stays disabled. A table that does not exist (dropped) is cloned back under its name.
func (m *Master) restoreSnapshot(ctx context.Context, req *pb.SnapshotNameRequest) error {
	man, err := m.readSnapshot(req.GetName())
	if err != nil {
		return err
	}
	tn := normTableName(man.GetTable().GetName())
	if err := m.lock(); err != nil {
		return err
	}
	exists := m.st.table(tn) != nil
	m.mu.Unlock()
	return m.restoreFrom(ctx, man, tn, !exists, req.GetUntilMs())
}

// restoreFrom clones (clone: tn must not exist) or restores (tn must be disabled) the snapshot
// of manifest man into table tn; with untilMs, to that time (pitr.go).
func (m *Master) restoreFrom(ctx context.Context, man *pb.SnapshotManifest, tn *pb.TableName, clone bool, untilMs int64) error {
	name := man.GetName()
	// Nothing is changed for a manifest whose regions the table could not be made of: a restore
	// drops the table's regions in the commit that makes the new ones, and the new regions'
	// directories would then fail to be written on every try (the table left restoring, its old
	// regions' files left to the archive cleaner).
	if err := snapshot.CheckRestorable(man); err != nil {
		return errInvalid("snapshot %s cannot be cloned or restored: %v", name, err)
	}
	if untilMs != 0 {
		switch {
		case m.cfg.Backup == nil:
			return errInvalid("point-in-time recovery reads the WAL archive at the backup location: start the master with --backup-dir or --backup-s3-*")
		case untilMs < man.GetCreatedMs():
			return errInvalid("snapshot %s was taken at %s, after the target time %s: recover from an earlier snapshot", name,
				time.UnixMilli(man.GetCreatedMs()).UTC().Format(time.RFC3339Nano), time.UnixMilli(untilMs).UTC().Format(time.RFC3339Nano))
		case untilMs > m.clock().UnixMilli():
			return errInvalid("the target time %s is in the future", time.UnixMilli(untilMs).UTC().Format(time.RFC3339Nano))
		}
		// Nor may the source table have been truncated, dropped or restored in between: the
		// replay would merge the edits of its regions from before and after (truncated rows back).
		src := layout.TableKey(man.GetTable().GetName())
		resets, err := wal.TableResets(ctx, m.cfg.Backup, src)
		if err != nil {
			return err
		}
		for _, r := range resets {
			if r.At.After(replayFrom(man)) && r.At.Before(time.UnixMilli(untilMs+1)) {
				return errPrecondition("table %s had a %s at %s, between snapshot %s (%s) and the target time %s: the recovery cannot replay across it. "+
					"Recover to a time before it, or from a snapshot taken after it",
					src, r.What, r.At.UTC().Format(time.RFC3339Nano), name, time.UnixMilli(man.GetCreatedMs()).UTC().Format(time.RFC3339), time.UnixMilli(untilMs).UTC().Format(time.RFC3339Nano))
			}
		}
		// The archive must still hold every edit made since the snapshot.
		if err := checkArchiveKept(ctx, m.cfg.Backup, man); err != nil {
			return err
		}
	}
	td := proto.CloneOf(man.GetTable())
	td.Name = proto.CloneOf(tn)
	if err := validDescriptor(td); err != nil {
		return errInvalid("snapshot %s: %v", name, err)
	}
	key := layout.TableKey(tn)
	m.snapGuard.RLock()
	defer m.snapGuard.RUnlock()
	// The table's own copy of the manifest first: the catalog names it in the same commit that
	// makes the regions, so a deleted snapshot cannot leave a clone half made.
	linkKey := snapshot.LinkManifestKey(tn, name, m.clock().UnixNano())
	b, err := snapshot.Encode(man)
	if err != nil {
		return err
	}
	if err := m.regionStorage().WriteObject(linkKey, b, false); err != nil {
		return fmt.Errorf("snapshot %s: writing the table's copy of its manifest: %w", name, err)
	}
	if !clone {
		if err := m.recordTableReset(ctx, tn, "restore of snapshot "+name); err != nil {
			return err
		}
	}
	if err := m.lock(); err != nil {
		return err
	}
	defer m.mu.Unlock()
	t := m.st.table(tn)
	var batch batch
	var nt *pb.CatalogTable
	now := m.clock().UnixMilli()
	if clone {
		if d := m.st.tables[key]; d != nil && d.GetDeleting() {
			// Its drop still removes its regions, rows and link manifests: a clone made now would
			// be removed with them.
			return errDetail(pb.ErrorCode_ERROR_CODE_TABLE_EXISTS, true, "table %s is being deleted: retry shortly", key)
		}
		if t != nil {
			return errDetail(pb.ErrorCode_ERROR_CODE_TABLE_EXISTS, false, "table %s already exists: clone the snapshot under another name, or disable the table and restore_snapshot", key)
		}
		if td.GetRegionReplication() == 0 {
			td.RegionReplication = m.defaultReplicationLocked()
		}
		if err := m.checkCapacityLocked(key, len(man.GetRegions())*int(max(td.GetRegionReplication(), 1))); err != nil {
			return err
		}
		nt = &pb.CatalogTable{Table: td, State: pb.TableState_TABLE_STATE_ENABLING, CreatedMs: now, StateSinceMs: now}
	} else {
		if t == nil {
			return errTableNotFound(key)
		}
		if t.GetState() != pb.TableState_TABLE_STATE_DISABLED || t.GetRestore() != nil {
			return errPrecondition("table %s is %s: disable it before restoring a snapshot into it", key, tableStateName(t.GetState()))
		}
		if m.tableRegionsBusyLocked(key) {
			return errDetail(pb.ErrorCode_ERROR_CODE_FAILED_PRECONDITION, true, "regions of table %s are in transition: retry when they settle", key)
		}
		if td.GetRegionReplication() == 0 {
			td.RegionReplication = t.GetTable().GetRegionReplication()
		}
		nt = proto.CloneOf(t)
		nt.Table = td
		nt.Version++
		m.dropRegionsLocked(&batch, nt, key)
	}
	var keys [][]byte
	for _, r := range man.GetRegions()[min(1, len(man.GetRegions())):] {
		keys = append(keys, r.GetStartKey())
	}
	infos := m.newRegionsLocked(&batch, td, keys, false)
	rs := &pb.SnapshotRestore{Snapshot: name, LinkManifest: linkKey, Enable: clone, UntilMs: untilMs}
	for _, info := range infos {
		if info.GetReplicaId() == 0 {
			rs.Regions = append(rs.Regions, info.GetName())
		}
	}
	nt.Restore = rs
	batch.putTable(nt)
	if err := m.commit(&batch); err != nil {
		return err
	}
	verb := "restoring"
	if clone {
		verb = "cloning"
	}
	m.log.Info(verb+" a snapshot", "snapshot", name, "table", key, "regions", len(rs.Regions))
	if done, _ := m.waitFor(ctx, func() bool {
		t := m.st.tables[key]
		return t == nil || t.GetRestore() == nil && (!clone || t.GetState() == pb.TableState_TABLE_STATE_ENABLED)
	}); !done { // ran out, or this master stopped: the next one goes on with it
		return errDetail(pb.ErrorCode_ERROR_CODE_TIMEOUT, true, "%s snapshot %s into %s goes on in the background: describe the table to see when it is done", verb, name, key)
	}
	return nil
}

// restoreFailure is the last failure of a clone or restore's writing of its regions (a replay of
// the archive that found a gap, a bucket refusing): retried after a wait that doubles with each
// failure up to restoreRetryMax, not at every pass of the table loop.
type restoreFailure struct {
	link  string // the restore's (its link manifest)
	tries int
	next  time.Time
	err   string
}

const restoreRetryMax = time.Minute

// progressRestoreLocked writes the region directories of a clone or restore under way, then
// commits: the regions are assigned (clone) or left closed (restore). Called by the table loop.
func (m *Master) progressRestoreLocked(key string, t *pb.CatalogTable) {
	if m.busyTables[key] {
		return
	}
	if f := m.restoreFailed[key]; f != nil && f.link == t.GetRestore().GetLinkManifest() && m.clock().Before(f.next) {
		return
	}
	rs := t.GetRestore()
	var infos []*pb.RegionInfo
	for _, n := range rs.GetRegions() {
		r := m.st.regions[n]
		if r == nil {
			m.log.Error("a region of a snapshot restore is missing from the catalog", "table", key, "region", n)
			return
		}
		infos = append(infos, proto.CloneOf(r.GetInfo()))
	}
	td := proto.CloneOf(t.GetTable())
	m.busyTables[key] = true
	actx := m.activeCtx // a master that stops being active stops writing the regions
	m.runIO(func() error {
		man, err := snapshot.Read(m.regionStorage(), rs.GetLinkManifest())
		if err != nil {
			return err
		}
		if err := snapshot.Materialize(m.regionStorage(), man, td, infos); err != nil {
			return err
		}
		if rs.GetUntilMs() != 0 {
			ctx, cancel := context.WithTimeout(actx, time.Hour)
			defer cancel()
			if _, err := m.replayArchive(ctx, man, infos, rs.GetUntilMs()); err != nil {
				return fmt.Errorf("point-in-time recovery: %w", err)
			}
		}
		return nil
	}, func(err error) {
		delete(m.busyTables, key)
		if err != nil {
			f := m.restoreFailed[key]
			if f == nil || f.link != rs.GetLinkManifest() {
				f = &restoreFailure{link: rs.GetLinkManifest()}
				m.restoreFailed[key] = f
			}
			f.tries++
			f.err = err.Error()
			wait := min(time.Second<<min(f.tries-1, 6), restoreRetryMax)
			f.next = m.clock().Add(wait)
			m.log.Error("writing the regions of a snapshot restore failed: retrying (drop the table to cancel it)", "table", key, "snapshot", rs.GetSnapshot(),
				"tries", f.tries, "retry_in", wait, "err", err)
			return
		}
		delete(m.restoreFailed, key)
		cur := m.st.tables[key]
		if cur == nil || cur.GetDeleting() || !proto.Equal(cur.GetRestore(), rs) {
			return // dropped (the restore cancelled) or replaced meanwhile
		}
		var b batch
		nt := proto.CloneOf(cur)
		nt.Restore = nil
		if !slices.Contains(nt.LinkManifests, rs.GetLinkManifest()) {
			nt.LinkManifests = append(nt.LinkManifests, rs.GetLinkManifest())
		}
		b.putTable(nt)
		if rs.GetEnable() {
			for _, r := range m.st.tableRegions(key) {
				if m.st.procs[r.GetInfo().GetName()] == nil && r.GetServer() == "" {
					m.assignLocked(&b, r)
				}
			}
		}
		if m.commit(&b) == nil {
			m.log.Info("snapshot restored", "table", key, "snapshot", rs.GetSnapshot(), "enable", rs.GetEnable())
		}
	})
}
