package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// StoreBackup is a one-shot backup of a StoreCluster's tables (as CloudNativePG's Backup): the
// operator has the master snapshot each table and copy the snapshot's files to the cluster's
// spec.backup location, then records what was copied. Deleting the StoreBackup deletes its copies
// there (files another backup still names stay). A new cluster starts from it with
// spec.bootstrap.recovery.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=cbackup,categories=cellstore
// +kubebuilder:printcolumn:name="Cluster",type=string,JSONPath=`.spec.cluster`
// +kubebuilder:printcolumn:name="Phase",type=string,JSONPath=`.status.phase`
// +kubebuilder:printcolumn:name="Tables",type=integer,JSONPath=`.status.tables`
// +kubebuilder:printcolumn:name="Files",type=integer,JSONPath=`.status.files`
// +kubebuilder:printcolumn:name="Size",type=string,JSONPath=`.status.size`
// +kubebuilder:printcolumn:name="Started",type=date,JSONPath=`.status.startedAt`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
// +kubebuilder:validation:XValidation:rule="self.metadata.name.size() <= 100",message="a StoreBackup's name is part of its snapshots' names: at most 100 characters"
type StoreBackup struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   StoreBackupSpec   `json:"spec,omitempty"`
	Status StoreBackupStatus `json:"status,omitempty"`
}

// StoreBackupList is a list of StoreBackups.
//
// +kubebuilder:object:root=true
type StoreBackupList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []StoreBackup `json:"items"`
}

// StoreBackupSpec says what to back up.
//
// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="a StoreBackup cannot change: make another"
type StoreBackupSpec struct {
	// Cluster is the StoreCluster (in the same namespace); it must have spec.backup.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Cluster string `json:"cluster"`
	// Tables to back up, "namespace:table" or "table"; empty: every table.
	// +kubebuilder:validation:MaxItems=256
	// +kubebuilder:validation:items:MaxLength=256
	// +kubebuilder:validation:items:Pattern=`^([a-zA-Z0-9_][a-zA-Z0-9_.-]*:)?[a-zA-Z0-9_][a-zA-Z0-9_.-]*$`
	// +optional
	Tables []string `json:"tables,omitempty"`
}

// BackupPhase is where a backup is.
type BackupPhase string

// Backup phases.
const (
	BackupPending   BackupPhase = "Pending"
	BackupRunning   BackupPhase = "Running"
	BackupCompleted BackupPhase = "Completed"
	BackupFailed    BackupPhase = "Failed"
)

// BackupSnapshot is one table's snapshot in a backup.
type BackupSnapshot struct {
	// Table is "namespace:table".
	Table string `json:"table"`
	// Snapshot is the snapshot's name (in the cluster while it is copied, then at the backup
	// location).
	Snapshot string `json:"snapshot"`
	// TakenAt: when the master had taken the snapshot (a point-in-time recovery from the backup
	// can reach no earlier than the last of its tables' snapshots).
	// +optional
	TakenAt *metav1.Time `json:"takenAt,omitempty"`
	// Copied: the snapshot is complete at the backup location.
	// +optional
	Copied bool `json:"copied,omitempty"`
	// Files and bytes the copy looked at (already there or copied).
	// +optional
	Files int32 `json:"files,omitempty"`
	// +optional
	Bytes int64 `json:"bytes,omitempty"`
}

