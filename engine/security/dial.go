package security

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strings"
	"time"
)

// dialStagger is how long a connection attempt to one address of a name has before the next
// address is tried as well (RFC 8305's "connection attempt delay", at the 100 ms it recommends
// as the least): a live pod in the cluster accepts well within it.
const dialStagger = 100 * time.Millisecond

// dialTCP is the dial of one address; a variable so that tests can make an address whose
// connection attempts hang, which a loopback listener cannot do on every machine.
var dialTCP = func(ctx context.Context, addr string) (net.Conn, error) {
	var d net.Dialer
	return d.DialContext(ctx, "tcp", addr)
}

// proxied says whether the environment (HTTPS_PROXY, NO_PROXY) sends connections to addr
// through an HTTP proxy, as gRPC reads it.
func proxied(addr string) bool {
	u, err := http.ProxyFromEnvironment(&http.Request{URL: &url.URL{Scheme: "https", Host: addr}})
	return err == nil && u != nil
}

// UnixSocket says whether addr names a unix socket in gRPC's target syntax ("unix:PATH",
// "unix:///PATH", "unix-abstract:NAME").
func UnixSocket(addr string) bool {
	return strings.HasPrefix(addr, "unix:") || strings.HasPrefix(addr, "unix-abstract:")
}

// dialService connects to addr (host:port), looking the host up afresh. A name can resolve to
// several addresses — a headless Service names every master pod, and until a deleted pod's
// object is gone its address stays in the answer (the Service publishes addresses that are not
// ready). Go's dialer tries such addresses one after the other and gives each its share of the
// connect deadline, so a dead address first in the answer (CoreDNS shuffles it: half the time
// with two) held the connection for seconds while a live master answered the next address. Here
// the next address is tried when the previous one failed or has not connected within
// dialStagger, the first to connect wins and the others are closed.
func dialService(ctx context.Context, addr string) (net.Conn, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil || net.ParseIP(host) != nil {
		return dialTCP(ctx, addr)
	}
	ips, err := net.DefaultResolver.LookupHost(ctx, host)
	if err != nil {
		return nil, err
	}
	addrs := make([]string, len(ips))
	for i, ip := range ips {
		addrs[i] = net.JoinHostPort(ip, port)
	}
	return dialFirst(ctx, addrs, dialStagger)
}

// dialFirst dials addrs, starting the next one when the previous failed or after stagger, and
// returns the first connection made (the later ones are closed), or every address's error.
func dialFirst(ctx context.Context, addrs []string, stagger time.Duration) (net.Conn, error) {
	dial := dialTCP // (read once: the attempts may outlive a test that replaces it)
	switch len(addrs) {
	case 0:
		return nil, errors.New("dial: no address")
	case 1:
		return dial(ctx, addrs[0])
	}
	dctx, cancel := context.WithCancel(ctx)
	type result struct {
		conn net.Conn
		err  error
	}
	results := make(chan result, len(addrs))
	started, received := 0, 0
	start := func() {
		a := addrs[started]
		started++
		go func() {
			c, err := dial(dctx, a)
			results <- result{c, err}
		}()
	}
	// finish stops the attempts still under way and closes any connection they make.
	finish := func() {
		cancel()
		go func(pending int) {
			for range pending {
				if r := <-results; r.conn != nil {
					r.conn.Close()
				}
			}
		}(started - received)
	}
	start()
	timer := time.NewTimer(stagger)
	defer timer.Stop()
	var errs []error
	for {
		select {
		case r := <-results:
			received++
			if r.err == nil {
				finish()
				return r.conn, nil
			}
			errs = append(errs, r.err)
			if started < len(addrs) {
				start()
				timer.Reset(stagger)
			} else if received == len(addrs) {
				cancel()
				return nil, errors.Join(errs...)
			}
		case <-timer.C:
			if started < len(addrs) {
				start()
				timer.Reset(stagger)
			}
		case <-ctx.Done():
			finish()
			return nil, fmt.Errorf("dial %v: %w", addrs, errors.Join(append(errs, ctx.Err())...))
		}
	}
}
