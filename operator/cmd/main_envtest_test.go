//go:build envtest

package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/cellstore/cellstore/operator/api/v1alpha1"
	"github.com/cellstore/cellstore/operator/internal/testenv"
	appsv1 "k8s.io/api/apps/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"sigs.k8s.io/controller-runtime/pkg/client"
	sigsyaml "sigs.k8s.io/yaml"
)

// TestBinary runs the operator binary against a real API server: it must elect itself leader
// through a Lease, answer its probes, and reconcile a StoreCluster.
func TestBinary(t *testing.T) {
	env, err := testenv.Start(testenv.Options{CRDDirs: []string{filepath.Join("..", "..", "config", "crd", "bases")}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Stop() })
	c := adminClient(t, env)
	startOperator(t, env, "", "--leader-elect", "--leader-election-namespace=default")

	ctx := context.Background()
	until(t, "the leader election Lease", func(ctx context.Context) (bool, error) {
		l := &coordinationv1.Lease{}
		err := c.Get(ctx, client.ObjectKey{Namespace: "default", Name: "cellstore-operator.cellstore.io"}, l)
		return err == nil && l.Spec.HolderIdentity != nil && *l.Spec.HolderIdentity != "", nil
	})
	sc := smokeCluster("default", "smoke")
	if err := c.Create(ctx, sc); err != nil {
		t.Fatal(err)
	}
	until(t, "the region server StatefulSet", func(ctx context.Context) (bool, error) {
		return c.Get(ctx, client.ObjectKey{Namespace: "default", Name: "smoke-regionserver"}, &appsv1.StatefulSet{}) == nil, nil
	})
	until(t, "a status", provisioning(c, sc))
}

// TestBinaryWithNamespacedRBAC runs the operator binary as the service account of a chart installed
// with watchNamespaces, holding only what the chart grants it (a Role in each watched namespace, the
// leader election Role, nothing cluster-wide): it must lead, reconcile a StoreCluster in a watched
// namespace — skipping the StorageClass check it may not make — and leave one elsewhere alone.
func TestBinaryWithNamespacedRBAC(t *testing.T) {
	env, err := testenv.Start(testenv.Options{CRDDirs: []string{filepath.Join("..", "..", "config", "crd", "bases")}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Stop() })
	c := adminClient(t, env)
	ctx := context.Background()
	const release = "cellstore-system"
	for _, ns := range []string{release, "team-a", "team-b", "elsewhere"} {
		if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
			t.Fatal(err)
		}
	}

	// What the chart renders, applied as Helm would (the CRDs are installed already).
	out, err := exec.Command(helmBinary(t), "template", "ops", filepath.Join("..", "..", "charts", "cellstore-operator"),
		"--namespace", release, "--kube-version", "v1.34.4", "--set", "watchNamespaces={team-a,team-b}").CombinedOutput()
	if err != nil {
		t.Fatalf("helm template: %v\n%s", err, out)
	}
	var account, args string
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(out), 4096)
	for {
		u := &unstructured.Unstructured{}
		if err := dec.Decode(&u.Object); err != nil {
			if errors.Is(err, io.EOF) {
				break
			}
			t.Fatal(err)
		}
		if len(u.Object) == 0 || u.GetAnnotations()["helm.sh/hook"] != "" {
			continue // the CRD hook runs as whoever installs the chart, and is gone after
		}
		switch u.GetKind() {
		case "ClusterRole", "ClusterRoleBinding":
			t.Fatalf("a namespaced install renders %s %s", u.GetKind(), u.GetName())
		case "Deployment":
			containers, _, _ := unstructured.NestedSlice(u.Object, "spec", "template", "spec", "containers")
			args = strings.Join(toStrings(containers[0].(map[string]any)["args"]), " ")
			continue
		case "ServiceAccount":
			account = u.GetName()
		case "Role", "RoleBinding":
		default:
			continue
		}
		if u.GetNamespace() == "" {
			u.SetNamespace(release)
		}
		if err := c.Create(ctx, u); err != nil {
			t.Fatalf("create %s %s/%s: %v", u.GetKind(), u.GetNamespace(), u.GetName(), err)
		}
	}
	if account == "" || !strings.Contains(args, "--watch-namespaces=team-a,team-b") {
		t.Fatalf("the chart rendered service account %q, operator args %q", account, args)
	}
	user := "system:serviceaccount:" + release + ":" + account
	restricted := rest.CopyConfig(env.Config)
	restricted.Impersonate = rest.ImpersonationConfig{UserName: user}
	rc, err := client.New(restricted, client.Options{Scheme: c.Scheme()})
	if err != nil {
		t.Fatal(err)
	}
	// The API server enforces RBAC: the account may not read what the test says is skipped.
	if err := rc.List(ctx, &storagev1.StorageClassList{}); !apierrors.IsForbidden(err) {
		t.Fatalf("listing StorageClasses as %s: %v, want Forbidden", user, err)
	}

	startOperator(t, env, user, "--leader-elect", "--leader-election-namespace="+release, "--watch-namespaces=team-a,team-b")
	until(t, "the leader election Lease", func(ctx context.Context) (bool, error) {
		l := &coordinationv1.Lease{}
		err := c.Get(ctx, client.ObjectKey{Namespace: release, Name: "cellstore-operator.cellstore.io"}, l)
		return err == nil && l.Spec.HolderIdentity != nil && *l.Spec.HolderIdentity != "", nil
	})
	outside := smokeCluster("elsewhere", "other")
	watched := smokeCluster("team-a", "smoke")
	for _, sc := range []*v1alpha1.StoreCluster{outside, watched} {
		if err := c.Create(ctx, sc); err != nil {
			t.Fatal(err)
		}
	}
	until(t, "the region server StatefulSet in team-a", func(ctx context.Context) (bool, error) {
		return c.Get(ctx, client.ObjectKey{Namespace: "team-a", Name: "smoke-regionserver"}, &appsv1.StatefulSet{}) == nil, nil
	})
	until(t, "a status in team-a", provisioning(c, watched))
	cur := &v1alpha1.StoreCluster{}
	if err := c.Get(ctx, client.ObjectKeyFromObject(watched), cur); err != nil {
		t.Fatal(err)
	}
	for _, cond := range cur.Status.Conditions {
		if strings.Contains(strings.ToLower(cond.Message), "forbidden") {
			t.Errorf("condition %s: %s", cond.Type, cond.Message)
		}
	}
	if err := c.Get(ctx, client.ObjectKeyFromObject(outside), cur); err != nil {
		t.Fatal(err)
	}
	if cur.Status.ObservedGeneration != 0 || len(cur.Status.Conditions) != 0 {
		t.Errorf("the StoreCluster outside the watched namespaces was reconciled: %+v", cur.Status)
	}
	var sets appsv1.StatefulSetList
	if err := c.List(ctx, &sets, client.InNamespace("elsewhere")); err != nil || len(sets.Items) != 0 {
		t.Errorf("StatefulSets outside the watched namespaces: %d (%v)", len(sets.Items), err)
	}
}