// StoreBackupStatus is what the backup did.
type StoreBackupStatus struct {
	// Phase: Pending (waiting for the cluster), Running, Completed or Failed.
	// +optional
	Phase BackupPhase `json:"phase,omitempty"`
	// StartedAt and StoppedAt bound the backup.
	// +optional
	StartedAt *metav1.Time `json:"startedAt,omitempty"`
	// +optional
	StoppedAt *metav1.Time `json:"stoppedAt,omitempty"`
	// Snapshots are the tables' snapshots.
	// +optional
	Snapshots []BackupSnapshot `json:"snapshots,omitempty"`
	// Tables, Files, Bytes and Size (human-readable) sum the snapshots.
	// +optional
	Tables int32 `json:"tables,omitempty"`
	// +optional
	Files int32 `json:"files,omitempty"`
	// +optional
	Bytes int64 `json:"bytes,omitempty"`
	// +optional
	Size string `json:"size,omitempty"`
	// Location is where the snapshots are ("s3://bucket/prefix").
	// +optional
	Location string `json:"location,omitempty"`
	// Attempts counts the copies that failed and were started again.
	// +optional
	Attempts int32 `json:"attempts,omitempty"`
	// Error is the last failure.
	// +optional
	Error string `json:"error,omitempty"`
	// Conditions: Completed says whether the backup is complete, and if not why.
	// +listType=map
	// +listMapKey=type
	// +optional
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// StoreScheduledBackup makes StoreBackups on a cron schedule and keeps a bounded number of them
// (as CloudNativePG's ScheduledBackup).
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=cschedbackup,categories=cellstore
// +kubebuilder:printcolumn:name="Cluster",type=string,JSONPath=`.spec.cluster`
// +kubebuilder:printcolumn:name="Schedule",type=string,JSONPath=`.spec.schedule`
// +kubebuilder:printcolumn:name="Suspended",type=boolean,JSONPath=`.spec.suspend`
// +kubebuilder:printcolumn:name="Last",type=date,JSONPath=`.status.lastScheduleTime`
// +kubebuilder:printcolumn:name="Next",type=date,JSONPath=`.status.nextScheduleTime`
// +kubebuilder:validation:XValidation:rule="self.metadata.name.size() <= 80",message="a StoreScheduledBackup's name is part of its StoreBackups' names: at most 80 characters"
type StoreScheduledBackup struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   StoreScheduledBackupSpec   `json:"spec,omitempty"`
	Status StoreScheduledBackupStatus `json:"status,omitempty"`
}

// StoreScheduledBackupList is a list of StoreScheduledBackups.
//
// +kubebuilder:object:root=true
type StoreScheduledBackupList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []StoreScheduledBackup `json:"items"`
}

// StoreScheduledBackupSpec is the schedule, what to back up and how many backups to keep.
type StoreScheduledBackupSpec struct {
	// Cluster is the StoreCluster (in the same namespace).
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Cluster string `json:"cluster"`
	// Schedule in cron syntax, in UTC: five fields (minute hour day month weekday), or six with
	// seconds first, or a descriptor such as @daily or @every 6h.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=128
	Schedule string `json:"schedule"`
	// Tables to back up; empty: every table.
	// +kubebuilder:validation:MaxItems=256
	// +kubebuilder:validation:items:MaxLength=256
	// +kubebuilder:validation:items:Pattern=`^([a-zA-Z0-9_][a-zA-Z0-9_.-]*:)?[a-zA-Z0-9_][a-zA-Z0-9_.-]*$`
	// +optional
	Tables []string `json:"tables,omitempty"`
	// Suspend stops making backups (those made are kept).
	// +optional
	Suspend bool `json:"suspend,omitempty"`
	// Retention bounds the backups kept; the oldest finished ones beyond it are deleted (with
	// their copies at the backup location).
	// +kubebuilder:default={count: 7}
	// +optional
	Retention BackupRetention `json:"retention,omitempty"`
}

// BackupRetention bounds kept backups by count and age; both apply when both are set.
type BackupRetention struct {
	// Count of backups kept (the newest); 0: no limit by count.
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=1000
	// +optional
	Count int32 `json:"count,omitempty"`
	// MaxAge deletes backups older than this, e.g. 168h; the newest completed one is always kept.
	// +kubebuilder:validation:XValidation:rule="duration(self) >= duration('1m')",message="retention.maxAge must be at least 1m, e.g. 168h"
	// +optional
	MaxAge *metav1.Duration `json:"maxAge,omitempty"`
}

// StoreScheduledBackupStatus is when backups were and will be made.
type StoreScheduledBackupStatus struct {
	// LastScheduleTime is when the last StoreBackup was made; LastBackup is its name.
	// +optional
	LastScheduleTime *metav1.Time `json:"lastScheduleTime,omitempty"`
	// +optional
	LastBackup string `json:"lastBackup,omitempty"`
	// NextScheduleTime is when the next one is due.
	// +optional
	NextScheduleTime *metav1.Time `json:"nextScheduleTime,omitempty"`
	// Conditions: Ready says whether the schedule is valid and its cluster exists.
	// +listType=map
	// +listMapKey=type
	// +optional
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

func init() {
	SchemeBuilder.Register(&StoreBackup{}, &StoreBackupList{}, &StoreScheduledBackup{}, &StoreScheduledBackupList{})
}
