package regionserver

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/connectivity"

	"github.com/cellstore/cellstore/engine/access"
	pb "github.com/cellstore/cellstore/engine/api/cellstore/v1"
	"github.com/cellstore/cellstore/engine/layout"
	"github.com/cellstore/cellstore/engine/lease"
	"github.com/cellstore/cellstore/engine/quota"
	"github.com/cellstore/cellstore/engine/region"
	"github.com/cellstore/cellstore/engine/security"
	"github.com/cellstore/cellstore/engine/wal"
)

// callMaster runs fn against the active master, trying every configured master and following
// NOT_ACTIVE_MASTER redirects.
func (s *Server) callMaster(ctx context.Context, fn func(context.Context, pb.MasterClient) error) error {
	var lastErr error
	var unreached []string // "address: state" of the tries whose connection was not ready, for the error
	tried := 0
	failed := map[string]bool{} // masters this call could not reach or that were not active
	start := time.Now()
	for tries := len(s.cfg.Masters) + 3; tried < tries; {
		s.mmu.Lock()
		if s.masterConn == nil {
			addr := s.masterAddr
			if addr == "" {
				// The next configured master this call has not failed at (in a handover, the
				// one that stopped costs masterConnectWait a try while the lease runs down).
				n := len(s.cfg.Masters)
				addr = s.cfg.Masters[tried%n]
				for i := range n {
					if a := s.cfg.Masters[(tried+i)%n]; !failed[a] {
						addr = a
						break
					}
				}
			}
			conn, err := security.Dial(addr, s.cfg.creds())
			if err != nil {
				s.mmu.Unlock()
				return fmt.Errorf("regionserver: dialing master %s: %w", addr, err)
			}
			s.masterConn, s.masterAddr = conn, addr
		}
		conn, addr := s.masterConn, s.masterAddr
		s.mmu.Unlock()
		var lookup *addrLookup // what the name resolves to now, looked up beside a slow wait to connect
		if conn.GetState() != connectivity.Ready {
			lookup = startLookup(addr, lookupAfter)
		}
		var err error
		ok := connected(ctx, conn, masterConnectWait)
		lookup.stop()
		if !ok {
			// A master that is gone (a pod deleted in a rolling restart, its name not yet on
			// the new pod) is skipped quickly instead of spending the caller's whole deadline
			// on the dial; a slow answer from a connected master is waited for.
			// The address and the connection's state say which master and why: a dead address
			// that refuses fails fast (TRANSIENT_FAILURE), one that drops the connection attempt
			// or a slow handshake stays CONNECTING.
			// What the name resolves to (looked up once a try has waited lookupAfter) tells a
			// dead address from a name that did not resolve in time.
			unreached = append(unreached, fmt.Sprintf("%s: %s (%s)", addr, conn.GetState(), lookup))
			err = fmt.Errorf("regionserver: no connection to a master (each try waits at most %v; tried %s)", masterConnectWait, strings.Join(unreached, ", "))
		} else {
			cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			err = fn(cctx, pb.NewMasterClient(conn))
			cancel()
		}
		if err == nil {
			return nil
		}
		lastErr = err
		tried++
		d, ok := pb.DetailOf(err)
		if ok && d.GetCode() != pb.ErrorCode_ERROR_CODE_NOT_ACTIVE_MASTER {
			return err // a real answer: the connection stays
		}
		if ok && d.GetNewMaster() == addr {
			// Elected and loading the catalog: ask it again on this connection after its pause,
			// rather than try the other masters (a stopped one costs masterConnectWait) while
			// this server's lease runs down.
			select {
			case <-ctx.Done():
				return lastErr
			case <-time.After(time.Duration(max(d.GetRetryAfterMs(), 10)) * time.Millisecond):
			}
			continue
		}
		failed[addr] = true
		s.mmu.Lock()
		if s.masterConn == conn {
			s.masterConn.Close()
			s.masterConn = nil
			if ok && d.GetCode() == pb.ErrorCode_ERROR_CODE_NOT_ACTIVE_MASTER && d.GetNewMaster() != "" && !failed[d.GetNewMaster()] {
				s.masterAddr = d.GetNewMaster()
			} else {
				s.masterAddr = "" // try the next configured master
			}
		}
		next := s.masterAddr
		s.mmu.Unlock()
		if !ok && tried < tries && next == "" && allFailed(s.cfg.Masters, failed) {
			// No master could be reached and the next try goes to one that already failed: a
			// refused connection ends a try at once (all masters restarting), so the call waits
			// until its unreachable tries have taken masterConnectWait each, as long as when the
			// attempts hang, rather than give up within milliseconds.
			select {
			case <-ctx.Done():
			case <-time.After(time.Until(start.Add(time.Duration(len(unreached)) * masterConnectWait))):
			}
		}
		if ctx.Err() != nil {
			return lastErr
		}
	}
	return lastErr
}

