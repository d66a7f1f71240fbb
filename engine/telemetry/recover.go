package telemetry

import (
	"context"
	"log/slog"
	"runtime/debug"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// RecoverPanics is a gRPC server option that answers a call whose handler panicked with
// codes.Internal and logs the panic with its stack, instead of letting it end the process (gRPC
// recovers nothing: one malformed request that a check missed would stop a master, and each
// master elected after it when the client retried). Give it before the server's other
// interceptors, so that it covers them too.
func RecoverPanics(log *slog.Logger) grpc.ServerOption {
	return grpc.ChainUnaryInterceptor(func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (resp any, err error) {
		defer func() {
			if p := recover(); p != nil {
				log.Error("panic serving a call", "method", info.FullMethod, "panic", p, "stack", string(debug.Stack()))
				resp, err = nil, status.Errorf(codes.Internal, "internal error serving %s (the server logged it)", info.FullMethod)
			}
		}()
		return h(ctx, req)
	})
}
