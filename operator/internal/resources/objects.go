package resources

import (
	"github.com/cellstore/cellstore/operator/api/v1alpha1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

func tcpPort(name string, port int32) corev1.ServicePort {
	return corev1.ServicePort{Name: name, Port: port, TargetPort: intstr.FromString(name), Protocol: corev1.ProtocolTCP}
}

// HeadlessService gives a group's pods their DNS names (POD.NAME-GROUP.NAMESPACE.svc), also before
// they are Ready: masters elect and region servers register under these names.
func HeadlessService(c *v1alpha1.StoreCluster, g Group, operatorVersion string) *corev1.Service {
	ports := []corev1.ServicePort{tcpPort(portNameGRPC, MasterGRPCPort), tcpPort(portNameHTTP, MasterHTTPPort)}
	if g == GroupRegionServer {
		ports = []corev1.ServicePort{tcpPort(portNameData, RegionServerDataPort), tcpPort(portNameAdmin, RegionServerAdmin), tcpPort(portNameHTTP, RegionServerHTTPPort)}
	}
	meta := objectMeta(c, StatefulSetName(c, g), g, operatorVersion)
	meta.Labels[LabelMetrics] = "true"
	return &corev1.Service{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Service"},
		ObjectMeta: meta,
		Spec: corev1.ServiceSpec{
			ClusterIP:                corev1.ClusterIPNone,
			PublishNotReadyAddresses: true,
			Selector:                 SelectorLabels(c, g),
			Ports:                    ports,
		},
	}
}

// ClientService is where clients start: the masters' gRPC port, Ready masters only.
func ClientService(c *v1alpha1.StoreCluster, operatorVersion string) *corev1.Service {
	return &corev1.Service{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Service"},
		ObjectMeta: objectMeta(c, ClientServiceName(c), "", operatorVersion),
		Spec: corev1.ServiceSpec{
			Type:     corev1.ServiceTypeClusterIP,
			Selector: SelectorLabels(c, GroupMaster),
			Ports:    []corev1.ServicePort{tcpPort(portNameGRPC, MasterGRPCPort)},
		},
	}
}

// PodDisruptionBudget lets voluntary disruptions (node drains) take one pod of a group at a time.
func PodDisruptionBudget(c *v1alpha1.StoreCluster, g Group, operatorVersion string) *policyv1.PodDisruptionBudget {
	one := intstr.FromInt32(1)
	return &policyv1.PodDisruptionBudget{
		TypeMeta:   metav1.TypeMeta{APIVersion: "policy/v1", Kind: "PodDisruptionBudget"},
		ObjectMeta: objectMeta(c, StatefulSetName(c, g), g, operatorVersion),
		Spec: policyv1.PodDisruptionBudgetSpec{
			MaxUnavailable: &one,
			Selector:       &metav1.LabelSelector{MatchLabels: SelectorLabels(c, g)},
		},
	}
}

// MasterServiceAccount is the masters' identity for their election Lease.
func MasterServiceAccount(c *v1alpha1.StoreCluster, operatorVersion string) *corev1.ServiceAccount {
	return &corev1.ServiceAccount{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "ServiceAccount"},
		ObjectMeta: objectMeta(c, MasterAccountName(c), GroupMaster, operatorVersion),
	}
}

// MasterLeaseRole allows the masters to create their Lease and to read, watch and renew that one
// Lease (a standby watches it to take over the moment it is released).
func MasterLeaseRole(c *v1alpha1.StoreCluster, operatorVersion string) *rbacv1.Role {
	return &rbacv1.Role{
		TypeMeta:   metav1.TypeMeta{APIVersion: "rbac.authorization.k8s.io/v1", Kind: "Role"},
		ObjectMeta: objectMeta(c, MasterAccountName(c), GroupMaster, operatorVersion),
		Rules: []rbacv1.PolicyRule{
			// create cannot be limited by name (the object does not exist yet).
			{APIGroups: []string{"coordination.k8s.io"}, Resources: []string{"leases"}, Verbs: []string{"create"}},
			{APIGroups: []string{"coordination.k8s.io"}, Resources: []string{"leases"}, ResourceNames: []string{LeaseName(c)}, Verbs: []string{"get", "update", "list", "watch"}},
		},
	}
}

// MasterLeaseRoleBinding binds MasterLeaseRole to the masters' ServiceAccount.
func MasterLeaseRoleBinding(c *v1alpha1.StoreCluster, operatorVersion string) *rbacv1.RoleBinding {
	return &rbacv1.RoleBinding{
		TypeMeta:   metav1.TypeMeta{APIVersion: "rbac.authorization.k8s.io/v1", Kind: "RoleBinding"},
		ObjectMeta: objectMeta(c, MasterAccountName(c), GroupMaster, operatorVersion),
		RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: MasterAccountName(c)},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: MasterAccountName(c), Namespace: c.Namespace}},
	}
}

// SharedClaim is the ReadWriteMany claim of spec.storage.volume (nil for other kinds). With
// reclaimPolicy Retain it has no owner, so deleting the StoreCluster keeps the data.
func SharedClaim(c *v1alpha1.StoreCluster, size resource.Quantity, operatorVersion string) *corev1.PersistentVolumeClaim {
	v := c.Spec.Storage.Volume
	if v == nil {
		return nil
	}
	meta := objectMeta(c, SharedClaimName(c), "", operatorVersion)
	if v.Policy() == v1alpha1.VolumeRetain {
		meta.OwnerReferences = nil
	}
	return &corev1.PersistentVolumeClaim{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "PersistentVolumeClaim"},
		ObjectMeta: meta,
		Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes:      []corev1.PersistentVolumeAccessMode{corev1.ReadWriteMany},
			StorageClassName: v.StorageClassName,
			Resources:        corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: size}},
		},
	}
}
