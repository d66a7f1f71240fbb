package master

import (
	"context"
	"errors"
	"maps"
	"net"
	"slices"
	"strconv"
	"strings"
	"time"

	"google.golang.org/protobuf/proto"

	pb "github.com/cellstore/cellstore/engine/api/cellstore/v1"
	"github.com/cellstore/cellstore/engine/layout"
	"github.com/cellstore/cellstore/engine/quota"
	"github.com/cellstore/cellstore/engine/version"
)

// The Master gRPC service. Every handler answers NOT_ACTIVE_MASTER unless this master is active,
// and returns typed errors (pb.ErrorDetail in the status details).

// CreateTable implements pb.MasterServer.
func (m *Master) CreateTable(ctx context.Context, req *pb.CreateTableRequest) (*pb.CreateTableResponse, error) {
	resp, err := m.createTable(ctx, req)
	return resp, toStatus(err)
}

// ModifyTable implements pb.MasterServer.
func (m *Master) ModifyTable(ctx context.Context, req *pb.ModifyTableRequest) (*pb.ModifyTableResponse, error) {
	return &pb.ModifyTableResponse{}, toStatus(m.modifyTable(ctx, req))
}

// EnableTable implements pb.MasterServer.
func (m *Master) EnableTable(ctx context.Context, req *pb.TableRequest) (*pb.TableResponse, error) {
	return &pb.TableResponse{}, toStatus(m.enableTable(ctx, req))
}

// DisableTable implements pb.MasterServer.
func (m *Master) DisableTable(ctx context.Context, req *pb.TableRequest) (*pb.TableResponse, error) {
	return &pb.TableResponse{}, toStatus(m.disableTable(ctx, req))
}

// DeleteTable implements pb.MasterServer.
func (m *Master) DeleteTable(ctx context.Context, req *pb.TableRequest) (*pb.TableResponse, error) {
	return &pb.TableResponse{}, toStatus(m.deleteTable(ctx, req))
}

// TruncateTable implements pb.MasterServer.
func (m *Master) TruncateTable(ctx context.Context, req *pb.TruncateTableRequest) (*pb.TableResponse, error) {
	return &pb.TableResponse{}, toStatus(m.truncateTable(ctx, req))
}

// ListTables implements pb.MasterServer.
func (m *Master) ListTables(_ context.Context, req *pb.ListTablesRequest) (*pb.ListTablesResponse, error) {
	resp, err := m.listTables(req)
	return resp, toStatus(err)
}

// DescribeTable implements pb.MasterServer.
func (m *Master) DescribeTable(_ context.Context, req *pb.TableRequest) (*pb.DescribeTableResponse, error) {
	resp, err := m.describeTable(req)
	return resp, toStatus(err)
}

// LocateRegion implements pb.MasterServer.
func (m *Master) LocateRegion(ctx context.Context, req *pb.LocateRegionRequest) (*pb.LocateRegionResponse, error) {
	resp, changed, err := m.locateRegion(req)
	wait := min(time.Duration(req.GetWaitMs())*time.Millisecond, maxLocateWait)
	if err != nil || wait <= 0 || !moving(resp.GetLocations()[0], req.GetRefused()) {
		return resp, toStatus(err)
	}
	// The region is moving: answer when the model changes so that it is open again (every
	// commit closes changed), or when the wait is over. Waiters are bounded: beyond the bound,
	// the answer comes at once and the client pauses as before.
	if m.locateWaiters.Add(1) > maxLocateWaiters {
		m.locateWaiters.Add(-1)
		return resp, nil
	}
	defer m.locateWaiters.Add(-1)
	t := time.NewTimer(wait)
	defer t.Stop()
	for {
		select {
		case <-changed:
		case <-t.C:
			return resp, nil
		case <-ctx.Done():
			return resp, nil
		}
		resp, changed, err = m.locateRegion(req)
		if err != nil || !moving(resp.GetLocations()[0], req.GetRefused()) {
			return resp, toStatus(err)
		}
	}
}

// LocateRegion's waits for a moving region: at most this long, and this many at once.
const (
	maxLocateWait    = 5 * time.Second
	maxLocateWaiters = 4096
)

// moving says whether a region is between servers in a way that ends by itself: being closed,
// opened or split (not closed or failed to open, which need an operator). A region placed at a
// server (OPEN, or CLOSING and still served) is not, unless it is the very location the caller
// was refused at (same region, server and seq): that server no longer has the region, and its
// report is on its way (a close, or a stopping server's own). A region opened since (a daughter,
// a reopening: another name or seq) is where the caller goes.
func moving(l *pb.RegionLocation, refused *pb.RefusedLocation) bool {
	if l.GetServer() != nil {
		return refused != nil && l.GetRegion().GetName() == refused.GetRegion() &&
			l.GetServer().Address() == refused.GetServer() && l.GetSeq() == refused.GetSeq()
	}
	switch l.GetState() {
	case stateOffline, stateOpening, stateClosing, stateSplitting, stateSplit, stateMerging:
		return true
	}
	return false
}

// GetTableRegions implements pb.MasterServer.
func (m *Master) GetTableRegions(_ context.Context, req *pb.TableRequest) (*pb.GetTableRegionsResponse, error) {
	resp, err := m.getTableRegions(req)
	return resp, toStatus(err)
}

