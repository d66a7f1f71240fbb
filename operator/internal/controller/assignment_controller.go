package controller

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/cellstore/cellstore/engine/version"
	"github.com/cellstore/cellstore/operator/api/v1alpha1"
	"github.com/cellstore/cellstore/operator/internal/master"
	"github.com/cellstore/cellstore/operator/internal/resources"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/record"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"
)

// AssignmentFieldOwner is the field manager of the region-assignment controller's writes.
const AssignmentFieldOwner = "cellstore-region-assignment"

// LabelZone is the node label whose value the master gets as a region server's zone.
const LabelZone = corev1.LabelTopologyZone

// AssignmentReconciler is the region-assignment controller: it tells the master each region
// server's zone, applies quotas and the default region replication, and restarts and removes pods
// only after draining them through the master. Its progress lives in annotations of the
// StatefulSets (cellstore.io/rollout), so it resumes where it was after an operator restart.
type AssignmentReconciler struct {
	Client    client.Client
	APIReader client.Reader
	Recorder  record.EventRecorder
	Options   Options
}

// SetupWithManager registers the controller.
func (r *AssignmentReconciler) SetupWithManager(mgr ctrl.Manager) error {
	r.Options = r.Options.withDefaults()
	return ctrl.NewControllerManagedBy(mgr).
		Named("regionassignment").
		WithOptions(controllerOptions(r.Options, clusterWorkers)).
		For(&v1alpha1.StoreCluster{}).
		Owns(&appsv1.StatefulSet{}).
		Watches(&corev1.Pod{}, podToCluster()).
		Complete(r)
}

// assignState is one reconcile's view.
type assignState struct {
	c    *v1alpha1.StoreCluster
	now  time.Time
	sts  map[resources.Group]*appsv1.StatefulSet
	pods map[resources.Group][]*corev1.Pod
	mc   master.Client
	st   *master.ClusterStatus
	// specOK: the spec passed checkSpec, so its settings may be applied.
	specOK bool
	// busy: a rollout step is under way or pending; look again soon.
	busy bool
}

func (r *AssignmentReconciler) tasks() []Task[*assignState] {
	return []Task[*assignState]{
		{Name: "zones", Run: r.taskZones},
		{Name: "external-addresses", Run: r.taskExternalAddresses},
		{Name: "region-replication", Run: r.taskReplication},
		{Name: "quotas", Run: r.taskQuotas},
		{Name: "rollout", Run: r.taskRollout},
		{Name: "balance", Run: r.taskBalance},
	}
}

// Reconcile runs the tasks against the master.
func (r *AssignmentReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	logger := log.FromContext(ctx)
	c := &v1alpha1.StoreCluster{}
	if err := r.Client.Get(ctx, req.NamespacedName, c); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	waking := c.Status.Hibernation != nil && c.Status.Hibernation.State == v1alpha1.HibernationWaking
	if !c.DeletionTimestamp.IsZero() || c.Status.Hibernation != nil && !waking {
		// A hibernating cluster is stopped and started by the StoreCluster controller; rollouts,
		// scale-ins and balancing wait until it is awake.
		return ctrl.Result{RequeueAfter: r.Options.ResyncInterval}, nil
	}
	a := &assignState{c: c, now: r.Options.Now(), sts: map[resources.Group]*appsv1.StatefulSet{}, pods: map[resources.Group][]*corev1.Pod{}}
	for _, g := range []resources.Group{resources.GroupMaster, resources.GroupRegionServer} {
		sts := &appsv1.StatefulSet{}
		if err := r.APIReader.Get(ctx, client.ObjectKey{Namespace: c.Namespace, Name: resources.StatefulSetName(c, g)}, sts); err != nil {
			if apierrors.IsNotFound(err) {
				// The StoreCluster controller makes it (or refuses the spec).
				return ctrl.Result{RequeueAfter: r.Options.ResyncInterval}, nil
			}
			return ctrl.Result{}, err
		}
		a.sts[g] = sts
	}
	pods := &corev1.PodList{}
	if err := r.Client.List(ctx, pods, client.InNamespace(c.Namespace), client.MatchingLabels(resources.ClusterLabels(c))); err != nil {
		return ctrl.Result{}, err
	}
	for _, g := range []resources.Group{resources.GroupMaster, resources.GroupRegionServer} {
		a.pods[g] = groupPods(c, pods.Items, g)
	}
	mc, err := r.Options.Masters(c)
	if err != nil {
		logger.V(1).Info("no master client", "error", err.Error())
		if err := r.restartUnreadyMasters(ctx, a); err != nil {
			return ctrl.Result{}, err
		}
		return ctrl.Result{RequeueAfter: r.Options.PollInterval}, nil
	}
	defer func() { _ = mc.Close() }()
	a.mc = mc
	if a.st, err = r.status(ctx, a); err != nil {
		// Reported by the StoreCluster controller's status (Degraded/Available: MasterUnreachable).
		logger.V(1).Info("master status", "error", err.Error())
		// A master pod that is not Ready and runs an outdated template (say an image that cannot
		// be pulled, since fixed) is restarted all the same: it serves nothing, and the rollout
		// that would restart it waits for a master to answer.
		if err := r.restartUnreadyMasters(ctx, a); err != nil {
			return ctrl.Result{}, err
		}
		return ctrl.Result{RequeueAfter: r.Options.PollInterval}, nil
	}
	if waking {
		// Waking: masters stuck on a bad template are restarted above (the wake needs a master
		// to enable the tables); the rest waits until it is awake.
		return ctrl.Result{RequeueAfter: r.Options.ResyncInterval}, nil
	}
	_, prob := checkSpec(c)
	a.specOK = prob == nil

	rep := RunTasks(ctx, a, r.tasks())
	if ctx.Err() != nil {
		return ctrl.Result{}, nil
	}
	if rep.Result.Err != nil {
		return ctrl.Result{}, fmt.Errorf("task %s: %w", rep.Blocked, rep.Result.Err)
	}
	if !rep.Complete() || a.busy {
		return ctrl.Result{RequeueAfter: r.Options.PollInterval}, nil
	}
	return ctrl.Result{RequeueAfter: r.Options.ResyncInterval}, nil
}

