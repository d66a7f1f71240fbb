package s3

import (
	"errors"
	"time"

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
			Help: "Requests to the object store by operation and result (ok, or the store's error code)."}, []string{"op", "result"}),
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
	result := "ok"
	if err != nil {
		result = "error"
		var ae smithy.APIError
		if errors.As(err, &ae) {
			result = ae.ErrorCode()
		}
	}
	m.requests.WithLabelValues(op, result).Inc()
	m.latency.WithLabelValues(op).Observe(d.Seconds())
}
