//go:build e2e

// Package e2e is Cellstore's end-to-end suite. It runs against the cluster of $KUBECONFIG (the local
// cluster that hack/test.sh brings up, kind, or any other) into which the images of bin/images/ have
// been loaded. On a failed spec it prints the pods, events and logs of the spec's namespace.
package e2e

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/cellstore/cellstore/operator/api/v1alpha1"
)

var (
	kube kubernetes.Interface
	// crc reads and writes StoreClusters and the monitoring objects.
	crc client.Client
	// netcheckImage is the suite's test workload (e2e/netcheck), built by hack/images.sh.
	netcheckImage = os.Getenv("E2E_NETCHECK_IMAGE")
	// The images under test (hack/test.sh sets them from hack/images.sh --ref).
	engineImage    = os.Getenv("E2E_ENGINE_IMAGE")
	operatorImage  = os.Getenv("E2E_OPERATOR_IMAGE")
	loadcheckImage = os.Getenv("E2E_LOADCHECK_IMAGE")
	// hbaseloadImage runs the stock HBase Java client (engine/hbase/testdata/HBaseLoad.java) with a
	// Java runtime, built by hack/images.sh.
	hbaseloadImage = os.Getenv("E2E_HBASELOAD_IMAGE")
	// minioImage is a development S3 server (MinIO from its Go module) for StoreClusters on S3.
	minioImage = os.Getenv("E2E_MINIO_IMAGE")
	// operatorUpgradeImage is the operator image of an upgrade: the same operator under another
	// version (hack/test.sh loads it under a second tag).
	operatorUpgradeImage = os.Getenv("E2E_OPERATOR_UPGRADE_IMAGE")
	// engineUpgradeImage is the engine image of an upgrade: the same engine built under another
	// version (hack/test.sh loads it under a second tag).
	engineUpgradeImage = os.Getenv("E2E_ENGINE_UPGRADE_IMAGE")
)

func TestE2E(t *testing.T) {
	RegisterFailHandler(Fail)
	RunSpecs(t, "Cellstore end-to-end")
}

var _ = BeforeSuite(func() {
	path := os.Getenv("KUBECONFIG")
	Expect(path).NotTo(BeEmpty(), "set KUBECONFIG (make e2e brings up the local cluster and sets it)")
	Expect(netcheckImage).NotTo(BeEmpty(), "set E2E_NETCHECK_IMAGE and the other E2E_* images: hack/test.sh e2e builds, loads and sets them")
	cfg, err := clientcmd.BuildConfigFromFlags("", path)
	Expect(err).NotTo(HaveOccurred())
	kube, err = kubernetes.NewForConfig(cfg)
	Expect(err).NotTo(HaveOccurred())
	scheme := runtime.NewScheme()
	Expect(clientgoscheme.AddToScheme(scheme)).To(Succeed())
	Expect(v1alpha1.AddToScheme(scheme)).To(Succeed())
	crc, err = client.New(cfg, client.Options{Scheme: scheme})
	Expect(err).NotTo(HaveOccurred())
	v, err := kube.Discovery().ServerVersion()
	Expect(err).NotTo(HaveOccurred(), "the API server of %s does not answer", path)
	GinkgoWriter.Printf("cluster: Kubernetes %s\n", v.GitVersion)
	// A run that was killed (or whose local cluster was stopped under it) leaves its namespaces,
	// whose pods' CPU requests then keep this run's pods from being scheduled on the one node.
	left, err := kube.CoreV1().Namespaces().List(context.Background(), metav1.ListOptions{LabelSelector: "cellstore.io/e2e=true"})
	Expect(err).NotTo(HaveOccurred())
	ctx := context.Background()
	for _, ns := range left.Items {
		// Its pods go at once (their grace periods are a drain's); the namespace may wait for the
		// operator to release finalizers, which takes no CPU from this run.
		GinkgoWriter.Printf("deleting namespace %s, left by an earlier run\n", ns.Name)
		Expect(client.IgnoreNotFound(kube.CoreV1().Namespaces().Delete(ctx, ns.Name, metav1.DeleteOptions{}))).To(Succeed())
		Expect(client.IgnoreNotFound(kube.CoreV1().Pods(ns.Name).DeleteCollection(ctx, metav1.DeleteOptions{GracePeriodSeconds: ptr.To(int64(0))},
			metav1.ListOptions{}))).To(Succeed())
	}
	for _, ns := range left.Items {
		Eventually(func() ([]corev1.Pod, error) {
			l, err := kube.CoreV1().Pods(ns.Name).List(ctx, metav1.ListOptions{})
			return l.Items, err
		}).WithTimeout(3*time.Minute).WithPolling(time.Second).Should(BeEmpty(), "the pods of namespace %s, left by an earlier run, are not gone", ns.Name)
	}
})

