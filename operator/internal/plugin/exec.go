package plugin

import (
	"context"
	"io"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/httpstream"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/remotecommand"

	"github.com/cellstore/cellstore/operator/internal/resources"
)

// SPDYExecutor runs commands in containers through the API server, as kubectl exec does
// (WebSocket first, SPDY where the server has no WebSocket exec).
func SPDYExecutor(cfg *rest.Config, kube kubernetes.Interface) Executor {
	return func(ctx context.Context, ns, pod, container string, cmd []string, in io.Reader, out, errOut io.Writer) error {
		req := kube.CoreV1().RESTClient().Post().Resource("pods").Namespace(ns).Name(pod).SubResource("exec").
			VersionedParams(&corev1.PodExecOptions{Container: container, Command: cmd, Stdin: in != nil, Stdout: true, Stderr: true},
				scheme.ParameterCodec)
		spdy, err := remotecommand.NewSPDYExecutor(cfg, "POST", req.URL())
		if err != nil {
			return err
		}
		ws, err := remotecommand.NewWebSocketExecutor(cfg, "GET", req.URL().String())
		if err != nil {
			return err
		}
		// SPDY only when the server cannot upgrade to WebSocket: never again after a command ran
		// (a script that failed would run twice).
		exec, err := remotecommand.NewFallbackExecutor(ws, spdy, func(err error) bool {
			return httpstream.IsUpgradeFailure(err) || httpstream.IsHTTPSProxyError(err)
		})
		if err != nil {
			return err
		}
		return exec.StreamWithContext(ctx, remotecommand.StreamOptions{Stdin: in, Stdout: out, Stderr: errOut})
	}
}

func shellCommand(env func() (*Env, error)) *cobra.Command {
	var script string
	cmd := &cobra.Command{
		Use:   "shell NAME [-e SCRIPT]",
		Short: "Open cellstore shell (HBase shell verbs) in the cluster, as a superuser; -e runs a script and exits",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			e, err := env()
			if err != nil {
				return err
			}
			c, err := e.cluster(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			if script != "" {
				return e.runShell(cmd.Context(), c, script)
			}
			pod, err := e.shellPod(cmd.Context(), c)
			if err != nil {
				return err
			}
			// Lines from standard input, answers to standard output (no terminal: the shell reads
			// line by line).
			return e.Exec(cmd.Context(), c.Namespace, pod, resources.EngineContainer,
				[]string{"cellstore", "shell", "--masters", resources.MasterAddress(c)}, e.In, e.Out, e.Err)
		},
	}
	cmd.Flags().StringVarP(&script, "execute", "e", "", "a script: verbs separated by ';' or new lines")
	return cmd
}
