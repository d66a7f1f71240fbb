// Package testenv starts a real kube-apiserver and etcd (controller-runtime's envtest) from the
// binaries hack/k8s-binaries.sh builds, for the operator's integration tests. It can install
// prometheus-operator's monitoring CRDs so tests cover both "CRDs present" and "absent".
package testenv

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
)

// Options say what to install into the new API server.
type Options struct {
	// CRDDirs are directories (or files) of CustomResourceDefinition YAML to install.
	CRDDirs []string
	// MonitoringCRDs installs ServiceMonitor, PodMonitor and PrometheusRule.
	MonitoringCRDs bool
}

// Env is a running API server.
type Env struct {
	Config *rest.Config
	Client client.Client
	env    *envtest.Environment
}

// Start starts kube-apiserver and etcd and installs the CRDs of opts. Call Stop when done.
func Start(opts Options) (*Env, error) {
	root, err := RepoRoot()
	if err != nil {
		return nil, err
	}
	assets, err := AssetsDir(root)
	if err != nil {
		return nil, err
	}
	paths := append([]string(nil), opts.CRDDirs...)
	if opts.MonitoringCRDs {
		dir, err := MonitoringCRDDir(root)
		if err != nil {
			return nil, err
		}
		paths = append(paths, dir)
	}
	e := &envtest.Environment{
		BinaryAssetsDirectory: assets,
		CRDDirectoryPaths:     paths,
		ErrorIfCRDPathMissing: true,
	}
	cfg, err := e.Start()
	if err != nil {
		return nil, fmt.Errorf("start kube-apiserver and etcd from %s: %w", assets, err)
	}
	c, err := client.New(cfg, client.Options{})
	if err != nil {
		_ = e.Stop()
		return nil, err
	}
	return &Env{Config: cfg, Client: c, env: e}, nil
}

// Stop stops the API server and etcd and removes their data.
func (e *Env) Stop() error { return e.env.Stop() }

// InstallCRDs installs CRDs (directories or files of YAML) into the running API server and waits
// until they are served, for tests that need a kind to appear while a controller runs.
func (e *Env) InstallCRDs(paths ...string) error {
	_, err := envtest.InstallCRDs(e.Config, envtest.CRDInstallOptions{Paths: paths, ErrorIfPathMissing: true})
	return err
}

// InstallMonitoringCRDs installs prometheus-operator's ServiceMonitor, PodMonitor and
// PrometheusRule into the running API server.
func (e *Env) InstallMonitoringCRDs() error {
	root, err := RepoRoot()
	if err != nil {
		return err
	}
	dir, err := MonitoringCRDDir(root)
	if err != nil {
		return err
	}
	return e.InstallCRDs(dir)
}

// RepoRoot is the directory of the module's go.mod, found from the working directory upwards.
func RepoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if b, err := os.ReadFile(filepath.Join(dir, "go.mod")); err == nil && strings.HasPrefix(string(b), "module github.com/cellstore/cellstore\n") {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("testenv: not inside the cellstore repository (no go.mod of github.com/cellstore/cellstore above the working directory)")
		}
		dir = parent
	}
}

// AssetsDir is where kube-apiserver, etcd and kubectl are: $KUBEBUILDER_ASSETS when set, else the
// output directory of hack/k8s-binaries.sh.
func AssetsDir(root string) (string, error) {
	dir := os.Getenv("KUBEBUILDER_ASSETS")
	if dir == "" {
		out, err := exec.Command(filepath.Join(root, "hack", "k8s-binaries.sh"), "--print-dir").Output()
		if err != nil {
			return "", fmt.Errorf("testenv: hack/k8s-binaries.sh --print-dir: %w", err)
		}
		dir = strings.TrimSpace(string(out))
	}
	for _, b := range []string{"kube-apiserver", "etcd", "kubectl"} {
		if _, err := os.Stat(filepath.Join(dir, b)); err != nil {
			return "", fmt.Errorf("testenv: %s missing in %s: build it with 'hack/k8s-binaries.sh envtest' (or 'make test-envtest')", b, dir)
		}
	}
	return dir, nil
}

// MonitoringCRDDir is where hack/monitoring-crds.sh puts prometheus-operator's CRDs (it runs the
// script, which downloads them through the Go module proxy the first time).
func MonitoringCRDDir(root string) (string, error) {
	out, err := exec.Command(filepath.Join(root, "hack", "monitoring-crds.sh")).Output()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			return "", fmt.Errorf("testenv: hack/monitoring-crds.sh: %s", strings.TrimSpace(string(ee.Stderr)))
		}
		return "", fmt.Errorf("testenv: hack/monitoring-crds.sh: %w", err)
	}
	return strings.TrimSpace(string(out)), nil
}
