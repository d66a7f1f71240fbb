package controller

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/cellstore/cellstore/engine/version"

	"github.com/cellstore/cellstore/operator/api/v1alpha1"
	"github.com/cellstore/cellstore/operator/internal/master"
	"github.com/cellstore/cellstore/operator/internal/resources"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/tools/record"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"
)

// StoreClusterReconciler makes and keeps the Kubernetes objects of a StoreCluster and reports what
// it observes in the status.
type StoreClusterReconciler struct {
	Client client.Client
	// APIReader reads from the API server, bypassing the cache, where a decision must not rest on
	// a stale object (the StatefulSets whose template changes are recorded).
	APIReader client.Reader
	Recorder  record.EventRecorder
	Options   Options

	monMu     sync.Mutex
	monAbsent map[schema.GroupVersionKind]time.Time

	probes bucketProbes // last checks of spec.storage.s3 buckets
}

// SetupWithManager registers the controller.
func (r *StoreClusterReconciler) SetupWithManager(mgr ctrl.Manager) error {
	r.Options = r.Options.withDefaults()
	return ctrl.NewControllerManagedBy(mgr).
		Named("storecluster").
		WithOptions(controllerOptions(r.Options, clusterWorkers)).
		For(&v1alpha1.StoreCluster{}).
		Owns(&appsv1.StatefulSet{}).
		Owns(&corev1.Service{}).
		Owns(&corev1.ConfigMap{}).
		Owns(&corev1.ServiceAccount{}).
		Owns(&rbacv1.Role{}).
		Owns(&rbacv1.RoleBinding{}).
		Owns(&policyv1.PodDisruptionBudget{}).
		Watches(&corev1.Pod{}, podToCluster()).
		Complete(r)
}

// clusterState is what one reconcile of a StoreCluster computes and observes; tasks fill it in.
type clusterState struct {
	r          *StoreClusterReconciler
	c          *v1alpha1.StoreCluster
	memory     resources.MemoryPlan
	configHash map[resources.Group]string
	sts        map[resources.Group]*appsv1.StatefulSet
	monitoring string
	// storage is what the storage task found (StorageReady); zero when it did not run.
	storage storageReport
	// storageWarning is a storage problem the cluster goes on despite (a refused expansion):
	// Degraded, but no task waits for it.
	storageWarning *storageReport
}

// storageReport is the storage task's finding: ready, or why not.
type storageReport struct {
	checked bool
	ready   bool
	reason  string
	message string
}

func (r *StoreClusterReconciler) tasks() []Task[*clusterState] {
	return []Task[*clusterState]{
		{Name: "validate", Run: r.taskValidate},
		{Name: "storage", Run: r.taskStorage},
		{Name: "config", Run: r.taskConfig},
		{Name: "certificates", Run: r.taskCertificates},
		{Name: "rbac", Run: r.taskRBAC},
		{Name: "services", Run: r.taskServices},
		{Name: "disruption-budgets", Run: r.taskPDBs},
		{Name: "statefulsets", Run: r.taskStatefulSets},
		{Name: "hibernation", Run: r.taskHibernation},
		{Name: "monitoring", Run: r.taskMonitoring},
		{Name: "recovery", Run: r.taskRecovery},
	}
}

