package controller

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/record"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	"github.com/cellstore/cellstore/operator/api/v1alpha1"
	"github.com/cellstore/cellstore/operator/internal/master"
)

// StoreBackupFinalizer keeps a StoreBackup until its copies at the backup location are deleted.
const StoreBackupFinalizer = "cellstore.io/storebackup"

// StoreBackup conditions and reasons.
const (
	ConditionCompleted        = "Completed"
	ReasonNoBackupLocation    = "NoBackupLocation"
	ReasonBackupRunning       = "Running"
	ReasonBackupCompleted     = "Completed"
	ReasonBackupFailed        = "Failed"
	ReasonCopyFailed          = "CopyFailed"
	maxBackupAttempts         = 5
	labelScheduledBackup      = "cellstore.io/scheduled-backup"
	backupSnapshotNameMaxSize = 200
)

// StoreBackupReconciler runs a StoreBackup: the master snapshots each table and copies the
// snapshot to the cluster's backup location, the operator follows the copies and records them
// (docs/snapshots.md, "Backups in Kubernetes").
type StoreBackupReconciler struct {
	Client    client.Client
	APIReader client.Reader
	Recorder  record.EventRecorder
	Options   Options
}

// SetupWithManager registers the controller.
func (r *StoreBackupReconciler) SetupWithManager(mgr ctrl.Manager) error {
	r.Options = r.Options.withDefaults()
	return ctrl.NewControllerManagedBy(mgr).
		Named("storebackup").
		WithOptions(controllerOptions(r.Options, 1)).
		For(&v1alpha1.StoreBackup{}).
		Complete(r)
}

// BackupSnapshotName is the snapshot a backup takes of a table: "<backup>.<namespace>.<table>".
func BackupSnapshotName(backup, table string) string {
	ns, t, ok := strings.Cut(table, ":")
	if !ok {
		ns, t = "default", table
	}
	return backup + "." + ns + "." + t
}

// qualifiedTable is "namespace:table".
func qualifiedTable(t string) string {
	if strings.Contains(t, ":") {
		return t
	}
	return "default:" + t
}

