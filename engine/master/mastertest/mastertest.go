// Package mastertest runs masters in-process on real sockets and fake region servers that speak
// the real Master and Admin gRPC APIs, for tests of the master and of what talks to it.
//
// A FakeServer is a stand-in for the region server (which does not exist yet): it registers,
// heartbeats, serves the Admin service (recording OpenRegion and CloseRegion calls and reporting
// OPENED, FAILED_OPEN and CLOSED back through ReportRegionTransition, as a region server must),
// and a minimal data path that answers GETs for the regions it holds. Switches make it fail or hang
// opens, or die. The region server's author can run the same scenarios against real servers by
// replacing StartFakeServer.
package mastertest

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"

	pb "github.com/cellstore/cellstore/engine/api/cellstore/v1"
	"github.com/cellstore/cellstore/engine/layout"
	"github.com/cellstore/cellstore/engine/master"
	"github.com/cellstore/cellstore/engine/rpc"
	"github.com/cellstore/cellstore/engine/security"
)

// Master is a master serving gRPC on a loopback socket.
type Master struct {
	*master.Master
	// Addr is the gRPC address (also the master's Config.Address).
	Addr string
	GRPC *grpc.Server
}

// StartMaster starts a master on 127.0.0.1 (cfg.Address, when set, is the address to listen on,
// else a free port). ctx ends it as Stop does.
func StartMaster(ctx context.Context, cfg master.Config) (*Master, error) {
	return StartElectedMaster(ctx, cfg, nil)
}

// StartElectedMaster is StartMaster with the elector made by elect from the master's address
// (its identity in the election); nil elect keeps cfg.Election.
func StartElectedMaster(ctx context.Context, cfg master.Config, elect func(addr string) master.Elector) (*Master, error) {
	listen := cfg.Address
	if listen == "" {
		listen = "127.0.0.1:0"
	}
	lis, err := net.Listen("tcp", listen)
	if err != nil {
		return nil, err
	}
	cfg.Address = lis.Addr().String()
	if elect != nil {
		cfg.Election = elect(cfg.Address)
	}
	if ne, ok := cfg.Election.(master.NoElection); ok && ne.Identity == "" {
		cfg.Election = master.NoElection{Identity: cfg.Address}
	}
	m, err := master.New(cfg)
	if err != nil {
		lis.Close()
		return nil, err
	}
	s := m.NewGRPCServer()
	go func() { _ = s.Serve(lis) }()
	if err := m.Start(ctx); err != nil {
		s.Stop()
		return nil, err
	}
	return &Master{Master: m, Addr: cfg.Address, GRPC: s}, nil
}

// Close stops the master and its gRPC server.
func (m *Master) Close() {
	_ = m.Stop()
	m.GRPC.Stop()
}

// WaitActive polls until the master is active.
func (m *Master) WaitActive(timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for !m.Active() {
		if time.Now().After(deadline) {
			return fmt.Errorf("master %s not active after %v (ready: %v)", m.Addr, timeout, m.Ready())
		}
		time.Sleep(5 * time.Millisecond)
	}
	return nil
}

// FakeServerOptions configure a FakeServer.
type FakeServerOptions struct {
	// Masters are the masters' gRPC addresses (SetMasters changes them).
	Masters []string
	// Zone reported at registration.
	Zone string
	// DataAddr is the address to listen on for the data path, which is the server's name
	// (default 127.0.0.1:0, a free port). Give a dead server's address to restart it.
	DataAddr string
	// HeartbeatInterval overrides the master's.
	HeartbeatInterval time.Duration
	// Features announced at registration and with each heartbeat; nil: this build's
	// (layout.Features), empty: none (a server of an earlier release).
	Features []string
	// Version is the release version announced at registration and with each heartbeat.
	Version string
	// Logger (default: discard).
	Logger *slog.Logger
}

// Call is an Open/CloseRegion order the fake received.
type Call struct {
	Region      string
	ProcedureID uint64
	Open        bool
	Flush       bool
	Destination string
	// Handoff: a move's close that may leave its last edits in the manifest.
	Handoff bool
	At      time.Time
}

// Report is a transition report of the fake's and when the master answered it.
type Report struct {
	Region     string
	Transition pb.RegionTransition
	Err        error
	At         time.Time
}

