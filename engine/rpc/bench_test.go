package rpc

import (
	"context"
	"sync"
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
func runClients(b *testing.B, call func() error) {
	b.ReportAllocs()
	var wg sync.WaitGroup
	per := b.N / benchClients
	start := time.Now()
	b.ResetTimer()
	for i := range benchClients {
		n := per
		if i == 0 {
			n += b.N % benchClients
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