// Reconcile moves one StoreBackup forward.
func (r *StoreBackupReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	b := &v1alpha1.StoreBackup{}
	if err := r.Client.Get(ctx, req.NamespacedName, b); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	cluster := &v1alpha1.StoreCluster{}
	cerr := r.APIReader.Get(ctx, client.ObjectKey{Namespace: b.Namespace, Name: b.Spec.Cluster}, cluster)
	if cerr != nil && !apierrors.IsNotFound(cerr) {
		return ctrl.Result{}, cerr
	}
	clusterFound := cerr == nil && cluster.DeletionTimestamp.IsZero()

	if !b.DeletionTimestamp.IsZero() {
		if !controllerutil.ContainsFinalizer(b, StoreBackupFinalizer) {
			return ctrl.Result{}, nil
		}
		if by, err := recoveringFrom(ctx, r.Client, b.Namespace, b.Name); err != nil {
			return ctrl.Result{}, err
		} else if by != "" {
			r.Recorder.Eventf(b, corev1.EventTypeWarning, "BackupInUse", "StoreCluster %s is being recovered from this backup: its copies stay until that recovery completes (or that StoreCluster is deleted)", by)
			return ctrl.Result{RequeueAfter: r.Options.PollInterval}, nil
		}
		if clusterFound && len(b.Status.Snapshots) > 0 {
			if err := r.deleteCopies(ctx, b, cluster); err != nil {
				r.Recorder.Eventf(b, corev1.EventTypeWarning, "DeleteFailed", "cannot delete the backup's snapshots yet: %v", err)
				return ctrl.Result{RequeueAfter: r.Options.PollInterval}, nil
			}
		} else if len(b.Status.Snapshots) > 0 {
			r.Recorder.Eventf(b, corev1.EventTypeWarning, "CopiesLeft", "StoreCluster %s is gone: the backup's snapshots stay at %s", b.Spec.Cluster, b.Status.Location)
		}
		controllerutil.RemoveFinalizer(b, StoreBackupFinalizer)
		return ctrl.Result{}, r.Client.Update(ctx, b)
	}
	if !controllerutil.ContainsFinalizer(b, StoreBackupFinalizer) {
		controllerutil.AddFinalizer(b, StoreBackupFinalizer)
		if err := r.Client.Update(ctx, b); err != nil {
			return ctrl.Result{}, err
		}
	}
	if b.Status.Phase == v1alpha1.BackupCompleted || b.Status.Phase == v1alpha1.BackupFailed {
		return ctrl.Result{}, nil
	}

	now := metav1.NewTime(r.Options.Now().Truncate(time.Second))
	save := func(phase v1alpha1.BackupPhase, status metav1.ConditionStatus, reason, format string, args ...any) (ctrl.Result, error) {
		msg := fmt.Sprintf(format, args...)
		b.Status.Phase = phase
		if phase == v1alpha1.BackupFailed || phase == v1alpha1.BackupCompleted {
			b.Status.StoppedAt = &now
		}
		if phase == v1alpha1.BackupFailed {
			b.Status.Error = msg
		}
		meta.SetStatusCondition(&b.Status.Conditions, metav1.Condition{Type: ConditionCompleted, Status: status, Reason: reason, Message: msg,
			ObservedGeneration: b.Generation})
		if err := r.Client.Status().Update(ctx, b); err != nil {
			return ctrl.Result{}, client.IgnoreNotFound(err)
		}
		switch phase {
		case v1alpha1.BackupCompleted:
			r.Recorder.Eventf(b, corev1.EventTypeNormal, "Completed", "%s", msg)
			return ctrl.Result{}, nil
		case v1alpha1.BackupFailed:
			r.Recorder.Eventf(b, corev1.EventTypeWarning, "Failed", "%s", msg)
			return ctrl.Result{}, nil
		}
		return ctrl.Result{RequeueAfter: r.Options.PollInterval}, nil
	}
	switch {
	case !clusterFound:
		return save(v1alpha1.BackupPending, metav1.ConditionFalse, ReasonClusterNotFound, "StoreCluster %s/%s does not exist", b.Namespace, b.Spec.Cluster)
	case cluster.Spec.Backup == nil:
		return save(v1alpha1.BackupFailed, metav1.ConditionFalse, ReasonNoBackupLocation,
			"StoreCluster %s has no spec.backup: set a backup location (an S3 bucket or prefix), then make a new StoreBackup", cluster.Name)
	}
	if b.Status.StartedAt == nil {
		b.Status.StartedAt = &now
		b.Status.Location = location(&cluster.Spec.Backup.S3)
		r.Recorder.Eventf(b, corev1.EventTypeNormal, "Started", "backing up StoreCluster %s to %s", cluster.Name, b.Status.Location)
	}
	mc, err := r.Options.Masters(cluster)
	if err != nil {
		return save(v1alpha1.BackupRunning, metav1.ConditionFalse, ReasonMasterUnreachable, "%v", err)
	}
	defer func() { _ = mc.Close() }()
	call := func() (context.Context, context.CancelFunc) { return context.WithTimeout(ctx, r.Options.MasterTimeout) }

	if len(b.Status.Snapshots) == 0 {
		tables := b.Spec.Tables
		if len(tables) == 0 {
			cctx, cancel := call()
			tables, err = mc.ListTables(cctx)
			cancel()
			if err != nil {
				return save(v1alpha1.BackupRunning, metav1.ConditionFalse, ReasonMasterUnreachable, "listing the tables: %v", err)
			}
		}
		seen := map[string]bool{}
		for _, t := range tables {
			t = qualifiedTable(t)
			if seen[t] {
				continue
			}
			seen[t] = true
			name := BackupSnapshotName(b.Name, t)
			if len(name) > backupSnapshotNameMaxSize {
				return save(v1alpha1.BackupFailed, metav1.ConditionFalse, ReasonBackupFailed, "the snapshot name %q of table %s is longer than %d: use a shorter StoreBackup name", name, t, backupSnapshotNameMaxSize)
			}
			b.Status.Snapshots = append(b.Status.Snapshots, v1alpha1.BackupSnapshot{Table: t, Snapshot: name})
		}
		b.Status.Tables = int32(len(b.Status.Snapshots))
		if len(b.Status.Snapshots) == 0 {
			return save(v1alpha1.BackupCompleted, metav1.ConditionTrue, ReasonBackupCompleted, "StoreCluster %s has no tables: nothing to back up", cluster.Name)
		}
	}
	for i := range b.Status.Snapshots {
		sn := &b.Status.Snapshots[i]
		if sn.Copied {
			continue
		}
		cctx, cancel := call()
		err := mc.Snapshot(cctx, sn.Table, sn.Snapshot)
		cancel()
		if err != nil {
			if errors.Is(err, master.ErrTableNotFound) {
				return save(v1alpha1.BackupFailed, metav1.ConditionFalse, ReasonBackupFailed, "table %s: %v", sn.Table, err)
			}
			return save(v1alpha1.BackupRunning, metav1.ConditionFalse, ReasonMasterUnreachable, "snapshot of %s: %v", sn.Table, err)
		}
		if sn.TakenAt == nil {
			// The tables are snapshotted one after another, each once the last is copied: a
			// recovery to a point in time needs the last of them taken before it.
			now := metav1.NewTime(r.Options.Now().Truncate(time.Second).Add(time.Second))
			sn.TakenAt = &now
		}
		cctx, cancel = call()
		st, err := mc.CopySnapshot(cctx, sn.Snapshot, true)
		cancel()
		if err != nil {
			return save(v1alpha1.BackupRunning, metav1.ConditionFalse, ReasonMasterUnreachable, "copying %s: %v", sn.Snapshot, err)
		}
		switch st.State {
		case master.CopyRunning:
			return save(v1alpha1.BackupRunning, metav1.ConditionFalse, ReasonBackupRunning, "copying table %s (%d of %d tables): %d of %d files",
				sn.Table, i+1, len(b.Status.Snapshots), st.Files, st.FilesTotal)
		case master.CopyFailed:
			b.Status.Attempts++
			b.Status.Error = fmt.Sprintf("copying %s: %s", sn.Snapshot, st.Error)
			if b.Status.Attempts >= maxBackupAttempts {
				return save(v1alpha1.BackupFailed, metav1.ConditionFalse, ReasonBackupFailed, "copying table %s failed %d times, last: %s", sn.Table, b.Status.Attempts, st.Error)
			}
			r.Recorder.Eventf(b, corev1.EventTypeWarning, ReasonCopyFailed, "copying table %s failed (attempt %d of %d), retrying: %s", sn.Table, b.Status.Attempts, maxBackupAttempts, st.Error)
			return save(v1alpha1.BackupRunning, metav1.ConditionFalse, ReasonCopyFailed, "copying table %s failed (attempt %d of %d), retrying: %s", sn.Table, b.Status.Attempts, maxBackupAttempts, st.Error)
		}
		sn.Copied, sn.Files, sn.Bytes = true, st.Files, st.Bytes
		// The copy is at the backup location; the snapshot in the cluster is no longer needed (it
		// would keep compacted files in the cluster's archive).
		cctx, cancel = call()
		err = mc.DeleteSnapshot(cctx, sn.Snapshot)
		cancel()
		if err != nil {
			return save(v1alpha1.BackupRunning, metav1.ConditionFalse, ReasonMasterUnreachable, "deleting the cluster's snapshot %s: %v", sn.Snapshot, err)
		}
	}
	// Once more for every table (deleting a deleted snapshot is no error): a deletion that failed
	// after its copy was recorded would otherwise leave the snapshot, and the compacted files it
	// keeps in the cluster's archive, until the StoreBackup is deleted.
	for _, sn := range b.Status.Snapshots {
		cctx, cancel := call()
		err := mc.DeleteSnapshot(cctx, sn.Snapshot)
		cancel()
		if err != nil {
			return save(v1alpha1.BackupRunning, metav1.ConditionFalse, ReasonMasterUnreachable, "deleting the cluster's snapshot %s: %v", sn.Snapshot, err)
		}
	}
	b.Status.Files, b.Status.Bytes = 0, 0
	for _, sn := range b.Status.Snapshots {
		b.Status.Files += sn.Files
		b.Status.Bytes += sn.Bytes
	}
	b.Status.Size = humanBytes(b.Status.Bytes)
	return save(v1alpha1.BackupCompleted, metav1.ConditionTrue, ReasonBackupCompleted, "%d tables, %d files, %s at %s",
		len(b.Status.Snapshots), b.Status.Files, b.Status.Size, b.Status.Location)
}