func (r *AssignmentReconciler) call(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, r.Options.MasterTimeout)
}

func (r *AssignmentReconciler) status(ctx context.Context, a *assignState) (*master.ClusterStatus, error) {
	cctx, cancel := r.call(ctx)
	defer cancel()
	return a.mc.ClusterStatus(cctx)
}

func (r *AssignmentReconciler) event(c *v1alpha1.StoreCluster, typ, reason, format string, args ...any) {
	r.Recorder.Eventf(c, typ, reason, format, args...)
}

// --- zones, replication, quotas ---

func (r *AssignmentReconciler) taskZones(ctx context.Context, a *assignState) Result {
	zones := map[string]string{}
	for _, p := range a.pods[resources.GroupRegionServer] {
		if p.Spec.NodeName == "" || p.DeletionTimestamp != nil {
			continue
		}
		sv, ok := a.st.Server(resources.ServerName(a.c, p.Name))
		if !ok {
			continue
		}
		zone, seen := zones[p.Spec.NodeName]
		if !seen {
			node := &corev1.Node{}
			if err := r.APIReader.Get(ctx, client.ObjectKey{Name: p.Spec.NodeName}, node); err != nil {
				if apierrors.IsNotFound(err) {
					continue
				}
				if apierrors.IsForbidden(err) {
					// A namespaced install without rbac.clusterReads: no zones, replicas placed
					// without them (docs/operator.md).
					return Done()
				}
				return Errored("ReadNodeFailed", fmt.Errorf("read node %s for the zone of %s: %w", p.Spec.NodeName, p.Name, err))
			}
			zone = node.Labels[LabelZone]
			zones[p.Spec.NodeName] = zone
		}
		if zone == "" || zone == sv.Zone {
			continue
		}
		cctx, cancel := r.call(ctx)
		err := a.mc.SetServerZone(cctx, sv.Name, zone)
		cancel()
		if err != nil {
			return Errored(ReasonMasterUnreachable, fmt.Errorf("tell the master the zone of %s: %w", sv.Name, err))
		}
		r.event(a.c, corev1.EventTypeNormal, "ZoneSet", "told the master that region server %s (node %s) is in zone %s", p.Name, p.Spec.NodeName, zone)
	}
	return Done()
}

// taskExternalAddresses has the masters publish each server's external address
// (spec.externalAccess), or nothing without it.
func (r *AssignmentReconciler) taskExternalAddresses(ctx context.Context, a *assignState) Result {
	var want map[string]string
	var masters []string
	if a.c.Spec.ExternalAccess != nil {
		var svcs corev1.ServiceList
		sel := resources.ClusterLabels(a.c)
		sel[resources.LabelExternal] = "true"
		if err := r.Client.List(ctx, &svcs, client.InNamespace(a.c.Namespace), client.MatchingLabels(sel)); err != nil {
			return Errored(ReasonApplyFailed, fmt.Errorf("list the external Services: %w", err))
		}
		want, masters, _ = resources.ExternalAddresses(a.c, a.pods, svcs.Items)
	}
	cctx, cancel := r.call(ctx)
	have, err := a.mc.ExternalAddresses(cctx)
	cancel()
	if err != nil {
		if master.IsUnimplemented(err) {
			// An engine older than the operator: nothing was published, and nothing can be. This
			// must not hold up the tasks after, the rollout that upgrades the engine among them.
			if a.c.Spec.ExternalAccess != nil {
				r.event(a.c, corev1.EventTypeWarning, ReasonEngineTooOld, "spec.externalAccess needs an engine image that publishes external addresses (this one does not): upgrade spec.image")
			}
			return Done()
		}
		return Errored(ReasonMasterUnreachable, fmt.Errorf("read the published external addresses: %w", err))
	}
	if maps.Equal(have, want) {
		return Done()
	}
	cctx, cancel = r.call(ctx)
	err = a.mc.SetExternalAddresses(cctx, want)
	cancel()
	if err != nil {
		return Errored(ReasonMasterUnreachable, fmt.Errorf("publish the external addresses: %w", err))
	}
	if len(want) == 0 {
		r.event(a.c, corev1.EventTypeNormal, "ExternalAddressesPublished", "no external addresses published")
	} else {
		r.event(a.c, corev1.EventTypeNormal, "ExternalAddressesPublished", "published the external addresses of %d servers; clients outside start with the masters at %s",
			len(want), strings.Join(masters, ","))
	}
	return Done()
}

func (r *AssignmentReconciler) taskReplication(ctx context.Context, a *assignState) Result {
	want := a.c.Spec.RegionReplication()
	if !a.specOK || a.st.DefaultRegionReplication == want {
		return Done()
	}
	cctx, cancel := r.call(ctx)
	defer cancel()
	if err := a.mc.SetDefaultRegionReplication(cctx, want); err != nil {
		return Errored(ReasonMasterUnreachable, fmt.Errorf("set the default region replication to %d: %w", want, err))
	}
	r.event(a.c, corev1.EventTypeNormal, "RegionReplicationSet", "default region replication set to %d (was %d), without a restart", want, a.st.DefaultRegionReplication)
	return Done()
}

func parseManagedQuotas(c *v1alpha1.StoreCluster) map[master.QuotaKey]bool {
	out := map[master.QuotaKey]bool{}
	var keys []master.QuotaKey
	if s := c.Annotations[resources.AnnotationManagedQuotas]; s != "" && json.Unmarshal([]byte(s), &keys) == nil {
		for _, k := range keys {
			out[k] = true
		}
	}
	return out
}

