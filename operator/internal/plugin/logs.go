package plugin

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"sync"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"

	"github.com/cellstore/cellstore/operator/internal/resources"
)

func logsCommand(env func() (*Env, error)) *cobra.Command {
	var o LogOptions
	cmd := &cobra.Command{
		Use:   "logs NAME [POD]",
		Short: "Print the engine logs of a StoreCluster's pods (or one pod), each line prefixed with its pod",
		Args:  cobra.RangeArgs(1, 2),
		RunE: func(cmd *cobra.Command, args []string) error {
			e, err := env()
			if err != nil {
				return err
			}
			if len(args) == 2 {
				o.Pod = args[1]
			}
			return e.Logs(cmd.Context(), args[0], o)
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&o.Role, "role", "", "master or regionserver (default both)")
	fl.BoolVarP(&o.Follow, "follow", "f", false, "keep streaming")
	fl.Int64Var(&o.Tail, "tail", 100, "lines from the end of each pod's log (-1: all)")
	fl.BoolVarP(&o.Previous, "previous", "p", false, "the previous container's logs (after a restart)")
	return cmd
}

// LogOptions choose the logs.
type LogOptions struct {
	Role, Pod        string
	Follow, Previous bool
	Tail             int64
}

// Logs streams the engine containers' logs of the cluster's pods, line by line, prefixed.
func (e *Env) Logs(ctx context.Context, name string, o LogOptions) error {
	c, err := e.cluster(ctx, name)
	if err != nil {
		return err
	}
	if o.Role != "" && o.Role != string(resources.GroupMaster) && o.Role != string(resources.GroupRegionServer) {
		return fmt.Errorf("--role is master or regionserver, not %q", o.Role)
	}
	pods, err := e.pods(ctx, c, resources.Group(o.Role))
	if err != nil {
		return err
	}
	var names []string
	for _, p := range pods {
		if o.Pod == "" || p.Name == o.Pod {
			names = append(names, p.Name)
		}
	}
	if len(names) == 0 {
		return fmt.Errorf("no pod of StoreCluster %s matches (kubectl cellstore status %s lists them)", name, name)
	}
	opts := &corev1.PodLogOptions{Container: resources.EngineContainer, Follow: o.Follow, Previous: o.Previous}
	if o.Tail >= 0 {
		opts.TailLines = &o.Tail
	}
	var mu sync.Mutex // whole lines, one writer at a time
	var wg sync.WaitGroup
	errs := make([]error, len(names))
	for i, pod := range names {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rc, err := e.Kube.CoreV1().Pods(c.Namespace).GetLogs(pod, opts).Stream(ctx)
			if err != nil {
				errs[i] = fmt.Errorf("logs of %s: %w", pod, err)
				return
			}
			defer rc.Close()
			errs[i] = copyLines(rc, pod, e.Out, &mu)
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

func copyLines(r io.Reader, prefix string, out io.Writer, mu *sync.Mutex) error {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		mu.Lock()
		_, err := fmt.Fprintf(out, "[%s] %s\n", prefix, sc.Bytes())
		mu.Unlock()
		if err != nil {
			return err
		}
	}
	return sc.Err()
}
