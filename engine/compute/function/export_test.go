package function

import (
	"log/slog"
	"time"

	"github.com/tetratelabs/wazero"
)

// SetTimeLimits turns the deadline checks of modules loaded afterwards on or off (benchmarks).
// wazero's compiled code is shared by module digest whatever the checks: a runtime loading
// modules without them must not share the process's (NewPrivateRuntime).
func SetTimeLimits(on bool) { enforceTimeLimits = on }

// NewPrivateRuntime is NewRuntime with compiled code of its own.
func NewPrivateRuntime(log *slog.Logger) *Runtime {
	rt := NewRuntime(log)
	rt.cache = wazero.NewCompilationCache()
	return rt
}

// SetLoadWait sets how long a load waits for memory (tests of a full budget), returning the
// previous value.
func SetLoadWait(d time.Duration) time.Duration {
	prev := loadWait
	loadWait = d
	return prev
}