func (r *AssignmentReconciler) recordManagedQuotas(ctx context.Context, c *v1alpha1.StoreCluster, keys map[master.QuotaKey]bool) error {
	list := make([]master.QuotaKey, 0, len(keys))
	for k := range keys {
		list = append(list, k)
	}
	sort.Slice(list, func(i, j int) bool { return list[i].String() < list[j].String() })
	if len(list) == 0 {
		if _, ok := c.Annotations[resources.AnnotationManagedQuotas]; !ok {
			return nil
		}
		return r.patchAnnotation(ctx, c, resources.AnnotationManagedQuotas, nil)
	}
	b, err := json.Marshal(list)
	if err != nil {
		return err
	}
	if c.Annotations[resources.AnnotationManagedQuotas] == string(b) {
		return nil
	}
	v := string(b)
	return r.patchAnnotation(ctx, c, resources.AnnotationManagedQuotas, &v)
}

// taskQuotas applies spec.quotas and removes the quotas the operator applied earlier that are no
// longer listed. The operator's own quotas are recorded on the StoreCluster before they are set,
// so an interrupted reconcile never leaves one it would not remove.
func (r *AssignmentReconciler) taskQuotas(ctx context.Context, a *assignState) Result {
	if !a.specOK {
		return Done()
	}
	desired, err := master.QuotasFromSpec(a.c.Spec.Quotas)
	if err != nil {
		return Done() // reported by the StoreCluster controller (validate)
	}
	cctx, cancel := r.call(ctx)
	existing, err := a.mc.ListQuotas(cctx)
	cancel()
	if err != nil {
		return Errored(ReasonMasterUnreachable, fmt.Errorf("list quotas: %w", err))
	}
	have := map[master.QuotaKey]master.Quota{}
	for _, q := range existing {
		have[q.Key()] = q
	}
	managed := parseManagedQuotas(a.c)
	want := map[master.QuotaKey]bool{}
	union := map[master.QuotaKey]bool{}
	for k := range managed {
		union[k] = true
	}
	for _, q := range desired {
		want[q.Key()] = true
		union[q.Key()] = true
	}
	if err := r.recordManagedQuotas(ctx, a.c, union); err != nil {
		return Errored("RecordQuotasFailed", fmt.Errorf("record the managed quotas on the StoreCluster: %w", err))
	}
	for _, q := range desired {
		if h, ok := have[q.Key()]; ok && h == q {
			continue
		}
		cctx, cancel := r.call(ctx)
		err := a.mc.SetQuota(cctx, q)
		cancel()
		if err != nil {
			return Errored(ReasonMasterUnreachable, fmt.Errorf("set quota %s: %w", q.Key(), err))
		}
		r.event(a.c, corev1.EventTypeNormal, "QuotaSet", "quota %s set to %d per %s", q.Key(), q.Limit, q.TimeUnit)
	}
	for k := range managed {
		if want[k] {
			continue
		}
		if _, ok := have[k]; ok {
			cctx, cancel := r.call(ctx)
			err := a.mc.RemoveQuota(cctx, k)
			cancel()
			if err != nil {
				return Errored(ReasonMasterUnreachable, fmt.Errorf("remove quota %s: %w", k, err))
			}
			r.event(a.c, corev1.EventTypeNormal, "QuotaRemoved", "quota %s removed (no longer in spec.quotas)", k)
		}
	}
	if err := r.recordManagedQuotas(ctx, a.c, want); err != nil {
		return Errored("RecordQuotasFailed", fmt.Errorf("record the managed quotas on the StoreCluster: %w", err))
	}
	return Done()
}

// --- object writes ---

// patchAnnotation sets (value non-nil) or removes an annotation with a merge patch.
func (r *AssignmentReconciler) patchAnnotation(ctx context.Context, obj client.Object, key string, value *string) error {
	var v any
	if value != nil {
		v = *value
	}
	b, err := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]any{key: v}}})
	if err != nil {
		return err
	}
	return r.Client.Patch(ctx, obj, client.RawPatch(types.MergePatchType, b), client.FieldOwner(AssignmentFieldOwner))
}

// setRollout records a group's rollout step (nil clears it).
func (r *AssignmentReconciler) setRollout(ctx context.Context, a *assignState, g resources.Group, st *rolloutState) error {
	sts := a.sts[g]
	if st == nil {
		if _, ok := sts.Annotations[resources.AnnotationRollout]; !ok {
			return nil
		}
		return r.patchAnnotation(ctx, sts, resources.AnnotationRollout, nil)
	}
	b, err := json.Marshal(st)
	if err != nil {
		return err
	}
	v := string(b)
	return r.patchAnnotation(ctx, sts, resources.AnnotationRollout, &v)
}

// deletePod deletes the pod with the UID (a replacement with the same name is left alone).
func (r *AssignmentReconciler) deletePod(ctx context.Context, c *v1alpha1.StoreCluster, name string, uid types.UID) error {
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: c.Namespace, Name: name}}
	opts := []client.DeleteOption{}
	if uid != "" {
		opts = append(opts, client.Preconditions{UID: &uid})
	}
	err := r.Client.Delete(ctx, p, opts...)
	if apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
		return nil
	}
	return err
}

func (r *AssignmentReconciler) drain(ctx context.Context, a *assignState, server string) error {
	cctx, cancel := r.call(ctx)
	defer cancel()
	if err := a.mc.Drain(cctx, server); err != nil {
		return fmt.Errorf("drain %s: %w", server, err)
	}
	return nil
}

func (r *AssignmentReconciler) undrainAndBalance(ctx context.Context, a *assignState, server string, undrain bool) error {
	if undrain {
		cctx, cancel := r.call(ctx)
		err := a.mc.Undrain(cctx, server)
		cancel()
		if err != nil {
			return fmt.Errorf("undrain %s: %w", server, err)
		}
	}
	cctx, cancel := r.call(ctx)
	defer cancel()
	if err := a.mc.Balance(cctx); err != nil {
		return fmt.Errorf("balance: %w", err)
	}
	return nil
}

// --- rollout ---

