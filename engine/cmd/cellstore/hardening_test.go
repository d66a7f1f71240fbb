package main

import (
	"bufio"
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	pb "github.com/cellstore/cellstore/engine/api/cellstore/v1"
	"github.com/cellstore/cellstore/engine/client"
	"github.com/cellstore/cellstore/engine/rpc"
)

// Real processes, real sockets: the failures of issue "hardening" that need a whole server.

func TestStandaloneDirectoryLockAndDrain(t *testing.T) {
	bin := cellstoreBinary(t)
	dir := t.TempDir()
	p := startStandalone(t, bin, dir)
	args, _, _, _ := standaloneArgs(t, dir)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, bin, append([]string{"standalone"}, args...)...).CombinedOutput()
	if err == nil || ctx.Err() != nil {
		t.Fatalf("a second standalone on the same directory did not fail at once (err %v):\n%s", err, out)
	}
	if want := fmt.Sprintf("is locked by pid %d on host", p.cmd.Process.Pid); !strings.Contains(string(out), want) {
		t.Fatalf("the refusal does not name the holder (%q):\n%s", want, out)
	}
	// The first one is unharmed.
	runShell(t, bin, p.master, "create 't', 'f'; put 't', 'r', 'f:q', 'v'")
	if out := runShell(t, bin, p.master, "get 't', 'r'"); !strings.Contains(out, "value=v") {
		t.Fatalf("get:\n%s", out)
	}
	// A drain is reversible from the shell, and status shows it.
	sout := runShell(t, bin, p.master, fmt.Sprintf("drain '%s'; status 'simple'", p.data))
	if !strings.Contains(sout, "(1 draining)") || !strings.Contains(sout, p.data+" zone=") || !strings.Contains(sout, " draining\n") {
		t.Fatalf("drain:\n%s", sout)
	}
	sout = runShell(t, bin, p.master, fmt.Sprintf("undrain '%s'; status", p.data))
	if !strings.Contains(sout, "takes regions again") || !strings.Contains(sout, "(0 draining)") || !strings.Contains(sout, "0 in transition (0 failed to open)") {
		t.Fatalf("undrain:\n%s", sout)
	}
	// The prestop hook answers only the local host: over loopback it is served (a GET is
	// refused by the hook itself, not by the address check).
	resp, err := http.Get("http://" + p.httpAddr + "/prestop")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusMethodNotAllowed {
		t.Fatalf("GET /prestop over loopback: %d, want 405 from the hook", resp.StatusCode)
	}
}