// humanBytes is a size for people: "968.7 KiB".
func humanBytes(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit && exp < 5; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTPE"[exp])
}

// location names a bucket for people: "s3://bucket/prefix".
func location(s3 *v1alpha1.S3Location) string {
	return "s3://" + strings.TrimSuffix(s3.Bucket+"/"+s3.Prefix, "/")
}

// deleteCopies deletes a backup's snapshots at the backup location and in the cluster.
func (r *StoreBackupReconciler) deleteCopies(ctx context.Context, b *v1alpha1.StoreBackup, cluster *v1alpha1.StoreCluster) error {
	mc, err := r.Options.Masters(cluster)
	if err != nil {
		return err
	}
	defer func() { _ = mc.Close() }()
	for _, sn := range b.Status.Snapshots {
		for _, del := range []func(context.Context, string) error{mc.DeleteBackup, mc.DeleteSnapshot} {
			cctx, cancel := context.WithTimeout(ctx, r.Options.MasterTimeout)
			err := del(cctx, sn.Snapshot)
			cancel()
			if err != nil {
				return fmt.Errorf("%s: %w", sn.Snapshot, err)
			}
		}
	}
	r.Recorder.Eventf(b, corev1.EventTypeNormal, "Deleted", "deleted %d snapshots from %s", len(b.Status.Snapshots), b.Status.Location)
	return nil
}

