package v1alpha1

import (
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

// Annotations a person sets on a StoreCluster.
const (
	// AnnotationRestartedAt (kubectl annotate storecluster NAME cellstore.io/restartedAt=<time>)
	// restarts every pod, one at a time: its value goes into the pods' template, so it changes the
	// StatefulSets' revision and is recorded as the restart reason.
	AnnotationRestartedAt = "cellstore.io/restartedAt"
	// AnnotationForceRestart (cellstore.io/force-restart=<pod>) restarts that pod now, without
	// waiting for its drain to finish. The operator removes the annotation once it has acted.
	AnnotationForceRestart = "cellstore.io/force-restart"
	// AnnotationHibernation (cellstore.io/hibernation=on) hibernates the cluster, as
	// CloudNativePG's cnpg.io/hibernation: the operator disables every enabled table (its regions
	// flush and close), then stops every pod; the data stays in storage. Removing the annotation
	// (or any other value) starts the pods again and enables those tables.
	AnnotationHibernation = "cellstore.io/hibernation"
)

// Defaults. They equal the CRD schema's defaults: the operator applies them to fields that are unset
// (an object written before a field existed) so that such an object renders exactly as one the API
// server defaulted, and an operator upgrade restarts nothing.
const (
	DefaultMasterReplicas         int32 = 2
	DefaultRegionServerReplicas   int32 = 3
	DefaultRegionReplication      int32 = 1
	DefaultHedgeDelay                   = 10 * time.Millisecond
	DefaultDrainTimeout                 = 10 * time.Minute
	DefaultImagePullPolicy              = corev1.PullIfNotPresent
	DefaultOnDrainTimeout               = DrainTimeoutWait
	DefaultVolumeReclaimPolicy          = VolumeRetain
	DefaultThrottleKind                 = ThrottleRequest
	defaultMasterCPURequest             = "250m"
	defaultMasterMemory                 = "1Gi"
	defaultRegionServerCPURequest       = "1"
)

// DefaultMasterResources are the master container's resources when none are set.
func DefaultMasterResources() corev1.ResourceRequirements {
	return corev1.ResourceRequirements{
		Requests: corev1.ResourceList{
			corev1.ResourceCPU:    resource.MustParse(defaultMasterCPURequest),
			corev1.ResourceMemory: resource.MustParse(defaultMasterMemory),
		},
		Limits: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse(defaultMasterMemory)},
	}
}

// DefaultRegionServerResources are the region server container's resources (other than memory,
// which is spec.regionServers.memory.limit) when none are set.
func DefaultRegionServerResources() corev1.ResourceRequirements {
	return corev1.ResourceRequirements{
		Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(defaultRegionServerCPURequest)},
	}
}

func emptyResources(r corev1.ResourceRequirements) bool {
	return len(r.Requests) == 0 && len(r.Limits) == 0 && len(r.Claims) == 0
}

// MasterReplicas is spec.master.replicas or its default.
func (s *StoreClusterSpec) MasterReplicas() int32 {
	if s.Master.Replicas > 0 {
		return s.Master.Replicas
	}
	return DefaultMasterReplicas
}

// RegionServerReplicas is spec.regionServers.replicas or its default.
func (s *StoreClusterSpec) RegionServerReplicas() int32 {
	if s.RegionServers.Replicas > 0 {
		return s.RegionServers.Replicas
	}
	return DefaultRegionServerReplicas
}

// MasterResources is spec.master.resources or its default.
func (s *StoreClusterSpec) MasterResources() corev1.ResourceRequirements {
	if emptyResources(s.Master.Resources) {
		return DefaultMasterResources()
	}
	return *s.Master.Resources.DeepCopy()
}

// RegionServerResources is spec.regionServers.resources or its default.
func (s *StoreClusterSpec) RegionServerResources() corev1.ResourceRequirements {
	if emptyResources(s.RegionServers.Resources) {
		return DefaultRegionServerResources()
	}
	return *s.RegionServers.Resources.DeepCopy()
}

