package regionserver

import (
	"context"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"

	pb "github.com/cellstore/cellstore/engine/api/cellstore/v1"
)

// electedMaster answers heartbeats NOT_ACTIVE_MASTER naming itself (elected, loading the
// catalog) while refusals last, then as the active master.
type electedMaster struct {
	pb.UnimplementedMasterServer
	addr     string
	refusals atomic.Int64
	calls    atomic.Int64
}

func (m *electedMaster) Heartbeat(context.Context, *pb.HeartbeatRequest) (*pb.HeartbeatResponse, error) {
	m.calls.Add(1)
	if m.refusals.Add(-1) >= 0 {
		return nil, (&pb.ErrorDetail{Code: pb.ErrorCode_ERROR_CODE_NOT_ACTIVE_MASTER, NewMaster: m.addr, Retryable: true,
			RetryAfterMs: 5, Message: "this master was elected and is loading the catalog"}).Status()
	}
	return &pb.HeartbeatResponse{}, nil
}

// startElectedMaster serves an electedMaster on a loopback port, refusing its first refusals
// heartbeats, with its connections counted; it stops when the test ends.
func startElectedMaster(t *testing.T, refusals int64) (*electedMaster, *acceptCounter) {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	m := &electedMaster{addr: lis.Addr().String()}
	m.refusals.Store(refusals)
	gs := grpc.NewServer()
	pb.RegisterMasterServer(gs, m)
	counted := &acceptCounter{Listener: lis}
	go gs.Serve(counted)
	t.Cleanup(gs.Stop)
	return m, counted
}

// A heartbeat during a master handover waits for the elected master to load its catalog instead
// of trying the other masters, one of which is the master that stopped (each try at it costs a
// connection timeout while the server's lease runs down).
func TestCallMasterWaitsForTheElectedMaster(t *testing.T) {
	m, counted := startElectedMaster(t, 3) // refusals within one call's tries (masters + 3)
	stopped, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { stopped.Close() })
	var tried atomic.Int64
	go func() {
		for {
			conn, err := stopped.Accept()
			if err != nil {
				return
			}
			tried.Add(1)
			conn.Close()
		}
	}()
	s := &Server{cfg: Config{Masters: []string{m.addr, stopped.Addr().String()}}}
	if err := heartbeatThrough(t, s); err != nil {
		t.Fatalf("heartbeat through the handover: %v", err)
	}
	if n := m.calls.Load(); n != 4 {
		t.Errorf("%d heartbeats reached the elected master, want its 3 refusals and the answer", n)
	}
	if n := tried.Load(); n != 0 {
		t.Errorf("%d connections to the other master while the elected one loaded its catalog", n)
	}
	if n := counted.n.Load(); n != 1 {
		t.Errorf("%d connections to the elected master, want one kept through its refusals", n)
	}
}

