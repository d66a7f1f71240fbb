package client

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"slices"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pb "github.com/cellstore/cellstore/engine/api/cellstore/v1"
	"github.com/cellstore/cellstore/engine/cell"
	"github.com/cellstore/cellstore/engine/rpc"
	"github.com/cellstore/cellstore/engine/security"
)

// Config configures a Client.
type Config struct {
	// Masters are the masters' gRPC addresses (host:port); any of them, the client finds the active one.
	Masters []string
	// User is the user the client names itself (quotas are per user): trusted only by servers
	// with security off. With security on the user is what TLS's client certificate or Token
	// proves.
	User string
	// TLS, when set, connects with TLS 1.3: servers are checked against its CA, and its
	// certificate, if any, is the client certificate (the user is its subject's CN).
	TLS *security.Certs
	// Token is a bearer token (docs/security.md); it needs TLS.
	Token string
	// OperationTimeout bounds one operation with all its retries when the context has no deadline.
	// Default 60 s.
	OperationTimeout time.Duration
	// RPCTimeout bounds one attempt. Default 10 s.
	RPCTimeout time.Duration
	// Pause is the base of the retry backoff (HBase's hbase.client.pause). Default 100 ms.
	Pause time.Duration
	// MaxPause caps one backoff. Default 5 s.
	MaxPause time.Duration
	// MaxCellSize is the largest cell the client sends (HBase's hbase.client.keyvalue.maxsize);
	// default cell.DefaultMaxCellSize, the servers' default.
	MaxCellSize int
	// HedgeDelay is how long a TIMELINE read waits for the primary before also asking the
	// replicas. Default 10 ms.
	HedgeDelay time.Duration
	// MaxWriteBackoff is the longest a region's write answer holds the client's next writes to
	// the region back: an answer reporting write pressure (pb.WritePressure: the region nearing the
	// memstore size at which its server blocks writes) holds them for MaxWriteBackoff ×
	// (percent/100)^4, so that writers slow down before the region blocks them (HBase's client
	// backoff with its exponential policy; HBase's is off unless hbase.client.backpressure.enabled,
	// this one is on). Default 500 ms; negative: writes never wait.
	MaxWriteBackoff time.Duration
	// External is for a client outside the cluster's network (a laptop, another cluster):
	// Masters are external addresses (spec.externalAccess), and the client asks the masters for
	// the external address of every server (GetExternalAddresses) and dials that instead of the
	// address the server advertises. TLS still checks each server's own name.
	External bool
	// TLSServerName is, for an External client over TLS, the name the masters' certificates are
	// checked against when dialled at the addresses in Masters (the external addresses, which the
	// certificates do not name). Empty: any server certificate of the CA in TLS is accepted there
	// (the operator's CA is the cluster's own). Every other server is checked against its own name.
	TLSServerName string
	// Logger, when set, receives a Debug record for every retry (the operation's context, the
	// attempt, the pause and the error that caused it): what a slow request waited for.
	Logger *slog.Logger
}

func (c *Config) fill() error {
	if len(c.Masters) == 0 {
		return errors.New("client: no master address given (Config.Masters)")
	}
	if c.Token != "" && c.TLS == nil {
		return errors.New("client: a token is sent only over TLS: give Config.TLS (the CA that signs the servers' certificates)")
	}
	if c.OperationTimeout <= 0 {
		c.OperationTimeout = 60 * time.Second
	}
	if c.RPCTimeout <= 0 {
		c.RPCTimeout = 10 * time.Second
	}
	if c.Pause <= 0 {
		c.Pause = 100 * time.Millisecond
	}
	if c.MaxPause <= 0 {
		c.MaxPause = 5 * time.Second
	}
	if c.MaxCellSize <= 0 {
		c.MaxCellSize = cell.DefaultMaxCellSize
	}
	if c.HedgeDelay <= 0 {
		c.HedgeDelay = 10 * time.Millisecond
	}
	if c.MaxWriteBackoff == 0 {
		c.MaxWriteBackoff = 500 * time.Millisecond
	}
	return nil
}

