package rpc

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	pb "github.com/cellstore/cellstore/engine/api/cellstore/v1"
)

// start serves handlers on a loopback port; the server stops when the test ends.
func start(t testing.TB, handlers map[uint32]Handler) (*Server, string) {
	t.Helper()
	return startWith(t, handlers, ServerOptions{})
}

func startWith(t testing.TB, handlers map[uint32]Handler, opts ServerOptions) (*Server, string) {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := NewServer(handlers, opts)
	served := make(chan error, 1)
	go func() { served <- s.Serve(lis) }()
	t.Cleanup(func() {
		s.Close()
		if err := <-served; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	return s, lis.Addr().String()
}

func dial(t testing.TB, addr string) *Conn {
	t.Helper()
	c, err := Dial(context.Background(), addr, ClientOptions{User: "tester", Name: "rpc_test"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func echo(_ context.Context, c *Call) {
	var req pb.PingRequest
	if err := proto.Unmarshal(c.Message, &req); err != nil {
		c.Fail(&pb.ErrorDetail{Code: pb.ErrorCode_ERROR_CODE_INVALID_ARGUMENT, Message: err.Error()})
		return
	}
	// Echo the payload, the user, and the cells reversed in two blocks (tests multi-block replies).
	half := len(c.Cells) / 2
	c.Reply(&pb.PingResponse{Payload: append(req.Payload, c.User...)}, c.Cells[half:], c.Cells[:half])
}

func TestCallRoundTrip(t *testing.T) {
	_, addr := start(t, map[uint32]Handler{uint32(pb.Method_METHOD_PING): echo})
	c := dial(t, addr)
	var resp pb.PingResponse
	cells, err := c.Call(context.Background(), pb.Method_METHOD_PING, &pb.PingRequest{Payload: []byte("hi ")}, []byte("abcdef"), &resp, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := string(resp.Payload); got != "hi tester" {
		t.Errorf("payload %q, want %q", got, "hi tester")
	}
	if string(cells) != "defabc" {
		t.Errorf("cells %q, want %q", cells, "defabc")
	}
}

func TestConcurrentCallsPipelineAndMatch(t *testing.T) {
	// Replies come out of order: each call waits until the next one has arrived (the last is
	// released by the test), so a mismatched call id would give a wrong payload.
	const n = 64
	arrived := make(chan struct{}, n)
	release := make(chan struct{})
	_, addr := start(t, map[uint32]Handler{uint32(pb.Method_METHOD_PING): func(ctx context.Context, c *Call) {
		var req pb.PingRequest
		_ = proto.Unmarshal(c.Message, &req)
		arrived <- struct{}{}
		<-release
		c.Reply(&pb.PingResponse{Payload: req.Payload}, c.Cells)
	}})
	conn := dial(t, addr)
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			want := fmt.Sprintf("call-%d", i)
			var resp pb.PingResponse
			cells, err := conn.Call(context.Background(), pb.Method_METHOD_PING, &pb.PingRequest{Payload: []byte(want)}, []byte(want), &resp, nil)
			switch {
			case err != nil:
				errs <- err
			case string(resp.Payload) != want || string(cells) != want:
				errs <- fmt.Errorf("call %s got payload %q cells %q", want, resp.Payload, cells)
			}
		}()
	}
	for range n { // all n are in the server at once: they pipelined on one connection
		<-arrived
	}
	close(release)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

func TestRemoteErrors(t *testing.T) {
	_, addr := start(t, map[uint32]Handler{
		uint32(pb.Method_METHOD_GET): func(_ context.Context, c *Call) {
			c.Fail(&pb.ErrorDetail{Code: pb.ErrorCode_ERROR_CODE_THROTTLED, Message: "over quota", RetryAfterMs: 250, Retryable: true})
		},
		uint32(pb.Method_METHOD_MUTATE): func(context.Context, *Call) {}, // forgets to answer
	})
	c := dial(t, addr)
	_, err := c.Call(context.Background(), pb.Method_METHOD_GET, &pb.GetRequest{}, nil, &pb.GetResponse{}, nil)
	var re *pb.ErrorDetail
	if !errors.As(err, &re) || re.GetCode() != pb.ErrorCode_ERROR_CODE_THROTTLED || re.GetRetryAfterMs() != 250 {
		t.Fatalf("want THROTTLED with retry-after 250 ms, got %v", err)
	}
	_, err = c.Call(context.Background(), pb.Method_METHOD_SCAN, &pb.ScanRequest{}, nil, nil, nil)
	if !errors.As(err, &re) || re.GetCode() != pb.ErrorCode_ERROR_CODE_INVALID_ARGUMENT {
		t.Fatalf("unknown method: want INVALID_ARGUMENT, got %v", err)
	}
	_, err = c.Call(context.Background(), pb.Method_METHOD_MUTATE, &pb.MutateRequest{}, nil, nil, nil)
	if !errors.As(err, &re) || re.GetCode() != pb.ErrorCode_ERROR_CODE_UNKNOWN {
		t.Fatalf("handler without answer: want UNKNOWN, got %v", err)
	}
	// The connection still works after errors.
	if _, err := c.Call(context.Background(), pb.Method_METHOD_GET, &pb.GetRequest{}, nil, nil, nil); !errors.As(err, &re) {
		t.Fatalf("connection broken after remote errors: %v", err)
	}
}

func TestDeadlinePropagatesAndCancelLeavesConnUsable(t *testing.T) {
	gotDeadline := make(chan bool, 1)
	block := make(chan struct{})
	_, addr := start(t, map[uint32]Handler{
		uint32(pb.Method_METHOD_GET): func(ctx context.Context, c *Call) {
			_, ok := ctx.Deadline()
			gotDeadline <- ok
			// Answer only after the test ends: the client must give up on its own deadline.
			<-block
			c.Reply(&pb.GetResponse{})
		},
		uint32(pb.Method_METHOD_PING): echo,
	})
	defer close(block)
	c := dial(t, addr)
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	_, err := c.Call(ctx, pb.Method_METHOD_GET, &pb.GetRequest{}, nil, &pb.GetResponse{}, nil)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("want deadline exceeded, got %v", err)
	}
	if !<-gotDeadline {
		t.Error("the handler's context had no deadline")
	}
	if _, err := c.Call(context.Background(), pb.Method_METHOD_PING, &pb.PingRequest{}, nil, &pb.PingResponse{}, nil); err != nil {
		t.Fatalf("connection unusable after a timed-out call: %v", err)
	}
}

func TestServerCloseFailsPendingCalls(t *testing.T) {
	arrived := make(chan struct{})
	s, addr := start(t, map[uint32]Handler{uint32(pb.Method_METHOD_GET): func(ctx context.Context, c *Call) {
		close(arrived)
		c.Reply(&pb.GetResponse{}) // answered after the connection is gone: dropped
	}})
	c := dial(t, addr)
	// Close the server's side of the connection while a call is pending.
	errc := make(chan error, 1)
	go func() {
		_, err := c.Call(context.Background(), pb.Method_METHOD_SCAN, &pb.ScanRequest{}, nil, nil, nil)
		errc <- err
	}()
	// METHOD_SCAN is unknown here, so that call gets an answer; now a pending one:
	if err := <-errc; err == nil {
		t.Fatal("unknown method answered without error")
	}
	go func() {
		_, err := c.Call(context.Background(), pb.Method_METHOD_GET, &pb.GetRequest{}, nil, nil, nil)
		errc <- err
	}()
	<-arrived
	s.mu.Lock()
	for sc := range s.conns {
		sc.nc.Close()
	}
	s.mu.Unlock()
	err := <-errc
	if err != nil && !errors.Is(err, ErrConnClosed) {
		t.Fatalf("want nil (answer raced the close) or ErrConnClosed, got %v", err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for c.Err() == nil {
		if time.Now().After(deadline) {
			t.Fatal("client did not notice the closed connection")
		}
		time.Sleep(5 * time.Millisecond)
	}
	if _, err := c.Call(context.Background(), pb.Method_METHOD_GET, &pb.GetRequest{}, nil, nil, nil); !errors.Is(err, ErrConnClosed) {
		t.Fatalf("call on a broken connection: want ErrConnClosed, got %v", err)
	}
}

// rawConn writes bytes the way a broken or hostile client would.
func rawConn(t *testing.T, addr string, b []byte) error {
	t.Helper()
	nc, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	if _, err := nc.Write(b); err != nil {
		return err
	}
	_ = nc.SetReadDeadline(time.Now().Add(5 * time.Second))
	_, err = io.ReadAll(nc) // the server must close the connection
	return err
}

func TestBadInputClosesConnectionOnly(t *testing.T) {
	s, addr := startWith(t, map[uint32]Handler{uint32(pb.Method_METHOD_PING): echo}, ServerOptions{ReadTimeout: time.Second})
	hello, _ := appendFrame(append([]byte(nil), Preamble[:]...), nil, &pb.ConnectionHeader{}, nil)
	huge := binary.BigEndian.AppendUint32(bytes.Clone(hello), 1<<31-1) // no header follows: read timeout
	garbage := append(bytes.Clone(hello), 0, 0, 0, 3, 0xff, 0xff, 0xff)
	badHeader, _ := appendFrame(bytes.Clone(hello), []byte{0x08}, nil, nil) // call id tag without value
	for name, b := range map[string][]byte{
		"bad preamble":               []byte("GET / HTTP/1.1\r\n\r\n"),
		"frame too large, no header": huge,
		"garbage frame":              garbage,
		"bad header":                 badHeader,
	} {
		if err := rawConn(t, addr, b); err != nil {
			t.Errorf("%s: server did not close the connection cleanly: %v", name, err)
		}
	}
	// The server still serves well-behaved clients.
	c := dial(t, addr)
	if _, err := c.Call(context.Background(), pb.Method_METHOD_PING, &pb.PingRequest{}, nil, &pb.PingResponse{}, nil); err != nil {
		t.Fatal(err)
	}
	if s.Calls.Load() != 1 {
		t.Errorf("served %d calls, want 1", s.Calls.Load())
	}
}

func FuzzParseFrame(f *testing.F) {
	req := appendRequestHeader(nil, &header{callID: 7, method: 2, timeoutMS: 100})
	fr, _ := appendFrame(nil, req, &pb.PingRequest{Payload: []byte("x")}, nil, []byte("cells"))
	f.Add(fr[4:])
	f.Add(appendResponseHeader(nil, 9, []byte{8, 5}))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		if fr, err := splitFrame(b); err == nil {
			_, _ = parseHeader(fr.header, true)
			_, _ = parseHeader(fr.header, false)
		}
		_, _ = parseHeader(b, true)
		_, _ = parseHeader(b, false)
	})
}

func netListen() (net.Listener, error) { return net.Listen("tcp", "127.0.0.1:0") }

// TestCloseUnderLoad closes servers while clients keep calling: Close returns only after every
// handler and connection goroutine ended (no handler runs after it), and, under -race, the
// in-flight count is never raised from zero while Close waits on it (calls read from a
// connection's buffer after Close began once did exactly that).
func TestCloseUnderLoad(t *testing.T) {
	for round := range 20 {
		var running sync.WaitGroup
		var after sync.Mutex
		closed := false
		lis, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		s := NewServer(map[uint32]Handler{uint32(pb.Method_METHOD_PING): func(ctx context.Context, c *Call) {
			after.Lock()
			late := closed
			after.Unlock()
			if late {
				t.Errorf("round %d: a handler ran after Close returned", round)
			}
			echo(ctx, c)
		}}, ServerOptions{})
		served := make(chan error, 1)
		go func() { served <- s.Serve(lis) }()
		stop := make(chan struct{})
		for range 4 {
			running.Add(1)
			go func() {
				defer running.Done()
				c, err := Dial(context.Background(), lis.Addr().String(), ClientOptions{User: "tester", Name: "rpc_test"})
				if err != nil {
					return // the server may already be closed
				}
				defer c.Close()
				for {
					select {
					case <-stop:
						return
					default:
					}
					if _, err := c.Call(context.Background(), pb.Method_METHOD_PING, &pb.PingRequest{Payload: []byte("x")}, nil, &pb.PingResponse{}, nil); err != nil {
						return
					}
				}
			}()
		}
		// Let the clients get going (polling the served-calls counter), then close mid-traffic.
		deadline := time.Now().Add(10 * time.Second)
		for s.Calls.Load() < 50 && time.Now().Before(deadline) {
			time.Sleep(time.Millisecond)
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		after.Lock()
		closed = true
		after.Unlock()
		close(stop)
		running.Wait()
		if err := <-served; err != nil {
			t.Fatalf("Serve: %v", err)
		}
	}
}

// An error text holding bytes that are not UTF-8 (a handler that formatted a raw key) still
// reaches the client, with those bytes escaped — protobuf strings must be UTF-8, and before the
// fix the client got the encoder's complaint instead of the message.
func TestErrorTextWithRawBytesIsEscaped(t *testing.T) {
	_, addr := start(t, map[uint32]Handler{
		uint32(pb.Method_METHOD_GET): func(_ context.Context, c *Call) {
			c.Fail(&pb.ErrorDetail{Code: pb.ErrorCode_ERROR_CODE_INVALID_ARGUMENT, Message: "row caf\xe9 / café: no such family"})
		},
	})
	c := dial(t, addr)
	_, err := c.Call(context.Background(), pb.Method_METHOD_GET, &pb.GetRequest{}, nil, &pb.GetResponse{}, nil)
	var re *pb.ErrorDetail
	if !errors.As(err, &re) || re.GetCode() != pb.ErrorCode_ERROR_CODE_INVALID_ARGUMENT {
		t.Fatalf("want INVALID_ARGUMENT, got %v", err)
	}
	if want := `row caf\xe9 / café: no such family`; re.GetMessage() != want {
		t.Fatalf("message %q, want %q", re.GetMessage(), want)
	}
}

// Request hands a handler the foreign protocol's decoded request as is, decodes the lean
// protocol's bytes, and refuses a decoded request of another type.
func TestRequest(t *testing.T) {
	get := &pb.GetRequest{Region: &pb.RegionSpecifier{Name: "r"}}
	if got, err := Request[pb.GetRequest](&Call{decoded: get}); err != nil || got != get {
		t.Fatalf("decoded: %v, %v", got, err)
	}
	b, _ := proto.Marshal(get)
	if got, err := Request[pb.GetRequest](&Call{Message: b}); err != nil || got.GetRegion().GetName() != "r" {
		t.Fatalf("encoded: %v, %v", got, err)
	}
	if _, err := Request[pb.ScanRequest](&Call{decoded: get}); err == nil {
		t.Fatal("a GetRequest was handed to a ScanRequest's handler")
	}
}
