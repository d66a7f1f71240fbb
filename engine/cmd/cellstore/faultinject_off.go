//go:build !faultinject

package main

import (
	"log/slog"

	"github.com/cellstore/cellstore/engine/storage"
)

// wrapForFaults returns fs: fault injection exists only in binaries built with -tags faultinject
// (faultinject.go).
func wrapForFaults(fs storage.FS, _ *slog.Logger) storage.FS { return fs }
