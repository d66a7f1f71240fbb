// Package processtest starts and stops the cellstore processes of real-process tests (the command's
// own tests and the chaos run): free loopback ports, processes killed by PID when the test ends
// (also when it fails), readiness polled with a deadline, and the table locations the master knows.
package processtest

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	pb "github.com/cellstore/cellstore/engine/api/cellstore/v1"
	"github.com/cellstore/cellstore/engine/client"
)

// FreePort returns a loopback port for a process the test starts: one that no other test binary
// of this user (with the same temporary directory) is handed, and that the kernel never picks
// for a listener on port 0 or for a connection's local end. Linux only (it reads /proc).
//
// Ports come from outside the kernel's ephemeral range, in blocks of portBlock, each block owned by
// one test binary through an flock on a file under the temporary directory (released when that
// binary ends, also when it crashes), and handed out in order. A port from the ephemeral range
// was not enough: a region server killed with -9 frees its port, and another package's test,
// running in parallel, once listened there with a fake server of the same protocol while a
// client still had the dead server's address from the catalog (it answered "unknown method").
func FreePort(t testing.TB) string {
	t.Helper()
	ports.Lock()
	defer ports.Unlock()
	for range 1000 {
		if ports.next == ports.end {
			if err := ports.takeBlock(); err != nil {
				t.Fatalf("processtest: %v", err)
			}
		}
		port := ports.next
		ports.next++
		// In use by something that is not a test (or by a process an earlier holder of the
		// block left running): skip it.
		l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(port))
		if errors.Is(err, syscall.EADDRINUSE) {
			continue
		}
		if err != nil {
			t.Fatalf("processtest: %v", err)
		}
		l.Close()
		return strconv.Itoa(port)
	}
	t.Fatal("processtest: no free loopback port in 1000 tries")
	return ""
}

// portBlock is how many ports a test binary takes at once.
const portBlock = 64

// firstBlock is where a binary's search for a block starts: a variable so that the test can start
// a second binary's search at the first one's block.
var firstBlock = os.Getpid

type portAllocator struct {
	sync.Mutex
	next, end int
	locks     []*os.File // the blocks' lock files, open (and locked) for the binary's life
}

var ports portAllocator

// portRange is where FreePort's blocks lie: in 20000-29999 (below the NodePort range the local
// Kubernetes may use), outside the kernel's ephemeral range.
func portRange() (lo, hi int, err error) {
	first, last, err := ephemeralRange()
	if err != nil {
		return 0, 0, err
	}
	return portWindow(first, last)
}

// portWindow is the larger part of 20000-29999 (as [lo, hi)) left beside the ephemeral range
// first-last, on either side of it.
func portWindow(first, last int) (lo, hi int, err error) {
	lo, hi = 20000, 30000
	if first < hi && last >= lo {
		if below, above := first-lo, hi-(last+1); above > below {
			lo = last + 1
		} else {
			hi = first
		}
	}
	if hi-lo < 4*portBlock {
		return 0, 0, fmt.Errorf("the kernel's ephemeral ports are %d-%d: no room for test ports in 20000-29999 (move net.ipv4.ip_local_port_range out of it)", first, last)
	}
	return lo, hi, nil
}

// ephemeralRange is the kernel's range of ports for port 0 and for connections' local ends.
func ephemeralRange() (first, last int, err error) {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return 0, 0, fmt.Errorf("reading the kernel's ephemeral port range: %w", err)
	}
	f := strings.Fields(string(b))
	if len(f) == 2 {
		if first, err = strconv.Atoi(f[0]); err == nil {
			last, err = strconv.Atoi(f[1])
		}
	}
	if len(f) != 2 || err != nil {
		return 0, 0, fmt.Errorf("ip_local_port_range %q: want two numbers", b)
	}
	return first, last, nil
}

// takeBlock locks a block of ports no other test binary holds, starting the search at one that
// depends on the process id so that binaries started together look in different places.
func (p *portAllocator) takeBlock() error {
	lo, hi, err := portRange()
	if err != nil {
		return err
	}
	dir := filepath.Join(os.TempDir(), fmt.Sprintf("cellstore-test-ports-%d", os.Getuid()))
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	blocks := (hi - lo) / portBlock
	first := firstBlock() + len(p.locks)
	for i := range blocks {
		b := (first + i) % blocks
		f, err := os.OpenFile(filepath.Join(dir, strconv.Itoa(lo+b*portBlock)), os.O_CREATE|os.O_RDWR, 0o600)
		if err != nil {
			return err
		}
		if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
			f.Close()
			if errors.Is(err, syscall.EWOULDBLOCK) {
				continue // another test binary's
			}
			return fmt.Errorf("locking %s: %w", f.Name(), err)
		}
		p.locks = append(p.locks, f)
		p.next, p.end = lo+b*portBlock, lo+(b+1)*portBlock
		return nil
	}
	return fmt.Errorf("every block of test ports in %d-%d is held by another test binary (%s)", lo, hi, dir)
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
