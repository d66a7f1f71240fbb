// Package controller holds the operator's two controllers: the StoreCluster controller, which makes
// the Kubernetes objects of a StoreCluster and reports its status, and the region-assignment
// controller, which talks to the master: zones, quotas, region replication, and the drain protocol
// of rolling restarts and scale-in.
package controller

import (
	"context"
	"time"

	"github.com/cellstore/cellstore/operator/internal/master"
	"github.com/cellstore/cellstore/operator/internal/resources"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
)

// Options configure both controllers.
type Options struct {
	// Masters makes master clients (tests inject a fake's factory).
	Masters master.Factory
	// OperatorVersion labels the objects the operator makes (never pod templates).
	OperatorVersion string
	// PollInterval is how often a cluster that is changing (provisioning, draining, restarting) is
	// looked at again. Default 5s.
	PollInterval time.Duration
	// ResyncInterval is how often a settled cluster is looked at again (region counts in the
	// status, zones, quotas). Default 60s.
	ResyncInterval time.Duration
	// MasterTimeout bounds each call to a master. Default 10s.
	MasterTimeout time.Duration
	// MonitoringRecheck is how long "prometheus-operator's CRDs are not installed" is believed
	// before discovery is asked again. Default 60s; 0 asks every time.
	MonitoringRecheck time.Duration
	// Now is the clock (tests may move it). Default time.Now.
	Now func() time.Time
	// SkipNameValidation lets tests start controllers of the same name twice in one process.
	SkipNameValidation bool
}

func (o Options) withDefaults() Options {
	if o.Masters == nil {
		o.Masters = master.Unavailable
	}
	if o.PollInterval <= 0 {
		o.PollInterval = 5 * time.Second
	}
	if o.ResyncInterval <= 0 {
		o.ResyncInterval = 60 * time.Second
	}
	if o.MasterTimeout <= 0 {
		o.MasterTimeout = 10 * time.Second
	}
	if o.MonitoringRecheck < 0 {
		o.MonitoringRecheck = 0
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	return o
}

// DefaultOptions are the options of the operator binary (the monitoring recheck interval is only
// defaulted here: a zero in Options means "ask every time").
func DefaultOptions() Options {
	return Options{MonitoringRecheck: 60 * time.Second}
}

// clusterWorkers is how many StoreClusters the storecluster and regionassignment controllers
// reconcile at once: a reconcile may wait on a cluster's master for a minute (waking a
// hibernated cluster enables its tables one by one), which must not hold up every other
// cluster. controller-runtime never reconciles one StoreCluster in two workers at once; the
// other controllers keep one worker (StoreUsers of one cluster share its tokens Secret).
const clusterWorkers = 4

func controllerOptions(o Options, workers int) controller.Options {
	c := controller.Options{MaxConcurrentReconciles: workers}
	if o.SkipNameValidation {
		t := true
		c.SkipNameValidation = &t
	}
	return c
}

// CacheOptions limits the manager's cache to Cellstore's own pods and to the objects the operator
// made (it watches them to repair drift and to see restarts and readiness); nodes are read directly,
// not cached. namespaces limits the cache to those namespaces (empty: all).
func CacheOptions(namespaces []string) cache.Options {
	ours := cache.ByObject{Label: labels.SelectorFromSet(labels.Set{resources.LabelManagedBy: resources.ManagedBy})}
	o := cache.Options{
		ByObject: map[client.Object]cache.ByObject{
			&corev1.Pod{}:                   {Label: labels.SelectorFromSet(labels.Set{resources.LabelName: resources.AppName})},
			&appsv1.StatefulSet{}:           ours,
			&corev1.Service{}:               ours,
			&corev1.ConfigMap{}:             ours,
			&corev1.ServiceAccount{}:        ours,
			&rbacv1.Role{}:                  ours,
			&rbacv1.RoleBinding{}:           ours,
			&policyv1.PodDisruptionBudget{}: ours,
		},
	}
	if len(namespaces) > 0 {
		o.DefaultNamespaces = map[string]cache.Config{}
		for _, ns := range namespaces {
			o.DefaultNamespaces[ns] = cache.Config{}
		}
	}
	return o
}

// podToCluster maps a Cellstore pod to its StoreCluster.
func podToCluster() handler.EventHandler {
	return handler.EnqueueRequestsFromMapFunc(func(_ context.Context, obj client.Object) []reconcile.Request {
		l := obj.GetLabels()
		if l[resources.LabelName] != resources.AppName || l[resources.LabelInstance] == "" {
			return nil
		}
		return []reconcile.Request{{NamespacedName: types.NamespacedName{Namespace: obj.GetNamespace(), Name: l[resources.LabelInstance]}}}
	})
}
