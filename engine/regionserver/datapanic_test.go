package regionserver

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"

	"github.com/cellstore/cellstore/engine/rpc"
)

//go:noinline
func panicInAHandler() { panic("boom") }

// A panic in a data-path handler is logged with its stack, which names where it happened (as
// the admin and HBase servers log theirs), not only its value.
func TestDataPathPanicLogsItsStack(t *testing.T) {
	var buf bytes.Buffer
	s := &Server{log: slog.New(slog.NewTextHandler(&buf, nil))}
	answered := true // the call was answered before the panic: nothing more to send
	func() {
		defer s.safe(&rpc.Call{Method: 7}, &answered)
		panicInAHandler()
	}()
	out := buf.String()
	if !strings.Contains(out, "panic=boom") || !strings.Contains(out, "stack=") || !strings.Contains(out, "panicInAHandler") {
		t.Fatalf("the panic's log line %q: want its value and a stack naming panicInAHandler", out)
	}
}
