package master

import (
	"bytes"
	"context"
	"errors"
	"path"
	"slices"
	"strconv"
	"time"

	"google.golang.org/protobuf/proto"

	pb "github.com/cellstore/cellstore/engine/api/cellstore/v1"
	"github.com/cellstore/cellstore/engine/layout"
	"github.com/cellstore/cellstore/engine/region"
)

// Region merges (docs/master.md, "Merges"; HBase's MergeTableRegionsProcedure). Two adjacent
// primaries of a table each get a MERGE procedure naming the other and the merged region's id:
//
//	CLOSE: both close with a flush (their replicas are closed by UNASSIGN procedures)
//	MERGE: a parent closed (MERGING, on no server); once both are closed and their replicas too,
//	       the first parent's procedure writes the merged region's directory (links to every file
//	       of both), then one catalog write: both parents' rows and procedures gone, the merged
//	       region and its replicas OFFLINE with ASSIGN procedures (the primary aimed at the first
//	       parent's server), the merged region's row naming its parents
//
// When the merge cannot be done (a parent still reads reference files, edits of a dead server
// are waiting in recovered.edits) it is rolled back: both parents and their replicas are
// assigned again. The merged region compacts its links into files of its own when it opens; the
// janitor then archives the parents' directories and forgets them.

const (
	stateMerging = pb.RegionState_REGION_STATE_MERGING
	stepMerge    = pb.ProcedureStep_PROCEDURE_STEP_MERGE
	kindMerge    = pb.ProcedureKind_PROCEDURE_KIND_MERGE
)

// MergeRegions implements pb.MasterServer: it merges two adjacent open primaries and waits (up
// to DDLWait) until the merged region is open.
func (m *Master) MergeRegions(ctx context.Context, req *pb.MergeRegionsRequest) (*pb.MergeRegionsResponse, error) {
	merged, err := m.mergeRegions(ctx, req)
	return &pb.MergeRegionsResponse{Merged: merged}, toStatus(err)
}

func (m *Master) mergeRegions(ctx context.Context, req *pb.MergeRegionsRequest) (string, error) {
	names := req.GetRegions()
	if len(names) != 2 {
		return "", errInvalid("a merge takes two regions, got %d", len(names))
	}
	if err := m.lock(); err != nil {
		return "", err
	}
	defer m.mu.Unlock()
	var parents [2]*pb.CatalogRegion
	for i, name := range names {
		r, d := m.regionLocked(name)
		if d != nil {
			return "", d
		}
		parents[i] = r
	}
	var b batch
	p, d := m.startMergeLocked(&b, parents[0], parents[1])
	if d != nil {
		return "", d
	}
	if err := m.commit(&b); err != nil {
		return "", err
	}
	first := p.GetRegion()
	m.dispatchLocked(names[0])
	m.dispatchLocked(names[1])
	merged := layout.RegionName(p.GetDaughterIds()[0])
	if _, stopped := m.waitFor(ctx, func() bool {
		if cur := m.st.procs[first]; cur != nil && cur.p.GetId() == p.GetId() {
			return false
		}
		return m.st.procs[merged] == nil
	}); stopped {
		return merged, nil // under way: the next master finishes it
	}
	switch {
	case m.st.procs[first] != nil && m.st.procs[first].p.GetId() == p.GetId():
		return merged, nil // still under way after DDLWait: it goes on
	case m.st.regions[merged] == nil:
		msg := "the merge was rolled back"
		if r := m.st.regions[first]; r != nil && r.GetLastError() != "" {
			msg += ": " + r.GetLastError()
		}
		return "", &pb.ErrorDetail{Code: pb.ErrorCode_ERROR_CODE_FAILED_PRECONDITION, Region: first, Message: msg}
	}
	return merged, nil
}

// mergeHelp is appended to refusals a caller can wait out.
const mergeHelp = ": merge them when both are open and settled"