// waitHTTP polls url until it answers status want.
func waitHTTP(t *testing.T, url string, want int, within time.Duration) string {
	t.Helper()
	deadline := time.Now().Add(within)
	c := http.Client{Timeout: 2 * time.Second}
	for {
		resp, err := c.Get(url)
		if err == nil {
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode == want {
				return string(body)
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s did not answer %d within %s (last: %v)", url, want, within, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func metricValue(t *testing.T, metrics, name string) float64 {
	t.Helper()
	sc := bufio.NewScanner(strings.NewReader(metrics))
	for sc.Scan() {
		if f := strings.Fields(sc.Text()); len(f) == 2 && f[0] == name {
			v, err := strconv.ParseFloat(f[1], 64)
			if err != nil {
				t.Fatal(err)
			}
			return v
		}
	}
	t.Fatalf("metric %s not found", name)
	return 0
}

// TestStandaloneDataPortSurvivesEMFILE runs a standalone with a low open-file limit and opens
// connections until its accepts fail with "too many open files"; once they close, the data port
// serves again (it used to stop for good) and the failed accepts were counted.
func TestStandaloneDataPortSurvivesEMFILE(t *testing.T) {
	bin := cellstoreBinary(t)
	const limit = 256
	p := startStandaloneWrapped(t, bin, t.TempDir(), func(argv []string) []string {
		return append([]string{"bash", "-c", fmt.Sprintf(`ulimit -n %d && exec "$@"`, limit), "bash"}, argv...)
	})
	runShell(t, bin, p.master, "create 't', 'f'; put 't', 'r', 'f:q', 'v'")
	var conns []net.Conn
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	failures := 0
	for len(conns) < 2*limit && failures < 5 {
		c, err := net.DialTimeout("tcp", p.data, 500*time.Millisecond)
		if err != nil {
			failures++ // the listen backlog is full: accepts are failing
			continue
		}
		conns = append(conns, c)
	}
	// Held long enough for the server to have hit the limit (its accept loop backs off up to 1 s).
	deadline := time.Now().Add(3 * time.Second)
	for time.Now().Before(deadline) {
		time.Sleep(100 * time.Millisecond)
	}
	for _, c := range conns {
		c.Close()
	}
	conns = nil
	metrics := waitHTTP(t, "http://"+p.httpAddr+"/metrics", 200, 30*time.Second)
	if n := metricValue(t, metrics, "cellstore_regionserver_rpc_accept_errors_total"); n == 0 {
		t.Fatalf("no accept failed with %d open files allowed: the test did not exhaust them", limit)
	}
	waitHTTP(t, "http://"+p.httpAddr+"/readyz", 200, 30*time.Second)
	if out := runShell(t, bin, p.master, "get 't', 'r'"); !strings.Contains(out, "value=v") {
		t.Fatalf("the data port does not serve after the file limit was reached:\n%s", out)
	}
}

// rssBytes is a process's resident set size.
func rssBytes(t *testing.T, pid int) int64 {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if f := strings.Fields(l); len(f) >= 2 && f[0] == "VmRSS:" {
			kb, _ := strconv.ParseInt(f[1], 10, 64)
			return kb << 10
		}
	}
	t.Fatal("no VmRSS")
	return 0
}

// requestFrame encodes a data-path request by hand, as a hostile client would.
func requestFrame(callID uint64, method pb.Method, msg proto.Message) []byte {
	var hdr []byte
	hdr = protowire.AppendTag(hdr, 1, protowire.VarintType)
	hdr = protowire.AppendVarint(hdr, callID)
	hdr = protowire.AppendTag(hdr, 2, protowire.VarintType)
	hdr = protowire.AppendVarint(hdr, uint64(method))
	body, _ := proto.Marshal(msg)
	b := make([]byte, 4, 4+len(hdr)+len(body)+20)
	b = binary.AppendUvarint(b, uint64(len(hdr)))
	b = append(b, hdr...)
	b = binary.AppendUvarint(b, uint64(len(body)))
	b = append(b, body...)
	binary.BigEndian.PutUint32(b, uint32(len(b)-4))
	return b
}

// TestStandaloneRSSBoundedUnderPipelining is the memory attack: one connection pipelines scan
// opens that each ask for the whole table (caching 2^31-1) and never reads an answer. The server
// used to queue every answer (RSS grew until the kernel killed it); now it holds at most its
// bounds, and a well-behaved client is served throughout.
func TestStandaloneRSSBoundedUnderPipelining(t *testing.T) {
	bin := cellstoreBinary(t)
	p := startStandalone(t, bin, t.TempDir(), "--scan-max-result-size", "1Mi", "--request-queue-size", "32Mi", "--max-scanners", "1000",
		"--heap-limit", "192Mi")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	if out, err := exec.CommandContext(ctx, bin, "pe", "--masters", p.master, "--rows", "2000", "--valueSize", "4096",
		"sequentialWrite", "1").CombinedOutput(); err != nil {
		t.Fatalf("load: %v\n%s", err, out)
	}
	c, err := client.New(client.Config{Masters: []string{p.master}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	var loc *pb.RegionLocation
	if err := c.Master(ctx, func(ctx context.Context, m pb.MasterClient) error {
		resp, err := m.LocateRegion(ctx, &pb.LocateRegionRequest{Table: client.ParseTableName("TestTable"), Row: []byte("0")})
		if err == nil && len(resp.GetLocations()) > 0 {
			loc = resp.GetLocations()[0]
		}
		return err
	}); err != nil || loc == nil {
		t.Fatalf("locate: %v", err)
	}
	before := rssBytes(t, p.cmd.Process.Pid)

	nc, err := net.Dial("tcp", p.data)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	hello := append([]byte(nil), rpc.Preamble[:]...)
	hello = append(hello, requestFrame(0, 0, &pb.ConnectionHeader{User: "attacker"})...)
	if _, err := nc.Write(hello); err != nil {
		t.Fatal(err)
	}
	const attempts = 200000 // 200 GB of answers if the server queued them all
	sent := make(chan int, 1)
	go func() {
		n := 0
		_ = nc.SetWriteDeadline(time.Now().Add(8 * time.Second))
		for i := range attempts {
			req := &pb.ScanRequest{Region: &pb.RegionSpecifier{Name: loc.GetRegion().GetName()},
				Scan: &pb.Scan{Caching: math.MaxInt32}, NumberOfRows: math.MaxInt32}
			if _, err := nc.Write(requestFrame(uint64(i+1), pb.Method_METHOD_SCAN, req)); err != nil {
				break
			}
			n++
		}
		sent <- n
	}()
	// A well-behaved client keeps being served while the attack runs; RSS is sampled throughout.
	tbl := c.Table("TestTable")
	peak := before
	var n int
	for done := false; !done; {
		select {
		case n = <-sent:
			done = true
		default:
		}
		if _, err := tbl.Get(ctx, &pb.Get{Row: []byte(fmt.Sprintf("%026d", 10))}); err != nil {
			t.Fatalf("a well-behaved client during the attack: %v", err)
		}
		peak = max(peak, rssBytes(t, p.cmd.Process.Pid))
	}
	peak = max(peak, rssBytes(t, p.cmd.Process.Pid))
	// The process's budget: its heap limit (which holds the 32 MiB request queue, 64 answers of
	// 1 MiB waiting for the attacker and 1000 open scanners), the 64 + 16 MiB off-heap memstore
	// and cache, and 96 MiB for the binary, stacks and page tables. Without the bounds the answers
	// alone would need 200 GB.
	const budget = (192 + 80 + 96) << 20
	t.Logf("attacker got %d of %d requests in; RSS %d MiB before, peak %d MiB", n, attempts, before>>20, peak>>20)
	if n >= attempts {
		t.Errorf("the attacker sent all %d requests: nothing pushed back", attempts)
	}
	if peak > budget {
		t.Errorf("RSS reached %d MiB under the attack, budget %d MiB", peak>>20, budget>>20)
	}
}

// metricsOf fetches a process's metrics text.
func metricsOf(t *testing.T, httpAddr string) string {
	t.Helper()
	return waitHTTP(t, "http://"+httpAddr+"/metrics", 200, 30*time.Second)
}

// TestStandaloneHoldsTenThousandRegions: regions cost memory only when written, so one standalone
// opens 10 000 of them (it used to fail after ~128: every region took a 2 MiB memstore chunk at
// open), holding no memstore chunk, within its heap limit; one more region than the cluster may
// hold is refused before anything is created.
func TestStandaloneHoldsTenThousandRegions(t *testing.T) {
	bin := cellstoreBinary(t)
	p := startStandalone(t, bin, t.TempDir(), "--heap-limit", "1Gi")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	out, _ := exec.CommandContext(ctx, bin, "shell", "--masters", p.master, "-e", "create 'big', 'f', {NUMREGIONS => 10001}").CombinedOutput()
	if !strings.Contains(string(out), "needs 10001 regions but the cluster holds 0 of at most 10000") {
		t.Fatalf("a create over capacity:\n%s", out)
	}
	start := time.Now()
	if out := runShell(t, bin, p.master, "create 'big', 'f', {NUMREGIONS => 10000}"); !strings.Contains(out, "Created table big") {
		t.Fatalf("create:\n%s", out)
	}
	var metrics string
	deadline := time.Now().Add(3 * time.Minute)
	for {
		metrics = metricsOf(t, p.httpAddr)
		if metricValue(t, metrics, "cellstore_regionserver_region_count") == 10000 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%v regions open after 3 minutes", metricValue(t, metrics, "cellstore_regionserver_region_count"))
		}
		time.Sleep(500 * time.Millisecond)
	}
	opened := time.Since(start)
	if n := metricValue(t, metrics, `cellstore_memstore_chunk_pool_chunks{pool="memstore",state="in_use"}`); n != 0 {
		t.Errorf("10 000 empty regions hold %v memstore chunks", n)
	}
	// The live heap, right after a collection.
	resp, err := http.Get("http://" + p.httpAddr + "/debug/pprof/heap?gc=1")
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	heap := metricValue(t, metricsOf(t, p.httpAddr), "go_memstats_heap_alloc_bytes")
	rss := rssBytes(t, p.cmd.Process.Pid)
	t.Logf("10 000 regions open in %s; live heap %.0f MiB; RSS %d MiB", opened.Round(time.Second), heap/(1<<20), rss>>20)
	if heap > 400<<20 {
		t.Errorf("live heap %.0f MiB with 10 000 empty regions", heap/(1<<20))
	}
	// Budget: 1 GiB heap limit, 96 MiB off-heap, 256 MiB overhead.
	if rss > (1024+96+256)<<20 {
		t.Errorf("RSS %d MiB over the process's memory plan", rss>>20)
	}
	// Writes to a few of them work, each taking a chunk only then.
	runShell(t, bin, p.master, "put 'big', 'a', 'f:q', '1'; put 'big', 'z', 'f:q', '2'")
	if out := runShell(t, bin, p.master, "get 'big', 'z'; status"); !strings.Contains(out, "value=2") || !strings.Contains(out, "10000 regions, 0 in transition") {
		t.Fatalf("after writes:\n%s", out)
	}
	if n := metricValue(t, metricsOf(t, p.httpAddr), `cellstore_memstore_chunk_pool_chunks{pool="memstore",state="in_use"}`); n != 2 {
		t.Errorf("two written regions hold %v chunks, want 2", n)
	}
}
