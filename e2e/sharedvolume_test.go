//go:build e2e

package e2e

import (
	"fmt"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/cellstore/cellstore/operator/api/v1alpha1"
)

// The shared-volume mode: a StoreCluster whose data is on one ReadWriteMany volume. The local
// cluster's default StorageClass, like kind's and the clouds' defaults, makes only ReadWriteOnce
// volumes: a cluster that asks it for one says so in its conditions; the non-default class
// "shared" makes ReadWriteMany volumes and runs the smaller set of scenarios of this mode (the
// main suite runs on S3).
var _ = Describe("A StoreCluster on a shared volume", Ordered, Label("storecluster", "shared-volume"), func() {
	const name = "onvolume"
	var ns string

	BeforeAll(func(ctx SpecContext) {
		installOperator(ctx)
		ns = newNamespace("volume")
	})

	It("says, within a minute, that the default ReadWriteOnce class cannot provision its volume", func(ctx SpecContext) {
		c := sampleCluster("cellstore_v1alpha1_storecluster_minimal.yaml", ns, "pending")
		c.Spec.Master.Replicas = 1
		c.Spec.RegionServers.Replicas = 1
		c.Spec.Storage = v1alpha1.StorageSpec{Volume: &v1alpha1.VolumeStorage{Size: "1Gi", ReclaimPolicy: v1alpha1.VolumeDelete}}
		Expect(crc.Create(ctx, c)).To(Succeed())
		Eventually(func(g Gomega) {
			cur := getCluster(ctx, ns, "pending")
			st := conditionOf(cur, v1alpha1.ConditionStorageReady)
			g.Expect(st).NotTo(BeNil(), "no StorageReady condition yet")
			g.Expect(st.Status).To(Equal(metav1.ConditionFalse))
			g.Expect(st.Reason).To(Equal("StoragePending"))
			g.Expect(st.Message).To(ContainSubstring("Only support ReadWriteOnce access mode"), "the provisioner's words")
			dg := conditionOf(cur, v1alpha1.ConditionDegraded)
			g.Expect(dg).NotTo(BeNil())
			g.Expect(dg.Status).To(Equal(metav1.ConditionTrue))
		}).WithContext(ctx).WithTimeout(time.Minute).WithPolling(time.Second).Should(Succeed())
		Expect(crc.Delete(ctx, c)).To(Succeed())
	})

	It("becomes Available on a ReadWriteMany volume of the class \"shared\"", func(ctx SpecContext) {
		c := sampleCluster("cellstore_v1alpha1_storecluster_minimal.yaml", ns, name)
		c.Spec.Master.Replicas = 1
		c.Spec.RegionServers.Replicas = 2
		c.Spec.Storage = v1alpha1.StorageSpec{Volume: &v1alpha1.VolumeStorage{Size: "5Gi", StorageClassName: ptr.To("shared"),
			ReclaimPolicy: v1alpha1.VolumeDelete}}
		Expect(crc.Create(ctx, c)).To(Succeed())
		c = waitSettled(ctx, ns, name, 8*time.Minute)
		Expect(c.Status.RegionServers.Ready).To(BeEquivalentTo(2))
		out := shell(ctx, ns, name, "create 'smoke', 'f'; put 'smoke', 'r1', 'f:q', 'hello'; get 'smoke', 'r1'")
		Expect(out).To(ContainSubstring("value=hello"))
	})

	It("loads 20k rows into a pre-split table and reads them back", func(ctx SpecContext) {
		runJob(ctx, ns, "load-rows", adminSecret(name), "load", "--masters", name+":16000", "--table", "loaded", "--rows", "20000", "--splits", "4")
		verifyRows(ctx, ns, "verify-rows", name, "loaded", 20000)
	})

	It("splits a region of the loaded table and reads every row back", func(ctx SpecContext) {
		// The middle of the first of the table's 4 regions [row00000000, row00005000).
		Expect(shell(ctx, ns, name, "split 'loaded', 'row00002500'")).To(ContainSubstring("split region"))
		Eventually(func(g Gomega) {
			out := shell(ctx, ns, name, "list_regions 'loaded'")
			g.Expect(out).To(ContainSubstring("5 row(s)"), "the split region's daughters are not both listed:\n%s", out)
			g.Expect(strings.Count(out, " OPEN ")).To(Equal(5), "not every region is open:\n%s", out)
			g.Expect(out).To(ContainSubstring(`"row00002500" "row00005000"`))
		}).WithContext(ctx).WithTimeout(time.Minute).WithPolling(time.Second).Should(Succeed())
		verifyRows(ctx, ns, "verify-split", name, "loaded", 20000)
	})

	It("recovers a force-deleted region server from its WAL, losing no acknowledged write", func(ctx SpecContext) {
		_, err := kube.CoreV1().Pods(ns).Create(ctx, loadcheckPod("load", name, adminSecret(name), "--table", "live", "--writers", "2", "--readers", "2"), metav1.CreateOptions{})
		Expect(err).NotTo(HaveOccurred())
		Eventually(func() int64 { return loadcheck(ctx, ns, "load", "GET", "stats").Writes }).
			WithContext(ctx).WithTimeout(3 * time.Minute).WithPolling(time.Second).Should(BeNumerically(">", 100))
		// A server holding regions, as the status reports them (it follows the master's at the
		// operator's next poll).
		victim := ""
		Eventually(func() string {
			for _, s := range getCluster(ctx, ns, name).Status.Regions.PerServer {
				if s.Regions > 0 && s.Pod != "" {
					victim = s.Pod
				}
			}
			return victim
		}).WithContext(ctx).WithTimeout(time.Minute).WithPolling(time.Second).ShouldNot(BeEmpty(), "no region server holds a region in the status")
		forceDelete(ctx, ns, name, victim)
		s := loadcheck(ctx, ns, "load", "POST", "stop")
		report := fmt.Sprintf("load on a shared volume through the force-deletion of %s: %s", victim, s)
		GinkgoWriter.Println(report)
		AddReportEntry("shared-volume recovery", report)
		Expect(s.Writes).To(BeNumerically(">", 0))
		Expect(s.Mismatches).To(BeZero(), "reads returned wrong values: %s", s)
		Expect(s.Lost+s.VerifyFailed).To(BeZero(), "acknowledged writes lost or unreadable: %s", s)
	})
})
