package main

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/cellstore/cellstore/engine/processtest"
)

// hbaseClientJars finds the stock HBase client's jars. hack/test.sh (make test, CI) installs them
// with hack/hbase-client.sh and names the directory in $CELLSTORE_HBASE_CLIENT: then a missing
// directory fails the test. A plain `go test` looks where the script puts them and skips, saying
// how to get them, when they are not there.
func hbaseClientJars(t *testing.T) string {
	t.Helper()
	if d := os.Getenv("CELLSTORE_HBASE_CLIENT"); d != "" {
		if _, err := os.Stat(filepath.Join(d, ".complete")); err != nil {
			t.Fatalf("CELLSTORE_HBASE_CLIENT=%s: %v (run hack/hbase-client.sh)", d, err)
		}
		return d
	}
	_, file, _, _ := runtime.Caller(0)
	root := filepath.Join(filepath.Dir(file), "..", "..", "..")
	out, err := exec.Command(filepath.Join(root, "hack", "hbase-client.sh"), "--print-dir").Output()
	if err != nil {
		t.Fatalf("hack/hbase-client.sh --print-dir: %v", err)
	}
	d := strings.TrimSpace(string(out))
	if _, err := os.Stat(filepath.Join(d, ".complete")); err != nil {
		t.Skipf("no HBase client at %s: run hack/hbase-client.sh (a JDK and the client jars from Maven Central)", d)
	}
	return d
}

// compileHBaseProgram compiles the project's HBase compatibility program against the client.
func compileHBaseProgram(t *testing.T, jars string) (classpath string) {
	t.Helper()
	out := t.TempDir()
	_, file, _, _ := runtime.Caller(0)
	src := filepath.Join(filepath.Dir(file), "..", "..", "hbase", "testdata", "HBaseCompat.java")
	cp := filepath.Join(jars, "*")
	if b, err := exec.Command("javac", "-nowarn", "-d", out, "-cp", cp, src).CombinedOutput(); err != nil {
		t.Fatalf("javac: %v\n%s", err, b)
	}
	return cp + string(os.PathListSeparator) + out
}

// runHBaseProgram runs steps of the compatibility program against a server and checks that each
// printed "ok <step>".
func runHBaseProgram(t *testing.T, classpath, server string, steps ...string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "java", append([]string{"-cp", classpath, "HBaseCompat", server}, steps...)...)
	b, err := cmd.CombinedOutput()
	out := string(b)
	for _, s := range steps {
		if !strings.Contains(out, "ok "+s+"\n") {
			t.Fatalf("step %s of the HBase Java client did not pass (exit %v):\n%s", s, err, out)
		}
	}
	if err != nil {
		t.Fatalf("HBase Java client: %v\n%s", err, out)
	}
	if strings.Contains(out, "Exception") {
		t.Errorf("the HBase Java client passed but logged exceptions (retries the server caused):\n%s", out)
	}
}

// TestHBaseJavaClient: the stock HBase 2.6 Java client, given only the RPC connection registry
// and a bootstrap server (the standalone's data address), runs DDL, writes, reads and scans
// against Cellstore.
func TestHBaseJavaClient(t *testing.T) {
	bin := cellstoreBinary(t)
	jars := hbaseClientJars(t)
	cp := compileHBaseProgram(t, jars)
	p := startStandalone(t, bin, t.TempDir())
	runHBaseProgram(t, cp, p.data, "create", "putget", "scan", "batch", "split", "readall", "limits", "filters", "atomic", "alter", "truncate", "drop")
}

// TestHBaseJavaClientCluster: against a master and two region servers, the stock Java client
// (bootstrapped from one region server) sees its regions split and moved between servers mid-run
// and goes on reading and writing with no error.
func TestHBaseJavaClientCluster(t *testing.T) {
	bin := cellstoreBinary(t)
	jars := hbaseClientJars(t)
	cp := compileHBaseProgram(t, jars)
	dir := t.TempDir()
	masterAddr, masterHTTP := "127.0.0.1:"+freePort(t), "127.0.0.1:"+freePort(t)
	m := processtest.Start(t, bin, "master", "--storage-dir", dir, "--grpc-addr", masterAddr, "--http-addr", masterHTTP,
		"--advertise-host", "127.0.0.1", "--balancer-period", "-1s", "--log-level", "warn")
	m.HTTP = masterHTTP
	m.WaitReady(t, 60*time.Second)
	var data []string
	for range 2 {
		d, h := "127.0.0.1:"+freePort(t), "127.0.0.1:"+freePort(t)
		p := processtest.Start(t, bin, "regionserver", "--storage-dir", dir, "--masters", masterAddr, "--data-addr", d,
			"--admin-addr", "127.0.0.1:"+freePort(t), "--http-addr", h, "--advertise-host", "127.0.0.1",
			"--memstore-offheap-size", "64Mi", "--blockcache-offheap-size", "16Mi", "--blockcache-onheap-size", "16Mi", "--log-level", "warn")
		p.HTTP = h
		p.WaitReady(t, 60*time.Second)
		data = append(data, d)
	}
	runHBaseProgram(t, cp, strings.Join(data, ","), "create", "putget", "scan", "batch", "split", "move", "readall", "atomic", "drop")
}