// checkServer validates a server name from a region server.
func checkServer(sn *pb.ServerName) (string, error) {
	if sn == nil || sn.GetHost() == "" || sn.GetPort() <= 0 || sn.GetPort() > 65535 {
		return "", errInvalid("server name must have a host and a port in [1, 65535], got %v", sn)
	}
	if sn.GetStartCode() <= 0 {
		return "", errInvalid("server %s: start code must be positive (the process's start time in ms)", layout.ServerName(sn))
	}
	return layout.ServerName(sn), nil
}

// RegisterServer implements pb.MasterServer.
func (m *Master) RegisterServer(_ context.Context, req *pb.RegisterServerRequest) (*pb.RegisterServerResponse, error) {
	resp, err := m.registerServer(req)
	return resp, toStatus(err)
}

func (m *Master) registerServer(req *pb.RegisterServerRequest) (*pb.RegisterServerResponse, error) {
	name, err := checkServer(req.GetServer())
	if err != nil {
		return nil, err
	}
	sc := req.GetServer().GetStartCode()
	if req.GetAdminAddress() == "" {
		return nil, errInvalid("server %s registered no admin address", name)
	}
	if len(req.GetVersion()) > 128 {
		return nil, errInvalid("server %s: version longer than 128 bytes", name)
	}
	if err := version.CheckServer(m.cfg.Version, req.GetVersion()); err != nil {
		m.log.Warn("region server refused: version skew", "server", name, "version", req.GetVersion(), "master_version", m.cfg.Version, "why", err)
		return nil, errPrecondition("%v", err)
	}
	if err := m.lock(); err != nil {
		return nil, err
	}
	defer m.mu.Unlock()
	if m.reg.IsExpelled(name, sc) {
		return nil, errPrecondition("server %s (start code %d) was expelled for not answering the master: restart it (a new start code)", name, sc)
	}
	if m.st.dead[layout.WALDirName(name, sc)] != nil {
		return nil, errPrecondition("server %s (start code %d) was declared dead and its WAL fenced: restart it (a new start code)", name, sc)
	}
	if cur, ok := m.reg.Get(name); ok && cur.Live && cur.StartCode > sc {
		return nil, errPrecondition("a newer process of server %s is registered (start code %d > %d): this one must stop", name, cur.StartCode, sc)
	}
	row := m.st.servers[name]
	zone := req.GetZone()
	if zone == "" {
		zone = row.GetZone()
	}
	if prev, ok := m.reg.Get(name); !ok || prev.StartCode != sc {
		m.admin.forget(req.GetAdminAddress())
	}
	replaced := m.reg.Register(name, sc, req.GetAdminAddress(), zone)
	draining, drainedSC := row.GetDraining(), row.GetDrainedStartCode()
	if draining && drainedSC != 0 && drainedSC != sc {
		// The drain was the previous process's own (its preStop): it ended with that process.
		m.log.Info("the drain of the server's previous process ends with it", "server", name, "old_start_code", drainedSC, "start_code", sc)
		draining, drainedSC = false, 0
	}
	_ = m.reg.SetDraining(name, draining)
	if replaced != nil {
		m.log.Warn("region server restarted: recovering its previous process", "server", name, "old_start_code", replaced.StartCode, "start_code", sc)
		if err := m.serverDiedLocked(replaced.Name, replaced.StartCode); err != nil {
			return nil, err
		}
	}
	nr := &pb.CatalogServer{Server: name, StartCode: sc, AdminAddress: req.GetAdminAddress(), Zone: zone, Draining: draining, DrainedStartCode: drainedSC}
	if !proto.Equal(nr, row) {
		var b batch
		b.putServer(nr)
		if err := m.commit(&b); err != nil {
			return nil, err
		}
	}
	delete(m.stoppingSrv, name)
	m.httpAddrs[name] = req.GetHttpAddress()
	m.versions[name] = req.GetVersion()
	m.features[name] = req.GetFeatures()
	m.log.Info("region server registered", "server", name, "start_code", sc, "admin", req.GetAdminAddress(), "zone", zone, "version", req.GetVersion())
	m.kick()
	lease := m.reg.Config()
	cc := m.clusterConfigLocked()
	cc[layout.ConfigSelfFenceMarginMS] = strconv.FormatInt(lease.SelfFenceMargin.Milliseconds(), 10)
	return &pb.RegisterServerResponse{LeaseMs: lease.Lease.Milliseconds(), HeartbeatIntervalMs: lease.HeartbeatInterval.Milliseconds(),
		ClusterConfig: cc, MasterHttpAddress: m.cfg.HTTPAddress}, nil
}

// Heartbeat implements pb.MasterServer.
func (m *Master) Heartbeat(_ context.Context, req *pb.HeartbeatRequest) (*pb.HeartbeatResponse, error) {
	resp, err := m.heartbeat(req)
	return resp, toStatus(err)
}

