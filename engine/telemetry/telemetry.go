// Package telemetry serves a process's HTTP endpoint: Prometheus metrics (/metrics), liveness
// (/healthz), readiness (/readyz, which a Kubernetes readiness probe reads: for a region server,
// registered with the master and serving) and pprof profiles (/debug/pprof/). It also registers the
// Go runtime's metrics (GC pauses, heap) under the cellstore_ prefix.
package telemetry

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/pprof"
	"runtime/debug"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/cellstore/cellstore/engine/security"
	"github.com/cellstore/cellstore/engine/storage"
)

// Check reports a component's state: nil when fine, else why not.
type Check func() error

// Server is the HTTP endpoint. Register checks before or after Start.
type Server struct {
	Registry *prometheus.Registry

	mu        sync.Mutex
	liveness  map[string]Check
	readiness map[string]Check
	extra     map[string]http.Handler
	admin     map[string]http.Handler // guarded by Admin (status pages)
	srv       *http.Server
	lis       net.Listener
	failed    chan error

	// TLS, when set before Start, serves HTTPS with this certificate (read again when its files
	// change). A client certificate is asked for but not required: /metrics and the probes are
	// read by Prometheus and the kubelet; /prestop answers only the local host.
	TLS *security.Certs
	// Admin, when set before Start, guards the profiling endpoints (/debug/pprof/): a request
	// runs only when Admin accepts it (it is given the request: its TLS state, its headers);
	// otherwise it is answered with Admin's error, 401 for an unproven caller, 403 for others.
	Admin func(r *http.Request) error
	// IdleTimeout, when set before Start, closes a kept-alive connection that sent no request for
	// that long (default DefaultIdleTimeout): a client that reads an answer and then stays
	// silent holds no goroutine and descriptor for ever.
	IdleTimeout time.Duration
}

// DefaultIdleTimeout is how long the endpoint keeps an idle connection open: longer than the
// usual scrape intervals (15 s to a minute), so Prometheus keeps its connection.
const DefaultIdleTimeout = 2 * time.Minute

// AdminError is an Admin refusal with its HTTP status.
type AdminError struct {
	Status int
	Err    error
}

func (e *AdminError) Error() string { return e.Err.Error() }

// SuperusersOnly is an Admin check: the request proves its identity to auth (a client
// certificate checked against certs' CA, or a bearer token; else 401) and superuser says it may
// (else 403).
func SuperusersOnly(auth *security.Authenticator, certs *security.Certs, superuser func(security.Identity) bool) func(*http.Request) error {
	return func(r *http.Request) error {
		id, err := auth.HTTPRequest(r, certs)
		if err != nil {
			return &AdminError{Status: http.StatusUnauthorized, Err: err}
		}
		if !superuser(id) {
			return &AdminError{Status: http.StatusForbidden, Err: fmt.Errorf("profiling is for superusers; %s is not one", id)}
		}
		return nil
	}
}

// guard serves h to requests s.Admin accepts.
func (s *Server) guard(h http.HandlerFunc) http.HandlerFunc {
	if s.Admin == nil {
		return h
	}
	return func(w http.ResponseWriter, r *http.Request) {
		if err := s.Admin(r); err != nil {
			status := http.StatusForbidden
			var ae *AdminError
			if errors.As(err, &ae) {
				status = ae.Status
			}
			http.Error(w, err.Error(), status)
			return
		}
		h(w, r)
	}
}

// MaxProfileSeconds is the longest profile or trace the endpoint takes (its seconds parameter):
// a CPU profile costs the process a few per cent while it runs and a trace keeps every event in
// memory until its caller reads it, so a request may not ask for hours of either.
const MaxProfileSeconds = 300

// boundedSeconds refuses a profile asked for longer than MaxProfileSeconds (net/http/pprof takes
// any length: ?seconds=100000000 ran a CPU profile for years, and kept the profiler from anyone
// else).
func boundedSeconds(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if v := r.FormValue("seconds"); v != "" {
			sec, err := strconv.ParseFloat(v, 64)
			if err != nil || !(sec <= MaxProfileSeconds) {
				http.Error(w, fmt.Sprintf("seconds=%q: give a number of seconds up to %d", v, MaxProfileSeconds), http.StatusBadRequest)
				return
			}
		}
		h(w, r)
	}
}

// New makes a server with a fresh registry holding the Go runtime and process collectors.
func New() *Server {
	reg := prometheus.NewRegistry()
	reg.MustRegister(
		collectors.NewGoCollector(collectors.WithGoCollectorRuntimeMetrics(collectors.MetricsGC, collectors.MetricsMemory, collectors.MetricsScheduler)),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{Namespace: "cellstore"}),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "cellstore_storage_volume_errors_total",
			Help: "Errors of the shared volume's files that say it is failing (I/O error, full, read-only, permission, stale or lost mount); the log names each."},
			func() float64 { return float64(storage.VolumeErrors()) }),
	)
	return &Server{Registry: reg, liveness: map[string]Check{}, readiness: map[string]Check{}, extra: map[string]http.Handler{}, admin: map[string]http.Handler{},
		failed: make(chan error, 1)}
}

