package hbase

import (
	"errors"
	"fmt"

	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	pb "github.com/cellstore/cellstore/engine/api/cellstore/v1"
	hb "github.com/cellstore/cellstore/engine/api/hbase/v2"
)

// The Java exception classes the HBase client reacts to (by name: it rebuilds them from
// ExceptionResponse.exception_class_name, and parses some messages).
const (
	classIOException            = "java.io.IOException"
	classDoNotRetry             = "org.apache.hadoop.hbase.DoNotRetryIOException"
	classFatalConnection        = "org.apache.hadoop.hbase.ipc.FatalConnectionException"
	classRequestTooBig          = "org.apache.hadoop.hbase.exceptions.RequestTooBigException"
	classBadAuth                = "org.apache.hadoop.hbase.ipc.BadAuthException"
	classUnsupportedCellCodec   = "org.apache.hadoop.hbase.ipc.UnsupportedCellCodecException"
	classUnsupportedCompression = "org.apache.hadoop.hbase.ipc.UnsupportedCompressionCodecException"
	classNotServingRegion       = "org.apache.hadoop.hbase.NotServingRegionException"
	classRegionMoved            = "org.apache.hadoop.hbase.exceptions.RegionMovedException"
	classRegionOpening          = "org.apache.hadoop.hbase.exceptions.RegionOpeningException"
	classRegionTooBusy          = "org.apache.hadoop.hbase.RegionTooBusyException"
	classThrottling             = "org.apache.hadoop.hbase.quotas.RpcThrottlingException"
	classUnknownScanner         = "org.apache.hadoop.hbase.UnknownScannerException"
	classOutOfOrderScannerNext  = "org.apache.hadoop.hbase.exceptions.OutOfOrderScannerNextException"
	classTableNotFound          = "org.apache.hadoop.hbase.TableNotFoundException"
	classTableExists            = "org.apache.hadoop.hbase.TableExistsException"
	classTableNotEnabled        = "org.apache.hadoop.hbase.TableNotEnabledException"
	classTableNotDisabled       = "org.apache.hadoop.hbase.TableNotDisabledException"
	classNamespaceNotFound      = "org.apache.hadoop.hbase.NamespaceNotFoundException"
	classNoSuchFamily           = "org.apache.hadoop.hbase.regionserver.NoSuchColumnFamilyException"
	classConcurrentModification = "org.apache.hadoop.hbase.ConcurrentTableModificationException"
	classServerNotRunning       = "org.apache.hadoop.hbase.ipc.ServerNotRunningYetException"
	classPleaseHold             = "org.apache.hadoop.hbase.PleaseHoldException"
	classAccessDenied           = "org.apache.hadoop.hbase.security.AccessDeniedException"
	classCallTimeout            = "org.apache.hadoop.hbase.ipc.CallTimeoutException"
	classUnknownProtocol        = "org.apache.hadoop.hbase.exceptions.UnknownProtocolException"
	classFailedSanityCheck      = "org.apache.hadoop.hbase.DoNotRetryIOException"
	classSnapshotDoesNotExist   = "org.apache.hadoop.hbase.snapshot.SnapshotDoesNotExistException"
	classSnapshotExists         = "org.apache.hadoop.hbase.snapshot.SnapshotExistsException"
	classUnknownSnapshot        = "org.apache.hadoop.hbase.snapshot.UnknownSnapshotException"
	classMultiResultTooLarge    = "org.apache.hadoop.hbase.MultiActionResultTooLarge"
)

// exception is an answer's error, as the HBase client sees it.
type exception struct {
	class, msg string
	doNotRetry bool
}

func (e *exception) Error() string { return e.class + ": " + e.msg }

func (e *exception) response() *hb.ExceptionResponse {
	return &hb.ExceptionResponse{ExceptionClassName: proto.String(e.class), StackTrace: proto.String(e.class + ": " + e.msg),
		DoNotRetry: proto.Bool(e.doNotRetry)}
}

// pair is the exception as a multi action's NameBytesPair.
func (e *exception) pair() *hb.NameBytesPair {
	return &hb.NameBytesPair{Name: proto.String(e.class), Value: []byte(e.class + ": " + e.msg)}
}

func doNotRetry(format string, args ...any) *exception {
	return &exception{class: classDoNotRetry, msg: fmt.Sprintf(format, args...), doNotRetry: true}
}

