package resources

import (
	"crypto/tls"
	"encoding/json"
	"errors"
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

// names is what one query of the alerts or the dashboard uses.
type names struct {
	expr    string   // the query as written
	metrics []string // metric names it selects
	labels  []string // label names it matches, groups on or (a variable) lists the values of
	err     error    // a query the test cannot read
}

// variableQuery reads a Grafana dashboard variable's query (templating.list[].query): a string, or
// an object holding it in "query" (as newer Grafana versions save it).
func variableQuery(raw json.RawMessage) (string, error) {
	var s string
	if err := json.Unmarshal(raw, &s); err == nil {
		return s, nil
	}
	var o struct {
		Query *string `json:"query"`
	}
	if err := json.Unmarshal(raw, &o); err != nil || o.Query == nil {
		return "", fmt.Errorf("a variable query is a string or an object with a string \"query\", not %s", raw)
	}
	return *o.Query, nil
}

var promqlLabelName = regexp.MustCompile(`^[a-zA-Z_][a-zA-Z0-9_]*$`)

// variableNames lists the names a Prometheus variable query uses: label_values(EXPR, LABEL) — the
// metrics and labels of EXPR, and LABEL, whose values it lists — or query_result(EXPR). The other
// forms (label_values(LABEL), label_names(), metrics(REGEX)) name no metric to check against the
// engine, so they are refused.
func variableNames(q string) names {
	n := names{expr: q}
	q = strings.TrimSpace(q)
	if expr, ok := strings.CutPrefix(q, "query_result("); ok && strings.HasSuffix(expr, ")") {
		n.metrics, n.labels = promqlNames(strings.TrimSuffix(expr, ")"))
		return n
	}
	args, ok := strings.CutPrefix(q, "label_values(")
	if !ok || !strings.HasSuffix(args, ")") {
		n.err = fmt.Errorf("only label_values(METRIC_EXPR, LABEL) and query_result(EXPR) are checked, not %q", q)
		return n
	}
	args = strings.TrimSuffix(args, ")")
	i := strings.LastIndex(args, ",") // a label name has no comma; the expression may
	if i < 0 {
		n.err = fmt.Errorf("label_values(LABEL) names no metric: use label_values(METRIC_EXPR, LABEL) in %q", q)
		return n
	}
	label := strings.TrimSpace(args[i+1:])
	if !promqlLabelName.MatchString(label) {
		n.err = fmt.Errorf("%q is not a label name in %q", label, q)
		return n
	}
	n.metrics, n.labels = promqlNames(args[:i])
	n.labels = append(n.labels, label)
	return n
}

// dashboardPanel is a panel of a dashboard; a collapsed row holds its panels in Panels.
type dashboardPanel struct {
	Title   string
	Targets []struct{ Expr string }
	Panels  []dashboardPanel
}

// dashboardQueries are the queries of a Grafana dashboard by where they are: every panel's targets
// (also those of panels inside collapsed rows) and every query variable's query.
func dashboardQueries(b []byte) (map[string]names, error) {
	var d struct {
		Panels     []dashboardPanel
		Templating struct {
			List []struct {
				Name  string
				Type  string
				Query json.RawMessage
			}
		}
	}
	if err := json.Unmarshal(b, &d); err != nil {
		return nil, err
	}
	out := map[string]names{}
	var walk func([]dashboardPanel)
	walk = func(ps []dashboardPanel) {
		for _, p := range ps {
			for i, tg := range p.Targets {
				m, l := promqlNames(tg.Expr)
				out[fmt.Sprintf("panel %q query %d", p.Title, i)] = names{expr: tg.Expr, metrics: m, labels: l}
			}
			walk(p.Panels)
		}
	}
	walk(d.Panels)
	for _, v := range d.Templating.List {
		if v.Type != "query" { // datasource, custom, interval, constant, textbox: no PromQL
			continue
		}
		where := fmt.Sprintf("variable $%s", v.Name)
		q, err := variableQuery(v.Query)
		if err != nil {
			out[where] = names{expr: string(v.Query), err: err}
			continue
		}
		out[where] = variableNames(q)
	}
	return out, nil
}

func TestDashboardQueries(t *testing.T) {
	got, err := dashboardQueries([]byte(`{
		"panels": [
			{"title": "p", "targets": [{"expr": "sum by (pod) (a_total{x=\"1\"})"}]},
			{"type": "row", "title": "r", "collapsed": true, "panels": [{"title": "in row", "targets": [{"expr": "b"}]}]}
		],
		"templating": {"list": [
			{"name": "datasource", "type": "datasource", "query": "prometheus"},
			{"name": "s", "type": "query", "query": "label_values(c{namespace=~\"$namespace\", y=\"a,b\"}, table)"},
			{"name": "o", "type": "query", "query": {"query": "label_values(d, le)", "refId": "PrometheusVariableQueryEditor-VariableQuery"}},
			{"name": "r", "type": "query", "query": "query_result(topk(5, e_bytes))"},
			{"name": "bare", "type": "query", "query": "label_values(namespace)"},
			{"name": "obj", "type": "query", "query": {"qryType": 1}}
		]}
	}`))
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]names{
		`panel "p" query 0`:      {metrics: []string{"a_total"}, labels: []string{"x", "pod"}},
		`panel "in row" query 0`: {metrics: []string{"b"}},
		"variable $s":            {metrics: []string{"c"}, labels: []string{"namespace", "y", "table"}},
		"variable $o":            {metrics: []string{"d"}, labels: []string{"le"}},
		"variable $r":            {metrics: []string{"e_bytes"}},
		"variable $bare":         {err: errors.New("")},
		"variable $obj":          {err: errors.New("")},
	}
	if len(got) != len(want) {
		t.Errorf("queries %v, want %d", got, len(want))
	}
	for where, w := range want {
		g, ok := got[where]
		switch {
		case !ok:
			t.Errorf("%s: missing", where)
		case (g.err != nil) != (w.err != nil):
			t.Errorf("%s: error %v", where, g.err)
		case !slices.Equal(g.metrics, w.metrics) || !slices.Equal(g.labels, w.labels):
			t.Errorf("%s: metrics %q labels %q, want %q %q", where, g.metrics, g.labels, w.metrics, w.labels)
		}
	}
}