func (m *Master) heartbeat(req *pb.HeartbeatRequest) (*pb.HeartbeatResponse, error) {
	name, err := checkServer(req.GetServer())
	if err != nil {
		return nil, err
	}
	sc := req.GetServer().GetStartCode()
	if m.status.Load() != stateActive || m.cfg.Election.Check() != nil {
		// (A master whose leadership lapsed must not renew servers' leases: they would go on
		// acknowledging writes after its successor took them for dead.)
		return nil, m.notActive()
	}
	// Renew first, outside the master's lock: the lease is measured from the receipt.
	known := m.reg.Heartbeat(name, sc)
	if err := m.lock(); err != nil {
		return nil, err
	}
	defer m.mu.Unlock()
	lease := m.reg.Config().Lease.Milliseconds()
	if !known {
		return &pb.HeartbeatResponse{LeaseMs: lease, UnknownServer: true}, nil
	}
	load := req.GetLoad()
	m.loads[name] = load
	m.features[name] = req.GetFeatures()
	if v := req.GetVersion(); v != "" { // a server of an earlier release sends none
		m.versions[name] = v
	}
	var b batch
	for _, rl := range load.GetRegions() {
		r := m.st.regions[rl.GetRegion()]
		if r == nil || r.GetInfo().GetReplicaId() != 0 || r.GetServer() != name || r.GetServerStartCode() != sc ||
			r.GetState() != stateOpen || rl.GetMaxFlushedSeq() <= r.GetMaxFlushedSeq() {
			continue
		}
		nr := proto.CloneOf(r)
		nr.MaxFlushedSeq = rl.GetMaxFlushedSeq()
		b.putRegion(nr)
	}
	if err := m.commit(&b); err != nil {
		return nil, err
	}
	if !req.GetStopping() {
		m.splitPolicyLocked(name, sc, load)
	}
	if req.GetStopping() {
		if _, ok := m.stoppingSrv[name]; !ok {
			m.log.Info("region server is stopping: no more regions go to it", "server", name)
		}
		m.stoppingSrv[name] = sc
		if len(load.GetRegions()) == 0 && !m.holdsRegionsLocked(name, sc) {
			// It holds nothing and acknowledges no write any more: recover it now (fence its log,
			// which has nothing unflushed, and forget it) instead of waiting for its lease.
			m.reg.MarkDead(name)
			if err := m.serverDiedLocked(name, sc); err != nil {
				return nil, err
			}
			return &pb.HeartbeatResponse{LeaseMs: lease, UnknownServer: true}, nil
		}
	}
	return &pb.HeartbeatResponse{LeaseMs: lease, QuotaVersion: m.st.quotas.GetVersion(), AclVersion: m.st.acl.GetVersion(),
		ClusterConfig: m.clusterConfigLocked(), QuotaShares: m.quotaSharesLocked(name)}, nil
}

// quotaSharesLocked is a server's shares of the quotas, in proportion to the demand every server
// reported in its last heartbeat (quota.Shares).
func (m *Master) quotaSharesLocked(server string) map[string]float64 {
	if len(m.st.quotas.GetQuotas()) == 0 {
		return nil
	}
	demand := make(map[string][]*pb.QuotaDemand, len(m.loads))
	for name, l := range m.loads {
		demand[name] = l.GetQuotaDemand()
	}
	return quota.Shares(demand)[server]
}

func (m *Master) holdsRegionsLocked(name string, sc int64) bool {
	for _, r := range m.st.regions {
		if r.GetServer() == name && r.GetServerStartCode() == sc {
			return true
		}
	}
	return false
}

// ReportRegionTransition implements pb.MasterServer.
func (m *Master) ReportRegionTransition(_ context.Context, req *pb.ReportRegionTransitionRequest) (*pb.ReportRegionTransitionResponse, error) {
	name, err := checkServer(req.GetServer())
	if err != nil {
		return nil, toStatus(err)
	}
	if req.GetRegion().GetName() == "" {
		return nil, toStatus(errInvalid("transition report names no region"))
	}
	if err := m.report(name, req.GetServer().GetStartCode(), req); err != nil {
		return nil, toStatus(err)
	}
	return &pb.ReportRegionTransitionResponse{}, nil
}

// SetServerZone implements pb.MasterServer.
func (m *Master) SetServerZone(_ context.Context, req *pb.SetServerZoneRequest) (*pb.SetServerZoneResponse, error) {
	return &pb.SetServerZoneResponse{}, toStatus(m.updateServerRow(req.GetServer(), func(s *pb.CatalogServer) { s.Zone = req.GetZone() },
		func() { _ = m.reg.SetZone(req.GetServer(), req.GetZone()) }))
}

// updateServerRow changes (or creates) a server's catalog row and applies the change to the
// registry.
func (m *Master) updateServerRow(name string, change func(*pb.CatalogServer), apply func()) error {
	if _, err := layout.ParseServerName(name); err != nil {
		return errInvalid("%v", err)
	}
	if err := m.lock(); err != nil {
		return err
	}
	defer m.mu.Unlock()
	row := m.st.servers[name]
	nr := &pb.CatalogServer{Server: name}
	if row != nil {
		nr = proto.CloneOf(row)
	}
	change(nr)
	var b batch
	switch {
	case proto.Equal(nr, row):
	case nr.GetStartCode() == 0 && !nr.GetDraining() && nr.GetZone() == "":
		if row != nil {
			b.deleteServer(name) // nothing left to remember
		}
	default:
		b.putServer(nr)
	}
	if err := m.commit(&b); err != nil {
		return err
	}
	apply()
	m.kick()
	return nil
}

// MoveRegion implements pb.MasterServer.
func (m *Master) MoveRegion(ctx context.Context, req *pb.MoveRegionRequest) (*pb.MoveRegionResponse, error) {
	return &pb.MoveRegionResponse{}, toStatus(m.moveRegion(ctx, req))
}