// Get is a data-path GET the fake answered.
type Get struct {
	Region string
	Row    []byte
}

// FakeServer is a fake region server (see the package comment).
type FakeServer struct {
	pb.UnimplementedAdminServer
	opts     FakeServerOptions
	log      *slog.Logger
	dataLis  net.Listener
	adminLis net.Listener
	admin    *grpc.Server
	data     *rpc.Server
	name     *pb.ServerName
	stop     chan struct{}
	stopOnce sync.Once
	wg       sync.WaitGroup

	mu         sync.Mutex
	masters    []string
	active     int
	conns      map[string]*grpc.ClientConn
	startCode  int64
	regions    map[string]*pb.RegionInfo
	hung       map[string]*pb.OpenRegionRequest
	flushed    map[string]uint64
	bytes      map[string]int64 // store file bytes heartbeats report per region
	calls      []Call
	gets       []Get
	failOpens  bool
	hangOpens  bool
	openDelay  time.Duration // OpenRegion answers after this (SetOpenDelay)
	answered   []Report      // reports the master answered
	stopping   bool          // refuse opens as a stopping server does (SERVER_STOPPING)
	interval   time.Duration
	registered bool
	dead       bool
	paused     bool
	// Reregistrations counts "unknown server" answers that made it register again.
	reregistrations atomic.Int64
	heartbeats      atomic.Int64
}

var startCodes atomic.Int64

// newStartCode returns a start code (milliseconds, as a region server uses) never returned
// before in this process.
func newStartCode() int64 {
	for {
		prev := startCodes.Load()
		next := max(prev+1, time.Now().UnixMilli())
		if startCodes.CompareAndSwap(prev, next) {
			return next
		}
	}
}

// StartFakeServer starts a fake region server and registers it with the masters.
func StartFakeServer(opts FakeServerOptions) (*FakeServer, error) {
	if opts.DataAddr == "" {
		opts.DataAddr = "127.0.0.1:0"
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	dataLis, err := net.Listen("tcp", opts.DataAddr)
	if err != nil {
		return nil, err
	}
	adminLis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		dataLis.Close()
		return nil, err
	}
	host, port, _ := net.SplitHostPort(dataLis.Addr().String())
	p, _ := strconv.Atoi(port)
	s := &FakeServer{
		opts: opts, log: opts.Logger, dataLis: dataLis, adminLis: adminLis,
		name: &pb.ServerName{Host: host, Port: int32(p)}, stop: make(chan struct{}),
		masters: slices.Clone(opts.Masters), conns: map[string]*grpc.ClientConn{},
		startCode: newStartCode(), regions: map[string]*pb.RegionInfo{}, hung: map[string]*pb.OpenRegionRequest{},
		flushed: map[string]uint64{}, bytes: map[string]int64{}, interval: opts.HeartbeatInterval,
	}
	s.log = s.log.With("fake_server", s.Name())
	s.admin = grpc.NewServer()
	pb.RegisterAdminServer(s.admin, s)
	go func() { _ = s.admin.Serve(adminLis) }()
	s.data = rpc.NewServer(map[uint32]rpc.Handler{uint32(pb.Method_METHOD_GET): s.get}, rpc.ServerOptions{Logger: s.log})
	go func() { _ = s.data.Serve(dataLis) }()
	s.wg.Add(1)
	go s.run()
	return s, nil
}

// Name is the server's identity, the host:port of its data path.
func (s *FakeServer) Name() string { return layout.ServerName(s.name) }

// AdminAddr is the address of its Admin service.
func (s *FakeServer) AdminAddr() string { return s.adminLis.Addr().String() }

// features is what the fake announces (FakeServerOptions.Features).
func (s *FakeServer) features() []string {
	if s.opts.Features == nil {
		return layout.Features
	}
	return s.opts.Features
}

// StartCode is the current process's start code.
func (s *FakeServer) StartCode() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.startCode
}

// Registered reports whether the server registered with the active master.
func (s *FakeServer) Registered() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.registered
}

// Heartbeats counts accepted heartbeats.
func (s *FakeServer) Heartbeats() int64 { return s.heartbeats.Load() }

// Reregistrations counts the times the master answered "unknown server" and the fake registered
// again as a new process.
func (s *FakeServer) Reregistrations() int64 { return s.reregistrations.Load() }