// startMergeLocked starts the MERGE of two primaries (given in either order): both go CLOSING,
// their replicas get UNASSIGN procedures. It returns the first parent's procedure (the one that
// writes the merged region).
func (m *Master) startMergeLocked(b *batch, x, y *pb.CatalogRegion) (*pb.RegionProcedure, *pb.ErrorDetail) {
	if x.GetInfo().GetName() == y.GetInfo().GetName() {
		return nil, errInvalid("region %s cannot merge with itself", x.GetInfo().GetName())
	}
	for _, r := range []*pb.CatalogRegion{x, y} {
		if r.GetInfo().GetReplicaId() != 0 {
			return nil, errInvalid("region %s is a read replica: merge primaries", r.GetInfo().GetName())
		}
	}
	if layout.TableKey(x.GetInfo().GetTable()) != layout.TableKey(y.GetInfo().GetTable()) {
		return nil, errInvalid("regions %s and %s are of different tables (%s, %s)", x.GetInfo().GetName(), y.GetInfo().GetName(),
			layout.TableKey(x.GetInfo().GetTable()), layout.TableKey(y.GetInfo().GetTable()))
	}
	a, c := x, y
	if bytes.Compare(a.GetInfo().GetStartKey(), c.GetInfo().GetStartKey()) > 0 {
		a, c = c, a
	}
	if len(a.GetInfo().GetEndKey()) == 0 || !bytes.Equal(a.GetInfo().GetEndKey(), c.GetInfo().GetStartKey()) {
		return nil, errInvalid("regions %s (%q, %q) and %s (%q, %q) are not adjacent: only neighbouring regions merge",
			a.GetInfo().GetName(), a.GetInfo().GetStartKey(), a.GetInfo().GetEndKey(), c.GetInfo().GetName(), c.GetInfo().GetStartKey(), c.GetInfo().GetEndKey())
	}
	t := m.st.table(a.GetInfo().GetTable())
	if t == nil {
		return nil, errTableNotFound(layout.TableKey(a.GetInfo().GetTable()))
	}
	if t.GetState() != pb.TableState_TABLE_STATE_ENABLED {
		return nil, errPrecondition("table %s is %s: only regions of enabled tables merge", layout.TableKey(a.GetInfo().GetTable()), tableStateName(t.GetState()))
	}
	var replicas []*pb.CatalogRegion
	for _, r := range []*pb.CatalogRegion{a, c} {
		name := r.GetInfo().GetName()
		if m.st.procs[name] != nil {
			return nil, errDetail(pb.ErrorCode_ERROR_CODE_FAILED_PRECONDITION, true, "region %s has a procedure in flight%s", name, mergeHelp)
		}
		if r.GetState() != stateOpen || r.GetServer() == "" {
			return nil, errDetail(pb.ErrorCode_ERROR_CODE_FAILED_PRECONDITION, true, "region %s is %s%s", name, r.GetState(), mergeHelp)
		}
		if !m.serverLiveLocked(r.GetServer(), r.GetServerStartCode()) {
			return nil, errDetail(pb.ErrorCode_ERROR_CODE_FAILED_PRECONDITION, true, "region %s is on a server that is not live%s", name, mergeHelp)
		}
		if rl := m.regionLoadLocked(r); rl != nil && rl.GetHasReferences() {
			return nil, errDetail(pb.ErrorCode_ERROR_CODE_FAILED_PRECONDITION, true,
				"region %s still reads reference files (a split or merge not compacted yet): it can merge once a compaction has rewritten them", name)
		}
		if len(r.GetMergeParents()) > 0 {
			return nil, errDetail(pb.ErrorCode_ERROR_CODE_FAILED_PRECONDITION, true,
				"region %s was merged and still reads its parents' files: it can merge once a compaction has rewritten them", name)
		}
		for _, rep := range m.st.replicas(r) {
			if m.st.procs[rep.GetInfo().GetName()] != nil {
				return nil, errDetail(pb.ErrorCode_ERROR_CODE_FAILED_PRECONDITION, true, "region %s has a procedure in flight%s", rep.GetInfo().GetName(), mergeHelp)
			}
			replicas = append(replicas, rep)
		}
	}
	st := b.counters(m.st)
	id := max(st.GetLastRegionId()+1, uint64(m.clock().UnixMilli()))
	st.LastRegionId = id
	var first *pb.RegionProcedure
	for _, pair := range [][2]*pb.CatalogRegion{{a, c}, {c, a}} {
		other := pair[1].GetInfo().GetName()
		p := m.closeLocked(b, pair[0], kindMerge, closeOpts{target: pair[0].GetServer(), prepare: func(p *pb.RegionProcedure) {
			p.DaughterIds, p.MergeWith = []uint64{id}, other
		}})
		if first == nil {
			first = p
		}
	}
	for _, rep := range replicas {
		if rep.GetServer() != "" && (rep.GetState() == stateOpen || rep.GetState() == stateOpening) {
			m.closeLocked(b, rep, kindUnassign, closeOpts{})
		}
	}
	m.log.Info("merging regions", "regions", []string{a.GetInfo().GetName(), c.GetInfo().GetName()},
		"table", layout.TableKey(a.GetInfo().GetTable()), "merged", layout.RegionName(id))
	return first, nil
}