func (m *Master) moveRegion(ctx context.Context, req *pb.MoveRegionRequest) error {
	name, dest := req.GetRegion(), req.GetDestination()
	if dest != "" {
		if _, err := layout.ParseServerName(dest); err != nil {
			return errInvalid("destination: %v", err)
		}
	}
	if err := m.lock(); err != nil {
		return err
	}
	defer m.mu.Unlock()
	r, d := m.regionLocked(name)
	if d != nil {
		return d
	}
	if m.st.procs[name] == nil && r.GetServer() == "" && m.tableWantsOpenLocked(r) {
		// Not on any server (FAILED_OPEN, or offline): "move" assigns it (HBase's assign) — only
		// a region that should be served: not a split parent (its daughters serve its rows), a
		// replica closed for its primary's split or merge, or a region of a table whose restore
		// has not written it yet.
		switch st := r.GetState(); {
		case r.GetInfo().GetSplit() || st == stateSplit:
			return errPrecondition("region %s was split: its daughters serve its rows, it is not assigned again", name)
		case st != stateOffline && st != stateClosed && st != stateFailedOpen:
			return &pb.ErrorDetail{Code: pb.ErrorCode_ERROR_CODE_FAILED_PRECONDITION, Region: name, Retryable: true,
				Message: "region is " + st.String() + ": move it when it is open"}
		case m.splitBlocksLocked(name) || m.mergeBlocksLocked(name):
			return &pb.ErrorDetail{Code: pb.ErrorCode_ERROR_CODE_FAILED_PRECONDITION, Region: name, Retryable: true,
				Message: "its primary is being split or merged: the replica is assigned with what that makes"}
		}
		if err := errRestoring(layout.TableKey(r.GetInfo().GetTable()), m.st.tables[layout.TableKey(r.GetInfo().GetTable())]); err != nil {
			return err
		}
		return m.assignTo(ctx, r, dest)
	}
	if m.st.procs[name] != nil || r.GetState() != stateOpen {
		msg := "region is " + r.GetState().String()
		if m.st.procs[name] != nil {
			msg += " with a procedure in flight"
		}
		return &pb.ErrorDetail{Code: pb.ErrorCode_ERROR_CODE_FAILED_PRECONDITION, Region: name, Retryable: true,
			Message: msg + ": move it when it is open"}
	}
	pl := m.placerLocked()
	br := &BalancerRegion{Name: name, Group: layout.PrimaryName(name), Server: r.GetServer()}
	if dest == "" {
		dest = pl.pick(br, r.GetServer())
		if dest == "" {
			return errPrecondition("no other live, non-draining server can take region %s", name)
		}
	} else {
		if dest == r.GetServer() {
			return nil
		}
		s, ok := m.reg.Get(dest)
		switch {
		case !ok || !s.Live || s.Expelled:
			return errPrecondition("destination %s is not a live region server", dest)
		case s.Draining:
			return errPrecondition("destination %s is draining", dest)
		case !pl.fits(br, dest):
			return errInvalid("destination %s holds another replica of region %s: replicas never share a server", dest, layout.PrimaryName(name))
		}
	}
	var b batch
	p := m.closeLocked(&b, r, kindMove, closeOpts{target: dest})
	if err := m.commit(&b); err != nil {
		return err
	}
	m.log.Info("moving region", "region", name, "from", r.GetServer(), "to", dest)
	m.dispatchLocked(name)
	if _, stopped := m.waitFor(ctx, func() bool {
		cur := m.st.procs[name]
		return cur == nil || cur.p.GetId() != p.GetId()
	}); stopped {
		return nil // under way: the next master finishes it
	}
	if cur := m.st.regions[name]; cur != nil && cur.GetState() == stateFailedOpen {
		return &pb.ErrorDetail{Code: pb.ErrorCode_ERROR_CODE_FAILED_PRECONDITION, Region: name, Message: "the move failed: " + cur.GetLastError()}
	}
	return nil
}

// regionLocked finds a region named in a request (INVALID_ARGUMENT when there is none).
func (m *Master) regionLocked(name string) (*pb.CatalogRegion, *pb.ErrorDetail) {
	r := m.st.regions[name]
	if r == nil {
		return nil, &pb.ErrorDetail{Code: pb.ErrorCode_ERROR_CODE_INVALID_ARGUMENT, Region: name, Message: "unknown region " + strconv.Quote(name)}
	}
	return r, nil
}

// assignTo assigns a region that is on no server, to dest if given (m.mu held).
func (m *Master) assignTo(ctx context.Context, r *pb.CatalogRegion, dest string) error {
	name := r.GetInfo().GetName()
	if dest != "" {
		if s, ok := m.reg.Get(dest); !ok || !s.Live || s.Expelled || s.Draining {
			return errPrecondition("destination %s is not a live, non-draining region server", dest)
		}
	}
	var b batch
	nr := proto.CloneOf(r)
	nr.State, nr.StateSinceMs = stateOffline, m.clock().UnixMilli()
	pr := m.newProcLocked(&b, name, kindAssign, stepOpen)
	pr.Target = dest
	b.putRegion(nr)
	b.putProc(pr)
	if err := m.commit(&b); err != nil {
		return err
	}
	m.log.Info("assigning region", "region", name, "to", dest, "was", r.GetState())
	m.kick()
	if _, stopped := m.waitFor(ctx, func() bool { return m.st.procs[name] == nil }); stopped {
		return nil // under way: the next master finishes it
	}
	if cur := m.st.regions[name]; cur != nil && cur.GetState() == stateFailedOpen {
		return &pb.ErrorDetail{Code: pb.ErrorCode_ERROR_CODE_FAILED_PRECONDITION, Region: name, Message: "the assignment failed: " + cur.GetLastError()}
	}
	return nil
}