var (
	buildOnce sync.Once
	binPath   string
	buildErr  error
)

// operatorBinary builds the operator once for the package's tests.
func operatorBinary(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "cellstore-operator-bin")
		if err != nil {
			buildErr = err
			return
		}
		binPath = filepath.Join(dir, "manager")
		if out, err := exec.Command("go", "build", "-o", binPath, ".").CombinedOutput(); err != nil {
			buildErr = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return binPath
}

// startOperator runs the operator binary against env (as user when not empty, by impersonation),
// waits for its probes and stops it when the test ends.
func startOperator(t *testing.T, env *testenv.Env, user string, args ...string) {
	t.Helper()
	bin := operatorBinary(t)
	kubeconfig := writeKubeconfig(t, env, user)
	probe := freePort(t)
	cmd := exec.Command(bin, append([]string{"--kubeconfig=" + kubeconfig, "--metrics-bind-address=0",
		fmt.Sprintf("--health-probe-bind-address=127.0.0.1:%d", probe), "--zap-log-level=info"}, args...)...)
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(30 * time.Second):
			_ = cmd.Process.Kill()
			t.Error("the operator did not stop within 30s of SIGTERM")
		}
	})
	for _, path := range []string{"/healthz", "/readyz"} {
		until(t, "GET "+path, func(context.Context) (bool, error) {
			select {
			case err := <-exited:
				return false, fmt.Errorf("the operator exited: %v", err)
			default:
			}
			resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d%s", probe, path))
			if err != nil {
				return false, nil
			}
			resp.Body.Close()
			return resp.StatusCode == http.StatusOK, nil
		})
	}
}

// writeKubeconfig writes a kubeconfig of env's admin (impersonating user when not empty).
func writeKubeconfig(t *testing.T, env *testenv.Env, user string) string {
	t.Helper()
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["envtest"] = &clientcmdapi.Cluster{Server: env.Config.Host, CertificateAuthorityData: env.Config.CAData}
	cfg.AuthInfos["admin"] = &clientcmdapi.AuthInfo{ClientCertificateData: env.Config.CertData, ClientKeyData: env.Config.KeyData, Token: env.Config.BearerToken, Impersonate: user}
	cfg.Contexts["envtest"] = &clientcmdapi.Context{Cluster: "envtest", AuthInfo: "admin"}
	cfg.CurrentContext = "envtest"
	if err := clientcmd.WriteToFile(*cfg, kubeconfig); err != nil {
		t.Fatal(err)
	}
	return kubeconfig
}

