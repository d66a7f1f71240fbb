package security

import "github.com/prometheus/client_golang/prometheus"

// Collectors are the metrics of a server's TLS identity: when its certificate expires (the
// CellstoreCertificateExpiring alert watches it) and its reloads.
func (c *Certs) Collectors() []prometheus.Collector {
	return []prometheus.Collector{
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "cellstore_tls_certificate_expiry_timestamp_seconds",
			Help: "Unix time at which the server's TLS certificate in use expires."},
			func() float64 {
				if l := c.Leaf(); l != nil {
					return float64(l.NotAfter.Unix())
				}
				return 0
			}),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "cellstore_tls_reloads_total",
			Help: "Times the TLS certificate or CA was read again after its files changed."},
			func() float64 { c.mu.Lock(); defer c.mu.Unlock(); return float64(c.reloads) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "cellstore_tls_reload_failures_total",
			Help: "Times changed TLS files could not be used (the previous certificate stays in use)."},
			func() float64 { c.mu.Lock(); defer c.mu.Unlock(); return float64(c.failures) }),
	}
}