// SetMasters replaces the master addresses.
func (s *FakeServer) SetMasters(addrs ...string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.masters, s.active = slices.Clone(addrs), 0
}

// Regions returns the regions it serves, sorted.
func (s *FakeServer) Regions() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]string, 0, len(s.regions))
	for r := range s.regions {
		out = append(out, r)
	}
	slices.Sort(out)
	return out
}

// RegionInfos returns the infos of the regions it serves.
func (s *FakeServer) RegionInfos() []*pb.RegionInfo {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]*pb.RegionInfo, 0, len(s.regions))
	for _, r := range s.regions {
		out = append(out, proto.CloneOf(r))
	}
	slices.SortFunc(out, func(a, b *pb.RegionInfo) int { return compare(a.GetName(), b.GetName()) })
	return out
}

func compare(a, b string) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// Calls returns the Open/CloseRegion orders received, in order.
func (s *FakeServer) Calls() []Call {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.calls)
}

// Gets returns the data-path GETs answered.
func (s *FakeServer) Gets() []Get {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.gets)
}

// Hung returns the regions whose open hangs.
func (s *FakeServer) Hung() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]string, 0, len(s.hung))
	for r := range s.hung {
		out = append(out, r)
	}
	slices.Sort(out)
	return out
}

// SetFailOpens makes every open fail (FAILED_OPEN reports).
func (s *FakeServer) SetFailOpens(on bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.failOpens = on
}

// SetRefuseOpensStopping makes opens fail as a stopping region server's do (SERVER_STOPPING),
// before any heartbeat says it is stopping.
func (s *FakeServer) SetRefuseOpensStopping(on bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.stopping = on
}

// SetOpenDelay makes OpenRegion answer d after the order arrived (a slow network or server);
// the open goes on as usual after the answer.
func (s *FakeServer) SetOpenDelay(d time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.openDelay = d
}

// Reports returns the reports the master answered, in order.
func (s *FakeServer) Reports() []Report {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.answered)
}

// SetHangOpens makes opens hang: accepted, never reported until ReleaseHung.
func (s *FakeServer) SetHangOpens(on bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.hangOpens = on
}

// ReleaseHung opens the hung regions and reports them.
func (s *FakeServer) ReleaseHung() {
	s.mu.Lock()
	hung := s.hung
	s.hung = map[string]*pb.OpenRegionRequest{}
	s.mu.Unlock()
	for _, req := range hung {
		s.opened(req)
	}
}

// ReleaseHungAtOnce opens the hung regions and reports them all at once, as a region server
// whose opens end together does; it returns when every report is answered.
func (s *FakeServer) ReleaseHungAtOnce() {
	s.mu.Lock()
	hung := s.hung
	s.hung = map[string]*pb.OpenRegionRequest{}
	s.mu.Unlock()
	var wg sync.WaitGroup
	for _, req := range hung {
		wg.Go(func() { s.opened(req) })
	}
	wg.Wait()
}

// SetFlushedSeq sets the max flushed sequence id heartbeats report for a region.
func (s *FakeServer) SetFlushedSeq(region string, seq uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.flushed[region] = seq
}

// SetRegionBytes sets the store file bytes heartbeats report for a region (what the split and
// normalizer policies read).
func (s *FakeServer) SetRegionBytes(region string, n int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.bytes[region] = n
}

// PauseHeartbeats stops (or resumes) heartbeats while the server goes on serving: a server cut
// off from the master, or stalled.
func (s *FakeServer) PauseHeartbeats(on bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.paused = on
}

// Kill simulates a crash: heartbeats stop and both listeners close, without a word to the
// master.
func (s *FakeServer) Kill() {
	s.stopOnce.Do(func() {
		s.mu.Lock()
		s.dead = true
		s.mu.Unlock()
		close(s.stop)
		s.admin.Stop()
		s.data.Close()
		s.dataLis.Close()
		s.wg.Wait()
		s.mu.Lock()
		for _, c := range s.conns {
			c.Close()
		}
		s.conns = map[string]*grpc.ClientConn{}
		s.mu.Unlock()
	})
}

// Stop is Kill (tests' cleanup).
func (s *FakeServer) Stop() { s.Kill() }

