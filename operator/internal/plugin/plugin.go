// Package plugin is kubectl-cellstore, the kubectl plugin for StoreClusters (as CloudNativePG's
// kubectl cnpg): status, drain and undrain, rolling restart, balance, split and move, hibernation,
// backups, an interactive shell and logs. Changes to the cluster's spec go through the operator
// (annotations, StoreBackup objects); operations on regions and servers run `cellstore shell` in a
// master pod's engine container (as `kubectl exec` does), which holds the server certificate of a
// secure cluster.
package plugin

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/cellstore/cellstore/operator/api/v1alpha1"
	"github.com/cellstore/cellstore/operator/internal/resources"
)

// Executor runs a command in a container of a pod, as `kubectl exec` does.
type Executor func(ctx context.Context, ns, pod, container string, cmd []string, in io.Reader, out, errOut io.Writer) error

// Env is what the commands work with. Tests build one over envtest; main builds it from the
// kubeconfig (Connect).
type Env struct {
	Namespace string
	Client    client.Client
	Kube      kubernetes.Interface
	Exec      Executor
	In        io.Reader
	Out, Err  io.Writer
	Now       func() time.Time
}

// Scheme holds the Kubernetes types and the StoreCluster API.
func Scheme() *runtime.Scheme {
	s := runtime.NewScheme()
	_ = clientgoscheme.AddToScheme(s)
	_ = v1alpha1.AddToScheme(s)
	return s
}

// ConnectOptions are the kubeconfig flags.
type ConnectOptions struct {
	Kubeconfig, Context, Namespace string
	// Timeout bounds each request to the API server (0: none, as kubectl's default). Shell
	// completion sets it: a <TAB> must not hang on an API server that does not answer.
	Timeout time.Duration
}

// Connect builds an Env from the kubeconfig (KUBECONFIG, ~/.kube/config or in-cluster), as kubectl
// does.
func Connect(o ConnectOptions, in io.Reader, out, errOut io.Writer) (*Env, error) {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	if o.Kubeconfig != "" {
		rules.ExplicitPath = o.Kubeconfig
	}
	cc := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{CurrentContext: o.Context})
	cfg, err := cc.ClientConfig()
	if err != nil {
		return nil, fmt.Errorf("no Kubernetes cluster to talk to (set KUBECONFIG or --kubeconfig): %w", err)
	}
	if o.Timeout > 0 {
		cfg.Timeout = o.Timeout
	}
	ns := o.Namespace
	if ns == "" {
		if ns, _, err = cc.Namespace(); err != nil {
			return nil, err
		}
	}
	return NewEnv(cfg, ns, in, out, errOut)
}

// NewEnv builds an Env over a REST config.
func NewEnv(cfg *rest.Config, ns string, in io.Reader, out, errOut io.Writer) (*Env, error) {
	cl, err := client.New(cfg, client.Options{Scheme: Scheme()})
	if err != nil {
		return nil, err
	}
	kube, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	return &Env{Namespace: ns, Client: cl, Kube: kube, Exec: SPDYExecutor(cfg, kube), In: in, Out: out, Err: errOut, Now: time.Now}, nil
}

