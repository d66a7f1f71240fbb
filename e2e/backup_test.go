//go:build e2e

package e2e

import (
	"fmt"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/cellstore/cellstore/operator/api/v1alpha1"
)

// Backups (docs/snapshots.md): a scheduled StoreBackup of a loaded table to the backup location on
// the in-cluster S3 server; the table dropped; a new StoreCluster bootstrapped from the backup has
// every row; then that cluster hibernates (no pod left) and wakes with every row.
var _ = Describe("Backups of a StoreCluster", Ordered, Label("storecluster", "backup"), func() {
	const source, restored = "origin", "restored"
	const rows = 20000
	var ns string
	var completed string

	backupLocation := func(c *v1alpha1.StoreCluster) {
		c.Spec.Backup = &v1alpha1.BackupSpec{S3: c.Spec.Storage.S3.S3Location}
		c.Spec.Backup.S3.Prefix = "backups/" + source
	}
	small := func(c *v1alpha1.StoreCluster, name string) {
		c.Spec.Storage.S3.Prefix = "clusters/" + name
		c.Spec.Master.Replicas = 1
		c.Spec.RegionServers.Replicas = 2
	}

	BeforeAll(func(ctx SpecContext) {
		installOperator(ctx)
		ns = newNamespace("backup")
		deployDevS3(ctx, ns)
	})

	It("runs a scheduled backup of a loaded cluster to its backup location", func(ctx SpecContext) {
		c := sampleCluster("cellstore_v1alpha1_storecluster_minimal.yaml", ns, source)
		small(c, source)
		backupLocation(c)
		Expect(crc.Create(ctx, c)).To(Succeed())
		waitSettled(ctx, ns, source, 8*time.Minute)
		GinkgoWriter.Printf("load: %s", runJob(ctx, ns, "load-orders", adminSecret(source), "load", "--masters", source+":16000",
			"--table", "orders", "--rows", "20000", "--splits", "4"))

		sb := &v1alpha1.StoreScheduledBackup{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "frequent"},
			Spec: v1alpha1.StoreScheduledBackupSpec{Cluster: source, Schedule: "@every 20s", Retention: v1alpha1.BackupRetention{Count: 2}}}
		Expect(crc.Create(ctx, sb)).To(Succeed())
		Eventually(func(g Gomega) {
			var list v1alpha1.StoreBackupList
			g.Expect(crc.List(ctx, &list, client.InNamespace(ns))).To(Succeed())
			for _, b := range list.Items {
				g.Expect(b.Status.Phase).NotTo(Equal(v1alpha1.BackupFailed), "backup %s failed: %s", b.Name, b.Status.Error)
				if b.Status.Phase == v1alpha1.BackupCompleted {
					completed = b.Name
				}
			}
			g.Expect(completed).NotTo(BeEmpty(), "no backup completed yet")
		}).WithContext(ctx).WithTimeout(4 * time.Minute).WithPolling(2 * time.Second).Should(Succeed())
		Eventually(func() error {
			cur := &v1alpha1.StoreScheduledBackup{}
			if err := crc.Get(ctx, client.ObjectKeyFromObject(sb), cur); err != nil {
				return err
			}
			cur.Spec.Suspend = true
			return crc.Update(ctx, cur)
		}).WithContext(ctx).WithTimeout(time.Minute).Should(Succeed())

		b := &v1alpha1.StoreBackup{}
		Expect(crc.Get(ctx, client.ObjectKey{Namespace: ns, Name: completed}, b)).To(Succeed())
		summary := fmt.Sprintf("backup %s: %d tables, %d files, %s at %s in %v", b.Name, b.Status.Tables, b.Status.Files, b.Status.Size, b.Status.Location,
			b.Status.StoppedAt.Sub(b.Status.StartedAt.Time))
		GinkgoWriter.Println(summary)
		AddReportEntry("backup", summary)
		Expect(b.Status.Snapshots).To(ContainElement(And(HaveField("Table", "default:orders"), HaveField("Copied", true))))
		out, err := kubectl(ctx, "-n", ns, "get", "storebackups", completed)
		Expect(err).NotTo(HaveOccurred())
		Expect(out).To(And(ContainSubstring("PHASE"), ContainSubstring("Completed"), ContainSubstring(source)))
		GinkgoWriter.Println(out)
	})

	It("bootstraps a new StoreCluster from the backup after the table was dropped, with every row", func(ctx SpecContext) {
		Expect(completed).NotTo(BeEmpty())
		Expect(shell(ctx, ns, source, "disable 'orders'; drop 'orders'; list")).NotTo(ContainSubstring("orders"))
		// The source cluster is not needed any more: leave the node's cores to the new one.
		Expect(crc.Delete(ctx, &v1alpha1.StoreCluster{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: source}})).To(Succeed())

		c := sampleCluster("cellstore_v1alpha1_storecluster_minimal.yaml", ns, restored)
		small(c, restored)
		backupLocation(c)
		c.Spec.Bootstrap = &v1alpha1.BootstrapSpec{Recovery: &v1alpha1.RecoverySpec{Backup: corev1.LocalObjectReference{Name: completed}}}
		Expect(crc.Create(ctx, c)).To(Succeed())
		start := time.Now()
		Eventually(func(g Gomega) {
			cur := getCluster(ctx, ns, restored)
			g.Expect(cur.Status.Recovery).NotTo(BeNil())
			g.Expect(cur.Status.Recovery.CompletedAt).NotTo(BeNil(), "recovery: %+v; conditions %+v", cur.Status.Recovery, cur.Status.Conditions)
		}).WithContext(ctx).WithTimeout(8 * time.Minute).WithPolling(2 * time.Second).Should(Succeed())
		GinkgoWriter.Printf("recovered in %v from %s\n", time.Since(start).Round(time.Second), completed)
		waitSettled(ctx, ns, restored, 4*time.Minute)
		GinkgoWriter.Printf("verify: %s", verifyRows(ctx, ns, "verify-restored", restored, "orders", rows))
		Expect(getCluster(ctx, ns, restored).Status.Recovery.Backup).To(Equal(completed))
	})

	It("hibernates the restored cluster with no pod left, and wakes it with every row", func(ctx SpecContext) {
		setHibernation := func(on bool) {
			updateCluster(ctx, ns, restored, func(c *v1alpha1.StoreCluster) {
				if c.Annotations == nil {
					c.Annotations = map[string]string{}
				}
				if on {
					c.Annotations[v1alpha1.AnnotationHibernation] = "on"
				} else {
					delete(c.Annotations, v1alpha1.AnnotationHibernation)
				}
			})
		}
		start := time.Now()
		setHibernation(true)
		Eventually(func(g Gomega) {
			c := getCluster(ctx, ns, restored)
			g.Expect(c.Status.Phase).To(Equal(v1alpha1.PhaseHibernated))
			pods, err := kube.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/instance=" + restored})
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(pods.Items).To(BeEmpty(), "pods left while hibernating")
		}).WithContext(ctx).WithTimeout(4 * time.Minute).WithPolling(2 * time.Second).Should(Succeed())
		hibernatedIn := time.Since(start).Round(time.Second)
		start = time.Now()
		setHibernation(false)
		waitSettled(ctx, ns, restored, 6*time.Minute)
		Eventually(func() *v1alpha1.HibernationStatus { return getCluster(ctx, ns, restored).Status.Hibernation }).
			WithContext(ctx).WithTimeout(2 * time.Minute).WithPolling(time.Second).Should(BeNil())
		summary := fmt.Sprintf("hibernated (every pod gone) in %v, awake and settled in %v", hibernatedIn, time.Since(start).Round(time.Second))
		GinkgoWriter.Println(summary)
		AddReportEntry("hibernation", summary)
		GinkgoWriter.Printf("verify: %s", verifyRows(ctx, ns, "verify-woken", restored, "orders", rows))
	})

})