// allFailed says whether every one of masters is in failed.
func allFailed(masters []string, failed map[string]bool) bool {
	for _, m := range masters {
		if !failed[m] {
			return false
		}
	}
	return true
}

// addrLookup is a DNS lookup of a master's host name made while a try waits for its connection,
// for the error text of a try that found none.
type addrLookup struct {
	host  string
	what  string // an address that is not looked up: what it is
	timer *time.Timer
	mu    sync.Mutex
	start time.Time // zero: not started
	never bool      // stopped before it started
	done  bool
	addrs []string
	err   error
	took  time.Duration
}

// lookupAfter is how long a try waits for its connection before it also looks the master's name
// up: most connections are made sooner, and the dial has looked the name up itself (a second
// query each time would only be for an error text that is then not written).
const lookupAfter = 100 * time.Millisecond

// startLookup looks up addr's host in the background once after has passed, unless stop is called
// first. An IP address or a unix socket needs no lookup.
func startLookup(addr string, after time.Duration) *addrLookup {
	if security.UnixSocket(addr) {
		return &addrLookup{what: "a unix socket"}
	}
	host, _, err := net.SplitHostPort(addr)
	switch {
	case err != nil:
		return &addrLookup{what: "not host:port"}
	case net.ParseIP(host) != nil:
		return &addrLookup{what: "an IP address"}
	}
	l := &addrLookup{host: host}
	l.timer = time.AfterFunc(after, l.run)
	return l
}

func (l *addrLookup) run() {
	l.mu.Lock()
	l.start = time.Now()
	l.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	addrs, err := net.DefaultResolver.LookupHost(ctx, l.host)
	l.mu.Lock()
	l.done, l.addrs, l.err, l.took = true, addrs, err, time.Since(l.start)
	l.mu.Unlock()
}

// stop keeps a lookup that has not started from starting; one under way runs on (its result
// may still go into an error text).
func (l *addrLookup) stop() {
	if l != nil && l.timer != nil && l.timer.Stop() {
		l.mu.Lock()
		l.never = true
		l.mu.Unlock()
	}
}