// Client is a connection to a Cellstore cluster: it finds regions through the master, caches their
// locations and talks to region servers over the data-path protocol, retrying on the errors that
// say a retry can succeed. It is safe for concurrent use.
type Client struct {
	cfg   Config
	cache *locationCache

	mmu     sync.Mutex
	masters map[string]*grpc.ClientConn
	active  string // the master address that last answered

	cmu   sync.Mutex
	conns map[string]*rpc.Conn
	dials map[string]*dialing

	nonceGroup uint64

	// holds hold writes to regions whose last write answer reported pressure (backoff.go).
	holds holds

	emu       sync.Mutex
	external  map[string]string // External: advertised address -> external address
	extLoaded time.Time         // when external was last fetched (or its fetch failed)
	eload     sync.Mutex        // one fetch at a time
}

type dialing struct {
	done chan struct{}
	conn *rpc.Conn
	err  error
}

// New makes a client. It does not connect until the first call.
func New(cfg Config) (*Client, error) {
	if err := cfg.fill(); err != nil {
		return nil, err
	}
	return &Client{
		cfg:        cfg,
		cache:      newLocationCache(),
		masters:    map[string]*grpc.ClientConn{},
		active:     cfg.Masters[0],
		conns:      map[string]*rpc.Conn{},
		dials:      map[string]*dialing{},
		nonceGroup: rand.Uint64() | 1,
	}, nil
}

// Close closes every connection.
func (c *Client) Close() error {
	c.mmu.Lock()
	for _, cc := range c.masters {
		cc.Close()
	}
	c.masters = map[string]*grpc.ClientConn{}
	c.mmu.Unlock()
	c.cmu.Lock()
	conns := c.conns
	c.conns = map[string]*rpc.Conn{}
	c.cmu.Unlock()
	for _, conn := range conns {
		conn.Close()
	}
	return nil
}

// Master calls fn against the active master, following NOT_ACTIVE_MASTER answers and trying the
// other masters when one does not answer.
func (c *Client) Master(ctx context.Context, fn func(context.Context, pb.MasterClient) error) error {
	return c.master(ctx, c.cfg.RPCTimeout, fn)
}

// MasterWait is Master for calls that wait for the master's work (create, enable, disable,
// truncate wait for regions to open or close): one attempt may take the whole operation timeout
// instead of RPCTimeout, since retrying a slow create would answer TABLE_EXISTS.
func (c *Client) MasterWait(ctx context.Context, fn func(context.Context, pb.MasterClient) error) error {
	return c.master(ctx, 0, fn)
}

