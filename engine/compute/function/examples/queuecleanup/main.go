// Command queuecleanup is an example table function (docs/functions.md) for the transactional
// queues of the seed documents, where each row is a queue item: family q holds its payload, its
// state (ready, leased or done) and, optionally, when it expires (ms since the epoch). It
//
//   - refuses writes of other columns of q and of unknown states (pre_mutate),
//   - hides done and expired items from every read (filter_row), and
//   - drops them from the store files at major compactions (file_row), once done for longer than
//     the table's retain_ms argument.
//
// Build: GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared -o queuecleanup.wasm .
package main

import (
	"bytes"
	"strconv"
	"time"

	"github.com/cellstore/cellstore/engine/compute/function/abi"
	"github.com/cellstore/cellstore/engine/compute/function/guest"
)

var (
	family   = []byte("q")
	retainMs int64
	now      = func() int64 { return time.Now().UnixMilli() }
)

func init() {
	guest.OnInit(func(args map[string]string) error {
		if v, ok := args["retain_ms"]; ok {
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil || n < 0 {
				return strconv.ErrSyntax
			}
			retainMs = n
		}
		return nil
	})
	guest.OnPreMutate(checkWrite)
	guest.OnFilterRow(func(r *guest.Row) guest.Decision {
		if gone(r.Cells, 0) {
			return guest.Drop("")
		}
		return guest.Keep()
	})
	guest.OnFileRow(func(r *guest.Row) guest.Decision {
		// Only a major compaction sees every cell of a row: dropping a done state anywhere else
		// would bring back the ready state of an older file.
		if r.Flags&abi.FlagMajor == 0 || r.Flags&abi.FlagContinued != 0 {
			return guest.Keep()
		}
		if gone(r.Cells, retainMs) {
			return guest.Drop("")
		}
		return guest.Keep()
	})
}

// checkWrite lets through puts of payload, state and expires (a known state, a number) and
// deletes.
func checkWrite(r *guest.Row) guest.Decision {
	for _, c := range r.Cells {
		if !bytes.Equal(c.Family, family) || c.Type != abi.TypePut {
			continue
		}
		switch string(c.Qualifier) {
		case "payload":
		case "state":
			switch string(c.Value) {
			case "ready", "leased", "done":
			default:
				return guest.Drop("state must be ready, leased or done, not " + strconv.Quote(string(c.Value)))
			}
		case "expires":
			if _, err := strconv.ParseInt(string(c.Value), 10, 64); err != nil {
				return guest.Drop("expires must be ms since the epoch, not " + strconv.Quote(string(c.Value)))
			}
		default:
			return guest.Drop("a queue item has payload, state and expires, not " + strconv.Quote(string(c.Qualifier)))
		}
	}
	return guest.Keep()
}

// gone says whether an item is done (for longer than retain ms) or expired. Cells of a column
// come newest first: the first state and expires cells are the current ones.
func gone(cells []abi.Cell, retain int64) bool {
	var state, expires *abi.Cell
	for i := range cells {
		c := &cells[i]
		if !bytes.Equal(c.Family, family) || c.Type != abi.TypePut {
			continue
		}
		switch {
		case state == nil && string(c.Qualifier) == "state":
			state = c
		case expires == nil && string(c.Qualifier) == "expires":
			expires = c
		}
	}
	t := now()
	if state != nil && string(state.Value) == "done" && state.Timestamp <= t-retain {
		return true
	}
	if expires != nil {
		if at, err := strconv.ParseInt(string(expires.Value), 10, 64); err == nil && at <= t {
			return true
		}
	}
	return false
}

func main() {}