// DrainServer implements pb.MasterServer.
func (m *Master) DrainServer(_ context.Context, req *pb.DrainServerRequest) (*pb.DrainServerResponse, error) {
	name, sc := req.GetServer(), req.GetStartCode()
	err := m.updateServerRow(name, func(s *pb.CatalogServer) {
		switch {
		case sc == 0:
			s.DrainedStartCode = 0 // the name, until undrained (also over a process's own drain)
		case !s.GetDraining():
			s.DrainedStartCode = sc
		}
		// A drain of the name already in place stays one: a process's own drain does not narrow it.
		s.Draining = true
	}, func() {
		if m.reg.SetDraining(name, true) == nil {
			m.log.Info("draining region server", "server", name, "start_code_only", sc)
		}
	})
	return &pb.DrainServerResponse{}, toStatus(err)
}

// UndrainServer implements pb.MasterServer.
func (m *Master) UndrainServer(_ context.Context, req *pb.DrainServerRequest) (*pb.DrainServerResponse, error) {
	name := req.GetServer()
	err := m.updateServerRow(name, func(s *pb.CatalogServer) { s.Draining, s.DrainedStartCode = false, 0 }, func() {
		if m.reg.SetDraining(name, false) == nil {
			m.log.Info("region server no longer draining", "server", name)
		}
		m.moveQueue = slices.DeleteFunc(m.moveQueue, func(mv queuedMove) bool {
			if mv.from == name && mv.to == "" {
				delete(m.queued, mv.region)
				return true
			}
			return false
		})
	})
	return &pb.DrainServerResponse{}, toStatus(err)
}

// Balance implements pb.MasterServer: it runs the balancer now (whether or not the periodic
// balancer is on) and returns the number of moves it queued.
func (m *Master) Balance(context.Context, *pb.BalanceRequest) (*pb.BalanceResponse, error) {
	if err := m.lock(); err != nil {
		return nil, err
	}
	defer m.mu.Unlock()
	return &pb.BalanceResponse{Moves: int32(m.balanceLocked())}, nil
}

// SetBalancerRunning implements pb.MasterServer.
func (m *Master) SetBalancerRunning(_ context.Context, req *pb.SetBalancerRunningRequest) (*pb.SetBalancerRunningResponse, error) {
	return m.flipSwitch(req.GetOn(), "balancer", func(st *pb.CatalogMasterState) *bool { return &st.BalancerOff }, func() {
		m.nextBalance = m.clock().Add(m.cfg.BalancerInterval)
	})
}

// flipSwitch turns one of the catalog's switches (the balancer's, the normalizer's) on or off
// and answers its previous state; off points at the switch in a state row, restart is called
// when it changes.
func (m *Master) flipSwitch(on bool, what string, off func(st *pb.CatalogMasterState) *bool, restart func()) (*pb.SetBalancerRunningResponse, error) {
	if err := m.lock(); err != nil {
		return nil, toStatus(err)
	}
	defer m.mu.Unlock()
	cur := proto.CloneOf(m.st.state)
	if cur == nil {
		cur = &pb.CatalogMasterState{}
	}
	prev := !*off(cur)
	if prev != on {
		var b batch
		*off(b.counters(m.st)) = !on
		if err := m.commit(&b); err != nil {
			return nil, toStatus(err)
		}
		restart()
		m.log.Info(what+" switched", "on", on)
	}
	return &pb.SetBalancerRunningResponse{Previous: prev}, nil
}

// ClusterStatus implements pb.MasterServer.
// ReportStandby implements pb.MasterServer: a standby master is there.
func (m *Master) ReportStandby(_ context.Context, req *pb.ReportStandbyRequest) (*pb.ReportStandbyResponse, error) {
	addr := req.GetAddress()
	if addr == "" || len(addr) > 512 {
		return nil, (&pb.ErrorDetail{Code: pb.ErrorCode_ERROR_CODE_INVALID_ARGUMENT, Message: "ReportStandby needs the standby's address (at most 512 bytes)"}).Status()
	}
	if err := m.lock(); err != nil {
		return nil, err
	}
	defer m.mu.Unlock()
	now := m.clock()
	if _, known := m.standbys[addr]; !known {
		m.log.Info("standby master reported", "standby", addr)
	}
	m.standbys[addr] = now
	if v := req.GetVersion(); len(v) <= 128 {
		m.versions[addr] = v
	}
	// Forget those long silent (and bound the map: every entry is one that reported recently).
	for a, at := range m.standbys {
		if now.Sub(at) > 10*m.cfg.StandbyReportInterval {
			delete(m.standbys, a)
			delete(m.versions, a)
		}
	}
	return &pb.ReportStandbyResponse{ExternalAddresses: maps.Clone(m.st.config.GetExternalAddresses())}, nil
}

