// Package processtest starts and stops the cellstore processes of real-process tests (the command's
// own tests and the chaos run): free loopback ports, processes killed by PID when the test ends
// (also when it fails), readiness polled with a deadline, and the table locations the master knows.
package processtest

import (
	"context"
	"crypto/tls"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	pb "github.com/cellstore/cellstore/engine/api/cellstore/v1"
	"github.com/cellstore/cellstore/engine/client"
)

// handedOut are the ports FreePort returned in this test binary: a port handed to a process that
// has not bound it yet is free again, and the kernel may offer it twice.
var handedOut sync.Map

// FreePort returns a loopback port that was free a moment ago and that it never returned before
// in this test binary (a chaos run once gave a region server the port of a master that had not
// started yet).
func FreePort(t testing.TB) string {
	t.Helper()
	var held []net.Listener // ports offered twice stay bound until one that was not comes
	defer func() {
		for _, l := range held {
			l.Close()
		}
	}()
	for range 1000 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		port := l.Addr().(*net.TCPAddr).Port
		if _, dup := handedOut.LoadOrStore(port, true); dup {
			held = append(held, l)
			continue
		}
		l.Close()
		return strconv.Itoa(port)
	}
	t.Fatal("processtest: no loopback port that was not handed out already")
	return ""
}

// Proc is a process a test started.
type Proc struct {
	Cmd    *exec.Cmd
	Exited chan struct{} // closed once the process has ended
	HTTP   string        // its telemetry address, for WaitReady (set by the caller)
	HTTPS  bool          // the telemetry endpoint serves TLS (its certificate is not checked: loopback)
	Data   string        // a region server's data address (set by the caller)
}

// Start runs bin with args, its standard error to the test's; the process is killed (continued
// first, if a test paused it) when the test ends.
func Start(t testing.TB, bin string, args ...string) *Proc {
	t.Helper()
	return StartEnv(t, bin, nil, args...)
}

// StartEnv is Start with extra environment variables ("NAME=value").
func StartEnv(t testing.TB, bin string, env []string, args ...string) *Proc {
	t.Helper()
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), env...)
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &Proc{Cmd: cmd, Exited: make(chan struct{})}
	go func() { _ = cmd.Wait(); close(p.Exited) }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGCONT)
		_ = cmd.Process.Kill()
		<-p.Exited
	})
	return p
}

// WaitReady polls the process's /readyz until it answers 200, failing the test if the process
// exits or the timeout passes first.
func (p *Proc) WaitReady(t testing.TB, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		select {
		case <-p.Exited:
			t.Fatalf("%v exited before it was ready", p.Cmd.Args)
		default:
		}
		if resp, err := p.httpClient().Get(p.URL("/readyz")); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
		}
		time.Sleep(50 * time.Millisecond) // polling readiness
	}
	t.Fatalf("%v not ready after %v", p.Cmd.Args, timeout)
}

// TableLocations returns the table's regions (replicas included), or nil while any is not OPEN.
func TableLocations(ctx context.Context, cl *client.Client, table string) []*pb.RegionLocation {
	var locs []*pb.RegionLocation
	if err := cl.Master(ctx, func(ctx context.Context, m pb.MasterClient) error {
		resp, err := m.GetTableRegions(ctx, &pb.TableRequest{Table: client.ParseTableName(table)})
		if err == nil {
			locs = resp.GetLocations()
		}
		return err
	}); err != nil {
		return nil
	}
	for _, l := range locs {
		if l.GetState() != pb.RegionState_REGION_STATE_OPEN || l.GetServer() == nil {
			return nil
		}
	}
	return locs
}

// URL is the address of path on the process's telemetry endpoint.
func (p *Proc) URL(path string) string {
	if p.HTTPS {
		return "https://" + p.HTTP + path
	}
	return "http://" + p.HTTP + path
}

func (p *Proc) httpClient() *http.Client {
	if !p.HTTPS {
		return http.DefaultClient
	}
	return &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}} //nolint:gosec // the test's own process on loopback
}
