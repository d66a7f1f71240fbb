package hbase

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	pb "github.com/cellstore/cellstore/engine/api/cellstore/v1"
	hb "github.com/cellstore/cellstore/engine/api/hbase/v2"
	"github.com/cellstore/cellstore/engine/rpc"
	"github.com/cellstore/cellstore/engine/security"
)

// Backend is what the adapter needs from the region server it runs in.
type Backend interface {
	// ClusterID identifies the cluster (HBase clients key their caches by it).
	ClusterID() string
	// Self is this server as HBase clients reach it: its advertised host and data port.
	Self() *pb.ServerName
	// Region is the encoded name of the region of table with this id and replica, when it is
	// online here (the adapter remembers the answer; this may be slow).
	Region(table *pb.TableName, regionID uint64, replicaID int32) (string, bool)
	// Online reports whether the region of this encoded name is still online here.
	Online(name string) bool
	// Master runs fn with a client of the active master (retrying while there is none). The
	// adapter's calls act as the HBase client's user (security.OnBehalfOf on ctx), never as the
	// server.
	Master(ctx context.Context, fn func(context.Context, pb.MasterClient) error) error
	// SlowCall is how long a call must take, from its request read to its answer written, to be
	// logged ("slow call", protocol=hbase); 0 logs none.
	SlowCall() time.Duration
}

// Adapter serves HBase RPC connections on a region server's data port (rpc.ForeignProtocol).
type Adapter struct {
	b   Backend
	log *slog.Logger

	// regions remembers what HBase region names resolved to (checked with Online on every use).
	regions     sync.Map
	regionCount atomic.Int64
	regionBytes atomic.Int64

	bootstrap struct {
		mu    sync.Mutex
		at    time.Time
		nodes []*hb.ServerName
	}

	procs         procedures
	metaScanners  metaScanners
	metaScannerID atomic.Uint64

	// Counters for metrics.
	Conns, Calls, Errors atomic.Int64
}

// New makes an adapter serving for b.
func New(b Backend, log *slog.Logger) *Adapter {
	if log == nil {
		log = slog.Default()
	}
	a := &Adapter{b: b, log: log.With("protocol", "hbase")}
	a.procs.init()
	return a
}

// Accepts implements rpc.ForeignProtocol: HBase's connection, registry and security preambles.
func (a *Adapter) Accepts(first []byte) bool {
	for _, p := range [][]byte{connPreamble, registryPreamble, securityPreamble} {
		n := min(len(first), len(p))
		if n > 0 && bytes.Equal(first[:n], p[:n]) {
			return true
		}
	}
	return false
}

// maxConnectionHeader bounds the connection header frame.
const maxConnectionHeader = 64 << 10

// conn is one HBase client connection.
type conn struct {
	a       *Adapter
	fc      *rpc.ForeignConn
	opts    rpc.ServerOptions
	id      security.Identity
	service string

	wmu  sync.Mutex
	wbuf []byte

	slots chan struct{} // calls in flight
	wg    sync.WaitGroup
}

// Serve implements rpc.ForeignProtocol.
func (a *Adapter) Serve(fc *rpc.ForeignConn) {
	c := &conn{a: a, fc: fc, opts: fc.Options()}
	c.slots = make(chan struct{}, c.opts.MaxInFlightPerConn)
	a.Conns.Add(1)
	defer a.Conns.Add(-1)
	defer c.wg.Wait()
	if err := c.handshake(); err != nil {
		if !errors.Is(err, io.EOF) && !errors.Is(err, net.ErrClosed) {
			a.log.Debug("HBase connection refused", "remote", fc.Conn.RemoteAddr(), "err", err)
		}
		return
	}
	if err := c.serveCalls(); err != nil && !errors.Is(err, io.EOF) && !errors.Is(err, net.ErrClosed) {
		a.log.Debug("HBase connection ended", "remote", fc.Conn.RemoteAddr(), "err", err)
	}
}

// fatal answers a connection-level error (call id -1, as HBase's server does) and ends it.
func (c *conn) fatal(class, msg string) error {
	c.send(fatalCallID, nil, nil, &hb.ExceptionResponse{ExceptionClassName: proto.String(class), StackTrace: proto.String(msg), DoNotRetry: proto.Bool(true)})
	c.wmu.Lock()
	c.fc.HalfClose()
	c.wmu.Unlock()
	return errors.New(msg)
}

