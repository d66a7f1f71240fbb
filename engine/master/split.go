package master

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"path"
	"slices"
	"strconv"
	"time"

	"google.golang.org/protobuf/proto"

	pb "github.com/cellstore/cellstore/engine/api/cellstore/v1"
	"github.com/cellstore/cellstore/engine/layout"
	"github.com/cellstore/cellstore/engine/region"
)

// Region splits (docs/master.md, "Splits"). A SPLIT procedure on a primary:
//
//	CLOSE: persist CLOSING and the daughters' ids; close the parent with a flush (its replicas are
//	       closed by UNASSIGN procedures started at the same time)
//	SPLIT: the parent is closed (SPLITTING, on no server); once its replicas are closed, write the
//	       daughters' directories (reference files to the halves of the parent's files) on shared
//	       storage, then one catalog write: parent SPLIT (offline, split, daughters named), its
//	       replicas' rows gone, the daughters and their replicas OFFLINE with ASSIGN procedures
//	       (the primaries aimed at the parent's server)
//
// When the split cannot be done (no split row, the parent still holds references, edits of a
// dead server are waiting in recovered.edits) it is rolled back: the parent and its replicas are
// assigned again, and the size policy leaves the region alone for splitHoldTime. The janitor
// archives a parent's directory and deletes its row once neither daughter references its files.

const (
	stateSplitting = pb.RegionState_REGION_STATE_SPLITTING
	stateSplit     = pb.RegionState_REGION_STATE_SPLIT
	stepSplit      = pb.ProcedureStep_PROCEDURE_STEP_SPLIT
	kindSplit      = pb.ProcedureKind_PROCEDURE_KIND_SPLIT

	// splitHoldTime: after a rolled-back split the size policy does not try the region again
	// before this long.
	splitHoldTime = 5 * time.Minute
)

// SplitRegion implements pb.MasterServer: it splits an open primary at split_key (or its
// midpoint) and waits (up to DDLWait) until the daughters are open.
func (m *Master) SplitRegion(ctx context.Context, req *pb.SplitRegionRequest) (*pb.SplitRegionResponse, error) {
	return &pb.SplitRegionResponse{}, toStatus(m.splitRegion(ctx, req))
}

func (m *Master) splitRegion(ctx context.Context, req *pb.SplitRegionRequest) error {
	name := req.GetRegion()
	if err := m.lock(); err != nil {
		return err
	}
	defer m.mu.Unlock()
	r, d := m.regionLocked(name)
	if d != nil {
		return d
	}
	var b batch
	p, d := m.startSplitLocked(&b, r, req.GetSplitKey(), "requested")
	if d != nil {
		d.Region = name
		return d
	}
	if err := m.commit(&b); err != nil {
		return err
	}
	m.dispatchLocked(name)
	if _, stopped := m.waitFor(ctx, func() bool {
		if cur := m.st.procs[name]; cur != nil && cur.p.GetId() == p.GetId() {
			return false
		}
		cur := m.st.regions[name]
		if cur == nil || cur.GetState() != stateSplit {
			return true // rolled back (or the table went away)
		}
		for _, dn := range cur.GetDaughters() {
			if m.st.procs[dn] != nil {
				return false
			}
		}
		return true
	}); stopped {
		return nil // under way: the next master finishes it
	}
	cur := m.st.regions[name]
	switch {
	case cur == nil:
		return nil
	case m.st.procs[name] != nil && m.st.procs[name].p.GetId() == p.GetId():
		return nil // still under way after DDLWait: it goes on
	case cur.GetState() != stateSplit:
		return &pb.ErrorDetail{Code: pb.ErrorCode_ERROR_CODE_FAILED_PRECONDITION, Region: name,
			Message: "the split was rolled back: " + cur.GetLastError()}
	}
	return nil
}

// splitHelp is appended to refusals a caller can wait out.
const splitHelp = ": split it when it is open and settled"

