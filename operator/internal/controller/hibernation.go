package controller

import (
	"context"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/cellstore/cellstore/operator/api/v1alpha1"
	"github.com/cellstore/cellstore/operator/internal/master"
)

// Hibernation reasons.
const (
	ReasonHibernating = "Hibernating"
	ReasonHibernated  = "Hibernated"
	ReasonWaking      = "Waking"
)

// hibernationWanted: the cluster is asked to hibernate.
func hibernationWanted(c *v1alpha1.StoreCluster) bool {
	return c.Annotations[v1alpha1.AnnotationHibernation] == "on"
}

// hibernated: the pods are to be stopped (the tables were disabled first).
func hibernated(c *v1alpha1.StoreCluster) bool {
	h := c.Status.Hibernation
	return hibernationWanted(c) && h != nil && h.State == v1alpha1.HibernationHibernated
}

// taskHibernation hibernates and wakes the cluster (as CloudNativePG's declarative hibernation):
// the enabled tables are recorded in the status, then disabled — their regions flush and close
// through the master, so the region servers hold nothing when they stop — and only then are both
// StatefulSets scaled to zero (task statefulsets renders them so). Waking scales them back; once
// the master answers, the recorded tables are enabled again and the status forgets the
// hibernation. Each step is recorded before the next one acts, so a restarted operator goes on
// where it was; asking to hibernate while waking (or the reverse) turns around.
func (r *StoreClusterReconciler) taskHibernation(ctx context.Context, s *clusterState) Result {
	c := s.c
	h := c.Status.Hibernation
	now := metav1.NewTime(r.Options.Now().Truncate(time.Second))
	set := func(state v1alpha1.HibernationState) {
		h.State, h.Since = state, now
	}
	if !hibernationWanted(c) {
		if h == nil {
			return Done()
		}
		if h.State != v1alpha1.HibernationWaking {
			set(v1alpha1.HibernationWaking)
			r.event(c, corev1.EventTypeNormal, ReasonWaking, "waking: starting the pods; %d tables will be enabled again", len(h.Tables))
		}
		if res := r.eachTable(ctx, c, h.Tables, ReasonWaking, "waking: enabling", master.Client.EnableTable); res.Outcome != Complete {
			return res
		}
		r.event(c, corev1.EventTypeNormal, "Woken", "woken: %d tables enabled again", len(h.Tables))
		c.Status.Hibernation = nil
		return Done()
	}
	if h == nil || h.State == v1alpha1.HibernationWaking {
		if h == nil {
			h = &v1alpha1.HibernationStatus{}
			c.Status.Hibernation = h
		}
		set(v1alpha1.HibernationRecording)
		r.event(c, corev1.EventTypeNormal, ReasonHibernating, "hibernating: disabling the enabled tables, then stopping every pod")
	}
	switch h.State {
	case v1alpha1.HibernationRecording:
		mc, err := r.Options.Masters(c)
		if err != nil {
			return Waiting(ReasonHibernating, "hibernating: waiting for the master: %v", err)
		}
		defer func() { _ = mc.Close() }()
		cctx, cancel := context.WithTimeout(ctx, r.Options.MasterTimeout)
		tables, err := mc.EnabledTables(cctx)
		cancel()
		if err != nil {
			return Waiting(ReasonHibernating, "hibernating: listing the tables: %v", err)
		}
		for _, t := range tables {
			if !slices.Contains(h.Tables, t) {
				h.Tables = append(h.Tables, t)
			}
		}
		slices.Sort(h.Tables)
		// Recorded with this reconcile's status; disabled by the next one.
		set(v1alpha1.HibernationDisabling)
		return Waiting(ReasonHibernating, "hibernating: %d enabled tables recorded; disabling them next", len(h.Tables))
	case v1alpha1.HibernationDisabling:
		if res := r.eachTable(ctx, c, h.Tables, ReasonHibernating, "hibernating: disabling", master.Client.DisableTable); res.Outcome != Complete {
			return res
		}
		set(v1alpha1.HibernationHibernated)
		r.event(c, corev1.EventTypeNormal, ReasonHibernated, "hibernated: %d tables disabled; stopping every pod (the data stays in storage)", len(h.Tables))
		return Waiting(ReasonHibernating, "hibernating: tables disabled; stopping the pods")
	}
	return Done()
}

// eachTable calls the master's op (enable or disable) on every table; a failure waits (the next
// reconcile goes on: both calls are idempotent).
func (r *StoreClusterReconciler) eachTable(ctx context.Context, c *v1alpha1.StoreCluster, tables []string, reason, doing string,
	op func(master.Client, context.Context, string) error) Result {
	mc, err := r.Options.Masters(c)
	if err != nil {
		return Waiting(reason, "%s tables: waiting for the master: %v", doing, err)
	}
	defer func() { _ = mc.Close() }()
	for _, t := range tables {
		cctx, cancel := context.WithTimeout(ctx, r.Options.MasterTimeout*6)
		err := op(mc, cctx, t)
		cancel()
		if err != nil {
			return Waiting(reason, "%s table %s: %v", doing, t, err)
		}
	}
	return Done()
}