// peekCallID reads the call id from the header of a request of n bytes without consuming it (the
// header is small and comes first; what the reader's buffer does not hold is not waited for).
func (c *conn) peekCallID(n int64) (uint32, bool) {
	r := c.fc.Reader
	avail := int(min(n, int64(r.Buffered())))
	head, _ := r.Peek(min(avail, 10))
	hlen, k := protowire.ConsumeVarint(head)
	if k <= 0 || hlen > 4096 || k+int(hlen) > avail {
		return 0, false
	}
	b, err := r.Peek(k + int(hlen))
	if err != nil {
		return 0, false
	}
	var h hb.RequestHeader
	if proto.Unmarshal(b[k:], &h) != nil || h.CallId == nil {
		return 0, false
	}
	return h.GetCallId(), true
}

// fatalCallID is the call id of connection-level answers (-1 as HBase's int).
const fatalCallID = ^uint32(0)

// handshakeTimeout bounds a connection's handshake, preambles and header together: one that does
// not authenticate in that time is closed (a client that kept asking for the cluster id held a
// connection slot for ever without authenticating).
const handshakeTimeout = 10 * time.Second

func (c *conn) handshake() error {
	r := c.fc.Reader
	_ = c.fc.Conn.SetReadDeadline(time.Now().Add(min(c.opts.ReadTimeout, handshakeTimeout)))
	registry := false
	for {
		pre, err := r.Peek(len(registryPreamble))
		if err != nil {
			return err
		}
		switch {
		case bytes.Equal(pre, registryPreamble):
			// The client asks for the cluster id before anything else; it may go on with a
			// connection preamble on the same connection, or close. Once.
			if registry {
				return c.fatal(classFatalConnection, "the cluster id was asked for twice on one connection")
			}
			registry = true
			_, _ = r.Discard(len(pre))
			c.send(fatalCallID, &hb.GetConnectionRegistryResponse{ClusterId: proto.String(c.a.b.ClusterID())}, nil, nil)
			continue
		case bytes.Equal(pre, securityPreamble):
			_, _ = r.Discard(len(pre))
			return c.fatal(classFatalConnection, "this server supports only SIMPLE authentication (security preamble refused)")
		case bytes.Equal(pre[:4], connPreamble):
			_, _ = r.Discard(len(pre))
			if pre[4] != 0 {
				return c.fatal(classFatalConnection, fmt.Sprintf("unsupported HBase RPC version %d (this server speaks version 0)", pre[4]))
			}
			if pre[5] != authSimple {
				return c.fatal(classBadAuth, fmt.Sprintf("authentication method %#x is not supported: use SIMPLE (hbase.security.authentication=simple)", pre[5]))
			}
		default:
			return c.fatal(classFatalConnection, fmt.Sprintf("bad preamble %q", pre))
		}
		break
	}
	buf, err := readFrame(r, nil, maxConnectionHeader)
	if err != nil {
		return err
	}
	var h hb.ConnectionHeader
	if err := proto.Unmarshal(buf, &h); err != nil {
		return c.fatal(classFatalConnection, "bad connection header: "+err.Error())
	}
	switch codec := h.GetCellBlockCodecClass(); codec {
	case "", "org.apache.hadoop.hbase.codec.KeyValueCodec", "org.apache.hadoop.hbase.codec.KeyValueCodecWithTags":
	default:
		return c.fatal(classUnsupportedCellCodec, fmt.Sprintf("cell codec %s is not supported: use org.apache.hadoop.hbase.codec.KeyValueCodec (hbase.client.rpc.codec)", codec))
	}
	if comp := h.GetCellBlockCompressorClass(); comp != "" {
		return c.fatal(classUnsupportedCompression, fmt.Sprintf("cell block compression %s is not supported: unset hbase.client.rpc.compressor", comp))
	}
	c.service = h.GetServiceName()
	// With security on, the user is the one the TLS client certificate proves (the connection
	// header's user is only a claim); with it off, the user the header names.
	id, err := c.fc.Authenticate("", h.GetUserInfo().GetEffectiveUser())
	if err != nil {
		msg := err.Error()
		if c.fc.TLS == nil || len(c.fc.TLS.PeerCertificates) == 0 {
			msg += " (HBase clients: hbase.client.netty.tls.enabled=true with hbase.rpc.tls.truststore.location set to the cluster's CA and hbase.rpc.tls.keystore.location to a PEM file of your certificate and key; docs/hbase-clients.md)"
		}
		return c.fatal(classAccessDenied, msg)
	}
	c.id = id
	return nil
}