// TLSEnabled says whether the cluster serves TLS and authenticates its callers (the default).
func (s *StoreClusterSpec) TLSEnabled() bool { return s.Security.TLS != TLSDisabled }

// TLSProvided says whether the certificates are the user's own (spec.security.tls Provided): the
// operator makes no CA and issues nothing.
func (s *StoreClusterSpec) TLSProvided() bool { return s.Security.TLS == TLSProvided }

// NetworkPolicyEnabled says whether the operator makes the region servers' NetworkPolicy.
func (s *StoreClusterSpec) NetworkPolicyEnabled() bool {
	return s.Security.NetworkPolicy == nil || *s.Security.NetworkPolicy
}

// PullPolicy is spec.imagePullPolicy or its default.
func (s *StoreClusterSpec) PullPolicy() corev1.PullPolicy {
	if s.ImagePullPolicy != "" {
		return s.ImagePullPolicy
	}
	return DefaultImagePullPolicy
}

// RegionReplication is spec.defaultRegionReplication or its default.
func (s *StoreClusterSpec) RegionReplication() int32 {
	if s.DefaultRegionReplication > 0 {
		return s.DefaultRegionReplication
	}
	return DefaultRegionReplication
}

// HedgeDelayDuration is spec.hedgeDelay or its default.
func (s *StoreClusterSpec) HedgeDelayDuration() time.Duration {
	if s.HedgeDelay != nil {
		return s.HedgeDelay.Duration
	}
	return DefaultHedgeDelay
}

// DrainTimeoutDuration is spec.rollout.drainTimeout or its default.
func (s *StoreClusterSpec) DrainTimeoutDuration() time.Duration {
	if s.Rollout.DrainTimeout != nil && s.Rollout.DrainTimeout.Duration > 0 {
		return s.Rollout.DrainTimeout.Duration
	}
	return DefaultDrainTimeout
}

// DrainTimeoutAction is spec.rollout.onDrainTimeout or its default.
func (s *StoreClusterSpec) DrainTimeoutAction() DrainTimeoutAction {
	if s.Rollout.OnDrainTimeout != "" {
		return s.Rollout.OnDrainTimeout
	}
	return DefaultOnDrainTimeout
}

// ServiceMonitorEnabled is spec.monitoring.serviceMonitor or its default (true).
func (s *StoreClusterSpec) ServiceMonitorEnabled() bool {
	return s.Monitoring.ServiceMonitor == nil || *s.Monitoring.ServiceMonitor
}

// PrometheusRuleEnabled is spec.monitoring.prometheusRule or its default (true).
func (s *StoreClusterSpec) PrometheusRuleEnabled() bool {
	return s.Monitoring.PrometheusRule == nil || *s.Monitoring.PrometheusRule
}

// ReclaimPolicy is spec.storage.volume.reclaimPolicy or its default.
func (v *VolumeStorage) Policy() VolumeReclaimPolicy {
	if v.ReclaimPolicy != "" {
		return v.ReclaimPolicy
	}
	return DefaultVolumeReclaimPolicy
}

// Kind is the quota's throttle type or its default.
func (q *QuotaSpec) Kind() ThrottleKind {
	if q.ThrottleType != "" {
		return q.ThrottleType
	}
	return DefaultThrottleKind
}

// WALArchiveInterval and WALArchiveRetention are spec.backup.walArchive's settings with their
// defaults.
func (w *WALArchiveSpec) WALArchiveInterval() time.Duration {
	if w == nil || w.Interval == nil {
		return time.Minute
	}
	return w.Interval.Duration
}

func (w *WALArchiveSpec) WALArchiveRetention() time.Duration {
	if w == nil || w.Retention == nil {
		return 7 * 24 * time.Hour
	}
	return w.Retention.Duration
}
