//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	"github.com/cellstore/cellstore/operator/api/v1alpha1"
)

// A StoreCluster whose data is all in S3 — a development S3 server (MinIO, built from its Go
// module, its image loaded like the others) running in the same namespace — with no shared volume.
var _ = Describe("A StoreCluster on S3", Ordered, Label("storecluster", "s3"), func() {
	const name = "ons3"
	var ns string

	BeforeAll(func(ctx SpecContext) {
		Expect(minioImage).NotTo(BeEmpty(), "set E2E_MINIO_IMAGE: hack/test.sh e2e builds, loads and sets it")
		installOperator(ctx)
		ns = newNamespace("s3")
		deployMinIO(ctx, ns)
	})

	It("becomes Available with its data in the bucket and no volume claim", func(ctx SpecContext) {
		c := sampleCluster("cellstore_v1alpha1_storecluster_minimal.yaml", ns, name)
		c.Spec.Master.Replicas = 1
		c.Spec.RegionServers.Replicas = 2
		c.Spec.Storage = v1alpha1.StorageSpec{S3: &v1alpha1.S3Storage{Endpoint: "http://minio:9000", Bucket: "cellstore",
			Prefix: "clusters/" + name, PathStyle: true, CredentialsSecret: corev1.LocalObjectReference{Name: "s3-keys"}}}
		Expect(crc.Create(ctx, c)).To(Succeed())
		c = waitSettled(ctx, ns, name, 8*time.Minute)
		Expect(c.Status.RegionServers.Ready).To(BeEquivalentTo(2))
		claims, err := kube.CoreV1().PersistentVolumeClaims(ns).List(ctx, metav1.ListOptions{})
		Expect(err).NotTo(HaveOccurred())
		Expect(claims.Items).To(BeEmpty(), "a StoreCluster on S3 needs no volume claim")
		out := shell(ctx, ns, name, "create 'smoke', 'f'; put 'smoke', 'r1', 'f:q', 'hello'; get 'smoke', 'r1'")
		Expect(out).To(ContainSubstring("value=hello"))
	})

	It("loads 20k rows into a pre-split table and reads them back", func(ctx SpecContext) {
		runJob(ctx, ns, "load-rows", "load", "--masters", name+":16000", "--table", "loaded", "--rows", "20000", "--splits", "4")
		verifyRows(ctx, ns, "verify-rows", name, "loaded", 20000)
	})

	It("splits a region of the loaded table, on the bucket, and reads every row back", func(ctx SpecContext) {
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

	It("recovers a force-deleted region server from its object log, losing no acknowledged write", func(ctx SpecContext) {
		_, err := kube.CoreV1().Pods(ns).Create(ctx, loadcheckPod("load", name, "--table", "live", "--writers", "2", "--readers", "2"), metav1.CreateOptions{})
		Expect(err).NotTo(HaveOccurred())
		Eventually(func() int64 { return loadcheck(ctx, ns, "load", "GET", "stats").Writes }).
			WithContext(ctx).WithTimeout(3 * time.Minute).WithPolling(time.Second).Should(BeNumerically(">", 100))
		victim := ""
		for _, s := range getCluster(ctx, ns, name).Status.Regions.PerServer {
			if s.Regions > 0 && s.Pod != "" {
				victim = s.Pod
				break
			}
		}
		Expect(victim).NotTo(BeEmpty())
		forceDelete(ctx, ns, name, victim)
		s := loadcheck(ctx, ns, "load", "POST", "stop")
		report := fmt.Sprintf("load on S3 through the force-deletion of %s: %s", victim, s)
		GinkgoWriter.Println(report)
		AddReportEntry("s3 recovery", report)
		Expect(s.Writes).To(BeNumerically(">", 0))
		Expect(s.Mismatches).To(BeZero(), "reads returned wrong values: %s", s)
		Expect(s.Lost+s.VerifyFailed).To(BeZero(), "acknowledged writes lost or unreadable: %s", s)
	})
})

// deployMinIO runs a development S3 server as "minio" in ns, with its keys in the Secret
// "s3-keys" (the keys a StoreCluster's spec.storage.s3 names), and creates the bucket "cellstore"
// with `cellstore bucket check --s3-create-bucket` (which also checks conditional writes).
func deployMinIO(ctx context.Context, ns string) {
	const user, password = "cellstore", "cellstore-e2e-secret"
	_, err := kube.CoreV1().Secrets(ns).Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "s3-keys"},
		StringData: map[string]string{"AWS_ACCESS_KEY_ID": user, "AWS_SECRET_ACCESS_KEY": password}}, metav1.CreateOptions{})
	Expect(err).NotTo(HaveOccurred())
	labels := map[string]string{"app": "minio"}
	sc := restricted()
	_, err = kube.AppsV1().Deployments(ns).Create(ctx, &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "minio"},
		Spec: appsv1.DeploymentSpec{
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{
					Containers: []corev1.Container{{
						Name: "minio", Image: minioImage, ImagePullPolicy: corev1.PullIfNotPresent,
						Args: []string{"server", "/data/store", "--certs-dir", "/data/certs", "--address", ":9000", "--console-address", ":9001", "--quiet"},
						Env: []corev1.EnvVar{{Name: "MINIO_ROOT_USER", Value: user}, {Name: "MINIO_ROOT_PASSWORD", Value: password},
							{Name: "MINIO_BROWSER", Value: "off"}, {Name: "MINIO_UPDATE", Value: "off"}, {Name: "HOME", Value: "/data"},
							{Name: "TMPDIR", Value: "/data"}},
						Ports:           []corev1.ContainerPort{{Name: "s3", ContainerPort: 9000}},
						ReadinessProbe:  &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/minio/health/ready", Port: intstr.FromInt32(9000)}}, PeriodSeconds: 1},
						VolumeMounts:    []corev1.VolumeMount{{Name: "data", MountPath: "/data"}},
						SecurityContext: sc,
					}},
					Volumes: []corev1.Volume{{Name: "data", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}},
				},
			},
		},
	}, metav1.CreateOptions{})
	Expect(err).NotTo(HaveOccurred())
	_, err = kube.CoreV1().Services(ns).Create(ctx, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "minio"},
		Spec: corev1.ServiceSpec{Selector: labels, Ports: []corev1.ServicePort{{Name: "s3", Port: 9000, TargetPort: intstr.FromInt32(9000)}}}},
		metav1.CreateOptions{})
	Expect(err).NotTo(HaveOccurred())
	Eventually(func(g Gomega) {
		d, err := kube.AppsV1().Deployments(ns).Get(ctx, "minio", metav1.GetOptions{})
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(d.Status.ReadyReplicas).To(BeEquivalentTo(1))
	}).WithContext(ctx).WithTimeout(3 * time.Minute).WithPolling(time.Second).Should(Succeed())
	keyRef := func(env, key string) corev1.EnvVar {
		return corev1.EnvVar{Name: env, ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{
			LocalObjectReference: corev1.LocalObjectReference{Name: "s3-keys"}, Key: key}}}
	}
	job := &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{Name: "make-bucket"},
		Spec: batchv1.JobSpec{
			BackoffLimit: ptr.To(int32(3)),
			Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{
				RestartPolicy: corev1.RestartPolicyNever,
				Containers: []corev1.Container{{Name: "bucket", Image: engineImage, ImagePullPolicy: corev1.PullIfNotPresent,
					Args:            []string{"bucket", "check", "--s3-endpoint=http://minio:9000", "--s3-bucket=cellstore", "--s3-path-style", "--s3-create-bucket"},
					Env:             []corev1.EnvVar{keyRef("CELLSTORE_S3_ACCESS_KEY_ID", "AWS_ACCESS_KEY_ID"), keyRef("CELLSTORE_S3_SECRET_ACCESS_KEY", "AWS_SECRET_ACCESS_KEY")},
					SecurityContext: restricted()}},
			}},
		},
	}
	_, err = kube.BatchV1().Jobs(ns).Create(ctx, job, metav1.CreateOptions{})
	Expect(err).NotTo(HaveOccurred())
	Eventually(func(g Gomega) {
		j, err := kube.BatchV1().Jobs(ns).Get(ctx, "make-bucket", metav1.GetOptions{})
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(j.Status.Succeeded).To(BeEquivalentTo(1), "the bucket Job has not succeeded (failed pods: %d)", j.Status.Failed)
	}).WithContext(ctx).WithTimeout(3 * time.Minute).WithPolling(time.Second).Should(Succeed())
}
