package master

import (
	"context"
	"fmt"
	"slices"
	"time"

	"google.golang.org/protobuf/proto"

	pb "github.com/cellstore/cellstore/engine/api/cellstore/v1"
	"github.com/cellstore/cellstore/engine/layout"
)

// Region procedures (docs/master.md, "Procedures"). Each region has at most one, persisted in
// the row proc/<region> in the same catalog write as the region's state, so a new active master
// resumes exactly where the last one stopped:
//
//	ASSIGN:   OPEN step: pick a server, persist OPENING@server, send OpenRegion, wait for OPENED
//	UNASSIGN: CLOSE step: persist CLOSING@server, send CloseRegion, wait for CLOSED
//	MOVE:     CLOSE step on the source, then the OPEN step on the destination
//	REOPEN:   CLOSE step, then the OPEN step on the same server (new table descriptor)
//
// The master moves a region only after the server that had it confirmed the close (a CLOSED
// report, or NOT_SERVING_REGION to CloseRegion) or was declared dead and fenced, so two servers
// never both believe they may serve a region.

const (
	stateOffline    = pb.RegionState_REGION_STATE_OFFLINE
	stateOpening    = pb.RegionState_REGION_STATE_OPENING
	stateOpen       = pb.RegionState_REGION_STATE_OPEN
	stateClosing    = pb.RegionState_REGION_STATE_CLOSING
	stateClosed     = pb.RegionState_REGION_STATE_CLOSED
	stateFailedOpen = pb.RegionState_REGION_STATE_FAILED_OPEN

	stepOpen  = pb.ProcedureStep_PROCEDURE_STEP_OPEN
	stepClose = pb.ProcedureStep_PROCEDURE_STEP_CLOSE

	kindAssign   = pb.ProcedureKind_PROCEDURE_KIND_ASSIGN
	kindUnassign = pb.ProcedureKind_PROCEDURE_KIND_UNASSIGN
	kindMove     = pb.ProcedureKind_PROCEDURE_KIND_MOVE
	kindReopen   = pb.ProcedureKind_PROCEDURE_KIND_REOPEN
)

// newProcLocked makes a procedure with a fresh id (counted in b's copy of the master state).
func (m *Master) newProcLocked(b *batch, region string, kind pb.ProcedureKind, step pb.ProcedureStep) *pb.RegionProcedure {
	st := b.counters(m.st)
	st.LastProcedureId++
	return &pb.RegionProcedure{Id: st.LastProcedureId, Region: region, Kind: kind, Step: step,
		StartedMs: m.clock().UnixMilli(), Flush: true, FinalState: stateClosed}
}

// assignLocked starts an ASSIGN of a region that has no procedure and no server.
func (m *Master) assignLocked(b *batch, r *pb.CatalogRegion) {
	nr := proto.CloneOf(r)
	nr.State, nr.Server, nr.ServerStartCode = stateOffline, "", 0
	nr.StateSinceMs = m.clock().UnixMilli()
	b.putRegion(nr)
	b.putProc(m.newProcLocked(b, r.GetInfo().GetName(), kindAssign, stepOpen))
}

// closeOpts are the options of a procedure that begins with a close.
type closeOpts struct {
	target      string // where to open next (MOVE, REOPEN)
	balancer    bool   // counts against MaxMovesInFlight
	deleteAfter bool   // UNASSIGN: delete the region's row once closed
	// prepare completes the procedure before it goes into the batch (SPLIT's key and daughters).
	prepare func(p *pb.RegionProcedure)
}

// closeLocked starts a procedure that begins by closing an OPEN region on its server.
func (m *Master) closeLocked(b *batch, r *pb.CatalogRegion, kind pb.ProcedureKind, o closeOpts) *pb.RegionProcedure {
	nr := proto.CloneOf(r)
	nr.State = stateClosing
	nr.StateSinceMs = m.clock().UnixMilli()
	p := m.newProcLocked(b, r.GetInfo().GetName(), kind, stepClose)
	p.Target, p.Balancer, p.DeleteAfterClose = o.target, o.balancer, o.deleteAfter
	if o.prepare != nil {
		o.prepare(p)
	}
	b.putRegion(nr)
	b.putProc(p) // p is marshalled here: it must not change after
	return p
}

