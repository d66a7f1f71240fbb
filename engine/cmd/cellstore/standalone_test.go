package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/cellstore/cellstore/engine/processtest"
)

func freePort(t *testing.T) string { return processtest.FreePort(t) }

type standaloneProc struct {
	cmd            *exec.Cmd
	master         string
	data, httpAddr string // the region server's data and HTTP addresses
	exited         chan error
}

// standaloneArgs are the arguments of a standalone on dir on free loopback ports.
func standaloneArgs(t *testing.T, dir string) (args []string, master, data, httpAddr string) {
	master = "127.0.0.1:" + freePort(t)
	data, httpAddr = "127.0.0.1:"+freePort(t), "127.0.0.1:"+freePort(t)
	if dir != "" {
		args = []string{"--dir", dir}
	}
	return append(args, "--master-addr", master,
		"--master-http-addr", "127.0.0.1:"+freePort(t), "--data-addr", data,
		"--admin-addr", "127.0.0.1:"+freePort(t), "--http-addr", httpAddr,
		"--memstore-offheap-size", "64Mi", "--blockcache-offheap-size", "16Mi", "--blockcache-onheap-size", "16Mi",
		"--log-level", "warn"), master, data, httpAddr
}

// startStandalone runs the binary and waits for its "connect with" line. wrap, when given,
// returns the command line to run instead (the binary and its arguments wrapped).
func startStandalone(t *testing.T, bin, dir string, extra ...string) *standaloneProc {
	return startStandaloneWrapped(t, bin, dir, nil, extra...)
}

func startStandaloneWrapped(t *testing.T, bin, dir string, wrap func([]string) []string, extra ...string) *standaloneProc {
	t.Helper()
	args, master, data, httpAddr := standaloneArgs(t, dir)
	argv := append(append([]string{bin, "standalone"}, args...), extra...)
	if wrap != nil {
		argv = wrap(argv)
	}
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &standaloneProc{cmd: cmd, master: master, data: data, httpAddr: httpAddr, exited: make(chan error, 1)}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-p.exited
	})
	ready := make(chan struct{})
	go func() {
		sc := bufio.NewScanner(out)
		signalled := false
		for sc.Scan() {
			if !signalled && strings.Contains(sc.Text(), "connect with: cellstore shell --masters "+master) {
				signalled = true
				close(ready)
			}
		}
		p.exited <- cmd.Wait()
		close(p.exited)
	}()
	select {
	case <-ready:
	case err := <-p.exited:
		t.Fatalf("standalone exited before it was ready: %v", err)
	case <-time.After(60 * time.Second):
		t.Fatal("standalone not ready after 60s")
	}
	return p
}

func (p *standaloneProc) stop(t *testing.T, sig os.Signal) {
	t.Helper()
	if err := p.cmd.Process.Signal(sig); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-p.exited:
		if sig == os.Interrupt && err != nil {
			t.Fatalf("standalone exited with %v after SIGINT", err)
		}
	case <-time.After(60 * time.Second):
		t.Fatal("standalone did not exit within 60s")
	}
}

func runShell(t *testing.T, bin, master, script string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, bin, "shell", "--masters", master, "-e", script).CombinedOutput()
	if err != nil {
		t.Fatalf("shell %q: %v\n%s", script, err, out)
	}
	return string(out)
}

var (
	buildOnce sync.Once
	builtBin  string
	buildErr  error
	buildDir  string
)

