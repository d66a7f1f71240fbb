//go:build envtest

package controller_test

import (
	"fmt"
	"slices"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/cellstore/cellstore/operator/api/v1alpha1"
	"github.com/cellstore/cellstore/operator/internal/controller"
	"github.com/cellstore/cellstore/operator/internal/master/masterfake"
	"github.com/cellstore/cellstore/operator/internal/resources"
)

func withBackupLocation(c *v1alpha1.StoreCluster) {
	c.Spec.Backup = &v1alpha1.BackupSpec{S3: v1alpha1.S3Location{Endpoint: "http://minio:9000", Bucket: "backups", Prefix: "prod",
		PathStyle: true, CredentialsSecret: &corev1.LocalObjectReference{Name: "backup-keys"}}}
	backupKeys(c.Namespace)
}

// backupKeys makes the Secret withBackupLocation names (the operator waits for it).
func backupKeys(ns string) *corev1.Secret {
	sec := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "backup-keys"},
		Data: map[string][]byte{resources.S3AccessKeyIDKey: []byte("id"), resources.S3SecretAccessKeyKey: []byte("secret")}}
	if err := k8s.Create(suiteCtx, sec); err != nil && !apierrors.IsAlreadyExists(err) {
		Expect(err).NotTo(HaveOccurred())
	}
	return sec
}

// recovering is a StoreCluster like from, bootstrapped from StoreBackup backup (to target, when
// set), whose master reads from's backup location (from's backups are put in its fake); it is not
// made yet, so that a test may set its fake up first.
func recovering(from *v1alpha1.StoreCluster, name, backup string, target *metav1.Time) (*v1alpha1.StoreCluster, *masterfake.Fake) {
	c := &v1alpha1.StoreCluster{ObjectMeta: metav1.ObjectMeta{Namespace: from.Namespace, Name: name}, Spec: *from.Spec.DeepCopy()}
	c.Spec.Bootstrap = &v1alpha1.BootstrapSpec{Recovery: &v1alpha1.RecoverySpec{Backup: corev1.LocalObjectReference{Name: backup}, TargetTime: target}}
	fake := fakeOf(c)
	for name, table := range fakeOf(from).Backups() {
		fake.PutBackup(name, table)
	}
	return c, fake
}

func newBackup(ns, name, cluster string, tables ...string) *v1alpha1.StoreBackup {
	b := &v1alpha1.StoreBackup{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: v1alpha1.StoreBackupSpec{Cluster: cluster, Tables: tables}}
	Expect(k8s.Create(suiteCtx, b)).To(Succeed())
	return b
}

func backupNow(b *v1alpha1.StoreBackup) func() *v1alpha1.StoreBackup {
	return func() *v1alpha1.StoreBackup {
		cur := &v1alpha1.StoreBackup{}
		if err := k8s.Get(suiteCtx, client.ObjectKeyFromObject(b), cur); err != nil {
			return nil
		}
		return cur
	}
}

func backupPhase(b *v1alpha1.StoreBackup) func() v1alpha1.BackupPhase {
	return func() v1alpha1.BackupPhase {
		if cur := backupNow(b)(); cur != nil {
			return cur.Status.Phase
		}
		return ""
	}
}

func objectEvents(ns, kind, name, reason string) func() []string {
	return func() []string {
		list := &corev1.EventList{}
		Expect(k8s.List(suiteCtx, list, client.InNamespace(ns))).To(Succeed())
		var out []string
		for _, e := range list.Items {
			if e.InvolvedObject.Kind == kind && e.InvolvedObject.Name == name && e.Reason == reason {
				out = append(out, e.Message)
			}
		}
		return out
	}
}