// tableWantsOpenLocked: the region's table is enabled (or being enabled).
func (m *Master) tableWantsOpenLocked(r *pb.CatalogRegion) bool {
	t := m.st.tables[layout.TableKey(r.GetInfo().GetTable())]
	if t == nil || t.GetDeleting() {
		return false
	}
	s := t.GetState()
	return s == pb.TableState_TABLE_STATE_ENABLED || s == pb.TableState_TABLE_STATE_ENABLING
}

// serverLiveLocked: that process of the server holds a live lease.
func (m *Master) serverLiveLocked(name string, startCode int64) bool {
	s, ok := m.reg.Get(name)
	return ok && s.Live && s.StartCode == startCode
}

// placerLocked is the current layout for picking servers: live servers (draining and stopping
// ones cannot take regions) and every region at the server it is on or opening on.
func (m *Master) placerLocked() *balancerState {
	servers := m.placementServersLocked()
	regions := make([]BalancerRegion, 0, len(m.st.regions))
	for name, r := range m.st.regions {
		if r.GetServer() != "" {
			regions = append(regions, BalancerRegion{Name: name, Group: layout.PrimaryName(name), Server: r.GetServer()})
		}
	}
	return newBalancerState(servers, regions)
}

// chooseTargetLocked picks where to open a region: the procedure's target if it can take the
// region, else the least loaded fitting server, avoiding the servers it failed on while others
// exist. A primary that fits nowhere takes the place of one of its secondaries (displaced names
// it; balancerState.displacing).
func (m *Master) chooseTargetLocked(pl *balancerState, r *pb.CatalogRegion, p *pb.RegionProcedure) (target, displaced string) {
	br := &BalancerRegion{Name: r.GetInfo().GetName(), Group: layout.PrimaryName(r.GetInfo().GetName())}
	if t := p.GetTarget(); t != "" && pl.fits(br, t) {
		return t, ""
	}
	tried := p.GetTried()
	avoid := func(s string) bool { return slices.Contains(tried, s) }
	t := pl.pickAvoiding(br, avoid)
	if t == "" && len(tried) > 0 {
		t = pl.pick(br, "")
	}
	if t != "" {
		return t, ""
	}
	t, displaced = pl.displacing(br, p.GetTarget(), avoid, m.displaceableLocked)
	if t == "" && len(tried) > 0 {
		t, displaced = pl.displacing(br, p.GetTarget(), nil, m.displaceableLocked)
	}
	return t, displaced
}

// displaceableLocked says whether a secondary can give its primary its place now: OPEN, with no
// procedure under way (one opening or closing would stay beside the primary).
func (m *Master) displaceableLocked(name string) bool {
	r := m.st.regions[name]
	return r != nil && r.GetState() == stateOpen && m.st.procs[name] == nil
}

