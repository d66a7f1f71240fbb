package controller

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/cellstore/cellstore/operator/api/v1alpha1"
	"github.com/cellstore/cellstore/operator/internal/master"
	"github.com/cellstore/cellstore/operator/internal/resources"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// observation is what the status is made of: objects and the master's view, as they are.
type observation struct {
	sts       map[resources.Group]*appsv1.StatefulSet
	pods      map[resources.Group][]*corev1.Pod
	master    *master.ClusterStatus
	masterErr error
}

func (r *StoreClusterReconciler) observe(ctx context.Context, s *clusterState) (*observation, error) {
	c := s.c
	o := &observation{sts: map[resources.Group]*appsv1.StatefulSet{}, pods: map[resources.Group][]*corev1.Pod{}}
	for _, g := range []resources.Group{resources.GroupMaster, resources.GroupRegionServer} {
		if sts, ok := s.sts[g]; ok {
			o.sts[g] = sts
			continue
		}
		sts := &appsv1.StatefulSet{}
		switch err := r.Client.Get(ctx, client.ObjectKey{Namespace: c.Namespace, Name: resources.StatefulSetName(c, g)}, sts); {
		case err == nil:
			o.sts[g] = sts
		case !apierrors.IsNotFound(err):
			return nil, err
		}
	}
	pods := &corev1.PodList{}
	if err := r.Client.List(ctx, pods, client.InNamespace(c.Namespace), client.MatchingLabels(resources.ClusterLabels(c))); err != nil {
		return nil, err
	}
	for _, g := range []resources.Group{resources.GroupMaster, resources.GroupRegionServer} {
		o.pods[g] = groupPods(c, pods.Items, g)
	}
	if len(o.pods[resources.GroupMaster]) > 0 {
		o.master, o.masterErr = masterStatus(ctx, r.Options, c)
	} else {
		o.masterErr = fmt.Errorf("no master pod exists yet")
	}
	return o, nil
}

// ReasonPodFailing: a pod's container cannot start (its image cannot be pulled, it keeps
// crashing, its configuration is refused): waiting does not help.
const ReasonPodFailing = "PodFailing"

// failingContainer are the reasons of a waiting container that waiting will not end (a single
// ErrImagePull may be a registry's passing refusal: ImagePullBackOff follows a repeated one).
var failingContainer = []string{"ImagePullBackOff", "InvalidImageName", "CrashLoopBackOff", "CreateContainerConfigError", "CreateContainerError"}

// crashLoop: a container restarted at least this many times, the last time within crashRecent, is
// crash-looping also while it runs between two crashes (its state says CrashLoopBackOff only while
// it waits).
const (
	crashLoop   = 3
	crashRecent = 10 * time.Minute
)

// failingPod describes the first pod (masters first) whose container cannot start or keeps
// crashing, "" when none.
func failingPod(pods map[resources.Group][]*corev1.Pod, now time.Time) string {
	for _, g := range []resources.Group{resources.GroupMaster, resources.GroupRegionServer} {
		for _, p := range pods[g] {
			if p.DeletionTimestamp != nil {
				continue
			}
			for _, cs := range append(slices.Clone(p.Status.InitContainerStatuses), p.Status.ContainerStatuses...) {
				var msg string
				if w := cs.State.Waiting; w != nil && slices.Contains(failingContainer, w.Reason) {
					msg = fmt.Sprintf("pod %s: container %s is waiting: %s", p.Name, cs.Name, w.Reason)
					if w.Message != "" {
						msg += ": " + w.Message
					}
				} else if t := cs.LastTerminationState.Terminated; t != nil && cs.RestartCount >= crashLoop && now.Sub(t.FinishedAt.Time) < crashRecent {
					msg = fmt.Sprintf("pod %s: container %s restarted %d times, last at %s (%s, exit code %d)", p.Name, cs.Name, cs.RestartCount,
						t.FinishedAt.UTC().Format(time.RFC3339), t.Reason, t.ExitCode)
				}
				if msg != "" {
					return msg + " (fix spec.image or spec.version, or what the pod's events and logs say; kubectl describe pod " + p.Name + ")"
				}
			}
		}
	}
	return ""
}