// Reconcile runs the tasks, then records the status from what it observes.
func (r *StoreClusterReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	c := &v1alpha1.StoreCluster{}
	if err := r.Client.Get(ctx, req.NamespacedName, c); err != nil {
		if apierrors.IsNotFound(err) {
			r.probes.forget(req.String())
		}
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if !c.DeletionTimestamp.IsZero() {
		// The objects have the StoreCluster as owner: the garbage collector removes them.
		r.probes.forget(req.String())
		return ctrl.Result{}, nil
	}
	s := &clusterState{r: r, c: c, sts: map[resources.Group]*appsv1.StatefulSet{}}
	rep := RunTasks(ctx, s, r.tasks())
	if ctx.Err() != nil {
		// The operator is stopping: report nothing from an interrupted reconcile.
		return ctrl.Result{}, nil
	}
	if rep.Result.Err != nil {
		log.FromContext(ctx).Info("task failed", "task", rep.Blocked, "error", rep.Result.Err.Error())
	}
	next, err := r.updateStatus(ctx, s, rep)
	if err != nil {
		if apierrors.IsConflict(err) || apierrors.IsNotFound(err) {
			return ctrl.Result{RequeueAfter: r.Options.PollInterval}, nil
		}
		return ctrl.Result{}, err
	}
	if rep.Result.Err != nil && !apierrors.IsConflict(rep.Result.Err) {
		return ctrl.Result{}, rep.Result.Err
	}
	return ctrl.Result{RequeueAfter: next}, nil
}

func (r *StoreClusterReconciler) event(c *v1alpha1.StoreCluster, typ, reason, format string, args ...any) {
	r.Recorder.Eventf(c, typ, reason, format, args...)
}

// report turns an apply result into an event.
func (r *StoreClusterReconciler) report(c *v1alpha1.StoreCluster, res applyResult, obj client.Object) {
	kind := obj.GetObjectKind().GroupVersionKind().Kind
	switch res {
	case applyCreated:
		r.event(c, corev1.EventTypeNormal, "Created", "created %s %s", kind, obj.GetName())
	case applyUpdated:
		r.event(c, corev1.EventTypeNormal, "Updated", "updated %s %s", kind, obj.GetName())
	}
}

func (r *StoreClusterReconciler) applyAll(ctx context.Context, c *v1alpha1.StoreCluster, objs ...client.Object) Result {
	for _, o := range objs {
		res, err := applyTracked(ctx, r.Client, r.APIReader, o)
		if err != nil {
			if apierrors.IsConflict(err) {
				return conflict(o, r.Options.PollInterval)
			}
			return Errored(ReasonApplyFailed, err)
		}
		r.report(c, res, o)
	}
	return Done()
}

// conflict is the result of an apply that raced another writer: it is retried at once.
func conflict(obj client.Object, after time.Duration) Result {
	return Result{Outcome: Wait, Reason: ReasonConflict, RequeueAfter: after,
		Message: fmt.Sprintf("%s %s changed while it was being updated; retrying", obj.GetObjectKind().GroupVersionKind().Kind, obj.GetName())}
}

func (r *StoreClusterReconciler) taskValidate(_ context.Context, s *clusterState) Result {
	plan, prob := checkSpec(s.c)
	if prob != nil {
		return Failed(prob.Reason, "%s; the operator changed no object", prob.Message)
	}
	s.memory = plan
	return Done()
}

func (r *StoreClusterReconciler) taskStorage(ctx context.Context, s *clusterState) Result {
	res := r.checkStorage(ctx, s)
	if res.Outcome == Complete {
		// The backup location is a start dependency too (masters, and region servers archiving
		// their WAL, open it at start): a missing Secret stops the chain before a template
		// changes, rather than restart pods into a failure.
		res = r.checkBackupSecrets(ctx, s.c)
	}
	s.storage = storageReport{checked: true, ready: res.Outcome == Complete, reason: res.Reason, message: res.Message}
	if res.Outcome == Complete && s.storage.reason == "" {
		s.storage.reason = ReasonStorageReady
	}
	return res
}

// checkStorage makes the shared claim (volume mode) or finds it (existingClaim), then checks that
// it can work: a claim must be ReadWriteMany (every master and region server pod mounts it), and a
// claim that stays Pending because the provisioner refused it is reported with the provisioner's
// own words, instead of pods that wait forever.
func (r *StoreClusterReconciler) checkStorage(ctx context.Context, s *clusterState) Result {
	c := s.c
	var pvc *corev1.PersistentVolumeClaim
	switch {
	case c.Spec.Storage.Volume != nil:
		n, err := resources.ParseBytes("spec.storage.volume.size", c.Spec.Storage.Volume.Size)
		if err != nil {
			return Failed(ReasonInvalidSpec, "%v", err)
		}
		size := *resource.NewQuantity(n, resource.BinarySI)
		existing := &corev1.PersistentVolumeClaim{}
		err = r.APIReader.Get(ctx, client.ObjectKey{Namespace: c.Namespace, Name: resources.SharedClaimName(c)}, existing)
		missing := apierrors.IsNotFound(err)
		var grow *resource.Quantity // the claim's size, when the spec asks for more
		switch {
		case err == nil:
			// Never ask for less than the claim has (it may have been expanded by hand).
			if cur, ok := existing.Spec.Resources.Requests[corev1.ResourceStorage]; ok && cur.Cmp(size) > 0 {
				size = cur
			} else if ok && cur.Cmp(size) < 0 {
				grow = &cur
			}
		case !missing:
			return Errored(ReasonApplyFailed, fmt.Errorf("read PersistentVolumeClaim %s: %w", resources.SharedClaimName(c), err))
		}
		// The class matters until the claim is bound: refuse one that cannot provide it before
		// any claim is made.
		if missing || existing.Status.Phase == corev1.ClaimPending {
			if res := r.checkStorageClass(ctx, c.Spec.Storage.Volume.StorageClassName); res.Outcome != Complete {
				return res
			}
		}
		res := r.applyAll(ctx, c, resources.SharedClaim(c, size, r.Options.OperatorVersion))
		if res.Outcome != Complete && grow != nil && (apierrors.IsForbidden(res.Err) || apierrors.IsInvalid(res.Err)) {
			// The API server refuses to expand this claim (its class does not allow expansion, or
			// it is not bound yet): the data is safe on the claim as it is, so the cluster goes on
			// with it — the rest of the reconcile must not wait for a size it cannot get — and
			// the status says so until the spec or the class changes.
			s.storageWarning = &storageReport{reason: ReasonStorageExpansionRefused, message: fmt.Sprintf(
				"spec.storage.volume.size asks %s, but PersistentVolumeClaim %s has %s and the API server refused to expand it: %v. "+
					"The cluster goes on with %s; if the claim's provisioner can expand volumes, set allowVolumeExpansion: true on its StorageClass and the operator expands it at its next look",
				size.String(), resources.SharedClaimName(c), grow.String(), res.Err, grow.String())}
			res = r.applyAll(ctx, c, resources.SharedClaim(c, *grow, r.Options.OperatorVersion))
		}
		if res.Outcome != Complete {
			return res
		}
		if missing {
			return Done() // just made: its provisioner has not answered yet; the next reconcile looks
		}
		pvc = existing // applying changes no status: the claim read above is current
	case c.Spec.Storage.ExistingClaim != nil:
		name := c.Spec.Storage.ExistingClaim.ClaimName
		pvc = &corev1.PersistentVolumeClaim{}
		if err := r.APIReader.Get(ctx, client.ObjectKey{Namespace: c.Namespace, Name: name}, pvc); err != nil {
			if apierrors.IsNotFound(err) {
				return r.failedPolling(ReasonStorageClaimMissing,
					"PersistentVolumeClaim %s (spec.storage.existingClaim.claimName) does not exist in namespace %s: create it with access mode ReadWriteMany, or name an existing one",
					name, c.Namespace)
			}
			return Errored(ReasonApplyFailed, fmt.Errorf("read PersistentVolumeClaim %s: %w", name, err))
		}
		if !slices.Contains(pvc.Spec.AccessModes, corev1.ReadWriteMany) {
			return r.failedPolling(ReasonStorageNotShared,
				"PersistentVolumeClaim %s (spec.storage.existingClaim.claimName) has access modes %v, not ReadWriteMany: every master and region server pod mounts it; "+
					"make a ReadWriteMany claim (NFS, CephFS, EFS, Filestore, Azure Files) and name it",
				name, pvc.Spec.AccessModes)
		}
	case c.Spec.Storage.S3 != nil:
		return r.checkBucket(ctx, c)
	default:
		return Done()
	}
	if pvc.Status.Phase != corev1.ClaimPending {
		return Done()
	}
	// Pending: fine while a WaitForFirstConsumer class waits for the first pod; not when the
	// provisioner said it cannot make the volume.
	if ev := r.latestWarning(ctx, pvc); ev != nil {
		class := "the cluster's default StorageClass"
		if pvc.Spec.StorageClassName != nil && *pvc.Spec.StorageClassName != "" {
			class = "StorageClass " + *pvc.Spec.StorageClassName
		}
		return r.failedPolling(ReasonStoragePending,
			"PersistentVolumeClaim %s is Pending: %s: %s. A StoreCluster needs a ReadWriteMany volume, which %s may not provide: "+
				"set spec.storage.volume.storageClassName to a class that can (NFS, CephFS, EFS, Filestore, Azure Files), or use spec.storage.existingClaim",
			pvc.Name, ev.Reason, strings.TrimSpace(ev.Message), class)
	}
	return Done()
}

// failedPolling is Failed for a problem outside the spec (a missing Secret, claim or class, a
// bucket that does not answer): the operator looks again after its poll interval, since no watch
// tells it when the problem goes.
func (r *StoreClusterReconciler) failedPolling(reason, format string, args ...any) Result {
	res := Failed(reason, format, args...)
	res.RequeueAfter = r.Options.PollInterval
	return res
}

// blockOnlyProvisioners make only ReadWriteOnce volumes (block devices): a StoreCluster's shared
// claim can never be provisioned by them. (Others that may or may not, like local-path, which
// makes ReadWriteMany volumes only when a shared path is configured, are judged by their events.)
var blockOnlyProvisioners = map[string]string{
	"ebs.csi.aws.com":          "AWS EBS",
	"kubernetes.io/aws-ebs":    "AWS EBS",
	"pd.csi.storage.gke.io":    "GCE Persistent Disk",
	"kubernetes.io/gce-pd":     "GCE Persistent Disk",
	"disk.csi.azure.com":       "Azure Disk",
	"kubernetes.io/azure-disk": "Azure Disk",
}

// checkStorageClass refuses, before any claim is made, a StorageClass that does not exist or whose
// provisioner makes only ReadWriteOnce volumes. name nil: the cluster's default class. An operator
// not allowed to read StorageClasses (a namespaced install without rbac.clusterReads) skips it.
func (r *StoreClusterReconciler) checkStorageClass(ctx context.Context, name *string) Result {
	var sc *storagev1.StorageClass
	if name != nil && *name != "" {
		sc = &storagev1.StorageClass{}
		if err := r.APIReader.Get(ctx, client.ObjectKey{Name: *name}, sc); err != nil {
			if apierrors.IsNotFound(err) {
				return r.failedPolling(ReasonStorageClassMissing, "StorageClass %s (spec.storage.volume.storageClassName) does not exist: name one that provides ReadWriteMany volumes (kubectl get storageclass)", *name)
			}
			if apierrors.IsForbidden(err) {
				return Done() // installed with namespaced RBAC only: the claim's events say what happens
			}
			return Errored(ReasonApplyFailed, fmt.Errorf("read StorageClass %s: %w", *name, err))
		}
	} else {
		var list storagev1.StorageClassList
		if err := r.APIReader.List(ctx, &list); err != nil {
			if apierrors.IsForbidden(err) {
				return Done() // installed with namespaced RBAC only, as above
			}
			return Errored(ReasonApplyFailed, fmt.Errorf("list StorageClasses: %w", err))
		}
		for i := range list.Items {
			if list.Items[i].Annotations["storageclass.kubernetes.io/is-default-class"] == "true" {
				sc = &list.Items[i]
				break
			}
		}
		if sc == nil {
			return Done() // no default class: the claim's events say what happens
		}
	}
	if what, ok := blockOnlyProvisioners[sc.Provisioner]; ok {
		return r.failedPolling(ReasonStorageNotShared,
			"StorageClass %s (provisioner %s, %s) makes only ReadWriteOnce volumes, and every master and region server pod mounts the shared claim: "+
				"set spec.storage.volume.storageClassName to a ReadWriteMany class (EFS, Filestore, Azure Files, NFS, CephFS), or use spec.storage.existingClaim; no claim was made",
			sc.Name, sc.Provisioner, what)
	}
	return Done()
}

// latestWarning is the newest Warning event about the claim (the provisioner's refusal), or nil.
func (r *StoreClusterReconciler) latestWarning(ctx context.Context, pvc *corev1.PersistentVolumeClaim) *corev1.Event {
	var list corev1.EventList
	if err := r.APIReader.List(ctx, &list, client.InNamespace(pvc.Namespace),
		client.MatchingFields{"involvedObject.kind": "PersistentVolumeClaim", "involvedObject.name": pvc.Name, "type": corev1.EventTypeWarning}); err != nil {
		log.FromContext(ctx).Info("cannot read the claim's events", "claim", pvc.Name, "error", err.Error())
		return nil
	}
	var latest *corev1.Event
	for i := range list.Items {
		e := &list.Items[i]
		if e.InvolvedObject.UID != "" && e.InvolvedObject.UID != pvc.UID {
			continue // a deleted claim of the same name
		}
		if latest == nil || eventTime(e).After(eventTime(latest)) {
			latest = e
		}
	}
	return latest
}

func eventTime(e *corev1.Event) time.Time {
	switch {
	case !e.LastTimestamp.IsZero():
		return e.LastTimestamp.Time
	case !e.EventTime.IsZero():
		return e.EventTime.Time
	}
	return e.CreationTimestamp.Time
}

func (r *StoreClusterReconciler) taskConfig(ctx context.Context, s *clusterState) Result {
	c := s.c
	cm, hashes := resources.ConfigMap(c, r.Options.OperatorVersion)
	existing := &corev1.ConfigMap{}
	switch err := r.APIReader.Get(ctx, client.ObjectKeyFromObject(cm), existing); {
	case err == nil:
		for _, g := range []resources.Group{resources.GroupMaster, resources.GroupRegionServer} {
			f := resources.ConfigFileName(g)
			if old, cur := existing.Data[f], cm.Data[f]; old != cur {
				online, restart := resources.SplitOnline(g, resources.ConfigKeysChanged(old, cur))
				if len(restart) > 0 {
					r.event(c, corev1.EventTypeNormal, "ConfigChanged",
						"%s configuration (ConfigMap %s, %s) changed: %s; the pods restart one at a time to read it",
						groupTitle(g), cm.Name, f, strings.Join(restart, ", "))
				}
				if len(online) > 0 {
					r.event(c, corev1.EventTypeNormal, "ConfigChanged",
						"%s configuration (ConfigMap %s, %s) changed: %s; applied without a restart (the pods re-read the file within about a minute)",
						groupTitle(g), cm.Name, f, strings.Join(online, ", "))
				}
			}
		}
	case !apierrors.IsNotFound(err):
		return Errored(ReasonApplyFailed, fmt.Errorf("read ConfigMap %s: %w", cm.Name, err))
	}
	s.configHash = hashes
	return r.applyAll(ctx, c, cm)
}

func (r *StoreClusterReconciler) taskRBAC(ctx context.Context, s *clusterState) Result {
	v := r.Options.OperatorVersion
	return r.applyAll(ctx, s.c, resources.MasterServiceAccount(s.c, v), resources.MasterLeaseRole(s.c, v), resources.MasterLeaseRoleBinding(s.c, v))
}

func (r *StoreClusterReconciler) taskServices(ctx context.Context, s *clusterState) Result {
	v := r.Options.OperatorVersion
	if res := r.applyAll(ctx, s.c,
		resources.HeadlessService(s.c, resources.GroupMaster, v),
		resources.HeadlessService(s.c, resources.GroupRegionServer, v),
		resources.ClientService(s.c, v)); res.Outcome != Complete {
		return res
	}
	if res := r.externalServices(ctx, s); res.Outcome != Complete {
		return res
	}
	np := resources.RegionServerNetworkPolicy(s.c, v)
	if s.c.Spec.NetworkPolicyEnabled() {
		return r.applyAll(ctx, s.c, np)
	}
	if err := r.Client.Delete(ctx, np); err != nil && !apierrors.IsNotFound(err) {
		return Errored(ReasonApplyFailed, fmt.Errorf("delete NetworkPolicy %s: %w", np.Name, err))
	}
	return Done()
}

// externalServices applies the per-pod Services of spec.externalAccess and deletes those no
// longer wanted: all of them without it, and those of pods scaled away (once the pod is gone, so
// a region server being drained stays reachable).
func (r *StoreClusterReconciler) externalServices(ctx context.Context, s *clusterState) Result {
	c := s.c
	replicas := map[resources.Group]int32{resources.GroupMaster: c.Spec.MasterReplicas(), resources.GroupRegionServer: c.Spec.RegionServerReplicas()}
	want := resources.ExternalServices(c, replicas, r.Options.OperatorVersion)
	objs := make([]client.Object, 0, len(want))
	keep := map[string]bool{}
	for _, svc := range want {
		objs = append(objs, svc)
		keep[svc.Name] = true
	}
	if res := r.applyAll(ctx, c, objs...); res.Outcome != Complete {
		return res
	}
	var have corev1.ServiceList
	sel := resources.ClusterLabels(c)
	sel[resources.LabelExternal] = "true"
	if err := r.Client.List(ctx, &have, client.InNamespace(c.Namespace), client.MatchingLabels(sel)); err != nil {
		return Errored(ReasonApplyFailed, fmt.Errorf("list the external Services: %w", err))
	}
	var pods corev1.PodList
	if err := r.Client.List(ctx, &pods, client.InNamespace(c.Namespace), client.MatchingLabels(resources.ClusterLabels(c))); err != nil {
		return Errored(ReasonApplyFailed, fmt.Errorf("list pods: %w", err))
	}
	running := map[string]bool{}
	for _, p := range pods.Items {
		running[resources.ExternalServiceName(p.Name)] = c.Spec.ExternalAccess != nil
	}
	for i := range have.Items {
		svc := &have.Items[i]
		if keep[svc.Name] || running[svc.Name] {
			continue
		}
		if err := r.Client.Delete(ctx, svc); err != nil && !apierrors.IsNotFound(err) {
			return Errored(ReasonApplyFailed, fmt.Errorf("delete Service %s: %w", svc.Name, err))
		}
	}
	return Done()
}

func (r *StoreClusterReconciler) taskPDBs(ctx context.Context, s *clusterState) Result {
	v := r.Options.OperatorVersion
	return r.applyAll(ctx, s.c,
		resources.PodDisruptionBudget(s.c, resources.GroupMaster, v),
		resources.PodDisruptionBudget(s.c, resources.GroupRegionServer, v))
}

func (r *StoreClusterReconciler) taskStatefulSets(ctx context.Context, s *clusterState) Result {
	c := s.c
	if res := r.checkUpgrade(ctx, c); res.Outcome != Complete {
		return res
	}
	// The masters get the backup location's keys; the region servers only when they archive
	// their WAL there.
	masterKeys, err := r.credentialsHash(ctx, c, c.Spec.Backup != nil)
	if err != nil {
		return Errored(ReasonApplyFailed, err)
	}
	serverKeys, err := r.credentialsHash(ctx, c, c.Spec.Backup != nil && c.Spec.Backup.WALArchive != nil)
	if err != nil {
		return Errored(ReasonApplyFailed, err)
	}
	in := resources.WorkloadInputs{ConfigHash: s.configHash[resources.GroupMaster], OperatorVersion: r.Options.OperatorVersion, Memory: s.memory,
		Hibernated: hibernated(c), CredentialsHash: masterKeys}
	if res := r.applyStatefulSet(ctx, s, resources.GroupMaster, resources.MasterStatefulSet(c, in)); res.Outcome != Complete {
		return res
	}
	in.ConfigHash, in.CredentialsHash = s.configHash[resources.GroupRegionServer], serverKeys
	in.Replicas = c.Spec.RegionServerReplicas()
	if in.Hibernated {
		in.Replicas = 0
	}
	return r.applyStatefulSet(ctx, s, resources.GroupRegionServer, resources.RegionServerStatefulSet(c, in))
}

// credentialsHash hashes what a group's pods read once from Secrets for the object store — the S3
// keys (spec.storage.s3's, and with backup spec.backup.s3's) and the endpoints' CA bundles, which
// the engine loads at start: a change restarts the pods (a reissued CA of a self-hosted store
// would otherwise break every request while the operator's own check passed). "" when none is
// given that way. A Secret that is missing or lacks a key is left out (the storage task says so).
func (r *StoreClusterReconciler) credentialsHash(ctx context.Context, c *v1alpha1.StoreCluster, backup bool) (string, error) {
	type secretKeys struct {
		name string
		keys []string
	}
	var refs []secretKeys
	add := func(loc *v1alpha1.S3Location) {
		if ref := loc.CredentialsSecret; ref != nil {
			refs = append(refs, secretKeys{ref.Name, []string{resources.S3AccessKeyIDKey, resources.S3SecretAccessKeyKey}})
		}
		if ref := loc.EndpointCA; ref != nil {
			refs = append(refs, secretKeys{ref.Name, []string{ref.Key}})
		}
	}
	if c.Spec.Storage.S3 != nil {
		add(&c.Spec.Storage.S3.S3Location)
	}
	if backup && c.Spec.Backup != nil {
		add(&c.Spec.Backup.S3)
	}
	h := sha256.New()
	found := false
	for _, ref := range refs {
		sec := &corev1.Secret{}
		if err := r.APIReader.Get(ctx, client.ObjectKey{Namespace: c.Namespace, Name: ref.name}, sec); err != nil {
			if apierrors.IsNotFound(err) {
				continue
			}
			return "", fmt.Errorf("read Secret %s: %w", ref.name, err)
		}
		found = true
		for _, k := range ref.keys {
			fmt.Fprintf(h, "%s/%s=%d:", ref.name, k, len(sec.Data[k]))
			h.Write(sec.Data[k])
		}
	}
	if !found {
		return "", nil
	}
	return hex.EncodeToString(h.Sum(nil))[:16], nil
}

// checkUpgrade refuses an engine version (spec.version, else the image's tag) that cannot be rolled
// to from what runs now — the images of the StatefulSets' templates and of every pod, by their
// tags, the version each StatefulSet's template was applied with (its engine-version annotation)
// and the versions the processes last reported (status.version) — the last two name the version
// of an image given by digest — before any template changes (engine/version: the same major, the
// same or the next minor), so the cluster keeps running the old version and the condition says
// what to do.
func (r *StoreClusterReconciler) checkUpgrade(ctx context.Context, c *v1alpha1.StoreCluster) Result {
	to := resources.EngineVersionOf(c)
	var running []string // with repeats, and "" for an image by digest: Distinct drops both
	for _, v := range strings.Split(c.Status.Version, ",") {
		running = append(running, strings.TrimSpace(v))
	}
	for _, g := range []resources.Group{resources.GroupMaster, resources.GroupRegionServer} {
		sts := &appsv1.StatefulSet{}
		if err := r.APIReader.Get(ctx, client.ObjectKey{Namespace: c.Namespace, Name: resources.StatefulSetName(c, g)}, sts); err != nil {
			if apierrors.IsNotFound(err) {
				continue
			}
			return Errored(ReasonApplyFailed, fmt.Errorf("read StatefulSet %s: %w", resources.StatefulSetName(c, g), err))
		}
		running = append(running, resources.ImageTag(resources.EngineImage(&sts.Spec.Template.Spec)),
			sts.Annotations[resources.AnnotationEngineVersion])
	}
	var pods corev1.PodList
	if err := r.Client.List(ctx, &pods, client.InNamespace(c.Namespace), client.MatchingLabels(resources.ClusterLabels(c))); err != nil {
		return Errored(ReasonApplyFailed, fmt.Errorf("list pods: %w", err))
	}
	for i := range pods.Items {
		running = append(running, resources.ImageTag(resources.EngineImage(&pods.Items[i].Spec)))
	}
	froms := version.Distinct(running)
	for _, from := range froms {
		if err := version.CheckUpgrade(from, to); err != nil {
			what := "spec.image " + c.Spec.Image
			if c.Spec.Version != "" {
				what = "spec.version " + c.Spec.Version
			}
			return r.failedPolling(ReasonVersionSkew, "%s is refused, the cluster keeps running %s: %v", what, strings.Join(froms, ", "), err)
		}
	}
	return Done()
}

// staleSpec says whether c, as this reconcile read it (from the cache), is older than the API
// server's StoreCluster.
func (r *StoreClusterReconciler) staleSpec(ctx context.Context, c *v1alpha1.StoreCluster) (bool, error) {
	fresh := &v1alpha1.StoreCluster{}
	if err := r.APIReader.Get(ctx, client.ObjectKeyFromObject(c), fresh); err != nil {
		if apierrors.IsNotFound(err) {
			return true, nil // deleted meanwhile: the next reconcile sees it
		}
		return false, fmt.Errorf("read StoreCluster %s: %w", c.Name, err)
	}
	return fresh.Generation != c.Generation, nil
}

// applyStatefulSet applies a group's StatefulSet. When the pod template changes it records which
// fields changed (restart-history annotation, RestartRequired event); the pods themselves restart
// later, one at a time, through the region-assignment controller (updateStrategy OnDelete).
func (r *StoreClusterReconciler) applyStatefulSet(ctx context.Context, s *clusterState, g resources.Group, desired *appsv1.StatefulSet) Result {
	c := s.c
	existing := &appsv1.StatefulSet{}
	exists := true
	if err := r.APIReader.Get(ctx, client.ObjectKeyFromObject(desired), existing); err != nil {
		if !apierrors.IsNotFound(err) {
			return Errored(ReasonApplyFailed, fmt.Errorf("read StatefulSet %s: %w", desired.Name, err))
		}
		exists = false
	}
	if exists && g == resources.GroupRegionServer && existing.Spec.Replicas != nil && *existing.Spec.Replicas > *desired.Spec.Replicas && !hibernated(c) {
		// Scale-in: the region-assignment controller lowers the replicas one pod at a time, after
		// draining it. (Hibernation stops them all at once: their tables are disabled, they hold
		// no regions.)
		desired.Spec.Replicas = existing.Spec.Replicas
	}
	if exists && g == resources.GroupRegionServer && existing.Spec.Replicas != nil && *desired.Spec.Replicas > *existing.Spec.Replicas {
		// A scale-out — or a StoreCluster read from a cache that has not seen the scale-in whose
		// pod the region-assignment controller already removed (lowering the replicas): raising
		// them again then would bring back a drained pod and leave the scale-in waiting for it
		// forever. Only a spec as new as the API server's raises them.
		stale, err := r.staleSpec(ctx, c)
		if err != nil {
			return Errored(ReasonApplyFailed, err)
		}
		if stale {
			return conflict(c, r.Options.PollInterval) // the new spec's own reconcile follows too
		}
	}
	rendered, err := json.Marshal(desired.Spec.Template)
	if err != nil {
		return Errored(ReasonApplyFailed, fmt.Errorf("encode the pod template of %s: %w", desired.Name, err))
	}
	if desired.Annotations == nil {
		desired.Annotations = map[string]string{}
	}
	desired.Annotations[resources.AnnotationRenderedTemplate] = string(rendered)
	config := resources.ConfigFile(c, g)
	desired.Annotations[resources.AnnotationRenderedConfig] = config
	if v := resources.EngineVersionOf(c); v != "" {
		desired.Annotations[resources.AnnotationEngineVersion] = v
	}
	var history []templateChange
	var restartPaths []string // set when the pod template changes
	newHash := desired.Spec.Template.Annotations[resources.AnnotationTemplateHash]
	if exists {
		history = parseHistory(existing.Annotations[resources.AnnotationRestartHistory])
		if oldHash := existing.Spec.Template.Annotations[resources.AnnotationTemplateHash]; oldHash != newHash {
			_, restartKeys := resources.SplitOnline(g, resources.ConfigKeysChanged(existing.Annotations[resources.AnnotationRenderedConfig], config))
			paths := r.templateChanges(existing, desired, restartKeys)
			history = append(history, templateChange{From: oldHash, To: newHash, Changed: paths, At: metav1.NewTime(r.Options.Now())})
			if len(history) > maxHistory {
				history = history[len(history)-maxHistory:]
			}
			restartPaths = paths
		}
	}
	if len(history) > 0 {
		b, err := json.Marshal(history)
		if err != nil {
			return Errored(ReasonApplyFailed, err)
		}
		desired.Annotations[resources.AnnotationRestartHistory] = string(b)
	}
	rv := ""
	if exists {
		rv = existing.ResourceVersion
	}
	out, err := applyObject(ctx, r.Client, desired, rv)
	if err != nil {
		if apierrors.IsConflict(err) {
			return conflict(desired, r.Options.PollInterval)
		}
		return Errored(ReasonApplyFailed, err)
	}
	r.report(c, classify(rv, out.GetResourceVersion()), desired)
	if restartPaths != nil {
		r.event(c, corev1.EventTypeNormal, "RestartRequired", "%s pod template changed: %s; the pods restart one at a time (region servers are drained first)",
			groupTitle(g), strings.Join(restartPaths, ", "))
	}
	sts := &appsv1.StatefulSet{}
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(out.Object, sts); err == nil {
		s.sts[g] = sts
	}
	return Done()
}

// templateChanges lists the changed fields between the template last applied to a StatefulSet and
// the desired one.
func (r *StoreClusterReconciler) templateChanges(existing, desired *appsv1.StatefulSet, configKeys []string) []string {
	var paths []string
	var prev corev1.PodTemplateSpec
	if raw := existing.Annotations[resources.AnnotationRenderedTemplate]; raw != "" && json.Unmarshal([]byte(raw), &prev) == nil {
		paths = resources.DiffTemplates(&prev, &desired.Spec.Template)
	} else {
		// Made by something else than this operator: compare with the stored template.
		paths = resources.DiffTemplates(&existing.Spec.Template, &desired.Spec.Template)
	}
	cfgPath := "spec.template.metadata.annotations[" + resources.AnnotationConfigHash + "]"
	for i, p := range paths {
		if p == cfgPath && len(configKeys) > 0 {
			paths[i] = p + " (engine config: " + strings.Join(configKeys, ", ") + ")"
		}
	}
	if len(paths) == 0 {
		paths = []string{"spec.template"}
	}
	return paths
}

func groupTitle(g resources.Group) string {
	if g == resources.GroupMaster {
		return "master"
	}
	return "region server"
}

func (r *StoreClusterReconciler) taskMonitoring(ctx context.Context, s *clusterState) Result {
	c := s.c
	v := r.Options.OperatorVersion
	type want struct {
		gvk     schema.GroupVersionKind
		enabled bool
		build   func() *unstructured.Unstructured
	}
	var made, skipped []string
	for _, w := range []want{
		{resources.ServiceMonitorGVK, c.Spec.ServiceMonitorEnabled(), func() *unstructured.Unstructured { return resources.ServiceMonitor(c, v) }},
		{resources.PrometheusRuleGVK, c.Spec.PrometheusRuleEnabled(), func() *unstructured.Unstructured { return resources.PrometheusRule(c, v) }},
	} {
		served, err := r.served(w.gvk)
		if err != nil {
			return Errored(ReasonApplyFailed, err)
		}
		switch {
		case !served:
			if w.enabled {
				skipped = append(skipped, w.gvk.Kind)
			}
		case w.enabled:
			if res := r.applyAll(ctx, c, w.build()); res.Outcome != Complete {
				return res
			}
			made = append(made, w.gvk.Kind)
		default:
			old := &unstructured.Unstructured{}
			old.SetGroupVersionKind(w.gvk)
			old.SetNamespace(c.Namespace)
			old.SetName(resources.MonitoringName(c))
			if err := r.APIReader.Get(ctx, client.ObjectKeyFromObject(old), old); err == nil && metav1.IsControlledBy(old, c) {
				if err := r.Client.Delete(ctx, old); client.IgnoreNotFound(err) != nil {
					return Errored(ReasonApplyFailed, fmt.Errorf("delete %s %s: %w", w.gvk.Kind, old.GetName(), err))
				}
				r.event(c, corev1.EventTypeNormal, "Deleted", "deleted %s %s (disabled in spec.monitoring)", w.gvk.Kind, old.GetName())
			}
		}
	}
	var msg []string
	if len(made) > 0 {
		msg = append(msg, strings.Join(made, " and ")+" "+resources.MonitoringName(c))
	}
	if len(skipped) > 0 {
		msg = append(msg, "no "+strings.Join(skipped, " or ")+": prometheus-operator's CRDs are not installed")
	}
	if len(msg) == 0 {
		msg = append(msg, "disabled")
	}
	s.monitoring = strings.Join(msg, "; ")
	return Done()
}

// served says whether the cluster serves a kind, asking discovery (through the RESTMapper, which
// refreshes on a miss) at most every MonitoringRecheck while it is absent.
func (r *StoreClusterReconciler) served(gvk schema.GroupVersionKind) (bool, error) {
	r.monMu.Lock()
	if t, ok := r.monAbsent[gvk]; ok && r.Options.Now().Sub(t) < r.Options.MonitoringRecheck {
		r.monMu.Unlock()
		return false, nil
	}
	r.monMu.Unlock()
	_, err := r.Client.RESTMapper().RESTMapping(gvk.GroupKind(), gvk.Version)
	switch {
	case err == nil:
		return true, nil
	case meta.IsNoMatchError(err):
		r.monMu.Lock()
		if r.monAbsent == nil {
			r.monAbsent = map[schema.GroupVersionKind]time.Time{}
		}
		r.monAbsent[gvk] = r.Options.Now()
		r.monMu.Unlock()
		return false, nil
	}
	return false, fmt.Errorf("discover %s: %w", gvk.Kind, err)
}

// masterStatus asks the master for the cluster status.
func masterStatus(ctx context.Context, o Options, c *v1alpha1.StoreCluster) (*master.ClusterStatus, error) {
	mc, err := o.Masters(c)
	if err != nil {
		return nil, err
	}
	defer func() { _ = mc.Close() }()
	cctx, cancel := context.WithTimeout(ctx, o.MasterTimeout)
	defer cancel()
	return mc.ClusterStatus(cctx)
}
