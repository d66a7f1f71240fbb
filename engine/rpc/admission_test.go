package rpc

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	pb "github.com/cellstore/cellstore/engine/api/cellstore/v1"
)

// waitUntil polls cond until it holds or the deadline passes.
func waitUntil(t *testing.T, what string, within time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", within, what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func wantDetail(t *testing.T, what string, err error, code pb.ErrorCode, text string) {
	t.Helper()
	var d *pb.ErrorDetail
	if !errors.As(err, &d) || d.GetCode() != code || !strings.Contains(d.GetMessage(), text) {
		t.Fatalf("%s: want %v containing %q, got %v", what, code, text, err)
	}
}

// hostile opens a raw connection and says hello; the caller writes what it likes.
func hostile(t *testing.T, addr string) net.Conn {
	t.Helper()
	nc, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { nc.Close() })
	hello, _ := appendFrame(append([]byte(nil), Preamble[:]...), nil, &pb.ConnectionHeader{User: "attacker"}, nil)
	if _, err := nc.Write(hello); err != nil {
		t.Fatal(err)
	}
	return nc
}

func pingFrame(id uint64, payload []byte) []byte {
	b, _ := appendFrame(nil, appendRequestHeader(nil, &header{callID: id, method: uint32(pb.Method_METHOD_PING)}), &pb.PingRequest{Payload: payload}, nil)
	return b
}

func TestRequestOverMaxFrameIsAnsweredFromItsHeader(t *testing.T) {
	s, addr := startWith(t, map[uint32]Handler{uint32(pb.Method_METHOD_PING): echo}, ServerOptions{MaxFrame: 1 << 20})
	c := dial(t, addr)
	_, err := c.Call(context.Background(), pb.Method_METHOD_PING, &pb.PingRequest{}, make([]byte, 3<<20), &pb.PingResponse{}, nil)
	wantDetail(t, "a 3 MiB request", err, pb.ErrorCode_ERROR_CODE_INVALID_ARGUMENT, "exceeds the server's limit of 1048576 bytes")
	if got := s.Stats().TooLarge; got != 1 {
		t.Errorf("TooLarge = %d, want 1", got)
	}
	// The server closes that connection (like HBase) and serves new ones.
	waitUntil(t, "the connection to close", 5*time.Second, func() bool { return c.Err() != nil })
	c2 := dial(t, addr)
	if _, err := c2.Call(context.Background(), pb.Method_METHOD_PING, &pb.PingRequest{}, make([]byte, 1000), &pb.PingResponse{}, nil); err != nil {
		t.Fatal(err)
	}
}