func (l *addrLookup) String() string {
	if l == nil {
		return "connected when the try began"
	}
	if l.what != "" {
		return l.what
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	switch {
	case l.never:
		return "its name not looked up: the try ended first"
	case !l.done && l.start.IsZero():
		return "its name being looked up"
	case !l.done:
		return fmt.Sprintf("its name not resolved after %v", time.Since(l.start).Round(time.Millisecond))
	case l.err != nil:
		return fmt.Sprintf("resolving failed after %v: %v", l.took.Round(time.Millisecond), l.err)
	}
	return fmt.Sprintf("resolved to %s in %v", strings.Join(l.addrs, " "), l.took.Round(time.Millisecond))
}

// masterConnectWait is how long a call waits for its connection to a master before it tries
// another one.
const masterConnectWait = 500 * time.Millisecond

// connected waits up to d for conn to be ready (connecting it if idle). A failed attempt (every
// address refused: a master that stopped) ends the wait at once, so that the call tries the next
// master instead of waiting out d for the reconnect's backoff.
func connected(ctx context.Context, conn *grpc.ClientConn, d time.Duration) bool {
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	for {
		st := conn.GetState()
		switch st {
		case connectivity.Ready:
			return true
		case connectivity.Idle:
			conn.Connect()
		case connectivity.Shutdown, connectivity.TransientFailure:
			return false
		}
		if !conn.WaitForStateChange(ctx, st) {
			return false
		}
	}
}

// register registers this process with the master, retrying until ctx ends.
func (s *Server) register(ctx context.Context) error {
	for attempt := 0; ; attempt++ {
		sent := time.Now()
		var resp *pb.RegisterServerResponse
		err := s.callMaster(ctx, func(ctx context.Context, m pb.MasterClient) error {
			var err error
			resp, err = m.RegisterServer(ctx, &pb.RegisterServerRequest{Server: s.serverName(), Zone: s.cfg.Zone,
				AdminAddress: s.advertisedAdmin(), HttpAddress: s.advertisedHTTP(), Version: s.cfg.Version, Features: layout.Features})
			return err
		})
		if err == nil {
			lc := lease.Default
			if l := time.Duration(resp.GetLeaseMs()) * time.Millisecond; l > 0 {
				lc.Lease = l
			}
			if hb := time.Duration(resp.GetHeartbeatIntervalMs()) * time.Millisecond; hb > 0 {
				lc.HeartbeatInterval = hb
			}
			if ms, err := strconv.ParseInt(resp.GetClusterConfig()[layout.ConfigSelfFenceMarginMS], 10, 64); err == nil && ms > 0 {
				lc.SelfFenceMargin = time.Duration(ms) * time.Millisecond // the master's --self-fence-margin
			}
			if lc.SelfFenceMargin >= lc.Lease {
				lc.SelfFenceMargin = lc.Lease / 4
			}
			f := lease.NewFence(lc, nil)
			f.Renewed(sent)
			s.fence.Store(f)
			s.hbEvery.Store(int64(lc.HeartbeatInterval))
			s.applyClusterConfig(resp.GetClusterConfig())
			a := resp.GetMasterHttpAddress()
			s.masterHTTP.Store(&a)
			s.registered.Store(true)
			go s.ensureACL() // the labels, before a region opens if the master is quick
			return nil
		}
		s.log.Warn("registering with the master failed; retrying", "error", err, "attempt", attempt)
		select {
		case <-ctx.Done():
			return fmt.Errorf("regionserver: registering with the master: %w (last error: %v)", ctx.Err(), err)
		case <-s.quit:
			return errors.New("regionserver: stopped while registering")
		case <-time.After(min(time.Duration(attempt+1)*200*time.Millisecond, 2*time.Second)):
		}
	}
}

func (s *Server) advertisedAdmin() string {
	_, port, _ := splitHostPort(s.adminLis.Addr().String())
	return joinHostPort(s.serverName().GetHost(), port)
}

// advertisedHTTP is the HTTP endpoint's address under the advertised host ("" without one).
func (s *Server) advertisedHTTP() string {
	if s.tel == nil || s.tel.Addr() == "" {
		return ""
	}
	_, port, _ := splitHostPort(s.tel.Addr())
	return joinHostPort(s.serverName().GetHost(), port)
}

func (s *Server) applyClusterConfig(cc map[string]string) {
	if v, ok := cc[layout.ConfigQuotasEnabled]; ok {
		s.quotasEnabled.Store(v != "false")
		s.limiters.SetEnabled(v != "false")
	}
}

// heartbeatRetry is the first pause after a failed heartbeat, maxHeartbeatRetry the longest: a
// master handover takes seconds, and every retry a server skips keeps its fence closer to closing.
const (
	heartbeatRetry    = 100 * time.Millisecond
	maxHeartbeatRetry = 250 * time.Millisecond
)

// heartbeatLoop renews the lease until the server stops. A failed heartbeat is retried after
// 100 ms, then every 250 ms (at most the heartbeat interval): a master handover (the standby takes over within
// a few hundred milliseconds) then renews the lease long before the fence would close and stop
// this server's reads and writes.
func (s *Server) heartbeatLoop() {
	defer s.hbWG.Done()
	failures := 0
	var failingSince time.Time // the first failure of the current run of failures
	lapsed := false            // the lease lapsed during the current run (logged once)
	noteLapse := func(stopping bool) {
		if f := s.fence.Load(); f != nil && !f.Open() && !lapsed && !stopping {
			// Reads and writes of primaries are refused from here until a master answers.
			s.log.Warn("lease lapsed: refusing reads and writes of primaries until a master answers a heartbeat",
				"failing_for", time.Since(failingSince).Round(time.Millisecond), "failures", failures)
			lapsed = true
		}
	}
	for {
		every := time.Duration(s.hbEvery.Load())
		if every <= 0 {
			every = time.Second
		}
		wait := every
		if failures > 0 {
			wait = min(every, heartbeatRetry<<min(failures-1, 10), maxHeartbeatRetry)
		}
		select {
		case <-s.hbQuit:
			return
		case <-time.After(wait):
		}
		stopping := s.stopping.Load()
		if failures > 0 {
			noteLapse(stopping) // before this attempt, which may be the one that succeeds
		}
		ctx, cancel := context.WithTimeout(context.Background(), every*2)
		resp, err := s.heartbeat(ctx, stopping)
		cancel()
		if err != nil {
			if failures == 0 {
				failingSince, lapsed = time.Now(), false
			}
			if failures == 0 || failures%10 == 0 {
				s.log.Warn("heartbeat failed; retrying", "error", err, "failures", failures+1)
			}
			noteLapse(stopping)
			failures++
			continue
		}
		if failures > 0 {
			s.log.Info("heartbeat answered again", "after_failures", failures,
				"failing_for", time.Since(failingSince).Round(time.Millisecond), "lease_lapsed", lapsed)
			failures = 0
		}
		if stopping {
			continue // the stop reports its regions itself; only the lease matters now
		}
		if resp.GetUnknownServer() || s.walFenced() {
			s.log.Error("the master does not know this process or its WAL directory was fenced: "+
				"dropping every region and registering again as a new process", "unknown_server", resp.GetUnknownServer())
			s.reincarnate()
			continue
		}
		if resp.GetQuotaVersion() != s.limiters.Version() {
			s.refreshQuotas()
		}
		s.limiters.SetShares(resp.GetQuotaShares())
		if resp.GetAclVersion() != s.acl.Load().Version() { // permissions with security on; labels always
			s.refreshACL()
		}
	}
}

// walFenced reports whether the master fenced this process's WAL: on a directory tree its
// directory was renamed away; on a bucket the object log's next number holds a fence marker (an
// error to find out counts as not fenced: the next heartbeat asks again).
func (s *Server) walFenced() bool {
	s.walMu.RLock()
	dir, w := s.walDir, s.wal
	s.walMu.RUnlock()
	if l, ok := w.(*wal.ObjectLog); ok {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		fenced, err := l.Fenced(ctx)
		if err != nil {
			s.log.Warn("cannot tell whether the WAL was fenced", "error", err)
		}
		return fenced
	}
	_, err := s.cfg.FS.Stat(dir)
	return err != nil
}

// heartbeat sends one heartbeat and renews the fence.
func (s *Server) heartbeat(ctx context.Context, stopping bool) (*pb.HeartbeatResponse, error) {
	sent := time.Now()
	load := s.load()
	var resp *pb.HeartbeatResponse
	err := s.callMaster(ctx, func(ctx context.Context, m pb.MasterClient) error {
		var err error
		resp, err = m.Heartbeat(ctx, &pb.HeartbeatRequest{Server: s.serverName(), Load: load, Stopping: stopping, Features: layout.Features,
			Version: s.cfg.Version})
		return err
	})
	if err != nil {
		return nil, err
	}
	if resp.GetUnknownServer() {
		if f := s.fence.Load(); f != nil {
			f.Close()
		}
		return resp, nil
	}
	if f := s.fence.Load(); f != nil {
		// The answering master's lease (a new active master may run another): taken before
		// the renewal, so a shorter one fences this server in time for that master's clock.
		if l := time.Duration(resp.GetLeaseMs()) * time.Millisecond; l > 0 {
			_, margin := f.Timing()
			f.Adopt(l, margin)
			// Heartbeats at least twice within what the fence gives each one, or it closes
			// between them (the interval came with the registration, for its master's lease).
			lease, margin := f.Timing()
			if most := (lease - margin) / 2; most > 0 && time.Duration(s.hbEvery.Load()) > most {
				s.hbEvery.Store(int64(most))
			}
		}
		f.Renewed(sent)
	}
	s.applyClusterConfig(resp.GetClusterConfig())
	return resp, nil
}

// load is the heartbeat's load report.
func (s *Server) load() *pb.ServerLoad {
	l := &pb.ServerLoad{HugepageMode: s.cfg.Hugepages.String(), QuotaDemand: s.limiters.Demand()}
	s.regions.Range(func(_, v any) bool {
		or := v.(*onlineRegion)
		r := or.r.Load()
		if r == nil || or.state.Load() != stateOpen {
			return true
		}
		ms := r.MemstoreStats()
		met := r.Metrics()
		rl := &pb.RegionLoad{Region: or.name, MemstoreBytes: ms.DataBytes, StoreFileBytes: met.StoreFileBytes.Load(),
			StoreFiles: int32(met.StoreFiles.Load()), ReadRequests: met.ReadRequests.Load(), WriteRequests: met.WriteRequests.Load()}
		if or.info.GetReplicaId() == 0 {
			rl.MaxFlushedSeq = r.FlushedSeq()
			rl.HasReferences = r.HasReferences()
		}
		l.MemstoreBytes += ms.DataBytes
		l.Regions = append(l.Regions, rl)
		return true
	})
	l.OffheapBytes = s.budget.Used()
	l.RequestsPerSecond = s.m.rate()
	return l
}

// reincarnate drops every region without flushing (their edits stay in the old WAL, which the
// master splits) and registers again with a new start code and a new WAL directory.
func (s *Server) reincarnate() {
	s.reopenMu.Lock()
	defer s.reopenMu.Unlock()
	s.dropEverything()
	if err := s.openWAL(); err != nil {
		s.log.Error("cannot open a new WAL; stopping", "error", err)
		go s.Abort()
		return
	}
	s.registerAgain()
}

// dropEverything stops acknowledging writes and drops every region and scanner without a flush.
func (s *Server) dropEverything() {
	// Orders for this process are answered "wrong process" from here on, even before the new
	// start code is installed: "not serving" would read as "closed", and the master would move
	// or split a region whose unflushed edits are only in the WAL being left behind.
	s.droppedCode.Store(s.serverName().GetStartCode())
	s.registered.Store(false)
	if f := s.fence.Load(); f != nil {
		f.Close()
	}
	s.closeScanners()
	s.forEachRegion(func(or *onlineRegion, r *region.Region) { r.Abort() })
	_ = s.currentWAL().Close()
}

// walWatch recovers from a WAL that cannot be written (disk or object store full, I/O errors).
// Its writes already fail (WRITES_BLOCKED, retryable) and /readyz says why; once storage takes
// a new WAL, the server drops its regions — their memstores may hold edits whose WAL records did
// not make it, never acknowledged — and registers again under a new start code, so the master
// recovers the old log (every acknowledged edit is in it) and reassigns the regions. HBase's region
// server aborts in this case and waits for a restart; this one recovers by itself.
func (s *Server) walWatch() {
	s.every(100*time.Millisecond, func() {
		if err := s.currentWAL().Err(); err != nil && !s.stopping.Load() {
			s.recoverWAL(err)
		}
	})
}

func (s *Server) recoverWAL(cause error) {
	s.m.walFailures.Add(1)
	s.log.Error("the WAL cannot be written: writes are refused until storage takes a new WAL; "+
		"then this server drops its regions for the master to recover from the old WAL, and registers again", "error", cause)
	delay := 200 * time.Millisecond
	for !s.stopping.Load() {
		err := s.reincarnateOnNewWAL()
		if err == nil {
			s.log.Info("storage takes a new WAL again: registered as a new process; the master reassigns the regions")
			return
		}
		s.log.Warn("storage still refuses a new WAL; retrying", "error", err, "retry_in", delay)
		select {
		case <-s.quit:
			return
		case <-time.After(delay):
		}
		delay = min(2*delay, 5*time.Second)
	}
}

// reincarnateOnNewWAL is reincarnate that first opens the new WAL, and does nothing while that
// fails (storage still full).
func (s *Server) reincarnateOnNewWAL() error {
	s.reopenMu.Lock()
	defer s.reopenMu.Unlock()
	w, dir, code, err := s.newWAL()
	if err != nil {
		return err
	}
	s.dropEverything()
	s.installWAL(w, dir, code)
	s.registerAgain()
	return nil
}

// registerAgain registers the new process with the master (under reopenMu).
func (s *Server) registerAgain() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := s.register(ctx); err != nil {
		s.log.Error("cannot register again; stopping", "error", err)
		go s.Abort()
	}
}