// mergeClosedLocked: a parent of a MERGE closed; it waits in the MERGE step for the other.
func (m *Master) mergeClosedLocked(b *batch, r *pb.CatalogRegion, p *pb.RegionProcedure) {
	nr := proto.CloneOf(r)
	nr.State, nr.Server, nr.ServerStartCode, nr.StateSinceMs = stateMerging, "", 0, m.clock().UnixMilli()
	np := proto.CloneOf(p)
	np.Step = stepMerge
	b.putRegion(nr)
	b.putProc(np)
}

// mergeStepLocked runs the MERGE step: the first parent's procedure, once both parents and
// their replicas are closed, writes the merged region on a goroutine, then finishes or rolls the
// merge back. The second parent's procedure waits for it.
func (m *Master) mergeStepLocked(pr *proc, r *pb.CatalogRegion, now time.Time) {
	if pr.sending || (!pr.lastSend.IsZero() && now.Sub(pr.lastSend) < m.cfg.RetryDelay) {
		return
	}
	t := m.st.tables[layout.TableKey(r.GetInfo().GetTable())]
	if t == nil || t.GetDeleting() {
		return // the table's removal deletes the rows and the procedures
	}
	name := r.GetInfo().GetName()
	other := m.st.regions[pr.p.GetMergeWith()]
	op := m.st.procs[pr.p.GetMergeWith()]
	if other == nil || op == nil || op.p.GetKind() != kindMerge || op.p.GetMergeWith() != name ||
		!slices.Equal(op.p.GetDaughterIds(), pr.p.GetDaughterIds()) || len(pr.p.GetDaughterIds()) != 1 {
		var b batch
		m.rollbackMergeLocked(&b, []*pb.CatalogRegion{r}, "the other region of the merge is gone")
		_ = m.commit(&b)
		return
	}
	if bytes.Compare(r.GetInfo().GetStartKey(), other.GetInfo().GetStartKey()) > 0 {
		return // the first parent's procedure does the work
	}
	if op.p.GetStep() != stepMerge {
		return // the other parent is still closing
	}
	for _, p := range []*pb.CatalogRegion{r, other} {
		for _, rep := range m.st.replicas(p) {
			if m.st.procs[rep.GetInfo().GetName()] != nil {
				return // a replica is still closing
			}
		}
	}
	a, c := layout.StorageInfo(r.GetInfo()), layout.StorageInfo(other.GetInfo())
	id := pr.p.GetDaughterIds()[0]
	merged := a
	merged.ID, merged.Name = id, layout.RegionName(id)
	otherName, gen := other.GetInfo().GetName(), pr.gen
	pr.sending, pr.lastSend = true, now
	m.runIO(func() (err error) {
		merged, err = region.MergeClosed(m.regionStorage(), a, c, merged)
		return err
	}, func(err error) {
		cur, r, ok := m.stepDoneLocked(name, gen)
		o := m.st.regions[otherName]
		if !ok || o == nil {
			return
		}
		var b batch
		switch {
		case errors.Is(err, region.ErrCannotMerge):
			m.rollbackMergeLocked(&b, []*pb.CatalogRegion{r, o}, err.Error())
			m.archiveAbandonedLocked(&b, r.GetInfo(), cur.p.GetDaughterIds())
		case err != nil:
			m.log.Error("writing the merged region failed: retrying", "regions", []string{name, otherName}, "err", err)
			return
		default:
			m.finishMergeLocked(&b, r, o, cur.p, merged)
		}
		_ = m.commit(&b)
	})
}

// finishMergeLocked replaces both parents by the merged region in the catalog.
func (m *Master) finishMergeLocked(b *batch, a, c *pb.CatalogRegion, p *pb.RegionProcedure, merged region.Info) {
	now := m.clock().UnixMilli()
	ai := a.GetInfo()
	t := m.st.tables[layout.TableKey(ai.GetTable())]
	id := p.GetDaughterIds()[0]
	for rep := range t.GetTable().GetRegionReplication() {
		info := &pb.RegionInfo{RegionId: id, Table: proto.CloneOf(ai.GetTable()), StartKey: bytes.Clone(merged.StartKey),
			EndKey: bytes.Clone(merged.EndKey), ReplicaId: rep, Name: layout.ReplicaName(id, rep)}
		nr := &pb.CatalogRegion{Info: info, State: stateOffline, StateSinceMs: now}
		if rep == 0 {
			nr.MergeParents = []string{ai.GetName(), c.GetInfo().GetName()}
		}
		b.putRegion(nr)
		np := m.newProcLocked(b, info.Name, kindAssign, stepOpen)
		if rep == 0 {
			np.Target = p.GetTarget() // where the first parent was: its blocks are cached there
		}
		b.putProc(np)
	}
	for _, parent := range []*pb.CatalogRegion{a, c} {
		for _, rep := range m.st.replicas(parent) {
			b.deleteRegion(rep.GetInfo().GetName())
		}
		b.deleteRegion(parent.GetInfo().GetName())
		b.deleteProc(parent.GetInfo().GetName())
	}
	m.metrics.merges.Inc()
	m.log.Info("regions merged", "regions", []string{ai.GetName(), c.GetInfo().GetName()}, "table", layout.TableKey(ai.GetTable()),
		"merged", layout.RegionName(id), "start_key", strconv.Quote(string(merged.StartKey)), "end_key", strconv.Quote(string(merged.EndKey)),
		"took", time.Since(time.UnixMilli(p.GetStartedMs())).Round(time.Millisecond))
}

