// Package guest is the Go side of a Cellstore table function (docs/functions.md): a module
// built with GOOS=wasip1 GOARCH=wasm -buildmode=c-shared that imports this package and registers
// its hooks in an init function. The package exports the hooks the host looks for and calls
// those registered; everything else here builds anywhere, so a function's logic can be tested
// natively through Call.
package guest

import (
	"errors"
	"fmt"
	"strings"

	"github.com/cellstore/cellstore/engine/compute/function/abi"
)

// Row is a row (or part of one) a hook is handed. Its slices point into the call's input: copy
// what must outlive the call.
type Row struct {
	Flags uint32
	Key   []byte
	Cells []abi.Cell
}

// Decision is a hook's answer.
type Decision struct {
	status int32
	out    []byte
}

// Keep lets a mutation through, keeps a read's row or a file row's cells.
func Keep() Decision { return Decision{status: abi.StatusOK} }

// Drop refuses a mutation (reason goes to the client), hides a read's row or drops a file row's
// cells.
func Drop(reason string) Decision { return Decision{status: abi.StatusDrop, out: []byte(reason)} }

// Replace applies (pre-mutate) or returns (filter) these cells of row instead.
func Replace(row []byte, cells []abi.Cell) Decision {
	return Decision{status: abi.StatusReplace, out: abi.AppendRow(nil, 0, row, cells)}
}

// KeepOnly keeps the file row's cells whose entry is true.
func KeepOnly(keep []bool) Decision {
	mask := make([]byte, len(keep))
	for i, k := range keep {
		if k {
			mask[i] = 1
		}
	}
	return Decision{status: abi.StatusReplace, out: mask}
}

// Endpoint is one call of an endpoint over a region's rows.
type Endpoint interface {
	// Row is handed each row in order; returning true stops the call early.
	Row(r *Row) (stop bool)
	// End returns the call's result, which the client receives (one per region, or per part
	// of a region when the call ran out of time and went on).
	End() []byte
}

var (
	onInit     func(args map[string]string) error
	preMutate  func(r *Row) Decision
	postMutate func(r *Row)
	filterRow  func(r *Row) Decision
	fileRow    func(r *Row) Decision
	endpoints  = map[string]func(arg []byte) (Endpoint, error){}
	current    Endpoint
	args       map[string]string
)

// OnInit registers what runs when an instance starts, with the table's args.
func OnInit(f func(args map[string]string) error) { onInit = f }

// OnPreMutate registers the hook run before a put or delete of a row (FlagDelete set for deletes).
func OnPreMutate(f func(r *Row) Decision) { preMutate = f }

// OnPostMutate registers the hook run after a put or delete of a row is applied.
func OnPostMutate(f func(r *Row)) { postMutate = f }

// OnFilterRow registers the hook run on each row a read returns.
func OnFilterRow(f func(r *Row) Decision) { filterRow = f }

// OnFileRow registers the hook run on the cells flushes and compactions write.
func OnFileRow(f func(r *Row) Decision) { fileRow = f }

// RegisterEndpoint registers an endpoint: start makes one call's state from the caller's
// argument.
func RegisterEndpoint(name string, start func(arg []byte) (Endpoint, error)) { endpoints[name] = start }

// Args are the table's args for the function (after init).
func Args() map[string]string { return args }

func hooks() int32 {
	var h int32
	if preMutate != nil {
		h |= abi.HookPreMutate
	}
	if postMutate != nil {
		h |= abi.HookPostMutate
	}
	if filterRow != nil {
		h |= abi.HookFilterRow
	}
	if fileRow != nil {
		h |= abi.HookFileRow
	}
	if len(endpoints) > 0 {
		h |= abi.HookEndpoints
	}
	return h
}

// Call runs an export as the host would, for native tests: the status and the output.
func Call(export string, input []byte) (int32, []byte) { return dispatch(export, input) }

func failed(err error) (int32, []byte) { return -1, []byte(err.Error()) }

func row(input []byte) (*Row, error) {
	flags, key, cells, err := abi.DecodeRow(input)
	if err != nil {
		return nil, err
	}
	return &Row{Flags: flags, Key: key, Cells: cells}, nil
}

func dispatch(export string, input []byte) (int32, []byte) {
	switch export {
	case abi.ExportHooks:
		return hooks(), nil
	case abi.ExportInit:
		a, err := abi.DecodeArgs(input)
		if err != nil {
			return failed(err)
		}
		args = a
		if onInit != nil {
			if err := onInit(a); err != nil {
				return failed(err)
			}
		}
		return abi.StatusOK, nil
	case abi.ExportEndpoints:
		names := make([]string, 0, len(endpoints))
		for n := range endpoints {
			names = append(names, n)
		}
		return abi.StatusOK, []byte(strings.Join(names, "\n"))
	case abi.ExportEndpointBegin:
		name, arg, err := abi.DecodeBegin(input)
		if err != nil {
			return failed(err)
		}
		start := endpoints[name]
		if start == nil {
			return failed(fmt.Errorf("no endpoint %q", name))
		}
		e, err := start(arg)
		if err != nil {
			return failed(err)
		}
		current = e
		return abi.StatusOK, nil
	case abi.ExportEndpointRow:
		if current == nil {
			return failed(errors.New("endpoint row before begin"))
		}
		r, err := row(input)
		if err != nil {
			return failed(err)
		}
		if current.Row(r) {
			return abi.StatusDrop, nil
		}
		return abi.StatusOK, nil
	case abi.ExportEndpointEnd:
		if current == nil {
			return failed(errors.New("endpoint end before begin"))
		}
		out := current.End()
		current = nil
		return abi.StatusOK, out
	}
	var f func(*Row) Decision
	switch export {
	case abi.ExportPreMutate:
		f = preMutate
	case abi.ExportFilterRow:
		f = filterRow
	case abi.ExportFileRow:
		f = fileRow
	case abi.ExportPostMutate:
		if postMutate == nil {
			return abi.StatusOK, nil
		}
		r, err := row(input)
		if err != nil {
			return failed(err)
		}
		postMutate(r)
		return abi.StatusOK, nil
	default:
		return failed(fmt.Errorf("unknown export %q", export))
	}
	if f == nil {
		return abi.StatusOK, nil
	}
	r, err := row(input)
	if err != nil {
		return failed(err)
	}
	d := f(r)
	return d.status, d.out
}
