package resources

import (
	"crypto/tls"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"

	"github.com/cellstore/cellstore/engine/processtest"
	"github.com/cellstore/cellstore/engine/security"
	"github.com/cellstore/cellstore/engine/storage/s3/s3test"
)

// targetLabels are added by Prometheus to every scraped series (the ServiceMonitor's target
// labels): expressions may use them though the engine does not export them.
var targetLabels = []string{"namespace", "pod", "service", "job", "instance", "container", "endpoint"}

// family is what a scrape says about one metric family: its type and the label names of its series.
type family struct {
	typ    dto.MetricType
	labels map[string]bool
}

// scrape reads a /metrics page into families by name.
func scrape(t *testing.T, addr string, into map[string]family) {
	t.Helper()
	// The servers run as the operator runs them, with TLS; the scrape does not check the
	// certificate (Prometheus is given the CA bundle).
	hc := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}} //nolint:gosec // the test's own processes
	resp, err := hc.Get("https://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var p expfmt.TextParser
	fams, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatalf("parsing %s/metrics: %v", addr, err)
	}
	for name, f := range fams {
		fam, ok := into[name]
		if !ok {
			fam = family{typ: f.GetType(), labels: map[string]bool{}}
		}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				fam.labels[l.GetName()] = true
			}
		}
		into[name] = fam
	}
}

// lookup finds the family a series name belongs to: itself, or a histogram's or summary's
// _bucket/_sum/_count series; extra are the labels such a series adds (le).
func lookup(fams map[string]family, name string) (family, []string, bool) {
	if f, ok := fams[name]; ok {
		return f, nil, true
	}
	for _, suffix := range []string{"_bucket", "_sum", "_count"} {
		base, ok := strings.CutSuffix(name, suffix)
		if !ok {
			continue
		}
		f, ok := fams[base]
		if !ok || (f.typ != dto.MetricType_HISTOGRAM && f.typ != dto.MetricType_SUMMARY) {
			continue
		}
		if suffix == "_bucket" {
			return f, []string{"le"}, f.typ == dto.MetricType_HISTOGRAM
		}
		return f, nil, true
	}
	return family{}, nil, false
}

var (
	promqlString   = regexp.MustCompile(`"(?:[^"\\]|\\.)*"`)
	promqlRange    = regexp.MustCompile(`\[[^\]]*\]`)
	promqlMatchers = regexp.MustCompile(`\{([^}]*)\}`)
	promqlMatcher  = regexp.MustCompile(`([a-zA-Z_][a-zA-Z0-9_]*)\s*(?:=~|!~|!=|=)`)
	promqlGrouping = regexp.MustCompile(`\b(?:by|without|on|ignoring|group_left|group_right)\s*\(([^)]*)\)`)
	promqlIdent    = regexp.MustCompile(`[a-zA-Z_:][a-zA-Z0-9_:]*(\s*\()?`)
	promqlKeywords = []string{"by", "without", "on", "ignoring", "group_left", "group_right", "bool", "and", "or", "unless", "offset", "inf", "nan"}
)

// promqlNames lists the metric names an expression selects and the label names it matches or
// groups on. The expressions are well-formed (promtool parses the alerts in TestAlertRules); this
// only lists names, for expressions as simple as the alerts and panels here.
func promqlNames(expr string) (metrics, labels []string) {
	e := promqlString.ReplaceAllString(expr, `""`)
	e = promqlRange.ReplaceAllString(e, "")
	for _, m := range promqlMatchers.FindAllStringSubmatch(e, -1) {
		for _, l := range promqlMatcher.FindAllStringSubmatch(m[1], -1) {
			labels = append(labels, l[1])
		}
	}
	e = promqlMatchers.ReplaceAllString(e, "")
	for _, g := range promqlGrouping.FindAllStringSubmatch(e, -1) {
		for _, l := range strings.Split(g[1], ",") {
			if l = strings.TrimSpace(l); l != "" {
				labels = append(labels, l)
			}
		}
	}
	e = promqlGrouping.ReplaceAllString(e, "")
	for _, id := range promqlIdent.FindAllStringSubmatch(e, -1) {
		if id[1] != "" || slices.Contains(promqlKeywords, strings.ToLower(id[0])) {
			continue // a function call or a keyword
		}
		metrics = append(metrics, id[0])
	}
	return metrics, labels
}

func TestPromQLNames(t *testing.T) {
	m, l := promqlNames(`histogram_quantile(0.99, sum by (le, pod) (rate(a_seconds_bucket{namespace=~"$ns", x!="a{b}"}[5m]))) / on (pod) group_left b_total > 0.5`)
	if !slices.Equal(m, []string{"a_seconds_bucket", "b_total"}) || !slices.Equal(l, []string{"namespace", "x", "le", "pod", "pod"}) {
		t.Fatalf("metrics %q labels %q", m, l)
	}
}

// queries are every expression of the PrometheusRule and the chart's dashboard, by where they are.
func queries(t *testing.T) map[string]string {
	t.Helper()
	out := map[string]string{}
	c := productionCluster()
	pr := PrometheusRule(c, "v1")
	for _, g := range pr.Object["spec"].(map[string]any)["groups"].([]any) {
		for _, r := range g.(map[string]any)["rules"].([]any) {
			rule := r.(map[string]any)
			out["alert "+rule["alert"].(string)] = rule["expr"].(string)
		}
	}
	b, err := os.ReadFile(filepath.Join("..", "..", "..", "charts", "cellstore-operator", "dashboards", "cellstore.json"))
	if err != nil {
		t.Fatal(err)
	}
	var d struct {
		Panels []struct {
			Title   string
			Targets []struct{ Expr string }
		}
	}
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatal(err)
	}
	for _, p := range d.Panels {
		for i, tg := range p.Targets {
			out[fmt.Sprintf("panel %q query %d", p.Title, i)] = tg.Expr
		}
	}
	return out
}

