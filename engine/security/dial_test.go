package security

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// listen starts a loopback listener that accepts connections onto the returned channel.
func listen(t *testing.T) (string, <-chan net.Conn) {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	accepted := make(chan net.Conn, 4)
	done := make(chan struct{})
	t.Cleanup(func() {
		lis.Close()
		for {
			select {
			case c := <-accepted:
				c.Close()
			case <-done:
				for len(accepted) > 0 {
					(<-accepted).Close()
				}
				return
			}
		}
	})
	go func() {
		defer close(done)
		for {
			c, err := lis.Accept()
			if err != nil {
				return
			}
			accepted <- c
		}
	}()
	return lis.Addr().String(), accepted
}

// dialExpecting dials addrs (a minute at most) and fails the test unless the connection is to
// want; the caller closes it.
func dialExpecting(t *testing.T, addrs []string, stagger time.Duration, want string) net.Conn {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c, err := dialFirst(ctx, addrs, stagger)
	if err != nil {
		t.Fatalf("dial: %v", err)
	}
	if c.RemoteAddr().String() != want {
		c.Close()
		t.Fatalf("connected to %s, want %s", c.RemoteAddr(), want)
	}
	return c
}

// refusing is a loopback address nothing listens on.
func refusing(t *testing.T) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := lis.Addr().String()
	lis.Close()
	return addr
}

// withDial replaces dialTCP for addresses in hold: their attempts wait for the channel (closed:
// dial for real) or their context, and report the context's end on cancelled.
func withDial(t *testing.T, hold map[string]chan struct{}, cancelled chan<- string) {
	t.Helper()
	real := dialTCP
	dialTCP = func(ctx context.Context, addr string) (net.Conn, error) {
		if h, ok := hold[addr]; ok {
			select {
			case <-h:
			case <-ctx.Done():
				cancelled <- addr
				return nil, ctx.Err()
			}
		}
		return real(ctx, addr)
	}
	t.Cleanup(func() { dialTCP = real })
}

// A dead address first in the answer (a deleted pod still published by the headless Service)
// must not hold the dial: the live address after it connects while the dead one still hangs.
// Go's dialer would wait for the first address until its share of the deadline ran out (here:
// none, so the test's minute).
func TestDialFirstDoesNotWaitOutAHangingAddress(t *testing.T) {
	live, accepted := listen(t)
	dead := "10.255.255.1:16000" // never dialled for real: its attempts hang until cancelled
	cancelled := make(chan string, 1)
	withDial(t, map[string]chan struct{}{dead: make(chan struct{})}, cancelled)

	c := dialExpecting(t, []string{dead, live}, 10*time.Millisecond, live)
	defer c.Close()
	<-accepted
	select {
	case a := <-cancelled:
		if a != dead {
			t.Fatalf("cancelled %s", a)
		}
	case <-time.After(time.Minute):
		t.Fatal("the hanging attempt was not cancelled after the live address connected")
	}
}

// A refused address moves on to the next at once, not after the stagger.
func TestDialFirstMovesOnWhenAnAddressRefuses(t *testing.T) {
	live, _ := listen(t)
	dialExpecting(t, []string{refusing(t), live}, time.Hour, live).Close()
}

// A connection made after another won is closed, not leaked.
func TestDialFirstClosesALateConnection(t *testing.T) {
	slow, slowAccepted := listen(t)
	fast, _ := listen(t)
	release := make(chan struct{})
	real := dialTCP
	dialTCP = func(ctx context.Context, addr string) (net.Conn, error) {
		if addr == slow {
			// A connect that completes although its context was cancelled meanwhile.
			<-release
			return real(context.Background(), addr)
		}
		return real(ctx, addr)
	}
	t.Cleanup(func() { dialTCP = real })

	c := dialExpecting(t, []string{slow, fast}, 10*time.Millisecond, fast)
	defer c.Close()
	close(release)
	select {
	case late := <-slowAccepted:
		late.SetReadDeadline(time.Now().Add(time.Minute))
		if _, err := late.Read(make([]byte, 1)); !errors.Is(err, io.EOF) {
			t.Fatalf("the late connection was not closed: read %v", err)
		}
	case <-time.After(time.Minute):
		t.Fatal("the slow address was never dialled")
	}
}

// Every address failing is an error that names each.
func TestDialFirstReportsEveryAddress(t *testing.T) {
	a, b := refusing(t), refusing(t)
	_, err := dialFirst(context.Background(), []string{a, b}, time.Hour)
	if err == nil || !strings.Contains(err.Error(), a) || !strings.Contains(err.Error(), b) {
		t.Fatalf("error %v, want one naming %s and %s", err, a, b)
	}
}

// A host name is looked up and dialled.
func TestDialServiceResolvesTheName(t *testing.T) {
	live, _ := listen(t)
	_, port, _ := net.SplitHostPort(live)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c, err := dialService(ctx, net.JoinHostPort("localhost", port))
	if err != nil {
		t.Fatalf("dial: %v", err)
	}
	c.Close()
}

// With an HTTP proxy in the environment, connections are left to gRPC's dialer, which sends
// them through it (the environment is read once per process: a child process checks).
func TestProxiedFollowsTheEnvironment(t *testing.T) {
	if os.Getenv("CELLSTORE_PROXIED_CHILD") == "1" {
		fmt.Println(proxied("db.example.com:16000"), proxied("master.db.svc:16000"))
		return
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestProxiedFollowsTheEnvironment$")
	cmd.Env = append(os.Environ(), "CELLSTORE_PROXIED_CHILD=1", "HTTPS_PROXY=http://127.0.0.1:3128", "NO_PROXY=.svc")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("child: %v: %s", err, out)
	}
	if !strings.HasPrefix(string(out), "true false\n") {
		t.Fatalf("proxied(outside NO_PROXY) proxied(inside NO_PROXY) = %q, want true false", out)
	}
	if proxied("db.example.com:16000") && os.Getenv("HTTPS_PROXY") == "" && os.Getenv("https_proxy") == "" {
		t.Fatal("proxied without a proxy in the environment")
	}
}