// master is Master with attempt bounding each attempt (0: the operation's deadline only), for
// calls that wait for the master's work (a create waits for its regions to open) and must not be
// retried just for being slow: a retried create answers TABLE_EXISTS.
func (c *Client) master(ctx context.Context, attempt time.Duration, fn func(context.Context, pb.MasterClient) error) error {
	ctx, cancel := c.opContext(ctx)
	defer cancel()
	var lastErr error
	// pauses counts the backoffs that grow (a master's retry-after hint does not); hops the
	// redirects followed without a pause, bounded in case two masters name each other while
	// their views of the election differ.
	pauses, hops := 0, 0
	pause := func(cause error) error {
		hops = 0
		err := c.backoff(ctx, pauses, cause)
		if d, _ := pb.DetailOf(cause); d.GetRetryAfterMs() == 0 {
			pauses++
		}
		return err
	}
	for {
		c.mmu.Lock()
		addr := c.active
		cc := c.masters[addr]
		c.mmu.Unlock()
		if cc == nil {
			target, name, err := c.route(ctx, addr)
			if err != nil {
				// An active master with no external address yet: try the others.
				lastErr = err
				c.mmu.Lock()
				c.active = c.nextMaster(addr)
				c.mmu.Unlock()
				if err := pause(err); err != nil {
					return fmt.Errorf("client: master unreachable: %w (last error: %v)", err, lastErr)
				}
				continue
			}
			var extra []grpc.DialOption
			if name != "" {
				extra = append(extra, grpc.WithAuthority(addr)) // TLS checks the master's own name
			}
			creds := c.creds()
			if target == addr && c.cfg.External {
				creds = c.bootstrapCreds()
			}
			dialed, err := security.Dial(target, creds, extra...)
			if err != nil {
				return fmt.Errorf("client: master address %q: %w", addr, err)
			}
			c.mmu.Lock()
			if cc = c.masters[addr]; cc == nil {
				cc = dialed
				c.masters[addr] = cc
			} else {
				dialed.Close() // another caller dialled it meanwhile
			}
			c.mmu.Unlock()
		}
		actx, acancel := ctx, context.CancelFunc(func() {})
		if attempt > 0 {
			actx, acancel = context.WithTimeout(ctx, attempt)
		}
		err := fn(actx, pb.NewMasterClient(cc))
		acancel()
		if err == nil {
			return nil
		}
		lastErr = err
		d, typed := pb.DetailOf(err)
		switch {
		case typed && d.GetCode() == pb.ErrorCode_ERROR_CODE_NOT_ACTIVE_MASTER:
			c.mmu.Lock()
			if d.GetNewMaster() != "" {
				c.active = d.GetNewMaster()
			} else {
				c.active = c.nextMaster(addr)
			}
			c.mmu.Unlock()
			// A master that names itself was elected and is loading the catalog: it is asked
			// again after its pause. Another name: no pause, we know where to go.
			if d.GetNewMaster() != "" && d.GetNewMaster() != addr && hops <= len(c.cfg.Masters) {
				hops++
				continue
			}
		case typed && !retryable(d):
			return d
		case !typed && !transient(err):
			return err
		default: // unreachable or busy master: try the next
			c.mmu.Lock()
			c.active = c.nextMaster(addr)
			if cc := c.masters[addr]; cc != nil && c.cfg.External && !slices.Contains(c.cfg.Masters, addr) {
				// Its external address may have changed (a pod on another node): ask again.
				cc.Close()
				delete(c.masters, addr)
				c.forgetExternal(addr)
			}
			c.mmu.Unlock()
		}
		if err := pause(lastErr); err != nil {
			hint := ""
			if c.cfg.TLS == nil && strings.Contains(lastErr.Error(), "server preface") {
				hint = "; if the cluster serves TLS, connect with its CA (--tls-ca-file) and credentials"
			}
			return fmt.Errorf("client: master unreachable: %w (last error: %v)%s", err, lastErr, hint)
		}
	}
}

func (c *Client) nextMaster(cur string) string {
	for i, m := range c.cfg.Masters {
		if m == cur {
			return c.cfg.Masters[(i+1)%len(c.cfg.Masters)]
		}
	}
	return c.cfg.Masters[0]
}

// route says where to dial addr (an address a server advertises): addr itself, or for an External
// client the external address the masters publish for it, with name the host its TLS certificate
// names (empty when dialled as is). The addresses given in Config.Masters are dialled as they are.
func (c *Client) route(ctx context.Context, addr string) (target, name string, err error) {
	if !c.cfg.External || slices.Contains(c.cfg.Masters, addr) {
		return addr, "", nil
	}
	host, _, _ := net.SplitHostPort(addr)
	if ext, ok := c.externalOf(addr); ok {
		return ext, host, nil
	}
	// Unknown (a server that started since, or nothing fetched yet): fetch the map again, at
	// most once a second however many callers miss.
	c.eload.Lock()
	defer c.eload.Unlock()
	if ext, ok := c.externalOf(addr); ok {
		return ext, host, nil
	}
	c.emu.Lock()
	recent := time.Since(c.extLoaded) < time.Second
	c.emu.Unlock()
	if !recent {
		if err := c.loadExternal(ctx); err != nil {
			return "", "", err
		}
		if ext, ok := c.externalOf(addr); ok {
			return ext, host, nil
		}
	}
	return "", "", fmt.Errorf("client: %w for %s (the operator publishes one for every server of a StoreCluster with spec.externalAccess; a server that just started gets one within seconds)", errNoExternalAddress, addr)
}