// taskRollout advances the rolling restart or scale-in: at most one pod of the whole cluster is
// drained, restarted or removed at a time. A region server step under way is finished first (a
// server is never left drained), then masters (standbys first, the active one last), then region
// servers (scale-in from the highest ordinal, then restarts from the highest ordinal). The masters
// go first also when a restarted region server does not serve while they wait for a restart (an
// upgrade made during a region server's restart: older masters refuse a newer server).
func (r *AssignmentReconciler) taskRollout(ctx context.Context, a *assignState) Result {
	for range 8 { // a finished step may let the next one start at once
		var res Result
		var again bool
		switch rs := parseRollout(a.sts[resources.GroupRegionServer]); {
		case rs != nil && r.serverWaitsForMasters(a, rs):
			// The restarted region server does not serve while masters wait to be restarted:
			// a new minor version's server is refused by older masters (masters first), so
			// waiting for it would wait for ever. The masters go now; the server's step goes
			// on (and undrains it) once it serves.
			if m := parseRollout(a.sts[resources.GroupMaster]); m != nil {
				res, again = r.advanceMaster(ctx, a, m)
			} else {
				res, _ = r.startMaster(ctx, a)
			}
		case rs != nil:
			res, again = r.advanceRegionServer(ctx, a, rs)
		case parseRollout(a.sts[resources.GroupMaster]) != nil:
			res, again = r.advanceMaster(ctx, a, parseRollout(a.sts[resources.GroupMaster]))
		default:
			var started bool
			if res, started = r.startMaster(ctx, a); !started {
				res = r.startRegionServer(ctx, a)
			}
		}
		if !again {
			return res
		}
	}
	a.busy = true
	return Done()
}

// serverWaitsForMasters says whether a region server's restart waits on a pod that came back and
// does not serve while the masters have a restart of their own under way or pending, and the
// masters are why: the active master's version refuses the server's (engine/version.CheckServer,
// by the pods' image tags), or — versions not known, an image by digest — it has not served for
// unreadyMasterGrace. A server merely starting up keeps the masters waiting (one pod at a time).
func (r *AssignmentReconciler) serverWaitsForMasters(a *assignState, st *rolloutState) bool {
	if st.Action != ActionRestart || st.Step != StepWaitingReady {
		return false
	}
	pod := findPod(a.pods[resources.GroupRegionServer], st.Pod)
	if pod == nil || pod.UID == st.UID || pod.DeletionTimestamp != nil || r.serving(a, pod) {
		return false
	}
	if parseRollout(a.sts[resources.GroupMaster]) == nil && len(outdatedMasters(a)) == 0 {
		return false
	}
	if active := findPod(a.pods[resources.GroupMaster], resources.PodOfServer(a.c, resources.GroupMaster, a.st.ActiveMaster)); active != nil {
		master := resources.ImageTag(resources.EngineImage(&active.Spec))
		server := resources.ImageTag(resources.EngineImage(&pod.Spec))
		_, masterKnown := version.Parse(master)
		_, serverKnown := version.Parse(server)
		if masterKnown && serverKnown {
			return version.CheckServer(master, server) != nil
		}
	}
	return a.now.Sub(pod.CreationTimestamp.Time) >= unreadyMasterGrace
}

// outdatedMasters are the master pods that do not run the StatefulSet's current template (none
// while its revision is not known), highest ordinal first.
func outdatedMasters(a *assignState) []*corev1.Pod {
	sts := a.sts[resources.GroupMaster]
	if !revisionKnown(sts) {
		return nil
	}
	return outdatedPods(a.pods[resources.GroupMaster], sts.Status.UpdateRevision, ptr.Deref(sts.Spec.Replicas, 1))
}

func outdatedPods(pods []*corev1.Pod, rev string, limit int32) []*corev1.Pod {
	var out []*corev1.Pod
	if rev == "" {
		return nil
	}
	for _, p := range pods {
		if p.DeletionTimestamp == nil && int32(podOrdinal(p.Name)) < limit && podRevision(p) != rev {
			out = append(out, p)
		}
	}
	// Highest ordinal first, as a StatefulSet's own rolling update.
	sort.Slice(out, func(i, j int) bool { return podOrdinal(out[i].Name) > podOrdinal(out[j].Name) })
	return out
}

func firstNotReady(pods []*corev1.Pod) *corev1.Pod {
	for _, p := range pods {
		if !podReady(p) {
			return p
		}
	}
	return nil
}

func (r *AssignmentReconciler) startMaster(ctx context.Context, a *assignState) (Result, bool) {
	c, sts := a.c, a.sts[resources.GroupMaster]
	if !revisionKnown(sts) {
		// The StatefulSet controller has not yet computed the revision of the latest template:
		// which pods are outdated is not known (and region servers wait too: masters go first).
		a.busy = true
		return Waiting(ReasonRestartPending, "waiting for the StatefulSet controller to observe %s", sts.Name), true
	}
	replicas := ptr.Deref(sts.Spec.Replicas, 1)
	outdated := outdatedMasters(a)
	if len(outdated) == 0 {
		return Done(), false
	}
	a.busy = true
	active := resources.PodOfServer(c, resources.GroupMaster, a.st.ActiveMaster)
	// A standby that is not Ready serves nothing: restart it first. Not the active master, which
	// answers (that is how it is known) while its readiness probe may fail a moment: it goes last,
	// once every master is Ready, as ever — unless it is the only master.
	var standbys []*corev1.Pod
	for _, p := range outdated {
		if p.Name != active || replicas == 1 {
			standbys = append(standbys, p)
		}
	}
	pick := firstNotReady(standbys)
	if pick == nil && replicas > 1 {
		// The active master not Ready for long while every standby is (it answers, but its
		// readiness keeps failing): restarted, or the rollout would wait for it for ever.
		for _, p := range outdated {
			if p.Name == active && !podReady(p) && a.now.Sub(notReadySince(p)) >= unreadyMasterGrace && firstNotReady(standbysOf(a.pods[resources.GroupMaster], active)) == nil {
				pick = p
			}
		}
	}
	if pick == nil {
		if p := firstNotReady(a.pods[resources.GroupMaster]); p != nil || int32(len(a.pods[resources.GroupMaster])) < replicas {
			return Waiting(ReasonWaitingForPods, "waiting for every master to be Ready before restarting the next"), true
		}
		// Standbys first, the active master last.
		sort.SliceStable(outdated, func(i, j int) bool { return outdated[i].Name != active && outdated[j].Name == active })
		pick = outdated[0]
	}
	role := "standby"
	if pick.Name == active {
		role = "active"
	}
	st := &rolloutState{
		Pod: pick.Name, UID: pick.UID, Action: ActionRestart, Step: StepWaitingReady, Since: a.now,
		Reason: restartReason(sts, pick.Annotations[resources.AnnotationTemplateHash]),
	}
	if err := r.setRollout(ctx, a, resources.GroupMaster, st); err != nil {
		return Errored("RecordRolloutFailed", err), true
	}
	if err := r.deletePod(ctx, c, pick.Name, pick.UID); err != nil {
		return Errored("DeletePodFailed", err), true
	}
	r.event(c, corev1.EventTypeNormal, "RollingRestart", "restarting %s master pod %s: %s", role, pick.Name, st.Reason)
	return Waiting(ReasonRollingRestart, "restarting master pod %s", pick.Name), true
}

