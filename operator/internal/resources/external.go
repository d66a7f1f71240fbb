package resources

import (
	"net"
	"slices"
	"strconv"

	"github.com/cellstore/cellstore/operator/api/v1alpha1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// LabelExternal marks the per-pod Services of spec.externalAccess.
const LabelExternal = "cellstore.io/external"

// ExternalServiceName is the name of a pod's external Service (at most 61 characters: cluster
// names are at most 40).
func ExternalServiceName(pod string) string { return pod + "-ext" }

// ExternalServices are the Services of spec.externalAccess (none without it): one per master and
// region server pod of the given replica counts, each selecting only its pod and exposing the
// port clients use (a master's gRPC port, a region server's data port).
func ExternalServices(c *v1alpha1.StoreCluster, replicas map[Group]int32, operatorVersion string) []*corev1.Service {
	ea := c.Spec.ExternalAccess
	if ea == nil {
		return nil
	}
	var out []*corev1.Service
	for _, g := range []Group{GroupMaster, GroupRegionServer} {
		port := tcpPort(portNameGRPC, MasterGRPCPort)
		if g == GroupRegionServer {
			port = tcpPort(portNameData, RegionServerDataPort)
		}
		for i := range int(replicas[g]) {
			pod := PodName(c, g, i)
			meta := objectMeta(c, ExternalServiceName(pod), g, operatorVersion)
			meta.Labels[LabelExternal] = "true"
			if len(ea.Annotations) > 0 {
				meta.Annotations = map[string]string{}
				for k, v := range ea.Annotations {
					meta.Annotations[k] = v
				}
			}
			sel := SelectorLabels(c, g)
			sel[appsv1.StatefulSetPodNameLabel] = pod
			out = append(out, &corev1.Service{
				TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Service"},
				ObjectMeta: meta,
				Spec: corev1.ServiceSpec{
					Type:     ea.Type,
					Selector: sel,
					Ports:    []corev1.ServicePort{port},
					// Not ready yet still reachable: a master elected but not ready answers
					// where the active one is, as the headless Service does.
					PublishNotReadyAddresses: true,
				},
			})
		}
	}
	return out
}

// ExternalAddresses computes what the masters publish (SetExternalAddresses): each server's
// advertised address mapped to where its external Service reaches it — host:nodePort for NodePort
// (host from spec.externalAccess.host, else the pod's node), the load balancer's address and the
// port for LoadBalancer. masters are the masters' external addresses (sorted); pending counts the
// pods that have none yet.
func ExternalAddresses(c *v1alpha1.StoreCluster, pods map[Group][]*corev1.Pod, services []corev1.Service) (addrs map[string]string, masters []string, pending int32) {
	ea := c.Spec.ExternalAccess
	if ea == nil {
		return nil, nil, 0
	}
	byName := map[string]*corev1.Service{}
	for i := range services {
		byName[services[i].Name] = &services[i]
	}
	addrs = map[string]string{}
	for _, g := range []Group{GroupMaster, GroupRegionServer} {
		for _, p := range pods[g] {
			if p.DeletionTimestamp != nil {
				continue
			}
			ext := externalAddress(ea, p, byName[ExternalServiceName(p.Name)])
			if ext == "" {
				pending++
				continue
			}
			internal := ServerName(c, p.Name)
			if g == GroupMaster {
				internal = MasterServerName(c, p.Name)
				masters = append(masters, ext)
			}
			addrs[internal] = ext
		}
	}
	slices.Sort(masters)
	return addrs, masters, pending
}

// externalAddress is where svc reaches pod from outside, or "" when not known yet.
func externalAddress(ea *v1alpha1.ExternalAccessSpec, pod *corev1.Pod, svc *corev1.Service) string {
	if svc == nil || len(svc.Spec.Ports) == 0 || svc.Spec.Type != ea.Type {
		return ""
	}
	port := svc.Spec.Ports[0]
	switch ea.Type {
	case corev1.ServiceTypeNodePort:
		host := ea.Host
		if host == "" {
			host = pod.Status.HostIP
		}
		if host == "" || port.NodePort == 0 {
			return ""
		}
		return net.JoinHostPort(host, strconv.Itoa(int(port.NodePort)))
	case corev1.ServiceTypeLoadBalancer:
		for _, in := range svc.Status.LoadBalancer.Ingress {
			host := in.IP
			if host == "" {
				host = in.Hostname
			}
			if host != "" {
				return net.JoinHostPort(host, strconv.Itoa(int(port.Port)))
			}
		}
	}
	return ""
}