// advanceProcsLocked moves every procedure on: picks targets, sends orders, retries and applies
// timeouts. Procedures run in region-name order, so a primary is placed before its replicas.
func (m *Master) advanceProcsLocked(now time.Time) error {
	names := make([]string, 0, len(m.st.procs))
	for name := range m.st.procs {
		names = append(names, name)
	}
	slices.Sort(names)
	var b batch
	var send []string
	var pl *balancerState
	for _, name := range names {
		p, r := m.st.procs[name], m.st.regions[name]
		if r == nil {
			b.deleteProc(name)
			continue
		}
		server, sc := r.GetServer(), r.GetServerStartCode()
		if server == "" && p.p.GetStep() == stepSplit {
			m.splitStepLocked(p, r, now)
			continue
		}
		if server == "" && p.p.GetStep() == stepMerge {
			m.mergeStepLocked(p, r, now)
			continue
		}
		if server == "" {
			if p.p.GetStep() == stepClose { // nothing to close any more
				m.closedLocked(&b, r, p.p)
				continue
			}
			if !m.tableWantsOpenLocked(r) {
				m.finishClosedLocked(&b, r)
				continue
			}
			if b.full() {
				continue // placed at the next tick
			}
			if pl == nil {
				pl = m.placerLocked()
			}
			nr, np := proto.CloneOf(r), proto.CloneOf(p.p)
			if !m.placeLocked(&b, pl, nr, np, now) {
				continue // no server can take it now: retried every tick
			}
			b.putRegion(nr)
			b.putProc(np)
			send = append(send, name)
			continue
		}
		if m.deadPendingLocked(server, sc) {
			continue // its server's recovery takes the region over
		}
		if !m.serverLiveLocked(server, sc) {
			// The process is gone and nothing recovers it yet: recover it like a dead server.
			if err := m.serverDiedLocked(server, sc); err != nil {
				return err
			}
			continue
		}
		if p.sending {
			continue
		}
		switch p.p.GetStep() {
		case stepOpen:
			if now.Sub(p.stepStart) > m.cfg.OpenTimeout {
				m.log.Warn("region open timed out: aborting it on the server", "region", name, "server", server,
					"after", now.Sub(p.stepStart).Round(time.Millisecond))
				m.metrics.failedOpens.Inc()
				nr := proto.CloneOf(r)
				nr.State, nr.StateSinceMs = stateClosing, now.UnixMilli()
				nr.LastError = fmt.Sprintf("open on %s timed out after %v", server, m.cfg.OpenTimeout)
				np := proto.CloneOf(p.p)
				np.Step, np.Aborting, np.Flush = stepClose, true, false
				np.Attempts++
				np.Tried = append(np.Tried, server)
				b.putRegion(nr)
				b.putProc(np)
				continue
			}
		case stepClose:
			if now.Sub(p.stepStart) > m.cfg.CloseTimeout {
				if m.reg.Expel(server, sc) {
					m.log.Error("region server did not close a region in time: expelling it (it will be declared dead and recovered)",
						"region", name, "server", server, "after", now.Sub(p.stepStart).Round(time.Millisecond))
				}
				continue
			}
		}
		if !p.accepted && (p.lastSend.IsZero() || now.Sub(p.lastSend) >= m.cfg.RetryDelay) {
			send = append(send, name)
		}
	}
	if err := m.commit(&b); err != nil {
		return err
	}
	for _, name := range send {
		if !m.primaryOpenSentLocked(name) {
			continue // the primary's open goes first; accepting it wakes the loop
		}
		m.dispatchLocked(name)
	}
	return nil
}

// placementServersLocked are the servers regions may be placed on: stopping ones count as draining.
func (m *Master) placementServersLocked() []BalancerServer {
	servers := m.reg.BalancerServers()
	for i := range servers {
		if _, ok := m.stoppingSrv[servers[i].Name]; ok {
			servers[i].Draining = true
		}
	}
	return servers
}

// placerForLocked is what placeLocked needs to place one region: for a procedure with a target,
// the servers and the region's own replica group only (a scan of the regions, not the whole
// layout sorted: a drain reports many closes); without one, or when the target cannot take it,
// the whole layout, to pick from.
func (m *Master) placerForLocked(r *pb.CatalogRegion, p *pb.RegionProcedure) *balancerState {
	if t := p.GetTarget(); t != "" {
		servers := m.placementServersLocked()
		group := layout.PrimaryName(r.GetInfo().GetName())
		var regions []BalancerRegion
		for name, o := range m.st.regions {
			if o.GetServer() != "" && layout.PrimaryName(name) == group {
				regions = append(regions, BalancerRegion{Name: name, Group: group, Server: o.GetServer()})
			}
		}
		pl := newBalancerState(servers, regions)
		if pl.fits(&BalancerRegion{Name: r.GetInfo().GetName(), Group: group}, t) {
			return pl
		}
	}
	return m.placerLocked()
}

// placeLocked picks the server an offline region opens on and makes r OPENING there and p's
// target that server (r and p are the caller's copies). False: no server can take it now.
func (m *Master) placeLocked(b *batch, pl *balancerState, r *pb.CatalogRegion, p *pb.RegionProcedure, now time.Time) bool {
	target, displaced := m.chooseTargetLocked(pl, r, p)
	if target == "" {
		return false
	}
	if d := m.st.regions[displaced]; d != nil && m.displaceableLocked(displaced) && !b.touchesProc(displaced) {
		// The secondary closes; its open waits for a server it fits (the next to come back).
		m.log.Info("primary region fits no server: it takes the place of its secondary", "region", r.GetInfo().GetName(),
			"server", target, "secondary", displaced)
		m.closeLocked(b, d, kindMove, closeOpts{})
	}
	s, _ := m.reg.Get(target)
	r.State, r.Server, r.ServerStartCode, r.StateSinceMs = stateOpening, target, s.StartCode, now.UnixMilli()
	p.Target = target
	name := r.GetInfo().GetName()
	pl.add(BalancerRegion{Name: name, Group: layout.PrimaryName(name)}, target)
	return true
}