// masterCall calls fn on the active master, following NOT_ACTIVE_MASTER answers and trying the
// other masters when one does not answer.
func (s *FakeServer) masterCall(ctx context.Context, fn func(context.Context, pb.MasterClient) error) error {
	var last error
	for attempt := 0; ; attempt++ {
		s.mu.Lock()
		if len(s.masters) == 0 {
			s.mu.Unlock()
			return errors.New("mastertest: no master address")
		}
		addr := s.masters[s.active%len(s.masters)]
		cc := s.conns[addr]
		if cc == nil {
			var err error
			cc, err = security.Dial(addr, nil)
			if err != nil {
				s.mu.Unlock()
				return err
			}
			s.conns[addr] = cc
		}
		s.mu.Unlock()
		cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		err := fn(cctx, pb.NewMasterClient(cc))
		cancel()
		if err == nil {
			return nil
		}
		last = err
		d, typed := pb.DetailOf(err)
		if typed && d.GetCode() != pb.ErrorCode_ERROR_CODE_NOT_ACTIVE_MASTER {
			return err
		}
		s.mu.Lock()
		if typed && d.GetNewMaster() != "" {
			if i := slices.Index(s.masters, d.GetNewMaster()); i >= 0 {
				s.active = i
			} else {
				s.masters = append(s.masters, d.GetNewMaster())
				s.active = len(s.masters) - 1
			}
		} else {
			s.active++
		}
		s.mu.Unlock()
		if attempt >= 20 {
			return fmt.Errorf("mastertest: no active master answered: %w", last)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w (last error: %v)", ctx.Err(), last)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// run registers and heartbeats until the server is killed.
func (s *FakeServer) run() {
	defer s.wg.Done()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		<-s.stop
		cancel()
	}()
	for ctx.Err() == nil {
		s.mu.Lock()
		paused := s.paused
		s.mu.Unlock()
		if paused {
			if !sleep(ctx, 10*time.Millisecond) {
				return
			}
			continue
		}
		if !s.Registered() {
			if err := s.register(ctx); err != nil {
				s.log.Debug("register failed", "err", err)
				if !sleep(ctx, 50*time.Millisecond) {
					return
				}
				continue
			}
		}
		s.heartbeat(ctx)
		s.mu.Lock()
		iv := s.interval
		s.mu.Unlock()
		if !sleep(ctx, iv) {
			return
		}
	}
}

func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

func (s *FakeServer) register(ctx context.Context) error {
	s.mu.Lock()
	sn := proto.CloneOf(s.name)
	sn.StartCode = s.startCode
	s.mu.Unlock()
	var resp *pb.RegisterServerResponse
	err := s.masterCall(ctx, func(ctx context.Context, c pb.MasterClient) error {
		var err error
		resp, err = c.RegisterServer(ctx, &pb.RegisterServerRequest{Server: sn, Zone: s.opts.Zone, AdminAddress: s.AdminAddr(), Features: s.features(), Version: s.opts.Version})
		return err
	})
	if err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.registered = true
	if s.opts.HeartbeatInterval == 0 {
		s.interval = time.Duration(resp.GetHeartbeatIntervalMs()) * time.Millisecond
	}
	if s.interval <= 0 {
		s.interval = 100 * time.Millisecond
	}
	return nil
}

func (s *FakeServer) heartbeat(ctx context.Context) {
	s.mu.Lock()
	sn := proto.CloneOf(s.name)
	sn.StartCode = s.startCode
	load := &pb.ServerLoad{}
	for name := range s.regions {
		load.Regions = append(load.Regions, &pb.RegionLoad{Region: name, MaxFlushedSeq: s.flushed[name], StoreFileBytes: s.bytes[name]})
	}
	s.mu.Unlock()
	var resp *pb.HeartbeatResponse
	err := s.masterCall(ctx, func(ctx context.Context, c pb.MasterClient) error {
		var err error
		resp, err = c.Heartbeat(ctx, &pb.HeartbeatRequest{Server: sn, Load: load, Features: s.features(), Version: s.opts.Version})
		return err
	})
	if err != nil {
		s.log.Debug("heartbeat failed", "err", err)
		return
	}
	if resp.GetUnknownServer() {
		// The master does not know this process: stop serving and come back as a new one.
		s.reregistrations.Add(1)
		s.mu.Lock()
		s.registered = false
		s.regions = map[string]*pb.RegionInfo{}
		s.hung = map[string]*pb.OpenRegionRequest{}
		s.startCode = newStartCode()
		s.mu.Unlock()
		return
	}
	s.heartbeats.Add(1)
}

// report sends a transition report, retrying while the master cannot be reached.
func (s *FakeServer) report(req *pb.ReportRegionTransitionRequest) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	go func() {
		select {
		case <-s.stop:
			cancel()
		case <-ctx.Done():
		}
	}()
	for {
		s.mu.Lock()
		req.Server = proto.CloneOf(s.name)
		req.Server.StartCode = s.startCode
		s.mu.Unlock()
		err := s.masterCall(ctx, func(ctx context.Context, c pb.MasterClient) error {
			_, err := c.ReportRegionTransition(ctx, req)
			return err
		})
		s.mu.Lock()
		s.answered = append(s.answered, Report{Region: req.GetRegion().GetName(), Transition: req.GetTransition(), Err: err, At: time.Now()})
		s.mu.Unlock()
		// As a region server: a master that is not (or no longer) the active one is asked again,
		// until the next one answers.
		if d, typed := pb.DetailOf(err); err == nil || typed && d.GetCode() != pb.ErrorCode_ERROR_CODE_NOT_ACTIVE_MASTER {
			return err
		}
		if !sleep(ctx, 50*time.Millisecond) {
			return ctx.Err()
		}
	}
}

func (s *FakeServer) opened(req *pb.OpenRegionRequest) {
	name := req.GetRegion().GetName()
	s.mu.Lock()
	if s.dead {
		s.mu.Unlock()
		return
	}
	s.regions[name] = proto.CloneOf(req.GetRegion())
	s.mu.Unlock()
	err := s.report(&pb.ReportRegionTransitionRequest{Region: req.GetRegion(), Transition: pb.RegionTransition_REGION_TRANSITION_OPENED, OpenSeq: 1,
		ProcedureId: req.GetProcedureId()})
	if err != nil {
		// The master refused: the region must not be served here.
		s.log.Debug("OPENED report refused: closing the region", "region", name, "err", err)
		s.mu.Lock()
		delete(s.regions, name)
		s.mu.Unlock()
	}
}

// FlushRegion flushes nothing (the fake keeps no data) and answers like a region server: a region
// it does not hold is NOT_SERVING.
func (s *FakeServer) FlushRegion(_ context.Context, req *pb.RegionRequest) (*pb.RegionResponse, error) {
	if !slices.Contains(s.Regions(), req.GetRegion()) {
		return nil, (&pb.ErrorDetail{Code: pb.ErrorCode_ERROR_CODE_NOT_SERVING_REGION, Region: req.GetRegion(), Message: "not here"}).Status()
	}
	return &pb.RegionResponse{}, nil
}

// ArchiveWAL archives nothing (the fake keeps no log) and answers like a region server.
func (s *FakeServer) ArchiveWAL(context.Context, *pb.ArchiveWALRequest) (*pb.ArchiveWALResponse, error) {
	return &pb.ArchiveWALResponse{}, nil
}

// OpenRegion implements pb.AdminServer: it answers at once and reports later.
func (s *FakeServer) OpenRegion(_ context.Context, req *pb.OpenRegionRequest) (*pb.OpenRegionResponse, error) {
	name := req.GetRegion().GetName()
	if name == "" || req.GetTable() == nil {
		return nil, (&pb.ErrorDetail{Code: pb.ErrorCode_ERROR_CODE_INVALID_ARGUMENT, Message: "OpenRegion without a region name or table"}).Status()
	}
	s.mu.Lock()
	s.calls = append(s.calls, Call{Region: name, ProcedureID: req.GetProcedureId(), Open: true, At: time.Now()})
	if d := s.wrongProcessLocked(req.GetServerStartCode()); d != nil {
		s.mu.Unlock()
		return nil, d.Status()
	}
	if s.stopping {
		s.mu.Unlock()
		return nil, (&pb.ErrorDetail{Code: pb.ErrorCode_ERROR_CODE_SERVER_STOPPING, Message: "region server is stopping", Retryable: true}).Status()
	}
	fail, hang, delay := s.failOpens, s.hangOpens, s.openDelay
	_, open := s.regions[name]
	if hang && !open {
		s.hung[name] = proto.CloneOf(req)
	}
	s.mu.Unlock()
	if delay > 0 {
		time.Sleep(delay) // the slow answer the test asked for
	}
	switch {
	case hang && !open:
	case fail && !open:
		go func() {
			_ = s.report(&pb.ReportRegionTransitionRequest{Region: req.GetRegion(), Transition: pb.RegionTransition_REGION_TRANSITION_FAILED_OPEN,
				Error: "injected open failure", ProcedureId: req.GetProcedureId()})
		}()
	default:
		req = proto.CloneOf(req)
		go s.opened(req)
	}
	return &pb.OpenRegionResponse{}, nil
}

// CloseRegion implements pb.AdminServer: NOT_SERVING_REGION for a region it does not have, else
// it answers at once and reports CLOSED.
func (s *FakeServer) CloseRegion(_ context.Context, req *pb.CloseRegionRequest) (*pb.CloseRegionResponse, error) {
	name := req.GetRegion()
	s.mu.Lock()
	c := Call{Region: name, ProcedureID: req.GetProcedureId(), Flush: req.GetFlush(), Handoff: req.GetHandoff(), At: time.Now()}
	if req.GetDestination() != nil {
		c.Destination = layout.ServerName(req.GetDestination())
	}
	s.calls = append(s.calls, c)
	if d := s.wrongProcessLocked(req.GetServerStartCode()); d != nil {
		s.mu.Unlock()
		return nil, d.Status()
	}
	info := s.regions[name]
	if info == nil {
		if h := s.hung[name]; h != nil {
			info = h.GetRegion()
		}
	}
	delete(s.regions, name)
	delete(s.hung, name)
	s.mu.Unlock()
	if info == nil {
		return nil, (&pb.ErrorDetail{Code: pb.ErrorCode_ERROR_CODE_NOT_SERVING_REGION, Region: name, Message: "not on this server"}).Status()
	}
	go func() {
		_ = s.report(&pb.ReportRegionTransitionRequest{Region: info, Transition: pb.RegionTransition_REGION_TRANSITION_CLOSED, ProcedureId: req.GetProcedureId()})
	}()
	return &pb.CloseRegionResponse{}, nil
}

// wrongProcessLocked refuses an order for another process of this server, as a region server
// does (WRONG_SERVER_PROCESS).
func (s *FakeServer) wrongProcessLocked(startCode int64) *pb.ErrorDetail {
	if startCode == 0 || startCode == s.startCode {
		return nil
	}
	return &pb.ErrorDetail{Code: pb.ErrorCode_ERROR_CODE_WRONG_SERVER_PROCESS,
		Message: fmt.Sprintf("the order is for process %d, this is process %d", startCode, s.startCode)}
}

// Reincarnate makes the server a new process (a new start code, no regions) that has not
// reached the master yet: its heartbeats stay paused until PauseHeartbeats(false), when the
// master answers "unknown server" and it registers.
func (s *FakeServer) Reincarnate() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.startCode = newStartCode()
	s.regions = map[string]*pb.RegionInfo{}
	s.hung = map[string]*pb.OpenRegionRequest{}
	s.paused = true
}