// throttleMessages are the types of RpcThrottlingException, as its message names them (the client
// parses the type from it).
var throttleMessages = map[pb.ThrottleType]string{
	pb.ThrottleType_THROTTLE_TYPE_REQUEST_NUMBER: "number of requests exceeded",
	pb.ThrottleType_THROTTLE_TYPE_REQUEST_SIZE:   "request size limit exceeded",
	pb.ThrottleType_THROTTLE_TYPE_READ_NUMBER:    "number of read requests exceeded",
	pb.ThrottleType_THROTTLE_TYPE_READ_SIZE:      "read size limit exceeded",
	pb.ThrottleType_THROTTLE_TYPE_WRITE_NUMBER:   "number of write requests exceeded",
	pb.ThrottleType_THROTTLE_TYPE_WRITE_SIZE:     "write size limit exceeded",
}

// fromDetail maps an engine error to the exception HBase's client expects for it.
func fromDetail(d *pb.ErrorDetail) *exception {
	msg := d.GetMessage()
	switch d.GetCode() {
	case pb.ErrorCode_ERROR_CODE_NOT_SERVING_REGION, pb.ErrorCode_ERROR_CODE_WRONG_REGION, pb.ErrorCode_ERROR_CODE_SERVER_STOPPING,
		pb.ErrorCode_ERROR_CODE_READ_ONLY_REPLICA, pb.ErrorCode_ERROR_CODE_LEASE_EXPIRED:
		// LEASE_EXPIRED: this server's lease at the master lapsed (a master handover, a partition):
		// it acknowledges nothing until renewed or its regions reassigned, so the client looks the
		// region up again and retries, as Cellstore's own client does.
		return &exception{class: classNotServingRegion, msg: msg}
	case pb.ErrorCode_ERROR_CODE_REGION_MOVED:
		if loc := d.GetNewLocation(); loc.GetHost() != "" {
			// The client parses this message for the new location (RegionMovedException), and
			// takes it only when its locationSeqNum is above that of the location it holds (the
			// seqnumDuringOpen hbase:meta gave it: meta.go).
			return &exception{class: classRegionMoved, msg: fmt.Sprintf("Region moved to: hostname=%s port=%d startCode=%d. As of locationSeqNum=%d.",
				loc.GetHost(), loc.GetPort(), loc.GetStartCode(), d.GetNewLocationSeq())}
		}
		return &exception{class: classNotServingRegion, msg: msg}
	case pb.ErrorCode_ERROR_CODE_REGION_OPENING:
		return &exception{class: classRegionOpening, msg: msg}
	case pb.ErrorCode_ERROR_CODE_TOO_BUSY, pb.ErrorCode_ERROR_CODE_WRITES_BLOCKED:
		return &exception{class: classRegionTooBusy, msg: msg}
	case pb.ErrorCode_ERROR_CODE_RESULT_TOO_LARGE:
		// A RetryImmediatelyException: the client sends the action again without a pause.
		return &exception{class: classMultiResultTooLarge, msg: msg}
	case pb.ErrorCode_ERROR_CODE_THROTTLED:
		// The client reads the wait from the message: "<what> exceeded - wait <time>".
		return &exception{class: classThrottling, msg: fmt.Sprintf("%s - wait %s", throttleMessages[d.GetThrottleType()], javaDuration(d.GetRetryAfterMs()))}
	case pb.ErrorCode_ERROR_CODE_UNKNOWN_SCANNER:
		return &exception{class: classUnknownScanner, msg: msg, doNotRetry: true}
	case pb.ErrorCode_ERROR_CODE_OUT_OF_ORDER_SCANNER_NEXT:
		return &exception{class: classOutOfOrderScannerNext, msg: msg, doNotRetry: true}
	case pb.ErrorCode_ERROR_CODE_TABLE_NOT_FOUND:
		return &exception{class: classTableNotFound, msg: msg, doNotRetry: true}
	case pb.ErrorCode_ERROR_CODE_TABLE_EXISTS:
		if d.GetRetryable() {
			// A table still being dropped: a create goes through shortly (HBase's would wait
			// behind the drop's table lock), so the client's retry does.
			return &exception{class: classIOException, msg: msg}
		}
		return &exception{class: classTableExists, msg: msg, doNotRetry: true}
	case pb.ErrorCode_ERROR_CODE_TABLE_DISABLED:
		return &exception{class: classTableNotEnabled, msg: msg, doNotRetry: true}
	case pb.ErrorCode_ERROR_CODE_SNAPSHOT_NOT_FOUND:
		return &exception{class: classSnapshotDoesNotExist, msg: msg, doNotRetry: true}
	case pb.ErrorCode_ERROR_CODE_SNAPSHOT_EXISTS:
		return &exception{class: classSnapshotExists, msg: msg, doNotRetry: true}
	case pb.ErrorCode_ERROR_CODE_NAMESPACE_NOT_FOUND:
		return &exception{class: classNamespaceNotFound, msg: msg, doNotRetry: true}
	case pb.ErrorCode_ERROR_CODE_NO_SUCH_FAMILY:
		return &exception{class: classNoSuchFamily, msg: msg, doNotRetry: true}
	case pb.ErrorCode_ERROR_CODE_CONCURRENT_MODIFICATION:
		return &exception{class: classConcurrentModification, msg: msg, doNotRetry: true}
	case pb.ErrorCode_ERROR_CODE_NOT_ACTIVE_MASTER:
		return &exception{class: classPleaseHold, msg: msg}
	case pb.ErrorCode_ERROR_CODE_TIMEOUT:
		return &exception{class: classCallTimeout, msg: msg}
	case pb.ErrorCode_ERROR_CODE_ACCESS_DENIED, pb.ErrorCode_ERROR_CODE_UNAUTHENTICATED:
		return &exception{class: classAccessDenied, msg: msg, doNotRetry: true}
	case pb.ErrorCode_ERROR_CODE_FAILED_PRECONDITION:
		if d.GetRetryable() {
			// A precondition that passes by itself (regions in transition, a procedure under way):
			// HBase queues such a call behind its table's lock; its client retries an IOException.
			return &exception{class: classIOException, msg: msg}
		}
		return &exception{class: classDoNotRetry, msg: msg, doNotRetry: true}
	case pb.ErrorCode_ERROR_CODE_INVALID_ARGUMENT, pb.ErrorCode_ERROR_CODE_BAD_VALUE,
		pb.ErrorCode_ERROR_CODE_CORRUPTION, pb.ErrorCode_ERROR_CODE_FUNCTION_FAILED: // a coprocessor's refusal, as HBase's
		return &exception{class: classDoNotRetry, msg: msg, doNotRetry: true}
	}
	if d.GetRetryable() {
		return &exception{class: classIOException, msg: msg}
	}
	return &exception{class: classDoNotRetry, msg: msg, doNotRetry: true}
}