// primaryOpenSentLocked: name is a primary, or a replica whose primary is not being opened or
// whose primary's server accepted the open: a replica's open is never sent before its primary's.
func (m *Master) primaryOpenSentLocked(name string) bool {
	primary := layout.PrimaryName(name)
	if primary == name {
		return true
	}
	p := m.st.procs[primary]
	if p == nil || p.p.GetStep() != stepOpen {
		return true
	}
	return p.accepted
}

// finishClosedLocked ends a region's procedure leaving it CLOSED (its table is disabled).
func (m *Master) finishClosedLocked(b *batch, r *pb.CatalogRegion) {
	nr := proto.CloneOf(r)
	nr.State, nr.Server, nr.ServerStartCode, nr.StateSinceMs = stateClosed, "", 0, m.clock().UnixMilli()
	b.putRegion(nr)
	b.deleteProc(r.GetInfo().GetName())
}

// closedLocked applies "the region is closed on its server" to the region and its procedure.
// logStepLocked logs the end of a procedure's open or close step: how long the step took, of
// which how long before its order was sent (the dispatch), and the procedure's kind.
func (m *Master) logStepLocked(msg, region, server string, p *proc, now time.Time) {
	sent := time.Duration(0)
	if !p.lastSend.IsZero() && p.lastSend.After(p.stepStart) {
		sent = p.lastSend.Sub(p.stepStart)
	}
	m.log.Info(msg, "region", region, "server", server, "kind", p.p.GetKind(),
		"took", now.Sub(p.stepStart).Round(time.Millisecond), "sent_after", sent.Round(time.Millisecond))
}

// closedLocked records that a region closed and moves its procedure on. A region closed to open
// again (a move, a reopen, an aborted open) is left OFFLINE with its
// procedure at the open step: those rows, already in b, are returned for a caller that places
// the region in the same batch (nil otherwise).
func (m *Master) closedLocked(b *batch, r *pb.CatalogRegion, p *pb.RegionProcedure) (*pb.CatalogRegion, *pb.RegionProcedure) {
	name := r.GetInfo().GetName()
	prev := r.GetServer()
	nr := proto.CloneOf(r)
	nr.Server, nr.ServerStartCode, nr.StateSinceMs = "", 0, m.clock().UnixMilli()
	switch {
	case p == nil:
		nr.State = stateClosed
		b.putRegion(nr)
		if m.tableWantsOpenLocked(r) {
			m.assignLocked(b, nr)
		}
		return nil, nil
	case p.GetKind() == kindSplit:
		m.splitClosedLocked(b, r, p)
		return nil, nil
	case p.GetKind() == kindMerge:
		m.mergeClosedLocked(b, r, p)
		return nil, nil
	case p.GetKind() == kindUnassign:
		if p.GetDeleteAfterClose() {
			b.deleteRegion(name)
			b.deleteProc(name)
			return nil, nil
		}
		nr.State = p.GetFinalState()
		b.putRegion(nr)
		b.deleteProc(name)
		return nil, nil
	case p.GetAborting() && int(p.GetAttempts()) >= m.cfg.MaxOpenAttempts:
		nr.State = stateFailedOpen
		b.putRegion(nr)
		b.deleteProc(name)
		m.log.Error("region failed to open: FAILED_OPEN", "region", name, "attempts", p.GetAttempts(), "last_error", nr.GetLastError())
		return nil, nil
	case !m.tableWantsOpenLocked(r):
		nr.State = stateClosed
		b.putRegion(nr)
		b.deleteProc(name)
		return nil, nil
	}
	nr.State = stateOffline
	np := proto.CloneOf(p)
	np.Step, np.Aborting, np.Flush = stepOpen, false, true
	switch {
	case p.GetAborting():
		np.Target = ""
	case p.GetKind() == kindReopen:
		np.Target = prev
	}
	b.putRegion(nr)
	b.putProc(np)
	return nr, np
}