// startSplitLocked starts a SPLIT of a primary (the parent goes CLOSING, its replicas get
// UNASSIGN procedures). key empty: the midpoint, chosen at the SPLIT step.
func (m *Master) startSplitLocked(b *batch, r *pb.CatalogRegion, key []byte, why string) (*pb.RegionProcedure, *pb.ErrorDetail) {
	name, info := r.GetInfo().GetName(), r.GetInfo()
	if info.GetReplicaId() != 0 {
		return nil, errInvalid("region %s is a read replica: split its primary %s", name, layout.PrimaryName(name))
	}
	t := m.st.table(info.GetTable())
	if t == nil {
		return nil, errTableNotFound(layout.TableKey(info.GetTable()))
	}
	if t.GetState() != pb.TableState_TABLE_STATE_ENABLED {
		return nil, errPrecondition("table %s is %s: only regions of enabled tables split", layout.TableKey(info.GetTable()), tableStateName(t.GetState()))
	}
	asked, cut := key, ""
	if len(key) > 0 {
		if p := splitPolicyOf(t); p.Name != "" {
			key = p.Cut(key) // as HBase, a requested split row is cut too
			if !bytes.Equal(key, asked) {
				cut = fmt.Sprintf(" (%q cut by the table's %s)", asked, p.Name)
			}
		}
	}
	if len(key) > 0 && (bytes.Equal(key, info.GetStartKey()) || bytes.Compare(key, info.GetStartKey()) < 0 ||
		len(info.GetEndKey()) > 0 && bytes.Compare(key, info.GetEndKey()) >= 0) {
		return nil, errInvalid("split key %q%s is not inside region %s (%q, %q)", key, cut, name, info.GetStartKey(), info.GetEndKey())
	}
	busy := func(rr *pb.CatalogRegion) *pb.ErrorDetail {
		if m.st.procs[rr.GetInfo().GetName()] != nil {
			return errDetail(pb.ErrorCode_ERROR_CODE_FAILED_PRECONDITION, true, "region %s has a procedure in flight%s", rr.GetInfo().GetName(), splitHelp)
		}
		return nil
	}
	if d := busy(r); d != nil {
		return nil, d
	}
	if r.GetState() != stateOpen || r.GetServer() == "" {
		return nil, errDetail(pb.ErrorCode_ERROR_CODE_FAILED_PRECONDITION, true, "region %s is %s%s", name, r.GetState(), splitHelp)
	}
	if !m.serverLiveLocked(r.GetServer(), r.GetServerStartCode()) {
		return nil, errDetail(pb.ErrorCode_ERROR_CODE_FAILED_PRECONDITION, true, "region %s is on a server that is not live%s", name, splitHelp)
	}
	if rl := m.regionLoadLocked(r); rl != nil && rl.GetHasReferences() {
		return nil, errDetail(pb.ErrorCode_ERROR_CODE_FAILED_PRECONDITION, true,
			"region %s still reads reference files from its own split: it can split once a compaction has rewritten them", name)
	}
	replicas := m.st.replicas(r)
	for _, rep := range replicas {
		if d := busy(rep); d != nil {
			return nil, d
		}
	}
	st := b.counters(m.st)
	base := max(st.GetLastRegionId()+1, uint64(m.clock().UnixMilli()))
	st.LastRegionId = base + 1
	p := m.closeLocked(b, r, kindSplit, closeOpts{target: r.GetServer(), prepare: func(p *pb.RegionProcedure) {
		p.SplitKey = bytes.Clone(key)
		p.DaughterIds = []uint64{base, base + 1}
	}})
	for _, rep := range replicas {
		if rep.GetServer() != "" && (rep.GetState() == stateOpen || rep.GetState() == stateOpening) {
			m.closeLocked(b, rep, kindUnassign, closeOpts{})
		}
	}
	m.log.Info("splitting region", "region", name, "table", layout.TableKey(info.GetTable()), "why", why,
		"split_key", strconv.Quote(string(key)), "daughters", []string{layout.RegionName(base), layout.RegionName(base + 1)})
	return p, nil
}

// regionLoadLocked is the last load report of a region from its server.
func (m *Master) regionLoadLocked(r *pb.CatalogRegion) *pb.RegionLoad {
	for _, rl := range m.loads[r.GetServer()].GetRegions() {
		if rl.GetRegion() == r.GetInfo().GetName() {
			return rl
		}
	}
	return nil
}

// splitClosedLocked: the parent of a SPLIT closed; the SPLIT step follows.
func (m *Master) splitClosedLocked(b *batch, r *pb.CatalogRegion, p *pb.RegionProcedure) {
	nr := proto.CloneOf(r)
	nr.State, nr.Server, nr.ServerStartCode, nr.StateSinceMs = stateSplitting, "", 0, m.clock().UnixMilli()
	np := proto.CloneOf(p)
	np.Step = stepSplit
	b.putRegion(nr)
	b.putProc(np)
}