// othersServe says whether a live region server other than server, not draining, could take
// regions.
func (r *AssignmentReconciler) othersServe(a *assignState, server string) bool {
	for _, sv := range a.st.Servers {
		if sv.Name != server && sv.State == master.ServerOnline && !sv.Draining {
			return true
		}
	}
	return false
}

// standbysOf is the master pods but the active one.
func standbysOf(pods []*corev1.Pod, active string) []*corev1.Pod {
	var out []*corev1.Pod
	for _, p := range pods {
		if p.Name != active {
			out = append(out, p)
		}
	}
	return out
}

// unreadyMasterGrace is how long a master pod must have been not Ready before restartUnreadyMasters
// restarts it: a master just elected is not Ready while it loads the catalog.
const unreadyMasterGrace = 2 * time.Minute

// restartUnreadyMasters deletes a master pod that has not been Ready for unreadyMasterGrace and
// runs an outdated pod template, while no master answers (the StatefulSet makes it again from the
// current one); one at a time.
func (r *AssignmentReconciler) restartUnreadyMasters(ctx context.Context, a *assignState) error {
	sts := a.sts[resources.GroupMaster]
	for _, p := range outdatedMasters(a) {
		if podReady(p) || a.now.Sub(notReadySince(p)) < unreadyMasterGrace {
			continue
		}
		if err := r.deletePod(ctx, a.c, p.Name, p.UID); err != nil {
			return err
		}
		r.event(a.c, corev1.EventTypeNormal, "RollingRestart", "restarting master pod %s, not Ready for %s, while no master answers: %s", p.Name,
			humanDuration(a.now.Sub(notReadySince(p))), restartReason(sts, p.Annotations[resources.AnnotationTemplateHash]))
		return nil
	}
	return nil
}

// notReadySince is when the pod last became not Ready (its creation when it never said).
func notReadySince(p *corev1.Pod) time.Time {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady && !c.LastTransitionTime.IsZero() {
			return c.LastTransitionTime.Time
		}
	}
	return p.CreationTimestamp.Time
}

func (r *AssignmentReconciler) advanceMaster(ctx context.Context, a *assignState, st *rolloutState) (Result, bool) {
	c, sts := a.c, a.sts[resources.GroupMaster]
	a.busy = true
	pod := findPod(a.pods[resources.GroupMaster], st.Pod)
	switch {
	case pod == nil && sts != nil && sts.Spec.Replicas != nil && int32(podOrdinal(st.Pod)) >= *sts.Spec.Replicas:
		// spec.master.replicas went down while it restarted: the StatefulSet keeps it no more.
		if err := r.setRollout(ctx, a, resources.GroupMaster, nil); err != nil {
			return Errored("RecordRolloutFailed", err), false
		}
		r.event(c, corev1.EventTypeNormal, "RestartCancelled", "master pod %s is not coming back: the masters are %d now", st.Pod, *sts.Spec.Replicas)
		return Done(), true
	case pod == nil:
		return Waiting(ReasonRollingRestart, "waiting for master pod %s to be recreated", st.Pod), false
	case pod.UID == st.UID:
		if pod.DeletionTimestamp == nil {
			if err := r.deletePod(ctx, c, pod.Name, pod.UID); err != nil {
				return Errored("DeletePodFailed", err), false
			}
		}
		return Waiting(ReasonRollingRestart, "waiting for master pod %s to stop", st.Pod), false
	case !podReady(pod):
		if pod.DeletionTimestamp == nil && revisionKnown(sts) && podRevision(pod) != sts.Status.UpdateRevision {
			// The template changed again while it started: restart it at once, it serves nothing.
			st.UID, st.Since = pod.UID, a.now
			if err := r.setRollout(ctx, a, resources.GroupMaster, st); err != nil {
				return Errored("RecordRolloutFailed", err), false
			}
			if err := r.deletePod(ctx, c, pod.Name, pod.UID); err != nil {
				return Errored("DeletePodFailed", err), false
			}
			return Waiting(ReasonRollingRestart, "restarting master pod %s again", st.Pod), false
		}
		return r.blockIfSlow(ctx, a, resources.GroupMaster, st, fmt.Sprintf(
			"master pod %s is not Ready %s after its restart: look at kubectl describe pod %s and its logs", st.Pod, humanDuration(a.now.Sub(st.Since)), st.Pod)), false
	}
	if err := r.setRollout(ctx, a, resources.GroupMaster, nil); err != nil {
		return Errored("RecordRolloutFailed", err), false
	}
	r.event(c, corev1.EventTypeNormal, "Restarted", "master pod %s is Ready again", st.Pod)
	return Done(), true
}