// errNoExternalAddress: the masters publish no external address for a server (yet); retried.
var errNoExternalAddress = errors.New("no external address is published")

// forgetExternal drops addr's external address, so the next dial fetches the map again.
func (c *Client) forgetExternal(addr string) {
	c.emu.Lock()
	defer c.emu.Unlock()
	delete(c.external, addr)
}

func (c *Client) externalOf(addr string) (string, bool) {
	c.emu.Lock()
	defer c.emu.Unlock()
	ext, ok := c.external[addr]
	return ext, ok
}

// loadExternal fetches the external addresses from the first of Config.Masters that answers.
func (c *Client) loadExternal(ctx context.Context) error {
	var lastErr error
	for _, m := range c.cfg.Masters {
		cc, err := security.Dial(m, c.bootstrapCreds())
		if err != nil {
			lastErr = err
			continue
		}
		actx, cancel := context.WithTimeout(ctx, c.cfg.RPCTimeout)
		resp, err := pb.NewMasterClient(cc).GetExternalAddresses(actx, &pb.GetExternalAddressesRequest{})
		cancel()
		cc.Close()
		if err == nil && len(resp.GetAddresses()) == 0 {
			err = errors.New("the cluster publishes no external addresses: its StoreCluster needs spec.externalAccess")
		}
		if err != nil {
			lastErr = fmt.Errorf("%s: %w", m, err)
			continue
		}
		c.emu.Lock()
		c.external, c.extLoaded = resp.GetAddresses(), time.Now()
		c.emu.Unlock()
		return nil
	}
	c.emu.Lock()
	c.extLoaded = time.Now()
	c.emu.Unlock()
	return fmt.Errorf("client: the external addresses of the cluster's servers: %w", lastErr)
}