// failedOpenLocked records a failed open attempt on the region's server: retry elsewhere, or
// FAILED_OPEN after MaxOpenAttempts.
func (m *Master) failedOpenLocked(b *batch, r *pb.CatalogRegion, p *pb.RegionProcedure, reason string) {
	m.metrics.failedOpens.Inc()
	name, server := r.GetInfo().GetName(), r.GetServer()
	nr := proto.CloneOf(r)
	nr.Server, nr.ServerStartCode, nr.StateSinceMs = "", 0, m.clock().UnixMilli()
	nr.LastError = fmt.Sprintf("open on %s failed: %s", server, reason)
	np := proto.CloneOf(p)
	np.Attempts++
	np.Tried = append(np.Tried, server)
	np.Target = ""
	if int(np.Attempts) >= m.cfg.MaxOpenAttempts {
		nr.State = stateFailedOpen
		b.putRegion(nr)
		b.deleteProc(name)
		m.log.Error("region failed to open: FAILED_OPEN", "region", name, "attempts", np.Attempts, "last_error", nr.LastError)
		return
	}
	m.log.Warn("region open failed: retrying on another server", "region", name, "server", server, "reason", reason, "attempt", np.Attempts)
	nr.State = stateOffline
	b.putRegion(nr)
	b.putProc(np)
}

// everyServerHasLocked reports whether every live region server announced feature (none that
// registered with an earlier release, or whose announcement this master has not heard yet).
func (m *Master) everyServerHasLocked(feature string) bool {
	for _, s := range m.reg.All() {
		if s.Live && !slices.Contains(m.features[s.Name], feature) {
			return false
		}
	}
	return true
}

// dispatchLocked sends the order of a procedure's current step to the region's server.
func (m *Master) dispatchLocked(name string) { m.sendOrderLocked(name) }

// sendOrderLocked is dispatchLocked; the channel it returns (nil when it sent nothing) is closed
// once the region server answered the order (or the call failed or was given up).
func (m *Master) sendOrderLocked(name string) <-chan struct{} {
	p, r := m.st.procs[name], m.st.regions[name]
	if p == nil || r == nil || r.GetServer() == "" || p.sending {
		return nil
	}
	if step := p.p.GetStep(); step != stepOpen && step != stepClose {
		return nil // the SPLIT step is the master's own work (splitStepLocked)
	}
	s, ok := m.reg.Get(r.GetServer())
	if !ok || !s.Live || s.StartCode != r.GetServerStartCode() {
		return nil
	}
	p.sending, p.lastSend = true, m.clock()
	gen, step, addr, sc := p.gen, p.p.GetStep(), s.AdminAddress, r.GetServerStartCode()
	var call func(ctx context.Context, c pb.AdminClient) error
	switch step {
	case stepOpen:
		t := m.st.tables[layout.TableKey(r.GetInfo().GetTable())]
		req := &pb.OpenRegionRequest{Region: proto.CloneOf(r.GetInfo()), Table: proto.CloneOf(t.GetTable()), ProcedureId: p.p.GetId(),
			ServerStartCode: sc}
		call = func(ctx context.Context, c pb.AdminClient) error { _, err := c.OpenRegion(ctx, req); return err }
	case stepClose:
		req := &pb.CloseRegionRequest{Region: name, Flush: p.p.GetFlush(), ProcedureId: p.p.GetId(), ServerStartCode: sc}
		if p.p.GetKind() == kindMove && p.p.GetTarget() != "" {
			if sn, err := layout.ParseServerName(p.p.GetTarget()); err == nil {
				if ts, ok := m.reg.Get(p.p.GetTarget()); ok {
					sn.StartCode, req.DestinationAdminAddress = ts.StartCode, ts.AdminAddress
				}
				req.Destination = sn
				req.DestinationSeq = r.GetLocationSeq() + 1 // the open there bumps it (regionTransition)
				req.Handoff = m.everyServerHasLocked(layout.FeatureManifestHandoff)
			}
		}
		call = func(ctx context.Context, c pb.AdminClient) error { _, err := c.CloseRegion(ctx, req); return err }
	}
	ctx := m.activeCtx
	sent := make(chan struct{})
	m.activeWG.Add(1)
	go func() {
		defer m.activeWG.Done()
		select {
		case m.rpcSem <- struct{}{}:
		case <-ctx.Done():
			close(sent)
			return
		}
		cctx, cancel := context.WithTimeout(ctx, m.cfg.RPCTimeout)
		c, err := m.admin.client(addr)
		if err == nil {
			err = call(cctx, c)
		}
		cancel()
		<-m.rpcSem
		close(sent) // before dispatched, which takes the master's lock
		m.dispatched(name, gen, step, r.GetServer(), sc, err)
	}()
	return sent
}

