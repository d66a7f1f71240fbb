// Package rpc is Cellstore's data-path protocol: a lean multiplexed request/response protocol over
// TCP in the shape of HBase's own RPC. gRPC serves the control plane; the data path (get, mutate,
// multi, scan) uses this because gRPC's per-call cost caps a 2-core server far below the store's
// targets (see docs/benchmarks.md, "Data-path protocol").
//
// A connection starts with a preamble ("CSRP" and a version byte) and a ConnectionHeader frame.
// Then both sides exchange frames: a 4-byte big-endian length, a protobuf header (RequestHeader or
// ResponseHeader, with the call id that matches a response to its request), the protobuf message
// and a cell block (serialized cells in engine/cell's KeyValue layout, never one message per cell).
// Calls pipeline on a connection and are answered in any order. The exact layout is documented in
// engine/api/cellstore/v1/client.proto.
//
// Both sides batch writes: a goroutine that sends a frame while another is in the write system call
// leaves its frame queued, and the writer sends everything queued in one call. Headers are encoded
// by hand in the protobuf wire format so the hot path allocates nothing for them.
package rpc
