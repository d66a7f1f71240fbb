package plugin

import (
	"context"
	"io"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/cellstore/cellstore/operator/api/v1alpha1"
	"github.com/cellstore/cellstore/operator/internal/resources"
)

// CompletionHelper is the program kubectl looks for on the PATH to complete `kubectl cellstore
// <TAB>`: it runs it with the words typed after "cellstore" (the last one the word being
// completed, "" for a new one) and reads cobra's __complete output from it. The plugin's binary
// is that program too when run under this name (make build links it next to kubectl-cellstore).
const CompletionHelper = "kubectl_complete-cellstore"

// completionTimeout bounds a completion's requests to the API server: a shell waiting on <TAB>
// should come back empty rather than hang.
const completionTimeout = 5 * time.Second

// Main runs the plugin as the binary was run: argv is os.Args. Under the name CompletionHelper it
// prints the completions of argv[1:] (as `kubectl-cellstore __complete ARGS...`), else it runs
// the command argv[1:] names.
func Main(ctx context.Context, argv []string, connect func(ConnectOptions) (*Env, error), out, errOut io.Writer) error {
	cmd := NewCommand(connect)
	cmd.SetArgs(commandArgs(argv))
	cmd.SetOut(out)
	cmd.SetErr(errOut)
	return cmd.ExecuteContext(ctx)
}

// commandArgs are the root command's arguments for os.Args.
func commandArgs(argv []string) []string {
	if len(argv) == 0 {
		return []string{}
	}
	args := argv[1:]
	if strings.TrimSuffix(filepath.Base(argv[0]), ".exe") != CompletionHelper {
		return args
	}
	if len(args) == 0 {
		args = []string{""} // nothing typed yet: __complete needs the word to complete
	}
	return append([]string{cobra.ShellCompRequestCmd}, args...)
}

// lister lists the candidates for the argument after args (args[0], if any, is the cluster's name)
// or for a flag's value.
type lister func(ctx context.Context, e *Env, cmd *cobra.Command, args []string) ([]string, error)

// addCompletions completes the subcommands' arguments from the cluster: NAME with the namespace's
// StoreClusters, SERVER with the cluster's region server pods, POD with its pods; -n with the
// namespaces. env connects with a timeout.
func addCompletions(root *cobra.Command, env func() (*Env, error)) {
	_ = root.RegisterFlagCompletionFunc("namespace", completeFlag(env, listNamespaces))
	for _, cmd := range root.Commands() {
		switch cmd.Name() {
		case "status", "restart", "balance", "backup", "shell", "split":
			// split's TABLE|REGION would take a shell in a master pod: left to the user.
			cmd.ValidArgsFunction = complete(env, listClusters)
		case "drain", "undrain":
			cmd.ValidArgsFunction = complete(env, listClusters, listRegionServers)
		case "move":
			cmd.ValidArgsFunction = complete(env, listClusters, nil, listRegionServers)
		case "logs":
			cmd.ValidArgsFunction = complete(env, listClusters, listPods)
			_ = cmd.RegisterFlagCompletionFunc("role", cobra.FixedCompletions(
				[]string{string(resources.GroupMaster), string(resources.GroupRegionServer)}, cobra.ShellCompDirectiveNoFileComp))
		case "hibernate":
			clusters := complete(env, listClusters)
			cmd.ValidArgsFunction = func(cmd *cobra.Command, args []string, toComplete string) ([]string, cobra.ShellCompDirective) {
				if len(args) == 1 {
					return withPrefix([]string{"on", "off"}, toComplete), cobra.ShellCompDirectiveNoFileComp
				}
				return clusters(cmd, args, toComplete)
			}
		}
	}
}

// complete completes positional arguments: listers[i] lists the candidates for argument i; past
// the end, or nil, nothing is offered, not even files.
func complete(env func() (*Env, error), listers ...lister) cobra.CompletionFunc {
	return func(cmd *cobra.Command, args []string, toComplete string) ([]string, cobra.ShellCompDirective) {
		if len(args) >= len(listers) || listers[len(args)] == nil {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		return list(env, listers[len(args)], cmd, args, toComplete)
	}
}

// completeFlag completes a flag's value.
func completeFlag(env func() (*Env, error), l lister) cobra.CompletionFunc {
	return func(cmd *cobra.Command, args []string, toComplete string) ([]string, cobra.ShellCompDirective) {
		return list(env, l, cmd, args, toComplete)
	}
}

// list runs a lister, keeping the names that start with toComplete. An error (no kubeconfig, no
// such cluster, no answer in time) offers nothing and prints nothing on standard output: it is
// logged only where cobra logs completion (the file BASH_COMP_DEBUG_FILE names).
func list(env func() (*Env, error), l lister, cmd *cobra.Command, args []string, toComplete string) ([]string, cobra.ShellCompDirective) {
	ctx := cmd.Context()
	if ctx == nil {
		ctx = context.Background()
	}
	ctx, cancel := context.WithTimeout(ctx, completionTimeout)
	defer cancel()
	e, err := env()
	if err != nil {
		return completionFailed(err)
	}
	names, err := l(ctx, e, cmd, args)
	if err != nil {
		return completionFailed(err)
	}
	return withPrefix(names, toComplete), cobra.ShellCompDirectiveNoFileComp
}

func completionFailed(err error) ([]string, cobra.ShellCompDirective) {
	cobra.CompDebugln("kubectl cellstore: "+err.Error(), false)
	return nil, cobra.ShellCompDirectiveError | cobra.ShellCompDirectiveNoFileComp
}

func withPrefix(names []string, prefix string) []string {
	var out []string
	for _, n := range names {
		if strings.HasPrefix(n, prefix) {
			out = append(out, n)
		}
	}
	return out
}

func listClusters(ctx context.Context, e *Env, _ *cobra.Command, _ []string) ([]string, error) {
	var list v1alpha1.StoreClusterList
	if err := e.Client.List(ctx, &list, client.InNamespace(e.Namespace)); err != nil {
		return nil, err
	}
	names := make([]string, 0, len(list.Items))
	for _, c := range list.Items {
		names = append(names, c.Name)
	}
	slices.Sort(names)
	return names, nil
}

func listRegionServers(ctx context.Context, e *Env, _ *cobra.Command, args []string) ([]string, error) {
	return e.podNames(ctx, args[0], resources.GroupRegionServer)
}

// listPods lists the cluster's pods, of the --role given before (if any).
func listPods(ctx context.Context, e *Env, cmd *cobra.Command, args []string) ([]string, error) {
	role, _ := cmd.Flags().GetString("role")
	if role != "" && role != string(resources.GroupMaster) && role != string(resources.GroupRegionServer) {
		return nil, nil
	}
	return e.podNames(ctx, args[0], resources.Group(role))
}

func listNamespaces(ctx context.Context, e *Env, _ *cobra.Command, _ []string) ([]string, error) {
	var list corev1.NamespaceList
	if err := e.Client.List(ctx, &list); err != nil {
		return nil, err
	}
	names := make([]string, 0, len(list.Items))
	for _, ns := range list.Items {
		names = append(names, ns.Name)
	}
	slices.Sort(names)
	return names, nil
}

// podNames are the names of a cluster's pods of a group (both when g is "").
func (e *Env) podNames(ctx context.Context, cluster string, g resources.Group) ([]string, error) {
	c, err := e.cluster(ctx, cluster)
	if err != nil {
		return nil, err
	}
	pods, err := e.pods(ctx, c, g)
	if err != nil {
		return nil, err
	}
	names := make([]string, 0, len(pods))
	for _, p := range pods {
		names = append(names, p.Name)
	}
	return names, nil
}
