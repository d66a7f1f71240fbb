package regionserver

import (
	"context"
	"net"
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

// A heartbeat during a master handover waits for the elected master to load its catalog instead
// of trying the other masters, one of which is the master that stopped (each try at it costs a
// connection timeout while the server's lease runs down).
func TestCallMasterWaitsForTheElectedMaster(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	m := &electedMaster{addr: lis.Addr().String()}
	m.refusals.Store(3) // within one call's tries (masters + 3)
	gs := grpc.NewServer()
	pb.RegisterMasterServer(gs, m)
	counted := &acceptCounter{Listener: lis}
	go gs.Serve(counted)
	t.Cleanup(gs.Stop)
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
	t.Cleanup(func() {
		if s.masterConn != nil {
			s.masterConn.Close()
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err = s.callMaster(ctx, func(ctx context.Context, c pb.MasterClient) error {
		_, err := c.Heartbeat(ctx, &pb.HeartbeatRequest{})
		return err
	})
	if err != nil {
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