func TestClientRefusesRequestOverItsLimit(t *testing.T) {
	s, addr := start(t, map[uint32]Handler{uint32(pb.Method_METHOD_PING): echo})
	c, err := Dial(context.Background(), addr, ClientOptions{MaxRequest: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_, err = c.Call(context.Background(), pb.Method_METHOD_PING, &pb.PingRequest{}, make([]byte, 2<<20), &pb.PingResponse{}, nil)
	if !errors.Is(err, ErrRequestTooLarge) {
		t.Fatalf("want ErrRequestTooLarge, got %v", err)
	}
	if _, err := c.Call(context.Background(), pb.Method_METHOD_PING, &pb.PingRequest{}, nil, &pb.PingResponse{}, nil); err != nil {
		t.Fatalf("connection unusable after a refused request: %v", err)
	}
	if s.Stats().TooLarge != 0 || s.Calls.Load() != 1 {
		t.Errorf("the refused request reached the server: %+v, %d calls", s.Stats(), s.Calls.Load())
	}
}

// TestPipeliningClientIsBounded is the attack of a client that sends requests without reading
// answers: the server stops reading it once its bounds are reached, holds at most about its
// queue budget, and keeps serving other clients.
func TestPipeliningClientIsBounded(t *testing.T) {
	const (
		queue   = 4 << 20
		answer  = 64 << 10
		perConn = 8
		connOut = 256 << 10
	)
	big := bytes.Repeat([]byte("a"), answer)
	s, addr := startWith(t, map[uint32]Handler{uint32(pb.Method_METHOD_PING): func(_ context.Context, c *Call) {
		c.Reply(&pb.PingResponse{}, big)
	}}, ServerOptions{MaxQueuedBytes: queue, MaxInFlightPerConn: perConn, MaxConnOutput: connOut, WriteTimeout: time.Minute})
	runtime.GC()
	var before runtime.MemStats
	runtime.ReadMemStats(&before)

	// Three attackers, each sending 20 000 requests (1.3 GB of answers) without reading.
	var wg sync.WaitGroup
	sent := make([]int, 3)
	for a := range sent {
		nc := hostile(t, addr)
		wg.Add(1)
		go func() {
			defer wg.Done()
			_ = nc.SetWriteDeadline(time.Now().Add(3 * time.Second))
			for i := range 20000 {
				if _, err := nc.Write(pingFrame(uint64(i+1), make([]byte, 1024))); err != nil {
					return // blocked by backpressure until the deadline
				}
				sent[a]++
			}
		}()
	}
	// Meanwhile a well-behaved client is served, and the server never holds much more than its
	// budget: the queue plus, per connection, the answers of the calls in flight.
	good := dial(t, addr)
	limit := int64(queue + 3*(perConn+1)*answer + 3*connOut)
	var peak int64
	for i := range 200 {
		if _, err := good.Call(context.Background(), pb.Method_METHOD_PING, &pb.PingRequest{}, nil, &pb.PingResponse{}, nil); err != nil {
			t.Fatalf("call %d of a well-behaved client during the attack: %v", i, err)
		}
		peak = max(peak, s.Stats().QueuedBytes)
	}
	wg.Wait()
	peak = max(peak, s.Stats().QueuedBytes)
	if peak > limit {
		t.Errorf("server held %d bytes for clients, bound %d", peak, limit)
	}
	if s.Stats().ThrottledReads == 0 {
		t.Error("no connection was ever throttled")
	}
	for a, n := range sent {
		if n >= 20000 {
			t.Errorf("attacker %d sent all its requests: nothing pushed back", a)
		}
	}
	runtime.GC()
	var after runtime.MemStats
	runtime.ReadMemStats(&after)
	if grown := int64(after.HeapAlloc) - int64(before.HeapAlloc); grown > 64<<20 {
		t.Errorf("heap grew by %d MiB under the attack", grown>>20)
	}
	t.Logf("attackers sent %v requests before being stopped; peak queued %d KiB (bound %d KiB)", sent, peak>>10, limit>>10)
}

func TestConnectionCapRefusesWithTooBusy(t *testing.T) {
	s, addr := startWith(t, map[uint32]Handler{uint32(pb.Method_METHOD_PING): echo}, ServerOptions{MaxConns: 2})
	a, b := dial(t, addr), dial(t, addr)
	for _, c := range []*Conn{a, b} {
		if _, err := c.Call(context.Background(), pb.Method_METHOD_PING, &pb.PingRequest{}, nil, &pb.PingResponse{}, nil); err != nil {
			t.Fatal(err)
		}
	}
	third := dial(t, addr)
	_, err := third.Call(context.Background(), pb.Method_METHOD_PING, &pb.PingRequest{}, nil, &pb.PingResponse{}, nil)
	wantDetail(t, "a third connection", err, pb.ErrorCode_ERROR_CODE_TOO_BUSY, "limit of 2 connections")
	if s.Stats().RefusedConns != 1 {
		t.Errorf("RefusedConns = %d, want 1", s.Stats().RefusedConns)
	}
	a.Close()
	waitUntil(t, "a slot to free", 5*time.Second, func() bool { return s.Stats().Conns < 2 })
	fourth := dial(t, addr)
	if _, err := fourth.Call(context.Background(), pb.Method_METHOD_PING, &pb.PingRequest{}, nil, &pb.PingResponse{}, nil); err != nil {
		t.Fatalf("after a connection closed: %v", err)
	}
}

func TestIdleConnectionsCloseButBusyOnesStay(t *testing.T) {
	release, entered := make(chan struct{}), make(chan struct{})
	s, addr := startWith(t, map[uint32]Handler{
		uint32(pb.Method_METHOD_PING): echo,
		uint32(pb.Method_METHOD_GET): func(_ context.Context, c *Call) {
			close(entered)
			<-release
			c.Reply(&pb.GetResponse{})
		},
	}, ServerOptions{IdleTimeout: 500 * time.Millisecond})
	busy := dial(t, addr)
	done := make(chan error, 1)
	go func() {
		_, err := busy.Call(context.Background(), pb.Method_METHOD_GET, &pb.GetRequest{}, nil, &pb.GetResponse{}, nil)
		done <- err
	}()
	// The call is in flight before the idle clock matters (a slow machine may take a while to send it).
	select {
	case <-entered:
	case err := <-done:
		t.Fatalf("the busy connection's call ended before it was served: %v", err)
	case <-time.After(10 * time.Second):
		t.Fatal("the busy connection's call was not served within 10 s")
	}
	idle := dial(t, addr)
	if _, err := idle.Call(context.Background(), pb.Method_METHOD_PING, &pb.PingRequest{}, nil, &pb.PingResponse{}, nil); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "the idle connection to close", 5*time.Second, func() bool { return idle.Err() != nil })
	if s.Stats().IdleClosed != 1 {
		t.Errorf("IdleClosed = %d, want 1", s.Stats().IdleClosed)
	}
	// The busy one outlived an idle timeout with its call in flight, and gets its answer.
	if busy.Err() != nil {
		t.Fatalf("a connection with a call in flight was closed: %v", busy.Err())
	}
	close(release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

func TestClientThatDoesNotReadIsCutOffByWriteTimeout(t *testing.T) {
	big := make([]byte, 1<<20)
	s, addr := startWith(t, map[uint32]Handler{uint32(pb.Method_METHOD_PING): func(_ context.Context, c *Call) {
		c.Reply(&pb.PingResponse{}, big)
	}}, ServerOptions{WriteTimeout: 300 * time.Millisecond})
	nc := hostile(t, addr)
	for i := range 64 {
		_ = nc.SetWriteDeadline(time.Now().Add(2 * time.Second))
		if _, err := nc.Write(pingFrame(uint64(i+1), nil)); err != nil {
			break
		}
	}
	waitUntil(t, "the server to drop the connection", 10*time.Second, func() bool {
		return s.Stats().Timeouts >= 1 && s.Stats().Conns == 0 && s.Stats().QueuedBytes == 0
	})
}

func TestSlowFrameIsCutOffByReadTimeout(t *testing.T) {
	s, addr := startWith(t, map[uint32]Handler{uint32(pb.Method_METHOD_PING): echo}, ServerOptions{ReadTimeout: 300 * time.Millisecond})
	nc := hostile(t, addr)
	f := pingFrame(1, make([]byte, 1000))
	if _, err := nc.Write(f[:100]); err != nil { // and never the rest
		t.Fatal(err)
	}
	_ = nc.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.ReadAll(nc); err != nil {
		t.Fatalf("server did not close a connection stuck mid-frame: %v", err)
	}
	if s.Stats().Timeouts != 1 || s.Stats().QueuedBytes != 0 {
		t.Errorf("stats after a read timeout: %+v", s.Stats())
	}
}

// flakyListener fails its first n accepts with err.
type flakyListener struct {
	net.Listener
	mu  sync.Mutex
	n   int
	err error
}

func (l *flakyListener) Accept() (net.Conn, error) {
	l.mu.Lock()
	if l.n > 0 {
		l.n--
		l.mu.Unlock()
		time.Sleep(time.Millisecond)
		return nil, l.err
	}
	l.mu.Unlock()
	return l.Listener.Accept()
}

func TestAcceptErrorsAreRetried(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	// The failure itself is EMFILE from accept(2) (a real-process test in engine/cmd/cellstore
	// provokes it with a low file limit); here the listener reports it a few times.
	fl := &flakyListener{Listener: lis, n: 5, err: &net.OpError{Op: "accept", Net: "tcp", Err: errors.New("accept4: too many open files")}}
	s := NewServer(map[uint32]Handler{uint32(pb.Method_METHOD_PING): echo}, ServerOptions{})
	served := make(chan error, 1)
	go func() { served <- s.Serve(fl) }()
	c := dial(t, lis.Addr().String())
	if _, err := c.Call(context.Background(), pb.Method_METHOD_PING, &pb.PingRequest{}, nil, &pb.PingResponse{}, nil); err != nil {
		t.Fatal(err)
	}
	if s.Stats().AcceptErrors != 5 {
		t.Errorf("AcceptErrors = %d, want 5", s.Stats().AcceptErrors)
	}
	if err := s.Healthy(); err != nil {
		t.Errorf("healthy after accepts recovered: %v", err)
	}
	// A listener closed under the server (not by Close) ends Serve with an error and Healthy says so.
	lis.Close()
	if err := <-served; err == nil {
		t.Fatal("Serve returned nil after its listener was closed by someone else")
	}
	if err := s.Healthy(); err == nil || !strings.Contains(err.Error(), "stopped serving") {
		t.Errorf("Healthy after the listener closed: %v", err)
	}
	s.Close()
}

var _ = binary.BigEndian
var _ = proto.Marshal

// FuzzReadCallPrefix: the header prefix of an oversized request is read from hostile bytes.
func FuzzReadCallPrefix(f *testing.F) {
	f.Add(appendRequestHeader(binary.AppendUvarint(nil, 4), &header{callID: 7, method: 1}))
	f.Add(bytes.Repeat([]byte{0xff}, 12)) // a length varint that never ends
	f.Add([]byte{0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80})
	f.Fuzz(func(t *testing.T, b []byte) {
		_, _ = readCallPrefix(bytes.NewReader(b))
	})
}

// A client that announces a large frame and sends little of it holds only about what it sent
// (its buffer, at most twice that): the others' calls, small and large (larger than half the
// queue), go on while the frames stuck mid-way were sent less than a quarter of the queue (more
// stalls large frames: see byteQueue).
func TestDribbledFramesDoNotHoldTheQueue(t *testing.T) {
	const queue = 4 << 20
	s, addr := startWith(t, map[uint32]Handler{uint32(pb.Method_METHOD_PING): func(_ context.Context, c *Call) {
		c.Reply(&pb.PingResponse{})
	}}, ServerOptions{MaxQueuedBytes: queue})
	// One announces the largest frame and sends 100 bytes of it; two announce 3 MiB and send
	// 256 KiB (they hold at most 512 KiB each). All then wait for the read timeout (a minute).
	dribble := func(declared, sent int) {
		nc := hostile(t, addr)
		f := pingFrame(1, make([]byte, declared))
		if _, err := nc.Write(f[:4+sent]); err != nil {
			t.Fatal(err)
		}
	}
	dribble(queue-64, 100)
	dribble(3<<20, 256<<10)
	dribble(3<<20, 256<<10)
	waitUntil(t, "the dribblers' bytes to arrive", 10*time.Second, func() bool { return s.Stats().QueuedBytes >= 512<<10+100 })

	good := dial(t, addr)
	var peak int64
	for i, size := range []int{0, 100, 3 << 20, 1000, 3<<20 + 500<<10, 64 << 10, 0} {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		_, err := good.Call(ctx, pb.Method_METHOD_PING, &pb.PingRequest{Payload: make([]byte, size)}, nil, &pb.PingResponse{}, nil)
		cancel()
		if err != nil {
			t.Fatalf("call %d (%d bytes) of a well-behaved client beside the dribblers: %v", i, size, err)
		}
		peak = max(peak, s.Stats().QueuedBytes)
	}
	if bound := int64(queue + queue/2); peak > bound {
		t.Errorf("server held %d bytes, bound %d", peak, bound)
	}
}

// Large frames arriving at once from many clients, together several times the queue, all
// complete (none waits for another for ever) and the queue stays within its bound.
func TestLargeFramesArrivingTogetherAllComplete(t *testing.T) {
	const queue = 4 << 20
	s, addr := startWith(t, map[uint32]Handler{uint32(pb.Method_METHOD_PING): func(_ context.Context, c *Call) {
		c.Reply(&pb.PingResponse{})
	}}, ServerOptions{MaxQueuedBytes: queue})
	var wg sync.WaitGroup
	var peakMu sync.Mutex
	var peak int64
	errs := make(chan error, 16)
	for i := range 10 {
		size := 1<<20 + 512<<10
		if i%3 == 0 {
			size = 3<<20 + 512<<10 // more than half the queue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, err := Dial(context.Background(), addr, ClientOptions{})
			if err != nil {
				errs <- err
				return
			}
			defer c.Close()
			for range 4 {
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				_, err := c.Call(ctx, pb.Method_METHOD_PING, &pb.PingRequest{Payload: make([]byte, size)}, nil, &pb.PingResponse{}, nil)
				cancel()
				if err != nil {
					errs <- err
					return
				}
				peakMu.Lock()
				peak = max(peak, s.Stats().QueuedBytes)
				peakMu.Unlock()
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if bound := int64(queue + queue/2); peak > bound {
		t.Errorf("server held %d bytes, bound %d", peak, bound)
	}
	if s.Stats().ThrottledReads == 0 {
		t.Error("no frame ever waited for room")
	}
}

// The queue's rules for arriving frames, driven at random (some frames abandoned half-way): the
// leader is the frame holding the most, the others hold at most half the queue, the total stays
// within 1.5 × max and holds every arriving frame's bytes, and every frame completes.
func TestByteQueueArrivingFramesInvariants(t *testing.T) {
	const max = 1 << 20
	var q byteQueue
	q.max = max
	q.cond.L = &q.mu
	check := func() {
		q.mu.Lock()
		defer q.mu.Unlock()
		var others, all int64
		for f := range q.frames {
			all += f.held
			if f != q.leader {
				others += f.held
				if f.held > q.leader.held {
					t.Errorf("a frame holding %d does not lead; the leader holds %d", f.held, q.leader.held)
				}
			}
		}
		if others != q.arriving {
			t.Errorf("arriving = %d, the others hold %d", q.arriving, others)
		}
		if q.used > max+max/2 || q.used < all {
			t.Errorf("queue holds %d, bound %d, arriving frames %d", q.used, max+max/2, all)
		}
	}
	never := func() bool { return false }
	var waits atomic.Int64
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 30 {
				n := int64(1+(g*7919+i*104729)%(max*9/10)) + 1
				a := q.begin()
				abandon := i%4 == 3
				for got := int64(0); got < n; {
					got += q.take(a, min(n-got, 256<<10), 16<<10, never, func() { waits.Add(1) })
					check()
					runtime.Gosched() // let the others interleave
					if abandon && got > n/2 {
						break
					}
				}
				q.end(a, !abandon)
				check()
				if abandon {
					continue
				}
				// Served, then released.
				q.release(n)
			}
		}()
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(60 * time.Second):
		t.Fatal("arriving frames waited for each other for a minute")
	}
	if waits.Load() == 0 {
		t.Error("no frame ever waited: the test drove no contention")
	}
	if q.used != 0 || q.arriving != 0 || q.leader != nil {
		t.Errorf("after all frames: used %d, arriving %d, leader %v", q.used, q.arriving, q.leader)
	}
}
