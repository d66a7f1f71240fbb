//go:build envtest

package main

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/cellstore/cellstore/operator/api/v1alpha1"
	"github.com/cellstore/cellstore/operator/internal/testenv"
	appsv1 "k8s.io/api/apps/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// TestBinary runs the operator binary against a real API server: it must elect itself leader
// through a Lease, answer its probes, and reconcile a StoreCluster.
func TestBinary(t *testing.T) {
	env, err := testenv.Start(testenv.Options{CRDDirs: []string{filepath.Join("..", "..", "config", "crd", "bases")}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Stop() })
	dir := t.TempDir()

	bin := filepath.Join(dir, "manager")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	kubeconfig := filepath.Join(dir, "kubeconfig")
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["envtest"] = &clientcmdapi.Cluster{Server: env.Config.Host, CertificateAuthorityData: env.Config.CAData}
	cfg.AuthInfos["admin"] = &clientcmdapi.AuthInfo{ClientCertificateData: env.Config.CertData, ClientKeyData: env.Config.KeyData, Token: env.Config.BearerToken}
	cfg.Contexts["envtest"] = &clientcmdapi.Context{Cluster: "envtest", AuthInfo: "admin"}
	cfg.CurrentContext = "envtest"
	if err := clientcmd.WriteToFile(*cfg, kubeconfig); err != nil {
		t.Fatal(err)
	}
	probe := freePort(t)
	cmd := exec.Command(bin, "--kubeconfig="+kubeconfig, "--leader-elect", "--leader-election-namespace=default",
		"--metrics-bind-address=0", fmt.Sprintf("--health-probe-bind-address=127.0.0.1:%d", probe), "--zap-log-level=info")
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

	ctx := context.Background()
	until := func(what string, cond func(context.Context) (bool, error)) {
		t.Helper()
		if err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 60*time.Second, true, cond); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}
	for _, path := range []string{"/healthz", "/readyz"} {
		until("GET "+path, func(context.Context) (bool, error) {
			resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d%s", probe, path))
			if err != nil {
				return false, nil
			}
			resp.Body.Close()
			return resp.StatusCode == http.StatusOK, nil
		})
	}

	scheme := runtime.NewScheme()
	utilruntime.Must(clientgoscheme.AddToScheme(scheme))
	utilruntime.Must(v1alpha1.AddToScheme(scheme))
	c, err := client.New(env.Config, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	until("the leader election Lease", func(ctx context.Context) (bool, error) {
		l := &coordinationv1.Lease{}
		err := c.Get(ctx, client.ObjectKey{Namespace: "default", Name: "cellstore-operator.cellstore.io"}, l)
		return err == nil && l.Spec.HolderIdentity != nil && *l.Spec.HolderIdentity != "", nil
	})
	sc := &v1alpha1.StoreCluster{}
	sc.Namespace, sc.Name = "default", "smoke"
	sc.Spec.Image = "docker.io/cellstore/engine:v0.1.0"
	sc.Spec.Storage.Volume = &v1alpha1.VolumeStorage{Size: "1Gi"}
	if err := c.Create(ctx, sc); err != nil {
		t.Fatal(err)
	}
	until("the region server StatefulSet", func(ctx context.Context) (bool, error) {
		return c.Get(ctx, client.ObjectKey{Namespace: "default", Name: "smoke-regionserver"}, &appsv1.StatefulSet{}) == nil, nil
	})
	until("a status", func(ctx context.Context) (bool, error) {
		cur := &v1alpha1.StoreCluster{}
		if err := c.Get(ctx, client.ObjectKeyFromObject(sc), cur); err != nil {
			return false, err
		}
		return cur.Status.ObservedGeneration == cur.Generation && cur.Status.Phase == v1alpha1.PhaseProvisioning, nil
	})
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
