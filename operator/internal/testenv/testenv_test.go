//go:build envtest

package testenv

import (
	"context"
	"path/filepath"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/discovery"
)

func widget(name string, min, max int64) *unstructured.Unstructured {
	u := &unstructured.Unstructured{}
	u.SetAPIVersion("smoke.cellstore.io/v1")
	u.SetKind("Widget")
	u.SetNamespace("default")
	u.SetName(name)
	u.Object["spec"] = map[string]any{"min": min, "max": max}
	return u
}

func servesGroup(t *testing.T, env *Env, group string) bool {
	t.Helper()
	dc, err := discovery.NewDiscoveryClientForConfig(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	groups, err := dc.ServerGroups()
	if err != nil {
		t.Fatal(err)
	}
	for _, g := range groups.Groups {
		if g.Name == group {
			return true
		}
	}
	return false
}

func TestCRDInstallsAndCELRuns(t *testing.T) {
	env, err := Start(Options{CRDDirs: []string{filepath.Join("testdata", "widgets.yaml")}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := env.Stop(); err != nil {
			t.Errorf("stop: %v", err)
		}
	})
	ctx := context.Background()
	if err := env.Client.Create(ctx, widget("ok", 1, 2)); err != nil {
		t.Fatalf("valid widget refused: %v", err)
	}
	err = env.Client.Create(ctx, widget("bad", 3, 2))
	if err == nil || !strings.Contains(err.Error(), "spec.min must not exceed spec.max") {
		t.Fatalf("invalid widget: want the CEL message, got %v", err)
	}
	if servesGroup(t, env, "monitoring.coreos.com") {
		t.Fatal("monitoring.coreos.com is served although its CRDs were not asked for")
	}
}

func TestMonitoringCRDs(t *testing.T) {
	env, err := Start(Options{MonitoringCRDs: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := env.Stop(); err != nil {
			t.Errorf("stop: %v", err)
		}
	})
	if !servesGroup(t, env, "monitoring.coreos.com") {
		t.Fatal("monitoring.coreos.com not served after installing prometheus-operator's CRDs")
	}
	dc, err := discovery.NewDiscoveryClientForConfig(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	res, err := dc.ServerResourcesForGroupVersion("monitoring.coreos.com/v1")
	if err != nil {
		t.Fatal(err)
	}
	kinds := map[string]bool{}
	for _, r := range res.APIResources {
		kinds[r.Kind] = true
	}
	for _, k := range []string{"ServiceMonitor", "PodMonitor", "PrometheusRule"} {
		if !kinds[k] {
			t.Errorf("%s not served (served: %v)", k, kinds)
		}
	}
}
