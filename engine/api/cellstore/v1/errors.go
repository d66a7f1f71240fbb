package cellstorev1

import (
	"errors"
	"fmt"
	"unicode/utf8"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

// Error makes an ErrorDetail usable as a Go error.
func (d *ErrorDetail) Error() string {
	msg := d.GetMessage()
	if d.GetRegion() != "" {
		msg += " (region " + d.GetRegion() + ")"
	}
	return fmt.Sprintf("%s: %s", d.GetCode(), msg)
}

// grpcCodes maps error codes to the closest gRPC status codes, for gRPC clients that only look at
// the status code. The ErrorDetail rides along as a status detail.
var grpcCodes = map[ErrorCode]codes.Code{
	ErrorCode_ERROR_CODE_NOT_SERVING_REGION:        codes.Unavailable,
	ErrorCode_ERROR_CODE_REGION_MOVED:              codes.Unavailable,
	ErrorCode_ERROR_CODE_REGION_OPENING:            codes.Unavailable,
	ErrorCode_ERROR_CODE_TOO_BUSY:                  codes.ResourceExhausted,
	ErrorCode_ERROR_CODE_RESULT_TOO_LARGE:          codes.ResourceExhausted,
	ErrorCode_ERROR_CODE_THROTTLED:                 codes.ResourceExhausted,
	ErrorCode_ERROR_CODE_TABLE_NOT_FOUND:           codes.NotFound,
	ErrorCode_ERROR_CODE_NAMESPACE_NOT_FOUND:       codes.NotFound,
	ErrorCode_ERROR_CODE_TABLE_EXISTS:              codes.AlreadyExists,
	ErrorCode_ERROR_CODE_SNAPSHOT_NOT_FOUND:        codes.NotFound,
	ErrorCode_ERROR_CODE_SNAPSHOT_EXISTS:           codes.AlreadyExists,
	ErrorCode_ERROR_CODE_WRONG_SERVER_PROCESS:      codes.FailedPrecondition,
	ErrorCode_ERROR_CODE_FUNCTION_FAILED:           codes.Aborted,
	ErrorCode_ERROR_CODE_TABLE_DISABLED:            codes.FailedPrecondition,
	ErrorCode_ERROR_CODE_FAILED_PRECONDITION:       codes.FailedPrecondition,
	ErrorCode_ERROR_CODE_NO_SUCH_FAMILY:            codes.InvalidArgument,
	ErrorCode_ERROR_CODE_INVALID_ARGUMENT:          codes.InvalidArgument,
	ErrorCode_ERROR_CODE_BAD_VALUE:                 codes.InvalidArgument,
	ErrorCode_ERROR_CODE_WRITES_BLOCKED:            codes.ResourceExhausted,
	ErrorCode_ERROR_CODE_READ_ONLY_REPLICA:         codes.FailedPrecondition,
	ErrorCode_ERROR_CODE_SERVER_STOPPING:           codes.Unavailable,
	ErrorCode_ERROR_CODE_NOT_ACTIVE_MASTER:         codes.Unavailable,
	ErrorCode_ERROR_CODE_TIMEOUT:                   codes.DeadlineExceeded,
	ErrorCode_ERROR_CODE_LEASE_EXPIRED:             codes.Unavailable,
	ErrorCode_ERROR_CODE_CORRUPTION:                codes.DataLoss,
	ErrorCode_ERROR_CODE_UNKNOWN_SCANNER:           codes.NotFound,
	ErrorCode_ERROR_CODE_OUT_OF_ORDER_SCANNER_NEXT: codes.Aborted,
	ErrorCode_ERROR_CODE_WRONG_REGION:              codes.InvalidArgument,
	ErrorCode_ERROR_CODE_UNAUTHENTICATED:           codes.Unauthenticated,
	ErrorCode_ERROR_CODE_ACCESS_DENIED:             codes.PermissionDenied,
	ErrorCode_ERROR_CODE_CONCURRENT_MODIFICATION:   codes.Aborted,
}

// Status converts d into a gRPC status error carrying d as a detail.
func (d *ErrorDetail) Status() error {
	c, ok := grpcCodes[d.GetCode()]
	if !ok {
		c = codes.Unknown
	}
	d = d.WithValidUTF8()
	st, err := status.New(c, d.GetMessage()).WithDetails(d)
	if err != nil {
		return status.Error(c, d.GetMessage())
	}
	return st.Err()
}

// DetailOf finds the ErrorDetail in err: err itself, one it wraps, or the detail of a gRPC status.
func DetailOf(err error) (*ErrorDetail, bool) {
	if err == nil {
		return nil, false
	}
	var d *ErrorDetail
	if errors.As(err, &d) {
		return d, true
	}
	if st, ok := status.FromError(err); ok {
		for _, det := range st.Details() {
			if d, ok := det.(*ErrorDetail); ok {
				return d, true
			}
		}
	}
	return nil, false
}

// WithValidUTF8 returns d, or a copy whose texts have every byte that is not UTF-8 written as
// \xNN. Protobuf strings must be UTF-8: a handler that formatted raw bytes (a key) into its
// message would otherwise send the encoder's complaint (or lose its code) instead of the message.
func (d *ErrorDetail) WithValidUTF8() *ErrorDetail {
	if utf8.ValidString(d.GetMessage()) && utf8.ValidString(d.GetRegion()) {
		return d
	}
	c := proto.CloneOf(d)
	c.Message, c.Region = escapeInvalidUTF8(c.GetMessage()), escapeInvalidUTF8(c.GetRegion())
	return c
}

// escapeInvalidUTF8 keeps the UTF-8 text of s and writes every other byte as \xNN.
func escapeInvalidUTF8(s string) string {
	if utf8.ValidString(s) {
		return s
	}
	const hex = "0123456789abcdef"
	out := make([]byte, 0, len(s)+16)
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && n <= 1 {
			out = append(out, '\\', 'x', hex[s[i]>>4], hex[s[i]&15])
			i++
			continue
		}
		out = append(out, s[i:i+n]...)
		i += n
	}
	return string(out)
}