// fromError maps an error of a master call (a gRPC status carrying an ErrorDetail) or of the
// adapter itself.
// notDisabled is err, or for the master's lasting refusal of a call that needs the table disabled
// (enabling an enabled table, dropping or truncating one that is not disabled) HBase's
// TableNotDisabledException, which applications catch by its class.
func notDisabled(err error) error {
	if d, ok := pb.DetailOf(err); ok && d.GetCode() == pb.ErrorCode_ERROR_CODE_FAILED_PRECONDITION && !d.GetRetryable() {
		return &exception{class: classTableNotDisabled, msg: d.GetMessage(), doNotRetry: true}
	}
	return err
}

func fromError(err error) *exception {
	var e *exception
	if errors.As(err, &e) {
		return e
	}
	if d, ok := pb.DetailOf(err); ok {
		return fromDetail(d)
	}
	if st, ok := status.FromError(err); ok {
		return &exception{class: classIOException, msg: st.Message()}
	}
	return &exception{class: classIOException, msg: err.Error()}
}

// javaDuration writes milliseconds as HBase's StringUtils.formatTime does ("1sec, 500ms").
func javaDuration(ms int64) string {
	if ms <= 0 {
		ms = 100
	}
	s := ""
	if h := ms / 3_600_000; h > 0 {
		s += fmt.Sprintf("%dhrs, ", h)
		ms %= 3_600_000
	}
	if m := ms / 60_000; m > 0 {
		s += fmt.Sprintf("%dmins, ", m)
		ms %= 60_000
	}
	if sec := ms / 1000; sec > 0 {
		s += fmt.Sprintf("%dsec, ", sec)
		ms %= 1000
	}
	return s + fmt.Sprintf("%dms", ms)
}