func (m *Master) ClusterStatus(context.Context, *pb.ClusterStatusRequest) (*pb.ClusterStatusResponse, error) {
	if err := m.lock(); err != nil {
		return nil, err
	}
	defer m.mu.Unlock()
	now := m.clock()
	resp := &pb.ClusterStatusResponse{ActiveMaster: m.cfg.Address, BalancerOn: !m.st.state.GetBalancerOff(), NormalizerOn: !m.st.state.GetNormalizerOff(),
		ClusterConfig: m.clusterConfigLocked(), Regions: int32(len(m.st.regions)),
		MasterVersions: map[string]string{m.cfg.Address: m.cfg.Version}}
	for addr, at := range m.standbys {
		if addr != m.cfg.Address && now.Sub(at) <= 3*m.cfg.StandbyReportInterval {
			resp.StandbyMasters = append(resp.StandbyMasters, addr)
			resp.MasterVersions[addr] = m.versions[addr]
		}
	}
	slices.Sort(resp.StandbyMasters)
	count := map[string]int32{}
	for name, r := range m.st.regions {
		if r.GetServer() != "" {
			count[r.GetServer()]++
		}
		// FAILED_OPEN regions are listed with those in transition, as HBase does: they are not
		// served and need attention.
		if m.st.regionInTransition(r) || r.GetState() == pb.RegionState_REGION_STATE_FAILED_OPEN {
			since := time.UnixMilli(r.GetStateSinceMs())
			if p := m.st.procs[name]; p != nil {
				since = time.UnixMilli(p.p.GetStartedMs())
			}
			resp.RegionsInTransition = append(resp.RegionsInTransition, &pb.RegionInTransition{Region: name, State: r.GetState(),
				Server: r.GetServer(), SinceMsAgo: max(0, now.Sub(since).Milliseconds())})
		}
	}
	slices.SortFunc(resp.RegionsInTransition, func(a, b *pb.RegionInTransition) int { return strings.Compare(a.Region, b.Region) })
	seen := map[string]bool{}
	for _, s := range m.reg.All() {
		seen[s.Name] = true
		ss := &pb.ServerStatus{Zone: s.Zone, Draining: s.Draining, Live: s.Live, Regions: count[s.Name],
			LastHeartbeatMsAgo: max(0, now.Sub(s.LastSeen).Milliseconds()), Load: m.loads[s.Name], Version: m.versions[s.Name]}
		if sc, ok := m.stoppingSrv[s.Name]; ok && sc == s.StartCode && s.Live {
			ss.Stopping = true
		}
		if sn, err := layout.ParseServerName(s.Name); err == nil {
			sn.StartCode = s.StartCode
			ss.Server = sn
		}
		resp.Servers = append(resp.Servers, ss)
	}
	// Servers the catalog remembers (drained or zoned ones that left).
	names := make([]string, 0, len(m.st.servers))
	for name := range m.st.servers {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		row := m.st.servers[name]
		if seen[name] || !row.GetDraining() {
			continue
		}
		ss := &pb.ServerStatus{Zone: row.GetZone(), Draining: true, Regions: count[name]}
		if sn, err := layout.ParseServerName(name); err == nil {
			ss.Server = sn
		}
		resp.Servers = append(resp.Servers, ss)
	}
	slices.SortFunc(resp.Servers, func(a, b *pb.ServerStatus) int {
		return strings.Compare(layout.ServerName(a.Server), layout.ServerName(b.Server))
	})
	for _, d := range m.st.dead {
		resp.DeadServers = append(resp.DeadServers, d.d.GetServer())
	}
	slices.Sort(resp.DeadServers)
	resp.DeadServers = slices.Compact(resp.DeadServers)
	return resp, nil
}

// SetClusterConfig implements pb.MasterServer. An empty value removes the override (the flag's
// value applies again).
func (m *Master) SetClusterConfig(_ context.Context, req *pb.SetClusterConfigRequest) (*pb.SetClusterConfigResponse, error) {
	for k, v := range req.GetConfig() {
		if v == "" {
			continue
		}
		switch k {
		case layout.ConfigDefaultRegionReplication:
			if n, err := strconv.Atoi(v); err != nil || n < 1 || n > maxReplication {
				return nil, toStatus(errInvalid("%s must be an integer in [1, %d], got %q", k, maxReplication, v))
			}
		case layout.ConfigHedgeDelayMS:
			if n, err := strconv.ParseInt(v, 10, 64); err != nil || n < 0 {
				return nil, toStatus(errInvalid("%s must be a non-negative integer (milliseconds), got %q", k, v))
			}
		case layout.ConfigQuotasEnabled, layout.ConfigSplitsEnabled:
			if _, err := strconv.ParseBool(v); err != nil {
				return nil, toStatus(errInvalid("%s must be true or false, got %q", k, v))
			}
		case layout.ConfigRegionSplitSize:
			if n, err := strconv.ParseInt(v, 10, 64); err != nil || n <= 0 {
				return nil, toStatus(errInvalid("%s must be a positive integer (bytes), got %q", k, v))
			}
		default:
			return nil, toStatus(errInvalid("unknown cluster setting %q (known: %s, %s, %s, %s, %s)", k,
				layout.ConfigDefaultRegionReplication, layout.ConfigHedgeDelayMS, layout.ConfigQuotasEnabled, layout.ConfigRegionSplitSize, layout.ConfigSplitsEnabled))
		}
	}
	if err := m.lock(); err != nil {
		return nil, err
	}
	defer m.mu.Unlock()
	nc := proto.CloneOf(m.st.config)
	if nc.Config == nil {
		nc.Config = map[string]string{}
	}
	for k, v := range req.GetConfig() {
		if v == "" {
			delete(nc.Config, k)
		} else {
			nc.Config[k] = v
		}
	}
	if !proto.Equal(nc, m.st.config) {
		var b batch
		b.putConfig(nc)
		if err := m.commit(&b); err != nil {
			return nil, toStatus(err)
		}
		m.log.Info("cluster configuration changed", "config", nc.GetConfig())
	}
	return &pb.SetClusterConfigResponse{}, nil
}

