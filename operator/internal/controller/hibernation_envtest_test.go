//go:build envtest

package controller_test

import (
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
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
})
