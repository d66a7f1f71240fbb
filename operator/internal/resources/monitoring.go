package resources

import (
	"fmt"
	"maps"

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

// Metric names the alerts use (docs/operator.md, "Engine contract").
const (
	MetricRITOldestAge     = "cellstore_master_rit_oldest_age_seconds"
	MetricMemstoreSize     = "cellstore_regionserver_memstore_size_bytes"
	MetricMemstoreLimit    = "cellstore_regionserver_memstore_limit_bytes"
	MetricBlockedRequests  = "cellstore_regionserver_blocked_requests_total"
	MetricThrottledRequest = "cellstore_regionserver_throttled_requests_total"
)

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
		"endpoints": []any{map[string]any{
			"port":     metricsPortName,
			"path":     metricsPath,
			"interval": "30s",
		}},
		"podTargetLabels": []any{LabelComponent},
	})
}

// PrometheusRule holds the store's alerts.
func PrometheusRule(c *v1alpha1.StoreCluster, operatorVersion string) *unstructured.Unstructured {
	ns := c.Namespace
	rs := fmt.Sprintf(`namespace=%q, service=%q`, ns, StatefulSetName(c, GroupRegionServer))
	master := fmt.Sprintf(`namespace=%q, service=%q`, ns, StatefulSetName(c, GroupMaster))
	rule := func(alert, expr, forDur, severity, summary, description string) any {
		return map[string]any{
			"alert":  alert,
			"expr":   expr,
			"for":    forDur,
			"labels": map[string]any{"severity": severity, "cellstore_cluster": c.Name},
			"annotations": map[string]any{
				"summary":     summary,
				"description": description,
			},
		}
	}
	who := fmt.Sprintf("StoreCluster %s/%s", ns, c.Name)
	return monitoringObject(c, PrometheusRuleGVK, operatorVersion, map[string]any{
		"groups": []any{map[string]any{
			"name": fmt.Sprintf("cellstore.%s.%s", ns, c.Name),
			"rules": []any{
				rule("CellstoreRegionServerDown",
					fmt.Sprintf(`up{%s} == 0`, rs), "5m", "critical",
					"A Cellstore region server is down",
					who+": region server {{ $labels.pod }} has not answered scrapes for 5 minutes; its regions are being reassigned."),
				rule("CellstoreRegionsInTransitionTooLong",
					fmt.Sprintf(`max(%s{%s}) > 300`, MetricRITOldestAge, master), "5m", "warning",
					"Cellstore regions are stuck in transition",
					who+": a region has been in transition for more than 5 minutes ({{ $value }}s); check the master's log and `cellstore shell status`."),
				rule("CellstoreMemstoreNearLimit",
					fmt.Sprintf(`%s{%s} / %s{%s} > 0.9`, MetricMemstoreSize, rs, MetricMemstoreLimit, rs), "10m", "warning",
					"A Cellstore region server's memstore is near its limit",
					who+": the memstore of {{ $labels.pod }} is above 90% of its limit; writes block when it is full. Raise memory.memstoreOffHeapSize or check flushes."),
				rule("CellstoreWritesBlocked",
					fmt.Sprintf(`increase(%s{%s}[5m]) > 0`, MetricBlockedRequests, rs), "0m", "critical",
					"Cellstore writes are blocked",
					who+": {{ $labels.pod }} blocked writes in the last 5 minutes (memstore full or too many store files)."),
				rule("CellstoreRequestsThrottled",
					fmt.Sprintf(`sum by (namespace, pod) (rate(%s{%s}[5m])) > 0`, MetricThrottledRequest, rs), "15m", "info",
					"Cellstore requests are throttled by quotas",
					who+": {{ $labels.pod }} has been rejecting requests over their quota for 15 minutes."),
			},
		}},
	})
}