// blockIfSlow reports a step that takes longer than the drain timeout (once: Degraded via the
// StoreCluster's status and a Warning event), and keeps waiting.
func (r *AssignmentReconciler) blockIfSlow(ctx context.Context, a *assignState, g resources.Group, st *rolloutState, msg string) Result {
	if a.now.Sub(st.Since) < a.c.Spec.DrainTimeoutDuration() {
		return Waiting(ReasonRollingRestart, "%s", msg)
	}
	if st.BlockedReason != ReasonPodNotReady {
		st.BlockedReason, st.Blocked = ReasonPodNotReady, msg
		if err := r.setRollout(ctx, a, g, st); err != nil {
			return Errored("RecordRolloutFailed", err)
		}
		r.event(a.c, corev1.EventTypeWarning, ReasonPodNotReady, "%s", msg)
	}
	return Waiting(ReasonPodNotReady, "%s", msg)
}

func (r *AssignmentReconciler) serving(a *assignState, pod *corev1.Pod) bool {
	sv, ok := a.st.Server(resources.ServerName(a.c, pod.Name))
	return podReady(pod) && ok && sv.State == master.ServerOnline
}

func (r *AssignmentReconciler) startRegionServer(ctx context.Context, a *assignState) Result {
	c, sts := a.c, a.sts[resources.GroupRegionServer]
	pods := a.pods[resources.GroupRegionServer]
	want, cur := c.Spec.RegionServerReplicas(), ptr.Deref(sts.Spec.Replicas, 0)
	if want < cur {
		a.busy = true
		name := resources.PodName(c, resources.GroupRegionServer, int(cur-1))
		st := &rolloutState{Pod: name, Action: ActionScaleIn, Step: StepDraining, Since: a.now,
			Reason: fmt.Sprintf("scale in from %d to %d region servers (highest ordinal first)", cur, want)}
		if p := findPod(pods, name); p != nil {
			st.UID = p.UID
		}
		if err := r.setRollout(ctx, a, resources.GroupRegionServer, st); err != nil {
			return Errored("RecordRolloutFailed", err)
		}
		server := resources.ServerName(c, name)
		if _, ok := a.st.Server(server); ok {
			if err := r.drain(ctx, a, server); err != nil {
				return Errored(ReasonMasterUnreachable, err)
			}
		}
		r.event(c, corev1.EventTypeNormal, "ScalingIn", "draining region server pod %s before removing it: %s", name, st.Reason)
		return Waiting(ReasonScalingIn, "draining region server pod %s", name)
	}
	if !revisionKnown(sts) {
		a.busy = true
		return Waiting(ReasonRestartPending, "waiting for the StatefulSet controller to observe %s", sts.Name)
	}
	outdated := outdatedPods(pods, sts.Status.UpdateRevision, cur)
	if len(outdated) == 0 {
		return Done()
	}
	a.busy = true
	pick := firstNotReady(outdated)
	if pick == nil {
		for i := range int(cur) {
			name := resources.PodName(c, resources.GroupRegionServer, i)
			if p := findPod(pods, name); p == nil || !r.serving(a, p) {
				return Waiting(ReasonWaitingForPods, "waiting for region server pod %s to be Ready and serving before restarting the next", name)
			}
		}
		pick = outdated[0]
	}
	server := resources.ServerName(c, pick.Name)
	st := &rolloutState{
		Pod: pick.Name, UID: pick.UID, Action: ActionRestart, Step: StepDraining, Since: a.now,
		Reason: restartReason(sts, pick.Annotations[resources.AnnotationTemplateHash]),
	}
	if err := r.setRollout(ctx, a, resources.GroupRegionServer, st); err != nil {
		return Errored("RecordRolloutFailed", err)
	}
	if _, ok := a.st.Server(server); ok {
		if err := r.drain(ctx, a, server); err != nil {
			return Errored(ReasonMasterUnreachable, err)
		}
	}
	r.event(c, corev1.EventTypeNormal, "RollingRestart", "draining region server pod %s before restarting it (%d of %d to restart): %s",
		pick.Name, len(outdated), cur, st.Reason)
	return Waiting(ReasonRollingRestart, "draining region server pod %s", pick.Name)
}

