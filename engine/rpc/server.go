package rpc

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/protobuf/proto"

	pb "github.com/cellstore/cellstore/engine/api/cellstore/v1"
	"github.com/cellstore/cellstore/engine/security"
)

// Handler serves one call. It must end the call with exactly one of Call.Reply or Call.Fail, and
// must not keep Call.Message or Call.Cells after that: they live in a reused buffer.
type Handler func(ctx context.Context, c *Call)

// ServerOptions tune a Server. Zero values take the defaults below; together they bound what a
// client can make the server hold (docs/regionserver.md, "Admission control"): request bytes in
// flight server-wide, calls in flight and unsent answers per connection, connections, and how long a
// connection may idle or dribble a frame.
type ServerOptions struct {
	// MaxFrame bounds a request frame, checked from its length before the body is read: a larger
	// request is answered with an error naming the limit and the connection is closed (its body
	// is never read). Default DefaultMaxFrame, and never more than MaxQueuedBytes.
	MaxFrame int
	// MaxQueuedBytes bounds the server's request bytes read and not yet answered plus answer bytes
	// not yet sent, over all connections: while it is reached no connection reads another request
	// (backpressure through TCP; nothing is buffered). Default DefaultMaxQueuedBytes.
	MaxQueuedBytes int64
	// MaxInFlightPerConn bounds one connection's calls read and not yet answered on the wire
	// (being served, or their answers waiting for the client to read them); a pipelining client
	// beyond it waits in its socket. Default DefaultMaxInFlightPerConn.
	MaxInFlightPerConn int
	// MaxConnOutput bounds a connection's answer bytes not yet taken by its client: past it the
	// connection's requests are not read until the client reads. Default DefaultMaxConnOutput.
	MaxConnOutput int
	// MaxConns bounds open connections; one more is answered with TOO_BUSY and closed. Default
	// DefaultMaxConns.
	MaxConns int
	// IdleTimeout closes a connection that has no call in flight and sent nothing for this long
	// (clients reconnect on their next call). Default 10 minutes.
	IdleTimeout time.Duration
	// ReadTimeout bounds the handshake and reading one frame once its first byte arrived.
	// WriteTimeout bounds one write of answers to a client that does not read them; past it the
	// connection is closed. Defaults 60 s.
	ReadTimeout, WriteTimeout time.Duration
	// Logger for connection errors. Default slog.Default().
	Logger *slog.Logger
	// TLS, when set, makes every connection TLS 1.3 with this certificate (read again when its
	// files change); a client certificate, when given, is checked against its CA.
	TLS *security.Certs
	// Auth decides who each connection acts as (Call.User); a connection it refuses has its
	// first call answered UNAUTHENTICATED and is closed. Nil: security off, users as named.
	Auth *security.Authenticator
	// Foreign, when set, serves the connections that open with its protocol's preamble instead
	// of Preamble (see ForeignProtocol).
	Foreign ForeignProtocol
}

// Defaults of ServerOptions.
const (
	DefaultMaxQueuedBytes     = 256 << 20
	DefaultMaxInFlightPerConn = 64
	DefaultMaxConnOutput      = 8 << 20
	DefaultMaxConns           = 4096
	DefaultIdleTimeout        = 10 * time.Minute
	DefaultIOTimeout          = time.Minute
)

// maxRefusing bounds the connections being refused at once (each is answered, then closed).
const maxRefusing = 64