// SetQuota implements pb.MasterServer.
func (m *Master) SetQuota(_ context.Context, req *pb.SetQuotaRequest) (*pb.SetQuotaResponse, error) {
	q, err := checkQuota(req.GetQuota(), req.GetRemove())
	if err != nil {
		return nil, toStatus(err)
	}
	if err := m.lock(); err != nil {
		return nil, err
	}
	defer m.mu.Unlock()
	cur := m.st.quotas
	nq := &pb.CatalogQuotas{Version: cur.GetVersion() + 1}
	changed := false
	// A removal takes the subject's quotas of quota.type and of every type in remove_types
	// (LIMIT => NONE removes them all).
	remove := map[pb.ThrottleType]bool{q.GetType(): true}
	for _, t := range req.GetRemoveTypes() {
		remove[t] = true
	}
	for _, old := range cur.GetQuotas() {
		if req.GetRemove() && remove[old.GetType()] && sameQuotaSubject(old, q) {
			changed = true
			continue
		}
		if !req.GetRemove() && sameQuotaKey(old, q) {
			changed = changed || !proto.Equal(old, q)
			continue
		}
		nq.Quotas = append(nq.Quotas, old)
	}
	if !req.GetRemove() {
		if len(nq.Quotas) == len(cur.GetQuotas()) {
			changed = true // a new one
		}
		nq.Quotas = append(nq.Quotas, q)
	}
	if !changed {
		return &pb.SetQuotaResponse{}, nil
	}
	var b batch
	b.putQuotas(nq)
	if err := m.commit(&b); err != nil {
		return nil, toStatus(err)
	}
	m.log.Info("quota changed", "quota", q.String(), "removed", req.GetRemove(), "version", nq.GetVersion())
	return &pb.SetQuotaResponse{}, nil
}

// ListQuotas implements pb.MasterServer.
func (m *Master) ListQuotas(context.Context, *pb.ListQuotasRequest) (*pb.ListQuotasResponse, error) {
	if err := m.lock(); err != nil {
		return nil, err
	}
	defer m.mu.Unlock()
	resp := &pb.ListQuotasResponse{Version: m.st.quotas.GetVersion()}
	for _, q := range m.st.quotas.GetQuotas() {
		resp.Quotas = append(resp.Quotas, proto.CloneOf(q))
	}
	return resp, nil
}

// checkQuota validates and normalises a quota of a request.
func checkQuota(q *pb.Quota, remove bool) (*pb.Quota, error) {
	if q == nil {
		return nil, errInvalid("no quota given")
	}
	q = proto.CloneOf(q)
	switch s := q.GetSubject().(type) {
	case *pb.Quota_User:
		if s.User == "" {
			return nil, errInvalid("quota: the user is empty")
		}
	case *pb.Quota_Table:
		tn, err := checkTableName(s.Table)
		if err != nil {
			return nil, errInvalid("quota: %v", err)
		}
		s.Table = tn
	case *pb.Quota_Namespace:
		if err := validNamespace(s.Namespace); err != nil {
			return nil, errInvalid("quota: %v", err)
		}
	default:
		return nil, errInvalid("quota: give a user, a table or a namespace")
	}
	if _, ok := pb.ThrottleType_name[int32(q.GetType())]; !ok {
		return nil, errInvalid("quota: unknown throttle type %d", q.GetType())
	}
	if remove {
		q.Limit, q.TimeUnitSeconds = 0, 0
		return q, nil
	}
	if q.GetLimit() <= 0 {
		return nil, errInvalid("quota: limit must be positive, got %d (remove the quota instead)", q.GetLimit())
	}
	switch q.GetTimeUnitSeconds() {
	case 1, 60, 3600, 86400:
	default:
		return nil, errInvalid("quota: time unit must be 1, 60, 3600 or 86400 seconds (sec, min, hour, day), got %d", q.GetTimeUnitSeconds())
	}
	return q, nil
}

// sameQuotaKey: same subject and throttle type.
func sameQuotaKey(a, b *pb.Quota) bool {
	return a.GetType() == b.GetType() && sameQuotaSubject(a, b)
}

// sameQuotaSubject says whether two quotas are of one user, table or namespace.
func sameQuotaSubject(a, b *pb.Quota) bool {
	switch {
	case a.GetUser() != "" || b.GetUser() != "":
		return a.GetUser() == b.GetUser()
	case a.GetNamespace() != "" || b.GetNamespace() != "":
		return a.GetNamespace() == b.GetNamespace()
	}
	return proto.Equal(a.GetTable(), b.GetTable())
}

// Snapshot implements pb.MasterServer.
func (m *Master) Snapshot(ctx context.Context, req *pb.SnapshotRequest) (*pb.SnapshotResponse, error) {
	resp, err := m.takeSnapshot(ctx, req)
	return resp, toStatus(err)
}

