package client

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"testing"

	pb "github.com/cellstore/cellstore/engine/api/cellstore/v1"
	"github.com/cellstore/cellstore/engine/rpc"
	"github.com/cellstore/cellstore/engine/security"
)

// Results match their actions by index whatever order the server answers in: in order, shuffled,
// with unknown indexes (no action) and with actions left unanswered.
func TestActionFinder(t *testing.T) {
	var actions []*pb.Action
	for i := range 50 {
		actions = append(actions, &pb.Action{Index: uint32(3 * i)})
	}
	order := func(shuffle bool) []uint32 {
		var idx []uint32
		for _, a := range actions {
			idx = append(idx, a.Index)
		}
		if shuffle {
			rand.Shuffle(len(idx), func(i, j int) { idx[i], idx[j] = idx[j], idx[i] })
		}
		return idx
	}
	for _, shuffle := range []bool{false, true} {
		f := newActionFinder(actions)
		for n, idx := range order(shuffle) {
			if n%7 == 3 {
				continue // unanswered
			}
			if a := f.find(idx); a == nil || a.Index != idx {
				t.Fatalf("shuffled=%v: find(%d) = %v", shuffle, idx, a)
			}
			if a := f.find(idx + 1); a != nil {
				t.Fatalf("shuffled=%v: find(%d), an index no action has, = %v", shuffle, idx+1, a)
			}
		}
	}
	if f := newActionFinder(nil); f.find(0) != nil {
		t.Fatal("found an action among none")
	}
}

// A batch's call error ends its actions at once when sending again fails the same way (it resent
// them until the operation's deadline: a minute for credentials the server refuses).
func TestFinalCallError(t *testing.T) {
	live := context.Background()
	done, cancel := context.WithCancel(live)
	cancel()
	cases := []struct {
		what  string
		ctx   context.Context
		err   error
		final bool
	}{
		{"refused credentials", live, fmt.Errorf("dial: %w", security.ErrUnauthenticated), true},
		{"a malformed answer", live, errors.New("client: server answered 1 region results for 2 region actions"), true},
		{"the caller's cancel", done, context.Canceled, true},
		{"a refused connection", live, &net.OpError{Op: "dial", Err: errors.New("connection refused")}, false},
		{"a closed connection", live, fmt.Errorf("call: %w", rpc.ErrConnClosed), false},
		{"a connection closed in the handshake", live, fmt.Errorf("rpc: TLS handshake with 10.0.0.1:16020: %w", io.EOF), false},
		{"one attempt's timeout", live, context.DeadlineExceeded, false},
		{"a fenced server", live, &pb.ErrorDetail{Code: pb.ErrorCode_ERROR_CODE_LEASE_EXPIRED, Retryable: true}, false},
		{"a refused request", live, &pb.ErrorDetail{Code: pb.ErrorCode_ERROR_CODE_INVALID_ARGUMENT}, true},
	}
	for _, c := range cases {
		if got := finalCallError(c.ctx, c.err); got != c.final {
			t.Errorf("%s (%v): final %v, want %v", c.what, c.err, got, c.final)
		}
	}
}