// cellstoreBinary builds this command once per test binary.
func cellstoreBinary(t *testing.T) string {
	t.Helper()
	if testing.Short() {
		t.Skip("builds the binary")
	}
	buildOnce.Do(func() {
		buildDir, buildErr = os.MkdirTemp("", "cellstore-bin-")
		if buildErr != nil {
			return
		}
		builtBin = filepath.Join(buildDir, "cellstore")
		if out, err := exec.Command("go", "build", "-o", builtBin, ".").CombinedOutput(); err != nil {
			buildErr = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return builtBin
}

func TestMain(m *testing.M) {
	code := m.Run()
	if buildDir != "" {
		_ = os.RemoveAll(buildDir)
	}
	os.Exit(code)
}

func TestStandaloneSmoke(t *testing.T) {
	bin := cellstoreBinary(t)
	dir := t.TempDir()
	// First without zeros written ahead of the WAL (on by default): none are.
	p := startStandalone(t, bin, dir, "--wal-zero-ahead=false")
	runShell(t, bin, p.master, "create 't1', 'cf'; put 't1', 'r1', 'cf:a', 'hello'; put 't1', 'r2', 'cf:a', 'world'")
	if out := runShell(t, bin, p.master, "get 't1', 'r1'"); !strings.Contains(out, "value=hello") {
		t.Fatalf("get before restart:\n%s", out)
	}
	if out := runShell(t, bin, p.master, "list_regions 't1'"); !strings.Contains(out, " OPEN ") || !strings.Contains(out, "1 row(s)") {
		t.Fatalf("list_regions:\n%s", out)
	}
	if z := metricValue(t, metricsOf(t, p.httpAddr), "cellstore_regionserver_wal_zeroed_bytes"); z != 0 {
		t.Fatalf("cellstore_regionserver_wal_zeroed_bytes = %v with --wal-zero-ahead=false", z)
	}
	p.stop(t, os.Interrupt)

	// Restart after a clean stop, with zeros written ahead of the WAL (the default): the data is
	// there.
	p = startStandalone(t, bin, dir)
	if out := runShell(t, bin, p.master, "get 't1', 'r2'"); !strings.Contains(out, "value=world") {
		t.Fatalf("get after restart:\n%s", out)
	}
	// Write more, then kill the process without a flush: the restart replays the WAL, whose
	// segment holds zeros past its records.
	runShell(t, bin, p.master, "put 't1', 'r3', 'cf:a', 'unflushed'")
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		z := metricValue(t, metricsOf(t, p.httpAddr), "cellstore_regionserver_wal_zeroed_bytes")
		if z > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("cellstore_regionserver_wal_zeroed_bytes = %v 20 s after a write (zeros ahead are on by default)", z)
		}
	}
	p.stop(t, syscall.SIGKILL)
	p = startStandalone(t, bin, dir)
	out := runShell(t, bin, p.master, "get 't1', 'r3'; count 't1'")
	if !strings.Contains(out, "value=unflushed") || !strings.Contains(out, "3 row(s)") {
		t.Fatalf("after kill -9 and restart:\n%s", out)
	}
	// Split the table in the shell: two regions, the same rows.
	if out := runShell(t, bin, p.master, "split 't1', 'r2'"); !strings.Contains(out, "split region") {
		t.Fatalf("split:\n%s", out)
	}
	out = runShell(t, bin, p.master, "list_regions 't1'; count 't1'; get 't1', 'r3'")
	if !strings.Contains(out, `"" "r2"`) || !strings.Contains(out, `"r2" ""`) || !strings.Contains(out, "3 row(s)") ||
		!strings.Contains(out, "value=unflushed") {
		t.Fatalf("after the split:\n%s", out)
	}
	// Per-cell TTLs from the shell: a cell whose timestamp + TTL is long past is never seen, one
	// with an hour to live is; both survive a kill -9 (WAL replay keeps the TTL).
	runShell(t, bin, p.master, "put 't1', 'r4', 'cf:a', 'gone', 1000, {TTL => 1000}; put 't1', 'r5', 'cf:a', 'kept', {TTL => 3600000}")
	p.stop(t, syscall.SIGKILL)
	p = startStandalone(t, bin, dir)
	out = runShell(t, bin, p.master, "get 't1', 'r4'; get 't1', 'r5'; count 't1'")
	if strings.Contains(out, "value=gone") || !strings.Contains(out, "value=kept") || !strings.Contains(out, "4 row(s)") {
		t.Fatalf("cells with TTLs:\n%s", out)
	}
	// Server-side compute from the shell: counters aggregated in the region server, then deleted
	// by a bulk delete.
	out = runShell(t, bin, p.master, "incr 't1', 'n1', 'cf:n', 5; incr 't1', 'n2', 'cf:n', 7; incr 't1', 'n3', 'cf:n', -3; "+
		"aggregate 't1', 'cf:n', {ROWPREFIXFILTER => 'n', MEDIAN => true}")
	got := map[string]string{}
	for _, line := range strings.Split(out, "\n") {
		if f := strings.Fields(line); len(f) == 2 {
			got[f[0]] = f[1]
		}
	}
	for k, want := range map[string]string{"values": "3", "sum": "9", "min": "-3", "max": "7", "avg": "3", "median": "5"} {
		if got[k] != want {
			t.Fatalf("aggregate: %s = %q, want %q\n%s", k, got[k], want, out)
		}
	}
	out = runShell(t, bin, p.master, "bulk_delete 't1', {ROWPREFIXFILTER => 'n'}; count 't1'")
	if !strings.Contains(out, "3 row(s) deleted") || !strings.Contains(out, "4 row(s)") {
		t.Fatalf("bulk_delete:\n%s", out)
	}
	out = runShell(t, bin, p.master, "flush 't1'; compact 't1'; major_compact 't1'; count 't1'")
	for _, want := range []string{"flush: 2 region(s) done", "compact: 2 region(s) done", "major_compact: 2 region(s) done", "4 row(s)"} {
		if !strings.Contains(out, want) {
			t.Fatalf("flush and compactions: no %q in\n%s", want, out)
		}
	}
	// Merge the split's two regions back (their references are compacted away): one region,
	// every row, also after a kill -9 (the merged region reads its parents' files through links
	// until it compacts them).
	names := regexp.MustCompile(`\b[0-9a-f]{16}\b`).FindAllString(runShell(t, bin, p.master, "list_regions 't1'"), -1)
	if len(names) != 2 {
		t.Fatalf("list_regions before the merge names %v", names)
	}
	if out := runShell(t, bin, p.master, fmt.Sprintf("merge_region '%s', '%s'", names[0], names[1])); !strings.Contains(out, "merged regions") {
		t.Fatalf("merge_region:\n%s", out)
	}
	p.stop(t, syscall.SIGKILL)
	p = startStandalone(t, bin, dir)
	out = runShell(t, bin, p.master, "list_regions 't1'; count 't1'; get 't1', 'r3'")
	if !strings.Contains(out, `"" ""`) || !strings.Contains(out, "1 row(s)") || !strings.Contains(out, "4 row(s)") || !strings.Contains(out, "value=unflushed") {
		t.Fatalf("after the merge:\n%s", out)
	}
	p.stop(t, os.Interrupt)
}

// Every PE command runs against a real standalone store with no errors, and
// reports what it did; the reads find what the writes wrote.
func TestPECommands(t *testing.T) {
	bin := cellstoreBinary(t)
	p := startStandalone(t, bin, t.TempDir())
	pe := func(args ...string) map[string]any {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
		defer cancel()
		args = append([]string{"pe", "--masters", p.master, "--json", "--valueSize", "20"}, args...)
		out, err := exec.CommandContext(ctx, bin, args...).Output()
		if err != nil {
			t.Fatalf("cellstore %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		var r map[string]any
		if err := json.Unmarshal(out, &r); err != nil {
			t.Fatalf("cellstore %s: output is not JSON (%v):\n%s", strings.Join(args, " "), err, out)
		}
		if errs, _ := r["errors"].(map[string]any); len(errs) != 0 {
			t.Fatalf("cellstore %s: errors %v", strings.Join(args, " "), errs)
		}
		return r
	}
	rows := func(r map[string]any) int { return int(r["rows"].(float64)) }

	// Batched by the 2 MiB write buffer (HBase PE's default): each thread's 300 rows are one batch.
	if r := pe("--rows", "300", "--presplit", "3", "sequentialWrite", "2"); rows(r) != 600 || int(r["operations"].(float64)) != 2 {
		t.Fatalf("sequentialWrite: %v", r)
	}
	// A buffer smaller than a row sends every row as a batch of its own.
	if r := pe("--rows", "20", "--bufferSize", "1", "sequentialWrite", "2"); rows(r) != 40 || int(r["operations"].(float64)) != 40 {
		t.Fatalf("sequentialWrite with a 1-byte buffer: %v", r)
	}
	// Batches of 100 with three under way per thread: each batch is one operation.
	if r := pe("--rows", "300", "--batchSize", "100", "--inFlight", "3", "randomWrite", "2"); rows(r) != 600 || int(r["operations"].(float64)) != 6 {
		t.Fatalf("randomWrite in batches: %v", r)
	}
	if r := pe("--rows", "300", "--autoFlush", "randomWrite", "2"); rows(r) != 600 {
		t.Fatalf("randomWrite: %v", r)
	}
	// Reads of the 600 loaded rows: a missing row would be an error.
	for _, cmd := range []string{"sequentialRead", "randomRead"} {
		if r := pe("--rows", "300", cmd, "2"); rows(r) != 600 {
			t.Fatalf("%s: %v", cmd, r)
		}
	}
	if r := pe("--rows", "50", "--multiGet", "4", "randomRead", "1"); rows(r) != 200 {
		t.Fatalf("multiGet: %v", r)
	}
	// scan: one scanner per thread, one row per operation, across the pre-split regions.
	if r := pe("--rows", "300", "--caching", "7", "scan", "2"); rows(r) != 600 || int(r["operations"].(float64)) != 600 {
		t.Fatalf("scan: %v", r)
	}
	if r := pe("--rows", "20", "scanRange10", "1"); rows(r) != 200 {
		t.Fatalf("scanRange10: %v", r)
	}
	if r := pe("--rows", "10", "randomSeekScan", "1"); rows(r) == 0 {
		t.Fatalf("randomSeekScan: %v", r)
	}
	for _, cmd := range []string{"increment", "append", "checkAndPut", "checkAndMutate", "filterScan"} {
		if r := pe("--rows", "20", cmd, "2"); int(r["operations"].(float64)) != 40 {
			t.Fatalf("%s: %v", cmd, r)
		}
	}
	// A --duration run of scan wraps around its range instead of stopping.
	if r := pe("--rows", "50", "--duration", "1s", "scan", "1"); rows(r) <= 50 {
		t.Fatalf("scan --duration: %v", r)
	}
	// Reading a table that was never loaded reports missing rows, by kind.
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	out, _ := exec.CommandContext(ctx, bin, "pe", "--masters", p.master, "--table", "Empty", "--rows", "5", "randomRead", "1").CombinedOutput()
	if !strings.Contains(string(out), "errors MISSING_ROW: 5") {
		t.Fatalf("randomRead of an empty table:\n%s", out)
	}

	// Connections, as HBase PE makes them: one per thread by default, one for all with --oneCon,
	// --connCount otherwise — counted by the region server while the run lasts.
	for _, tc := range []struct {
		args []string
		want int
	}{
		{nil, 3}, {[]string{"--oneCon"}, 1}, {[]string{"--connCount", "2"}, 2},
	} {
		rep, most := peConnections(t, bin, p, append(tc.args, "--rows", "100000", "--duration", "2s", "--autoFlush", "randomWrite", "3")...)
		if got := int(rep["connections"].(float64)); got != tc.want || most != tc.want {
			t.Errorf("pe %v: reports %d connections, the region server counted %d at most; want %d", tc.args, got, most, tc.want)
		}
	}
}

// peConnections runs `cellstore pe args` against p and returns its JSON report and the most data-path
// connections p's region server had open while it ran (after those of earlier runs closed).
func peConnections(t *testing.T, bin string, p *standaloneProc, args ...string) (map[string]any, int) {
	t.Helper()
	open := func() int {
		return int(metricValue(t, metricsOf(t, p.httpAddr), "cellstore_regionserver_rpc_connections"))
	}
	for deadline := time.Now().Add(30 * time.Second); open() != 0; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the region server still has %d data connections open 30 s after the last client closed", open())
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	var stdout, stderr strings.Builder
	cmd := exec.CommandContext(ctx, bin, append([]string{"pe", "--masters", p.master, "--json", "--valueSize", "20"}, args...)...)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	most := 0
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case err := <-done:
			if err != nil {
				t.Fatalf("cellstore pe %v: %v\n%s%s", args, err, stdout.String(), stderr.String())
			}
			var rep map[string]any
			if err := json.Unmarshal([]byte(stdout.String()), &rep); err != nil {
				t.Fatalf("cellstore pe %v: output is not JSON (%v):\n%s", args, err, stdout.String())
			}
			return rep, most
		case <-tick.C:
			most = max(most, open())
		}
	}
}

// TestUpdateConfig: a standalone started with --config re-reads it when asked from the shell
// (update_config / update_all_config, HBase's): the changed settings that apply online take
// effect and are reported, the others are reported as waiting for a restart; an unknown setting
// is reported with its line and changes nothing.
func TestUpdateConfig(t *testing.T) {
	bin := cellstoreBinary(t)
	conf := filepath.Join(t.TempDir(), "standalone.conf")
	write := func(s string) {
		t.Helper()
		if err := os.WriteFile(conf, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("max-scanners = 100\nmemstore-flush-size = 134217728\n")
	// (No periodic check: the file is read when the shell asks, not by a timer between a write
	// here and the ask.)
	p := startStandalone(t, bin, t.TempDir(), "--config", conf, "--config-watch-interval", "0")
	if out := runShell(t, bin, p.master, "update_all_config"); !strings.Contains(out, p.data+": no change") {
		t.Fatalf("update_all_config with the file unchanged:\n%s", out)
	}
	write("max-scanners = 7\nslow-call-threshold = 1s\nmemstore-flush-size = 67108864\n")
	out := runShell(t, bin, p.master, fmt.Sprintf("update_config '%s'", p.data))
	for _, want := range []string{"applied max-scanners = 7", "applied slow-call-threshold = 1s",
		"changed, takes effect at the next restart: memstore-flush-size"} {
		if !strings.Contains(out, want) {
			t.Fatalf("update_config: no %q in\n%s", want, out)
		}
	}
	write("max-scanners = 9\nno-such-setting = 1\n")
	out = runShell(t, bin, p.master, "update_all_config")
	if !strings.Contains(out, `standalone.conf:2: unknown setting "no-such-setting"`) || strings.Contains(out, "applied") {
		t.Fatalf("update_all_config with an unknown setting:\n%s", out)
	}
	p.stop(t, os.Interrupt)
}
