package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cellstore/cellstore/engine/access"
	pb "github.com/cellstore/cellstore/engine/api/cellstore/v1"
	"github.com/cellstore/cellstore/engine/cell"
	"github.com/cellstore/cellstore/engine/client"
	"github.com/cellstore/cellstore/engine/compute/function/functiontest"
	"github.com/cellstore/cellstore/engine/processtest"
	"github.com/cellstore/cellstore/engine/security"
)

// run runs the binary and fails the test if it fails.
func run(t *testing.T, bin string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, bin, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("%v: %v\n%s", args, err, out)
	}
	return string(out)
}

// servedSerial is the serial number of the certificate the TLS port at addr serves.
func servedSerial(t *testing.T, addr string, certs *security.Certs) string {
	t.Helper()
	conn, err := tls.Dial("tcp", addr, certs.ClientConfig("127.0.0.1"))
	if err != nil {
		t.Fatalf("TLS to %s: %v", addr, err)
	}
	defer conn.Close()
	return conn.ConnectionState().PeerCertificates[0].SerialNumber.String()
}

func fileSerial(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	blk, _ := pem.Decode(b)
	c, err := x509.ParseCertificate(blk.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	return c.SerialNumber.String()
}

// TestSecureCluster runs a master and two region servers with --security=on and mutual TLS, with
// certificates and tokens made by the command itself: users are who their certificate or token
// says; a caller with neither is refused; the servers' certificates are rotated on disk under a
// load (long-lived connections and a new client per request) with no request failing; a token
// removed from the token file stops working within seconds.
func TestSecureCluster(t *testing.T) {
	bin := cellstoreBinary(t)
	dir := t.TempDir()
	pk := filepath.Join(dir, "pki")
	run(t, bin, "certs", "ca", "--out", filepath.Join(pk, "ca"))
	issueServer := func() {
		run(t, bin, "certs", "issue", "--ca", filepath.Join(pk, "ca"), "--out", filepath.Join(pk, "server"), "--cn", "cellstore-server",
			"--groups", "cellstore:servers", "--hosts", "127.0.0.1,localhost", "--server", "--client")
	}
	issueServer()
	run(t, bin, "certs", "issue", "--ca", filepath.Join(pk, "ca"), "--out", filepath.Join(pk, "alice"), "--cn", "alice", "--client")
	run(t, bin, "certs", "issue", "--ca", filepath.Join(pk, "ca"), "--out", filepath.Join(pk, "admin"), "--cn", "admin", "--client")
	run(t, bin, "certs", "issue", "--ca", filepath.Join(pk, "ca"), "--out", filepath.Join(pk, "dave"), "--cn", "dave", "--groups", "auditors", "--client")
	tokens := filepath.Join(pk, "tokens")
	run(t, bin, "token", "create", "--user", "bob", "--token-out", filepath.Join(pk, "bob.token"), "--append", tokens)
	run(t, bin, "token", "create", "--user", "carol", "--token-out", filepath.Join(pk, "carol.token"), "--append", tokens)
	server := filepath.Join(pk, "server")
	secFlags := []string{"--security=on", "--tls-cert-file", filepath.Join(server, "tls.crt"), "--tls-key-file", filepath.Join(server, "tls.key"),
		"--tls-ca-file", filepath.Join(server, "ca.crt"), "--token-file", tokens, "--superusers", "@cellstore:servers,admin"}
	caFile := filepath.Join(pk, "ca", "ca.crt")

	masterAddr, masterHTTP := "127.0.0.1:"+freePort(t), "127.0.0.1:"+freePort(t)
	m := processtest.Start(t, bin, append([]string{"master", "--storage-dir", dir, "--grpc-addr", masterAddr, "--http-addr", masterHTTP,
		"--advertise-host", "127.0.0.1", "--balancer-period", "-1s", "--log-level", "warn"}, secFlags...)...)
	m.HTTP, m.HTTPS = masterHTTP, true
	m.WaitReady(t, 60*time.Second)
	var dataAddrs []string
	for range 2 {
		data, httpAddr := "127.0.0.1:"+freePort(t), "127.0.0.1:"+freePort(t)
		p := processtest.Start(t, bin, append([]string{"regionserver", "--storage-dir", dir, "--masters", masterAddr, "--data-addr", data,
			"--admin-addr", "127.0.0.1:" + freePort(t), "--http-addr", httpAddr, "--advertise-host", "127.0.0.1",
			"--memstore-offheap-size", "64Mi", "--blockcache-offheap-size", "16Mi", "--blockcache-onheap-size", "16Mi", "--log-level", "warn"}, secFlags...)...)
		p.HTTP, p.HTTPS = httpAddr, true
		p.WaitReady(t, 60*time.Second)
		dataAddrs = append(dataAddrs, data)
	}

	t0 := time.Now()
	phase := func(name string) { t.Logf("%6.1fs %s", time.Since(t0).Seconds(), name) }
	shell := func(script string, creds ...string) (string, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		args := append([]string{"shell", "--masters", masterAddr, "--user", "mallory", "-e", script}, creds...)
		out, err := exec.CommandContext(ctx, bin, args...).CombinedOutput()
		return string(out), err
	}
	certOf := func(user string) []string {
		return []string{"--tls-ca-file", caFile, "--tls-cert-file", filepath.Join(pk, user, "tls.crt"), "--tls-key-file", filepath.Join(pk, user, "tls.key")}
	}
	admin, alice := certOf("admin"), certOf("alice")
	bob := []string{"--tls-ca-file", caFile, "--token-file", filepath.Join(pk, "bob.token")}
	carol := []string{"--tls-ca-file", caFile, "--token-file", filepath.Join(pk, "carol.token")}
	mustShell := func(who string, script string, creds []string, want ...string) {
		t.Helper()
		out, err := shell(script, creds...)
		if err != nil {
			t.Fatalf("%s: %q: %v\n%s", who, script, err, out)
		}
		for _, w := range want {
			if !strings.Contains(out, w) {
				t.Fatalf("%s: %q: no %q in\n%s", who, script, w, out)
			}
		}
	}
	denied := func(who string, script string, creds []string, want string) {
		t.Helper()
		out, err := shell(script, creds...)
		if err == nil || !strings.Contains(out, want) {
			t.Fatalf("%s: %q: %v\n%s; want refused with %q", who, script, err, out, want)
		}
	}
	// Authorization: nobody but superusers may do anything until granted.
	denied("alice before any grant", "create 'st', 'f'", alice, "access denied: insufficient permissions for user 'alice' (namespace=default, action=CREATE|ADMIN)")
	mustShell("admin", "create 'st', 'f', {SPLITS => ['m']}; grant 'alice', 'RW', 'st'; grant 'bob', 'R', 'st'; user_permission 'st'", admin,
		"alice", "actions=READ,WRITE", "2 row(s)")
	mustShell("alice (certificate)", "put 'st', 'a', 'f:q', 'from-alice'; put 'st', 'a', 'f:secret', 's'; put 'st', 'z', 'f:q', 'z'; get 'st', 'a'", alice, "from-alice")
	denied("alice", "drop 'st'", alice, "access denied")
	denied("alice (RW)", "flush 'st'", alice, "action=CREATE|ADMIN")
	mustShell("admin", "flush 'st'; major_compact 'st'", admin, "flush: 2 region(s) done", "major_compact: 2 region(s) done")
	mustShell("bob (token)", "get 'st', 'a'", bob, "from-alice")
	denied("bob", "put 'st', 'b', 'f:q', 'x'", bob, "action=WRITE")
	denied("carol", "get 'st', 'a'", carol, "access denied: insufficient permissions for user 'carol' (table=default:st, action=READ)")
	// Table functions: loading one is an alter (CREATE or ADMIN); running its endpoints takes
	// EXEC on the table besides READ.
	mod := filepath.Join(t.TempDir(), "first.wasm")
	if err := os.WriteFile(mod, functiontest.Build(t, "github.com/cellstore/cellstore/engine/compute/function/examples/firstsource"), 0o644); err != nil {
		t.Fatal(err)
	}
	loadFn := "alter 'st', FUNCTION => {NAME => 'first', FILE => '" + mod + "', ARGS => {'sources' => 'q'}, TIMEOUT_MS => 5000}"
	denied("alice (RW)", loadFn, alice, "action=CREATE|ADMIN")
	mustShell("admin", loadFn, admin)
	denied("bob (R)", "call_function 'st', 'first', 'first'", bob, "action=EXEC")
	mustShell("admin", "grant 'bob', 'RX', 'st'", admin)
	// A grant reaches the region servers within seconds (their heartbeat), and so does a revoke;
	// a qualifier grant shows that qualifier only.
	mustShell("admin", "grant 'carol', 'R', 'st', 'f', 'q'", admin)
	eventually := func(what string, ok func() bool) {
		t.Helper()
		deadline := time.Now().Add(20 * time.Second)
		for !ok() {
			if time.Now().After(deadline) {
				t.Fatalf("%s: not within 20 s", what)
			}
			time.Sleep(200 * time.Millisecond)
		}
	}
	eventually("bob runs the endpoint after his EXEC grant", func() bool {
		out, err := shell("call_function 'st', 'first', 'first'", bob...)
		return err == nil && strings.Contains(out, "2 call(s)")
	})
	eventually("carol reads after her grant", func() bool {
		out, err := shell("get 'st', 'a'", carol...)
		return err == nil && strings.Contains(out, "from-alice")
	})
	if out, _ := shell("get 'st', 'a'; scan 'st'", carol...); strings.Contains(out, "f:secret") {
		t.Fatalf("carol, granted f:q only, read f:secret:\n%s", out)
	}
	mustShell("admin", "revoke 'carol', 'st', 'f', 'q'", admin)
	eventually("carol refused after the revoke", func() bool {
		out, err := shell("get 'st', 'a'", carol...)
		return err != nil && strings.Contains(out, "access denied")
	})
	// A user allowed to create tables owns those they create (HBase grants the creator every action).
	mustShell("admin", "grant 'carol', 'C', '@default'", admin)
	mustShell("carol", "create 'owned', 'f'; user_permission 'owned'", carol, "carol", "ADMIN", "1 row(s)")
	eventually("carol writes and reads the table she created", func() bool {
		out, err := shell("put 'owned', 'r', 'f:q', 'owned-value'; get 'owned', 'r'", carol...)
		return err == nil && strings.Contains(out, "owned-value")
	})
	mustShell("admin", "revoke 'carol', '@default'; disable 'owned'; drop 'owned'", admin)
	mustShell("admin", "grant 'bob', 'RW', 'st'", admin)
	eventually("bob writes after his new grant", func() bool {
		_, err := shell("put 'st', 'b', 'f:q', 'x'", bob...)
		return err == nil
	})
	start := time.Now()
	out, err := shell("list", "--tls-ca-file", caFile)
	if err == nil || !strings.Contains(out, "not authenticated") {
		t.Fatalf("no credentials: %v\n%s; want refused as not authenticated", err, out)
	}
	if d := time.Since(start); d > 30*time.Second {
		t.Errorf("the refusal took %s: it must not be retried", d)
	}

	// Cell ACLs: dave has no grant on the table, but a cell's ACL lets him read it. HBase's
	// default (early out) refuses his read; the cell-first strategy returns exactly that cell.
	mustShell("admin", "create 'ct', 'f'; put 'ct', 'r1', 'f:pub', 'p'; put 'ct', 'r1', 'f:priv', 's', {ACL => {'dave' => 'R'}}; "+
		"put 'ct', 'r2', 'f:grp', 'g', {ACL => {'@auditors' => 'R'}}; put 'ct', 'r2', 'f:other', 'o', {ACL => {'erin' => 'R'}}", admin)
	denied("dave, default strategy", "get 'ct', 'r1'", certOf("dave"), "access denied")
	daveCerts, err := security.LoadCerts(security.Files{CA: caFile, Cert: filepath.Join(pk, "dave", "tls.crt"), Key: filepath.Join(pk, "dave", "tls.key")})
	if err != nil {
		t.Fatal(err)
	}
	dc, err := client.New(client.Config{Masters: []string{masterAddr}, TLS: daveCerts, OperationTimeout: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer dc.Close()
	cellFirst := map[string][]byte{access.ACLStrategyAttribute: {access.ACLStrategyCellFirst}}
	for row, want := range map[string]string{"r1": "priv", "r2": "grp"} {
		res, err := dc.Table("ct").Get(context.Background(), &pb.Get{Row: []byte(row), Attributes: cellFirst})
		if err != nil {
			t.Fatalf("dave, cell first, %s: %v", row, err)
		}
		if len(res.Cells) != 1 || string(res.Cells[0].Qualifier) != want {
			t.Fatalf("dave, cell first, %s: %d cells %v; want only f:%s (his cell ACL, or his group's)", row, len(res.Cells), res.Cells, want)
		}
	}
	mustShell("admin", "get 'ct', 'r1'", admin, "f:pub", "f:priv")

	// Visibility labels: alice holds secret, dave pii through his group; a read sees the cells
	// whose expression what it holds satisfies (narrowed by AUTHORIZATIONS); superusers see all.
	denied("alice", "add_labels 'x'", alice, "access denied")
	mustShell("admin", "add_labels ['secret', 'pii']; set_auths 'alice', ['secret']; set_auths '@auditors', 'pii'; create 'vt', 'f'; "+
		"grant 'alice', 'RW', 'vt'; grant 'dave', 'R', 'vt'; list_labels; get_auths 'alice'", admin, "pii\nsecret\n2 label(s)", "secret\n1 label(s)")
	mustShell("admin", "put 'vt', 'r', 'f:open', 'o'; put 'vt', 'r', 'f:s', 's1', {VISIBILITY => 'secret'}; "+
		"put 'vt', 'r', 'f:p', 'p1', {VISIBILITY => 'pii & !secret'}; put 'vt', 'r', 'f:e', 'e1', {VISIBILITY => 'secret | pii'}", admin)
	denied("admin", "put 'vt', 'r', 'f:x', 'x', {VISIBILITY => 'secret & nosuch'}", admin, `visibility label "nosuch" is not defined`)
	sees := func(who string, creds []string, script string, want ...string) {
		t.Helper()
		all := []string{"f:open", "f:s", "f:p", "f:e"}
		eventually(fmt.Sprintf("%s: %s shows exactly %v", who, script, want), func() bool {
			out, err := shell(script, creds...)
			if err != nil {
				return false
			}
			for _, c := range all {
				if strings.Contains(out, c) != slices.Contains(want, c) {
					return false
				}
			}
			return true
		})
	}
	sees("admin (superuser)", admin, "get 'vt', 'r'", "f:open", "f:s", "f:p", "f:e")
	sees("alice", alice, "get 'vt', 'r'", "f:open", "f:s", "f:e")
	sees("alice asking for pii she does not hold", alice, "scan 'vt', {AUTHORIZATIONS => ['pii']}", "f:open")
	sees("dave", certOf("dave"), "scan 'vt'", "f:open", "f:p", "f:e")
	// Deletes respect labels: one without a visibility expression leaves the labelled cell.
	mustShell("alice", "delete 'vt', 'r', 'f:s'", alice)
	sees("alice after an unlabelled delete", alice, "get 'vt', 'r'", "f:open", "f:s", "f:e")
	mustShell("alice", "delete 'vt', 'r', 'f:s', {VISIBILITY => 'secret'}", alice)
	sees("admin after the labelled delete", admin, "get 'vt', 'r'", "f:open", "f:p", "f:e")
	mustShell("admin", "clear_auths 'alice', 'secret'; get_auths 'alice'", admin, "0 label(s)")
	sees("alice after clear_auths", alice, "get 'vt', 'r'", "f:open")

	// Check-and-mutate needs READ and WRITE on the column it checks (HBase's preCheckAndPut), not
	// only WRITE on what it writes: dave reads all of vt and may write f:w only.
	mustShell("admin", "grant 'dave', 'W', 'vt', 'f', 'w'", admin)
	checkAndPut := func(checked, want string) (bool, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		cond := &pb.Condition{Row: []byte("r"), Family: []byte("f"), Qualifier: []byte(checked), Op: pb.CompareOp_COMPARE_OP_EQUAL,
			Comparator: &pb.Comparator{Kind: &pb.Comparator_Binary{Binary: []byte(want)}}}
		return dc.Table("vt").CheckAndMutate(ctx, cond, client.NewPut([]byte("r")).Add("f", "w", cell.LatestTimestamp, []byte("by-dave")))
	}
	eventually("dave checks and writes f:w after his grant", func() bool {
		_, err := checkAndPut("w", "nothing")
		return err == nil
	})
	if ok, err := checkAndPut("open", "o"); err == nil || !strings.Contains(err.Error(), "(table=default:vt, family=f, qualifier=open, action=WRITE)") {
		t.Fatalf("dave's check of f:open (READ only) and put of f:w: processed %v, %v; want refused for WRITE on f:open", ok, err)
	}
	mustShell("admin", "revoke 'dave', 'vt', 'f', 'w'", admin)
	phase("visibility labels checked")

	// The HTTP endpoints: metrics and probes open (over TLS), profiling for superusers only.
	httpGet := func(user, path string) int {
		t.Helper()
		files := security.Files{CA: caFile}
		if user != "" {
			files.Cert, files.Key = filepath.Join(pk, user, "tls.crt"), filepath.Join(pk, user, "tls.key")
		}
		certs, err := security.LoadCerts(files)
		if err != nil {
			t.Fatal(err)
		}
		hc := &http.Client{Transport: &http.Transport{TLSClientConfig: certs.ClientConfig("127.0.0.1")}, Timeout: 30 * time.Second}
		resp, err := hc.Get("https://" + masterHTTP + path)
		if err != nil {
			t.Fatalf("GET %s as %q: %v", path, user, err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	for _, c := range []struct {
		user, path string
		want       int
	}{
		{"", "/metrics", http.StatusOK}, {"", "/readyz", http.StatusOK},
		{"", "/debug/pprof/", http.StatusUnauthorized}, {"alice", "/debug/pprof/", http.StatusForbidden}, {"admin", "/debug/pprof/", http.StatusOK},
	} {
		if got := httpGet(c.user, c.path); got != c.want {
			t.Errorf("GET %s as %q: %d, want %d", c.path, c.user, got, c.want)
		}
	}
	phase("users checked")
	// Rotation under load.
	ca, err := security.LoadCerts(security.Files{CA: caFile})
	if err != nil {
		t.Fatal(err)
	}
	bobToken, err := os.ReadFile(filepath.Join(pk, "bob.token"))
	if err != nil {
		t.Fatal(err)
	}
	cfg := client.Config{Masters: []string{masterAddr}, TLS: ca, Token: strings.TrimSpace(string(bobToken)), OperationTimeout: 30 * time.Second}
	long, err := client.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer long.Close()
	var ops, fresh atomic.Int64
	var failMu sync.Mutex
	var failures []string
	stop := make(chan struct{})
	var wg sync.WaitGroup
	load := func(newClient bool) {
		defer wg.Done()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			c := long
			if newClient {
				var err error
				if c, err = client.New(cfg); err != nil {
					failMu.Lock()
					failures = append(failures, err.Error())
					failMu.Unlock()
					continue
				}
			}
			row := fmt.Sprintf("%c%06d", "am"[i%2], i)
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			err := c.Table("st").Put(ctx, client.NewPut([]byte(row)).Add("f", "q", cell.LatestTimestamp, []byte("v")))
			cancel()
			if newClient {
				c.Close()
				fresh.Add(1)
			}
			if err != nil {
				failMu.Lock()
				failures = append(failures, err.Error())
				failMu.Unlock()
			}
			ops.Add(1)
		}
	}
	wg.Add(2)
	go load(false)
	go load(true)
	for ops.Load() < 20 {
		time.Sleep(10 * time.Millisecond)
	}
	phase("load running")
	before := servedSerial(t, masterAddr, ca)
	issueServer()
	want := fileSerial(t, filepath.Join(server, "tls.crt"))
	if want == before {
		t.Fatal("the new certificate has the old serial")
	}
	deadline := time.Now().Add(30 * time.Second)
	for _, addr := range append([]string{masterAddr}, dataAddrs...) {
		for servedSerial(t, addr, ca) != want {
			if time.Now().After(deadline) {
				t.Fatalf("%s still serves the old certificate 30 s after the rotation", addr)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	phase("rotated")
	atRotation := fresh.Load()
	for fresh.Load() < atRotation+5 { // a few whole new connections after the rotation
		time.Sleep(10 * time.Millisecond)
	}
	close(stop)
	wg.Wait()
	if len(failures) > 0 {
		t.Fatalf("%d of %d requests failed during the rotation, first: %s", len(failures), ops.Load(), failures[0])
	}
	t.Logf("rotation under load: %d requests (%d on new connections), none failed", ops.Load(), fresh.Load())

	phase("load stopped")
	// Revoking bob's token: his next request is refused within seconds; carol's still works.
	mustShell("admin", "grant 'carol', 'R', 'st'", admin)
	eventually("carol reads", func() bool { _, err := shell("get 'st', 'a'", carol...); return err == nil })
	lines, err := os.ReadFile(tokens)
	if err != nil {
		t.Fatal(err)
	}
	var keep []string
	for _, l := range strings.Split(strings.TrimSpace(string(lines)), "\n") {
		if !strings.HasSuffix(l, " bob") {
			keep = append(keep, l)
		}
	}
	if err := os.WriteFile(tokens, []byte(strings.Join(keep, "\n")+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	deadline = time.Now().Add(20 * time.Second)
	for {
		at := time.Now()
		if out, err := shell("get 'st', 'a'", bob...); err != nil {
			t.Logf("refused after %s: %s", time.Since(at), out)
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("bob's revoked token still works after 20 s")
		}
		time.Sleep(200 * time.Millisecond)
	}
	phase("bob refused")
	if out, err := shell("get 'st', 'a'", carol...); err != nil {
		t.Fatalf("carol after bob's revocation: %v\n%s", err, out)
	}
	// The long-lived client's connections, opened with bob's token, are closed by the servers
	// within seconds (and it cannot open new ones).
	eventually("the revoked token's open connections closed", func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_, err := long.Table("st").Get(ctx, &pb.Get{Row: []byte("a")})
		return err != nil && security.IsAuthFailure(err) || err != nil && strings.Contains(err.Error(), "UNAUTHENTICATED")
	})
}