// conn returns the data-path connection to addr, dialling it once however many callers want it.
func (c *Client) conn(ctx context.Context, addr string) (*rpc.Conn, error) {
	c.cmu.Lock()
	if conn := c.conns[addr]; conn != nil && conn.Err() == nil {
		c.cmu.Unlock()
		return conn, nil
	}
	d := c.dials[addr]
	if d == nil {
		d = &dialing{done: make(chan struct{})}
		c.dials[addr] = d
		go func() {
			dctx, cancel := context.WithTimeout(context.Background(), c.cfg.RPCTimeout)
			defer cancel()
			var target, name string
			if target, name, d.err = c.route(dctx, addr); d.err == nil {
				d.conn, d.err = rpc.Dial(dctx, target, rpc.ClientOptions{User: c.cfg.User, Name: "cellstore-go-client", TLS: c.cfg.TLS, Token: c.cfg.Token, ServerName: name})
				if d.err != nil && target != addr {
					c.forgetExternal(addr) // its external address may have changed: ask again next time
				}
			}
			c.cmu.Lock()
			if d.err == nil {
				if old := c.conns[addr]; old != nil {
					old.Close()
				}
				c.conns[addr] = d.conn
			}
			delete(c.dials, addr)
			c.cmu.Unlock()
			close(d.done)
		}()
	}
	c.cmu.Unlock()
	start := time.Now()
	select {
	case <-d.done:
		// A request that waited for a connection says so (a server that restarted has a new
		// address: its name looked up again, a TCP and a TLS handshake).
		if c.cfg.Logger != nil {
			c.cfg.Logger.DebugContext(ctx, "connected", "server", addr, "took", time.Since(start).Round(time.Millisecond), "error", d.err)
		}
		return d.conn, d.err
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// opContext applies the operation timeout when ctx has no deadline.
func (c *Client) opContext(ctx context.Context) (context.Context, context.CancelFunc) {
	if _, ok := ctx.Deadline(); ok {
		return context.WithCancel(ctx)
	}
	return context.WithTimeout(ctx, c.cfg.OperationTimeout)
}

// backoff waits before retry number attempt (0-based) after cause: the server's retry-after when it
// gave one, else an exponential pause with jitter, capped by MaxPause. It fails when ctx ends first.
func (c *Client) backoff(ctx context.Context, attempt int, cause error) error {
	wait := c.cfg.Pause << min(attempt, 10)
	if wait > c.cfg.MaxPause || wait <= 0 {
		wait = c.cfg.MaxPause
	}
	wait = wait/2 + rand.N(wait/2+1)
	d, _ := pb.DetailOf(cause)
	if ra := time.Duration(d.GetRetryAfterMs()) * time.Millisecond; ra > 0 {
		wait = ra
	}
	if c.cfg.Logger != nil {
		c.cfg.Logger.DebugContext(ctx, "retrying", "attempt", attempt, "pause", wait, "error", cause)
	}
	return sleep(ctx, wait)
}

// retryable says whether an error answer from a server can succeed when retried (after
// relocating or waiting).
func retryable(d *pb.ErrorDetail) bool {
	switch d.GetCode() {
	case pb.ErrorCode_ERROR_CODE_NOT_SERVING_REGION, pb.ErrorCode_ERROR_CODE_REGION_MOVED,
		pb.ErrorCode_ERROR_CODE_REGION_OPENING, pb.ErrorCode_ERROR_CODE_TOO_BUSY,
		pb.ErrorCode_ERROR_CODE_THROTTLED, pb.ErrorCode_ERROR_CODE_WRITES_BLOCKED,
		pb.ErrorCode_ERROR_CODE_SERVER_STOPPING, pb.ErrorCode_ERROR_CODE_NOT_ACTIVE_MASTER,
		pb.ErrorCode_ERROR_CODE_WRONG_REGION, pb.ErrorCode_ERROR_CODE_LEASE_EXPIRED,
		pb.ErrorCode_ERROR_CODE_RESULT_TOO_LARGE:
		return true
	}
	return d.GetRetryable()
}

// permanent says whether an error of locating a region is final: an answer a retry cannot mend,
// or a refusal of the client's credentials.
func permanent(err error) bool {
	if d, ok := pb.DetailOf(err); ok {
		return !retryable(d)
	}
	return security.IsAuthFailure(err)
}

// transient says whether a transport error may pass (the server is restarting, the connection
// broke).
func transient(err error) bool {
	if security.IsAuthFailure(err) {
		return false // retrying with the same credentials fails the same way
	}
	if errors.Is(err, rpc.ErrConnClosed) || errors.Is(err, errNoExternalAddress) ||
		errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		// EOF: the server closed the connection (at its connection limit, stopping) before
		// or during the handshake.
		return true
	}
	var ne net.Error
	if errors.As(err, &ne) {
		return true
	}
	var oe *net.OpError
	if errors.As(err, &oe) {
		return true
	}
	switch status.Code(err) {
	case codes.Unavailable, codes.DeadlineExceeded, codes.ResourceExhausted, codes.Aborted:
		return true
	}
	return false
}

// bootstrapCreds are the credentials of a connection to one of Config.Masters of an External
// client: TLS checks TLSServerName, or that the certificate is a server's of the CA.
func (c *Client) bootstrapCreds() *security.Credentials {
	cr := c.creds()
	if cr == nil || cr.Certs == nil {
		return cr
	}
	cr.ServerName, cr.AnyServerName = c.cfg.TLSServerName, c.cfg.TLSServerName == ""
	return cr
}

// creds are what the client presents to masters over gRPC.
func (c *Client) creds() *security.Credentials {
	if c.cfg.TLS == nil && c.cfg.Token == "" && c.cfg.User == "" {
		return nil
	}
	return &security.Credentials{Certs: c.cfg.TLS, Token: c.cfg.Token, User: c.cfg.User}
}
