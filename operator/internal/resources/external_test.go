package resources

import (
	"maps"
	"slices"
	"testing"

	"github.com/cellstore/cellstore/operator/api/v1alpha1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestExternalServicesAndAddresses(t *testing.T) {
	c := minimalCluster()
	if s := ExternalServices(c, map[Group]int32{GroupMaster: 1, GroupRegionServer: 2}, "v1"); s != nil {
		t.Fatalf("services without spec.externalAccess: %d", len(s))
	}
	if a, m, p := ExternalAddresses(c, nil, nil); a != nil || m != nil || p != 0 {
		t.Fatalf("addresses without spec.externalAccess: %v %v %d", a, m, p)
	}
	pod := func(g Group, i int, hostIP string) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: PodName(c, g, i)}, Status: corev1.PodStatus{HostIP: hostIP}}
	}
	pods := map[Group][]*corev1.Pod{
		GroupMaster:       {pod(GroupMaster, 0, "10.0.0.1")},
		GroupRegionServer: {pod(GroupRegionServer, 0, "10.0.0.2"), pod(GroupRegionServer, 1, "")},
	}

	// NodePort: the pod's node unless a host is given; a pod not scheduled is pending.
	c.Spec.ExternalAccess = &v1alpha1.ExternalAccessSpec{Type: corev1.ServiceTypeNodePort}
	svcs := ExternalServices(c, map[Group]int32{GroupMaster: 1, GroupRegionServer: 2}, "v1")
	if len(svcs) != 3 || svcs[0].Name != "prod-master-0-ext" || svcs[2].Spec.Selector["statefulset.kubernetes.io/pod-name"] != "prod-regionserver-1" ||
		svcs[2].Spec.Ports[0].Port != RegionServerDataPort || svcs[0].Spec.Ports[0].Port != MasterGRPCPort || svcs[0].Labels[LabelExternal] != "true" {
		t.Fatalf("services: %+v", svcs)
	}
	var created []corev1.Service
	for i, s := range svcs {
		s := *s
		s.Spec.Ports = slices.Clone(s.Spec.Ports)
		s.Spec.Ports[0].NodePort = int32(30000 + i)
		created = append(created, s)
	}
	addrs, masters, pending := ExternalAddresses(c, pods, created)
	want := map[string]string{MasterServerName(c, "prod-master-0"): "10.0.0.1:30000", ServerName(c, "prod-regionserver-0"): "10.0.0.2:30001"}
	if !maps.Equal(addrs, want) || !slices.Equal(masters, []string{"10.0.0.1:30000"}) || pending != 1 {
		t.Errorf("NodePort: %v, masters %v, pending %d", addrs, masters, pending)
	}
	c.Spec.ExternalAccess.Host = "db.example.com"
	addrs, _, pending = ExternalAddresses(c, pods, created)
	if addrs[ServerName(c, "prod-regionserver-1")] != "db.example.com:30002" || pending != 0 {
		t.Errorf("NodePort with a host: %v, pending %d", addrs, pending)
	}

	// LoadBalancer: the ingress address and the Service port, pending until the cloud gives one;
	// a Service still of the old type does not count.
	c.Spec.ExternalAccess = &v1alpha1.ExternalAccessSpec{Type: corev1.ServiceTypeLoadBalancer}
	if _, _, pending := ExternalAddresses(c, pods, created); pending != 3 {
		t.Errorf("LoadBalancer over NodePort Services: %d pending, want 3", pending)
	}
	for i := range created {
		created[i].Spec.Type = corev1.ServiceTypeLoadBalancer
	}
	created[0].Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{IP: "198.51.100.1"}}
	created[1].Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{Hostname: "rs0.elb.example.com"}}
	addrs, masters, pending = ExternalAddresses(c, pods, created)
	want = map[string]string{MasterServerName(c, "prod-master-0"): "198.51.100.1:16000", ServerName(c, "prod-regionserver-0"): "rs0.elb.example.com:16020"}
	if !maps.Equal(addrs, want) || !slices.Equal(masters, []string{"198.51.100.1:16000"}) || pending != 1 {
		t.Errorf("LoadBalancer: %v, masters %v, pending %d", addrs, masters, pending)
	}
}