// ListSnapshots implements pb.MasterServer.
func (m *Master) ListSnapshots(_ context.Context, req *pb.ListSnapshotsRequest) (*pb.ListSnapshotsResponse, error) {
	resp, err := m.listSnapshots(req)
	return resp, toStatus(err)
}

// DeleteSnapshot implements pb.MasterServer.
func (m *Master) DeleteSnapshot(_ context.Context, req *pb.SnapshotNameRequest) (*pb.SnapshotNameResponse, error) {
	return &pb.SnapshotNameResponse{}, toStatus(m.deleteSnapshot(req))
}

// CloneSnapshot implements pb.MasterServer.
func (m *Master) CloneSnapshot(ctx context.Context, req *pb.CloneSnapshotRequest) (*pb.CloneSnapshotResponse, error) {
	return &pb.CloneSnapshotResponse{}, toStatus(m.cloneSnapshot(ctx, req))
}

// ArchiveClusterWAL implements pb.MasterServer.
func (m *Master) ArchiveClusterWAL(ctx context.Context, _ *pb.ArchiveClusterWALRequest) (*pb.ArchiveClusterWALResponse, error) {
	resp, err := m.archiveClusterWAL(ctx)
	return resp, toStatus(err)
}

// RestoreSnapshot implements pb.MasterServer.
func (m *Master) RestoreSnapshot(ctx context.Context, req *pb.SnapshotNameRequest) (*pb.SnapshotNameResponse, error) {
	return &pb.SnapshotNameResponse{}, toStatus(m.restoreSnapshot(ctx, req))
}

// ExportSnapshot implements pb.MasterServer.
func (m *Master) ExportSnapshot(_ context.Context, req *pb.CopySnapshotRequest) (*pb.CopySnapshotResponse, error) {
	resp, err := m.copySnapshot(req, true)
	return resp, toStatus(err)
}

// ImportSnapshot implements pb.MasterServer.
func (m *Master) ImportSnapshot(_ context.Context, req *pb.CopySnapshotRequest) (*pb.CopySnapshotResponse, error) {
	resp, err := m.copySnapshot(req, false)
	return resp, toStatus(err)
}

// DeleteBackup implements pb.MasterServer.
func (m *Master) DeleteBackup(ctx context.Context, req *pb.SnapshotNameRequest) (*pb.SnapshotNameResponse, error) {
	return &pb.SnapshotNameResponse{}, toStatus(m.deleteBackup(ctx, req))
}

// maxExternalAddresses bounds SetExternalAddresses's map: one entry per master and region server.
const maxExternalAddresses = 10000

// SetExternalAddresses implements pb.MasterServer: the map is kept in the catalog's config row, so
// the next active master has it, and handed to standbys with their reports.
func (m *Master) SetExternalAddresses(_ context.Context, req *pb.SetExternalAddressesRequest) (*pb.SetExternalAddressesResponse, error) {
	addrs := req.GetAddresses()
	if len(addrs) > maxExternalAddresses {
		return nil, toStatus(errInvalid("SetExternalAddresses: %d addresses, at most %d", len(addrs), maxExternalAddresses))
	}
	for k, v := range addrs {
		for _, a := range []string{k, v} {
			if err := checkHostPort(a); err != nil {
				return nil, toStatus(errInvalid("SetExternalAddresses: %q -> %q: %v", k, v, err))
			}
		}
	}
	if err := m.lock(); err != nil {
		return nil, err
	}
	defer m.mu.Unlock()
	nc := proto.CloneOf(m.st.config)
	if nc == nil {
		nc = &pb.CatalogConfig{}
	}
	nc.ExternalAddresses = maps.Clone(addrs)
	if !proto.Equal(nc, m.st.config) {
		var b batch
		b.putConfig(nc)
		if err := m.commit(&b); err != nil {
			return nil, toStatus(err)
		}
		m.log.Info("external addresses changed", "servers", len(addrs))
	}
	return &pb.SetExternalAddressesResponse{}, nil
}

// GetExternalAddresses implements pb.MasterServer. Every master answers: the active one from its
// catalog, a standby with what the active one last told it (NOT_ACTIVE_MASTER until it has heard).
func (m *Master) GetExternalAddresses(context.Context, *pb.GetExternalAddressesRequest) (*pb.GetExternalAddressesResponse, error) {
	if m.lock() == nil {
		ext := maps.Clone(m.st.config.GetExternalAddresses())
		m.mu.Unlock()
		return &pb.GetExternalAddressesResponse{Addresses: ext}, nil
	}
	if ext := m.standbyExternal.Load(); ext != nil && m.status.Load() == stateStandby {
		return &pb.GetExternalAddressesResponse{Addresses: maps.Clone(*ext)}, nil
	}
	return nil, m.notActive()
}

// checkHostPort accepts host:port with a host and a port in 1..65535.
func checkHostPort(a string) error {
	if len(a) > 512 {
		return errors.New("longer than 512 bytes")
	}
	host, port, err := net.SplitHostPort(a)
	if err != nil {
		return err
	}
	if n, err := strconv.Atoi(port); host == "" || err != nil || n < 1 || n > 65535 {
		return errors.New("want host:port with a port in 1..65535")
	}
	return nil
}
