package rpc

import (
	"bufio"
	"crypto/tls"
	"errors"
	"net"
	"time"

	"google.golang.org/protobuf/proto"

	pb "github.com/cellstore/cellstore/engine/api/cellstore/v1"
	"github.com/cellstore/cellstore/engine/security"
)

// A data port may speak a second protocol beside its own: a connection whose first bytes are
// not Preamble but that ServerOptions.Foreign accepts is handed to it (the HBase RPC adapter of
// engine/hbase). The foreign protocol frames its calls itself and runs them through this
// server's handlers with ForeignConn.Call, so quotas, access checks, admission and metrics are
// the same for both protocols.

// ForeignProtocol serves connections of another protocol on the data port.
type ForeignProtocol interface {
	// Accepts reports whether a connection's first len(Preamble) bytes open this protocol.
	Accepts(first []byte) bool
	// Serve runs one connection until it ends (the server closes it afterwards, and also when
	// it closes: reads then fail).
	Serve(fc *ForeignConn)
}

// errForeign ends the lean handshake of a connection handed to ServerOptions.Foreign.
var errForeign = errors.New("rpc: a foreign protocol's connection")

// ForeignConn is a connection served by a ForeignProtocol.
type ForeignConn struct {
	// Conn is the connection (TLS when the server has a certificate): the protocol writes its
	// answers here, serializing its writes itself.
	Conn net.Conn
	// Reader reads the connection; the preamble has not been consumed.
	Reader *bufio.Reader
	// TLS is the handshake's state (nil without TLS: also for a client that did not start TLS
	// on a port that serves it, which Authenticate refuses).
	TLS *tls.ConnectionState

	c *serverConn
}

// Options are the server's options (timeouts, limits) with defaults filled in.
func (fc *ForeignConn) Options() ServerOptions { return fc.c.srv.opts }

// Authenticate says who the connection acts as, as the lean handshake does: its client
// certificate or token when the server authenticates, else the user it names. A refusal is an
// error for the client.
func (fc *ForeignConn) Authenticate(token, user string) (security.Identity, error) {
	if fc.c.plaintextOnTLS {
		fc.c.srv.unauthenticated.Add(1)
		return security.Identity{}, errors.New("this port serves TLS only, and the connection did not start a TLS handshake")
	}
	id, err := fc.c.srv.opts.Auth.Authenticate(fc.TLS, token, user)
	if err != nil {
		fc.c.srv.unauthenticated.Add(1)
		return security.Identity{}, err
	}
	return id, nil
}

// HalfClose ends the connection's sending side and drains what the client sent, for up to a
// second: after a last answer (a refusal), the client reads it rather than a reset.
func (fc *ForeignConn) HalfClose() { fc.c.halfClose() }

// ReadBody reads the n-byte body of a request whose length was just read from Reader, admitting
// its bytes into the server's queue of requests in flight (the bound every connection shares) as
// they arrive, within the read timeout (not counting waits for room); buf is reused when large
// enough. On success the queue holds n bytes for it, given back by Release once the call is
// answered; on an error none.
func (fc *ForeignConn) ReadBody(n int64, buf []byte) ([]byte, error) {
	return fc.c.srv.readBody(fc.c, fc.Reader, n, buf)
}

// Release gives back what ReadBody took.
func (fc *ForeignConn) Release(n int64) { fc.c.srv.queue.release(n) }

// Reply is how a call run by ForeignConn.Call answers: a message and cell blocks, or an error
// (msg nil). It runs on the handler's goroutine before Call's handler returns, and must not keep
// msg or cells: they may live in reused buffers.
type Reply func(msg proto.Message, fail *pb.ErrorDetail, cells [][]byte)

// Call runs the handler of a data-path method for the foreign protocol's request: req is the
// method's request message (handed to the handler as is: see Request; the handler may keep it
// only until it answers), cells its cell block. It returns at once; the handler runs on the
// server's handler goroutines and answers through reply exactly once. timeout bounds the
// handler's context (0: none).
func (fc *ForeignConn) Call(method uint32, req proto.Message, cells []byte, id security.Identity, timeout time.Duration, reply Reply) {
	handler := fc.c.srv.handlers[method]
	if handler == nil {
		reply(nil, &pb.ErrorDetail{Code: pb.ErrorCode_ERROR_CODE_INVALID_ARGUMENT, Message: "unknown method"}, nil)
		return
	}
	call := callPool.Get().(*Call)
	call.Method, call.Message, call.decoded, call.Cells, call.User, call.Groups = method, nil, req, cells, id.User, id.Groups
	call.conn, call.id, call.done, call.respond = fc.c, 0, false, reply
	fc.c.srv.inFlight.Add(1)
	fc.c.srv.dispatch(task{conn: fc.c, handler: handler, call: call, timeoutMS: uint32(min(timeout.Milliseconds(), 1<<31))})
}

// serveForeign hands a connection to the foreign protocol.
func (c *serverConn) serveForeign(r *bufio.Reader) {
	fc := &ForeignConn{Conn: c.nc, Reader: r, c: c}
	if tc, ok := c.nc.(*tls.Conn); ok {
		st := tc.ConnectionState()
		fc.TLS = &st
	}
	_ = c.nc.SetReadDeadline(time.Time{})
	c.srv.opts.Foreign.Serve(fc)
}