// refreshACL loads the permissions the master holds (the version its heartbeat announced).
func (s *Server) refreshACL() { s.fetchACL(true) }

// fetchACL is refreshACL; limited says the fetch counts for recheck's one-a-second limit (the
// first load, ensureACL's, does not: a request denied right after a grant must still fetch).
func (s *Server) fetchACL(limited bool) {
	s.aclMu.Lock()
	defer s.aclMu.Unlock()
	if limited {
		s.aclFetched = time.Now()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var resp *pb.GetUserPermissionsResponse
	if err := s.callMaster(ctx, func(ctx context.Context, m pb.MasterClient) error {
		var err error
		resp, err = m.GetUserPermissions(ctx, &pb.GetUserPermissionsRequest{})
		return err
	}); err != nil {
		s.log.Warn("fetching the permissions failed; the next heartbeat tries again", "error", err)
		return
	}
	labels := access.NewLabels(resp.GetLabels(), resp.GetAuths())
	s.acl.Store(access.NewChecker(resp.GetVersion(), resp.GetPermissions(), s.cfg.Superusers).WithLabels(labels))
	s.aclLoaded.Store(true)
	s.regions.Range(func(_, v any) bool {
		if r := v.(*onlineRegion).r.Load(); r != nil {
			r.SetLabelsInUse(labels.Defined())
		}
		return true
	})
	s.log.Info("permissions updated", "version", resp.GetVersion(), "grants", len(resp.GetPermissions()), "labels", len(resp.GetLabels()))
}

// refreshQuotas loads the quotas and this server's share of them.
func (s *Server) refreshQuotas() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var qs *pb.ListQuotasResponse
	if err := s.callMaster(ctx, func(ctx context.Context, m pb.MasterClient) error {
		var err error
		qs, err = m.ListQuotas(ctx, &pb.ListQuotasRequest{})
		return err
	}); err != nil {
		s.log.Warn("listing quotas failed", "error", err)
		return
	}
	servers := 1
	if len(qs.GetQuotas()) > 0 {
		var st *pb.ClusterStatusResponse
		if err := s.callMaster(ctx, func(ctx context.Context, m pb.MasterClient) error {
			var err error
			st, err = m.ClusterStatus(ctx, &pb.ClusterStatusRequest{})
			return err
		}); err == nil {
			n := 0
			for _, sv := range st.GetServers() {
				if sv.GetLive() {
					n++
				}
			}
			servers = max(n, 1)
		}
	}
	tableShare := map[string]float64{}
	for _, q := range qs.GetQuotas() {
		t := q.GetTable()
		if t == nil {
			continue
		}
		key := layout.TableKey(t)
		if _, ok := tableShare[key]; ok {
			continue
		}
		tableShare[key] = 1 / float64(servers)
		var locs *pb.GetTableRegionsResponse
		if err := s.callMaster(ctx, func(ctx context.Context, m pb.MasterClient) error {
			var err error
			locs, err = m.GetTableRegions(ctx, &pb.TableRequest{Table: t})
			return err
		}); err == nil && len(locs.GetLocations()) > 0 {
			mine := 0
			for _, l := range locs.GetLocations() {
				if layout.ServerName(l.GetServer()) == s.nameStr {
					mine++
				}
			}
			tableShare[key] = float64(mine) / float64(len(locs.GetLocations()))
		}
	}
	share := func(kind, name string) float64 {
		if kind == quota.SubjectTable {
			if f, ok := tableShare[name]; ok {
				return f
			}
		}
		return 1 / float64(servers)
	}
	if err := s.limiters.Update(qs.GetVersion(), s.quotasEnabled.Load(), qs.GetQuotas(), share); err != nil {
		s.log.Warn("applying quotas failed", "error", err)
	}
}

