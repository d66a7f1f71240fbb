package controller

import (
	"context"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/cellstore/cellstore/operator/api/v1alpha1"
	"github.com/cellstore/cellstore/operator/internal/master"
)

// Recovery reasons (task "recovery").
const (
	ReasonRecoveryNeedsBackupLocation = "RecoveryNeedsBackupLocation"
	ReasonBackupNotFound              = "BackupNotFound"
	ReasonBackupNotComplete           = "BackupNotComplete"
	ReasonRecovering                  = "Recovering"
	ReasonRecoveryTargetBeforeBackup  = "RecoveryTargetBeforeBackup"
	ReasonRecoveryRefused             = "RecoveryRefused"
	// ReasonRecoveryTableExists: a table the backup holds exists in the cluster, not made by the
	// recovery (an application or a person made it before the recovery reached it).
	ReasonRecoveryTableExists = "RecoveryTableExists"
)

// taskRecovery bootstraps a new cluster from a StoreBackup (spec.bootstrap.recovery), once its
// master answers: each snapshot of the backup is imported from the backup location and restored
// (its table made from it); status.recovery records each, so a restarted operator or a new master
// goes on from there. It runs to completion once, then never again.
func (r *StoreClusterReconciler) taskRecovery(ctx context.Context, s *clusterState) Result {
	c := s.c
	if c.Spec.Bootstrap == nil || c.Spec.Bootstrap.Recovery == nil {
		return Done()
	}
	if st := c.Status.Recovery; st != nil && st.CompletedAt != nil {
		return Done()
	}
	if c.Spec.Backup == nil {
		return Failed(ReasonRecoveryNeedsBackupLocation, "spec.bootstrap.recovery needs spec.backup: the backup location its snapshots are read from")
	}
	name := c.Spec.Bootstrap.Recovery.Backup.Name
	b := &v1alpha1.StoreBackup{}
	if err := r.APIReader.Get(ctx, client.ObjectKey{Namespace: c.Namespace, Name: name}, b); err != nil {
		if apierrors.IsNotFound(err) {
			return Failed(ReasonBackupNotFound, "StoreBackup %s/%s (spec.bootstrap.recovery.backup) does not exist", c.Namespace, name)
		}
		return Errored(ReasonBackupNotFound, err)
	}
	if b.Status.Phase != v1alpha1.BackupCompleted {
		return Waiting(ReasonBackupNotComplete, "StoreBackup %s is %s, not Completed: recovery waits for it", name, phaseOr(b.Status.Phase))
	}
	var target time.Time
	if t := c.Spec.Bootstrap.Recovery.TargetTime; t != nil {
		target = t.Time
		// Checked before any table is restored: every table's snapshot must precede the target
		// (they are taken one after another, the last maybe long after the backup started).
		if taken := backupTakenBy(b); !taken.IsZero() && !target.After(taken) {
			return Failed(ReasonRecoveryTargetBeforeBackup, "spec.bootstrap.recovery.targetTime %s is not after StoreBackup %s had taken its snapshots (by %s): name an earlier backup, or a later target",
				target.UTC().Format(time.RFC3339), name, taken.UTC().Format(time.RFC3339))
		}
	}
	if c.Status.Recovery == nil {
		c.Status.Recovery = &v1alpha1.RecoveryStatus{Backup: name, Cluster: b.Spec.Cluster, TargetTime: c.Spec.Bootstrap.Recovery.TargetTime.DeepCopy()}
		to := ""
		if !target.IsZero() {
			to = ", to " + target.UTC().Format(time.RFC3339)
		}
		r.event(c, corev1.EventTypeNormal, "RecoveryStarted", "restoring %d tables from StoreBackup %s (of StoreCluster %s)%s", len(b.Status.Snapshots), name, b.Spec.Cluster, to)
	}
	mc, err := r.Options.Masters(c)
	if err != nil {
		return Waiting(ReasonMasterUnreachable, "recovery waits for the master: %v", err)
	}
	defer func() { _ = mc.Close() }()
	call := func() (context.Context, context.CancelFunc) { return context.WithTimeout(ctx, r.Options.MasterTimeout) }
	cctx, cancel := call()
	tables, err := mc.ListTables(cctx)
	cancel()
	if err != nil {
		return Waiting(ReasonMasterUnreachable, "recovery waits for the master: %v", err)
	}
	st := c.Status.Recovery
	for i, sn := range b.Status.Snapshots {
		if slices.Contains(st.Restored, sn.Snapshot) {
			continue
		}
		exists := slices.Contains(tables, sn.Table)
		if st.Restoring != sn.Snapshot {
			if exists {
				// Not this recovery's table: counting it restored would report a recovery
				// whose table holds none of the backup's data.
				return Failed(ReasonRecoveryTableExists, "table %s exists in the cluster but was not restored by this recovery (an application or a person made it before the recovery reached it): "+
					"drop it (disable_table, drop_table) and the recovery restores it from StoreBackup %s", sn.Table, name)
			}
			// Recorded (the status written) before the import and restore begin, so that the
			// table, once it exists, is known to be this recovery's.
			st.Restoring = sn.Snapshot
			return Waiting(ReasonRecovering, "restoring table %s (%d of %d) from StoreBackup %s: starting", sn.Table, i+1, len(b.Status.Snapshots), name)
		}
		if !exists {
			cctx, cancel := call()
			cs, err := mc.CopySnapshot(cctx, sn.Snapshot, false)
			cancel()
			switch {
			case err != nil:
				return Waiting(ReasonMasterUnreachable, "importing %s: %v", sn.Snapshot, err)
			case cs.State == master.CopyFailed:
				r.event(c, corev1.EventTypeWarning, "ImportFailed", "importing snapshot %s failed, retrying: %s", sn.Snapshot, cs.Error)
				return Waiting(ReasonRecovering, "importing table %s failed, retrying: %s", sn.Table, cs.Error)
			case cs.State == master.CopyRunning:
				return Waiting(ReasonRecovering, "importing table %s (%d of %d) from StoreBackup %s: %d of %d files", sn.Table, i+1, len(b.Status.Snapshots),
					name, cs.Files, cs.FilesTotal)
			}
			cctx, cancel = call()
			err = mc.RestoreSnapshot(cctx, sn.Snapshot, target)
			cancel()
			if master.IsInvalid(err) {
				return Failed(ReasonRecoveryRefused, "the master refuses to restore table %s from %s: %v", sn.Table, sn.Snapshot, err)
			}
			if err != nil {
				return Waiting(ReasonRecovering, "restoring table %s from %s: %v", sn.Table, sn.Snapshot, err)
			}
		}
		// The table is listed while its regions are being made (and, to a target time, the
		// archived WAL replayed into them): done only once it is ENABLED.
		cctx, cancel := call()
		ready, why, err := mc.TableEnabled(cctx, sn.Table)
		cancel()
		if err != nil {
			return Waiting(ReasonMasterUnreachable, "recovery waits for the master: %v", err)
		}
		if !ready && why != "" {
			// The master retries it (with a growing wait); whether it can succeed, its error says
			// (a WAL archive pruned past the snapshot cannot: recover from a later backup).
			r.event(c, corev1.EventTypeWarning, "RestoreFailing", "restoring table %s from %s fails at the master, retrying: %s", sn.Table, sn.Snapshot, why)
			return Waiting(ReasonRecovering, "restoring table %s (%d of %d) from StoreBackup %s fails at the master, which retries: %s",
				sn.Table, i+1, len(b.Status.Snapshots), name, why)
		}
		if !ready {
			return Waiting(ReasonRecovering, "restoring table %s (%d of %d) from StoreBackup %s: its regions are being written and opened",
				sn.Table, i+1, len(b.Status.Snapshots), name)
		}
		// The table links to the imported files (the cleaner keeps them); the snapshot itself
		// is not needed in this cluster.
		cctx, cancel = call()
		err = mc.DeleteSnapshot(cctx, sn.Snapshot)
		cancel()
		if err != nil {
			return Waiting(ReasonRecovering, "deleting the imported snapshot %s: %v", sn.Snapshot, err)
		}
		st.Restored, st.Restoring = append(st.Restored, sn.Snapshot), ""
	}
	now := metav1.NewTime(r.Options.Now().Truncate(time.Second))
	st.CompletedAt = &now
	r.event(c, corev1.EventTypeNormal, "Recovered", "restored %d tables from StoreBackup %s", len(st.Restored), name)
	return Done()
}

func phaseOr(p v1alpha1.BackupPhase) string {
	if p == "" {
		return "new"
	}
	return string(p)
}

// backupTakenBy is when a completed backup had taken the last of its tables' snapshots: the
// latest TakenAt, or, for a backup of an operator that did not record them, when it stopped
// (StartedAt when neither is known).
func backupTakenBy(b *v1alpha1.StoreBackup) time.Time {
	var last time.Time
	for _, sn := range b.Status.Snapshots {
		if sn.TakenAt == nil {
			last = time.Time{}
			break
		}
		if sn.TakenAt.After(last) {
			last = sn.TakenAt.Time
		}
	}
	switch {
	case !last.IsZero():
		return last
	case b.Status.StoppedAt != nil:
		return b.Status.StoppedAt.Time
	case b.Status.StartedAt != nil:
		return b.Status.StartedAt.Time
	}
	return time.Time{}
}
