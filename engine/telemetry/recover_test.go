package telemetry

import (
	"bytes"
	"context"
	"log/slog"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
)

// lockedBuffer is written by the server's goroutine and read by the test.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}
func (l *lockedBuffer) String() string { l.mu.Lock(); defer l.mu.Unlock(); return l.b.String() }

type panicky struct {
	healthpb.UnimplementedHealthServer
}

func (panicky) Check(_ context.Context, r *healthpb.HealthCheckRequest) (*healthpb.HealthCheckResponse, error) {
	if r.GetService() == "boom" {
		var xs []int
		_ = xs[len(r.GetService())] // out of range: the panic a missed check would cause
	}
	return &healthpb.HealthCheckResponse{Status: healthpb.HealthCheckResponse_SERVING}, nil
}

// A handler's panic is answered codes.Internal and logged with its stack; the server serves on.
func TestRecoverPanics(t *testing.T) {
	var logged lockedBuffer
	s := grpc.NewServer(RecoverPanics(slog.New(slog.NewTextHandler(&logged, nil))))
	healthpb.RegisterHealthServer(s, panicky{})
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = s.Serve(lis) }()
	defer s.Stop()
	cc, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	h := healthpb.NewHealthClient(cc)
	_, err = h.Check(ctx, &healthpb.HealthCheckRequest{Service: "boom"})
	if status.Code(err) != codes.Internal || !strings.Contains(err.Error(), "grpc.health.v1.Health/Check") {
		t.Fatalf("a panicking call answered %v, want Internal naming the method", err)
	}
	if !strings.Contains(logged.String(), "index out of range") || !strings.Contains(logged.String(), "recover_test.go") {
		t.Errorf("the log has neither the panic nor its stack: %s", logged.String())
	}
	if resp, err := h.Check(ctx, &healthpb.HealthCheckRequest{}); err != nil || resp.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("the next call: %v %v", resp, err)
	}
}
