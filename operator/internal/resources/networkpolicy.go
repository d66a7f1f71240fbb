package resources

import (
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/cellstore/cellstore/operator/api/v1alpha1"
)

// RegionServerNetworkPolicy admits to the region servers clients on the data port (any pod: the
// data path authenticates every connection), anyone on the HTTP port (probes, Prometheus,
// /prestop answers only the loopback), and only the cluster's own pods on the Admin port (the
// master's orders, replication between region servers). The operator never dials a region server
// (it talks to the masters only), so it is not admitted there. The masters need no policy of
// their own: their one gRPC port serves clients, servers and the operator alike, from any
// namespace.
func RegionServerNetworkPolicy(c *v1alpha1.StoreCluster, operatorVersion string) *networkingv1.NetworkPolicy {
	port := func(p int32) []networkingv1.NetworkPolicyPort {
		return []networkingv1.NetworkPolicyPort{{Port: ptrIntOrString(p)}}
	}
	return &networkingv1.NetworkPolicy{
		TypeMeta:   metav1.TypeMeta{APIVersion: "networking.k8s.io/v1", Kind: "NetworkPolicy"},
		ObjectMeta: objectMeta(c, StatefulSetName(c, GroupRegionServer), GroupRegionServer, operatorVersion),
		Spec: networkingv1.NetworkPolicySpec{
			PodSelector: metav1.LabelSelector{MatchLabels: SelectorLabels(c, GroupRegionServer)},
			PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress},
			Ingress: []networkingv1.NetworkPolicyIngressRule{
				{Ports: port(RegionServerDataPort)},
				{Ports: port(RegionServerHTTPPort)},
				{Ports: port(RegionServerAdmin), From: []networkingv1.NetworkPolicyPeer{
					{PodSelector: &metav1.LabelSelector{MatchLabels: map[string]string{LabelName: AppName, LabelInstance: c.Name}}},
				}},
			},
		},
	}
}

func ptrIntOrString(p int32) *intstr.IntOrString {
	v := intstr.FromInt32(p)
	return &v
}
