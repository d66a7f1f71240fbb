// Package functiontest builds Go table functions for tests: a package of this module compiled
// with GOOS=wasip1 GOARCH=wasm -buildmode=c-shared, once per test process.
package functiontest

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
)

var (
	mu    sync.Mutex
	built = map[string][]byte{}
)

// Build compiles the Go package pkg (an import path or a directory) to a WebAssembly module and
// returns its bytes; a failure fails the test.
func Build(t testing.TB, pkg string) []byte {
	t.Helper()
	mu.Lock()
	defer mu.Unlock()
	if b, ok := built[pkg]; ok {
		return b
	}
	b, err := Compile(pkg)
	if err != nil {
		t.Fatalf("building the function %s: %v", pkg, err)
	}
	built[pkg] = b
	return b
}

// Compile compiles pkg to a WebAssembly module.
func Compile(pkg string) ([]byte, error) {
	dir, err := os.MkdirTemp("", "cellstore-wasm-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	out := filepath.Join(dir, "f.wasm")
	goBin, err := exec.LookPath("go")
	if err != nil {
		return nil, fmt.Errorf("building a WebAssembly function needs the go command on PATH: %w", err)
	}
	cmd := exec.Command(goBin, "build", "-buildmode=c-shared", "-trimpath", "-ldflags=-s -w", "-o", out, pkg)
	cmd.Env = append(os.Environ(), "GOOS=wasip1", "GOARCH=wasm", "CGO_ENABLED=0")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		return nil, &buildError{err: err, out: stderr.String()}
	}
	return os.ReadFile(out)
}

type buildError struct {
	err error
	out string
}

func (e *buildError) Error() string { return e.err.Error() + ": " + e.out }
