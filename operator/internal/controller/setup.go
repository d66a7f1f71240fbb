package controller

import (
	"context"
	"fmt"
	"sync"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/tools/record"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/manager"
)

// The operator's permissions (config/rbac/role.yaml is generated from these; least privilege: what
// the controllers call, no more).
//
// +kubebuilder:rbac:groups=cellstore.io,resources=storeclusters,verbs=get;list;watch;patch
// +kubebuilder:rbac:groups=cellstore.io,resources=storeclusters/status,verbs=get;patch
// +kubebuilder:rbac:groups=cellstore.io,resources=storeclusters/finalizers,verbs=update
// +kubebuilder:rbac:groups=cellstore.io,resources=storeusers,verbs=get;list;watch;update;patch
// +kubebuilder:rbac:groups=cellstore.io,resources=storeusers/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=cellstore.io,resources=storeusers/finalizers,verbs=update
// +kubebuilder:rbac:groups=cellstore.io,resources=storebackups,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups=cellstore.io,resources=storebackups/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=cellstore.io,resources=storebackups/finalizers,verbs=update
// +kubebuilder:rbac:groups=cellstore.io,resources=storescheduledbackups,verbs=get;list;watch
// +kubebuilder:rbac:groups=cellstore.io,resources=storescheduledbackups/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=apps,resources=statefulsets,verbs=get;list;watch;create;patch
// +kubebuilder:rbac:groups="",resources=services;configmaps;serviceaccounts,verbs=get;list;watch;create;patch
// +kubebuilder:rbac:groups="",resources=services,verbs=delete
// +kubebuilder:rbac:groups="",resources=persistentvolumeclaims,verbs=get;create;patch
// +kubebuilder:rbac:groups="",resources=pods,verbs=get;list;watch;delete
// +kubebuilder:rbac:groups="",resources=nodes,verbs=get
// +kubebuilder:rbac:groups="",resources=secrets,verbs=get;create;patch;delete
// +kubebuilder:rbac:groups=storage.k8s.io,resources=storageclasses,verbs=get;list
// +kubebuilder:rbac:groups="",resources=events,verbs=get;list;create;patch
// +kubebuilder:rbac:groups=policy,resources=poddisruptionbudgets,verbs=get;list;watch;create;patch
// +kubebuilder:rbac:groups=networking.k8s.io,resources=networkpolicies,verbs=get;create;patch;delete
// +kubebuilder:rbac:groups=rbac.authorization.k8s.io,resources=roles;rolebindings,verbs=get;list;watch;create;patch
// +kubebuilder:rbac:groups=coordination.k8s.io,resources=leases,verbs=get;list;watch;create;update
// +kubebuilder:rbac:groups=monitoring.coreos.com,resources=servicemonitors;prometheusrules,verbs=get;create;patch;delete

// EventSource is the component name on the operator's events.
const EventSource = "cellstore-operator"

// Setup registers both controllers with the manager.
func Setup(mgr ctrl.Manager, o Options) error {
	o = o.withDefaults()
	recorder, err := newRecorder(mgr)
	if err != nil {
		return err
	}
	if err := (&StoreClusterReconciler{Client: mgr.GetClient(), APIReader: mgr.GetAPIReader(), Recorder: recorder, Options: o}).SetupWithManager(mgr); err != nil {
		return err
	}
	if err := (&AssignmentReconciler{Client: mgr.GetClient(), APIReader: mgr.GetAPIReader(), Recorder: recorder, Options: o}).SetupWithManager(mgr); err != nil {
		return err
	}
	if err := (&StoreUserReconciler{Client: mgr.GetClient(), APIReader: mgr.GetAPIReader(), Recorder: recorder, Options: o}).SetupWithManager(mgr); err != nil {
		return err
	}
	if err := (&StoreBackupReconciler{Client: mgr.GetClient(), APIReader: mgr.GetAPIReader(), Recorder: recorder, Options: o}).SetupWithManager(mgr); err != nil {
		return err
	}
	return (&ScheduledBackupReconciler{Client: mgr.GetClient(), APIReader: mgr.GetAPIReader(), Recorder: recorder, Options: o}).SetupWithManager(mgr)
}

// newRecorder makes the operator's event recorder. Unlike the manager's default it lets a
// StoreCluster have many distinct events in a short time (a rolling restart reports every step of
// every pod): client-go's defaults would combine more than 10 events of one reason and drop all but
// 25 events of one object per 5 minutes.
func newRecorder(mgr ctrl.Manager) (record.EventRecorder, error) {
	events, err := typedcorev1.NewForConfigAndClient(mgr.GetConfig(), mgr.GetHTTPClient())
	if err != nil {
		return nil, fmt.Errorf("events client: %w", err)
	}
	b := record.NewBroadcasterWithCorrelatorOptions(record.CorrelatorOptions{
		BurstSize: 200, // events of one StoreCluster before rate limiting
		QPS:       0.5, // then one every 2 seconds
		MaxEvents: 100, // events of one reason before they are combined
	})
	b.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: events.Events("")})
	r := &stoppableRecorder{EventRecorder: b.NewRecorder(mgr.GetScheme(), corev1.EventSource{Component: EventSource})}
	stop := func() {
		r.mu.Lock()
		defer r.mu.Unlock()
		if !r.stopped {
			r.stopped = true
			b.Shutdown()
		}
	}
	if err := mgr.Add(manager.RunnableFunc(func(ctx context.Context) error {
		<-ctx.Done()
		stop()
		return nil
	})); err != nil {
		stop()
		return nil, err
	}
	return r, nil
}

// stoppableRecorder drops the events of reconciles that finish after the manager stopped.
type stoppableRecorder struct {
	record.EventRecorder
	mu      sync.RWMutex
	stopped bool
}

func (r *stoppableRecorder) Event(obj runtime.Object, typ, reason, message string) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	if !r.stopped {
		r.EventRecorder.Event(obj, typ, reason, message)
	}
}

func (r *stoppableRecorder) Eventf(obj runtime.Object, typ, reason, format string, args ...any) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	if !r.stopped {
		r.EventRecorder.Eventf(obj, typ, reason, format, args...)
	}
}

func (r *stoppableRecorder) AnnotatedEventf(obj runtime.Object, annotations map[string]string, typ, reason, format string, args ...any) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	if !r.stopped {
		r.EventRecorder.AnnotatedEventf(obj, annotations, typ, reason, format, args...)
	}
}