// backupsOf lists the StoreBackups a schedule made, newest first.
func backupsOf(ctx context.Context, c client.Reader, sb *v1alpha1.StoreScheduledBackup) ([]v1alpha1.StoreBackup, error) {
	var list v1alpha1.StoreBackupList
	if err := c.List(ctx, &list, client.InNamespace(sb.Namespace), client.MatchingLabels{labelScheduledBackup: sb.Name}); err != nil {
		return nil, err
	}
	out := slices.Clone(list.Items)
	slices.SortFunc(out, func(a, b v1alpha1.StoreBackup) int {
		if c := b.CreationTimestamp.Time.Compare(a.CreationTimestamp.Time); c != 0 {
			return c
		}
		return strings.Compare(b.Name, a.Name)
	})
	return out, nil
}

// recoveringFrom names a StoreCluster of the namespace whose recovery from StoreBackup name
// (spec.bootstrap.recovery) has not completed, "" when none: that backup's copies must stay, or
// the recovery fails half done.
func recoveringFrom(ctx context.Context, c client.Reader, ns, name string) (string, error) {
	list := &v1alpha1.StoreClusterList{}
	if err := c.List(ctx, list, client.InNamespace(ns)); err != nil {
		return "", err
	}
	for _, sc := range list.Items {
		if bs := sc.Spec.Bootstrap; bs != nil && bs.Recovery != nil && bs.Recovery.Backup.Name == name && sc.DeletionTimestamp.IsZero() &&
			(sc.Status.Recovery == nil || sc.Status.Recovery.CompletedAt == nil) {
			return sc.Name, nil
		}
	}
	return "", nil
}
