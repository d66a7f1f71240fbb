package controller

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/robfig/cron/v3"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/record"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/cellstore/cellstore/operator/api/v1alpha1"
)

// StoreScheduledBackup reasons.
const (
	ReasonInvalidSchedule = "InvalidSchedule"
	ReasonScheduled       = "Scheduled"
	ReasonSuspended       = "Suspended"
)

// cronParser reads five-field schedules, six with seconds first, and descriptors (@daily, @every 1h).
var cronParser = cron.NewParser(cron.SecondOptional | cron.Minute | cron.Hour | cron.Dom | cron.Month | cron.Dow | cron.Descriptor)

// ScheduledBackupReconciler makes StoreBackups on a schedule and deletes those beyond the
// retention (docs/snapshots.md, "Backups in Kubernetes").
type ScheduledBackupReconciler struct {
	Client    client.Client
	APIReader client.Reader
	Recorder  record.EventRecorder
	Options   Options
}

// SetupWithManager registers the controller; it watches the StoreBackups it made (by their
// label), to apply the retention when one finishes.
func (r *ScheduledBackupReconciler) SetupWithManager(mgr ctrl.Manager) error {
	r.Options = r.Options.withDefaults()
	return ctrl.NewControllerManagedBy(mgr).
		Named("storescheduledbackup").
		WithOptions(controllerOptions(r.Options, 1)).
		For(&v1alpha1.StoreScheduledBackup{}).
		Watches(&v1alpha1.StoreBackup{}, handler.EnqueueRequestsFromMapFunc(func(_ context.Context, o client.Object) []reconcile.Request {
			if name := o.GetLabels()[labelScheduledBackup]; name != "" {
				return []reconcile.Request{{NamespacedName: types.NamespacedName{Namespace: o.GetNamespace(), Name: name}}}
			}
			return nil
		})).
		Complete(r)
}

// Reconcile makes the backup that is due, applies the retention and says when the next one is.
func (r *ScheduledBackupReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	sb := &v1alpha1.StoreScheduledBackup{}
	if err := r.Client.Get(ctx, req.NamespacedName, sb); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if !sb.DeletionTimestamp.IsZero() {
		return ctrl.Result{}, nil // the backups it made stay (they have no owner): delete them by label
	}
	ready := func(status metav1.ConditionStatus, reason, format string, args ...any) error {
		meta.SetStatusCondition(&sb.Status.Conditions, metav1.Condition{Type: ConditionReady, Status: status, Reason: reason,
			Message: fmt.Sprintf(format, args...), ObservedGeneration: sb.Generation})
		return client.IgnoreNotFound(r.Client.Status().Update(ctx, sb))
	}
	sched, err := cronParser.Parse(sb.Spec.Schedule)
	if err != nil {
		sb.Status.NextScheduleTime = nil
		return ctrl.Result{}, ready(metav1.ConditionFalse, ReasonInvalidSchedule, "schedule %q: %v (five fields: minute hour day month weekday, e.g. \"0 3 * * *\"; or @daily)", sb.Spec.Schedule, err)
	}
	cluster := &v1alpha1.StoreCluster{}
	if err := r.APIReader.Get(ctx, client.ObjectKey{Namespace: sb.Namespace, Name: sb.Spec.Cluster}, cluster); err != nil {
		if !apierrors.IsNotFound(err) {
			return ctrl.Result{}, err
		}
		return ctrl.Result{RequeueAfter: r.Options.PollInterval}, ready(metav1.ConditionFalse, ReasonClusterNotFound, "StoreCluster %s/%s does not exist", sb.Namespace, sb.Spec.Cluster)
	}
	now := r.Options.Now()
	last := sb.CreationTimestamp.Time
	if sb.Status.LastScheduleTime != nil {
		last = sb.Status.LastScheduleTime.Time
	}
	due := sched.Next(last)
	if !sb.Spec.Suspend && !now.Before(due) {
		running, err := r.unfinished(ctx, sb, now, sched.Next(due).Sub(due))
		if err != nil {
			return ctrl.Result{}, err
		}
		if running != "" {
			// One backup of a cluster at a time: another beside it would copy the same files
			// again (and, while the cluster's master is down, one more would pile up at each tick).
			r.Recorder.Eventf(sb, corev1.EventTypeWarning, "BackupSkipped", "the backup due %s is skipped: StoreBackup %s of this schedule has not finished "+
				"(one unfinished for two of the schedule's periods no longer holds the next back)", due.UTC().Format(time.RFC3339), running)
		} else {
			name := fmt.Sprintf("%s-%s", sb.Name, due.UTC().Format("20060102150405"))
			b := &v1alpha1.StoreBackup{
				// No owner: deleting the schedule keeps its backups (CloudNativePG's default too).
				ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: sb.Namespace, Labels: map[string]string{labelScheduledBackup: sb.Name}},
				Spec:       v1alpha1.StoreBackupSpec{Cluster: sb.Spec.Cluster, Tables: sb.Spec.Tables},
			}
			if err := r.Client.Create(ctx, b); err != nil && !apierrors.IsAlreadyExists(err) {
				return ctrl.Result{}, err
			}
			r.Recorder.Eventf(sb, corev1.EventTypeNormal, "BackupCreated", "StoreBackup %s made (due %s)", name, due.UTC().Format(time.RFC3339))
			sb.Status.LastBackup = name
		}
		t := metav1.NewTime(due)
		sb.Status.LastScheduleTime = &t
		// A schedule that fell behind (the operator was down) makes one backup, not one per
		// missed time.
		due = sched.Next(now)
	}
	if err := r.applyRetention(ctx, sb, now); err != nil {
		return ctrl.Result{}, err
	}
	next := metav1.NewTime(due)
	sb.Status.NextScheduleTime = &next
	if sb.Spec.Suspend {
		sb.Status.NextScheduleTime = nil
		return ctrl.Result{}, ready(metav1.ConditionTrue, ReasonSuspended, "suspended: no backups are made")
	}
	if err := ready(metav1.ConditionTrue, ReasonScheduled, "next backup at %s", due.UTC().Format(time.RFC3339)); err != nil {
		return ctrl.Result{}, err
	}
	return ctrl.Result{RequeueAfter: max(time.Second, due.Sub(now))}, nil
}