// splitStepLocked runs the SPLIT step's storage work on a goroutine (once its parent's replicas
// are closed), then finishes or rolls the split back.
func (m *Master) splitStepLocked(pr *proc, r *pb.CatalogRegion, now time.Time) {
	if pr.sending || (!pr.lastSend.IsZero() && now.Sub(pr.lastSend) < m.cfg.RetryDelay) {
		return
	}
	for _, rep := range m.st.replicas(r) {
		if m.st.procs[rep.GetInfo().GetName()] != nil {
			return // a replica is still closing
		}
	}
	t := m.st.tables[layout.TableKey(r.GetInfo().GetTable())]
	if t == nil || t.GetDeleting() {
		return // the table's removal deletes the row and the procedure
	}
	ids := pr.p.GetDaughterIds()
	if len(ids) != 2 {
		var b batch
		m.rollbackSplitLocked(&b, r, pr.p, "the procedure has no daughter ids")
		_ = m.commit(&b)
		return
	}
	ri := r.GetInfo()
	parent := layout.StorageInfo(ri)
	lo, hi := parent, parent
	lo.ID, lo.Name = ids[0], layout.RegionName(ids[0])
	hi.ID, hi.Name = ids[1], layout.RegionName(ids[1])
	key := bytes.Clone(pr.p.GetSplitKey())
	name, gen := ri.GetName(), pr.gen
	pr.sending, pr.lastSend = true, now
	policy := splitPolicyOf(t)
	var row []byte
	m.runIO(func() (err error) {
		if key == nil && policy.Name != "" {
			// A split without a row: the middle row, cut by the table's policy.
			if key, err = region.SplitRowOf(m.regionStorage(), parent); err != nil {
				return err
			}
			key = policy.Cut(key)
		}
		row, err = region.SplitClosed(m.regionStorage(), parent, lo, hi, key)
		return err
	}, func(err error) {
		cur, r, ok := m.stepDoneLocked(name, gen)
		if !ok {
			return
		}
		var b batch
		switch {
		case errors.Is(err, region.ErrCannotSplit):
			m.rollbackSplitLocked(&b, r, cur.p, err.Error())
			m.archiveAbandonedLocked(&b, r.GetInfo(), cur.p.GetDaughterIds())
		case err != nil:
			m.log.Error("writing split daughters failed: retrying", "region", name, "err", err)
			return
		default:
			m.finishSplitLocked(&b, r, cur.p, row)
		}
		_ = m.commit(&b)
	})
}

// stepDoneLocked is where the storage work of a procedure's step (SPLIT, MERGE) comes back: the
// procedure and its region when the work is still wanted — the same generation of the procedure
// (it is then no longer sending), and its table not being dropped (the drop removes the rows and
// the procedures).
func (m *Master) stepDoneLocked(name string, gen uint64) (*proc, *pb.CatalogRegion, bool) {
	cur, r := m.st.procs[name], m.st.regions[name]
	if cur == nil || cur.gen != gen || r == nil {
		return nil, nil, false
	}
	cur.sending = false
	if t := m.st.tables[layout.TableKey(r.GetInfo().GetTable())]; t == nil || t.GetDeleting() {
		return nil, nil, false
	}
	return cur, r, true
}

// finishSplitLocked replaces the parent by its daughters in the catalog.
func (m *Master) finishSplitLocked(b *batch, r *pb.CatalogRegion, p *pb.RegionProcedure, row []byte) {
	ri := r.GetInfo()
	now := m.clock().UnixMilli()
	t := m.st.tables[layout.TableKey(ri.GetTable())]
	ids := p.GetDaughterIds()
	bounds := [][2][]byte{{ri.GetStartKey(), row}, {row, ri.GetEndKey()}}
	var daughters []string
	for i, id := range ids {
		for rep := range t.GetTable().GetRegionReplication() {
			info := &pb.RegionInfo{RegionId: id, Table: proto.CloneOf(ri.GetTable()), StartKey: bytes.Clone(bounds[i][0]),
				EndKey: bytes.Clone(bounds[i][1]), ReplicaId: rep, Name: layout.ReplicaName(id, rep)}
			b.putRegion(&pb.CatalogRegion{Info: info, State: stateOffline, StateSinceMs: now})
			np := m.newProcLocked(b, info.Name, kindAssign, stepOpen)
			if rep == 0 {
				np.Target = p.GetTarget() // where the parent was: its blocks are cached there
			}
			b.putProc(np)
		}
		daughters = append(daughters, layout.RegionName(id))
	}
	for _, rep := range m.st.replicas(r) {
		b.deleteRegion(rep.GetInfo().GetName())
	}
	nr := proto.CloneOf(r)
	nr.Info.Split, nr.Info.Offline = true, true
	nr.State, nr.Server, nr.ServerStartCode, nr.StateSinceMs = stateSplit, "", 0, now
	nr.Daughters, nr.LastError = daughters, ""
	b.putRegion(nr)
	b.deleteProc(ri.GetName())
	m.metrics.splits.Inc()
	m.log.Info("region split", "region", ri.GetName(), "table", layout.TableKey(ri.GetTable()), "split_row", strconv.Quote(string(row)),
		"daughters", daughters, "took", time.Since(time.UnixMilli(p.GetStartedMs())).Round(time.Millisecond))
}

