package master

import (
	"errors"
	"sync"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pb "github.com/cellstore/cellstore/engine/api/cellstore/v1"
	"github.com/cellstore/cellstore/engine/security"
)

// adminPool holds one gRPC connection per region server Admin address.
type adminPool struct {
	dial  func(addr string) (pb.AdminClient, error)
	creds *security.Credentials

	mu    sync.Mutex
	conns map[string]*grpc.ClientConn
	dials map[string]pb.AdminClient
}

func newAdminPool(dial func(addr string) (pb.AdminClient, error), creds *security.Credentials) *adminPool {
	return &adminPool{dial: dial, creds: creds, conns: map[string]*grpc.ClientConn{}, dials: map[string]pb.AdminClient{}}
}

func (a *adminPool) client(addr string) (pb.AdminClient, error) {
	if addr == "" {
		return nil, errors.New("region server registered no admin address")
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.dial != nil {
		if c := a.dials[addr]; c != nil {
			return c, nil
		}
		c, err := a.dial(addr)
		if err != nil {
			return nil, err
		}
		a.dials[addr] = c
		return c, nil
	}
	cc := a.conns[addr]
	if cc == nil {
		var err error
		cc, err = security.Dial(addr, a.creds)
		if err != nil {
			return nil, err
		}
		a.conns[addr] = cc
	}
	return pb.NewAdminClient(cc), nil
}

// forget drops the connection to addr: the next order dials afresh. A server that registers with a
// new start code is a new process, possibly at a new address under the same name.
func (a *adminPool) forget(addr string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if cc := a.conns[addr]; cc != nil {
		cc.Close()
		delete(a.conns, addr)
	}
	delete(a.dials, addr)
}

func (a *adminPool) close() {
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, cc := range a.conns {
		cc.Close()
	}
	a.conns = map[string]*grpc.ClientConn{}
	a.dials = map[string]pb.AdminClient{}
}

// answered says whether err is an answer of the region server (it received the order and
// refused it) rather than a transport failure (it may not have received it, or may have acted
// on it without the reply arriving).
func answered(err error) bool {
	if _, ok := pb.DetailOf(err); ok {
		return true
	}
	switch status.Code(err) {
	case codes.InvalidArgument, codes.FailedPrecondition, codes.NotFound, codes.AlreadyExists,
		codes.Unimplemented, codes.PermissionDenied, codes.OutOfRange:
		return true
	}
	return false
}