// dispatched handles the reply to an Open/CloseRegion call.
func (m *Master) dispatched(name string, gen uint64, step pb.ProcedureStep, server string, startCode int64, err error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if !m.activeLocked() {
		return
	}
	p, r := m.st.procs[name], m.st.regions[name]
	if p == nil || p.gen != gen || r == nil {
		return
	}
	p.sending = false
	if err == nil {
		p.accepted = true
		m.kick() // replicas may wait for this
		return
	}
	var b batch
	switch {
	case isWrongProcess(err):
		// Another process of that name answered: the one the catalog names is gone. Its regions
		// (this one included) wait for the recovery of its WAL, which reassigns them; taking the
		// answer as "closed" would move or split the region without its unflushed edits.
		m.log.Warn("an order reached a newer process of the server: the process that held the region is gone, recovering it",
			"region", name, "server", server, "start_code", startCode, "step", step)
		m.reg.Expel(server, startCode)
		if err := m.serverDiedLocked(server, startCode); err != nil {
			m.log.Error("recording the dead process failed: retrying at the next order", "server", server, "err", err)
		}
		return
	case step == stepClose && isNotServing(err) && (!m.serverLiveLocked(server, startCode) || m.deadPendingLocked(server, startCode)):
		// From a process that is gone or being recovered: it may have dropped the region
		// unflushed; its recovery reassigns it.
		m.log.Warn("a dead process says it does not serve the region: left to its recovery", "region", name, "server", server, "start_code", startCode)
		return
	case step == stepClose && isNotServing(err):
		m.closedLocked(&b, r, p.p) // it does not have the region: closed
	case step == stepOpen && isStopping(err):
		m.openRefusedByStoppingLocked(&b, r, p.p)
	case step == stepOpen && answered(err):
		m.failedOpenLocked(&b, r, p.p, err.Error())
	default:
		m.log.Warn("region server did not take an order: resending it", "region", name, "server", server, "step", step, "err", err)
		return
	}
	_ = m.commit(&b)
}

// isWrongProcess: the order reached another process of the server's name (WRONG_SERVER_PROCESS).
func isWrongProcess(err error) bool {
	d, ok := pb.DetailOf(err)
	return ok && d.GetCode() == pb.ErrorCode_ERROR_CODE_WRONG_SERVER_PROCESS
}

// isStopping: the server refused an order because it is stopping (SERVER_STOPPING).
func isStopping(err error) bool {
	d, ok := pb.DetailOf(err)
	return ok && d.GetCode() == pb.ErrorCode_ERROR_CODE_SERVER_STOPPING
}

// openRefusedByStoppingLocked sends a region whose open a stopping server refused elsewhere. It
// is not a failed attempt — the region is fine, the server is leaving — so it does not count
// towards FAILED_OPEN: a master that takes over while every region server is stopping (a rolling
// restart of everything, say) learns of their stopping from these answers before their heartbeats
// say it, and must not give up on regions it could not place yet. The server takes no more
// regions until it registers again.
func (m *Master) openRefusedByStoppingLocked(b *batch, r *pb.CatalogRegion, p *pb.RegionProcedure) {
	name, server := r.GetInfo().GetName(), r.GetServer()
	if _, ok := m.stoppingSrv[server]; !ok {
		m.log.Info("region server is stopping: no more regions go to it", "server", server)
		m.stoppingSrv[server] = r.GetServerStartCode()
	}
	nr := proto.CloneOf(r)
	nr.Server, nr.ServerStartCode, nr.StateSinceMs = "", 0, m.clock().UnixMilli()
	nr.State = stateOffline
	np := proto.CloneOf(p)
	np.Target = ""
	if !slices.Contains(np.Tried, server) {
		np.Tried = append(np.Tried, server)
	}
	m.log.Info("a stopping region server refused to open a region: placing it elsewhere", "region", name, "server", server)
	b.putRegion(nr)
	b.putProc(np)
}

func isNotServing(err error) bool {
	d, ok := pb.DetailOf(err)
	return ok && d.GetCode() == pb.ErrorCode_ERROR_CODE_NOT_SERVING_REGION
}