// queries are every query of the PrometheusRule and the chart's dashboard, by where they are.
func queries(t *testing.T) map[string]names {
	t.Helper()
	c := productionCluster()
	pr := PrometheusRule(c, "v1")
	b, err := os.ReadFile(filepath.Join("..", "..", "..", "charts", "cellstore-operator", "dashboards", "cellstore.json"))
	if err != nil {
		t.Fatal(err)
	}
	out, err := dashboardQueries(b)
	if err != nil {
		t.Fatalf("the chart's dashboard: %v", err)
	}
	for _, g := range pr.Object["spec"].(map[string]any)["groups"].([]any) {
		for _, r := range g.(map[string]any)["rules"].([]any) {
			rule := r.(map[string]any)
			expr := rule["expr"].(string)
			m, l := promqlNames(expr)
			out["alert "+rule["alert"].(string)] = names{expr: expr, metrics: m, labels: l}
		}
	}
	return out
}

// Every metric name and label the alerts and the dashboard (its panels' queries and its variables'
// queries) use exists in what a real master and region servers export: a master and two region
// servers (processes) on a real S3 server, each region server with a local file cache, after
// writes, reads, scans and with a table of read replicas (the replica lag series). The names are
// taken from the queries by promqlNames and variableNames (regular expressions, not a PromQL
// parser).
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

	for where, q := range queries(t) {
		if q.err != nil {
			t.Errorf("%s: %v", where, q.err)
			continue
		}
		expr, metrics, labels := q.expr, q.metrics, q.labels
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