// serveCalls reads calls until the connection ends.
func (c *conn) serveCalls() error {
	r := c.fc.Reader
	for {
		// A free slot before the next request is read: a client past the bound waits in its
		// socket.
		c.slots <- struct{}{}
		_ = c.fc.Conn.SetReadDeadline(time.Now().Add(c.opts.IdleTimeout))
		if _, err := r.Peek(4); err != nil {
			<-c.slots
			return err
		}
		var lenBuf [4]byte
		_, _ = io.ReadFull(r, lenBuf[:])
		n := int64(lenBuf[0])<<24 | int64(lenBuf[1])<<16 | int64(lenBuf[2])<<8 | int64(lenBuf[3])
		if n > int64(c.opts.MaxFrame) {
			<-c.slots
			msg := fmt.Sprintf("request of %d bytes exceeds the server's limit of %d bytes; send smaller batches or values", n, c.opts.MaxFrame)
			// Answered on the call's own id when its header can be read (as HBase's server does):
			// the client fails that call for good, where an answer on the connection's id was
			// skipped and the connection's close had it send the whole request again.
			if id, ok := c.peekCallID(n); ok {
				c.send(id, nil, nil, &hb.ExceptionResponse{ExceptionClassName: proto.String(classRequestTooBig), StackTrace: proto.String(msg), DoNotRetry: proto.Bool(true)})
				c.wmu.Lock()
				c.fc.HalfClose()
				c.wmu.Unlock()
				return errors.New(msg)
			}
			return c.fatal(classDoNotRetry, msg)
		}
		body, err := c.fc.ReadBody(n, nil)
		if err != nil {
			<-c.slots
			return err
		}
		hdrBytes, rest, err := splitDelimited(body)
		var h hb.RequestHeader
		if err == nil {
			err = proto.Unmarshal(hdrBytes, &h)
		}
		if err != nil {
			c.fc.Release(n)
			<-c.slots
			return c.fatal(classFatalConnection, "malformed request header: "+err.Error())
		}
		var param []byte
		if h.GetRequestParam() {
			if param, rest, err = splitDelimited(rest); err != nil {
				c.fc.Release(n)
				<-c.slots
				return c.fatal(classFatalConnection, err.Error())
			}
		}
		cells := rest
		if l := int(h.GetCellBlockMeta().GetLength()); l != len(cells) {
			c.fc.Release(n)
			<-c.slots
			return c.fatal(classFatalConnection, fmt.Sprintf("cell block of %d bytes announced, %d sent", l, len(cells)))
		}
		c.a.Calls.Add(1)
		call := &call{c: c, id: h.GetCallId(), method: h.GetMethodName(), param: param, cells: cells, held: n, start: time.Now()}
		if t := h.GetTimeout(); t > 0 {
			call.timeout = time.Duration(t) * time.Millisecond
		}
		c.wg.Add(1)
		c.dispatch(call)
	}
}

// call is one request being served.
type call struct {
	c       *conn
	id      uint32
	method  string
	param   []byte
	cells   []byte
	held    int64
	timeout time.Duration
	start   time.Time // when its request was read
	once    sync.Once
	ended   atomic.Bool // answered (done ran)
}

// done ends the call: its bytes leave the server's queue, its slot frees.
func (k *call) done() {
	k.once.Do(func() {
		k.ended.Store(true)
		k.c.fc.Release(k.held)
		<-k.c.slots
		k.c.wg.Done()
	})
}

// recover, deferred by every goroutine that serves a call, answers the call with an exception
// when the goroutine panicked before answering, and logs the panic with its stack: a malformed
// request that a check missed must not stop the region server (and every other client's calls).
func (k *call) recover() {
	if p := recover(); p != nil {
		k.c.a.log.Error("panic serving an HBase call", "service", k.c.service, "method", k.method, "call", k.id, "panic", p, "stack", string(debug.Stack()))
		if !k.ended.Load() {
			k.fail(doNotRetry("internal error serving %s.%s (the server logged it)", k.c.service, k.method))
		}
	}
}

