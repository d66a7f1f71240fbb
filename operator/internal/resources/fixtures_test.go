package resources

import (
	"github.com/cellstore/cellstore/operator/api/v1alpha1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"time"
)

// minimalCluster is a StoreCluster as a person writes it, before the API server's defaulting.
func minimalCluster() *v1alpha1.StoreCluster {
	return &v1alpha1.StoreCluster{
		ObjectMeta: metav1.ObjectMeta{Name: "prod", Namespace: "db", UID: "0b5e4a3c-5f0e-4c7e-9d7a-1c2d3e4f5a6b"},
		Spec: v1alpha1.StoreClusterSpec{
			Image:   "docker.io/cellstore/engine:v0.1.0",
			Storage: v1alpha1.StorageSpec{ExistingClaim: &v1alpha1.ExistingClaimStorage{ClaimName: "shared-data"}},
		},
	}
}

// defaultedCluster is minimalCluster as the API server stores it: every schema default filled in.
func defaultedCluster() *v1alpha1.StoreCluster {
	c := minimalCluster()
	s := &c.Spec
	s.ImagePullPolicy = corev1.PullIfNotPresent
	s.Master = v1alpha1.MasterSpec{Replicas: 2, Resources: corev1.ResourceRequirements{
		Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("250m"), corev1.ResourceMemory: resource.MustParse("1Gi")},
		Limits:   corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("1Gi")},
	}}
	s.RegionServers = v1alpha1.RegionServersSpec{
		Replicas:  3,
		Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1")}},
		Memory:    v1alpha1.RegionServerMemory{Limit: size("2Gi")},
	}
	s.DefaultRegionReplication = 1
	s.HedgeDelay = &metav1.Duration{Duration: 10 * time.Millisecond}
	s.Rollout = v1alpha1.RolloutSpec{DrainTimeout: &metav1.Duration{Duration: 10 * time.Minute}, OnDrainTimeout: v1alpha1.DrainTimeoutWait}
	s.Monitoring = v1alpha1.MonitoringSpec{ServiceMonitor: ptr.To(true), PrometheusRule: ptr.To(true)}
	return c
}

// productionCluster has every feature: budgets, hugepages, overrides, config.
func productionCluster() *v1alpha1.StoreCluster {
	c := defaultedCluster()
	s := &c.Spec
	s.RegionServers.Memory = v1alpha1.RegionServerMemory{
		Limit: size("16Gi"), HeapLimit: size("6Gi"), MemstoreOffHeapSize: size("4Gi"), BlockCacheOffHeapSize: size("4Gi"),
		BlockCacheOnHeapSize: size("512Mi"), HugePages: &v1alpha1.HugePagesSpec{PageSize: "2Mi", Amount: "8Gi"},
	}
	s.RegionServers.Scheduling.Tolerations = []corev1.Toleration{{Key: "dedicated", Value: "cellstore", Effect: corev1.TaintEffectNoSchedule}}
	s.PodTemplate = &v1alpha1.PodTemplateOverrides{
		Labels:            map[string]string{"team": "storage"},
		Annotations:       map[string]string{"example.com/owner": "storage"},
		Tolerations:       []corev1.Toleration{{Key: "cluster-wide", Operator: corev1.TolerationOpExists}},
		PriorityClassName: "cellstore-high",
	}
	s.Config = v1alpha1.EngineConfig{"flush-size": "256Mi"}
	s.RegionServers.Config = v1alpha1.EngineConfig{"compaction-threads": "2"}
	return c
}

func mustPlan(c *v1alpha1.StoreCluster) MemoryPlan {
	p, err := PlanRegionServerMemory(c.Spec.RegionServers.Memory)
	if err != nil {
		panic(err)
	}
	return p
}

func inputs(c *v1alpha1.StoreCluster, g Group) WorkloadInputs {
	_, hashes := ConfigMap(c, "v1")
	return WorkloadInputs{ConfigHash: hashes[g], Replicas: c.Spec.RegionServerReplicas(), OperatorVersion: "v1", Memory: mustPlan(c)}
}