// Every metric name and label the alerts and the dashboard use exists in what a real master and
// region servers export: a master and two region servers (processes) on a real S3 server, each
// region server with a local file cache, after writes, reads, scans and with a table of
// read replicas (the replica lag series).
func TestMonitoringNamesExistInTheEngine(t *testing.T) {
	if os.Getenv("CELLSTORE_S3_SERVER") == "" {
		t.Skip("needs an S3 server: make test builds it, or set CELLSTORE_S3_SERVER=$(hack/s3-server.sh)")
	}
	dir := t.TempDir()
	bin := filepath.Join(dir, "cellstore")
	build := exec.Command("go", "build", "-o", bin, "github.com/cellstore/cellstore/engine/cmd/cellstore")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building cellstore: %v\n%s", err, out)
	}
	srv := s3test.Start(t)
	srv.CreateBucket(t, "monitoring")
	cfg := srv.Config("monitoring")
	env := []string{"CELLSTORE_S3_ACCESS_KEY_ID=" + cfg.AccessKeyID, "CELLSTORE_S3_SECRET_ACCESS_KEY=" + cfg.SecretAccessKey}
	bucket := []string{"--s3-endpoint", cfg.Endpoint, "--s3-bucket", "monitoring", "--s3-path-style", "--log-level", "warn"}
	// Security on, as the operator runs the servers (the TLS metrics exist only then).
	ca, _, err := security.NewCA("monitoring-test", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	is, err := ca.Issue(security.Request{CommonName: "server", Organizations: []string{GroupServers}, IPs: []net.IP{net.IPv4(127, 0, 0, 1)},
		Server: true, Client: true, Validity: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	files, err := is.WriteFiles(dir, ca.CertPEM)
	if err != nil {
		t.Fatal(err)
	}
	bucket = append(bucket, "--security=on", "--tls-cert-file", files.Cert, "--tls-key-file", files.Key, "--tls-ca-file", files.CA)
	env = append(env, "CELLSTORE_TLS_CA_FILE="+files.CA, "CELLSTORE_TLS_CERT_FILE="+files.Cert, "CELLSTORE_TLS_KEY_FILE="+files.Key)
	port := func() string { return "127.0.0.1:" + processtest.FreePort(t) }

	masterAddr, masterHTTP := port(), port()
	m := processtest.StartEnv(t, bin, env, append([]string{"master", "--grpc-addr", masterAddr, "--http-addr", masterHTTP}, bucket...)...)
	m.HTTP, m.HTTPS = masterHTTP, true
	m.WaitReady(t, time.Minute)
	var rsHTTP []string
	for i := range 2 {
		h := port()
		rs := processtest.StartEnv(t, bin, env, append([]string{"regionserver", "--masters", masterAddr,
			"--data-addr", port(), "--admin-addr", port(), "--http-addr", h, "--advertise-host", "127.0.0.1",
			"--memstore-offheap-size", "64Mi", "--blockcache-offheap-size", "32Mi",
			"--file-cache-dir", filepath.Join(dir, fmt.Sprintf("cache%d", i)), "--file-cache-size", "64Mi"}, bucket...)...)
		rs.HTTP, rs.HTTPS = h, true
		rs.WaitReady(t, time.Minute)
		rsHTTP = append(rsHTTP, h)
	}
	shell := func(script string) string {
		t.Helper()
		cmd := exec.Command(bin, "shell", "--masters", masterAddr, "-e", script)
		cmd.Env = append(os.Environ(), env...)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("shell %q: %v\n%s", script, err, out)
		}
		return string(out)
	}
	shell("create 'mon', 'f', {REGION_REPLICATION => 2}")
	var puts []string
	for i := range 50 {
		puts = append(puts, fmt.Sprintf("put 'mon', 'r%02d', 'f:q', 'v%d'", i, i))
	}
	shell(strings.Join(puts, "; ") + "; get 'mon', 'r01'; scan 'mon'; count 'mon'")

	fams := map[string]family{}
	scrape(t, masterHTTP, fams)
	// The replicas' lag appears once a replica has been fed: scrape until it is there.
	deadline := time.Now().Add(30 * time.Second)
	for {
		for _, h := range rsHTTP {
			scrape(t, h, fams)
		}
		if _, ok := fams[MetricReplicationLag]; ok || time.Now().After(deadline) {
			break
		}
		time.Sleep(200 * time.Millisecond) // polling for the replica's first batch
	}

	for where, expr := range queries(t) {
		metrics, labels := promqlNames(expr)
		if len(metrics) == 0 {
			t.Errorf("%s: no metric found in %q", where, expr)
		}
		known := map[string]bool{}
		for _, l := range targetLabels {
			known[l] = true
		}
		for _, name := range metrics {
			if name == "up" { // Prometheus's own series for every target
				continue
			}
			f, extra, ok := lookup(fams, name)
			if !ok {
				t.Errorf("%s: the engine exports no metric %s (in %q)", where, name, expr)
				continue
			}
			for l := range f.labels {
				known[l] = true
			}
			for _, l := range extra {
				known[l] = true
			}
		}
		for _, l := range labels {
			if !known[l] {
				t.Errorf("%s: no metric it selects has the label %q (in %q)", where, l, expr)
			}
		}
	}
}
