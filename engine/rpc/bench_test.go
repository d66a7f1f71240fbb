package rpc

import (
	"context"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	pb "github.com/cellstore/cellstore/engine/api/cellstore/v1"
)

// benchClients is the number of client goroutines in the ping benchmarks: the figure the data-path
// requirement is stated for (a no-op call on loopback with 4 client threads).
const benchClients = 4

// runClients splits b.N calls over benchClients goroutines and reports calls/s.
func runClients(b *testing.B, call func() error) { runClientsN(b, benchClients, call) }

// runClientsN splits b.N calls over clients goroutines and reports calls/s.
func runClientsN(b *testing.B, clients int, call func() error) {
	b.ReportAllocs()
	var wg sync.WaitGroup
	per := b.N / clients
	start := time.Now()
	b.ResetTimer()
	for i := range clients {
		n := per
		if i == 0 {
			n += b.N % clients
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range n {
				if err := call(); err != nil {
					b.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	b.StopTimer()
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "calls/s")
}

// BenchmarkPingDataPath: a no-op call over this package's protocol, 4 clients on one connection.
func BenchmarkPingDataPath(b *testing.B) {
	_, addr := start(b, map[uint32]Handler{uint32(pb.Method_METHOD_PING): func(_ context.Context, c *Call) {
		c.Reply(&pb.PingResponse{})
	}})
	conn := dial(b, addr)
	req := &pb.PingRequest{Payload: make([]byte, 32)}
	runClients(b, func() error {
		var resp pb.PingResponse
		_, err := conn.Call(context.Background(), pb.Method_METHOD_PING, req, nil, &resp, nil)
		return err
	})
}

// countingListener counts the write system calls of the connections it accepts.
type countingListener struct {
	net.Listener
	writes *atomic.Int64
}

func (l countingListener) Accept() (net.Conn, error) {
	nc, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	_ = nc.(*net.TCPConn).SetNoDelay(true) // as the server does to the connections it sees as TCP
	return countingConn{nc, l.writes}, nil
}

type countingConn struct {
	net.Conn
	writes *atomic.Int64
}

func (c countingConn) Write(b []byte) (int, error) {
	c.writes.Add(1)
	return c.Conn.Write(b)
}

// BenchmarkGroupAnswers: 16 clients on one connection whose calls are answered in groups, as the
// writers of one WAL sync are (every handler waits for the next release, which a timer of 100 µs
// sends), and the server's write system calls per answer: the answers of a group share writes when each
// answering goroutine lets the others of its group queue theirs first (serverConn.send;
// docs/benchmarks.md, "Answers woken together leave together").
func BenchmarkGroupAnswers(b *testing.B) {
	var mu sync.Mutex
	release := make(chan struct{})
	stop := make(chan struct{})
	defer close(stop)
	go func() {
		for {
			select {
			case <-stop:
				return
			case <-time.After(100 * time.Microsecond):
			}
			mu.Lock()
			close(release)
			release = make(chan struct{})
			mu.Unlock()
		}
	}()
	lis, err := netListen()
	if err != nil {
		b.Fatal(err)
	}
	var writes atomic.Int64
	s := NewServer(map[uint32]Handler{uint32(pb.Method_METHOD_PING): func(_ context.Context, c *Call) {
		mu.Lock()
		r := release
		mu.Unlock()
		<-r
		c.Reply(&pb.PingResponse{})
	}}, ServerOptions{})
	go s.Serve(countingListener{lis, &writes})
	defer s.Close()
	conn := dial(b, lis.Addr().String())
	req := &pb.PingRequest{Payload: make([]byte, 32)}
	w0 := writes.Load()
	runClientsN(b, 16, func() error {
		var resp pb.PingResponse
		_, err := conn.Call(context.Background(), pb.Method_METHOD_PING, req, nil, &resp, nil)
		return err
	})
	b.ReportMetric(float64(writes.Load()-w0)/float64(b.N), "writes/answer")
}

type grpcPing struct {
	pb.UnimplementedAdminServer
}

func (grpcPing) Ping(context.Context, *pb.PingRequest) (*pb.PingResponse, error) {
	return &pb.PingResponse{}, nil
}

// BenchmarkPingGRPC: the same no-op call as a gRPC unary call (the control plane's transport).
func BenchmarkPingGRPC(b *testing.B) {
	lis, err := netListen()
	if err != nil {
		b.Fatal(err)
	}
	s := grpc.NewServer()
	pb.RegisterAdminServer(s, grpcPing{})
	go s.Serve(lis)
	defer s.Stop()
	cc, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		b.Fatal(err)
	}
	defer cc.Close()
	client := pb.NewAdminClient(cc)
	req := &pb.PingRequest{Payload: make([]byte, 32)}
	runClients(b, func() error {
		_, err := client.Ping(context.Background(), req)
		return err
	})
}

// BenchmarkLargeRequest: requests larger than a connection's read buffer, whose bytes the server
// admits into its queue as they arrive (byteQueue), one client.
// With tls=true the connection is TLS (server certificate only).
func BenchmarkLargeRequest(b *testing.B) {
	for _, secure := range []bool{false, true} {
		for _, size := range []int{256 << 10, 4 << 20} {
			b.Run(fmt.Sprintf("tls=%v/%dKiB", secure, size>>10), func(b *testing.B) { largeRequests(b, secure, size) })
		}
	}
}

func largeRequests(b *testing.B, secure bool, size int) {
	handlers := map[uint32]Handler{uint32(pb.Method_METHOD_PING): func(_ context.Context, c *Call) {
		c.Reply(&pb.PingResponse{})
	}}
	var conn *Conn
	if secure {
		p := newPKI(b)
		serverCerts, _ := p.certs("server", localhost)
		_, addr := startWith(b, handlers, ServerOptions{TLS: serverCerts})
		c, err := Dial(context.Background(), addr, ClientOptions{User: "tester", Name: "rpc_test", TLS: p.caOnly()})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { c.Close() })
		conn = c
	} else {
		_, addr := start(b, handlers)
		conn = dial(b, addr)
	}
	req := &pb.PingRequest{Payload: make([]byte, size)}
	b.SetBytes(int64(size))
	b.ResetTimer()
	for range b.N {
		var resp pb.PingResponse
		if _, err := conn.Call(context.Background(), pb.Method_METHOD_PING, req, nil, &resp, nil); err != nil {
			b.Fatal(err)
		}
	}
}
