package main

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cellstore/cellstore/engine/compute/function/functiontest"
)

// Table functions from the shell against a real standalone process: alter loads the two example
// modules, describe shows them, the observer refuses and hides, call_function answers per region,
// a kill -9 restart loads them again from storage, and function_unset removes one.
func TestShellTableFunctions(t *testing.T) {
	bin := cellstoreBinary(t)
	dir := t.TempDir()
	mods := t.TempDir()
	for _, name := range []string{"queuecleanup", "firstsource"} {
		wasm := functiontest.Build(t, "github.com/cellstore/cellstore/engine/compute/function/examples/"+name)
		if err := os.WriteFile(filepath.Join(mods, name+".wasm"), wasm, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	p := startStandalone(t, bin, dir)
	runShell(t, bin, p.master, "create 'jobs', 'q'; create 'px', 's', SPLITS => ['m']; "+
		"alter 'jobs', FUNCTION => {NAME => 'cleanup', FILE => '"+filepath.Join(mods, "queuecleanup.wasm")+"', TIMEOUT_MS => 5000}; "+
		"alter 'px', FUNCTION => {NAME => 'first', FILE => '"+filepath.Join(mods, "firstsource.wasm")+"', ARGS => {'sources' => 'exchange,vendor'}, TIMEOUT_MS => 5000}")
	out := runShell(t, bin, p.master, "describe 'jobs'")
	if !strings.Contains(out, "FUNCTION => {NAME => 'cleanup', SHA256 => '") || !strings.Contains(out, "TIMEOUT_MS => '5000'") {
		t.Fatalf("describe:\n%s", out)
	}
	runShell(t, bin, p.master, "put 'jobs', 'j1', 'q:state', 'ready'; put 'jobs', 'j2', 'q:state', 'done'; "+
		"put 'px', 'AAPL', 's:exchange', 'STALE'; put 'px', 'AAPL', 's:vendor', 'OK 1'; put 'px', 'ZM', 's:exchange', 'OK 2'")
	check := func(when string) {
		t.Helper()
		if out := runShell(t, bin, p.master, "scan 'jobs'"); !strings.Contains(out, "j1") || strings.Contains(out, "j2") {
			t.Fatalf("%s: scan of the queue shows done items or misses ready ones:\n%s", when, out)
		}
		out := runShell(t, bin, p.master, "call_function 'px', 'first', 'first', 'OK'")
		if !strings.Contains(out, "AAPL\tvendor\tOK 1") || !strings.Contains(out, "ZM\texchange\tOK 2") || !strings.Contains(out, "2 call(s), 2 row(s)") {
			t.Fatalf("%s: call_function:\n%s", when, out)
		}
	}
	check("after alter")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	refused, err := exec.CommandContext(ctx, bin, "shell", "--masters", p.master, "-e", "put 'jobs', 'j3', 'q:state', 'eaten'").CombinedOutput()
	if err == nil || !strings.Contains(string(refused), "state must be ready, leased or done") {
		t.Fatalf("a write the function refuses: %v\n%s", err, refused)
	}
	p.stop(t, syscall.SIGKILL)
	p = startStandalone(t, bin, dir)
	check("after kill -9")
	out = runShell(t, bin, p.master, "alter 'jobs', METHOD => 'function_unset', NAME => 'cleanup'; scan 'jobs'; describe 'jobs'")
	if !strings.Contains(out, "j2") || strings.Contains(out, "FUNCTION =>") {
		t.Fatalf("after function_unset:\n%s", out)
	}
	p.stop(t, os.Interrupt)
}
