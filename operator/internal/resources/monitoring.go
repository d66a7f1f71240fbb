package resources

import (
	"fmt"
	"maps"
	"strings"

	"github.com/cellstore/cellstore/operator/api/v1alpha1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// prometheus-operator's kinds, built as unstructured objects so the operator needs no
// prometheus-operator Go module; they are made only when the cluster serves these kinds.
var (
	ServiceMonitorGVK = schema.GroupVersionKind{Group: "monitoring.coreos.com", Version: "v1", Kind: "ServiceMonitor"}
	PrometheusRuleGVK = schema.GroupVersionKind{Group: "monitoring.coreos.com", Version: "v1", Kind: "PrometheusRule"}
)

// Metric names the alerts use (docs/operator.md, "Engine contract"); a test scrapes a real master
// and region server and checks that every name in the alerts and the dashboard exists.
const (
	MetricRITOldestAge       = "cellstore_master_rit_oldest_age_seconds"
	MetricFailedOpenRegions  = "cellstore_master_failed_open_regions"
	MetricMemstoreChunkBytes = "cellstore_regionserver_memstore_chunk_bytes"
	MetricMemstoreLimit      = "cellstore_regionserver_memstore_limit_bytes"
	MetricBlockedRequests    = "cellstore_regionserver_blocked_request_count"
	MetricThrottledRequests  = "cellstore_regionserver_throttled_request_count_total"
	MetricWALSyncSeconds     = "cellstore_regionserver_wal_sync_seconds"
	MetricWALSyncCount       = "cellstore_regionserver_wal_sync_count"
	MetricWALFailures        = "cellstore_regionserver_wal_failure_total"
	MetricCompactionQueue    = "cellstore_regionserver_compaction_queue_length"
	MetricOffheapRefused     = "cellstore_offheap_budget_refused_count"
	MetricReplicationLag     = "cellstore_regionserver_replication_lag_seconds"
	MetricCertificateExpiry  = "cellstore_tls_certificate_expiry_timestamp_seconds"
	MetricS3Requests         = "cellstore_s3_requests_total"
	MetricVolumeErrors       = "cellstore_storage_volume_errors_total"
)

// S3ResultsNotFailures are the results of cellstore_s3_requests_total that are answers the
// servers ask for, not failures of the store (engine/storage/s3/metrics.go): a key probed for and
// missing, a conditional write refused (fencing), a ranged read past the end, a request its caller
// canceled. Engines of earlier releases counted the first three under the store's codes.
const S3ResultsNotFailures = "ok|not_found|precondition|out_of_range|canceled" +
	"|NotFound|NoSuchKey|PreconditionFailed|ConditionalRequestConflict|InvalidRange"

// Runbook is where each alert's runbook is in the project's documentation (an anchor per alert
// name, lower-cased), given in the alert's "runbook" annotation.
const Runbook = "docs/alerts.md"

func monitoringObject(c *v1alpha1.StoreCluster, gvk schema.GroupVersionKind, operatorVersion string, spec map[string]any) *unstructured.Unstructured {
	u := &unstructured.Unstructured{Object: map[string]any{}}
	u.SetGroupVersionKind(gvk)
	u.SetName(MonitoringName(c))
	u.SetNamespace(c.Namespace)
	labels := map[string]string{}
	maps.Copy(labels, c.Spec.Monitoring.Labels)
	maps.Copy(labels, objectLabels(c, "", operatorVersion))
	u.SetLabels(labels)
	u.SetOwnerReferences([]metav1.OwnerReference{OwnerReference(c)})
	u.Object["spec"] = spec
	return u
}

// ServiceMonitor scrapes /metrics of every master and region server through their headless
// Services.
func ServiceMonitor(c *v1alpha1.StoreCluster, operatorVersion string) *unstructured.Unstructured {
	return monitoringObject(c, ServiceMonitorGVK, operatorVersion, map[string]any{
		"selector": map[string]any{"matchLabels": map[string]any{
			LabelName: AppName, LabelInstance: c.Name, LabelMetrics: "true",
		}},
		"namespaceSelector": map[string]any{"matchNames": []any{c.Namespace}},
		"endpoints":         []any{metricsEndpoint(c)},
		"podTargetLabels":   []any{LabelComponent},
	})
}

// metricsEndpoint is the ServiceMonitor's endpoint: HTTPS with TLS, the servers checked against the
// cluster's CA bundle (ConfigMap NAME-ca-bundle) under the name every server certificate holds.
func metricsEndpoint(c *v1alpha1.StoreCluster) map[string]any {
	ep := map[string]any{"port": metricsPortName, "path": metricsPath, "interval": "30s"}
	if c.Spec.TLSEnabled() {
		ep["scheme"] = "https"
		ep["tlsConfig"] = map[string]any{
			"ca":         map[string]any{"configMap": map[string]any{"name": CABundleName(c), "key": KeyCACert}},
			"serverName": "localhost",
		}
	}
	return ep
}

// PrometheusRule holds the store's alerts (docs/alerts.md has a runbook for each).
func PrometheusRule(c *v1alpha1.StoreCluster, operatorVersion string) *unstructured.Unstructured {
	ns := c.Namespace
	rs := fmt.Sprintf(`namespace=%q, service=%q`, ns, StatefulSetName(c, GroupRegionServer))
	master := fmt.Sprintf(`namespace=%q, service=%q`, ns, StatefulSetName(c, GroupMaster))
	all := fmt.Sprintf(`namespace=%q, service=~"%s|%s"`, ns, StatefulSetName(c, GroupMaster), StatefulSetName(c, GroupRegionServer))
	rule := func(alert, expr, forDur, severity, summary, description string) any {
		return map[string]any{
			"alert":  alert,
			"expr":   expr,
			"for":    forDur,
			"labels": map[string]any{"severity": severity, "cellstore_cluster": c.Name},
			"annotations": map[string]any{
				"summary":     summary,
				"description": description,
				"runbook":     Runbook + "#" + strings.ToLower(alert),
			},
		}
	}
	who := fmt.Sprintf("StoreCluster %s/%s", ns, c.Name)
	return monitoringObject(c, PrometheusRuleGVK, operatorVersion, map[string]any{
		"groups": []any{map[string]any{
			"name": fmt.Sprintf("cellstore.%s.%s", ns, c.Name),
			"rules": []any{
				rule("CellstoreServerDown",
					fmt.Sprintf(`up{%s} == 0`, all), "5m", "critical",
					"A Cellstore server is down",
					who+": {{ $labels.pod }} has not answered scrapes for 5 minutes; a region server's regions are reassigned, a master's standby takes over."),
				rule("CellstoreRegionsInTransitionTooLong",
					fmt.Sprintf(`max by (namespace) (%s{%s}) > 300`, MetricRITOldestAge, master), "5m", "warning",
					"Cellstore regions are stuck in transition",
					who+": a region has been in transition for more than 5 minutes ({{ $value }}s); check the master's log and `cellstore shell status`."),
				rule("CellstoreRegionsFailedOpen",
					fmt.Sprintf(`max by (namespace) (%s{%s}) > 0`, MetricFailedOpenRegions, master), "1m", "critical",
					"Cellstore regions failed to open",
					who+": {{ $value }} regions are FAILED_OPEN and serve nothing; find the error in the master's log and `assign` them in the shell."),
				rule("CellstoreMemstoreNearLimit",
					fmt.Sprintf(`%s{%s} / %s{%s} > 0.9`, MetricMemstoreChunkBytes, rs, MetricMemstoreLimit, rs), "10m", "warning",
					"A Cellstore region server's memstore is near its limit",
					who+": the memstore of {{ $labels.pod }} is above 90% of its budget; writes block when it is full. Raise memory.memstoreOffHeapSize or check why flushes do not keep up."),
				rule("CellstoreWritesBlocked",
					fmt.Sprintf(`delta(%s{%s}[5m]) > 0`, MetricBlockedRequests, rs), "0m", "critical",
					"Cellstore writes are blocked",
					who+": {{ $labels.pod }} made writes wait in the last 5 minutes (memstore full, or too many store files)."),
				rule("CellstoreWALSyncSlow",
					fmt.Sprintf(`rate(%s{%s}[5m]) / rate(%s{%s}[5m]) > 0.05`, MetricWALSyncSeconds, rs, MetricWALSyncCount, rs), "10m", "warning",
					"Cellstore WAL syncs are slow",
					who+": a WAL sync (or object PUT) of {{ $labels.pod }} takes {{ $value }}s on average; every acknowledged write waits for one. Check the disk or the object store."),
				rule("CellstoreWALFailures",
					fmt.Sprintf(`increase(%s{%s}[10m]) > 0`, MetricWALFailures, rs), "0m", "critical",
					"Cellstore WAL writes failed",
					who+": {{ $labels.pod }} could not write its WAL (disk full, I/O or object store errors) and re-registered; writes failed meanwhile."),
				rule("CellstoreStorageErrors",
					fmt.Sprintf(`sum by (namespace, pod) (rate(%s{%s, result!~"%s"}[5m])) / sum by (namespace, pod) (rate(%s{%s}[5m])) > 0.05`+
						` or sum by (namespace, pod) (increase(%s{%s}[5m])) > 0`,
						MetricS3Requests, all, S3ResultsNotFailures, MetricS3Requests, all, MetricVolumeErrors, all), "10m", "warning",
					"Cellstore storage fails",
					who+": more than 5% of {{ $labels.pod }}'s requests to the bucket fail, or its shared volume keeps answering with errors (I/O, full, read-only, permission, a lost mount); see cellstore_s3_requests_total by result, cellstore_storage_volume_errors_total and the pod's log."),
				rule("CellstoreCompactionQueue",
					fmt.Sprintf(`%s{%s} > 20`, MetricCompactionQueue, rs), "30m", "warning",
					"Cellstore compactions fall behind",
					who+": {{ $value }} regions of {{ $labels.pod }} have been waiting for a compaction for 30 minutes; reads slow down and writes block at too many store files."),
				// A budget's used bytes are a high-water mark (arenas stay mapped: the block cache's
				// from the start, the memstore pool's after a flush), so the alert watches refusals.
				rule("CellstoreOffheapBudgetNearLimit",
					fmt.Sprintf(`increase(%s{%s}[5m]) > 0`, MetricOffheapRefused, all), "15m", "warning",
					"A Cellstore off-heap budget keeps refusing reservations",
					who+": budget {{ $labels.budget }} of {{ $labels.pod }} has been refusing reservations for 15 minutes (memstore: writes waited for flushes). Give the role more memory or raise the budget."),
				rule("CellstoreRequestsThrottled",
					fmt.Sprintf(`sum by (namespace, pod) (rate(%s{%s}[5m])) > 0`, MetricThrottledRequests, rs), "15m", "info",
					"Cellstore requests are throttled by quotas",
					who+": {{ $labels.pod }} has been refusing requests over their quota for 15 minutes."),
				rule("CellstoreReplicaLag",
					fmt.Sprintf(`max by (namespace, pod) (%s{%s}) > 60`, MetricReplicationLag, rs), "10m", "warning",
					"Cellstore read replicas lag",
					who+": a read replica on {{ $labels.pod }} is {{ $value }}s behind its primary; TIMELINE reads answered there are that stale."),
				rule("CellstoreCertificateExpiring",
					fmt.Sprintf(`%s{%s} - time() < 14 * 86400`, MetricCertificateExpiry, all), "1h", "warning",
					"A Cellstore server's TLS certificate expires within 14 days",
					who+": the certificate {{ $labels.pod }} serves expires in less than 14 days; the operator renews it 30 days ahead, so renewal is failing (see the StoreCluster's events) or the pod does not see the renewed Secret."),
			},
		}},
	})
}
