package main

import (
	"archive/zip"
	"context"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/cellstore/cellstore/engine/processtest"
)

// hbaseClient finds the stock HBase client: hack/hbase-client.sh installs it (lib/: the client's
// jars, pe/: PerformanceEvaluation's). hack/test.sh (make test, CI) runs the script and names the
// directory in $CELLSTORE_HBASE_CLIENT: then a missing one fails the test. A plain `go test` looks
// where the script puts them and skips, saying how to get them, when they are not there.
func hbaseClient(t *testing.T) (lib, pe, shell string) {
	t.Helper()
	complete := func(d string) error {
		for _, sub := range []string{"lib", "pe", "shell", "endpoint"} {
			if _, err := os.Stat(filepath.Join(d, sub, ".complete")); err != nil {
				return err
			}
		}
		return nil
	}
	d := os.Getenv("CELLSTORE_HBASE_CLIENT")
	if d != "" {
		if err := complete(d); err != nil {
			t.Fatalf("CELLSTORE_HBASE_CLIENT=%s: %v (run hack/hbase-client.sh)", d, err)
		}
	} else {
		_, file, _, _ := runtime.Caller(0)
		root := filepath.Join(filepath.Dir(file), "..", "..", "..")
		out, err := exec.Command(filepath.Join(root, "hack", "hbase-client.sh"), "--print-dir").Output()
		if err != nil {
			t.Fatalf("hack/hbase-client.sh --print-dir: %v", err)
		}
		d = strings.TrimSpace(string(out))
		if err := complete(d); err != nil {
			t.Skipf("no HBase client at %s: run hack/hbase-client.sh (a JDK, the client's and PerformanceEvaluation's jars from Maven Central)", d)
		}
	}
	return filepath.Join(d, "lib"), filepath.Join(d, "pe"), filepath.Join(d, "shell")
}

// compileHBaseProgram compiles the project's HBase compatibility program against the client.
func compileHBaseProgram(t *testing.T, jars string) (classpath string) {
	t.Helper()
	out := t.TempDir()
	_, file, _, _ := runtime.Caller(0)
	dir := filepath.Join(filepath.Dir(file), "..", "..", "hbase", "testdata")
	cp := filepath.Join(jars, "*")
	if b, err := exec.Command("javac", "-nowarn", "-d", out, "-cp", cp, filepath.Join(dir, "HBaseCompat.java"), filepath.Join(dir, "HBaseTool.java")).CombinedOutput(); err != nil {
		t.Fatalf("javac: %v\n%s", err, b)
	}
	return cp + string(os.PathListSeparator) + out
}

// runHBaseProgram runs steps of the compatibility program against a server and checks that each
// printed "ok <step>".
func runHBaseProgram(t *testing.T, classpath, server string, steps ...string) {
	t.Helper()
	runHBaseProgramEnv(t, classpath, server, nil, false, steps...)
}

// runHBaseProgramEnv is runHBaseProgram with environment variables added (HBASE_COMPAT_TLS_*).
// With denials, the steps expect refusals: the client's own reports of them (its scanner prints
// a refused scan's AccessDeniedException) are not counted as exceptions.
func runHBaseProgramEnv(t *testing.T, classpath, server string, env []string, denials bool, steps ...string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "java", append([]string{"-cp", classpath, "HBaseCompat", server}, steps...)...)
	cmd.Env = append(os.Environ(), env...)
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
	for _, l := range strings.Split(out, "\n") {
		if info, ok := strings.CutPrefix(l, "info "); ok {
			t.Log(info)
		}
	}
	logged := out
	if denials {
		var kept []string
		for _, l := range strings.Split(out, "\n") {
			if l = strings.TrimSpace(l); l != "" && !strings.HasPrefix(l, "at ") && !strings.HasPrefix(l, "...") && !strings.Contains(l, "AccessDeniedException") {
				kept = append(kept, l)
			}
		}
		logged = strings.Join(kept, "\n")
	}
	if strings.Contains(logged, "Exception") {
		t.Errorf("the HBase Java client passed but logged exceptions (retries the server caused):\n%s", out)
	}
}