// NewCommand is kubectl-cellstore. connect is called once a subcommand runs, or completes its
// arguments (tests pass their Env).
func NewCommand(connect func(ConnectOptions) (*Env, error)) *cobra.Command {
	var o ConnectOptions
	root := &cobra.Command{
		// The binary's name (cobra's Name, which its completion scripts use); help and usage say
		// "kubectl cellstore", as the plugin is run.
		Use:         "kubectl-cellstore",
		Annotations: map[string]string{cobra.CommandDisplayNameAnnotation: "kubectl cellstore"},
		Short:       "Operate Cellstore StoreClusters: status, drain, restart, balance, split, move, hibernate, backup, shell, logs",
		Long: `kubectl cellstore operates the StoreClusters of the Cellstore operator.

Changes go through the operator (annotations on the StoreCluster, StoreBackup objects); region and
server operations run "cellstore shell" in a master pod, with the cluster's own certificate.`,
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	fl := root.PersistentFlags()
	fl.StringVar(&o.Kubeconfig, "kubeconfig", "", "path to the kubeconfig file")
	fl.StringVar(&o.Context, "context", "", "the kubeconfig context to use")
	fl.StringVarP(&o.Namespace, "namespace", "n", "", "the namespace (default: the context's)")
	env := func() (*Env, error) { return connect(o) }
	root.AddCommand(statusCommand(env), drainCommand(env, true), drainCommand(env, false), restartCommand(env),
		balanceCommand(env), splitCommand(env), moveCommand(env), hibernateCommand(env), backupCommand(env),
		shellCommand(env), logsCommand(env))
	addCompletions(root, func() (*Env, error) {
		co := o
		co.Timeout = completionTimeout
		return connect(co)
	})
	return root
}

// cluster reads a StoreCluster, saying what to do when it is not there.
func (e *Env) cluster(ctx context.Context, name string) (*v1alpha1.StoreCluster, error) {
	c := &v1alpha1.StoreCluster{}
	err := e.Client.Get(ctx, client.ObjectKey{Namespace: e.Namespace, Name: name}, c)
	if apierrors.IsNotFound(err) {
		return nil, fmt.Errorf("StoreCluster %s not found in namespace %s (kubectl get storeclusters -A lists them; -n picks the namespace)", name, e.Namespace)
	}
	return c, err
}

// pods lists a group's pods (both groups when g is ""), by name.
func (e *Env) pods(ctx context.Context, c *v1alpha1.StoreCluster, g resources.Group) ([]corev1.Pod, error) {
	sel := client.MatchingLabels{resources.LabelInstance: c.Name, resources.LabelName: resources.AppName}
	if g != "" {
		sel[resources.LabelComponent] = string(g)
	}
	var list corev1.PodList
	if err := e.Client.List(ctx, &list, client.InNamespace(c.Namespace), sel); err != nil {
		return nil, err
	}
	slices.SortFunc(list.Items, func(a, b corev1.Pod) int { return strings.Compare(a.Name, b.Name) })
	return list.Items, nil
}

// shellPod is a master pod to run `cellstore shell` in: a ready one (any master will do: a
// standby sends the shell on to the active one).
func (e *Env) shellPod(ctx context.Context, c *v1alpha1.StoreCluster) (string, error) {
	pods, err := e.pods(ctx, c, resources.GroupMaster)
	if err != nil {
		return "", err
	}
	for _, p := range pods {
		if podReady(&p) {
			return p.Name, nil
		}
	}
	if c.Status.Phase == v1alpha1.PhaseHibernated {
		return "", fmt.Errorf("StoreCluster %s is hibernated: no master runs (kubectl cellstore hibernate %s off wakes it)", c.Name, c.Name)
	}
	return "", fmt.Errorf("no master pod of StoreCluster %s is ready (kubectl cellstore status %s says why)", c.Name, c.Name)
}

// runShell runs a cellstore shell script in a master pod and copies its output.
func (e *Env) runShell(ctx context.Context, c *v1alpha1.StoreCluster, script string) error {
	pod, err := e.shellPod(ctx, c)
	if err != nil {
		return err
	}
	cmd := []string{"cellstore", "shell", "--masters", resources.MasterAddress(c), "-e", script}
	if err := e.Exec(ctx, c.Namespace, pod, resources.EngineContainer, cmd, nil, e.Out, e.Err); err != nil {
		return fmt.Errorf("cellstore shell in %s: %w", pod, err)
	}
	return nil
}

// serverName turns a region server's pod name into its identity (host:port); an identity is kept.
func serverName(c *v1alpha1.StoreCluster, s string) (string, error) {
	if strings.Contains(s, ":") {
		return s, nil
	}
	if !strings.HasPrefix(s, resources.StatefulSetName(c, resources.GroupRegionServer)+"-") {
		return "", fmt.Errorf("%q is not a region server of StoreCluster %s: name its pod (%s-N) or its host:port", s, c.Name,
			resources.StatefulSetName(c, resources.GroupRegionServer))
	}
	return resources.ServerName(c, s), nil
}

// quote makes a shell string literal.
func quote(s string) string {
	return "'" + strings.NewReplacer(`\`, `\\`, `'`, `\'`).Replace(s) + "'"
}

func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}
