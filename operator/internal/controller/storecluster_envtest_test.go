//go:build envtest

package controller_test

import (
	"os"
	"strings"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/cellstore/cellstore/engine/storage/s3/s3test"
	"github.com/cellstore/cellstore/operator/api/v1alpha1"
	"github.com/cellstore/cellstore/operator/internal/controller"
	"github.com/cellstore/cellstore/operator/internal/resources"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

var _ = Describe("StoreCluster controller", func() {
	It("makes the objects, owned by the StoreCluster, and reports what it observes", func() {
		ns := newNamespace()
		c := create(newCluster(ns))
		waitRunning(c)

		owned := func(obj client.Object, name string) {
			GinkgoHelper()
			Expect(k8s.Get(suiteCtx, client.ObjectKey{Namespace: ns, Name: name}, obj)).To(Succeed(), "%T %s", obj, name)
			Expect(obj.GetOwnerReferences()).To(ContainElement(HaveField("Name", "store")), "%T %s", obj, name)
		}
		owned(&corev1.ConfigMap{}, "store-config")
		owned(&corev1.Service{}, "store")
		owned(&corev1.Service{}, "store-master")
		owned(&corev1.Service{}, "store-regionserver")
		owned(&appsv1.StatefulSet{}, "store-master")
		owned(&appsv1.StatefulSet{}, "store-regionserver")
		owned(&policyv1.PodDisruptionBudget{}, "store-master")
		owned(&policyv1.PodDisruptionBudget{}, "store-regionserver")
		owned(&corev1.ServiceAccount{}, "store-master")
		owned(&rbacv1.Role{}, "store-master")
		owned(&rbacv1.RoleBinding{}, "store-master")

		rs := statefulSet(c, resources.GroupRegionServer)
		Expect(rs.Spec.UpdateStrategy.Type).To(Equal(appsv1.OnDeleteStatefulSetStrategyType))
		Expect(*rs.Spec.Replicas).To(BeEquivalentTo(3))
		Expect(rs.Annotations).To(HaveKey(resources.AnnotationRenderedTemplate))

		cur := get(c)
		Expect(cur.Status.Masters).To(Equal(v1alpha1.MastersStatus{Replicas: 2, Ready: 2, Updated: 2, Active: "store-master-0"}))
		Expect(cur.Status.RegionServers).To(Equal(v1alpha1.RegionServersStatus{Replicas: 3, Ready: 3, Updated: 3,
			Selector: "app.kubernetes.io/component=regionserver,app.kubernetes.io/instance=store,app.kubernetes.io/name=cellstore"}))
		Expect(cur.Status.Regions.PerServer).To(HaveLen(3))
		Expect(cond(cur, v1alpha1.ConditionAvailable)).To(haveCondition(metav1.ConditionTrue, controller.ReasonServing, "active master store-master-0"))
		Expect(cond(cur, v1alpha1.ConditionProgressing)).To(haveCondition(metav1.ConditionFalse, controller.ReasonComplete))
		Expect(cond(cur, v1alpha1.ConditionDegraded)).To(haveCondition(metav1.ConditionFalse, controller.ReasonAsExpected))
		Eventually(eventsOf(c, "Created"), timeout, poll).Should(ContainElement(ContainSubstring("created StatefulSet store-regionserver")))
		// The first time every region server serves, the operator asks for a balance.
		Eventually(func() int { return fakeOf(c).Count("Balance") }, timeout, poll).Should(BeNumerically(">=", 1))
	})
})

var _ = Describe("StoreCluster controller: refused specs", func() {
	It("refuses an engine image the running version cannot be rolled to, and keeps running the old one", func() {
		ns := newNamespace()
		const repo = "registry.example:5000/cellstore/engine"
		c := create(newCluster(ns, func(c *v1alpha1.StoreCluster) { c.Spec.Image = repo + ":v1.3.2" }))
		waitRunning(c)
		image := func(g resources.Group) func() string {
			return func() string { return resources.EngineImage(&statefulSet(c, g).Spec.Template.Spec) }
		}
		update(c, func(c *v1alpha1.StoreCluster) { c.Spec.Image = repo + ":v1.5.0" })
		Eventually(condition(c, v1alpha1.ConditionDegraded), timeout, poll).Should(haveCondition(metav1.ConditionTrue, controller.ReasonVersionSkew,
			"the cluster keeps running v1.3.2", "upgrade one minor version at a time (to v1.4.x first)"))
		Expect(image(resources.GroupMaster)()).To(Equal(repo + ":v1.3.2"))
		Expect(image(resources.GroupRegionServer)()).To(Equal(repo + ":v1.3.2"))
		update(c, func(c *v1alpha1.StoreCluster) { c.Spec.Image = repo + ":v1.2.0" })
		Eventually(condition(c, v1alpha1.ConditionDegraded), timeout, poll).Should(haveCondition(metav1.ConditionTrue, controller.ReasonVersionSkew, "minor downgrade"))

		update(c, func(c *v1alpha1.StoreCluster) { c.Spec.Image = repo + ":v1.4.0" })
		Eventually(image(resources.GroupMaster), timeout, poll).Should(Equal(repo + ":v1.4.0"))
		Eventually(image(resources.GroupRegionServer), timeout, poll).Should(Equal(repo + ":v1.4.0"))
		Eventually(condition(c, v1alpha1.ConditionDegraded), timeout, poll).ShouldNot(haveCondition(metav1.ConditionTrue, controller.ReasonVersionSkew))
	})

	It("runs spec.version as the image's tag, shows the version the processes report, and checks an image given by digest by that version", func() {
		ns := newNamespace()
		const repo = "registry.example:5000/cellstore/engine"
		digest := func(b string) string { return repo + "@sha256:" + strings.Repeat(b, 32) }
		c := create(newCluster(ns, func(c *v1alpha1.StoreCluster) { c.Spec.Image, c.Spec.Version = repo, "v1.3.2" }))
		fakeOf(c).SetVersions("v1.3.1", "v1.3.2")
		waitRunning(c)
		image := func(g resources.Group) func() string {
			return func() string { return resources.EngineImage(&statefulSet(c, g).Spec.Template.Spec) }
		}
		Expect(image(resources.GroupMaster)()).To(Equal(repo + ":v1.3.2"))
		Expect(image(resources.GroupRegionServer)()).To(Equal(repo + ":v1.3.2"))
		Eventually(func() string { return get(c).Status.Version }, timeout, poll).Should(Equal("v1.3.1, v1.3.2"))

		// The same version by digest: no tag on any pod, the processes' report is what runs.
		fakeOf(c).SetVersions("v1.3.2")
		Eventually(func() string { return get(c).Status.Version }, timeout, poll).Should(Equal("v1.3.2"))
		update(c, func(c *v1alpha1.StoreCluster) { c.Spec.Image = digest("ab") })
		Eventually(image(resources.GroupRegionServer), timeout, poll).Should(Equal(digest("ab")))
		Eventually(image(resources.GroupMaster), timeout, poll).Should(Equal(digest("ab")))
		Eventually(func(g Gomega) { // every pod runs the digest: no tag says which version runs
			st := get(c).Status
			g.Expect(st.Masters.Updated).To(Equal(st.Masters.Replicas))
			g.Expect(st.RegionServers.Updated).To(Equal(st.RegionServers.Replicas))
			g.Expect(st.Rollout).To(BeNil())
		}, timeout, poll).Should(Succeed())
		update(c, func(c *v1alpha1.StoreCluster) { c.Spec.Image, c.Spec.Version = digest("cd"), "v1.5.0" })
		Eventually(condition(c, v1alpha1.ConditionDegraded), timeout, poll).Should(haveCondition(metav1.ConditionTrue, controller.ReasonVersionSkew,
			"spec.version v1.5.0 is refused, the cluster keeps running v1.3.2", "upgrade one minor version at a time (to v1.4.x first)"))
		Expect(image(resources.GroupMaster)()).To(Equal(digest("ab")))
		update(c, func(c *v1alpha1.StoreCluster) { c.Spec.Version = "v1.4.0" })
		Eventually(image(resources.GroupMaster), timeout, poll).Should(Equal(digest("cd")))
		Eventually(condition(c, v1alpha1.ConditionDegraded), timeout, poll).ShouldNot(haveCondition(metav1.ConditionTrue, controller.ReasonVersionSkew))

		// The processes' report is late (here: never comes): the StatefulSets say their templates
		// run v1.4.0, so going back to a v1.3 digest is a minor downgrade all the same.
		Eventually(func() map[string]string { return statefulSet(c, resources.GroupRegionServer).Annotations }, timeout, poll).
			Should(HaveKeyWithValue(resources.AnnotationEngineVersion, "v1.4.0"))
		update(c, func(c *v1alpha1.StoreCluster) { c.Spec.Image, c.Spec.Version = digest("ef"), "v1.3.5" })
		Eventually(condition(c, v1alpha1.ConditionDegraded), timeout, poll).Should(haveCondition(metav1.ConditionTrue, controller.ReasonVersionSkew,
			"spec.version v1.3.5 is refused", "minor downgrade"))
		Expect(image(resources.GroupMaster)()).To(Equal(digest("cd")))
	})

	It("checks S3 storage — credentials Secret, then the bucket itself — and makes workloads only when it can be used", func() {
		if os.Getenv("CELLSTORE_S3_SERVER") == "" {
			Skip("needs an S3 server: make test builds it, or set CELLSTORE_S3_SERVER=$(hack/s3-server.sh)")
		}
		srv := s3test.Start(suiteT)
		ns := newNamespace()
		c := create(&v1alpha1.StoreCluster{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "s3"},
			Spec: v1alpha1.StoreClusterSpec{Image: "x", Storage: v1alpha1.StorageSpec{S3: &v1alpha1.S3Storage{S3Location: v1alpha1.S3Location{
				Endpoint: srv.Endpoint, Bucket: "cluster-data", Prefix: "prod", PathStyle: true,
				CredentialsSecret: &corev1.LocalObjectReference{Name: "s3-keys"},
			}}}},
		})
		noWorkloads := func() {
			err := k8s.Get(suiteCtx, client.ObjectKey{Namespace: ns, Name: "s3-regionserver"}, &appsv1.StatefulSet{})
			Expect(apierrors.IsNotFound(err)).To(BeTrue(), "no StatefulSet while the bucket cannot be used: %v", err)
		}
		By("no Secret: a condition that names it and its keys")
		Eventually(condition(c, v1alpha1.ConditionStorageReady), timeout, poll).Should(haveCondition(metav1.ConditionFalse,
			controller.ReasonStorageCredentialsMissing, "Secret s3-keys (spec.storage.s3.credentialsSecret) does not exist", "AWS_SECRET_ACCESS_KEY"))
		Eventually(condition(c, v1alpha1.ConditionDegraded), timeout, poll).Should(haveCondition(metav1.ConditionTrue, controller.ReasonStorageCredentialsMissing))
		noWorkloads()

		By("a Secret without the secret key")
		sec := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "s3-keys"},
			Data: map[string][]byte{"AWS_ACCESS_KEY_ID": []byte(s3test.AccessKey)}}
		Expect(k8s.Create(suiteCtx, sec)).To(Succeed())
		Eventually(condition(c, v1alpha1.ConditionStorageReady), timeout, poll).Should(haveCondition(metav1.ConditionFalse,
			controller.ReasonStorageCredentialsMissing, "has no key AWS_SECRET_ACCESS_KEY"))

		By("wrong keys: the store's refusal, naming the access key")
		sec.Data["AWS_SECRET_ACCESS_KEY"] = []byte("not-the-secret")
		Expect(k8s.Update(suiteCtx, sec)).To(Succeed())
		Eventually(condition(c, v1alpha1.ConditionStorageReady), timeout, poll).Should(haveCondition(metav1.ConditionFalse,
			controller.ReasonStorageUnreachable, "cluster-data"))

		By("the right keys, but no such bucket: it says to create it")
		sec.Data["AWS_SECRET_ACCESS_KEY"] = []byte(s3test.SecretKey)
		Expect(k8s.Update(suiteCtx, sec)).To(Succeed())
		Eventually(condition(c, v1alpha1.ConditionStorageReady), timeout, poll).Should(haveCondition(metav1.ConditionFalse,
			controller.ReasonStorageUnreachable, "cluster-data", "create"))
		noWorkloads()

		By("the bucket exists: storage is ready and the pods get the bucket's flags and the Secret's keys")
		srv.CreateBucket(suiteT, "cluster-data")
		Eventually(condition(c, v1alpha1.ConditionStorageReady), timeout, poll).Should(haveCondition(metav1.ConditionTrue, controller.ReasonStorageReady))
		for _, g := range []string{"s3-master", "s3-regionserver"} {
			sts := &appsv1.StatefulSet{}
			Eventually(func() error { return k8s.Get(suiteCtx, client.ObjectKey{Namespace: ns, Name: g}, sts) }, timeout, poll).Should(Succeed())
			ctr := sts.Spec.Template.Spec.Containers[0]
			Expect(ctr.Args).To(ContainElements("--s3-endpoint="+srv.Endpoint, "--s3-bucket=cluster-data", "--s3-prefix=prod", "--s3-path-style"))
			Expect(ctr.Args).NotTo(ContainElement(HavePrefix("--storage-dir")))
			Expect(ctr.Env).To(ContainElement(And(HaveField("Name", "CELLSTORE_S3_SECRET_ACCESS_KEY"),
				HaveField("ValueFrom.SecretKeyRef.Name", "s3-keys"), HaveField("ValueFrom.SecretKeyRef.Key", "AWS_SECRET_ACCESS_KEY"))))
			for _, v := range sts.Spec.Template.Spec.Volumes {
				Expect(v.PersistentVolumeClaim).To(BeNil(), "no shared claim on S3")
			}
			// The keys' hash is on the template: new keys in the Secret restart the pods (they
			// read them only when they start).
			Expect(sts.Spec.Template.Annotations).To(HaveKeyWithValue(resources.AnnotationCredentialsHash, Not(BeEmpty())))
		}
		By("new keys in the Secret change the hash the templates carry")
		before, err := controller.CredentialsHashOf(suiteCtx, k8s, get(c))
		Expect(err).NotTo(HaveOccurred())
		sec.Data["AWS_SECRET_ACCESS_KEY"] = []byte("rotated")
		Expect(k8s.Update(suiteCtx, sec)).To(Succeed())
		after, err := controller.CredentialsHashOf(suiteCtx, k8s, get(c))
		Expect(err).NotTo(HaveOccurred())
		Expect(after).NotTo(Equal(before))
	})

	It("waits for a missing existing claim and goes on once it exists", func() {
		ns := newNamespace()
		c := create(&v1alpha1.StoreCluster{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "late"},
			Spec:       v1alpha1.StoreClusterSpec{Image: "x", Storage: v1alpha1.StorageSpec{ExistingClaim: &v1alpha1.ExistingClaimStorage{ClaimName: "later"}}},
		})
		Eventually(condition(c, v1alpha1.ConditionDegraded), timeout, poll).Should(haveCondition(metav1.ConditionTrue,
			controller.ReasonStorageClaimMissing, "task storage: PersistentVolumeClaim later (spec.storage.existingClaim.claimName) does not exist"))
		sharedClaim(ns, "later")
		waitRunning(c)
	})

	It("makes a ReadWriteMany claim for spec.storage.volume", func() {
		ns := newNamespace()
		c := create(&v1alpha1.StoreCluster{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "vol"},
			Spec:       v1alpha1.StoreClusterSpec{Image: "x", Storage: v1alpha1.StorageSpec{Volume: &v1alpha1.VolumeStorage{Size: "10Gi"}}},
		})
		pvc := &corev1.PersistentVolumeClaim{}
		Eventually(func() error { return k8s.Get(suiteCtx, client.ObjectKey{Namespace: ns, Name: "vol-shared"}, pvc) }, timeout, poll).Should(Succeed())
		Expect(pvc.Spec.AccessModes).To(ConsistOf(corev1.ReadWriteMany))
		Expect(pvc.OwnerReferences).To(BeEmpty(), "reclaimPolicy Retain: the data outlives the StoreCluster")
		waitRunning(c)
		Expect(statefulSet(c, resources.GroupRegionServer).Spec.Template.Spec.Volumes).To(ContainElement(
			HaveField("VolumeSource.PersistentVolumeClaim.ClaimName", "vol-shared")))
	})

	It("refuses an existing claim that is not ReadWriteMany, and makes no workload", func() {
		ns := newNamespace()
		Expect(k8s.Create(suiteCtx, &corev1.PersistentVolumeClaim{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "rwo"},
			Spec: corev1.PersistentVolumeClaimSpec{
				AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
				Resources:   corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}},
			},
		})).To(Succeed())
		c := create(&v1alpha1.StoreCluster{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "rwo"},
			Spec:       v1alpha1.StoreClusterSpec{Image: "x", Storage: v1alpha1.StorageSpec{ExistingClaim: &v1alpha1.ExistingClaimStorage{ClaimName: "rwo"}}},
		})
		Eventually(condition(c, v1alpha1.ConditionDegraded), timeout, poll).Should(haveCondition(metav1.ConditionTrue,
			controller.ReasonStorageNotShared, "task storage: PersistentVolumeClaim rwo", "not ReadWriteMany"))
		Eventually(condition(c, v1alpha1.ConditionStorageReady), timeout, poll).Should(haveCondition(metav1.ConditionFalse,
			controller.ReasonStorageNotShared, "[ReadWriteOnce]"))
		Eventually(eventsOf(c, controller.ReasonStorageNotShared), timeout, poll).Should(ContainElement(HavePrefix("Warning: task storage:")))
		Expect(get(c).Status.Phase).To(Equal(v1alpha1.PhaseDegraded))
		err := k8s.Get(suiteCtx, client.ObjectKey{Namespace: ns, Name: "rwo-regionserver"}, &appsv1.StatefulSet{})
		Expect(err).To(HaveOccurred(), "no StatefulSet on a claim the pods cannot share")
	})

	It("refuses a StorageClass that makes only ReadWriteOnce volumes, or none, before making a claim", func() {
		ns := newNamespace()
		class := storageClass(ns+"-ebs", "ebs.csi.aws.com")
		c := create(volumeCluster(ns, "ebs", class))
		Eventually(condition(c, v1alpha1.ConditionDegraded), timeout, poll).Should(haveCondition(metav1.ConditionTrue,
			controller.ReasonStorageNotShared, "StorageClass "+class+" (provisioner ebs.csi.aws.com, AWS EBS) makes only ReadWriteOnce volumes", "no claim was made"))
		Eventually(condition(c, v1alpha1.ConditionStorageReady), timeout, poll).Should(haveCondition(metav1.ConditionFalse, controller.ReasonStorageNotShared))
		Expect(k8s.Get(suiteCtx, client.ObjectKey{Namespace: ns, Name: "ebs-shared"}, &corev1.PersistentVolumeClaim{})).NotTo(Succeed(), "no claim on a class that cannot provide it")
		Expect(k8s.Get(suiteCtx, client.ObjectKey{Namespace: ns, Name: "ebs-regionserver"}, &appsv1.StatefulSet{})).NotTo(Succeed())

		missing := ns + "-none"
		c2 := create(&v1alpha1.StoreCluster{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "none"},
			Spec: v1alpha1.StoreClusterSpec{Image: "x", Storage: v1alpha1.StorageSpec{Volume: &v1alpha1.VolumeStorage{
				Size: "10Gi", StorageClassName: &missing}}},
		})
		Eventually(condition(c2, v1alpha1.ConditionDegraded), timeout, poll).Should(haveCondition(metav1.ConditionTrue,
			controller.ReasonStorageClassMissing, "StorageClass "+missing+" (spec.storage.volume.storageClassName) does not exist"))
	})

	It("reports a claim its provisioner refused, in the provisioner's words, and clears when it binds", func() {
		ns := newNamespace()
		c := create(&v1alpha1.StoreCluster{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "refused"},
			Spec:       v1alpha1.StoreClusterSpec{Image: "x", Storage: v1alpha1.StorageSpec{Volume: &v1alpha1.VolumeStorage{Size: "10Gi"}}},
		})
		pvc := &corev1.PersistentVolumeClaim{}
		Eventually(func() error { return k8s.Get(suiteCtx, client.ObjectKey{Namespace: ns, Name: "refused-shared"}, pvc) }, timeout, poll).Should(Succeed())
		Eventually(condition(c, v1alpha1.ConditionStorageReady), timeout, poll).Should(haveCondition(metav1.ConditionTrue, controller.ReasonStorageReady))
		// What kind's local-path provisioner says of a ReadWriteMany claim (envtest runs no
		// provisioner: the test writes its event).
		Expect(k8s.Create(suiteCtx, &corev1.Event{
			ObjectMeta:     metav1.ObjectMeta{Namespace: ns, Name: "refused-shared.provisioning"},
			InvolvedObject: corev1.ObjectReference{Kind: "PersistentVolumeClaim", Namespace: ns, Name: pvc.Name, UID: pvc.UID, APIVersion: "v1"},
			Type:           corev1.EventTypeWarning, Reason: "ProvisioningFailed",
			Message:       `failed to provision volume with StorageClass "standard": Only support ReadWriteOnce access mode`,
			Source:        corev1.EventSource{Component: "rancher.io/local-path"},
			LastTimestamp: metav1.Now(),
		})).To(Succeed())
		Eventually(condition(c, v1alpha1.ConditionDegraded), timeout, poll).Should(haveCondition(metav1.ConditionTrue,
			controller.ReasonStoragePending, "PersistentVolumeClaim refused-shared is Pending: ProvisioningFailed", "Only support ReadWriteOnce access mode",
			"storageClassName"))
		Eventually(condition(c, v1alpha1.ConditionStorageReady), timeout, poll).Should(haveCondition(metav1.ConditionFalse, controller.ReasonStoragePending))
		Expect(get(c).Status.Phase).To(Equal(v1alpha1.PhaseDegraded))

		// The claim binds (an administrator fixed the class): the condition clears.
		Eventually(func() error {
			if err := k8s.Get(suiteCtx, client.ObjectKeyFromObject(pvc), pvc); err != nil {
				return err
			}
			pvc.Status.Phase = corev1.ClaimBound
			return k8s.Status().Update(suiteCtx, pvc)
		}, timeout, poll).Should(Succeed())
		Eventually(condition(c, v1alpha1.ConditionStorageReady), timeout, poll).Should(haveCondition(metav1.ConditionTrue, controller.ReasonStorageReady))
		Eventually(condition(c, v1alpha1.ConditionDegraded), timeout, poll).Should(haveCondition(metav1.ConditionFalse, controller.ReasonAsExpected))
	})

	It("reconciles other clusters while one waits on its master", func() {
		slow := create(newCluster(newNamespace()))
		waitRunning(slow)
		release := masters.For(client.ObjectKeyFromObject(slow)).HoldStatus()
		DeferCleanup(release)
		// A change makes the slow cluster reconcile: it reaches the master, which does not answer.
		update(slow, func(c *v1alpha1.StoreCluster) { c.Spec.RegionServers.Replicas = 4 })
		Eventually(func() int { return masters.For(client.ObjectKeyFromObject(slow)).HeldStatus() }, timeout, poll).Should(BeNumerically(">", 0))
		other := create(newCluster(newNamespace()))
		Eventually(func() error {
			return k8s.Get(suiteCtx, client.ObjectKey{Namespace: other.Namespace, Name: resources.StatefulSetName(other, resources.GroupRegionServer)}, &appsv1.StatefulSet{})
		}, timeout, poll).Should(Succeed(), "a cluster waiting on its master must not hold up the others' reconciles")
		release()
		waitRunning(other)
	})

	It("goes on with the shared claim as it is when its class refuses to expand it, and expands it once the class allows", func() {
		ns := newNamespace()
		class := storageClass(ns+"-fixed", "example.com/nfs")
		c := create(volumeCluster(ns, "fixed", class))
		pvc := &corev1.PersistentVolumeClaim{}
		Eventually(func() error { return k8s.Get(suiteCtx, client.ObjectKey{Namespace: ns, Name: "fixed-shared"}, pvc) }, timeout, poll).Should(Succeed())
		// envtest runs no provisioner: the test binds the claim (only a bound claim can grow).
		Eventually(func() error {
			if err := k8s.Get(suiteCtx, client.ObjectKeyFromObject(pvc), pvc); err != nil {
				return err
			}
			pvc.Status.Phase = corev1.ClaimBound
			return k8s.Status().Update(suiteCtx, pvc)
		}, timeout, poll).Should(Succeed())
		Eventually(func() error {
			return k8s.Get(suiteCtx, client.ObjectKey{Namespace: ns, Name: "fixed-regionserver"}, &appsv1.StatefulSet{})
		}, timeout, poll).Should(Succeed())

		update(c, func(c *v1alpha1.StoreCluster) { c.Spec.Storage.Volume.Size = "20Gi" })
		Eventually(condition(c, v1alpha1.ConditionDegraded), timeout, poll).Should(haveCondition(metav1.ConditionTrue,
			controller.ReasonStorageExpansionRefused, "task storage: spec.storage.volume.size asks 20Gi, but PersistentVolumeClaim fixed-shared has 10Gi",
			"refused to expand it", "allowVolumeExpansion: true"))
		Eventually(condition(c, v1alpha1.ConditionStorageReady), timeout, poll).Should(haveCondition(metav1.ConditionTrue, controller.ReasonStorageExpansionRefused))
		Eventually(eventsOf(c, controller.ReasonStorageExpansionRefused), timeout, poll).Should(ContainElement(HavePrefix("Warning: task storage:")))
		// The tasks after storage still run: a change to the region servers reaches their StatefulSet.
		update(c, func(c *v1alpha1.StoreCluster) { c.Spec.RegionServers.Replicas = 4 })
		Eventually(func() int32 {
			return ptr.Deref(statefulSet(c, resources.GroupRegionServer).Spec.Replicas, 0)
		}, timeout, poll).Should(Equal(int32(4)), "a refused expansion must not stop the rest of the reconcile")
		Expect(k8s.Get(suiteCtx, client.ObjectKeyFromObject(pvc), pvc)).To(Succeed())
		Expect(pvc.Spec.Resources.Requests.Storage().String()).To(Equal("10Gi"))

		// The administrator allows expansion: the claim grows and the condition clears.
		Eventually(func() error {
			sc := &storagev1.StorageClass{}
			if err := k8s.Get(suiteCtx, client.ObjectKey{Name: class}, sc); err != nil {
				return err
			}
			sc.AllowVolumeExpansion = ptr.To(true)
			return k8s.Update(suiteCtx, sc)
		}, timeout, poll).Should(Succeed())
		Eventually(func() string {
			if err := k8s.Get(suiteCtx, client.ObjectKeyFromObject(pvc), pvc); err != nil {
				return err.Error()
			}
			return pvc.Spec.Resources.Requests.Storage().String()
		}, timeout, poll).Should(Equal("20Gi"))
		Eventually(condition(c, v1alpha1.ConditionStorageReady), timeout, poll).Should(haveCondition(metav1.ConditionTrue, controller.ReasonStorageReady))
		Eventually(condition(c, v1alpha1.ConditionDegraded), timeout, poll).Should(Not(haveCondition(metav1.ConditionTrue, controller.ReasonStorageExpansionRefused)))
	})

	It("refuses memory that does not fit, changes nothing, and recovers when fixed", func() {
		ns := newNamespace()
		c := create(newCluster(ns))
		waitRunning(c)
		before := statefulSet(c, resources.GroupRegionServer)
		// The CRD's rule accepts 3Mi + 3Mi <= 6Mi; with each budget rounded up to whole 2Mi pages the
		// operator needs 8Mi.
		update(c, func(c *v1alpha1.StoreCluster) {
			c.Spec.RegionServers.Memory.MemstoreOffHeapSize = ptrSize("3Mi")
			c.Spec.RegionServers.Memory.BlockCacheOffHeapSize = ptrSize("3Mi")
			c.Spec.RegionServers.Memory.HugePages = &v1alpha1.HugePagesSpec{PageSize: "2Mi", Amount: "6Mi"}
		})
		Eventually(condition(c, v1alpha1.ConditionDegraded), timeout, poll).Should(haveCondition(metav1.ConditionTrue,
			controller.ReasonMemoryBudgetExceeded, "each rounded up to whole 2Mi pages, need 8Mi but memory.hugePages.amount is 6Mi", "the operator changed no object"))
		Eventually(eventsOf(c, controller.ReasonMemoryBudgetExceeded), timeout, poll).Should(ContainElement(HavePrefix("Warning: task validate:")))
		after := statefulSet(c, resources.GroupRegionServer)
		Expect(after.Generation).To(Equal(before.Generation), "a refused spec must not roll the StatefulSet")
		Expect(after.Spec.Template.Annotations[resources.AnnotationTemplateHash]).To(Equal(before.Spec.Template.Annotations[resources.AnnotationTemplateHash]))

		update(c, func(c *v1alpha1.StoreCluster) { c.Spec.RegionServers.Memory.HugePages.Amount = "8Mi" })
		Eventually(condition(c, v1alpha1.ConditionDegraded), timeout, poll).Should(haveCondition(metav1.ConditionFalse, controller.ReasonAsExpected))
		waitRunning(c)
		ctr := statefulSet(c, resources.GroupRegionServer).Spec.Template.Spec.Containers[0]
		Expect(ctr.Args).To(ContainElements("--hugepages=2Mi", "--memstore-offheap-size=3Mi"))
		Expect(ctr.Resources.Limits).To(HaveKey(corev1.ResourceName("hugepages-2Mi")))
	})
})

func ptrSize(s string) *v1alpha1.ByteSize { b := v1alpha1.ByteSize(s); return &b }

// storageClass makes a StorageClass (removed after the spec) and returns its name.
func storageClass(name, provisioner string) string {
	Expect(k8s.Create(suiteCtx, &storagev1.StorageClass{ObjectMeta: metav1.ObjectMeta{Name: name}, Provisioner: provisioner})).To(Succeed())
	DeferCleanup(func() { _ = k8s.Delete(suiteCtx, &storagev1.StorageClass{ObjectMeta: metav1.ObjectMeta{Name: name}}) })
	return name
}

// volumeCluster is a StoreCluster on a 10Gi shared volume of the StorageClass class.
func volumeCluster(ns, name, class string) *v1alpha1.StoreCluster {
	return &v1alpha1.StoreCluster{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: v1alpha1.StoreClusterSpec{Image: "x", Storage: v1alpha1.StorageSpec{Volume: &v1alpha1.VolumeStorage{
			Size: "10Gi", StorageClassName: &class}}},
	}
}