// reportLocked applies a region server's transition report to b. It returns the region whose
// order goes out once b is written (a move's region placed at its destination), or "".
func (m *Master) reportLocked(b *batch, server string, startCode int64, req *pb.ReportRegionTransitionRequest) (string, error) {
	name := req.GetRegion().GetName()
	r := m.st.regions[name]
	if r == nil {
		if req.GetTransition() == pb.RegionTransition_REGION_TRANSITION_OPENED {
			return "", errPrecondition("region %q is not in the catalog (its table was dropped or truncated): close it", name)
		}
		return "", nil
	}
	p := m.st.procs[name]
	here := r.GetServer() == server && r.GetServerStartCode() == startCode
	switch req.GetTransition() {
	case pb.RegionTransition_REGION_TRANSITION_OPENED:
		if here && r.GetState() == stateOpen {
			return "", nil // a repeated report
		}
		if !here || r.GetState() != stateOpening || p == nil || p.p.GetStep() != stepOpen {
			return "", errPrecondition("region %s is not being opened on %s (it is %s on %q): close it", name, server, r.GetState(), r.GetServer())
		}
		now := m.clock()
		m.metrics.assignTime.Observe(now.Sub(p.stepStart).Seconds())
		m.logStepLocked("region opened", name, server, p, now)
		nr := proto.CloneOf(r)
		nr.State, nr.StateSinceMs, nr.LastError = stateOpen, now.UnixMilli(), ""
		nr.LocationSeq++
		nr.OpenSeq = req.GetOpenSeq()
		b.putRegion(nr)
		b.deleteProc(name)
		if !m.tableWantsOpenLocked(r) { // disabled while it opened: close it again
			m.closeLocked(b, nr, kindUnassign, closeOpts{})
		}
	case pb.RegionTransition_REGION_TRANSITION_FAILED_OPEN:
		if !here || r.GetState() != stateOpening || p == nil || p.p.GetStep() != stepOpen || staleReport(req, p) {
			return "", nil // stale
		}
		m.failedOpenLocked(b, r, p.p, req.GetError())
	case pb.RegionTransition_REGION_TRANSITION_CLOSED:
		switch {
		case staleReport(req, p):
			// A repeat of an earlier close's report (its first try timed out, and was applied
			// after all): the region may have opened again since, on this server or another.
			return "", nil
		case here && r.GetState() == stateClosing:
			var pp *pb.RegionProcedure
			if p != nil {
				pp = p.p
				m.logStepLocked("region closed", name, server, p, m.clock())
			}
			// A move's region opens at its destination in the same catalog write as its
			// close: clients wait for the region from the close to the open, and each write
			// is a round trip to storage (an object PUT on a bucket).
			if nr, np := m.closedLocked(b, r, pp); np != nil && m.placeLocked(b, m.placerForLocked(nr, np), nr, np, m.clock()) {
				return name, nil
			}
		case here && r.GetState() == stateOpen && p == nil:
			// The server closed it on its own (it is stopping, or it failed; a report of an
			// ordered close names its procedure, which is not in flight: staleReport above):
			// open it again somewhere.
			if _, stopping := m.stoppingSrv[server]; stopping && req.GetError() == "" {
				m.log.Info("stopping region server closed a region: reassigning it", "region", name, "server", server)
			} else {
				m.log.Warn("region server closed a region on its own: reassigning it", "region", name, "server", server, "error", req.GetError())
			}
			m.closedLocked(b, r, nil)
		default:
			return "", nil // stale or repeated
		}
	case pb.RegionTransition_REGION_TRANSITION_SPLIT_READY:
		return "", errPrecondition("region servers do not split regions themselves: the master's SPLIT procedure does")
	default:
		return "", errInvalid("unknown transition %v", req.GetTransition())
	}
	return "", nil
}

// staleReport says whether a transition report answers an order of a procedure other than the
// region's current one (p, nil when none is in flight). Reports name the procedure of the order
// they answer; one that names none (a close the server made on its own, or a server of an earlier
// release) is never stale by this test.
func staleReport(req *pb.ReportRegionTransitionRequest, p *proc) bool {
	id := req.GetProcedureId()
	return id != 0 && (p == nil || p.p.GetId() != id)
}
