package regionserver

import (
	"fmt"
	"testing"
	"time"

	pb "github.com/cellstore/cellstore/engine/api/cellstore/v1"
	"github.com/cellstore/cellstore/engine/quota"
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

// A table function that could not run yet (its instances busy, or the server's memory for
// functions taken) is answered TOO_BUSY, which clients retry: nothing was written or read. A
// function's refusal or failure stays FUNCTION_FAILED, which they do not.
func TestBusyFunctionIsRetryableItsRefusalIsNot(t *testing.T) {
	s := &Server{nameStr: "rs1"}
	for _, c := range []struct {
		err   error
		code  pb.ErrorCode
		retry bool
	}{
		{fmt.Errorf("%w %q of t: %w: every instance of the function stayed busy (2 instances): retry later", region.ErrFunction, "f", region.ErrFunctionBusy),
			pb.ErrorCode_ERROR_CODE_TOO_BUSY, true},
		{fmt.Errorf("region r1: %w %q of t: %w: the memory is taken", region.ErrFunction, "f", region.ErrFunctionBusy),
			pb.ErrorCode_ERROR_CODE_TOO_BUSY, true},
		{fmt.Errorf("%w %q of t refused the mutation of row %q: no", region.ErrFunction, "f", "r"),
			pb.ErrorCode_ERROR_CODE_FUNCTION_FAILED, false},
	} {
		d := s.errDetail(c.err, "r1")
		if d.GetCode() != c.code || d.GetRetryable() != c.retry {
			t.Errorf("%v answered %s (retryable %v), want %s (retryable %v)", c.err, d.GetCode(), d.GetRetryable(), c.code, c.retry)
		}
	}
}

// A throttled request's answer names the kind of quota it went over, which HBase's client reads
// as the RpcThrottlingException's type.
func TestThrottledAnswerNamesTheQuota(t *testing.T) {
	s := &Server{nameStr: "rs1"}
	err := fmt.Errorf("region r1: %w", &quota.Throttled{Subject: "user=u", Type: pb.ThrottleType_THROTTLE_TYPE_WRITE_SIZE, RetryAfter: 1500 * time.Millisecond})
	d := s.errDetail(err, "r1")
	if d.GetCode() != pb.ErrorCode_ERROR_CODE_THROTTLED || d.GetThrottleType() != pb.ThrottleType_THROTTLE_TYPE_WRITE_SIZE || d.GetRetryAfterMs() != 1500 {
		t.Errorf("answered %s %s after %d ms, want THROTTLED WRITE_SIZE after 1500 ms", d.GetCode(), d.GetThrottleType(), d.GetRetryAfterMs())
	}
}