var _ = Describe("Backups", func() {
	It("backs up every table through the master, retries a failed copy, and deletes its copies with it", func() {
		ns := newNamespace()
		c := create(newCluster(ns, withBackupLocation))
		waitRunning(c)
		fake := fakeOf(c)
		fake.SetTables("default:t1", "sales:t2")
		fake.FailCopies(1)
		fake.SetCopyCalls(2)
		fake.FailSnapshotDeletes(1) // after the first copy: its snapshot is deleted later

		// The masters get the backup location and its keys (never the values).
		args := statefulSet(c, resources.GroupMaster).Spec.Template.Spec.Containers[0].Args
		Expect(args).To(ContainElements("--backup-s3-endpoint=http://minio:9000", "--backup-s3-bucket=backups", "--backup-s3-prefix=prod", "--backup-s3-path-style"))
		env := statefulSet(c, resources.GroupMaster).Spec.Template.Spec.Containers[0].Env
		Expect(env).To(ContainElement(HaveField("Name", "CELLSTORE_BACKUP_S3_SECRET_ACCESS_KEY")))
		Expect(statefulSet(c, resources.GroupRegionServer).Spec.Template.Spec.Containers[0].Args).NotTo(ContainElement(ContainSubstring("--backup-")))

		b := newBackup(ns, "b1", c.Name)
		Eventually(backupPhase(b), timeout, poll).Should(Equal(v1alpha1.BackupCompleted))
		cur := backupNow(b)()
		Expect(cur.Status.Snapshots).To(HaveLen(2))
		Expect(cur.Status.Snapshots[0]).To(And(HaveField("Table", "default:t1"), HaveField("Snapshot", "b1.default.t1"), HaveField("Copied", true)))
		Expect(cur.Status.Tables).To(Equal(int32(2)))
		Expect(cur.Status.Files).To(Equal(int32(4)))
		Expect(cur.Status.Attempts).To(Equal(int32(1)))
		Expect(cur.Status.Location).To(Equal("s3://backups/prod"))
		Expect(cur.Status.StartedAt).NotTo(BeNil())
		Expect(cur.Status.StoppedAt).NotTo(BeNil())
		Expect(meta.FindStatusCondition(cur.Status.Conditions, controller.ConditionCompleted)).To(haveCondition(metav1.ConditionTrue, controller.ReasonBackupCompleted))
		Expect(fake.Backups()).To(Equal(map[string]string{"b1.default.t1": "default:t1", "b1.sales.t2": "sales:t2"}))
		Expect(fake.Snapshots()).To(BeEmpty(), "the cluster's snapshots go once copied")
		Eventually(objectEvents(ns, "StoreBackup", "b1", controller.ReasonCopyFailed), timeout, poll).Should(ContainElement(ContainSubstring("injected failure")))

		// A backup of a table that does not exist fails, and says which.
		missing := newBackup(ns, "b-missing", c.Name, "nope")
		Eventually(backupPhase(missing), timeout, poll).Should(Equal(v1alpha1.BackupFailed))
		Expect(backupNow(missing)().Status.Error).To(ContainSubstring("default:nope"))

		// Deleting the StoreBackup deletes its copies.
		Expect(k8s.Delete(suiteCtx, b)).To(Succeed())
		Eventually(func() bool {
			return apierrors.IsNotFound(k8s.Get(suiteCtx, client.ObjectKeyFromObject(b), &v1alpha1.StoreBackup{}))
		}, timeout, poll).Should(BeTrue())
		Expect(fake.Backups()).To(BeEmpty())
	})

	It("waits for the backup location's Secrets before changing the pods, and restarts them when its CA changes", func() {
		ns := newNamespace()
		c := create(newCluster(ns))
		waitRunning(c)
		masterArgs := func() []string { return statefulSet(c, resources.GroupMaster).Spec.Template.Spec.Containers[0].Args }
		By("a backup location whose Secret does not exist yet: the pods stay as they are")
		update(c, func(c *v1alpha1.StoreCluster) {
			c.Spec.Backup = &v1alpha1.BackupSpec{S3: v1alpha1.S3Location{Endpoint: "http://minio:9000", Bucket: "backups",
				CredentialsSecret: &corev1.LocalObjectReference{Name: "late-keys"},
				EndpointCA:        &corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "backup-ca"}, Key: "ca.crt"}}}
		})
		Eventually(condition(c, v1alpha1.ConditionDegraded), timeout, poll).Should(haveCondition(metav1.ConditionTrue,
			controller.ReasonBackupCredentialsMissing, "Secret late-keys (spec.backup.s3.credentialsSecret) does not exist"))
		Consistently(masterArgs, 2*time.Second, poll).ShouldNot(ContainElement(HavePrefix("--backup-s3-bucket")))
		By("the keys exist, the CA not yet")
		Expect(k8s.Create(suiteCtx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "late-keys"},
			Data: map[string][]byte{resources.S3AccessKeyIDKey: []byte("id"), resources.S3SecretAccessKeyKey: []byte("secret")}})).To(Succeed())
		Eventually(condition(c, v1alpha1.ConditionDegraded), timeout, poll).Should(haveCondition(metav1.ConditionTrue,
			controller.ReasonBackupCredentialsMissing, "Secret backup-ca (spec.backup.s3.endpointCA) does not exist"))
		By("both exist: the masters get the backup location")
		ca := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "backup-ca"}, Data: map[string][]byte{"ca.crt": []byte("first CA")}}
		Expect(k8s.Create(suiteCtx, ca)).To(Succeed())
		Eventually(masterArgs, timeout, poll).Should(ContainElement("--backup-s3-bucket=backups"))
		hash := func() string {
			return statefulSet(c, resources.GroupMaster).Spec.Template.Annotations[resources.AnnotationCredentialsHash]
		}
		Eventually(hash, timeout, poll).ShouldNot(BeEmpty())
		before := hash()
		By("a new CA in its Secret: the engine reads it at start, so the pods restart")
		ca.Data["ca.crt"] = []byte("second CA")
		Expect(k8s.Update(suiteCtx, ca)).To(Succeed())
		Eventually(hash, timeout, poll).ShouldNot(Equal(before))
	})

	It("fails a backup of a cluster without a backup location, with what to do", func() {
		ns := newNamespace()
		c := create(newCluster(ns))
		waitRunning(c)
		b := newBackup(ns, "b1", c.Name)
		Eventually(backupPhase(b), timeout, poll).Should(Equal(v1alpha1.BackupFailed))
		Expect(meta.FindStatusCondition(backupNow(b)().Status.Conditions, controller.ConditionCompleted)).To(
			haveCondition(metav1.ConditionFalse, controller.ReasonNoBackupLocation, "spec.backup"))
	})

	It("makes backups on a schedule, keeps the newest by the retention, and stops when suspended", func() {
		ns := newNamespace()
		c := create(newCluster(ns, withBackupLocation))
		waitRunning(c)
		fakeOf(c).SetTables("default:t1")
		sb := &v1alpha1.StoreScheduledBackup{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "nightly"},
			Spec: v1alpha1.StoreScheduledBackupSpec{Cluster: c.Name, Schedule: "@every 1s", Retention: v1alpha1.BackupRetention{Count: 2}}}
		Expect(k8s.Create(suiteCtx, sb)).To(Succeed())
		Eventually(objectEvents(ns, "StoreScheduledBackup", "nightly", "BackupCreated"), 20*time.Second, poll).Should(HaveLen(4))
		Eventually(objectEvents(ns, "StoreScheduledBackup", "nightly", "BackupDeleted"), 20*time.Second, poll).ShouldNot(BeEmpty())
		// (While the schedule runs, a backup every second, running backups and those whose copies
		// are being deleted come and go beside the two kept: what the retention keeps is checked
		// once the schedule is suspended, below.)

		// Bad schedules are refused with what a schedule looks like.
		bad := &v1alpha1.StoreScheduledBackup{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "bad"},
			Spec: v1alpha1.StoreScheduledBackupSpec{Cluster: c.Name, Schedule: "every day"}}
		Expect(k8s.Create(suiteCtx, bad)).To(Succeed())
		Eventually(func() *metav1.Condition {
			cur := &v1alpha1.StoreScheduledBackup{}
			if k8s.Get(suiteCtx, client.ObjectKeyFromObject(bad), cur) != nil {
				return nil
			}
			return meta.FindStatusCondition(cur.Status.Conditions, controller.ConditionReady)
		}, timeout, poll).Should(haveCondition(metav1.ConditionFalse, controller.ReasonInvalidSchedule, "five fields"))

		Eventually(func() error {
			cur := &v1alpha1.StoreScheduledBackup{}
			if err := k8s.Get(suiteCtx, client.ObjectKeyFromObject(sb), cur); err != nil {
				return err
			}
			cur.Spec.Suspend = true
			return k8s.Update(suiteCtx, cur)
		}, timeout, poll).Should(Succeed())
		Eventually(func() *metav1.Condition {
			cur := &v1alpha1.StoreScheduledBackup{}
			if k8s.Get(suiteCtx, client.ObjectKeyFromObject(sb), cur) != nil {
				return nil
			}
			return meta.FindStatusCondition(cur.Status.Conditions, controller.ConditionReady)
		}, timeout, poll).Should(haveCondition(metav1.ConditionTrue, controller.ReasonSuspended))
		n := len(objectEvents(ns, "StoreScheduledBackup", "nightly", "BackupCreated")())
		Consistently(func() int { return len(objectEvents(ns, "StoreScheduledBackup", "nightly", "BackupCreated")()) }, 3*time.Second, poll).Should(Equal(n))

		// Suspended, the schedule's backups settle: the newest two made are kept, completed, and
		// the others are gone.
		Eventually(func() error {
			var made []string // "StoreBackup NAME made (due …)": names end in the due time, so sort by it
			for _, msg := range objectEvents(ns, "StoreScheduledBackup", "nightly", "BackupCreated")() {
				if f := strings.Fields(msg); len(f) > 1 {
					made = append(made, f[1])
				}
			}
			slices.Sort(made)
			var list v1alpha1.StoreBackupList
			if err := k8s.List(suiteCtx, &list, client.InNamespace(ns)); err != nil {
				return err
			}
			var kept []string
			for _, b := range list.Items {
				if b.Status.Phase != v1alpha1.BackupCompleted {
					return fmt.Errorf("backup %s is %q", b.Name, b.Status.Phase)
				}
				kept = append(kept, b.Name)
			}
			slices.Sort(kept)
			if len(made) < 4 || !slices.Equal(kept, made[len(made)-2:]) {
				return fmt.Errorf("backups %v left of %v made, want the newest two", kept, made)
			}
			return nil
		}, timeout, poll).Should(Succeed())

		// A newer backup of the schedule whose deletion is under way (held here by a finalizer)
		// takes no place in the count: the two kept stay.
		var list v1alpha1.StoreBackupList
		Expect(k8s.List(suiteCtx, &list, client.InNamespace(ns))).To(Succeed())
		gone := &v1alpha1.StoreBackup{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "nightly-99991231000000",
			Finalizers: []string{"test.cellstore.io/hold"}}, Spec: v1alpha1.StoreBackupSpec{Cluster: c.Name}}
		Expect(k8s.Create(suiteCtx, gone)).To(Succeed())
		Expect(k8s.Delete(suiteCtx, gone)).To(Succeed())
		Eventually(func() error { // labelled only now, so the schedule never saw it undeleted
			cur := &v1alpha1.StoreBackup{}
			if err := k8s.Get(suiteCtx, client.ObjectKeyFromObject(gone), cur); err != nil {
				return err
			}
			cur.Labels = map[string]string{controller.LabelScheduledBackup: "nightly"}
			return k8s.Update(suiteCtx, cur)
		}, timeout, poll).Should(Succeed())
		Consistently(func() []string {
			var out []string
			for _, b := range list.Items {
				cur := &v1alpha1.StoreBackup{}
				if err := k8s.Get(suiteCtx, client.ObjectKeyFromObject(&b), cur); err != nil || !cur.DeletionTimestamp.IsZero() {
					out = append(out, b.Name)
				}
			}
			return out
		}, 3*time.Second, poll).Should(BeEmpty(), "kept backups deleted beside one already being deleted")
		Eventually(func() error {
			cur := &v1alpha1.StoreBackup{}
			if err := k8s.Get(suiteCtx, client.ObjectKeyFromObject(gone), cur); err != nil {
				return client.IgnoreNotFound(err)
			}
			cur.Finalizers = slices.DeleteFunc(cur.Finalizers, func(f string) bool { return f == "test.cellstore.io/hold" })
			return k8s.Update(suiteCtx, cur)
		}, timeout, poll).Should(Succeed())
	})

	It("skips a scheduled backup while the schedule's last one has not finished", func() {
		ns := newNamespace()
		c := create(newCluster(ns, withBackupLocation))
		waitRunning(c)
		fakeOf(c).SetTables("default:t1")
		fakeOf(c).SetCopyCalls(1 << 30) // the first backup's copy never ends
		sb := &v1alpha1.StoreScheduledBackup{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "often"},
			Spec: v1alpha1.StoreScheduledBackupSpec{Cluster: c.Name, Schedule: "@every 3s"}}
		Expect(k8s.Create(suiteCtx, sb)).To(Succeed())
		Eventually(objectEvents(ns, "StoreScheduledBackup", "often", "BackupSkipped"), 20*time.Second, poll).Should(
			ContainElement(ContainSubstring("has not finished")))
		Expect(objectEvents(ns, "StoreScheduledBackup", "often", "BackupCreated")()).To(HaveLen(1))
		// Unfinished for two periods, it is stuck: the schedule goes on beside it.
		Eventually(objectEvents(ns, "StoreScheduledBackup", "often", "BackupCreated"), 20*time.Second, poll).Should(HaveLen(2))
		var list v1alpha1.StoreBackupList
		Expect(k8s.List(suiteCtx, &list, client.InNamespace(ns))).To(Succeed())
		Expect(list.Items).To(HaveLen(2))
	})

	It("keeps a backup a cluster is being recovered from until its recovery completes", func() {
		ns := newNamespace()
		c := create(newCluster(ns, withBackupLocation))
		waitRunning(c)
		fakeOf(c).SetTables("default:orders")
		b := newBackup(ns, "b1", c.Name)
		Eventually(backupPhase(b), timeout, poll).Should(Equal(v1alpha1.BackupCompleted))
		c2, fake2 := recovering(c, "restored", "b1", nil)
		fake2.SetCopyCalls(1 << 30) // the import never ends
		create(c2)
		Eventually(condition(c2, v1alpha1.ConditionProgressing), timeout, poll).Should(
			haveCondition(metav1.ConditionTrue, controller.ReasonRecovering, "importing table default:orders"))

		Expect(k8s.Delete(suiteCtx, b)).To(Succeed())
		Eventually(objectEvents(ns, "StoreBackup", "b1", "BackupInUse"), timeout, poll).Should(ContainElement(ContainSubstring("StoreCluster restored is being recovered from this backup")))
		Expect(backupNow(b)()).NotTo(BeNil(), "deleted while a recovery reads it")
		Expect(fakeOf(c).Backups()).To(HaveKey("b1.default.orders"), "its copies stay")

		// Once nothing recovers from it, it goes.
		Expect(k8s.Delete(suiteCtx, get(c2))).To(Succeed())
		Eventually(backupNow(b), timeout, poll).Should(BeNil())
		Expect(fakeOf(c).Backups()).NotTo(HaveKey("b1.default.orders"))
	})

	It("says why a table's restore fails at the master, and completes once it succeeds", func() {
		ns := newNamespace()
		c := create(newCluster(ns, withBackupLocation))
		waitRunning(c)
		fakeOf(c).SetTables("default:orders")
		b := newBackup(ns, "b1", c.Name)
		Eventually(backupPhase(b), timeout, poll).Should(Equal(v1alpha1.BackupCompleted))
		c2, fake2 := recovering(c, "restored", "b1", nil)
		fake2.FailRestoreForTest("default:orders", "the WAL archive has a gap")
		create(c2)
		Eventually(condition(c2, v1alpha1.ConditionProgressing), timeout, poll).Should(
			haveCondition(metav1.ConditionTrue, controller.ReasonRecovering, "fails at the master, which retries: the WAL archive has a gap"))
		Eventually(eventsOf(c2, "RestoreFailing"), timeout, poll).Should(ContainElement(ContainSubstring("the WAL archive has a gap")))
		Expect(get(c2).Status.Recovery).To(Or(BeNil(), HaveField("CompletedAt", BeNil())))
		fake2.FailRestoreForTest("default:orders", "")
		Eventually(func() *v1alpha1.RecoveryStatus { return get(c2).Status.Recovery }, 2*timeout, poll).Should(
			HaveField("CompletedAt", Not(BeNil())))
	})

	It("bootstraps a new cluster from a completed backup and says where it came from", func() {
		ns := newNamespace()
		c := create(newCluster(ns, withBackupLocation))
		waitRunning(c)
		fakeOf(c).SetTables("default:orders", "default:users")
		b := newBackup(ns, "b1", c.Name)
		Eventually(backupPhase(b), timeout, poll).Should(Equal(v1alpha1.BackupCompleted))

		c2, fake2 := recovering(c, "restored", "b1", nil)
		create(c2)
		Eventually(func() *v1alpha1.RecoveryStatus { return get(c2).Status.Recovery }, 2*timeout, poll).Should(And(Not(BeNil()),
			HaveField("CompletedAt", Not(BeNil())), HaveField("Backup", "b1"), HaveField("Cluster", c.Name)))
		Expect(fake2.Restored()).To(Equal([]string{"b1.default.orders", "b1.default.users"}))
		tables := get(c2).Status.Recovery.Restored
		Expect(slices.Sorted(slices.Values(tables))).To(Equal([]string{"b1.default.orders", "b1.default.users"}))
		Eventually(eventsOf(c2, "Recovered"), timeout, poll).ShouldNot(BeEmpty())

		// To a point in time: the target goes to the master with each restore, and to status; a
		// target before the backup was taken is refused, saying which backup to name.
		bk := &v1alpha1.StoreBackup{}
		Expect(k8s.Get(suiteCtx, client.ObjectKey{Namespace: ns, Name: "b1"}, bk)).To(Succeed())
		target := metav1.NewTime(bk.Status.StartedAt.Add(90 * time.Second).UTC().Truncate(time.Second))
		c3, fake3 := recovering(c, "pitr", "b1", &target)
		create(c3)
		Eventually(func() *v1alpha1.RecoveryStatus { return get(c3).Status.Recovery }, 2*timeout, poll).Should(And(Not(BeNil()),
			HaveField("CompletedAt", Not(BeNil())), HaveField("TargetTime", Not(BeNil()))))
		Expect(get(c3).Status.Recovery.TargetTime.Equal(&target)).To(BeTrue())
		Expect(fake3.Journal()).To(ContainElement("restore b1.default.orders until " + target.UTC().Format(time.RFC3339)))
		early := metav1.NewTime(bk.Status.StartedAt.Add(-time.Hour))
		c4, _ := recovering(c, "too-early", "b1", &early)
		create(c4)
		Eventually(condition(c4, v1alpha1.ConditionDegraded), timeout, poll).Should(
			haveCondition(metav1.ConditionTrue, controller.ReasonRecoveryTargetBeforeBackup, "name an earlier backup"))
		Expect(fakeOf(c4).Restored()).To(BeEmpty())
		// A target after the backup started but before its last table's snapshot was taken is
		// refused too, before any table is restored (the master would refuse that table's
		// restore with the tables before it already restored).
		Expect(bk.Status.Snapshots).To(HaveEach(HaveField("TakenAt", Not(BeNil()))))
		mid := metav1.NewTime(bk.Status.StartedAt.Add(time.Second))
		c6, _ := recovering(c, "mid-backup", "b1", &mid)
		create(c6)
		Eventually(condition(c6, v1alpha1.ConditionDegraded), timeout, poll).Should(
			haveCondition(metav1.ConditionTrue, controller.ReasonRecoveryTargetBeforeBackup, "had taken its snapshots"))
		Expect(fakeOf(c6).Restored()).To(BeEmpty())

		// A backed-up table that exists in the new cluster before the recovery reaches it (an
		// application made it) is not counted restored: the recovery stops there, saying so,
		// and restores it once it is dropped.
		c5, fake5 := recovering(c, "app-first", "b1", nil)
		fake5.SetTables("default:users")
		create(c5)
		Eventually(condition(c5, v1alpha1.ConditionDegraded), 2*timeout, poll).Should(
			haveCondition(metav1.ConditionTrue, controller.ReasonRecoveryTableExists, "table default:users exists in the cluster but was not restored by this recovery"))
		Expect(fake5.Restored()).To(Equal([]string{"b1.default.orders"}))
		Expect(get(c5).Status.Recovery.CompletedAt).To(BeNil())
		fake5.SetTables("default:orders") // users dropped
		Eventually(func() *v1alpha1.RecoveryStatus { return get(c5).Status.Recovery }, 2*timeout, poll).Should(HaveField("CompletedAt", Not(BeNil())))
		Expect(fake5.Restored()).To(Equal([]string{"b1.default.orders", "b1.default.users"}))

		// bootstrap cannot change afterwards, nor be added to a cluster that exists.
		cur := get(c2)
		cur.Spec.Bootstrap = nil
		Expect(k8s.Update(suiteCtx, cur)).To(MatchError(ContainSubstring("bootstrap cannot be set, changed or removed")))
		cur = get(c)
		cur.Spec.Bootstrap = c2.Spec.Bootstrap
		Expect(k8s.Update(suiteCtx, cur)).To(MatchError(ContainSubstring("bootstrap cannot be set, changed or removed")))
	})
})