func until(t *testing.T, what string, cond func(context.Context) (bool, error)) {
	t.Helper()
	if err := wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, 60*time.Second, true, cond); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

func adminClient(t *testing.T, env *testenv.Env) client.Client {
	t.Helper()
	scheme := runtime.NewScheme()
	utilruntime.Must(clientgoscheme.AddToScheme(scheme))
	utilruntime.Must(v1alpha1.AddToScheme(scheme))
	c, err := client.New(env.Config, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func smokeCluster(ns, name string) *v1alpha1.StoreCluster {
	sc := &v1alpha1.StoreCluster{}
	sc.Namespace, sc.Name = ns, name
	sc.Spec.Image = "docker.io/cellstore/engine:v0.1.0"
	sc.Spec.Storage.Volume = &v1alpha1.VolumeStorage{Size: "1Gi"}
	return sc
}

// provisioning: the operator has observed sc's generation and reports it provisioning.
func provisioning(c client.Client, sc *v1alpha1.StoreCluster) func(context.Context) (bool, error) {
	return func(ctx context.Context) (bool, error) {
		cur := &v1alpha1.StoreCluster{}
		if err := c.Get(ctx, client.ObjectKeyFromObject(sc), cur); err != nil {
			return false, err
		}
		return cur.Status.ObservedGeneration == cur.Generation && cur.Status.Phase == v1alpha1.PhaseProvisioning, nil
	}
}

// helmBinary is $HELM (make exports it), else the one make installs into bin/.
func helmBinary(t *testing.T) string {
	t.Helper()
	if h := os.Getenv("HELM"); h != "" {
		return h
	}
	matches, _ := filepath.Glob(filepath.Join("..", "..", "bin", "helm-*"))
	if len(matches) == 0 {
		t.Fatal("helm not found: run the tests with make (it installs helm into bin/), or set HELM")
	}
	return matches[len(matches)-1]
}

func toStrings(v any) []string {
	var out []string
	for _, x := range v.([]any) {
		if s, ok := x.(string); ok {
			out = append(out, s)
		}
	}
	return out
}

func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// TestApplyCRDs: `manager --apply-crds` (the chart's hook) brings an older StoreCluster CRD up to
// the one the binary carries, creates missing ones, waits until they are served, and can run again.
func TestApplyCRDs(t *testing.T) {
	env, err := testenv.Start(testenv.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Stop() })
	c := adminClient(t, env)
	ctx := context.Background()
	// An older StoreCluster CRD: the current one without spec.externalAccess.
	b, err := os.ReadFile(filepath.Join("..", "..", "config", "crd", "bases", "cellstore.io_storeclusters.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	old := &unstructured.Unstructured{}
	if err := sigsyaml.Unmarshal(b, &old.Object); err != nil {
		t.Fatal(err)
	}
	props := func(u *unstructured.Unstructured) map[string]any {
		versions, _, _ := unstructured.NestedSlice(u.Object, "spec", "versions")
		p, _, _ := unstructured.NestedMap(versions[0].(map[string]any), "schema", "openAPIV3Schema", "properties", "spec", "properties")
		return p
	}
	versions, _, _ := unstructured.NestedSlice(old.Object, "spec", "versions")
	unstructured.RemoveNestedField(versions[0].(map[string]any), "schema", "openAPIV3Schema", "properties", "spec", "properties", "externalAccess")
	if err := unstructured.SetNestedSlice(old.Object, versions, "spec", "versions"); err != nil {
		t.Fatal(err)
	}
	if _, ok := props(old)["externalAccess"]; ok {
		t.Fatal("the older CRD still has externalAccess")
	}
	if err := c.Create(ctx, old); err != nil {
		t.Fatal(err)
	}
	for run := 1; run <= 2; run++ {
		out, err := exec.Command(operatorBinary(t), "--kubeconfig="+writeKubeconfig(t, env, ""), "--apply-crds").CombinedOutput()
		if err != nil {
			t.Fatalf("run %d: %v\n%s", run, err, out)
		}
		if !strings.Contains(string(out), "every CustomResourceDefinition is served") {
			t.Errorf("run %d said:\n%s", run, out)
		}
	}
	for _, name := range []string{"storeclusters.cellstore.io", "storeusers.cellstore.io", "storebackups.cellstore.io", "storescheduledbackups.cellstore.io"} {
		cur := &unstructured.Unstructured{}
		cur.SetAPIVersion("apiextensions.k8s.io/v1")
		cur.SetKind("CustomResourceDefinition")
		if err := c.Get(ctx, client.ObjectKey{Name: name}, cur); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if name == "storeclusters.cellstore.io" {
			if _, ok := props(cur)["externalAccess"]; !ok {
				t.Error("the StoreCluster CRD was not upgraded: no spec.externalAccess")
			}
		}
	}
}
