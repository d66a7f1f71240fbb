//go:build e2e

package e2e

import (
	"context"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
)

// The environment the rest of the suite stands on: locally built images run, StatefulSets get
// stable DNS names through a headless Service, and the default StorageClass gives writable volumes.
var _ = Describe("The test cluster", Label("environment"), func() {
	var ns string
	BeforeEach(func() { ns = newNamespace("env") })

	It("runs a pod from a locally built image as a non-root user", func(ctx SpecContext) {
		pod := netcheckPod("serve", corev1.RestartPolicyAlways, "serve")
		pod.Spec.Containers[0].ReadinessProbe = &corev1.Probe{ProbeHandler: corev1.ProbeHandler{
			HTTPGet: &corev1.HTTPGetAction{Port: intstr.FromInt32(8080)}}, PeriodSeconds: 1}
		_, err := kube.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{})
		Expect(err).NotTo(HaveOccurred())
		Eventually(func(g Gomega) {
			p, err := kube.CoreV1().Pods(ns).Get(ctx, "serve", metav1.GetOptions{})
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(podReady(p)).To(BeTrue(), "pod serve not Ready: %+v", p.Status.Conditions)
		}).WithContext(ctx).WithTimeout(2 * time.Minute).WithPolling(time.Second).Should(Succeed())
	})

	It("gives a 2-replica StatefulSet stable DNS names and writable volumes", func(ctx SpecContext) {
		svc := &corev1.Service{
			ObjectMeta: metav1.ObjectMeta{Name: "web"},
			Spec: corev1.ServiceSpec{
				ClusterIP: corev1.ClusterIPNone,
				Selector:  map[string]string{"app": "web"},
				Ports:     []corev1.ServicePort{{Name: "http", Port: 8080}},
			},
		}
		_, err := kube.CoreV1().Services(ns).Create(ctx, svc, metav1.CreateOptions{})
		Expect(err).NotTo(HaveOccurred())

		tmpl := netcheckPod("web", corev1.RestartPolicyAlways, "serve")
		// The init container proves the volume is writable by the image's non-root user.
		tmpl.Spec.Containers[0].VolumeMounts = []corev1.VolumeMount{{Name: "data", MountPath: "/data"}}
		tmpl.Spec.InitContainers = []corev1.Container{{
			Name: "write", Image: netcheckImage, ImagePullPolicy: corev1.PullIfNotPresent,
			Args:         []string{"write", "/data/marker", "written by a non-root user"},
			VolumeMounts: []corev1.VolumeMount{{Name: "data", MountPath: "/data"}},
		}}
		sts := &appsv1.StatefulSet{
			ObjectMeta: metav1.ObjectMeta{Name: "web"},
			Spec: appsv1.StatefulSetSpec{
				Replicas:            ptr.To[int32](2),
				ServiceName:         "web",
				PodManagementPolicy: appsv1.ParallelPodManagement,
				Selector:            &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}},
				Template: corev1.PodTemplateSpec{
					ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "web"}},
					Spec:       tmpl.Spec,
				},
				VolumeClaimTemplates: []corev1.PersistentVolumeClaim{{
					ObjectMeta: metav1.ObjectMeta{Name: "data"},
					Spec: corev1.PersistentVolumeClaimSpec{
						AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
						Resources:   corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("16Mi")}},
					},
				}},
			},
		}
		_, err = kube.AppsV1().StatefulSets(ns).Create(ctx, sts, metav1.CreateOptions{})
		Expect(err).NotTo(HaveOccurred())
		Eventually(func(g Gomega) {
			s, err := kube.AppsV1().StatefulSets(ns).Get(ctx, "web", metav1.GetOptions{})
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(s.Status.ReadyReplicas).To(BeEquivalentTo(2))
		}).WithContext(ctx).WithTimeout(3 * time.Minute).WithPolling(time.Second).Should(Succeed())

		web1, err := kube.CoreV1().Pods(ns).Get(ctx, "web-1", metav1.GetOptions{})
		Expect(err).NotTo(HaveOccurred())
		name := "web-1.web." + ns + ".svc.cluster.local"
		// DNS records follow pods asynchronously: retry the lookup until it answers with web-1's IP.
		Eventually(func(g Gomega) {
			out, ok := runToCompletion(ctx, ns, "resolve", "resolve", name)
			g.Expect(ok).To(BeTrue(), "resolve %s: %s", name, out)
			g.Expect(strings.Fields(out)).To(ConsistOf(web1.Status.PodIP))
		}).WithContext(ctx).WithTimeout(90 * time.Second).WithPolling(2 * time.Second).Should(Succeed())

		out, ok := runToCompletion(ctx, ns, "get", "get", "http://"+name+":8080/")
		Expect(ok).To(BeTrue(), "GET from web-1: %s", out)
		Expect(out).To(Equal("hello from web-1\n"))
	})
})

func netcheckPod(name string, restart corev1.RestartPolicy, args ...string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: corev1.PodSpec{
			RestartPolicy:                 restart,
			TerminationGracePeriodSeconds: ptr.To[int64](5),
			SecurityContext:               &corev1.PodSecurityContext{RunAsNonRoot: ptr.To(true)},
			Containers: []corev1.Container{{
				Name: "netcheck", Image: netcheckImage, ImagePullPolicy: corev1.PullIfNotPresent, Args: args,
				SecurityContext: &corev1.SecurityContext{
					AllowPrivilegeEscalation: ptr.To(false),
					ReadOnlyRootFilesystem:   ptr.To(true),
					Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
				},
			}},
		},
	}
}

// runToCompletion runs netcheck ARGS in a new pod named NAME-<n>, waits for it to end, and returns
// its output and whether it succeeded. The pod is deleted afterwards.
func runToCompletion(ctx context.Context, ns, name string, args ...string) (string, bool) {
	pod := netcheckPod("", corev1.RestartPolicyNever, args...)
	pod.GenerateName = name + "-"
	return runPod(ctx, ns, pod)
}

func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}