// report sends a region transition to the master, retrying transport failures until the server
// stops. It returns the master's typed answer, if any.
func (s *Server) report(ctx context.Context, info *pb.RegionInfo, tr pb.RegionTransition, openSeq, procID uint64, msg string) error {
	for attempt := 0; ; attempt++ {
		err := s.callMaster(ctx, func(ctx context.Context, m pb.MasterClient) error {
			_, err := m.ReportRegionTransition(ctx, &pb.ReportRegionTransitionRequest{Server: s.serverName(), Region: info,
				Transition: tr, OpenSeq: openSeq, Error: msg, ProcedureId: procID})
			return err
		})
		if err == nil {
			return nil
		}
		if d, ok := pb.DetailOf(err); ok && d.GetCode() != pb.ErrorCode_ERROR_CODE_NOT_ACTIVE_MASTER {
			if d.GetCode() == pb.ErrorCode_ERROR_CODE_LEASE_EXPIRED {
				go s.reincarnate()
			}
			return d
		}
		s.log.Warn("reporting a region transition failed; retrying", "region", info.GetName(), "transition", tr, "error", err)
		select {
		case <-ctx.Done():
			return err
		case <-time.After(min(time.Duration(attempt+1)*200*time.Millisecond, 2*time.Second)):
		}
	}
}
