package cellstorev1

import (
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/credentials/insecure"
)

// Dial makes a gRPC connection to a Cellstore service (a master, or a region server's Admin
// service) at host:port. Every connection attempt resolves the host name again: in Kubernetes a
// restarted pod keeps its DNS name but gets a new address, and gRPC's own DNS resolver re-resolves
// at most every 30 seconds, which would leave the connection dialing the dead address that long.
// Reconnects back off from 100 ms to at most 2 s, so that a restarted server is reached within
// seconds of answering.
func Dial(addr string) (*grpc.ClientConn, error) {
	return grpc.NewClient("passthrough:///"+addr,
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithConnectParams(grpc.ConnectParams{
			Backoff:           backoff.Config{BaseDelay: 100 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: 2 * time.Second},
			MinConnectTimeout: 5 * time.Second,
		}))
}