func countReady(pods []*corev1.Pod) (n int32) {
	for _, p := range pods {
		if podReady(p) {
			n++
		}
	}
	return n
}

func countUpdated(pods []*corev1.Pod, sts *appsv1.StatefulSet) (n int32) {
	if !revisionKnown(sts) {
		return 0
	}
	for _, p := range pods {
		if p.DeletionTimestamp == nil && podRevision(p) == sts.Status.UpdateRevision {
			n++
		}
	}
	return n
}

func countLive(pods []*corev1.Pod) (n int32) {
	for _, p := range pods {
		if p.DeletionTimestamp == nil {
			n++
		}
	}
	return n
}

// updateStatus records what is observed and the conditions the task report and the observations
// imply; it returns when to look again.
func (r *StoreClusterReconciler) updateStatus(ctx context.Context, s *clusterState, rep Report) (time.Duration, error) {
	c := s.c
	o, err := r.observe(ctx, s)
	if err != nil {
		return 0, err
	}
	st := c.Status.DeepCopy()
	st.ObservedGeneration = c.Generation
	if rep.Complete() {
		st.Monitoring = s.monitoring
	}

	mp, rp := o.pods[resources.GroupMaster], o.pods[resources.GroupRegionServer]
	st.Masters = v1alpha1.MastersStatus{
		Replicas: countLive(mp), Ready: countReady(mp), Updated: countUpdated(mp, o.sts[resources.GroupMaster]),
	}
	st.RegionServers = v1alpha1.RegionServersStatus{
		Replicas: countLive(rp), Ready: countReady(rp), Updated: countUpdated(rp, o.sts[resources.GroupRegionServer]),
		Selector: labels.SelectorFromSet(resources.SelectorLabels(c, resources.GroupRegionServer)).String(),
	}
	st.Regions = v1alpha1.RegionsStatus{}
	if o.master != nil {
		st.Masters.Active = resources.PodOfServer(c, resources.GroupMaster, o.master.ActiveMaster)
		st.Regions.Total, st.Regions.InTransition = o.master.RegionsTotal, o.master.RegionsInTransition
		if len(o.master.Versions) > 0 {
			st.Version = strings.Join(o.master.Versions, ", ")
		}
		for _, sv := range o.master.Servers {
			pod := resources.PodOfServer(c, resources.GroupRegionServer, sv.Name)
			if sv.Draining {
				st.RegionServers.Draining++
			}
			st.Regions.PerServer = append(st.Regions.PerServer, v1alpha1.ServerRegions{
				Server: sv.Name, Pod: pod, State: string(sv.State), Regions: sv.Regions, Draining: sv.Draining, Zone: sv.Zone,
			})
		}
	} else {
		// Unknown, not zero: keep the per-server list out rather than report stale numbers.
		st.Masters.Active = ""
	}

	st.ExternalAccess = nil
	if c.Spec.ExternalAccess != nil {
		var svcs corev1.ServiceList
		sel := resources.ClusterLabels(c)
		sel[resources.LabelExternal] = "true"
		if err := r.Client.List(ctx, &svcs, client.InNamespace(c.Namespace), client.MatchingLabels(sel)); err != nil {
			return 0, err
		}
		addrs, masters, pending := resources.ExternalAddresses(c, o.pods, svcs.Items)
		st.ExternalAccess = &v1alpha1.ExternalAccessStatus{Masters: masters, Published: int32(len(addrs)), Pending: pending}
	}

	// The rollout under way, as the region-assignment controller recorded it.
	st.Rollout = nil
	var blocked *rolloutState
	for _, g := range []resources.Group{resources.GroupRegionServer, resources.GroupMaster} {
		if rs := parseRollout(o.sts[g]); rs != nil {
			since := metav1.NewTime(rs.Since.Truncate(time.Second))
			st.Rollout = &v1alpha1.RolloutStatus{Group: string(g), Pod: rs.Pod, Action: rs.Action, Step: rs.Step, Reason: rs.Reason, Since: &since, Blocked: rs.Blocked}
			if rs.Blocked != "" {
				blocked = rs
			}
			break
		}
	}

	next := r.Options.ResyncInterval
	now := metav1.NewTime(r.Options.Now().Truncate(time.Second))
	set := func(typ string, status metav1.ConditionStatus, reason, msg string) {
		meta.SetStatusCondition(&st.Conditions, metav1.Condition{Type: typ, Status: status, Reason: reason, Message: msg, ObservedGeneration: c.Generation, LastTransitionTime: now})
	}

	// Degraded: a person is needed.
	failing := failingPod(o.pods, now.Time)
	wantM, wantR := c.Spec.MasterReplicas(), c.Spec.RegionServerReplicas()
	switch {
	case rep.Result.Outcome == Fail:
		set(v1alpha1.ConditionDegraded, metav1.ConditionTrue, rep.Result.Reason, fmt.Sprintf("task %s: %s", rep.Blocked, rep.Result.Message))
		if rep.Result.RequeueAfter > 0 {
			next = rep.Result.RequeueAfter
		}
	case blocked != nil:
		set(v1alpha1.ConditionDegraded, metav1.ConditionTrue, blocked.BlockedReason, fmt.Sprintf("task rollout (region-assignment): %s", blocked.Blocked))
		next = r.Options.PollInterval
	case o.masterErr != nil && st.Masters.Ready > 0:
		set(v1alpha1.ConditionDegraded, metav1.ConditionTrue, ReasonMasterUnreachable, fmt.Sprintf("task status: the master does not answer: %v", o.masterErr))
		next = r.Options.PollInterval
	case failing != "":
		set(v1alpha1.ConditionDegraded, metav1.ConditionTrue, ReasonPodFailing, "task status: "+failing)
		next = r.Options.PollInterval
	case s.storageWarning != nil:
		set(v1alpha1.ConditionDegraded, metav1.ConditionTrue, s.storageWarning.reason, "task storage: "+s.storageWarning.message)
		next = r.Options.PollInterval
	default:
		set(v1alpha1.ConditionDegraded, metav1.ConditionFalse, ReasonAsExpected, "nothing needs attention")
	}

	// StorageReady: what the storage task found.
	switch {
	case !s.storage.checked:
		set(v1alpha1.ConditionStorageReady, metav1.ConditionUnknown, ReasonNotChecked, fmt.Sprintf("not checked: task %s stopped the reconcile first", rep.Blocked))
	case s.storage.ready && s.storageWarning != nil:
		set(v1alpha1.ConditionStorageReady, metav1.ConditionTrue, s.storageWarning.reason, s.storageWarning.message)
	case s.storage.ready:
		set(v1alpha1.ConditionStorageReady, metav1.ConditionTrue, s.storage.reason, storageReadyMessage(c))
	default:
		set(v1alpha1.ConditionStorageReady, metav1.ConditionFalse, s.storage.reason, s.storage.message)
	}

	// Progressing: the cluster is on its way somewhere.
	switch {
	case rep.Result.Outcome == Wait:
		set(v1alpha1.ConditionProgressing, metav1.ConditionTrue, rep.Result.Reason, fmt.Sprintf("task %s: %s", rep.Blocked, rep.Result.Message))
		next = min(next, r.Options.PollInterval)
	case st.Rollout != nil:
		reason := ReasonRollingRestart
		if st.Rollout.Action == ActionScaleIn {
			reason = ReasonScalingIn
		}
		set(v1alpha1.ConditionProgressing, metav1.ConditionTrue, reason,
			fmt.Sprintf("task rollout (region-assignment): %s pod %s, step %s: %s", st.Rollout.Action, st.Rollout.Pod, st.Rollout.Step, st.Rollout.Reason))
		next = min(next, r.Options.PollInterval)
	case st.Masters.Replicas != wantM || st.RegionServers.Replicas != wantR || st.Masters.Ready < wantM || st.RegionServers.Ready < wantR:
		set(v1alpha1.ConditionProgressing, metav1.ConditionTrue, ReasonWaitingForPods,
			fmt.Sprintf("task status: %d/%d masters and %d/%d region servers Ready", st.Masters.Ready, wantM, st.RegionServers.Ready, wantR))
		next = min(next, r.Options.PollInterval)
	case st.Masters.Updated < st.Masters.Replicas || st.RegionServers.Updated < st.RegionServers.Replicas:
		set(v1alpha1.ConditionProgressing, metav1.ConditionTrue, ReasonRestartPending,
			fmt.Sprintf("task status: %d/%d masters and %d/%d region servers run the current pod template; the others restart one at a time",
				st.Masters.Updated, st.Masters.Replicas, st.RegionServers.Updated, st.RegionServers.Replicas))
		next = min(next, r.Options.PollInterval)
	case rep.Result.Outcome == Fail:
		set(v1alpha1.ConditionProgressing, metav1.ConditionFalse, rep.Result.Reason, "blocked: see the Degraded condition")
	default:
		set(v1alpha1.ConditionProgressing, metav1.ConditionFalse, ReasonComplete, "every pod runs the current pod template and is Ready")
	}

	// Available: an active master and a serving region server.
	serving := int32(0)
	if o.master != nil {
		for _, sv := range o.master.Servers {
			if sv.State == master.ServerOnline && resources.PodOfServer(c, resources.GroupRegionServer, sv.Name) != "" {
				serving++
			}
		}
	}
	switch {
	case o.master == nil:
		set(v1alpha1.ConditionAvailable, metav1.ConditionFalse, ReasonMasterUnreachable, fmt.Sprintf("the master does not answer: %v", o.masterErr))
		next = min(next, r.Options.PollInterval)
	case st.Masters.Active == "":
		set(v1alpha1.ConditionAvailable, metav1.ConditionFalse, ReasonNoActiveMaster, "no master is active (election under way?)")
		next = min(next, r.Options.PollInterval)
	case serving == 0 || st.RegionServers.Ready == 0:
		set(v1alpha1.ConditionAvailable, metav1.ConditionFalse, ReasonNoRegionServer, "no region server is Ready and serving")
		next = min(next, r.Options.PollInterval)
	default:
		set(v1alpha1.ConditionAvailable, metav1.ConditionTrue, ReasonServing,
			fmt.Sprintf("active master %s; %d region servers serving, %d Ready", st.Masters.Active, serving, st.RegionServers.Ready))
	}

	if h := st.Hibernation; h != nil && h.State == v1alpha1.HibernationHibernated {
		// Stopped on purpose: not Available, nothing wrong (unless a task failed: a person is
		// needed, hibernated or not), nothing in progress once the pods are gone.
		since := h.Since.UTC().Format(time.RFC3339)
		msg := fmt.Sprintf("hibernated since %s (annotation %s=on): the data stays in storage; remove the annotation to wake the cluster", since, v1alpha1.AnnotationHibernation)
		if !hibernationWanted(c) {
			msg = fmt.Sprintf("hibernated since %s; waking (annotation %s removed)", since, v1alpha1.AnnotationHibernation)
			if rep.Blocked != "" {
				msg += fmt.Sprintf(": task %s goes first (%s)", rep.Blocked, rep.Result.Message)
			}
		}
		set(v1alpha1.ConditionAvailable, metav1.ConditionFalse, ReasonHibernated, msg)
		if rep.Result.Outcome != Fail { // (a rollout blocked before the cluster slept waits for it to wake)
			set(v1alpha1.ConditionDegraded, metav1.ConditionFalse, ReasonAsExpected, "nothing needs attention (hibernated)")
		}
		if left := st.Masters.Replicas + st.RegionServers.Replicas; left > 0 {
			set(v1alpha1.ConditionProgressing, metav1.ConditionTrue, ReasonHibernating, fmt.Sprintf("task hibernation: %d pods still stopping", left))
			next = min(next, r.Options.PollInterval)
		} else {
			set(v1alpha1.ConditionProgressing, metav1.ConditionFalse, ReasonHibernated, "every pod is stopped")
		}
	}

	avail := meta.IsStatusConditionTrue(st.Conditions, v1alpha1.ConditionAvailable)
	switch {
	case meta.IsStatusConditionTrue(st.Conditions, v1alpha1.ConditionDegraded):
		st.Phase = v1alpha1.PhaseDegraded
	case st.Hibernation != nil && st.Hibernation.State == v1alpha1.HibernationHibernated:
		st.Phase = v1alpha1.PhaseHibernated
	case !avail:
		st.Phase = v1alpha1.PhaseProvisioning
	case meta.IsStatusConditionTrue(st.Conditions, v1alpha1.ConditionProgressing):
		st.Phase = v1alpha1.PhaseUpdating
	default:
		st.Phase = v1alpha1.PhaseRunning
	}

	// Events for what changed, recorded once the status says so.
	var notes []func()
	if c.Status.Phase != st.Phase {
		from := c.Status.Phase
		if from == "" {
			from = "(new)"
		}
		notes = append(notes, func() { r.event(c, corev1.EventTypeNormal, "PhaseChanged", "phase %s → %s", from, st.Phase) })
	}
	// A Warning event when Degraded turns true or changes its reason.
	oldD := meta.FindStatusCondition(c.Status.Conditions, v1alpha1.ConditionDegraded)
	newD := meta.FindStatusCondition(st.Conditions, v1alpha1.ConditionDegraded)
	if newD.Status == metav1.ConditionTrue && (oldD == nil || oldD.Status != metav1.ConditionTrue || oldD.Reason != newD.Reason) {
		reason, msg := newD.Reason, newD.Message
		notes = append(notes, func() { r.event(c, corev1.EventTypeWarning, reason, "%s", msg) })
	}

	if !equality.Semantic.DeepEqual(&c.Status, st) {
		if err := r.writeStatus(ctx, c, st); err != nil {
			return 0, err
		}
	}
	for _, n := range notes {
		n()
	}
	return next, nil
}