// backupFinished: the backup completed or failed.
func backupFinished(b *v1alpha1.StoreBackup) bool {
	return b.Status.Phase == v1alpha1.BackupCompleted || b.Status.Phase == v1alpha1.BackupFailed
}

// unfinished names a backup of the schedule that has not finished ("" when none), read fresh (one
// made at the last tick may not be in the cache yet). One unfinished for two of the schedule's
// periods is stuck (its master broken) and is not named: one stuck backup must not end the
// schedule.
func (r *ScheduledBackupReconciler) unfinished(ctx context.Context, sb *v1alpha1.StoreScheduledBackup, now time.Time, period time.Duration) (string, error) {
	backups, err := backupsOf(ctx, r.APIReader, sb)
	if err != nil {
		return "", err
	}
	for _, b := range backups {
		if b.DeletionTimestamp.IsZero() && !backupFinished(&b) && now.Sub(b.CreationTimestamp.Time) < 2*period {
			return b.Name, nil
		}
	}
	return "", nil
}

// applyRetention deletes the finished backups beyond the count and those older than the max age,
// always keeping the newest completed one; running backups are never deleted. The count is of
// the newest backups, running ones included; backups already being deleted do not count.
func (r *ScheduledBackupReconciler) applyRetention(ctx context.Context, sb *v1alpha1.StoreScheduledBackup, now time.Time) error {
	backups, err := backupsOf(ctx, r.Client, sb)
	if err != nil {
		return err
	}
	backups = slices.DeleteFunc(backups, func(b v1alpha1.StoreBackup) bool { return !b.DeletionTimestamp.IsZero() })
	ret := sb.Spec.Retention
	keptCompleted := false
	for i, b := range backups {
		if !backupFinished(&b) {
			continue
		}
		newestCompleted := b.Status.Phase == v1alpha1.BackupCompleted && !keptCompleted
		if newestCompleted {
			keptCompleted = true
		}
		tooMany := ret.Count > 0 && i >= int(ret.Count)
		tooOld := ret.MaxAge != nil && now.Sub(b.CreationTimestamp.Time) > ret.MaxAge.Duration
		if (tooMany || tooOld) && !newestCompleted {
			if by, err := recoveringFrom(ctx, r.Client, b.Namespace, b.Name); err != nil {
				return err
			} else if by != "" {
				continue // kept while StoreCluster by recovers from it
			}
			if err := r.Client.Delete(ctx, &b); err != nil && !apierrors.IsNotFound(err) {
				return err
			}
			why := fmt.Sprintf("more than %d backups", ret.Count)
			if !tooMany {
				why = "older than " + ret.MaxAge.Duration.String()
			}
			r.Recorder.Eventf(sb, corev1.EventTypeNormal, "BackupDeleted", "StoreBackup %s deleted by the retention (%s)", b.Name, why)
		}
	}
	return nil
}
