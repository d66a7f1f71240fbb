package rpc

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"runtime"
	"sync"
	"time"

	"google.golang.org/protobuf/proto"

	pb "github.com/cellstore/cellstore/engine/api/cellstore/v1"
	"github.com/cellstore/cellstore/engine/security"
)

// ErrConnClosed is returned for calls on a connection that closed (or broke) before they were
// answered. Such a call may or may not have run on the server.
var ErrConnClosed = errors.New("rpc: connection closed")

// ErrRequestTooLarge is returned, before anything is sent, for a request larger than
// ClientOptions.MaxRequest.
var ErrRequestTooLarge = errors.New("rpc: request too large")

// ClientOptions tune a connection.
type ClientOptions struct {
	// User is the user the client names itself: trusted by servers with security off, ignored
	// with it on (the certificate or token proves the user).
	User string
	// TLS, when set, makes the connection TLS 1.3: the server's certificate is checked against
	// its CA and its client certificate, if any, presented (mutual TLS).
	TLS *security.Certs
	// Token is a bearer token sent in the connection header (only over TLS).
	Token string
	// Name identifies the client program in server logs.
	Name string
	// MaxFrame bounds a response frame. Default DefaultMaxFrame.
	MaxFrame int
	// MaxRequest bounds a request frame: a larger one fails with ErrRequestTooLarge without being
	// sent (servers refuse them too, but only after the client wrote the bytes). Default
	// DefaultMaxFrame, the servers' default limit.
	MaxRequest int
	// DialTimeout bounds connecting. Default 5 s.
	DialTimeout time.Duration
	// ServerName is the name the server's TLS certificate must hold; default the host dialled. A
	// client outside the cluster dials an external address but checks the server's own name.
	ServerName string
}

// Conn is a client connection. Any number of goroutines may call on it at once; their calls share
// the connection and pipeline.
type Conn struct {
	nc   net.Conn
	opts ClientOptions

	wmu     sync.Mutex
	out     []byte
	spare   []byte
	writing bool
	werr    error

	pmu     sync.Mutex
	nextID  uint64
	pending map[uint64]*pendingCall
	err     error // set once the connection is broken; then pending is empty and stays so

	readerDone chan struct{}
}

type pendingCall struct {
	done chan struct{}
	buf  []byte // the response frame, owned by the caller once done is signalled
	err  error
}

var pendingPool = sync.Pool{New: func() any { return &pendingCall{done: make(chan struct{}, 1)} }}

// Dial connects to a data-path server.
func Dial(ctx context.Context, addr string, opts ClientOptions) (*Conn, error) {
	if opts.MaxFrame <= 0 {
		opts.MaxFrame = DefaultMaxFrame
	}
	if opts.MaxRequest <= 0 {
		opts.MaxRequest = DefaultMaxFrame
	}
	if opts.DialTimeout <= 0 {
		opts.DialTimeout = 5 * time.Second
	}
	if opts.Token != "" && opts.TLS == nil {
		return nil, errors.New("rpc: a token is sent only over TLS: give the CA that signs the servers' certificates")
	}
	d := net.Dialer{Timeout: opts.DialTimeout}
	nc, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("rpc: connect to %s: %w", addr, err)
	}
	if tc, ok := nc.(*net.TCPConn); ok {
		_ = tc.SetNoDelay(true)
	}
	if opts.TLS != nil {
		host, _, _ := net.SplitHostPort(addr)
		if opts.ServerName != "" {
			host = opts.ServerName
		}
		tc := tls.Client(nc, opts.TLS.ClientConfig(host))
		hctx, cancel := context.WithTimeout(ctx, opts.DialTimeout)
		err := tc.HandshakeContext(hctx)
		cancel()
		if err != nil {
			nc.Close()
			return nil, fmt.Errorf("rpc: TLS handshake with %s: %w", addr, err)
		}
		nc = tc
	}
	c := &Conn{nc: nc, opts: opts, pending: map[uint64]*pendingCall{}, readerDone: make(chan struct{})}
	hello := append([]byte(nil), Preamble[:]...)
	hello, err = appendFrame(hello, nil, &pb.ConnectionHeader{User: opts.User, Client: opts.Name, Token: opts.Token}, nil)
	if err == nil {
		_, err = nc.Write(hello)
	}
	if err != nil {
		nc.Close()
		return nil, fmt.Errorf("rpc: handshake with %s: %w", addr, err)
	}
	go c.readLoop()
	return c, nil
}

// RemoteAddr is the server's address.
func (c *Conn) RemoteAddr() net.Addr { return c.nc.RemoteAddr() }

// Close closes the connection; calls in flight fail with ErrConnClosed.
func (c *Conn) Close() error {
	err := c.nc.Close()
	<-c.readerDone
	return err
}

// Err is the error that broke the connection, or nil while it works.
func (c *Conn) Err() error {
	c.pmu.Lock()
	defer c.pmu.Unlock()
	return c.err
}