// writeStatus server-side applies the whole status: the StoreCluster controller owns every status
// field, and zero values are sent as such (a merge patch would drop them).
func (r *StoreClusterReconciler) writeStatus(ctx context.Context, c *v1alpha1.StoreCluster, st *v1alpha1.StoreClusterStatus) error {
	m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(st)
	if err != nil {
		return fmt.Errorf("encode the status: %w", err)
	}
	u := &unstructured.Unstructured{Object: map[string]any{"status": m}}
	u.SetGroupVersionKind(v1alpha1.GroupVersion.WithKind("StoreCluster"))
	u.SetNamespace(c.Namespace)
	u.SetName(c.Name)
	u.SetUID(c.UID) // a StoreCluster recreated under the same name is not written by mistake
	return r.Client.Status().Patch(ctx, u, client.Apply, client.FieldOwner(FieldOwner), client.ForceOwnership)
}

func storageReadyMessage(c *v1alpha1.StoreCluster) string {
	switch {
	case c.Spec.Storage.Volume != nil:
		return "ReadWriteMany claim " + resources.SharedClaimName(c) + " is made and not refused"
	case c.Spec.Storage.ExistingClaim != nil:
		return "ReadWriteMany claim " + c.Spec.Storage.ExistingClaim.ClaimName + " exists"
	}
	return "storage checked"
}
