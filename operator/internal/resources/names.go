// Package resources holds the pure builders of the objects a StoreCluster needs: given the
// StoreCluster (and what the controller computed from it), each returns the desired object. They read
// nothing from the cluster and have no side effects, so they are tested as plain functions, and
// reconcile only compares what they return with what exists and applies the difference.
package resources

import (
	"fmt"
	"strings"

	"github.com/cellstore/cellstore/operator/api/v1alpha1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Group is one of the two kinds of pods.
type Group string

// The groups.
const (
	GroupMaster       Group = "master"
	GroupRegionServer Group = "regionserver"
)

// Labels.
const (
	LabelName      = "app.kubernetes.io/name"
	LabelInstance  = "app.kubernetes.io/instance"
	LabelComponent = "app.kubernetes.io/component"
	LabelManagedBy = "app.kubernetes.io/managed-by"
	// LabelMetrics marks the Services the ServiceMonitor selects.
	LabelMetrics = "cellstore.io/metrics"
	// LabelOperatorVersion is on the objects (never on pod templates: an operator upgrade must not
	// change a pod template by itself).
	LabelOperatorVersion = "cellstore.io/operator-version"

	AppName   = "cellstore"
	ManagedBy = "cellstore-operator"
)

// Annotations the operator keeps.
const (
	// AnnotationTemplateHash is on pod templates (so on pods): the hash of the rendered template.
	AnnotationTemplateHash = "cellstore.io/template-hash"
	// AnnotationConfigHash is on pod templates: the hash of the engine configuration file, so that
	// a configuration change is a pod template change with a recorded reason.
	AnnotationConfigHash = "cellstore.io/config-hash"
	// AnnotationCredentialsHash is on pod templates: a hash of the S3 keys given to the pods from
	// Secrets (WorkloadInputs.CredentialsHash).
	AnnotationCredentialsHash = "cellstore.io/credentials-hash"
	// AnnotationRenderedTemplate is on StatefulSets: the pod template as the operator rendered it
	// (before the API server's defaulting), the base of the field-level diff of the next change.
	AnnotationRenderedTemplate = "cellstore.io/rendered-template"
	// AnnotationRenderedConfig is on StatefulSets: the group's engine configuration file as last
	// applied, so that a configuration change is recorded with the flags that changed.
	AnnotationRenderedConfig = "cellstore.io/rendered-config"
	// AnnotationRestartHistory is on StatefulSets: the recent pod template changes with the field
	// paths that changed (JSON, newest last).
	AnnotationRestartHistory = "cellstore.io/restart-history"
	// AnnotationRollout is on StatefulSets: the rolling restart or scale-in step under way (JSON),
	// written by the region-assignment controller so that it resumes after an operator restart.
	AnnotationRollout = "cellstore.io/rollout"
	// AnnotationEngineVersion is on StatefulSets: the engine version their pod template runs
	// (spec.version, else the image's tag), which an image given by digest does not say.
	AnnotationEngineVersion = "cellstore.io/engine-version"
	// AnnotationBalancedReplicas is on the region server StatefulSet: the replica count at the last
	// balance after a scale-out.
	AnnotationBalancedReplicas = "cellstore.io/balanced-replicas"
	// AnnotationManagedQuotas is on the StoreCluster: the quotas the operator applied (JSON list of
	// quota identities), so that it removes only its own.
	AnnotationManagedQuotas = "cellstore.io/managed-quotas"
)

// Ports and paths of the engine (docs/operator.md, "Engine contract").
const (
	MasterGRPCPort       int32 = 16000
	MasterHTTPPort       int32 = 16010
	RegionServerDataPort int32 = 16020
	RegionServerAdmin    int32 = 16021
	RegionServerHTTPPort int32 = 16030

	EngineContainer = "engine"
	EngineBinary    = "/usr/local/bin/cellstore"
	EngineUID       = 65532

	SharedMountPath   = "/var/lib/cellstore/shared"
	ConfigMountPath   = "/etc/cellstore"
	HugePagesPath     = "/dev/hugepages"
	TmpPath           = "/tmp"
	volumeShared      = "shared"
	volumeConfig      = "config"
	volumeTmp         = "tmp"
	volumeHugePages   = "hugepages"
	portNameGRPC      = "grpc"
	portNameHTTP      = "http"
	portNameData      = "data"
	portNameAdmin     = "admin"
	metricsPortName   = portNameHTTP
	readinessPath     = "/readyz"
	livenessPath      = "/healthz"
	metricsPath       = "/metrics"
	shutdownMargin    = 30 // seconds beyond the drain timeout before the kubelet kills a region server
	masterGracePeriod = 60 // seconds for a master to hand over its Lease
)

// StatefulSetName is the StatefulSet (and headless Service, PDB) of a group.
func StatefulSetName(c *v1alpha1.StoreCluster, g Group) string { return c.Name + "-" + string(g) }

// ClientServiceName is the Service clients connect to (the masters' gRPC port).
func ClientServiceName(c *v1alpha1.StoreCluster) string { return c.Name }

// ConfigMapName holds the engine configuration file.
func ConfigMapName(c *v1alpha1.StoreCluster) string { return c.Name + "-config" }

// MasterAccountName is the master pods' ServiceAccount, Role and RoleBinding.
func MasterAccountName(c *v1alpha1.StoreCluster) string { return c.Name + "-master" }

// LeaseName is the master election Lease.
func LeaseName(c *v1alpha1.StoreCluster) string { return c.Name + "-master" }

// MonitoringName names the ServiceMonitor and the PrometheusRule.
func MonitoringName(c *v1alpha1.StoreCluster) string { return c.Name }

// SharedClaimName is the PersistentVolumeClaim every pod mounts ("" for S3).
func SharedClaimName(c *v1alpha1.StoreCluster) string {
	switch {
	case c.Spec.Storage.ExistingClaim != nil:
		return c.Spec.Storage.ExistingClaim.ClaimName
	case c.Spec.Storage.Volume != nil:
		return c.Name + "-shared"
	}
	return ""
}

// PodName is the name of the pod with the ordinal in a group.
func PodName(c *v1alpha1.StoreCluster, g Group, ordinal int) string {
	return fmt.Sprintf("%s-%d", StatefulSetName(c, g), ordinal)
}

// PodHost is the DNS name a pod advertises: POD.HEADLESS-SERVICE.NAMESPACE.svc.
func PodHost(c *v1alpha1.StoreCluster, g Group, pod string) string {
	return fmt.Sprintf("%s.%s.%s.svc", pod, StatefulSetName(c, g), c.Namespace)
}

// ServerName is the identity the master gives a region server: its advertised host and data port.
func ServerName(c *v1alpha1.StoreCluster, pod string) string {
	return fmt.Sprintf("%s:%d", PodHost(c, GroupRegionServer, pod), RegionServerDataPort)
}

// MasterServerName is the identity of a master: its advertised host and gRPC port.
func MasterServerName(c *v1alpha1.StoreCluster, pod string) string {
	return fmt.Sprintf("%s:%d", PodHost(c, GroupMaster, pod), MasterGRPCPort)
}

// PodOfServer returns the pod name of a server identity (host:port whose host starts with the pod
// name), or "" when the identity is not of this cluster's group.
func PodOfServer(c *v1alpha1.StoreCluster, g Group, server string) string {
	host, _, ok := strings.Cut(server, ":")
	if !ok {
		host = server
	}
	pod, rest, ok := strings.Cut(host, ".")
	if !ok || !strings.HasPrefix(rest, StatefulSetName(c, g)+".") {
		return ""
	}
	return pod
}

// MasterAddress is where the operator and the region servers (--masters) reach the masters: their
// headless Service, which resolves to every master pod (published before they are ready; a standby
// redirects to the active master). It does not change with the number of masters, so changing
// that restarts only the masters.
func MasterAddress(c *v1alpha1.StoreCluster) string {
	return fmt.Sprintf("%s.%s.svc:%d", StatefulSetName(c, GroupMaster), c.Namespace, MasterGRPCPort)
}

// SelectorLabels select a group's pods.
func SelectorLabels(c *v1alpha1.StoreCluster, g Group) map[string]string {
	return map[string]string{LabelName: AppName, LabelInstance: c.Name, LabelComponent: string(g)}
}

// ClusterLabels select everything of a cluster.
func ClusterLabels(c *v1alpha1.StoreCluster) map[string]string {
	return map[string]string{LabelName: AppName, LabelInstance: c.Name}
}

// objectLabels are the labels of an object the operator makes (not pod templates).
func objectLabels(c *v1alpha1.StoreCluster, g Group, operatorVersion string) map[string]string {
	l := map[string]string{LabelName: AppName, LabelInstance: c.Name, LabelManagedBy: ManagedBy}
	if g != "" {
		l[LabelComponent] = string(g)
	}
	if operatorVersion != "" {
		l[LabelOperatorVersion] = operatorVersion
	}
	return l
}

// OwnerReference makes the StoreCluster the controller of an object.
func OwnerReference(c *v1alpha1.StoreCluster) metav1.OwnerReference {
	return *metav1.NewControllerRef(c, v1alpha1.GroupVersion.WithKind("StoreCluster"))
}

func objectMeta(c *v1alpha1.StoreCluster, name string, g Group, operatorVersion string) metav1.ObjectMeta {
	return metav1.ObjectMeta{
		Name:            name,
		Namespace:       c.Namespace,
		Labels:          objectLabels(c, g, operatorVersion),
		OwnerReferences: []metav1.OwnerReference{OwnerReference(c)},
	}
}

// ImageTag is an image reference's tag ("" without one; a digest is not a tag).
func ImageTag(image string) string {
	if i := strings.IndexByte(image, '@'); i >= 0 {
		image = image[:i]
	}
	i := strings.LastIndexByte(image, ':')
	if i < 0 || strings.Contains(image[i:], "/") {
		return "" // the colon is a registry's port
	}
	return image[i+1:]
}

// EngineImageOf is the engine image c's pods run: spec.image, with spec.version as its tag when
// the image has neither a tag nor a digest.
func EngineImageOf(c *v1alpha1.StoreCluster) string {
	img := c.Spec.Image
	if c.Spec.Version != "" && !strings.Contains(img, "@") && ImageTag(img) == "" {
		return img + ":" + c.Spec.Version
	}
	return img
}

// EngineVersionOf is the engine version c asks for: spec.version, else its image's tag (which the
// upgrade rule checks only when it is a release version).
func EngineVersionOf(c *v1alpha1.StoreCluster) string {
	if c.Spec.Version != "" {
		return c.Spec.Version
	}
	return ImageTag(c.Spec.Image)
}

// EngineImage is the image of a pod spec's engine container ("" without one).
func EngineImage(spec *corev1.PodSpec) string {
	for _, ctr := range spec.Containers {
		if ctr.Name == EngineContainer {
			return ctr.Image
		}
	}
	return ""
}