// rollbackSplitLocked gives up a split: the parent (closed) and its replicas are assigned again.
func (m *Master) rollbackSplitLocked(b *batch, r *pb.CatalogRegion, p *pb.RegionProcedure, reason string) {
	name := r.GetInfo().GetName()
	m.log.Warn("split rolled back: reopening the region", "region", name, "reason", reason)
	m.metrics.splitRollbacks.Inc()
	m.splitHold[name] = m.clock().Add(splitHoldTime)
	nr := proto.CloneOf(r)
	nr.State, nr.Server, nr.ServerStartCode, nr.StateSinceMs = stateOffline, "", 0, m.clock().UnixMilli()
	nr.LastError = "split rolled back: " + reason
	np := m.newProcLocked(b, name, kindAssign, stepOpen)
	np.Target = p.GetTarget()
	b.putRegion(nr)
	b.putProc(np)
	for _, rep := range m.st.replicas(r) {
		if m.st.procs[rep.GetInfo().GetName()] == nil && rep.GetServer() == "" && m.tableWantsOpenLocked(rep) {
			m.assignLocked(b, rep)
		}
	}
}

// archiveAbandonedLocked names, in the table's ArchiveDirs, the directories a rolled-back split or
// merge may have written for its new regions (ids): an earlier attempt of its storage step can
// have written one daughter before it failed and the retry found the split impossible. No catalog
// row names them, so nothing else would remove them; the table loop moves them to archive/ (a
// directory that was never written is skipped there).
func (m *Master) archiveAbandonedLocked(b *batch, ri *pb.RegionInfo, ids []uint64) {
	t := m.st.tables[layout.TableKey(ri.GetTable())]
	if t == nil || len(ids) == 0 {
		return
	}
	nt := proto.CloneOf(t)
	for _, id := range ids {
		nt.ArchiveDirs = append(nt.ArchiveDirs, layout.RegionDir(&pb.RegionInfo{Table: ri.GetTable(), Name: layout.RegionName(id)}))
	}
	b.putTable(nt)
}

// splitBlocksLocked: name is a replica whose primary is being split or was split, so it must not
// be assigned.
func (m *Master) splitBlocksLocked(name string) bool {
	primary := layout.PrimaryName(name)
	if primary == name {
		return false
	}
	if p := m.st.procs[primary]; p != nil && p.p.GetKind() == kindSplit {
		return true
	}
	r := m.st.regions[primary]
	return r != nil && (r.GetState() == stateSplit || r.GetState() == stateSplitting)
}

// splitSizeLocked is the store-file size above which a region of table t splits.
func (m *Master) splitSizeLocked(t *pb.CatalogTable) int64 {
	if s := t.GetTable().GetMaxFileSize(); s > 0 {
		return s
	}
	if n, err := strconv.ParseInt(m.clusterConfigLocked()[layout.ConfigRegionSplitSize], 10, 64); err == nil && n > 0 {
		return n
	}
	return m.cfg.SplitSize
}