// GetOnlineRegions implements pb.AdminServer.
func (s *FakeServer) GetOnlineRegions(context.Context, *pb.GetOnlineRegionsRequest) (*pb.GetOnlineRegionsResponse, error) {
	return &pb.GetOnlineRegionsResponse{Regions: s.RegionInfos()}, nil
}

// get answers a data-path GET with an empty row for a region it serves.
func (s *FakeServer) get(_ context.Context, c *rpc.Call) {
	var req pb.GetRequest
	if err := proto.Unmarshal(c.Message, &req); err != nil {
		c.Fail(&pb.ErrorDetail{Code: pb.ErrorCode_ERROR_CODE_INVALID_ARGUMENT, Message: err.Error()})
		return
	}
	name := req.GetRegion().GetName()
	s.mu.Lock()
	_, ok := s.regions[name]
	if ok {
		s.gets = append(s.gets, Get{Region: name, Row: slices.Clone(req.GetGet().GetRow())})
	}
	s.mu.Unlock()
	if !ok {
		c.Fail(&pb.ErrorDetail{Code: pb.ErrorCode_ERROR_CODE_NOT_SERVING_REGION, Region: name, Message: "not on this server"})
		return
	}
	c.Reply(&pb.GetResponse{Result: &pb.Result{}})
}