// reply answers the call with msg and a cell block.
func (k *call) reply(msg proto.Message, cellBlock []byte) {
	k.c.send(k.id, msg, cellBlock, nil)
	k.noteSlow("")
	k.done()
}

// fail answers the call with an exception.
func (k *call) fail(e *exception) {
	k.c.a.Errors.Add(1)
	k.c.send(k.id, nil, nil, e.response())
	k.noteSlow(e.class)
	k.done()
}

// noteSlow logs a call that took Backend.SlowCall or longer from its request read to its answer
// written, with the exception class it was answered with (a wait the region server's own handler
// did not see — before the call reached it, or in writing the answer — shows as the difference
// from that handler's "slow call").
func (k *call) noteSlow(exception string) {
	slow := k.c.a.b.SlowCall()
	if took := time.Since(k.start); slow > 0 && took >= slow {
		k.c.a.log.Info("slow call", "service", k.c.service, "method", k.method, "call", k.id,
			"took", took.Round(time.Millisecond), "exception", exception)
	}
}

// context is the call's context (bounded by the client's timeout when it sent one).
func (k *call) context() (context.Context, context.CancelFunc) {
	// Master calls made for it act as its user.
	ctx := security.OnBehalfOf(security.NewContext(context.Background(), k.c.id), k.c.id)
	if k.timeout > 0 {
		return context.WithTimeout(ctx, k.timeout)
	}
	return context.WithTimeout(ctx, 10*time.Minute)
}

// send writes one answer frame: the header and the message are encoded straight into the
// connection's write buffer.
func (c *conn) send(callID uint32, msg proto.Message, cellBlock []byte, exc *hb.ExceptionResponse) {
	h := &hb.ResponseHeader{CallId: proto.Uint32(callID), Exception: exc}
	if len(cellBlock) > 0 {
		h.CellBlockMeta = &hb.CellBlockMeta{Length: proto.Uint32(uint32(len(cellBlock)))}
	}
	c.wmu.Lock()
	defer c.wmu.Unlock()
	w, err := appendMessage(append(c.wbuf[:0], 0, 0, 0, 0), h)
	if err == nil && msg != nil && exc == nil {
		w, err = appendMessage(w, msg)
	}
	if err != nil {
		c.a.log.Error("cannot encode an HBase response", "err", err)
		return
	}
	w = append(w, cellBlock...)
	n := len(w) - 4
	w[0], w[1], w[2], w[3] = byte(n>>24), byte(n>>16), byte(n>>8), byte(n)
	_ = c.fc.Conn.SetWriteDeadline(time.Now().Add(c.opts.WriteTimeout))
	if _, err := c.fc.Conn.Write(w); err != nil {
		c.fc.Conn.Close() // the reader ends too
	}
	if cap(w) <= 1<<20 {
		c.wbuf = w
	} else {
		c.wbuf = nil
	}
}

// appendMessage appends m with its varint length before it.
func appendMessage(w []byte, m proto.Message) ([]byte, error) {
	opts := proto.MarshalOptions{AllowPartial: true, UseCachedSize: true}
	w = protowire.AppendVarint(w, uint64(opts.Size(m)))
	return opts.MarshalAppend(w, m)
}

// dispatch runs a call by its connection's service.
func (c *conn) dispatch(k *call) {
	if c.a.log.Enabled(context.Background(), slog.LevelDebug) { // (the arguments cost even when not logged)
		c.a.log.Debug("HBase call", "service", c.service, "method", k.method, "call", k.id, "user", c.id.User)
	}
	switch c.service {
	case "ClientMetaService":
		go func() { defer k.recover(); c.a.meta(k) }()
	case "MasterService":
		go func() { defer k.recover(); c.a.master(k) }()
	case "ClientService":
		func() { defer k.recover(); c.a.client(k) }()
	case "AdminService":
		go func() { defer k.recover(); c.a.admin(k) }()
	default:
		k.fail(doNotRetry("unknown service %q: this server serves ClientService, MasterService, ClientMetaService and AdminService", c.service))
	}
}