// Stats are a server's admission counters, for metrics.
type Stats struct {
	Conns          int   // open connections
	QueuedBytes    int64 // request bytes in flight and answer bytes unsent
	RefusedConns   int64 // connections refused at the MaxConns limit
	TooLarge       int64 // requests refused at MaxFrame
	IdleClosed     int64 // connections closed by IdleTimeout
	Timeouts       int64 // connections closed by ReadTimeout or WriteTimeout
	AcceptErrors   int64 // failed accepts (retried with backoff)
	ThrottledReads int64 // times a connection's reading paused for a bound
	// Unauthenticated counts connections refused because they proved no identity (or a wrong
	// one), TLS handshakes that failed included.
	Unauthenticated int64
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

	queue    byteQueue
	refusing atomic.Int32
	serving  atomic.Int32 // Serve loops running
	// acceptFailing is the unix nanos since when accepts have failed without a success (0: not).
	acceptFailing atomic.Int64
	acceptErr     atomic.Pointer[error]
	stopped       atomic.Pointer[error] // why a Serve loop ended other than by Close

	refused, tooLarge, idleClosed, timeouts, acceptErrors, throttled, unauthenticated atomic.Int64

	// maxConns and idleTimeout are opts.MaxConns and opts.IdleTimeout, which change while the
	// server runs (SetMaxConns, SetIdleTimeout).
	maxConns, idleTimeout atomic.Int64

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

// SetMaxConns changes the connection limit (ServerOptions.MaxConns); connections already open
// over a lower limit stay.
func (s *Server) SetMaxConns(n int) { s.maxConns.Store(int64(max(n, 1))) }

// SetIdleTimeout changes ServerOptions.IdleTimeout; a connection waiting for its next frame
// uses the new value from its next wait.
func (s *Server) SetIdleTimeout(d time.Duration) {
	s.idleTimeout.Store(int64(max(d, time.Millisecond)))
}

// NewServer makes a server with the given handlers, by method number.
func NewServer(handlers map[uint32]Handler, opts ServerOptions) *Server {
	orDefault(&opts.MaxQueuedBytes, DefaultMaxQueuedBytes)
	orDefault(&opts.MaxFrame, DefaultMaxFrame)
	opts.MaxFrame = int(min(int64(opts.MaxFrame), opts.MaxQueuedBytes))
	orDefault(&opts.MaxInFlightPerConn, DefaultMaxInFlightPerConn)
	orDefault(&opts.MaxConnOutput, DefaultMaxConnOutput)
	orDefault(&opts.MaxConns, DefaultMaxConns)
	orDefault(&opts.IdleTimeout, DefaultIdleTimeout)
	orDefault(&opts.ReadTimeout, DefaultIOTimeout)
	orDefault(&opts.WriteTimeout, DefaultIOTimeout)
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	s := &Server{opts: opts, handlers: handlers, conns: map[*serverConn]struct{}{}, work: make(chan task), quit: make(chan struct{})}
	s.queue.max = opts.MaxQueuedBytes
	s.queue.cond.L = &s.queue.mu
	s.maxConns.Store(int64(opts.MaxConns))
	s.idleTimeout.Store(int64(opts.IdleTimeout))
	if opts.Auth != nil && opts.Auth.Tokens != nil {
		go s.checkTokens(opts.Auth.Tokens)
	}
	return s
}

// orDefault sets *v to d unless it is positive.
func orDefault[T int | int64 | time.Duration](v *T, d T) {
	if *v <= 0 {
		*v = d
	}
}

// Options are the server's options with the defaults filled in.
func (s *Server) Options() ServerOptions { return s.opts }

// Stats returns the admission counters.
func (s *Server) Stats() Stats {
	s.mu.Lock()
	n := len(s.conns)
	s.mu.Unlock()
	return Stats{Conns: n, QueuedBytes: s.queue.load(), RefusedConns: s.refused.Load(), TooLarge: s.tooLarge.Load(),
		IdleClosed: s.idleClosed.Load(), Timeouts: s.timeouts.Load(), AcceptErrors: s.acceptErrors.Load(),
		ThrottledReads: s.throttled.Load(), Unauthenticated: s.unauthenticated.Load()}
}

// acceptFailingFor is how long accepts may fail in a row before Healthy reports it.
const acceptFailingFor = 5 * time.Second

// Healthy is nil while the server accepts and serves connections: an error when no Serve loop
// runs (it was never started, or ended with an error) or accepts have failed without a success
// for a while (file descriptors exhausted, say). Readiness checks use it.
func (s *Server) Healthy() error {
	if err := s.stopped.Load(); err != nil {
		return fmt.Errorf("data port stopped serving: %w", *err)
	}
	if s.serving.Load() == 0 {
		return errors.New("data port is not serving")
	}
	if since := s.acceptFailing.Load(); since != 0 && time.Since(time.Unix(0, since)) > acceptFailingFor {
		err := errors.New("unknown error")
		if e := s.acceptErr.Load(); e != nil {
			err = *e
		}
		return fmt.Errorf("data port: accepting connections has failed for %s: %w", time.Since(time.Unix(0, since)).Round(time.Second), err)
	}
	return nil
}

// Serve accepts connections until the listener is closed or the server stops. It returns nil after
// Close. A failed accept (too many open files, say) is retried after a backoff of 5 ms doubling to
// 1 s, as net/http does; Serve ends with an error only when the listener was closed by someone
// other than Close, and Healthy then says so.
func (s *Server) Serve(lis net.Listener) error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return errors.New("rpc: server closed")
	}
	s.lis = append(s.lis, lis)
	s.mu.Unlock()
	s.serving.Add(1)
	defer s.serving.Add(-1)
	var delay time.Duration
	for {
		nc, err := lis.Accept()
		if err != nil {
			s.mu.Lock()
			closed := s.closed
			s.mu.Unlock()
			if closed {
				return nil
			}
			if errors.Is(err, net.ErrClosed) {
				err = fmt.Errorf("rpc: listener %s closed: %w", lis.Addr(), err)
				s.stopped.Store(&err)
				s.opts.Logger.Error("rpc: data port stopped serving", "addr", lis.Addr().String(), "err", err)
				return err
			}
			s.acceptErrors.Add(1)
			s.acceptErr.Store(&err)
			s.acceptFailing.CompareAndSwap(0, time.Now().UnixNano())
			delay = min(max(2*delay, 5*time.Millisecond), time.Second)
			s.opts.Logger.Warn("rpc: accept failed; retrying", "addr", lis.Addr().String(), "err", err, "retry_in", delay)
			select {
			case <-time.After(delay):
			case <-s.quit:
				return nil
			}
			continue
		}
		delay = 0
		s.acceptFailing.Store(0)
		if tc, ok := nc.(*net.TCPConn); ok {
			_ = tc.SetNoDelay(true)
		}
		var tlsConfig *tls.Config
		if s.opts.TLS != nil {
			// The handshake itself runs on the connection's goroutine (handshake), bounded by
			// the read timeout.
			cfg, err := s.opts.TLS.ServerConfig(tls.VerifyClientCertIfGiven)
			if err != nil {
				s.opts.Logger.Error("rpc: no TLS configuration; closing the connection", "err", err)
				nc.Close()
				continue
			}
			if s.opts.Foreign == nil {
				nc = tls.Server(nc, cfg)
			} else {
				tlsConfig = cfg // the connection's goroutine looks at its first bytes (startTLS)
			}
		}
		c := &serverConn{srv: s, nc: nc, tlsConfig: tlsConfig}
		c.cond.L = &c.mu
		s.mu.Lock()
		if s.closed {
			s.mu.Unlock()
			nc.Close()
			return nil
		}
		if len(s.conns) >= int(s.maxConns.Load()) {
			s.mu.Unlock()
			if tlsConfig != nil {
				nc = tls.Server(nc, tlsConfig)
			}
			s.refuse(nc)
			continue
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

// refuse answers a connection over MaxConns: its first call gets TOO_BUSY (retryable, so the
// client backs off and tries again) and the connection is closed. At most maxRefusing are being
// answered at once; beyond that a connection is closed at once.
func (s *Server) refuse(nc net.Conn) {
	s.refused.Add(1)
	if s.refusing.Add(1) > maxRefusing {
		s.refusing.Add(-1)
		nc.Close()
		return
	}
	s.opts.Logger.Warn("rpc: connection limit reached; refusing a connection", "remote", nc.RemoteAddr(), "limit", s.maxConns.Load())
	go func() {
		defer s.refusing.Add(-1)
		c := &serverConn{srv: s, nc: nc}
		c.cond.L = &c.mu
		_ = nc.SetDeadline(time.Now().Add(5 * time.Second))
		r := bufio.NewReaderSize(nc, 4<<10)
		var lenBuf [4]byte
		if c.handshake(r) == nil {
			if _, err := io.ReadFull(r, lenBuf[:]); err != nil {
				nc.Close()
				return
			}
			if id, err := readCallPrefix(io.LimitReader(r, int64(binary.BigEndian.Uint32(lenBuf[:])))); err == nil {
				c.failAndClose(id, &pb.ErrorDetail{Code: pb.ErrorCode_ERROR_CODE_TOO_BUSY, Retryable: true, RetryAfterMs: 1000,
					Message: fmt.Sprintf("server has reached its limit of %d connections; retry later, close idle clients or raise the limit", s.maxConns.Load())})
			}
		}
		nc.Close()
	}()
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
		c.close()
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
	// User is who the connection acts as: the user its client certificate or token proves, or
	// with security off the one its connection header names.
	User string
	// Groups are the user's groups (from its certificate or token; none when declared).
	Groups []string

	conn   *serverConn
	id     uint64
	buf    []byte
	held   int64 // bytes of the server's queue this call's request holds
	cancel context.CancelFunc
	done   bool
	// respond answers a call of a foreign protocol (ForeignConn.Call) instead of conn.
	respond Reply
	// decoded is a foreign protocol's request, handed over decoded (Request returns it).
	decoded proto.Message
}

// Request returns the call's request message, M being *T for the method's request type: the
// message a foreign protocol handed over decoded (ForeignConn.Call), or Message unmarshalled into
// a new T. Handlers read their request this way, so that the foreign protocol's calls skip an
// encoding and a decoding.
func Request[T any, M interface {
	*T
	proto.Message
}](c *Call) (M, error) {
	if c.decoded != nil {
		m, ok := c.decoded.(M)
		if !ok {
			return nil, fmt.Errorf("rpc: a request of type %T handed to the handler of %T", c.decoded, M(nil))
		}
		return m, nil
	}
	m := M(new(T))
	return m, proto.Unmarshal(c.Message, m)
}

var callPool = sync.Pool{New: func() any { return &Call{} }}

// Reply sends the response message and cell blocks and ends the call.
func (c *Call) Reply(msg proto.Message, cells ...[]byte) {
	if c.done {
		panic("rpc: call answered twice")
	}
	c.done = true
	if c.respond != nil {
		c.respond(msg, nil, cells)
		return
	}
	c.conn.send(c.id, nil, msg, cells)
}

// Fail sends an error and ends the call.
func (c *Call) Fail(d *pb.ErrorDetail) {
	if c.done {
		panic("rpc: call answered twice")
	}
	c.done = true
	if c.respond != nil {
		c.respond(nil, d, nil)
		return
	}
	c.conn.send(c.id, marshalError(d), nil, nil)
}

type serverConn struct {
	srv *Server
	nc  net.Conn
	// tlsConfig: TLS still to start (startTLS), when the server serves a foreign protocol.
	tlsConfig *tls.Config
	// plaintextOnTLS: a foreign protocol's client that did not start TLS on a TLS port.
	plaintextOnTLS bool
	id             security.Identity
	// token is what the connection authenticated with (empty: none): checked again when the
	// token file changes (checkTokens).
	token string
	// tokenGen is the token file's generation the connection's identity was last checked at.
	tokenGen uint64

	// Admission: calls read and not yet answered on the wire, and answer bytes not yet written
	// (under mu; the reader waits on cond for room). A call counts until its answer is written,
	// so a client that does not read has at most MaxInFlightPerConn answers waiting.
	mu       sync.Mutex
	cond     sync.Cond
	calls    int
	unsent   int
	isClosed bool

	wmu      sync.Mutex
	out      []byte // frames waiting to be written
	outCalls int    // answers in out
	spare    []byte
	writing  bool
	werr     error
}

// close closes the connection and wakes its reader wherever it waits.
func (c *serverConn) close() {
	c.mu.Lock()
	c.isClosed = true
	nc := c.nc // (startTLS replaces it under mu)
	c.mu.Unlock()
	c.cond.Broadcast()
	nc.Close()
	c.srv.queue.wake()
}

func (c *serverConn) gone() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.isClosed
}

// waitRoom waits until the connection may read another request: fewer than MaxInFlightPerConn
// calls being served and at most MaxConnOutput answer bytes unsent. False once it closed.
func (c *serverConn) waitRoom() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	counted := false
	for !c.isClosed && (c.calls >= c.srv.opts.MaxInFlightPerConn || c.unsent > c.srv.opts.MaxConnOutput) {
		if !counted {
			c.srv.throttled.Add(1)
			counted = true
		}
		c.cond.Wait()
	}
	return !c.isClosed
}

