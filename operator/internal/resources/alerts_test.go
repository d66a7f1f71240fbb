package resources

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// An alert scenario for promtool: input series (its notation: "a+bxN" is N+1 samples from a
// stepping by b, one a minute), and the alerts expected at some times (none: silent).
type alertCase struct {
	alert  string
	series map[string]string
	expect map[string][]map[string]string // eval time -> the firing alerts' labels (alertname and rule labels added)
}

// Each alert of PrometheusRule fires when its condition holds for its "for" duration and not
// otherwise, checked by `promtool test rules` (promtool built from its Go module: make installs it
// and hack/test.sh names it in CELLSTORE_PROMTOOL) on synthetic series for the StoreCluster db/prod
// (services prod-master and prod-regionserver). `promtool check rules` checks the whole rule file,
// annotation templates included.
func TestAlertRules(t *testing.T) {
	promtool := os.Getenv("CELLSTORE_PROMTOOL")
	if promtool == "" {
		t.Skip("needs promtool: make test installs it, or set CELLSTORE_PROMTOOL=$(make --no-print-directory print-promtool | tail -n1)")
	}
	const rs0, rs1 = `pod="prod-regionserver-0"`, `pod="prod-regionserver-1"`
	rsSel := func(pod string) string { return `{namespace="db", service="prod-regionserver", ` + pod + `}` }
	masterSel := `{namespace="db", service="prod-master", pod="prod-master-0"}`
	rsLabels := func(pod string) map[string]string {
		return map[string]string{"namespace": "db", "service": "prod-regionserver", "pod": pod}
	}
	byPod := func(pod string) map[string]string { return map[string]string{"namespace": "db", "pod": pod} }
	cases := []alertCase{
		{"CellstoreServerDown", map[string]string{
			"up" + rsSel(rs0): "1 1 0x14",
			"up" + rsSel(rs1): "1x16",
		}, map[string][]map[string]string{"4m": nil, "10m": {rsLabels("prod-regionserver-0")}}},
		{"CellstoreRegionsInTransitionTooLong", map[string]string{
			"cellstore_master_rit_oldest_age_seconds" + masterSel: "0 400x15",
		}, map[string][]map[string]string{"3m": nil, "10m": {{"namespace": "db"}}}},
		{"CellstoreRegionsFailedOpen", map[string]string{
			"cellstore_master_failed_open_regions" + masterSel: "0 0 2x10",
		}, map[string][]map[string]string{"2m": nil, "5m": {{"namespace": "db"}}}},
		{"CellstoreMemstoreNearLimit", map[string]string{
			"cellstore_regionserver_memstore_chunk_bytes" + rsSel(rs0): "95x20",
			"cellstore_regionserver_memstore_limit_bytes" + rsSel(rs0): "100x20",
			"cellstore_regionserver_memstore_chunk_bytes" + rsSel(rs1): "50x20",
			"cellstore_regionserver_memstore_limit_bytes" + rsSel(rs1): "100x20",
		}, map[string][]map[string]string{"5m": nil, "15m": {rsLabels("prod-regionserver-0")}}},
		{"CellstoreWritesBlocked", map[string]string{
			"cellstore_regionserver_blocked_request_count" + rsSel(rs0): "0 0 0 5x12",
			"cellstore_regionserver_blocked_request_count" + rsSel(rs1): "7x15",
		}, map[string][]map[string]string{"2m": nil, "4m": {rsLabels("prod-regionserver-0")}, "12m": nil}},
		{"CellstoreWALSyncSlow", map[string]string{
			"cellstore_regionserver_wal_sync_seconds" + rsSel(rs0): "0+6x30",
			"cellstore_regionserver_wal_sync_count" + rsSel(rs0):   "0+60x30",
			"cellstore_regionserver_wal_sync_seconds" + rsSel(rs1): "0+0.6x30",
			"cellstore_regionserver_wal_sync_count" + rsSel(rs1):   "0+60x30",
		}, map[string][]map[string]string{"8m": nil, "20m": {rsLabels("prod-regionserver-0")}}},
		{"CellstoreWALFailures", map[string]string{
			"cellstore_regionserver_wal_failure_total" + rsSel(rs0): "0 0 0 1x20",
			"cellstore_regionserver_wal_failure_total" + rsSel(rs1): "3x23",
		}, map[string][]map[string]string{"2m": nil, "5m": {rsLabels("prod-regionserver-0")}, "20m": nil}},
		{"CellstoreStorageErrors", map[string]string{
			`cellstore_s3_requests_total{namespace="db", service="prod-regionserver", pod="prod-regionserver-0", op="put", result="ok"}`:       "0+100x30",
			`cellstore_s3_requests_total{namespace="db", service="prod-regionserver", pod="prod-regionserver-0", op="put", result="SlowDown"}`: "0+20x30",
			`cellstore_s3_requests_total{namespace="db", service="prod-regionserver", pod="prod-regionserver-1", op="put", result="ok"}`:       "0+100x30",
			`cellstore_s3_requests_total{namespace="db", service="prod-regionserver", pod="prod-regionserver-1", op="put", result="SlowDown"}`: "0+1x30",
		}, map[string][]map[string]string{"8m": nil, "20m": {byPod("prod-regionserver-0")}}},
		{"CellstoreStorageErrors", map[string]string{ // missing keys probed for (a standby master's catalog): not failures
			`cellstore_s3_requests_total{namespace="db", service="prod-master", pod="prod-master-1", op="head", result="ok"}`:          "0+120x30",
			`cellstore_s3_requests_total{namespace="db", service="prod-master", pod="prod-master-1", op="head", result="not_found"}`:   "0+60x30",
			`cellstore_s3_requests_total{namespace="db", service="prod-master", pod="prod-master-1", op="put", result="precondition"}`: "0+10x30",
			`cellstore_s3_requests_total{namespace="db", service="prod-master", pod="prod-master-1", op="get", result="canceled"}`:     "0+10x30",
			// an engine of an earlier release, which counted them under the store's codes
			`cellstore_s3_requests_total{namespace="db", service="prod-master", pod="prod-master-2", op="head", result="ok"}`:       "0+120x30",
			`cellstore_s3_requests_total{namespace="db", service="prod-master", pod="prod-master-2", op="head", result="NotFound"}`: "0+60x30",
		}, map[string][]map[string]string{"8m": nil, "20m": nil}},
		{"CellstoreStorageErrors", map[string]string{ // the shared volume: errors that keep coming
			"cellstore_storage_volume_errors_total" + rsSel(rs0): "0 0 0 1+1x25",
			"cellstore_storage_volume_errors_total" + rsSel(rs1): "2x28",
		}, map[string][]map[string]string{"8m": nil, "20m": {byPod("prod-regionserver-0")}}},
		{"CellstoreCompactionQueue", map[string]string{
			"cellstore_regionserver_compaction_queue_length" + rsSel(rs0): "25x45",
			"cellstore_regionserver_compaction_queue_length" + rsSel(rs1): "5x45",
		}, map[string][]map[string]string{"20m": nil, "40m": {rsLabels("prod-regionserver-0")}}},
		{"CellstoreOffheapBudgetNearLimit", map[string]string{ // reserved up to the limit, nothing refused: silent
			`cellstore_offheap_budget_used_bytes{namespace="db", service="prod-regionserver", pod="prod-regionserver-0", budget="offheap"}`:    "100x25",
			`cellstore_offheap_budget_limit_bytes{namespace="db", service="prod-regionserver", pod="prod-regionserver-0", budget="offheap"}`:   "100x25",
			`cellstore_offheap_budget_refused_count{namespace="db", service="prod-regionserver", pod="prod-regionserver-0", budget="offheap"}`: "3x25",
		}, map[string][]map[string]string{"10m": nil, "20m": nil}},
		{"CellstoreOffheapBudgetNearLimit", map[string]string{ // refusals that keep coming
			`cellstore_offheap_budget_refused_count{namespace="db", service="prod-regionserver", pod="prod-regionserver-0", budget="memstore"}`: "0 0 0 1+1x25",
			`cellstore_offheap_budget_refused_count{namespace="db", service="prod-regionserver", pod="prod-regionserver-1", budget="memstore"}`: "4x28",
		}, map[string][]map[string]string{"10m": nil, "25m": {{"namespace": "db", "service": "prod-regionserver", "pod": "prod-regionserver-0", "budget": "memstore"}}}},
		{"CellstoreRequestsThrottled", map[string]string{
			"cellstore_regionserver_throttled_request_count_total" + rsSel(rs0): "0+10x30",
			"cellstore_regionserver_throttled_request_count_total" + rsSel(rs1): "4x30",
		}, map[string][]map[string]string{"10m": nil, "25m": {byPod("prod-regionserver-0")}}},
		{"CellstoreReplicaLag", map[string]string{
			`cellstore_regionserver_replication_lag_seconds{namespace="db", service="prod-regionserver", pod="prod-regionserver-0", region="r1"}`: "100x20",
			`cellstore_regionserver_replication_lag_seconds{namespace="db", service="prod-regionserver", pod="prod-regionserver-1", region="r2"}`: "2x20",
		}, map[string][]map[string]string{"5m": nil, "15m": {byPod("prod-regionserver-0")}}},
		{"CellstoreCertificateExpiring", map[string]string{
			"cellstore_tls_certificate_expiry_timestamp_seconds" + rsSel(rs0): "86400x90",
			"cellstore_tls_certificate_expiry_timestamp_seconds" + rsSel(rs1): "8000000x90",
		}, map[string][]map[string]string{"30m": nil, "80m": {rsLabels("prod-regionserver-0")}}},
	}

	c := productionCluster()
	groups := PrometheusRule(c, "v1").Object["spec"].(map[string]any)["groups"].([]any)
	dir := t.TempDir()
	write := func(name string, v any) string {
		t.Helper()
		b, err := json.MarshalIndent(v, "", "  ") // JSON is YAML
		if err != nil {
			t.Fatal(err)
		}
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	full := write("rules.yaml", map[string]any{"groups": groups})
	if out, err := exec.Command(promtool, "check", "rules", full).CombinedOutput(); err != nil {
		t.Fatalf("promtool check rules: %v\n%s", err, out)
	}
	// The scenarios check when alerts fire, not their text: promtool would compare the rendered
	// annotations too, so the rules under test carry none.
	var bare []any
	rulesByName := map[string]bool{}
	for _, g := range groups {
		gm := g.(map[string]any)
		var rules []any
		for _, r := range gm["rules"].([]any) {
			rm := map[string]any{}
			for k, v := range r.(map[string]any) {
				if k != "annotations" {
					rm[k] = v
				}
			}
			rulesByName[rm["alert"].(string)] = true
			rules = append(rules, rm)
		}
		bare = append(bare, map[string]any{"name": gm["name"], "rules": rules})
	}
	rulesFile := write("bare.yaml", map[string]any{"groups": bare})

	var tests []any
	scenarios := map[string]bool{}
	for _, tc := range cases {
		if _, ok := rulesByName[tc.alert]; !ok {
			t.Errorf("scenario for %s, which PrometheusRule does not have", tc.alert)
		}
		scenarios[tc.alert] = true
		var series []any
		for s, v := range tc.series {
			series = append(series, map[string]any{"series": s, "values": v})
		}
		var checks []any
		for at, firing := range tc.expect {
			var exp []any
			for _, labels := range firing {
				l := map[string]string{"severity": severityOf(groups, tc.alert), "cellstore_cluster": "prod"}
				for k, v := range labels {
					l[k] = v
				}
				exp = append(exp, map[string]any{"exp_labels": l})
			}
			checks = append(checks, map[string]any{"eval_time": at, "alertname": tc.alert, "exp_alerts": exp})
		}
		tests = append(tests, map[string]any{"name": tc.alert, "interval": "1m", "input_series": series, "alert_rule_test": checks})
	}
	for name := range rulesByName {
		if !scenarios[name] {
			t.Errorf("alert %s has no scenario", name)
		}
	}
	testFile := write("test.yaml", map[string]any{"rule_files": []string{rulesFile}, "evaluation_interval": "1m", "tests": tests})
	if out, err := exec.Command(promtool, "test", "rules", testFile).CombinedOutput(); err != nil {
		t.Fatalf("promtool test rules: %v\n%s", err, out)
	}
}

func severityOf(groups []any, alert string) string {
	for _, g := range groups {
		for _, r := range g.(map[string]any)["rules"].([]any) {
			if rm := r.(map[string]any); rm["alert"] == alert {
				return rm["labels"].(map[string]any)["severity"].(string)
			}
		}
	}
	return ""
}
