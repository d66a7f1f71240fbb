package regionserver

import (
	"fmt"
	"testing"

	pb "github.com/cellstore/cellstore/engine/api/cellstore/v1"
	"github.com/cellstore/cellstore/engine/region"
	"github.com/cellstore/cellstore/engine/wal"
)

// The answers to a write that failed because the server lost its WAL or its region: retryable, so
// that the client finds the region's next server, never an unknown error that ends the operation
// (the chaos run on S3 saw writes whose WAL was fenced while they waited fail for good).
func TestWriteFailuresOfALostServerAreRetryable(t *testing.T) {
	s := &Server{nameStr: "rs1"}
	for name, err := range map[string]error{
		"fenced object log": fmt.Errorf("region r1: wal sync: %w: object 7 of wal/rs1_1 is a fence marker", wal.ErrFenced),
		"broken WAL":        fmt.Errorf("region r1: wal sync: %w", wal.ErrBroken),
		"closed region":     fmt.Errorf("region r1: %w", region.ErrClosed),
	} {
		d := s.errDetail(err, "r1")
		if !d.GetRetryable() || d.GetCode() == pb.ErrorCode_ERROR_CODE_UNKNOWN {
			t.Errorf("%s: %v answered %s (retryable %v)", name, err, d.GetCode(), d.GetRetryable())
		}
		if d.GetRegion() != "r1" {
			t.Errorf("%s: the answer names region %q", name, d.GetRegion())
		}
	}
}