// splitPolicyLocked picks, from the load a server just reported, one of its primaries that
// outgrew its split size, and checks on a goroutine that it has a split row (the middle of its
// largest store file, read from shared storage while the region stays open) before splitting it
// there: a region that cannot split (one huge row, references) is never closed for nothing.
func (m *Master) splitPolicyLocked(server string, sc int64, load *pb.ServerLoad) {
	if on, err := strconv.ParseBool(m.clusterConfigLocked()[layout.ConfigSplitsEnabled]); err == nil && !on {
		return
	}
	now := m.clock()
	for _, rl := range load.GetRegions() {
		name := rl.GetRegion()
		r := m.st.regions[name]
		if r == nil || r.GetInfo().GetReplicaId() != 0 || r.GetServer() != server || r.GetServerStartCode() != sc ||
			r.GetState() != stateOpen || rl.GetHasReferences() || m.st.procs[name] != nil || m.splitChecks[name] {
			continue
		}
		t := m.st.table(r.GetInfo().GetTable())
		size := int64(0)
		if t != nil {
			size = m.splitSizeLocked(t)
		}
		if t == nil || t.GetState() != pb.TableState_TABLE_STATE_ENABLED || rl.GetStoreFileBytes() <= size {
			continue
		}
		policy := splitPolicyOf(t)
		if policy.NoAutoSplit {
			continue
		}
		if until, ok := m.splitHold[name]; ok {
			if now.Before(until) {
				continue
			}
			delete(m.splitHold, name)
		}
		ri := r.GetInfo()
		info := layout.StorageInfo(ri)
		why := "store files " + strconv.FormatInt(rl.GetStoreFileBytes(), 10) + " bytes > split size " + strconv.FormatInt(size, 10)
		m.splitChecks[name] = true
		var row []byte
		m.runIO(func() (err error) {
			if row, err = region.SplitRowOf(m.regionStorage(), info); err != nil {
				return err
			}
			cut := policy.Cut(row)
			if !bytes.Equal(cut, row) {
				if _, err := region.CheckSplitRow(info, cut); err != nil {
					return fmt.Errorf("%w (the middle row %q cut to %q by the table's %s)", err, row, cut, policy.Name)
				}
			}
			row = cut
			return nil
		}, func(err error) {
			delete(m.splitChecks, name)
			if err != nil {
				m.log.Info("region is over its split size but cannot split now", "region", name, "reason", err)
				m.splitHold[name] = m.clock().Add(splitHoldTime)
				return
			}
			cur := m.st.regions[name]
			if cur == nil || !proto.Equal(cur.GetInfo(), ri) {
				return
			}
			var b batch
			if _, d := m.startSplitLocked(&b, cur, row, why); d != nil {
				return // busy again (a move, a disable): the next heartbeat decides again
			}
			if m.commit(&b) == nil {
				m.dispatchLocked(name)
			}
		})
		return
	}
}

// janitorLocked archives the directories of split parents that no daughter references any more
// and deletes their rows (HBase's CatalogJanitor), every JanitorInterval.
func (m *Master) janitorLocked(now time.Time) error {
	if now.Before(m.nextJanitor) {
		return nil
	}
	m.nextJanitor = now.Add(m.cfg.JanitorInterval)
	for name, until := range m.splitHold {
		// Holds that ran out, or of regions gone (split by hand, merged, dropped): the size
		// policy deletes a hold only when it looks at that region again.
		if now.After(until) || m.st.regions[name] == nil {
			delete(m.splitHold, name)
		}
	}
	m.checkLinksLocked()
	m.mergeJanitorLocked()
	for name, r := range m.st.regions {
		if r.GetState() != stateSplit || m.cleaning[name] {
			continue
		}
		ri := r.GetInfo()
		var daughters []region.Info
		for _, dn := range r.GetDaughters() {
			daughters = append(daughters, region.Info{Namespace: ri.GetTable().GetNamespace(), Table: ri.GetTable().GetName(), Name: dn})
		}
		dir := layout.RegionDir(ri)
		m.cleaning[name] = true
		m.runIO(func() error { return m.cleanParent(dir, daughters) }, func(err error) {
			delete(m.cleaning, name)
			switch {
			case errors.Is(err, errStillReferenced):
				return
			case err != nil:
				m.log.Warn("cleaning up a split parent failed: retrying", "region", name, "err", err)
				return
			}
			if cur := m.st.regions[name]; cur == nil || cur.GetState() != stateSplit {
				return
			}
			var b batch
			b.deleteRegion(name)
			if m.commit(&b) == nil {
				m.log.Info("split parent cleaned up: its directory is in archive/", "region", name)
			}
		})
	}
	return nil
}

var errStillReferenced = errors.New("a daughter still references the parent's files")

// cleanParent archives a split parent's directory once no daughter's manifest names a
// reference file.
func (m *Master) cleanParent(dir string, daughters []region.Info) error {
	if len(daughters) == 0 {
		return errors.New("the parent names no daughters")
	}
	for _, d := range daughters {
		refs, err := region.HasReferenceFiles(m.regionStorage(), d)
		if err != nil {
			return err
		}
		if refs {
			return errStillReferenced
		}
	}
	return m.archiveDir(dir, path.Join("archive", dir))
}

// splitParents lists a table's split parents (they are not in the index).
func (m *model) splitParents(key string) []*pb.CatalogRegion {
	var out []*pb.CatalogRegion
	for _, r := range m.regions {
		if r.GetInfo().GetSplit() && layout.TableKey(r.GetInfo().GetTable()) == key {
			out = append(out, r)
		}
	}
	slices.SortFunc(out, func(a, b *pb.CatalogRegion) int { return compareStart(a, b) })
	return out
}

// regionStorage is where the regions' files are, for the splits the master does on them.
func (m *Master) regionStorage() region.Storage {
	return region.Storage{FS: m.cfg.FS, Bucket: m.cfg.Bucket}
}
