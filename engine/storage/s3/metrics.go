package s3

import (
	"context"
	"errors"
	"net/http"
	"time"

	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/smithy-go"
	"github.com/prometheus/client_golang/prometheus"
)

type metrics struct {
	requests *prometheus.CounterVec
	latency  *prometheus.HistogramVec
	bytesIn  prometheus.Counter
	bytesOut prometheus.Counter
}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "cellstore_s3_requests_total",
			Help: "Requests to the object store by operation and result: ok; not_found, precondition (a conditional write refused), out_of_range (a ranged read past the end) and canceled, which are not failures; else the store's error code, or error."}, []string{"op", "result"}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "cellstore_s3_request_duration_seconds",
			Help: "Latency of requests to the object store, retries included.", Buckets: prometheus.ExponentialBuckets(0.0005, 2, 16)}, []string{"op"}),
		bytesIn:  prometheus.NewCounter(prometheus.CounterOpts{Name: "cellstore_s3_read_bytes_total", Help: "Bytes read from the object store."}),
		bytesOut: prometheus.NewCounter(prometheus.CounterOpts{Name: "cellstore_s3_written_bytes_total", Help: "Bytes written to the object store."}),
	}
	if reg != nil {
		reg.MustRegister(m.requests, m.latency, m.bytesIn, m.bytesOut)
	}
	return m
}

func (m *metrics) observe(op string, err error, d time.Duration) {
	m.requests.WithLabelValues(op, result(op, err)).Inc()
	m.latency.WithLabelValues(op).Observe(d.Seconds())
}

// The results of requests that did what was asked, though not with an object or a write: the
// answers callers ask for (a key probed for, a conditional write refused) are part of how the
// store is used, not failures of the store (CellstoreStorageErrors leaves them out).
const (
	resultNotFound     = "not_found"    // no such key (HEAD and GET probe for objects on purpose)
	resultPrecondition = "precondition" // a conditional write whose condition failed or that lost to a concurrent one (fencing)
	resultOutOfRange   = "out_of_range" // a ranged GET at or past the object's end (an empty read)
	resultCanceled     = "canceled"     // the caller gave up (its context was canceled)
)

// result names a request's outcome for cellstore_s3_requests_total: ok, one of the non-failure
// results above, else the store's error code (NoSuchBucket, AccessDenied, SlowDown,
// InternalError, ...) or "error" for a failure without one (a broken connection, the call's
// timeout). explain maps the same answers to the storage errors.
func result(op string, err error) string {
	if err == nil {
		return "ok"
	}
	if errors.Is(err, context.Canceled) {
		return resultCanceled
	}
	code, status := answer(err)
	switch {
	case code == "NoSuchBucket": // a 404 too, but a misconfiguration
		return code
	case code == "PreconditionFailed" || status == http.StatusPreconditionFailed,
		code == "ConditionalRequestConflict" || status == http.StatusConflict && op == "put":
		return resultPrecondition
	case code == "NoSuchKey" || code == "NotFound" || status == http.StatusNotFound:
		return resultNotFound
	case code == "InvalidRange" && op == "get":
		return resultOutOfRange
	case code != "":
		return code
	}
	return "error"
}

// answer is the store's error code and HTTP status in err (empty, 0 without).
func answer(err error) (code string, status int) {
	var ae smithy.APIError
	if errors.As(err, &ae) {
		code = ae.ErrorCode()
	}
	var re *awshttp.ResponseError
	if errors.As(err, &re) {
		status = re.HTTPStatusCode()
	}
	return code, status
}