// LocalOnly serves h only to callers on the loopback interface, 403 to others: for endpoints that
// change the process's state (the /prestop hook, run by `cellstore prestop` inside the pod), on a
// port that also serves /metrics to the network.
func LocalOnly(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		host, _, err := net.SplitHostPort(r.RemoteAddr)
		if ip := net.ParseIP(host); err != nil || ip == nil || !ip.IsLoopback() {
			http.Error(w, r.URL.Path+" answers only the local host (cellstore prestop runs inside the pod); "+
				"to drain a server from elsewhere use the shell's drain and undrain", http.StatusForbidden)
			return
		}
		h.ServeHTTP(w, r)
	})
}

// Handle adds an endpoint (before Start), e.g. the /prestop hook.
func (s *Server) Handle(path string, h http.Handler) {
	s.mu.Lock()
	s.extra[path] = h
	s.mu.Unlock()
}

// HandleAdmin adds an endpoint (before Start) that, like the profiling endpoints, runs only for
// requests Admin accepts: the status pages, which show tables and servers.
func (s *Server) HandleAdmin(path string, h http.Handler) {
	s.mu.Lock()
	s.admin[path] = h
	s.mu.Unlock()
}

// Live adds a liveness check (/healthz).
func (s *Server) Live(name string, c Check) {
	s.mu.Lock()
	s.liveness[name] = c
	s.mu.Unlock()
}

// Ready adds a readiness check (/readyz).
func (s *Server) Ready(name string, c Check) {
	s.mu.Lock()
	s.readiness[name] = c
	s.mu.Unlock()
}

func (s *Server) checks(m map[string]Check) http.HandlerFunc {
	return func(w http.ResponseWriter, _ *http.Request) {
		s.mu.Lock()
		var failed []string
		for name, c := range m {
			if err := c(); err != nil {
				failed = append(failed, fmt.Sprintf("%s: %v", name, err))
			}
		}
		s.mu.Unlock()
		if len(failed) > 0 {
			w.WriteHeader(http.StatusServiceUnavailable)
			for _, f := range failed {
				fmt.Fprintln(w, f)
			}
			return
		}
		fmt.Fprintln(w, "ok")
	}
}

// Start listens on addr (":16030") and serves until Stop.
func (s *Server) Start(addr string) error {
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("telemetry: listen on %s: %w", addr, err)
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(s.Registry, promhttp.HandlerOpts{Registry: s.Registry}))
	mux.Handle("/healthz", s.checks(s.liveness))
	mux.Handle("/readyz", s.checks(s.readiness))
	mux.HandleFunc("/debug/pprof/", s.guard(boundedSeconds(pprof.Index)))
	mux.HandleFunc("/debug/pprof/cmdline", s.guard(pprof.Cmdline))
	mux.HandleFunc("/debug/pprof/profile", s.guard(boundedSeconds(pprof.Profile)))
	mux.HandleFunc("/debug/pprof/symbol", s.guard(pprof.Symbol))
	mux.HandleFunc("/debug/pprof/trace", s.guard(boundedSeconds(pprof.Trace)))
	s.mu.Lock()
	for p, h := range s.extra {
		mux.Handle(p, h)
	}
	for p, h := range s.admin {
		mux.HandleFunc(p, s.guard(h.ServeHTTP))
	}
	if s.TLS != nil {
		certs := s.TLS
		lis = tls.NewListener(lis, &tls.Config{MinVersion: tls.VersionTLS13,
			// A client certificate is asked for, not checked here (Admin checks it): a caller
			// presenting another CA's certificate still reads the open pages.
			GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) { return certs.ServerConfig(tls.RequestClientCert) }})
	}
	s.lis = lis
	idle := s.IdleTimeout
	if idle <= 0 {
		idle = DefaultIdleTimeout
	}
	// A request's headers within 10 s and its body within a minute; no write timeout, which
	// would cut /debug/pprof/profile's and trace's answers of a chosen length.
	s.srv = &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second, ReadTimeout: time.Minute, IdleTimeout: idle}
	srv := s.srv
	s.mu.Unlock()
	go func() {
		// net/http retries temporary accept errors (EMFILE) itself; anything else ends the
		// endpoint for good, and the process must hear of it (Failed).
		if err := srv.Serve(lis); err != nil && !errors.Is(err, http.ErrServerClosed) {
			s.failed <- fmt.Errorf("HTTP endpoint %s stopped serving: %w", lis.Addr(), err)
		}
	}()
	return nil
}

// Failed delivers an error if the endpoint stops serving other than by Stop: its probes and
// metrics are gone, so the process should log it and exit (Kubernetes restarts it).
func (s *Server) Failed() <-chan error { return s.failed }

// Addr is the address listened on (after Start).
func (s *Server) Addr() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.lis == nil {
		return ""
	}
	return s.lis.Addr().String()
}

// Stop shuts the endpoint down.
func (s *Server) Stop(ctx context.Context) error {
	s.mu.Lock()
	srv := s.srv
	s.mu.Unlock()
	if srv == nil {
		return nil
	}
	return srv.Shutdown(ctx)
}

// BuildInfo is the gauge cellstore_build_info{role, version, goversion} = 1: which release each
// process runs (dashboards and alerts count versions during a rolling upgrade).
func BuildInfo(role, version string) prometheus.Collector {
	goVersion := ""
	if bi, ok := debug.ReadBuildInfo(); ok {
		goVersion = bi.GoVersion
	}
	g := prometheus.NewGauge(prometheus.GaugeOpts{Name: "cellstore_build_info", Help: "The release this process runs (value 1).",
		ConstLabels: prometheus.Labels{"role": role, "version": version, "goversion": goVersion}})
	g.Set(1)
	return g
}
