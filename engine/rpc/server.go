package rpc

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/protobuf/proto"

	pb "github.com/cellstore/cellstore/engine/api/cellstore/v1"
)

// Handler serves one call. It must end the call with exactly one of Call.Reply or Call.Fail, and
// must not keep Call.Message or Call.Cells after that: they live in a reused buffer.
type Handler func(ctx context.Context, c *Call)

// ServerOptions tune a Server.
type ServerOptions struct {
	// MaxFrame bounds a request frame; larger ones close the connection. Default DefaultMaxFrame.
	MaxFrame int
	// Logger for connection errors. Default slog.Default().
	Logger *slog.Logger
}

// Server serves the data-path protocol on a listener.
type Server struct {
	opts     ServerOptions
	handlers map[uint32]Handler

	mu       sync.Mutex
	lis      []net.Listener
	conns    map[*serverConn]struct{}
	closed   bool
	inFlight sync.WaitGroup

	// Calls counts served calls (for metrics).
	Calls atomic.Int64

	// work hands calls to idle handler goroutines (see dispatch).
	work chan task
	quit chan struct{} // closed by Close: idle handler goroutines exit
}

// task is a call for a handler goroutine.
type task struct {
	conn      *serverConn
	handler   Handler
	call      *Call
	timeoutMS uint32
}

// workerIdle is how long a handler goroutine waits for another call before it exits.
const workerIdle = 5 * time.Second

// dispatch runs a call on an idle handler goroutine, or on a new one when none is idle. Handler
// goroutines are kept for a while after a call because a new goroutine starts with a small stack
// and a handler's first call grows it by copying, several times (a fifth of the server's CPU in a
// random-read profile when each call had a goroutine of its own).
func (s *Server) dispatch(t task) {
	select {
	case s.work <- t:
	default:
		go s.worker(t)
	}
}

func (s *Server) worker(t task) {
	idle := time.NewTimer(workerIdle)
	defer idle.Stop()
	for {
		t.conn.run(t.handler, t.call, t.timeoutMS)
		t = task{}
		idle.Reset(workerIdle)
		select {
		case t = <-s.work:
		case <-idle.C:
			return
		case <-s.quit:
			return
		}
	}
}

// NewServer makes a server with the given handlers, by method number.
func NewServer(handlers map[uint32]Handler, opts ServerOptions) *Server {
	if opts.MaxFrame <= 0 {
		opts.MaxFrame = DefaultMaxFrame
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	return &Server{opts: opts, handlers: handlers, conns: map[*serverConn]struct{}{}, work: make(chan task), quit: make(chan struct{})}
}

// Serve accepts connections until the listener is closed or the server stops. It returns nil after
// Close.
func (s *Server) Serve(lis net.Listener) error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return errors.New("rpc: server closed")
	}
	s.lis = append(s.lis, lis)
	s.mu.Unlock()
	for {
		nc, err := lis.Accept()
		if err != nil {
			s.mu.Lock()
			closed := s.closed
			s.mu.Unlock()
			if closed {
				return nil
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				continue
			}
			return err
		}
		if tc, ok := nc.(*net.TCPConn); ok {
			_ = tc.SetNoDelay(true)
		}
		c := &serverConn{srv: s, nc: nc}
		s.mu.Lock()
		if s.closed {
			s.mu.Unlock()
			nc.Close()
			return nil
		}
		s.conns[c] = struct{}{}
		// The connection counts as in flight until its goroutine ends, so
		// the calls it starts add to a count above zero and Close's Wait
		// never races a first Add.
		s.inFlight.Add(1)
		s.mu.Unlock()
		go c.serve()
	}
}

// Close stops accepting, closes every connection and waits for running handlers and connection
// goroutines to return.
func (s *Server) Close() error {
	s.mu.Lock()
	if !s.closed {
		close(s.quit)
	}
	s.closed = true
	for _, l := range s.lis {
		l.Close()
	}
	for c := range s.conns {
		c.nc.Close()
	}
	s.mu.Unlock()
	s.inFlight.Wait()
	return nil
}

// Call is one request being served.
type Call struct {
	// Method is the request's method number.
	Method uint32
	// Message is the request message, still encoded: unmarshal it into the method's type.
	Message []byte
	// Cells is the request's cell block.
	Cells []byte
	// User is what the client presented in its connection header.
	User string

	conn   *serverConn
	id     uint64
	buf    []byte
	cancel context.CancelFunc
	done   bool
}

var callPool = sync.Pool{New: func() any { return &Call{} }}

// Reply sends the response message and cell blocks and ends the call.
func (c *Call) Reply(msg proto.Message, cells ...[]byte) {
	if c.done {
		panic("rpc: call answered twice")
	}
	c.done = true
	c.conn.send(c.id, nil, msg, cells)
}

// Fail sends an error and ends the call.
func (c *Call) Fail(d *pb.ErrorDetail) {
	if c.done {
		panic("rpc: call answered twice")
	}
	c.done = true
	c.conn.send(c.id, marshalError(d), nil, nil)
}

type serverConn struct {
	srv  *Server
	nc   net.Conn
	user string

	wmu     sync.Mutex
	out     []byte // frames waiting to be written
	spare   []byte
	writing bool
	werr    error
}