func (r *AssignmentReconciler) advanceRegionServer(ctx context.Context, a *assignState, st *rolloutState) (Result, bool) {
	c, sts := a.c, a.sts[resources.GroupRegionServer]
	a.busy = true
	pod := findPod(a.pods[resources.GroupRegionServer], st.Pod)
	server := resources.ServerName(c, st.Pod)
	sv, registered := a.st.Server(server)
	clear := func(reason, format string, args ...any) (Result, bool) {
		if err := r.setRollout(ctx, a, resources.GroupRegionServer, nil); err != nil {
			return Errored("RecordRolloutFailed", err), false
		}
		r.event(c, corev1.EventTypeNormal, reason, format, args...)
		return Done(), true
	}

	switch st.Step {
	case StepDraining:
		if st.Action == ActionScaleIn && int(c.Spec.RegionServerReplicas()) > podOrdinal(st.Pod) {
			if err := r.undrainAndBalance(ctx, a, server, true); err != nil {
				return Errored(ReasonMasterUnreachable, err), false
			}
			return clear("ScaleInCancelled", "region server pod %s stays: spec.regionServers.replicas is %d again; undrained it", st.Pod, c.Spec.RegionServerReplicas())
		}
		if st.Action == ActionRestart {
			if pod != nil && pod.UID == st.UID && revisionKnown(sts) && podRevision(pod) == sts.Status.UpdateRevision {
				if err := r.undrainAndBalance(ctx, a, server, true); err != nil {
					return Errored(ReasonMasterUnreachable, err), false
				}
				return clear("RestartCancelled", "region server pod %s already runs the current pod template (the change was undone); undrained it", st.Pod)
			}
			if pod == nil || pod.UID != st.UID {
				// Someone else deleted it: nothing is left to drain; wait for its successor.
				st.Step, st.Since, st.Blocked, st.BlockedReason = StepWaitingReady, a.now, "", ""
				if err := r.setRollout(ctx, a, resources.GroupRegionServer, st); err != nil {
					return Errored("RecordRolloutFailed", err), false
				}
				return Waiting(ReasonRollingRestart, "region server pod %s was deleted by something else; waiting for it to come back", st.Pod), false
			}
		}
		if registered && !sv.Draining {
			// The mark was lost (a master fail-over): drain again.
			if err := r.drain(ctx, a, server); err != nil {
				return Errored(ReasonMasterUnreachable, err), false
			}
		}
		regions := int32(0)
		if registered {
			regions = sv.Regions
		}
		if regions == 0 {
			return r.drained(ctx, a, st, "it holds no regions")
		}
		if st.Action == ActionRestart && !r.othersServe(a, server) {
			// No other live, undrained server could take its regions (a cluster of one region
			// server): they stay until it stops, flushed, as its own stop does (cellstore prestop).
			return r.drained(ctx, a, st, "no other region server can take its regions")
		}
		forced := c.Annotations[v1alpha1.AnnotationForceRestart] == st.Pod
		if forced {
			if err := r.patchAnnotation(ctx, c, v1alpha1.AnnotationForceRestart, nil); err != nil {
				return Errored("PatchFailed", err), false
			}
			if st.Action == ActionRestart {
				r.event(c, corev1.EventTypeWarning, "ForcedRestart", "restarting region server pod %s although it still holds %d regions (annotation %s); the master reassigns them",
					st.Pod, regions, v1alpha1.AnnotationForceRestart)
				return r.drained(ctx, a, st, "forced")
			}
			r.event(c, corev1.EventTypeWarning, "ForceIgnored", "annotation %s does not apply to scale-in: removing region server pod %s while it holds %d regions would strand them",
				v1alpha1.AnnotationForceRestart, st.Pod, regions)
		}
		timeout := c.Spec.DrainTimeoutDuration()
		elapsed := a.now.Sub(st.Since)
		if elapsed < timeout {
			return Waiting(ReasonRollingRestart, "draining region server pod %s: %d regions left", st.Pod, regions), false
		}
		if st.Action == ActionRestart && c.Spec.DrainTimeoutAction() == v1alpha1.DrainTimeoutProceed {
			r.event(c, corev1.EventTypeWarning, ReasonDrainTimedOut, "region server pod %s still holds %d regions after the drain timeout %s; restarting it anyway (rollout.onDrainTimeout: Proceed): the master reassigns them",
				st.Pod, regions, humanDuration(timeout))
			return r.drained(ctx, a, st, "drain timed out")
		}
		var msg string
		if st.Action == ActionScaleIn {
			msg = fmt.Sprintf("region server %s still holds %d regions after the drain timeout %s; scale-in waits (it never strands a region): "+
				"check the master's log for regions that cannot move (is defaultRegionReplication higher than the servers left?)", st.Pod, regions, humanDuration(timeout))
		} else {
			msg = fmt.Sprintf("region server %s still holds %d regions after the drain timeout %s; waiting (rollout.onDrainTimeout: Wait): "+
				"check the master's log for regions that cannot move, or restart it anyway with kubectl annotate storecluster %s %s=%s",
				st.Pod, regions, humanDuration(timeout), c.Name, v1alpha1.AnnotationForceRestart, st.Pod)
		}
		if st.BlockedReason != ReasonDrainTimedOut {
			st.BlockedReason, st.Blocked = ReasonDrainTimedOut, msg
			if err := r.setRollout(ctx, a, resources.GroupRegionServer, st); err != nil {
				return Errored("RecordRolloutFailed", err), false
			}
			r.event(c, corev1.EventTypeWarning, ReasonDrainTimedOut, "%s", msg)
		}
		return Waiting(ReasonDrainTimedOut, "%s", msg), false

	case StepWaitingReady:
		switch {
		case pod == nil:
			return Waiting(ReasonRollingRestart, "waiting for region server pod %s to be recreated", st.Pod), false
		case pod.UID == st.UID:
			if pod.DeletionTimestamp == nil {
				if err := r.deletePod(ctx, c, pod.Name, pod.UID); err != nil {
					return Errored("DeletePodFailed", err), false
				}
			}
			return Waiting(ReasonRollingRestart, "waiting for region server pod %s to stop", st.Pod), false
		case pod.DeletionTimestamp != nil:
			return Waiting(ReasonRollingRestart, "waiting for region server pod %s to stop", st.Pod), false
		case !r.serving(a, pod):
			if !podReady(pod) && revisionKnown(sts) && podRevision(pod) != sts.Status.UpdateRevision && (!registered || sv.Regions == 0) {
				// The template changed again while it started: restart it at once, it serves nothing.
				st.UID, st.Since, st.Blocked, st.BlockedReason = pod.UID, a.now, "", ""
				if err := r.setRollout(ctx, a, resources.GroupRegionServer, st); err != nil {
					return Errored("RecordRolloutFailed", err), false
				}
				if err := r.deletePod(ctx, c, pod.Name, pod.UID); err != nil {
					return Errored("DeletePodFailed", err), false
				}
				r.event(c, corev1.EventTypeNormal, "Restarting", "restarting region server pod %s again: its pod template changed while it started", st.Pod)
				return Waiting(ReasonRollingRestart, "restarting region server pod %s again", st.Pod), false
			}
			return r.blockIfSlow(ctx, a, resources.GroupRegionServer, st, fmt.Sprintf(
				"region server pod %s is not Ready and serving %s after its restart: look at kubectl describe pod %s and its logs",
				st.Pod, humanDuration(a.now.Sub(st.Since)), st.Pod)), false
		}
		if err := r.undrainAndBalance(ctx, a, server, sv.Draining); err != nil {
			return Errored(ReasonMasterUnreachable, err), false
		}
		return clear("Restarted", "region server pod %s is Ready and serving again; undrained it and asked the master to balance", st.Pod)

	case StepRemoving:
		ord := int32(podOrdinal(st.Pod))
		if pod != nil {
			switch {
			case c.Spec.RegionServerReplicas() > ord && ptr.Deref(sts.Spec.Replicas, 0) > ord && pod.DeletionTimestamp == nil:
				// Raised again while it was removed: the StatefulSet keeps (or made anew) the
				// pod, which would stay drained, and the rollout wait for its removal for ever.
				if err := r.undrainAndBalance(ctx, a, server, true); err != nil {
					return Errored(ReasonMasterUnreachable, err), false
				}
				return clear("ScaleInCancelled", "region server pod %s stays: spec.regionServers.replicas is %d again; undrained it", st.Pod, c.Spec.RegionServerReplicas())
			case c.Spec.RegionServerReplicas() <= ord && ptr.Deref(sts.Spec.Replicas, 0) > ord:
				// The step was recorded but the StatefulSet not lowered (a conflict, an operator
				// that stopped in between): lower it now.
				if err := r.lowerReplicas(ctx, sts, ord); err != nil {
					return Errored("ScaleFailed", err), false
				}
			}
			return Waiting(ReasonScalingIn, "waiting for region server pod %s to be removed", st.Pod), false
		}
		if err := r.undrainAndBalance(ctx, a, server, true); err != nil {
			return Errored(ReasonMasterUnreachable, err), false
		}
		// That was the balance for this replica count.
		n := strconv.Itoa(int(ptr.Deref(sts.Spec.Replicas, 0)))
		if err := r.patchAnnotation(ctx, sts, resources.AnnotationBalancedReplicas, &n); err != nil {
			return Errored("PatchFailed", err), false
		}
		return clear("ScaledIn", "removed region server pod %s after draining it", st.Pod)
	}
	// An unknown step (written by another version): start over.
	return clear("RolloutReset", "forgot an unknown rollout step %q of pod %s", st.Step, st.Pod)
}