func envOr(key, def string) string {
	if v := os.Getenv(key); v != "" {
		return v
	}
	return def
}

// newNamespace makes a namespace for one spec; it is deleted when the spec ends, after its contents
// have been dumped if the spec failed.
func newNamespace(prefix string) string {
	ns, err := kube.CoreV1().Namespaces().Create(context.Background(), &corev1.Namespace{
		ObjectMeta: metav1.ObjectMeta{GenerateName: prefix + "-", Labels: map[string]string{"cellstore.io/e2e": "true"}},
	}, metav1.CreateOptions{})
	Expect(err).NotTo(HaveOccurred())
	DeferCleanup(func() {
		if CurrentSpecReport().Failed() {
			dumpNamespace(ns.Name)
		}
		// StoreClusters first, and their pods: the namespace controller, once it has seen a pod
		// with a long grace period (a region server's is its drain timeout), may wait that long
		// before it looks again.
		ctx := context.Background()
		if _, err := kube.Discovery().ServerResourcesForGroupVersion(v1alpha1.GroupVersion.String()); err == nil {
			Expect(crc.DeleteAllOf(ctx, &v1alpha1.StoreCluster{}, client.InNamespace(ns.Name))).To(Succeed())
		} // else the CRD is not installed (yet): there is no StoreCluster to delete
		Eventually(func(g Gomega) {
			pods, err := kube.CoreV1().Pods(ns.Name).List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/name=cellstore"})
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(pods.Items).To(BeEmpty())
		}).WithTimeout(5*time.Minute).WithPolling(time.Second).Should(Succeed(), "the StoreCluster pods of namespace %s are not gone after 5 minutes", ns.Name)
		err := kube.CoreV1().Namespaces().Delete(context.Background(), ns.Name, metav1.DeleteOptions{})
		if err != nil && !apierrors.IsNotFound(err) {
			Fail(fmt.Sprintf("delete namespace %s: %v", ns.Name, err))
		}
		// Wait until it is gone, so that what runs next (another spec, the operator's uninstall)
		// finds a clean cluster.
		Eventually(func() bool {
			_, err := kube.CoreV1().Namespaces().Get(context.Background(), ns.Name, metav1.GetOptions{})
			return apierrors.IsNotFound(err)
		}).WithTimeout(5*time.Minute).WithPolling(time.Second).Should(BeTrue(), "namespace %s is not deleted after 5 minutes", ns.Name)
	})
	return ns.Name
}

// dumpNamespace prints what a person debugging a failure looks at first.
func dumpNamespace(ns string) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	w := GinkgoWriter
	fmt.Fprintf(w, "\n===== namespace %s =====\n", ns)
	pods, err := kube.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		fmt.Fprintf(w, "list pods: %v\n", err)
		return
	}
	for _, p := range pods.Items {
		fmt.Fprintf(w, "--- pod %s phase=%s node=%s ip=%s\n", p.Name, p.Status.Phase, p.Spec.NodeName, p.Status.PodIP)
		for _, c := range p.Status.Conditions {
			fmt.Fprintf(w, "    condition %s=%s %s %s\n", c.Type, c.Status, c.Reason, c.Message)
		}
		for _, cs := range append(p.Status.InitContainerStatuses, p.Status.ContainerStatuses...) {
			fmt.Fprintf(w, "    container %s ready=%v restarts=%d state=%+v\n", cs.Name, cs.Ready, cs.RestartCount, cs.State)
			logs, _ := podLogs(ctx, ns, p.Name, cs.Name)
			fmt.Fprintf(w, "    logs of %s:\n%s\n", cs.Name, indent(logs))
		}
	}
	events, err := kube.CoreV1().Events(ns).List(ctx, metav1.ListOptions{})
	if err == nil {
		fmt.Fprintln(w, "--- events")
		for _, e := range events.Items {
			fmt.Fprintf(w, "    %s %s/%s %s: %s\n", e.Type, e.InvolvedObject.Kind, e.InvolvedObject.Name, e.Reason, e.Message)
		}
	}
}

func podLogs(ctx context.Context, ns, pod, container string) (string, error) {
	r, err := kube.CoreV1().Pods(ns).GetLogs(pod, &corev1.PodLogOptions{Container: container}).Stream(ctx)
	if err != nil {
		return "", err
	}
	defer r.Close()
	var b bytes.Buffer
	_, err = io.Copy(&b, io.LimitReader(r, 64<<10))
	return b.String(), err
}

func indent(s string) string {
	return "      " + strings.ReplaceAll(strings.TrimRight(s, "\n"), "\n", "\n      ")
}