func (c *serverConn) serve() {
	defer func() {
		c.nc.Close()
		c.srv.mu.Lock()
		delete(c.srv.conns, c)
		c.srv.mu.Unlock()
		c.srv.inFlight.Done()
	}()
	r := bufio.NewReaderSize(c.nc, 64<<10)
	if err := c.handshake(r); err != nil {
		c.srv.opts.Logger.Debug("rpc: handshake failed", "remote", c.nc.RemoteAddr(), "err", err)
		return
	}
	for {
		call := callPool.Get().(*Call)
		var err error
		call.buf, err = readFrame(r, call.buf[:0], c.srv.opts.MaxFrame)
		if err != nil {
			callPool.Put(call)
			if !errors.Is(err, io.EOF) && !errors.Is(err, net.ErrClosed) {
				c.srv.opts.Logger.Debug("rpc: connection closed", "remote", c.nc.RemoteAddr(), "err", err)
			}
			return
		}
		f, err := splitFrame(call.buf)
		var h header
		if err == nil {
			h, err = parseHeader(f.header, true)
		}
		if err != nil {
			// The stream cannot be trusted after a malformed frame.
			c.srv.opts.Logger.Warn("rpc: malformed request; closing connection", "remote", c.nc.RemoteAddr(), "err", err)
			callPool.Put(call)
			return
		}
		call.Method, call.Message, call.Cells, call.User = h.method, f.msg, f.cells, c.user
		call.conn, call.id, call.done = c, h.callID, false
		handler := c.srv.handlers[h.method]
		if handler == nil {
			call.Fail(&pb.ErrorDetail{Code: pb.ErrorCode_ERROR_CODE_INVALID_ARGUMENT,
				Message: fmt.Sprintf("unknown method %d: the server is older than the client or the request is malformed", h.method)})
			c.release(call)
			continue
		}
		c.srv.inFlight.Add(1)
		c.srv.dispatch(task{conn: c, handler: handler, call: call, timeoutMS: h.timeoutMS})
	}
}

func (c *serverConn) run(handler Handler, call *Call, timeoutMS uint32) {
	defer c.srv.inFlight.Done()
	ctx := context.Background()
	if timeoutMS > 0 {
		ctx, call.cancel = context.WithTimeout(ctx, time.Duration(timeoutMS)*time.Millisecond)
	}
	c.srv.Calls.Add(1) // before the reply, so a client that has its answer sees it counted
	handler(ctx, call)
	if !call.done {
		call.Fail(&pb.ErrorDetail{Code: pb.ErrorCode_ERROR_CODE_UNKNOWN, Message: "server error: the handler returned no answer"})
	}
	c.release(call)
}

func (c *serverConn) release(call *Call) {
	if call.cancel != nil {
		call.cancel()
		call.cancel = nil
	}
	call.Message, call.Cells, call.conn = nil, nil, nil
	if cap(call.buf) > 1<<20 { // do not pin big buffers in the pool
		call.buf = nil
	}
	callPool.Put(call)
}

func (c *serverConn) handshake(r *bufio.Reader) error {
	_ = c.nc.SetReadDeadline(time.Now().Add(10 * time.Second))
	defer c.nc.SetReadDeadline(time.Time{})
	var pre [len(Preamble)]byte
	if _, err := io.ReadFull(r, pre[:]); err != nil {
		return err
	}
	if pre != Preamble {
		return fmt.Errorf("bad preamble %q: not a Cellstore data-path client, or an incompatible version", pre[:])
	}
	buf, err := readFrame(r, nil, 64<<10)
	if err != nil {
		return err
	}
	f, err := splitFrame(buf)
	if err != nil {
		return err
	}
	var ch pb.ConnectionHeader
	if err := proto.Unmarshal(f.msg, &ch); err != nil {
		return fmt.Errorf("bad connection header: %w", err)
	}
	c.user = ch.User
	return nil
}

// send queues a response frame and writes the queue unless another goroutine is already writing:
// concurrent responses share write system calls.
func (c *serverConn) send(callID uint64, errDetail []byte, msg proto.Message, cells [][]byte) {
	var hdr [32]byte
	h := appendResponseHeader(hdr[:0], callID, errDetail)
	c.wmu.Lock()
	var err error
	c.out, err = appendFrame(c.out, h, msg, nil, cells...)
	if err != nil {
		c.wmu.Unlock()
		c.send(callID, marshalError(&pb.ErrorDetail{Code: pb.ErrorCode_ERROR_CODE_UNKNOWN, Message: "server error: " + err.Error()}), nil, nil)
		return
	}
	writeQueued(&c.wmu, &c.out, &c.spare, &c.writing, &c.werr, c.nc)
}

// writeQueued writes *out until it is empty, releasing mu while in the system call. Called with mu
// held; returns with it released. Only one goroutine writes at a time (*writing).
func writeQueued(mu *sync.Mutex, out, spare *[]byte, writing *bool, werr *error, w io.Writer) {
	if *writing {
		mu.Unlock()
		return
	}
	*writing = true
	for len(*out) > 0 && *werr == nil {
		buf := *out
		*out = (*spare)[:0]
		mu.Unlock()
		_, err := w.Write(buf)
		mu.Lock()
		if err != nil {
			*werr = err
		}
		if cap(buf) <= 4<<20 {
			*spare = buf[:0]
		} else {
			*spare = nil
		}
	}
	if *werr != nil {
		*out = (*out)[:0]
	}
	*writing = false
	mu.Unlock()
}
