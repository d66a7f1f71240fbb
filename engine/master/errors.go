package master

import (
	"context"
	"errors"
	"fmt"

	pb "github.com/cellstore/cellstore/engine/api/cellstore/v1"
)

// Typed errors. Handlers return *pb.ErrorDetail values; the gRPC layer converts them with
// Status() so clients find them with pb.DetailOf.

func errDetail(code pb.ErrorCode, retryable bool, format string, args ...any) *pb.ErrorDetail {
	return &pb.ErrorDetail{Code: code, Message: fmt.Sprintf(format, args...), Retryable: retryable}
}

func errInvalid(format string, args ...any) *pb.ErrorDetail {
	return errDetail(pb.ErrorCode_ERROR_CODE_INVALID_ARGUMENT, false, format, args...)
}

func errPrecondition(format string, args ...any) *pb.ErrorDetail {
	return errDetail(pb.ErrorCode_ERROR_CODE_FAILED_PRECONDITION, false, format, args...)
}

func errTableNotFound(table string) *pb.ErrorDetail {
	return errDetail(pb.ErrorCode_ERROR_CODE_TABLE_NOT_FOUND, false, "table %s does not exist", table)
}

// ErrNotActive is what a master that is not (or no longer) the active one returns internally.
var ErrNotActive = errors.New("master: not the active master")

// toStatus converts an error of a handler into a gRPC status error carrying an ErrorDetail.
func toStatus(err error) error {
	if err == nil {
		return nil
	}
	if d, ok := pb.DetailOf(err); ok {
		return d.Status()
	}
	switch {
	case errors.Is(err, context.DeadlineExceeded):
		return errDetail(pb.ErrorCode_ERROR_CODE_TIMEOUT, true, "%v", err).Status()
	case errors.Is(err, context.Canceled):
		return errDetail(pb.ErrorCode_ERROR_CODE_TIMEOUT, true, "%v", err).Status()
	case errors.Is(err, ErrNotActive):
		return errDetail(pb.ErrorCode_ERROR_CODE_NOT_ACTIVE_MASTER, true, "%v", err).Status()
	}
	return errDetail(pb.ErrorCode_ERROR_CODE_UNKNOWN, false, "%v", err).Status()
}