// TestHBaseJavaClient: the stock HBase 2.6 Java client, given only the RPC connection registry
// and a bootstrap server (the standalone's data address), runs DDL, writes, reads and scans
// against Cellstore; then HBase's own PerformanceEvaluation runs its tests.
func TestHBaseJavaClient(t *testing.T) {
	bin := cellstoreBinary(t)
	jars, pe, _ := hbaseClient(t)
	cp := compileHBaseProgram(t, jars)
	p := startStandalone(t, bin, t.TempDir())
	runHBaseProgram(t, cp, p.data, "create", "putget", "scan", "batch", "split", "readall", "merge", "tags", "limits", "filters", "atomic", "alter", "truncate", "snapshots", "backpressure", "drop")
	runHBaseEndpoints(t, pe, p.data)
	runPerformanceEvaluation(t, pe, p.data)
}

// runHBaseEndpoints runs HBase's AggregationClient (hbase-endpoint, on pe/'s unshaded client) and
// MultiRowMutationService calls against Cellstore's built-in endpoints (HBaseEndpoints.java).
func runHBaseEndpoints(t *testing.T, pe, server string) {
	t.Helper()
	out := t.TempDir()
	_, file, _, _ := runtime.Caller(0)
	dir := filepath.Join(filepath.Dir(file), "..", "..", "hbase", "testdata")
	cp := filepath.Join(pe, "*") + string(os.PathListSeparator) + filepath.Join(filepath.Dir(pe), "endpoint", "*")
	// In a directory of its own: the e2e image compiles testdata/*.java against the shaded client.
	if b, err := exec.Command("javac", "-nowarn", "-d", out, "-cp", cp, filepath.Join(dir, "endpoints", "HBaseEndpoints.java"), filepath.Join(dir, "HBaseTool.java")).CombinedOutput(); err != nil {
		t.Fatalf("javac: %v\n%s", err, b)
	}
	logConf := filepath.Join(out, "log4j2.properties")
	if err := os.WriteFile(logConf, []byte("status = warn\nappender.console.type = Console\nappender.console.name = OUT\n"+
		"appender.console.layout.type = PatternLayout\nappender.console.layout.pattern = %p %c{1}: %m%n\n"+
		"rootLogger.level = warn\nrootLogger.appenderRef.out.ref = OUT\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	b, err := exec.CommandContext(ctx, "java", "--add-opens", "java.base/java.nio=ALL-UNNAMED", "-Dlog4j2.configurationFile="+logConf,
		"-cp", cp+string(os.PathListSeparator)+out, "HBaseEndpoints", server).CombinedOutput()
	got := string(b)
	for _, step := range []string{"load", "aggregate", "multirow"} {
		if !strings.Contains(got, "ok "+step+"\n") {
			t.Fatalf("endpoint step %s did not pass (exit %v):\n%s", step, err, got)
		}
	}
	if err != nil {
		t.Fatalf("HBaseEndpoints: %v\n%s", err, got)
	}
}

// TestHBaseJavaClientSecure: against a standalone with --security=on, the stock Java client
// connects over TLS with a client certificate (its own PEM key store settings) and acts as the
// certificate's user: a superuser creates, writes and reads; a user holding nothing is refused
// reads, writes and DDL with HBase's AccessDeniedException (master calls are forwarded as that
// user, not as the server); once granted READ it reads but still cannot write.
func TestHBaseJavaClientSecure(t *testing.T) {
	bin := cellstoreBinary(t)
	jars, _, _ := hbaseClient(t)
	cp := compileHBaseProgram(t, jars)
	dir := t.TempDir()
	pk := filepath.Join(dir, "pki")
	run(t, bin, "certs", "ca", "--out", filepath.Join(pk, "ca"))
	run(t, bin, "certs", "issue", "--ca", filepath.Join(pk, "ca"), "--out", filepath.Join(pk, "server"), "--cn", "cellstore-server",
		"--groups", "cellstore:servers", "--hosts", "127.0.0.1,localhost", "--server", "--client")
	for _, u := range []string{"admin", "alice"} {
		run(t, bin, "certs", "issue", "--ca", filepath.Join(pk, "ca"), "--out", filepath.Join(pk, u), "--cn", u, "--client")
	}
	server := filepath.Join(pk, "server")
	p := startStandalone(t, bin, filepath.Join(dir, "data"), "--security=on", "--tls-cert-file", filepath.Join(server, "tls.crt"),
		"--tls-key-file", filepath.Join(server, "tls.key"), "--tls-ca-file", filepath.Join(server, "ca.crt"), "--superusers", "@cellstore:servers,admin")
	caFile := filepath.Join(pk, "ca", "ca.crt")
	as := func(user string) []string {
		return []string{"HBASE_COMPAT_TLS_CA=" + caFile, "HBASE_COMPAT_TLS_CERT=" + filepath.Join(pk, user, "tls.crt"),
			"HBASE_COMPAT_TLS_KEY=" + filepath.Join(pk, user, "tls.key")}
	}
	runHBaseProgramEnv(t, cp, p.data, as("admin"), false, "create", "putget", "scan")
	runHBaseProgramEnv(t, cp, p.data, as("alice"), true, "denied")
	run(t, bin, "shell", "--masters", p.master, "--tls-ca-file", caFile, "--tls-cert-file", filepath.Join(pk, "admin", "tls.crt"),
		"--tls-key-file", filepath.Join(pk, "admin", "tls.key"), "-e", "grant 'alice', 'R', 'compat'")
	runHBaseProgramEnv(t, cp, p.data, as("alice"), true, "readonly")
	runHBaseProgramEnv(t, cp, p.data, as("admin"), false, "drop")
}

// peCommands are the PerformanceEvaluation tests run against Cellstore.
var peCommands = []string{"sequentialWrite", "randomWrite", "randomRead", "sequentialRead", "scan", "increment", "append", "checkAndPut", "checkAndMutate"}

// runPerformanceEvaluation runs HBase's own PerformanceEvaluation (--nomapred, small) against a
// server: every test must finish with its summary and no error.
func runPerformanceEvaluation(t *testing.T, jars, servers string) {
	t.Helper()
	logConf := filepath.Join(t.TempDir(), "log4j2.properties")
	if err := os.WriteFile(logConf, []byte("status = warn\nappender.console.type = Console\nappender.console.name = OUT\n"+
		"appender.console.layout.type = PatternLayout\nappender.console.layout.pattern = %p %c{1}: %m%n\n"+
		"rootLogger.level = warn\nrootLogger.appenderRef.out.ref = OUT\n"+
		"logger.pe.name = org.apache.hadoop.hbase.PerformanceEvaluation\nlogger.pe.level = info\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, cmd := range peCommands {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		b, err := exec.CommandContext(ctx, "java", "--add-opens", "java.base/java.nio=ALL-UNNAMED", "-Dlog4j2.configurationFile="+logConf,
			"-cp", filepath.Join(jars, "*"), "org.apache.hadoop.hbase.PerformanceEvaluation",
			"-Dhbase.client.registry.impl=org.apache.hadoop.hbase.client.RpcConnectionRegistry", "-Dhbase.client.bootstrap.servers="+servers,
			"--nomapred", "--rows=500", "--presplit=4", cmd, "2").CombinedOutput()
		cancel()
		out := string(b)
		if err != nil || !strings.Contains(out, "Summary of timings") || strings.Contains(out, "ERROR") || strings.Contains(out, "Exception") {
			t.Fatalf("PerformanceEvaluation %s: %v\n%s", cmd, err, out)
		}
		for _, l := range strings.Split(out, "\n") {
			if strings.Contains(l, "Summary of timings") {
				t.Logf("PerformanceEvaluation %s: %s", cmd, l)
			}
		}
	}
}

// TestHBaseJavaClientCluster: against a master and three region servers, the stock Java client
// (bootstrapped from one region server) sees its regions split and moved between servers mid-run
// and goes on reading and writing with no error; then HBase's PerformanceEvaluation runs against
// the three servers.
func TestHBaseJavaClientCluster(t *testing.T) {
	bin := cellstoreBinary(t)
	jars, pe, _ := hbaseClient(t)
	cp := compileHBaseProgram(t, jars)
	dir := t.TempDir()
	masterAddr, masterHTTP := "127.0.0.1:"+freePort(t), "127.0.0.1:"+freePort(t)
	m := processtest.Start(t, bin, "master", "--storage-dir", dir, "--grpc-addr", masterAddr, "--http-addr", masterHTTP,
		"--advertise-host", "127.0.0.1", "--balancer-period", "-1s", "--log-level", "warn")
	m.HTTP = masterHTTP
	m.WaitReady(t, 60*time.Second)
	var data []string
	for range 3 {
		d, h := "127.0.0.1:"+freePort(t), "127.0.0.1:"+freePort(t)
		p := processtest.Start(t, bin, "regionserver", "--storage-dir", dir, "--masters", masterAddr, "--data-addr", d,
			"--admin-addr", "127.0.0.1:"+freePort(t), "--http-addr", h, "--advertise-host", "127.0.0.1",
			"--memstore-offheap-size", "64Mi", "--blockcache-offheap-size", "16Mi", "--blockcache-onheap-size", "16Mi", "--log-level", "warn")
		p.HTTP = h
		p.WaitReady(t, 60*time.Second)
		data = append(data, d)
	}
	runHBaseProgram(t, cp, strings.Join(data, ","), "create", "putget", "scan", "batch", "split", "move", "readall", "atomic", "drop")
	runPerformanceEvaluation(t, pe, strings.Join(data, ","))
}

// TestHBaseShell: HBase's own shell (2.4.17, the last on Maven Central, with its MasterRegistry
// pointed at the standalone's region server) creates, writes, reads, counts, lists, describes,
// alters, disables and drops a table and shows the cluster's status. Its shell.rb loads a
// "trace" command whose tracing classes are not on the classpath: a scratch copy without that
// line goes first on the classpath (HBase's files are never committed).
func TestHBaseShell(t *testing.T) {
	bin := cellstoreBinary(t)
	_, _, shellJars := hbaseClient(t)
	p := startStandalone(t, bin, t.TempDir())
	scratch := t.TempDir()
	jar, err := filepath.Glob(filepath.Join(shellJars, "hbase-shell-*.jar"))
	if err != nil || len(jar) != 1 {
		t.Fatalf("the hbase-shell jar in %s: %v %v", shellJars, jar, err)
	}
	zr, err := zip.OpenReader(jar[0])
	if err != nil {
		t.Fatal(err)
	}
	defer zr.Close()
	f, err := zr.Open("shell.rb")
	if err != nil {
		t.Fatal(err)
	}
	src, err := io.ReadAll(f)
	f.Close()
	if err != nil {
		t.Fatal(err)
	}
	var kept []string
	for _, l := range strings.Split(string(src), "\n") {
		if strings.TrimSpace(l) != "trace" {
			kept = append(kept, l)
		}
	}
	if err := os.WriteFile(filepath.Join(scratch, "shell.rb"), []byte(strings.Join(kept, "\n")), 0o644); err != nil {
		t.Fatal(err)
	}
	script := filepath.Join(scratch, "script.rb")
	if err := os.WriteFile(script, []byte(`create 'sh', 'f', SPLITS => ['m']
put 'sh', 'r1', 'f:q', 'v1'
put 'sh', 'z9', 'f:q', 'v2'
get 'sh', 'r1'
scan 'sh'
count 'sh'
list
describe 'sh'
alter 'sh', NAME => 'g', VERSIONS => 4
alter 'sh', FLUSH_POLICY => 'org.apache.hadoop.hbase.regionserver.FlushAllStoresPolicy'
describe 'sh'
status
disable 'sh'
drop 'sh'
list
exit
`), 0o644); err != nil {
		t.Fatal(err)
	}
	jruby, err := filepath.Glob(filepath.Join(shellJars, "jruby-complete-*.jar"))
	if err != nil || len(jruby) != 1 {
		t.Fatalf("the jruby-complete jar in %s: %v %v", shellJars, jruby, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	// JRuby before the older jcodings and joni jars the client depends on: its own copies must win.
	cp := strings.Join([]string{scratch, jruby[0], filepath.Join(shellJars, "*")}, string(os.PathListSeparator))
	b, err := exec.CommandContext(ctx, "java", "-cp", cp,
		"org.jruby.JarBootstrapMain", "-n", "-Dhbase.client.registry.impl=org.apache.hadoop.hbase.client.MasterRegistry",
		"-Dhbase.masters="+p.data, "-Dhbase.client.retries.number=5", script).CombinedOutput()
	out := string(b)
	if err != nil {
		t.Fatalf("the HBase shell failed: %v\n%s", err, out)
	}
	for _, want := range []string{"Created table sh", "value=v1", "2 row(s)", "=> 2", "sh", "VERSIONS => '4'", "NAME => 'g'",
		"FLUSH_POLICY => 'org.apache.hadoop.hbase.regionserver.FlushAllStoresPolicy'",
		"1 active master", "servers", "Took"} {
		if !strings.Contains(out, want) {
			t.Fatalf("no %q in the HBase shell's output:\n%s", want, out)
		}
	}
	if strings.Contains(out, "ERROR") {
		t.Fatalf("the HBase shell reported an error:\n%s", out)
	}
}
