//go:build faultinject

package main

import (
	"bytes"
	"log/slog"
	"os"
	"syscall"
	"time"

	"github.com/cellstore/cellstore/engine/storage"
	"github.com/cellstore/cellstore/engine/storage/faultfs"
)

// FaultFileEnv names the control file of a binary built with -tags faultinject (the chaos run's:
// a real disk cannot be made to answer EIO without privileges). While the file holds
//
//	eio    every write, sync, create, rename and truncate under the storage root fails with EIO
//	slow   every sync takes 500 ms more
//
// those faults are on; empty or absent, none. The file is read every 50 ms. A release binary
// (without the tag) has none of this.
const FaultFileEnv = "CELLSTORE_FAULT_FILE"

func wrapForFaults(fs storage.FS, log *slog.Logger) storage.FS {
	path := os.Getenv(FaultFileEnv)
	if path == "" {
		return fs
	}
	ffs := faultfs.New(fs)
	go func() {
		var current []byte
		for range time.Tick(50 * time.Millisecond) {
			want, _ := os.ReadFile(path)
			want = bytes.TrimSpace(want)
			if bytes.Equal(want, current) {
				continue
			}
			current = want
			ffs.ClearRules()
			switch string(want) {
			case "eio":
				ffs.AddRule(faultfs.Rule{Ops: faultfs.OpWrite | faultfs.OpSync | faultfs.OpCreate | faultfs.OpRename | faultfs.OpTruncate,
					Action: faultfs.Fail, Err: syscall.EIO})
			case "slow":
				ffs.AddRule(faultfs.Rule{Ops: faultfs.OpSync, Action: faultfs.Delay, Delay: 500 * time.Millisecond})
			case "":
			default:
				log.Error("fault injection: unknown fault in the control file", "file", path, "fault", string(want))
				continue
			}
			log.Warn("fault injection", "fault", string(want))
		}
	}()
	return ffs
}