// Call sends a request and waits for its response. The response message is unmarshalled into resp
// and the response's cell block appended to cellsDst, which Call returns. A server-side failure is a
// *pb.ErrorDetail (an error).
func (c *Conn) Call(ctx context.Context, method pb.Method, req proto.Message, reqCells []byte, resp proto.Message, cellsDst []byte) ([]byte, error) {
	p := pendingPool.Get().(*pendingCall)
	c.pmu.Lock()
	if c.err != nil {
		err := c.err
		c.pmu.Unlock()
		pendingPool.Put(p)
		return cellsDst, err
	}
	c.nextID++
	id := c.nextID
	c.pending[id] = p
	others := len(c.pending) > 1
	c.pmu.Unlock()

	h := header{callID: id, method: uint32(method)}
	if dl, ok := ctx.Deadline(); ok {
		ms := time.Until(dl).Milliseconds()
		if ms <= 0 {
			c.forget(id, p)
			return cellsDst, context.DeadlineExceeded
		}
		h.timeoutMS = uint32(min(ms, 1<<31))
	}
	var hdr [32]byte
	c.wmu.Lock()
	var err error
	before := len(c.out)
	if c.out, err = appendFrame(c.out, appendRequestHeader(hdr[:0], &h), req, nil, reqCells); err != nil {
		c.wmu.Unlock()
		c.forget(id, p)
		return cellsDst, fmt.Errorf("rpc: encode request: %w", err)
	}
	if n := len(c.out) - before - 4; n > c.opts.MaxRequest {
		c.out = c.out[:before]
		c.wmu.Unlock()
		c.forget(id, p)
		return cellsDst, fmt.Errorf("%w: %d bytes, limit %d: send smaller batches or values", ErrRequestTooLarge, n, c.opts.MaxRequest)
	}
	if others && !c.writing {
		// Other calls are under way on this connection: callers woken by the same read of answers
		// are ready to run; let them queue their requests first so that one write carries them.
		c.wmu.Unlock()
		runtime.Gosched()
		c.wmu.Lock()
	}
	writeQueued(&c.wmu, &c.out, &c.spare, &c.writing, &c.werr, c.nc)

	select {
	case <-p.done:
	case <-ctx.Done():
		if c.forget(id, p) {
			return cellsDst, ctx.Err()
		}
		<-p.done // the reader already claimed it: take the answer
	}
	defer c.recycle(p)
	if p.err != nil {
		return cellsDst, p.err
	}
	f, err := splitFrame(p.buf)
	if err != nil {
		return cellsDst, err
	}
	rh, err := parseHeader(f.header, false)
	if err != nil {
		return cellsDst, err
	}
	if rh.errBytes != nil {
		d := &pb.ErrorDetail{}
		if err := proto.Unmarshal(rh.errBytes, d); err != nil {
			return cellsDst, fmt.Errorf("rpc: undecodable error from server: %w", err)
		}
		return cellsDst, d
	}
	if resp != nil {
		if err := proto.Unmarshal(f.msg, resp); err != nil {
			return cellsDst, fmt.Errorf("rpc: undecodable %T from server: %w", resp, err)
		}
	}
	return append(cellsDst, f.cells...), nil
}

// forget removes a call that has not been answered; false if the reader already took it.
func (c *Conn) forget(id uint64, p *pendingCall) bool {
	c.pmu.Lock()
	_, ok := c.pending[id]
	delete(c.pending, id)
	c.pmu.Unlock()
	if ok {
		c.recycle(p)
	}
	return ok
}

func (c *Conn) recycle(p *pendingCall) {
	p.err = nil
	if cap(p.buf) > 1<<20 {
		p.buf = nil
	}
	pendingPool.Put(p)
}

func (c *Conn) readLoop() {
	defer close(c.readerDone)
	r := bufio.NewReaderSize(c.nc, 64<<10)
	var buf []byte
	var err error
	for {
		buf, err = readFrame(r, buf[:0], c.opts.MaxFrame)
		if err != nil {
			break
		}
		f, ferr := splitFrame(buf)
		var h header
		if ferr == nil {
			h, ferr = parseHeader(f.header, false)
		}
		if ferr != nil {
			err = ferr
			break
		}
		c.pmu.Lock()
		p := c.pending[h.callID]
		delete(c.pending, h.callID)
		c.pmu.Unlock()
		if p == nil {
			continue // the caller gave up (context done)
		}
		// Hand the frame to the caller and take its old buffer for the next read.
		p.buf, buf = buf, p.buf
		p.done <- struct{}{}
	}
	c.nc.Close()
	if errors.Is(err, net.ErrClosed) || err == nil {
		err = ErrConnClosed
	} else {
		err = fmt.Errorf("%w: %w", ErrConnClosed, err) // a TLS alert stays visible (security.IsAuthFailure)
	}
	c.pmu.Lock()
	c.err = err
	pending := c.pending
	c.pending = map[uint64]*pendingCall{}
	c.pmu.Unlock()
	for _, p := range pending {
		p.err = err
		p.done <- struct{}{}
	}
}