// heartbeatThrough sends one heartbeat through s.callMaster (10 s at most); the connection it
// leaves is closed when the test ends.
func heartbeatThrough(t *testing.T, s *Server) error {
	t.Cleanup(func() {
		if s.masterConn != nil {
			s.masterConn.Close()
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return s.callMaster(ctx, func(ctx context.Context, c pb.MasterClient) error {
		_, err := c.Heartbeat(ctx, &pb.HeartbeatRequest{})
		return err
	})
}

type acceptCounter struct {
	net.Listener
	n atomic.Int64
}

func (l *acceptCounter) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err == nil {
		l.n.Add(1)
	}
	return c, err
}

// After a master fails to answer (its connection not ready within masterConnectWait: a master
// pod that stopped), the next try goes to another configured master, not to the same one again
// because it comes next in the list (each such try cost another masterConnectWait of the lease).
func TestCallMasterDoesNotRetryTheMasterThatFailed(t *testing.T) {
	m, _ := startElectedMaster(t, 0)
	// A master that accepts connections and never speaks: each dial of it is one accept that
	// never becomes ready.
	gone, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { gone.Close() })
	var dials atomic.Int64
	accepted := make(chan net.Conn, 16)
	t.Cleanup(func() {
		for len(accepted) > 0 {
			(<-accepted).Close()
		}
	})
	go func() {
		for {
			conn, err := gone.Accept()
			if err != nil {
				return
			}
			dials.Add(1)
			accepted <- conn
		}
	}()
	s := &Server{cfg: Config{Masters: []string{m.addr, gone.Addr().String()}}, masterAddr: gone.Addr().String()}
	if err := heartbeatThrough(t, s); err != nil {
		t.Fatalf("heartbeat with one master gone: %v", err)
	}
	if n := dials.Load(); n != 1 {
		t.Errorf("the master that did not answer was dialed %d times, want once", n)
	}
	if n := m.calls.Load(); n != 1 {
		t.Errorf("%d heartbeats reached the live master, want 1", n)
	}
}

// A refused connection ends a try at once (the next master is tried without waiting out
// masterConnectWait), but when every master refuses — all of them restarting — the call keeps
// its patience: its tries take masterConnectWait each, as when the attempts hang, instead of
// giving up within milliseconds.
func TestCallMasterKeepsItsPatienceWhenEveryMasterRefuses(t *testing.T) {
	var refusing []string
	for range 2 {
		lis, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		refusing = append(refusing, lis.Addr().String())
		lis.Close()
	}
	s := &Server{cfg: Config{Masters: refusing}}
	start := time.Now()
	err := heartbeatThrough(t, s)
	took := time.Since(start)
	for _, a := range refusing {
		// A starved machine may not have seen the refusal yet when the try's wait ends: the
		// state then is still CONNECTING.
		if err == nil || !strings.Contains(err.Error(), a+": TRANSIENT_FAILURE (an IP address)") &&
			!strings.Contains(err.Error(), a+": CONNECTING (an IP address)") {
			t.Fatalf("heartbeat to refusing masters: %v, want an error naming the refused tries of %s", err, a)
		}
	}
	tries := len(s.cfg.Masters) + 3
	if min := time.Duration(tries-1) * masterConnectWait; took < min {
		t.Errorf("the call gave up after %v, want at least %v (%d tries, each after the first waiting for the previous one's %v)",
			took, min, tries, masterConnectWait)
	}
}

// A try's lookup of the master's name says what the address is when it is not a name, starts only
// once the wait for a connection has lasted a while, and not at all when the connection came first.
// (Whether localhost resolves depends on the machine: the lookup is only checked to end.)
func TestMasterAddressLookup(t *testing.T) {
	for addr, want := range map[string]string{
		"10.0.0.7:16000":        "an IP address",
		"[fd00::7]:16000":       "an IP address",
		"unix:/run/master.sock": "a unix socket",
		"unix:///run/m.sock":    "a unix socket",
		"unix-abstract:master":  "a unix socket",
		"master-0":              "not host:port",
	} {
		l := startLookup(addr, 0)
		if got := l.String(); got != want {
			t.Errorf("%s: %q, want %q", addr, got, want)
		}
		l.stop()
	}
	var none *addrLookup
	if got := none.String(); got != "connected when the try began" {
		t.Errorf("no lookup: %q", got)
	}

	l := startLookup("localhost:16000", time.Hour)
	l.stop()
	if got := l.String(); got != "its name not looked up: the try ended first" {
		t.Errorf("a lookup stopped before it started: %q", got)
	}

	l = startLookup("localhost:16000", 0)
	deadline := time.Now().Add(10 * time.Second)
	for got := l.String(); !strings.HasPrefix(got, "resolved to ") && !strings.HasPrefix(got, "resolving failed"); got = l.String() {
		if time.Now().After(deadline) {
			t.Fatalf("the lookup of localhost did not end within 10s: %q", got)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// A region server takes the master's self-fence margin (--self-fence-margin), not the default
// one: the margin is the clock skew it tolerates against the master.
func TestServerTakesTheMastersLeaseTiming(t *testing.T) {
	c := startCluster(t, 1) // lease 1 s, margin 300 ms
	waitFor(t, "the server registered", 10*time.Second, func() bool { return c.servers[0].fence.Load() != nil })
	if l, m := c.servers[0].fence.Load().Timing(); l != time.Second || m != 300*time.Millisecond {
		t.Fatalf("the server's lease timing %v with a margin of %v, want the master's 1s and 300ms", l, m)
	}
}
