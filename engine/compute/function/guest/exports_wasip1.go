//go:build wasip1

package guest

import (
	"unsafe"

	"github.com/cellstore/cellstore/engine/compute/function/abi"
)

//go:wasmimport cellstore output
func hostOutput(ptr unsafe.Pointer, n uint32)

//go:wasmimport cellstore log
func hostLog(ptr unsafe.Pointer, n uint32)

// Log writes a line to the region server's log (bounded there).
func Log(msg string) {
	if msg == "" {
		return
	}
	b := []byte(msg)
	hostLog(unsafe.Pointer(&b[0]), uint32(len(b)))
}

var input []byte

//go:wasmexport cellstore_alloc
func alloc(n uint32) uint32 {
	if int(n) > cap(input) {
		input = make([]byte, n)
	}
	input = input[:n]
	if n == 0 {
		return 0
	}
	return uint32(uintptr(unsafe.Pointer(&input[0])))
}

func run(export string, n uint32) int32 {
	st, out := dispatch(export, input[:n])
	if len(out) > 0 {
		hostOutput(unsafe.Pointer(&out[0]), uint32(len(out)))
	}
	return st
}

//go:wasmexport cellstore_hooks
func exportHooks() int32 { return hooks() }

//go:wasmexport cellstore_init
func exportInit(_, n uint32) int32 { return run(abi.ExportInit, n) }

//go:wasmexport cellstore_pre_mutate
func exportPreMutate(_, n uint32) int32 { return run(abi.ExportPreMutate, n) }

//go:wasmexport cellstore_post_mutate
func exportPostMutate(_, n uint32) int32 { return run(abi.ExportPostMutate, n) }

//go:wasmexport cellstore_filter_row
func exportFilterRow(_, n uint32) int32 { return run(abi.ExportFilterRow, n) }

//go:wasmexport cellstore_file_row
func exportFileRow(_, n uint32) int32 { return run(abi.ExportFileRow, n) }

//go:wasmexport cellstore_endpoints
func exportEndpoints() int32 { return run(abi.ExportEndpoints, 0) }

//go:wasmexport cellstore_endpoint_begin
func exportEndpointBegin(_, n uint32) int32 { return run(abi.ExportEndpointBegin, n) }

//go:wasmexport cellstore_endpoint_row
func exportEndpointRow(_, n uint32) int32 { return run(abi.ExportEndpointRow, n) }

//go:wasmexport cellstore_endpoint_end
func exportEndpointEnd() int32 { return run(abi.ExportEndpointEnd, 0) }
