//go:build envtest

package controller_test

import (
	"errors"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/cellstore/cellstore/operator/api/v1alpha1"
	"github.com/cellstore/cellstore/operator/internal/controller"
	"github.com/cellstore/cellstore/operator/internal/resources"
)

var _ = Describe("Hibernation", func() {
	It("disables the enabled tables, stops every pod, and wakes with those tables enabled again", func() {
		ns := newNamespace()
		c := create(newCluster(ns))
		waitRunning(c)
		fake := fakeOf(c)
		fake.SetTables("default:a", "sales:b", "default:off")
		fake.DisableForTest("default:off")

		update(c, func(c *v1alpha1.StoreCluster) {
			if c.Annotations == nil {
				c.Annotations = map[string]string{}
			}
			c.Annotations[v1alpha1.AnnotationHibernation] = "on"
		})
		Eventually(func() v1alpha1.ClusterPhase { return get(c).Status.Phase }, timeout, poll).Should(Equal(v1alpha1.PhaseHibernated))
		Eventually(condition(c, v1alpha1.ConditionProgressing), timeout, poll).Should(haveCondition(metav1.ConditionFalse, controller.ReasonHibernated))
		Expect(condition(c, v1alpha1.ConditionAvailable)()).To(haveCondition(metav1.ConditionFalse, controller.ReasonHibernated, "remove the annotation"))
		Expect(condition(c, v1alpha1.ConditionDegraded)()).To(HaveField("Status", metav1.ConditionFalse))
		for _, g := range []resources.Group{resources.GroupMaster, resources.GroupRegionServer} {
			Expect(ptr.Deref(statefulSet(c, g).Spec.Replicas, -1)).To(BeZero(), "group %s", g)
		}
		list := &corev1.PodList{}
		Expect(k8s.List(suiteCtx, list, client.InNamespace(ns), client.MatchingLabels(resources.ClusterLabels(c)))).To(Succeed())
		for _, p := range list.Items { // envtest has no kubelet: deleted pods keep their deletion mark
			Expect(p.DeletionTimestamp).NotTo(BeNil(), "pod %s still runs", p.Name)
		}
		h := get(c).Status.Hibernation
		Expect(h).NotTo(BeNil())
		Expect(h.Tables).To(Equal([]string{"default:a", "sales:b"}), "the tables that were enabled")
		Expect(fake.Disabled("default:a") && fake.Disabled("sales:b")).To(BeTrue(), "tables disabled before the pods stopped")
		Eventually(eventsOf(c, controller.ReasonHibernated), timeout, poll).ShouldNot(BeEmpty())

		// A task that fails while the cluster sleeps needs a person all the same (here, certificates
		// of our own that do not exist), and a wake it stops says so instead of "remove the
		// annotation".
		spec := get(c).Spec.Security.DeepCopy()
		update(c, func(c *v1alpha1.StoreCluster) {
			c.Spec.Security.TLS = v1alpha1.TLSProvided
			c.Spec.Security.Certificates = &v1alpha1.ProvidedCertificates{ServerSecretName: "ours", ClientSecretName: "ours-client"}
		})
		Eventually(condition(c, v1alpha1.ConditionDegraded), timeout, poll).Should(haveCondition(metav1.ConditionTrue, controller.ReasonTLSSecretMissing))
		Expect(get(c).Status.Phase).To(Equal(v1alpha1.PhaseDegraded))
		update(c, func(c *v1alpha1.StoreCluster) { delete(c.Annotations, v1alpha1.AnnotationHibernation) })
		Eventually(condition(c, v1alpha1.ConditionAvailable), timeout, poll).Should(haveCondition(metav1.ConditionFalse, controller.ReasonHibernated, "waking", "task certificates goes first"))
		update(c, func(c *v1alpha1.StoreCluster) { c.Spec.Security = *spec })
		waitRunning(c)
		Eventually(func() *v1alpha1.HibernationStatus { return get(c).Status.Hibernation }, timeout, poll).Should(BeNil())
		Expect(fake.Disabled("default:a") || fake.Disabled("sales:b")).To(BeFalse(), "the recorded tables are enabled again")
		Expect(fake.Disabled("default:off")).To(BeTrue(), "a table that was disabled before stays disabled")
		Eventually(eventsOf(c, "Woken"), timeout, poll).ShouldNot(BeEmpty())
	})

	It("restarts a master stuck on a bad template while the cluster wakes", func() {
		ns := newNamespace()
		c := create(newCluster(ns, func(c *v1alpha1.StoreCluster) { c.Spec.Master.Replicas = 1 }))
		waitRunning(c)
		fake := fakeOf(c)
		fake.SetTables("default:a")
		update(c, func(c *v1alpha1.StoreCluster) {
			if c.Annotations == nil {
				c.Annotations = map[string]string{}
			}
			c.Annotations[v1alpha1.AnnotationHibernation] = "on"
		})
		Eventually(func() v1alpha1.ClusterPhase { return get(c).Status.Phase }, timeout, poll).Should(Equal(v1alpha1.PhaseHibernated))
		name := resources.PodName(c, resources.GroupMaster, 0)
		kubelet.holdNotReady(ns, name, true)
		fake.SetUnreachable(errors.New("connection refused"))
		update(c, func(c *v1alpha1.StoreCluster) { delete(c.Annotations, v1alpha1.AnnotationHibernation) })
		pod := &corev1.Pod{}
		Eventually(func() error {
			if err := k8s.Get(suiteCtx, client.ObjectKey{Namespace: ns, Name: name}, pod); err != nil {
				return err
			}
			if pod.DeletionTimestamp != nil {
				return errors.New("the hibernated pod is still there")
			}
			return nil
		}, timeout, poll).Should(Succeed())
		// Its image cannot be pulled, for ten minutes now.
		pod.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionFalse,
			LastTransitionTime: metav1.NewTime(time.Now().Add(-10 * time.Minute))}}
		pod.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "engine", State: corev1.ContainerState{
			Waiting: &corev1.ContainerStateWaiting{Reason: "ImagePullBackOff", Message: "Back-off pulling image"}}}}
		Expect(k8s.Status().Update(suiteCtx, pod)).To(Succeed())
		Expect(get(c).Status.Hibernation).NotTo(BeNil(), "still waking")
		// The spec is fixed: the pod is restarted although the cluster is still waking.
		update(c, func(c *v1alpha1.StoreCluster) { c.Spec.HedgeDelay = &metav1.Duration{Duration: 20 * time.Millisecond} })
		Eventually(func() types.UID {
			cur := &corev1.Pod{}
			if err := k8s.Get(suiteCtx, client.ObjectKey{Namespace: ns, Name: name}, cur); err != nil {
				return pod.UID
			}
			return cur.UID
		}, timeout, poll).ShouldNot(Equal(pod.UID))
		Eventually(eventsOf(c, "RollingRestart"), timeout, poll).Should(ContainElement(ContainSubstring("while no master answers")))
		kubelet.holdNotReady(ns, name, false)
		fake.SetUnreachable(nil)
		waitRunning(c)
		Eventually(func() *v1alpha1.HibernationStatus { return get(c).Status.Hibernation }, timeout, poll).Should(BeNil())
	})
})