// rollbackMergeLocked gives up a merge: the parents (closed, or still closing: their procedures
// become plain reopens) and their replicas are assigned again where they were.
func (m *Master) rollbackMergeLocked(b *batch, parents []*pb.CatalogRegion, reason string) {
	m.metrics.mergeRollbacks.Inc()
	for _, r := range parents {
		name := r.GetInfo().GetName()
		m.log.Warn("merge rolled back: reopening the region", "region", name, "reason", reason)
		nr := proto.CloneOf(r)
		nr.LastError = "merge rolled back: " + reason
		target := ""
		if p := m.st.procs[name]; p != nil {
			target = p.p.GetTarget()
		}
		np := m.newProcLocked(b, name, kindAssign, stepOpen)
		np.Target = target
		if nr.GetState() == stateMerging || nr.GetServer() == "" {
			nr.State, nr.Server, nr.ServerStartCode, nr.StateSinceMs = stateOffline, "", 0, m.clock().UnixMilli()
		} else {
			// Still closing on its server: the close goes on, then it reopens there.
			np.Kind, np.Step, np.Flush = kindReopen, stepClose, true
			np.Target = r.GetServer()
		}
		b.putRegion(nr)
		b.putProc(np)
		for _, rep := range m.st.replicas(r) {
			if m.st.procs[rep.GetInfo().GetName()] == nil && rep.GetServer() == "" && m.tableWantsOpenLocked(rep) {
				m.assignLocked(b, rep)
			}
		}
	}
}

// mergeBlocksLocked: name is a replica whose primary is being merged, so it must not be
// assigned.
func (m *Master) mergeBlocksLocked(name string) bool {
	primary := layout.PrimaryName(name)
	if primary == name {
		return false
	}
	if p := m.st.procs[primary]; p != nil && p.p.GetKind() == kindMerge {
		return true
	}
	r := m.st.regions[primary]
	return r != nil && r.GetState() == stateMerging
}

// mergeJanitorLocked archives the directories of merged regions' parents once the merged region
// references none of their files (it compacted), then forgets them (HBase's
// GCMultipleMergedRegionsProcedure). Called by the janitor.
func (m *Master) mergeJanitorLocked() {
	for name, r := range m.st.regions {
		if len(r.GetMergeParents()) == 0 || m.cleaning[name] {
			continue
		}
		ri := r.GetInfo()
		info := layout.StorageInfo(ri)
		var dirs []string
		for _, p := range r.GetMergeParents() {
			dirs = append(dirs, layout.RegionDir(&pb.RegionInfo{Table: ri.GetTable(), Name: p}))
		}
		m.cleaning[name] = true
		m.runIO(func() error {
			refs, err := region.HasReferenceFiles(m.regionStorage(), info)
			if err != nil {
				return err
			}
			if refs {
				return errStillReferenced
			}
			for _, dir := range dirs {
				if err := m.archiveDir(dir, path.Join("archive", dir)); err != nil {
					return err
				}
			}
			return nil
		}, func(err error) {
			delete(m.cleaning, name)
			switch {
			case errors.Is(err, errStillReferenced):
				return
			case err != nil:
				m.log.Warn("cleaning up merged regions failed: retrying", "region", name, "err", err)
				return
			}
			cur := m.st.regions[name]
			if cur == nil || len(cur.GetMergeParents()) == 0 {
				return
			}
			nr := proto.CloneOf(cur)
			nr.MergeParents = nil
			var b batch
			b.putRegion(nr)
			if m.commit(&b) == nil {
				m.log.Info("merged regions cleaned up: their directories are in archive/", "region", name, "parents", cur.GetMergeParents())
			}
		})
	}
}