func (c *serverConn) inFlight() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.calls
}

func (c *serverConn) serve() {
	defer func() {
		c.close()
		c.srv.mu.Lock()
		delete(c.srv.conns, c)
		c.srv.mu.Unlock()
		c.srv.inFlight.Done()
	}()
	opts := &c.srv.opts
	_ = c.nc.SetReadDeadline(time.Now().Add(min(opts.ReadTimeout, 10*time.Second)))
	if c.tlsConfig != nil {
		if pr := c.startTLS(); pr != nil {
			c.plaintextOnTLS = true
			c.serveForeign(pr)
			return
		}
	}
	r := bufio.NewReaderSize(c.nc, 64<<10)
	if err := c.handshake(r); err != nil {
		if errors.Is(err, errForeign) {
			c.serveForeign(r)
			return
		}
		var ae authError
		if errors.As(err, &ae) || isTLSRefusal(err) {
			c.srv.unauthenticated.Add(1)
			opts.Logger.Info("rpc: refused a connection that proves no identity", "remote", c.nc.RemoteAddr(), "err", err)
		} else {
			opts.Logger.Debug("rpc: handshake failed", "remote", c.nc.RemoteAddr(), "err", err)
		}
		if errors.As(err, &ae) {
			c.refuseFirstCall(r, &pb.ErrorDetail{Code: pb.ErrorCode_ERROR_CODE_UNAUTHENTICATED, Message: ae.Error()})
		}
		return
	}
	for {
		if !c.waitRoom() {
			return
		}
		// Wait for the next frame; a connection with nothing in flight that stays quiet for the
		// idle timeout is closed. Peek consumes nothing, so a timeout loses no byte.
		idle := time.Duration(c.srv.idleTimeout.Load())
		_ = c.nc.SetReadDeadline(time.Now().Add(idle))
		if _, err := r.Peek(4); err != nil {
			if isTimeout(err) {
				if c.inFlight() > 0 {
					continue
				}
				c.srv.idleClosed.Add(1)
				opts.Logger.Debug("rpc: closing idle connection", "remote", c.nc.RemoteAddr(), "idle", idle)
			} else if !errors.Is(err, io.EOF) && !errors.Is(err, net.ErrClosed) {
				opts.Logger.Debug("rpc: connection closed", "remote", c.nc.RemoteAddr(), "err", err)
			}
			return
		}
		var lenBuf [4]byte
		_, _ = io.ReadFull(r, lenBuf[:]) // buffered by Peek
		n := int64(binary.BigEndian.Uint32(lenBuf[:]))
		if n > int64(opts.MaxFrame) {
			c.srv.tooLarge.Add(1)
			_ = c.nc.SetReadDeadline(time.Now().Add(opts.ReadTimeout)) // (readBody sets its own)
			id, err := readCallPrefix(io.LimitReader(r, n))
			if err != nil {
				opts.Logger.Warn("rpc: request too large and malformed; closing connection", "remote", c.nc.RemoteAddr(), "bytes", n, "err", err)
				return
			}
			opts.Logger.Warn("rpc: request too large; refusing it and closing the connection", "remote", c.nc.RemoteAddr(), "bytes", n, "limit", opts.MaxFrame)
			c.failAndClose(id, &pb.ErrorDetail{Code: pb.ErrorCode_ERROR_CODE_INVALID_ARGUMENT,
				Message: fmt.Sprintf("request of %d bytes exceeds the server's limit of %d bytes; send smaller batches or values", n, opts.MaxFrame)})
			return
		}
		// The body's bytes are admitted into the server's queue as they arrive: while there is no
		// room, this connection's bytes wait in the kernel and the client's writes block.
		call := callPool.Get().(*Call)
		var err error
		if call.buf, err = c.srv.readBody(c, r, n, call.buf); err != nil {
			putCall(call)
			if isTimeout(err) {
				c.srv.timeouts.Add(1)
				opts.Logger.Warn("rpc: request not received within the read timeout; closing connection", "remote", c.nc.RemoteAddr(), "bytes", n, "timeout", opts.ReadTimeout)
			} else if !errors.Is(err, net.ErrClosed) {
				opts.Logger.Debug("rpc: connection closed mid-request", "remote", c.nc.RemoteAddr(), "err", err)
			}
			return
		}
		call.held = n
		f, err := splitFrame(call.buf)
		var h header
		if err == nil {
			h, err = parseHeader(f.header, true)
		}
		if err != nil {
			// The stream cannot be trusted after a malformed frame.
			opts.Logger.Warn("rpc: malformed request; closing connection", "remote", c.nc.RemoteAddr(), "err", err)
			c.srv.queue.release(call.held)
			call.held = 0
			putCall(call)
			return
		}
		call.Method, call.Message, call.Cells, call.User, call.Groups = h.method, f.msg, f.cells, c.id.User, c.id.Groups
		call.conn, call.id, call.done = c, h.callID, false
		c.mu.Lock()
		c.calls++
		c.mu.Unlock()
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

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// readCallPrefix reads the start of a frame body (after its length) far enough to know the call
// id, for answering a request whose body is not read.
func readCallPrefix(r io.Reader) (callID uint64, err error) {
	var hl [binary.MaxVarintLen64]byte
	i := 0
	for ; i < len(hl); i++ {
		if _, err := io.ReadFull(r, hl[i:i+1]); err != nil {
			return 0, err
		}
		if hl[i] < 0x80 {
			break
		}
	}
	if i == len(hl) {
		return 0, errors.New("bad header length")
	}
	n, k := binary.Uvarint(hl[:i+1])
	if k <= 0 || n > 1<<10 {
		return 0, errors.New("bad header length")
	}
	hdr := make([]byte, n)
	if _, err := io.ReadFull(r, hdr); err != nil {
		return 0, err
	}
	h, err := parseHeader(hdr, true)
	return h.callID, err
}

// failAndClose answers one call with an error and closes the connection gracefully: the answer
// is written, the write side shut, and what the client still sends is read (briefly) so the
// close does not reset the connection before the client has read the answer.
func (c *serverConn) failAndClose(callID uint64, d *pb.ErrorDetail) {
	var hdr [32]byte
	b, _ := appendFrame(nil, appendResponseHeader(hdr[:0], callID, marshalError(d)), nil, nil)
	c.wmu.Lock()
	defer c.wmu.Unlock()
	_ = c.nc.SetWriteDeadline(time.Now().Add(c.srv.opts.WriteTimeout))
	if _, err := c.nc.Write(b); err != nil {
		return
	}
	c.halfClose()
}

// halfClose half-closes the connection and drains what the client already sent, so that it
// reads the last answer rather than a reset (a TLS connection sends close_notify first).
func (c *serverConn) halfClose() {
	if cw, ok := c.nc.(interface{ CloseWrite() error }); ok {
		_ = cw.CloseWrite()
		_ = c.nc.SetReadDeadline(time.Now().Add(time.Second))
		_, _ = io.CopyN(io.Discard, c.nc, 4<<20)
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

// release ends a served call's request: its bytes leave the server's queue (the call itself
// counts against the connection until its answer is written).
func (c *serverConn) release(call *Call) {
	if call.cancel != nil {
		call.cancel()
		call.cancel = nil
	}
	c.srv.queue.release(call.held)
	call.held = 0
	call.Message, call.Cells, call.conn, call.respond, call.decoded = nil, nil, nil, nil, nil
	putCall(call)
}

// putCall gives a call back to the pool, without its buffer if that is big (not to pin it).
func putCall(call *Call) {
	if cap(call.buf) > 1<<20 {
		call.buf = nil
	}
	callPool.Put(call)
}

// authError is a handshake that proved no identity.
type authError struct{ error }

// isTLSRefusal says whether err is a TLS handshake the server failed for the client's
// certificate (unknown CA, expired), not for the network.
func isTLSRefusal(err error) bool {
	var ce *tls.CertificateVerificationError
	return errors.As(err, &ce)
}

// refuseFirstCall answers the connection's first call with d and closes it (the client wrote its
// first call without waiting for the handshake's outcome).
func (c *serverConn) refuseFirstCall(r *bufio.Reader, d *pb.ErrorDetail) {
	var lenBuf [4]byte
	_ = c.nc.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.ReadFull(r, lenBuf[:]); err != nil {
		return
	}
	if id, err := readCallPrefix(io.LimitReader(r, int64(binary.BigEndian.Uint32(lenBuf[:])))); err == nil {
		c.failAndClose(id, d)
	}
}

// startTLS makes the connection TLS, unless its first bytes open the foreign protocol in
// plaintext (an HBase client not configured for TLS): that connection is returned, to be handed
// to the protocol, which refuses it with its own error rather than leave the client with a
// broken handshake to retry.
func (c *serverConn) startTLS() *bufio.Reader {
	pr := bufio.NewReaderSize(c.nc, len(Preamble))
	first, _ := pr.Peek(len(Preamble))
	const tlsHandshakeRecord = 0x16
	if len(first) > 0 && first[0] != tlsHandshakeRecord && c.srv.opts.Foreign.Accepts(first) {
		return pr
	}
	tc := tls.Server(&peekedConn{Conn: c.nc, r: pr}, c.tlsConfig)
	c.mu.Lock() // close may run meanwhile (the server closing): it closes the connection below
	c.nc = tc
	c.mu.Unlock()
	c.tlsConfig = nil
	return nil
}

// peekedConn reads what was peeked before the rest of the connection.
type peekedConn struct {
	net.Conn
	r *bufio.Reader
}

func (p *peekedConn) Read(b []byte) (int, error) { return p.r.Read(b) }

// NetConn returns the connection underneath (pendingBytes reads the socket's count of arrived bytes).
func (p *peekedConn) NetConn() net.Conn { return p.Conn }

func (c *serverConn) handshake(r *bufio.Reader) error {
	var cs *tls.ConnectionState
	if tc, ok := c.nc.(*tls.Conn); ok {
		_ = tc.SetWriteDeadline(time.Now().Add(c.srv.opts.ReadTimeout))
		if err := tc.Handshake(); err != nil {
			return err
		}
		_ = tc.SetWriteDeadline(time.Time{})
		st := tc.ConnectionState()
		cs = &st
	}
	pre, err := r.Peek(len(Preamble))
	if err != nil {
		return err
	}
	if !bytes.Equal(pre, Preamble[:]) {
		if f := c.srv.opts.Foreign; f != nil && f.Accepts(pre) {
			return errForeign
		}
		return fmt.Errorf("bad preamble %q: not a Cellstore data-path client, or an incompatible version", pre)
	}
	_, _ = r.Discard(len(Preamble))
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
	// The token file's generation before the lookup: a reload meanwhile is checked again by
	// checkTokens (the lookup may have read the file before it).
	var gen uint64
	if a := c.srv.opts.Auth; a != nil && a.Tokens != nil && ch.Token != "" {
		gen = a.Tokens.Generation()
	}
	id, err := c.srv.opts.Auth.Authenticate(cs, ch.Token, ch.User)
	if err != nil {
		return authError{err}
	}
	c.id = id
	c.srv.mu.Lock()
	c.token, c.tokenGen = ch.Token, gen
	c.srv.mu.Unlock()
	return nil
}

// checkTokens closes, once a second, the connections whose token the token file no longer admits
// as the identity they were opened with: revoking a token, or changing its user's groups, ends the
// sessions it opened within seconds, not at their next connection (the client connects again
// with the identity the file now gives). Each connection is checked against every reload after
// the one its handshake read.
func (s *Server) checkTokens(tokens *security.Tokens) {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		select {
		case <-s.quit:
			return
		case <-t.C:
		}
		gen := tokens.Generation()
		type staleConn struct {
			c   *serverConn
			why string
		}
		var stale []staleConn
		s.mu.Lock()
		for c := range s.conns {
			if c.token == "" || c.tokenGen == gen {
				continue
			}
			c.tokenGen = gen
			id, ok := tokens.Lookup(c.token)
			switch {
			case !ok:
				stale = append(stale, staleConn{c, "its token was revoked"})
			case id.User != c.id.User || !slices.Equal(id.Groups, c.id.Groups):
				stale = append(stale, staleConn{c, "its token's user or groups changed"})
			}
		}
		s.mu.Unlock()
		for _, st := range stale {
			s.opts.Logger.Info("rpc: closing a connection: "+st.why, "remote", st.c.nc.RemoteAddr(), "user", st.c.id.User)
			st.c.close()
		}
	}
}

// send queues a response frame and writes the queue unless another goroutine is already writing:
// concurrent responses share write system calls. Queued bytes count in the server's queue and the
// connection's unsent bytes until written.
func (c *serverConn) send(callID uint64, errDetail []byte, msg proto.Message, cells [][]byte) {
	var hdr [32]byte
	h := appendResponseHeader(hdr[:0], callID, errDetail)
	c.wmu.Lock()
	if c.werr != nil {
		c.wmu.Unlock()
		c.sent(0, 1) // the connection broke: nobody reads this answer
		return
	}
	before := len(c.out)
	var err error
	c.out, err = appendFrame(c.out, h, msg, nil, cells...)
	if err != nil {
		c.wmu.Unlock()
		c.send(callID, marshalError(&pb.ErrorDetail{Code: pb.ErrorCode_ERROR_CODE_UNKNOWN, Message: "server error: " + err.Error()}), nil, nil)
		return
	}
	added := len(c.out) - before
	c.outCalls++
	c.srv.queue.add(int64(added))
	c.mu.Lock()
	c.unsent += added
	others := c.calls > c.outCalls
	c.mu.Unlock()
	if c.writing {
		c.wmu.Unlock()
		return
	}
	c.writing = true
	if others {
		// Other calls of this connection are being served: let the goroutines that are ready to
		// run (writers woken by the same WAL sync, typically) queue their answers first, so that
		// one write carries them all (BenchmarkGroupAnswers).
		c.wmu.Unlock()
		runtime.Gosched()
		c.wmu.Lock()
	}
	for len(c.out) > 0 && c.werr == nil {
		buf, calls := c.out, c.outCalls
		c.out, c.outCalls = c.spare[:0], 0
		c.wmu.Unlock()
		_ = c.nc.SetWriteDeadline(time.Now().Add(c.srv.opts.WriteTimeout))
		_, err := c.nc.Write(buf)
		c.wmu.Lock()
		c.sent(len(buf), calls)
		if err != nil {
			c.werr = err
			if isTimeout(err) {
				c.srv.timeouts.Add(1)
				c.srv.opts.Logger.Warn("rpc: client did not read its answers within the write timeout; closing connection",
					"remote", c.nc.RemoteAddr(), "timeout", c.srv.opts.WriteTimeout)
			}
		}
		if cap(buf) <= 4<<20 {
			c.spare = buf[:0]
		} else {
			c.spare = nil
		}
	}
	if c.werr != nil {
		c.sent(len(c.out), c.outCalls)
		c.out, c.outCalls = c.out[:0], 0
		c.writing = false
		c.wmu.Unlock()
		c.close()
		return
	}
	c.writing = false
	c.wmu.Unlock()
}

// sent takes n written (or dropped) answer bytes, the answers of calls calls, off the queues: those
// calls are over.
func (c *serverConn) sent(n, calls int) {
	c.srv.queue.release(int64(n))
	c.mu.Lock()
	c.unsent -= n
	c.calls -= calls
	c.mu.Unlock()
	c.cond.Signal()
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
