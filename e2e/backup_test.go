//go:build e2e

package e2e

import (
	"fmt"
	"regexp"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/cellstore/cellstore/operator/api/v1alpha1"
)

// Backups (docs/snapshots.md): a scheduled StoreBackup of a loaded table to the backup location on
// the in-cluster S3 server, with the WAL archived there too; more writes and a delete, a time T,
// then more writes, deletes and the table dropped; a new StoreCluster bootstrapped from the backup
// to T (point-in-time recovery) has exactly the rows acknowledged before T; then that cluster
// hibernates (no pod left) and wakes with every row.
var _ = Describe("Backups of a StoreCluster", Ordered, Label("storecluster", "backup"), func() {
	const source, restored = "origin", "restored"
	const rows = 20000
	var ns string
	var completed string
	var target time.Time
	atT := 0 // rows row00000000.. at T

	backupLocation := func(c *v1alpha1.StoreCluster) {
		c.Spec.Backup = &v1alpha1.BackupSpec{S3: c.Spec.Storage.S3.S3Location,
			WALArchive: &v1alpha1.WALArchiveSpec{Interval: &metav1.Duration{Duration: 10 * time.Second}}}
		c.Spec.Backup.S3.Prefix = "backups/" + source
	}
	small := func(c *v1alpha1.StoreCluster, name string) {
		c.Spec.Storage.S3.Prefix = "clusters/" + name
		c.Spec.Master.Replicas = 1
		c.Spec.RegionServers.Replicas = 2
	}

	BeforeAll(func(ctx SpecContext) {
		buildPlugin(ctx)
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

		// A backup on demand with the kubectl plugin, of the one table.
		Expect(kubectlCellstore(ctx, "backup", source, "-n", ns, "--name", "by-plugin", "--tables", "default:orders")).
			To(ContainSubstring("storebackup/by-plugin created"))
		Eventually(func(g Gomega) {
			b := &v1alpha1.StoreBackup{}
			g.Expect(crc.Get(ctx, client.ObjectKey{Namespace: ns, Name: "by-plugin"}, b)).To(Succeed())
			g.Expect(b.Status.Phase).NotTo(Equal(v1alpha1.BackupFailed), "backup by-plugin failed: %s", b.Status.Error)
			g.Expect(b.Spec.Tables).To(Equal([]string{"default:orders"}))
			g.Expect(b.Status.Phase).To(Equal(v1alpha1.BackupCompleted))
			g.Expect(b.Status.Snapshots).To(ConsistOf(And(HaveField("Table", "default:orders"), HaveField("Copied", true))))
		}).WithContext(ctx).WithTimeout(4 * time.Minute).WithPolling(2 * time.Second).Should(Succeed())
	})

	It("writes and deletes after the backup, notes a time T, then writes, deletes and drops the table", func(ctx SpecContext) {
		Expect(completed).NotTo(BeEmpty())
		// Before T: ten more rows (the loader's keys and values), then the last of them deleted.
		var script strings.Builder
		for i := rows; i < rows+10; i++ {
			fmt.Fprintf(&script, "put 'orders', 'row%08d', 'f:q', 'value-of-row%08d'; ", i, i)
		}
		fmt.Fprintf(&script, "deleteall 'orders', 'row%08d'", rows+9)
		shell(ctx, ns, source, script.String())
		atT = rows + 9
		// T is a whole second (what targetTime holds) after every write above was acknowledged.
		target = time.Now().Truncate(time.Second).Add(time.Second)
		for !time.Now().After(target.Add(time.Millisecond)) {
			time.Sleep(10 * time.Millisecond) // the clock passes T
		}
		// After T: a row deleted, one changed, one added — none of it may be recovered.
		shell(ctx, ns, source, fmt.Sprintf("deleteall 'orders', 'row%08d'; put 'orders', 'row%08d', 'f:q', 'changed'; put 'orders', 'row%08d', 'f:q', 'value-of-row%08d'",
			5, 7, rows+20, rows+20))
		// Everything acknowledged so far is archived now (else within walArchive.interval).
		out := shell(ctx, ns, source, "archive_wal")
		GinkgoWriter.Print(out)
		Expect(out).To(ContainSubstring("region server(s)"))
		Expect(shell(ctx, ns, source, "disable 'orders'; drop 'orders'; list")).NotTo(ContainSubstring("orders"))
	})

	It("bootstraps a new StoreCluster from the backup to T, with exactly the rows acknowledged before T", func(ctx SpecContext) {
		Expect(completed).NotTo(BeEmpty())
		Expect(atT).NotTo(BeZero())
		// The source cluster is not needed any more: leave the node's cores to the new one.
		Expect(crc.Delete(ctx, &v1alpha1.StoreCluster{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: source}})).To(Succeed())

		c := sampleCluster("cellstore_v1alpha1_storecluster_minimal.yaml", ns, restored)
		small(c, restored)
		backupLocation(c)
		// It reads the origin's backups and archived WAL there; it does not archive its own WAL
		// to the same place (docs/snapshots.md: the archive is not scoped by cluster).
		c.Spec.Backup.WALArchive = nil
		c.Spec.Bootstrap = &v1alpha1.BootstrapSpec{Recovery: &v1alpha1.RecoverySpec{Backup: corev1.LocalObjectReference{Name: completed},
			TargetTime: &metav1.Time{Time: target}}}
		Expect(crc.Create(ctx, c)).To(Succeed())
		start := time.Now()
		Eventually(func(g Gomega) {
			cur := getCluster(ctx, ns, restored)
			g.Expect(cur.Status.Recovery).NotTo(BeNil())
			g.Expect(cur.Status.Recovery.CompletedAt).NotTo(BeNil(), "recovery: %+v; conditions %+v", cur.Status.Recovery, cur.Status.Conditions)
		}).WithContext(ctx).WithTimeout(8 * time.Minute).WithPolling(2 * time.Second).Should(Succeed())
		summary := fmt.Sprintf("recovered to %s in %v from %s", target.UTC().Format(time.RFC3339), time.Since(start).Round(time.Second), completed)
		GinkgoWriter.Println(summary)
		AddReportEntry("point-in-time recovery", summary)
		waitSettled(ctx, ns, restored, 4*time.Minute)
		// Rows 0..atT-1 with the loader's values, nothing else: the deleted row 5, the changed
		// row 7 and the added rows after T would show as missing, wrong or extra.
		GinkgoWriter.Printf("verify: %s", verifyRows(ctx, ns, "verify-restored", restored, "orders", atT))
		rec := getCluster(ctx, ns, restored).Status.Recovery
		Expect(rec.Backup).To(Equal(completed))
		Expect(rec.TargetTime).NotTo(BeNil())
		Expect(rec.TargetTime.Time.Equal(target)).To(BeTrue())
	})

	It("is operated with kubectl cellstore: status, shell, drain and undrain, move, balance, logs", func(ctx SpecContext) {
		out := kubectlCellstore(ctx, "status", restored, "-n", ns, "--master")
		GinkgoWriter.Println(out)
		Expect(out).To(And(ContainSubstring("Phase:"), ContainSubstring("Running"), ContainSubstring(restored+"-regionserver-1"),
			ContainSubstring("Conditions:"), ContainSubstring("The master's view:")))
		Expect(kubectlCellstore(ctx, "shell", restored, "-n", ns, "-e", "list")).To(ContainSubstring("orders"))
		// The shell without -e reads its verbs from standard input, as a user types them.
		Expect(kubectlCellstoreInput(ctx, "list\ncount 'orders'\nexit\n", "shell", restored, "-n", ns)).
			To(And(ContainSubstring("orders"), ContainSubstring(fmt.Sprintf("%d row(s)", atT))))
		// Drain a region server through the plugin: its regions move away; undrain lets it take some again.
		rs := restored + "-regionserver-1"
		Expect(kubectlCellstore(ctx, "drain", restored, rs, "-n", ns)).To(ContainSubstring("is draining"))
		Eventually(func(g Gomega) {
			for _, s := range getCluster(ctx, ns, restored).Status.Regions.PerServer {
				if s.Pod == rs {
					g.Expect(s.Draining).To(BeTrue())
					g.Expect(s.Regions).To(BeZero())
				}
			}
		}).WithContext(ctx).WithTimeout(2 * time.Minute).WithPolling(time.Second).Should(Succeed())
		kubectlCellstore(ctx, "undrain", restored, rs, "-n", ns)
		kubectlCellstore(ctx, "balance", restored, "-n", ns)
		Eventually(func(g Gomega) {
			for _, s := range getCluster(ctx, ns, restored).Status.Regions.PerServer {
				if s.Pod == rs {
					g.Expect(s.Draining).To(BeFalse())
					g.Expect(s.Regions).To(BeNumerically(">", 0))
				}
			}
		}).WithContext(ctx).WithTimeout(2 * time.Minute).WithPolling(time.Second).Should(Succeed())
		// Move a region of the table that another server holds onto it, by name, with the plugin.
		region := ""
		for _, l := range strings.Split(shell(ctx, ns, restored, "list_regions 'orders'"), "\n") {
			if f := strings.Fields(l); len(f) > 3 && f[1] == "0" && f[3] == "OPEN" && !strings.HasPrefix(f[2], rs+".") {
				region = f[0]
				break
			}
		}
		Expect(region).NotTo(BeEmpty(), "no open region of orders listed on a server other than %s", rs)
		kubectlCellstore(ctx, "move", restored, region, rs, "-n", ns)
		Eventually(func(g Gomega) {
			out := shell(ctx, ns, restored, "list_regions 'orders'")
			g.Expect(out).To(MatchRegexp(`(?m)^%s\s+0\s+%s\.\S*\s+OPEN\s`, regexp.QuoteMeta(region), regexp.QuoteMeta(rs)), "region %s is not open on %s:\n%s", region, rs, out)
		}).WithContext(ctx).WithTimeout(2 * time.Minute).WithPolling(time.Second).Should(Succeed())
		logs := kubectlCellstore(ctx, "logs", restored, "-n", ns, "--role", "master", "--tail", "5")
		Expect(logs).To(ContainSubstring("[" + restored + "-master-0] "))
		waitSettled(ctx, ns, restored, 4*time.Minute)
	})

	It("hibernates the restored cluster with no pod left, and wakes it with every row", func(ctx SpecContext) {
		setHibernation := func(on bool) {
			state := "off"
			if on {
				state = "on"
			}
			Expect(kubectlCellstore(ctx, "hibernate", restored, state, "-n", ns)).To(ContainSubstring("storecluster/" + restored))
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
		GinkgoWriter.Printf("verify: %s", verifyRows(ctx, ns, "verify-woken", restored, "orders", atT))
	})

})
