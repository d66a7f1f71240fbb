package main

import (
	"bufio"
	"context"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

func freePort(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return strconv.Itoa(l.Addr().(*net.TCPAddr).Port)
}

type standaloneProc struct {
	cmd    *exec.Cmd
	master string
	exited chan error
}

// startStandalone runs the binary and waits for its "connect with" line.
func startStandalone(t *testing.T, bin, dir string) *standaloneProc {
	t.Helper()
	master := "127.0.0.1:" + freePort(t)
	cmd := exec.Command(bin, "standalone", "--dir", dir, "--master-addr", master,
		"--master-http-addr", "127.0.0.1:"+freePort(t), "--data-addr", "127.0.0.1:"+freePort(t),
		"--admin-addr", "127.0.0.1:"+freePort(t), "--http-addr", "127.0.0.1:"+freePort(t),
		"--memstore-offheap-size", "64Mi", "--blockcache-offheap-size", "16Mi", "--blockcache-onheap-size", "16Mi",
		"--log-level", "warn")
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &standaloneProc{cmd: cmd, master: master, exited: make(chan error, 1)}
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

func TestStandaloneSmoke(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	bin := filepath.Join(t.TempDir(), "cellstore")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	dir := t.TempDir()
	p := startStandalone(t, bin, dir)
	runShell(t, bin, p.master, "create 't1', 'cf'; put 't1', 'r1', 'cf:a', 'hello'; put 't1', 'r2', 'cf:a', 'world'")
	if out := runShell(t, bin, p.master, "get 't1', 'r1'"); !strings.Contains(out, "value=hello") {
		t.Fatalf("get before restart:\n%s", out)
	}
	p.stop(t, os.Interrupt)

	// Restart after a clean stop: the data is there.
	p = startStandalone(t, bin, dir)
	if out := runShell(t, bin, p.master, "get 't1', 'r2'"); !strings.Contains(out, "value=world") {
		t.Fatalf("get after restart:\n%s", out)
	}
	// Write more, then kill the process without a flush: the restart replays the WAL.
	runShell(t, bin, p.master, "put 't1', 'r3', 'cf:a', 'unflushed'")
	p.stop(t, syscall.SIGKILL)
	p = startStandalone(t, bin, dir)
	out := runShell(t, bin, p.master, "get 't1', 'r3'; count 't1'")
	if !strings.Contains(out, "value=unflushed") || !strings.Contains(out, "3 row(s)") {
		t.Fatalf("after kill -9 and restart:\n%s", out)
	}
	p.stop(t, os.Interrupt)
}