// lowerReplicas lowers the region servers' StatefulSet to n replicas (if it has more).
func (r *AssignmentReconciler) lowerReplicas(ctx context.Context, sts *appsv1.StatefulSet, n int32) error {
	if ptr.Deref(sts.Spec.Replicas, 0) <= n {
		return nil
	}
	patch := client.MergeFromWithOptions(sts.DeepCopy(), client.MergeFromWithOptimisticLock{})
	sts.Spec.Replicas = ptr.To(n)
	if err := r.Client.Patch(ctx, sts, patch, client.FieldOwner(AssignmentFieldOwner)); err != nil {
		return fmt.Errorf("lower StatefulSet %s to %d replicas: %w", sts.Name, n, err)
	}
	return nil
}

// drained moves a drained (or forced) region server on: a restart deletes the pod, a scale-in lowers
// the StatefulSet's replicas.
func (r *AssignmentReconciler) drained(ctx context.Context, a *assignState, st *rolloutState, why string) (Result, bool) {
	c, sts := a.c, a.sts[resources.GroupRegionServer]
	st.Since, st.Blocked, st.BlockedReason = a.now, "", ""
	if st.Action == ActionScaleIn {
		st.Step = StepRemoving
		if err := r.setRollout(ctx, a, resources.GroupRegionServer, st); err != nil {
			return Errored("RecordRolloutFailed", err), false
		}
		ord := int32(podOrdinal(st.Pod))
		if err := r.lowerReplicas(ctx, sts, ord); err != nil {
			return Errored("ScaleFailed", err), false
		}
		r.event(c, corev1.EventTypeNormal, "ScalingIn", "region server pod %s is drained (%s); StatefulSet %s lowered to %d replicas", st.Pod, why, sts.Name, ord)
		return Waiting(ReasonScalingIn, "removing region server pod %s", st.Pod), false
	}
	st.Step = StepWaitingReady
	if err := r.setRollout(ctx, a, resources.GroupRegionServer, st); err != nil {
		return Errored("RecordRolloutFailed", err), false
	}
	if err := r.deletePod(ctx, c, st.Pod, st.UID); err != nil {
		return Errored("DeletePodFailed", err), false
	}
	r.event(c, corev1.EventTypeNormal, "Restarting", "region server pod %s is drained (%s); deleted it so it restarts: %s", st.Pod, why, st.Reason)
	return Waiting(ReasonRollingRestart, "restarting region server pod %s", st.Pod), false
}

// taskBalance asks for a balance once all region servers serve after a scale-out (and after the
// first start).
func (r *AssignmentReconciler) taskBalance(ctx context.Context, a *assignState) Result {
	c, sts := a.c, a.sts[resources.GroupRegionServer]
	want := c.Spec.RegionServerReplicas()
	if a.busy || parseRollout(sts) != nil || ptr.Deref(sts.Spec.Replicas, 0) != want {
		return Done()
	}
	if sts.Annotations[resources.AnnotationBalancedReplicas] == strconv.Itoa(int(want)) {
		return Done()
	}
	for i := range int(want) {
		p := findPod(a.pods[resources.GroupRegionServer], resources.PodName(c, resources.GroupRegionServer, i))
		if p == nil || !r.serving(a, p) {
			a.busy = true
			return Done()
		}
	}
	if err := r.undrainAndBalance(ctx, a, "", false); err != nil {
		return Errored(ReasonMasterUnreachable, err)
	}
	v := strconv.Itoa(int(want))
	if err := r.patchAnnotation(ctx, sts, resources.AnnotationBalancedReplicas, &v); err != nil {
		return Errored("PatchFailed", err)
	}
	r.event(c, corev1.EventTypeNormal, "Balanced", "%d region servers serving; asked the master to balance the regions", want)
	return Done()
}
