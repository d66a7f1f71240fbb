package plugin

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/cellstore/cellstore/operator/api/v1alpha1"
)

// shellAction is a command that runs one cellstore shell script made from its arguments.
func shellAction(env func() (*Env, error), use, short string, args cobra.PositionalArgs, script func(c *v1alpha1.StoreCluster, args []string) (string, error)) *cobra.Command {
	return &cobra.Command{
		Use:   use,
		Short: short,
		Args:  args,
		RunE: func(cmd *cobra.Command, args []string) error {
			e, err := env()
			if err != nil {
				return err
			}
			c, err := e.cluster(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			s, err := script(c, args[1:])
			if err != nil {
				return err
			}
			return e.runShell(cmd.Context(), c, s)
		},
	}
}

func drainCommand(env func() (*Env, error), drain bool) *cobra.Command {
	verb, short := "drain", "Move every region off a region server (it takes none until undrained)"
	if !drain {
		verb, short = "undrain", "Let a drained region server take regions again"
	}
	return shellAction(env, verb+" NAME SERVER", short+"; SERVER is its pod (NAME-regionserver-N) or host:port",
		cobra.ExactArgs(2), func(c *v1alpha1.StoreCluster, args []string) (string, error) {
			s, err := serverName(c, args[0])
			if err != nil {
				return "", err
			}
			return verb + " " + quote(s), nil
		})
}

func balanceCommand(env func() (*Env, error)) *cobra.Command {
	return shellAction(env, "balance NAME", "Run the balancer now", cobra.ExactArgs(1),
		func(*v1alpha1.StoreCluster, []string) (string, error) { return "balancer", nil })
}

func splitCommand(env func() (*Env, error)) *cobra.Command {
	return shellAction(env, "split NAME TABLE|REGION [SPLIT_KEY]",
		"Split a region (at its midpoint or at SPLIT_KEY), or every region of a table", cobra.RangeArgs(2, 3),
		func(_ *v1alpha1.StoreCluster, args []string) (string, error) {
			s := "split " + quote(args[0])
			if len(args) == 2 {
				s += ", " + quote(args[1])
			}
			return s, nil
		})
}

func moveCommand(env func() (*Env, error)) *cobra.Command {
	return shellAction(env, "move NAME REGION [SERVER]", "Move a region to SERVER (its pod or host:port), or to a server the master picks",
		cobra.RangeArgs(2, 3), func(c *v1alpha1.StoreCluster, args []string) (string, error) {
			s := "move " + quote(args[0])
			if len(args) == 2 {
				srv, err := serverName(c, args[1])
				if err != nil {
					return "", err
				}
				s += ", " + quote(srv)
			}
			return s, nil
		})
}

func restartCommand(env func() (*Env, error)) *cobra.Command {
	return &cobra.Command{
		Use:   "restart NAME",
		Short: "Restart every pod of a StoreCluster, one at a time, region servers drained first (the operator's rolling restart)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			e, err := env()
			if err != nil {
				return err
			}
			at := e.Now().UTC().Format(time.RFC3339)
			if err := e.annotate(cmd.Context(), args[0], v1alpha1.AnnotationRestartedAt, at); err != nil {
				return err
			}
			fmt.Fprintf(e.Out, "storecluster/%s restart requested (%s=%s): kubectl cellstore status %s follows it\n",
				args[0], v1alpha1.AnnotationRestartedAt, at, args[0])
			return nil
		},
	}
}

func hibernateCommand(env func() (*Env, error)) *cobra.Command {
	return &cobra.Command{
		Use:   "hibernate NAME on|off",
		Short: "Stop every pod of a StoreCluster keeping its data (on), or start it again (off)",
		Args:  cobra.MatchAll(cobra.ExactArgs(2), func(_ *cobra.Command, args []string) error { return onOff(args[1]) }),
		RunE: func(cmd *cobra.Command, args []string) error {
			e, err := env()
			if err != nil {
				return err
			}
			value := ""
			if args[1] == "on" {
				value = "on"
			}
			if err := e.annotate(cmd.Context(), args[0], v1alpha1.AnnotationHibernation, value); err != nil {
				return err
			}
			if value == "on" {
				fmt.Fprintf(e.Out, "storecluster/%s hibernating: its tables are disabled, then every pod stops\n", args[0])
			} else {
				fmt.Fprintf(e.Out, "storecluster/%s waking: its pods start and its tables are enabled again\n", args[0])
			}
			return nil
		},
	}
}

func onOff(s string) error {
	if s != "on" && s != "off" {
		return fmt.Errorf("say on or off, not %q", s)
	}
	return nil
}

// annotate sets (value != "") or removes an annotation of a StoreCluster.
func (e *Env) annotate(ctx context.Context, name, key, value string) error {
	c, err := e.cluster(ctx, name)
	if err != nil {
		return err
	}
	patch := client.MergeFrom(c.DeepCopy())
	if c.Annotations == nil {
		c.Annotations = map[string]string{}
	}
	if value == "" {
		delete(c.Annotations, key)
	} else {
		c.Annotations[key] = value
	}
	return e.Client.Patch(ctx, c, patch)
}

func backupCommand(env func() (*Env, error)) *cobra.Command {
	var name string
	var tables []string
	cmd := &cobra.Command{
		Use:   "backup NAME",
		Short: "Back up a StoreCluster now: a StoreBackup of every table (or --tables) to its backup location",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			e, err := env()
			if err != nil {
				return err
			}
			b, err := e.Backup(cmd.Context(), args[0], name, tables)
			if err != nil {
				return err
			}
			fmt.Fprintf(e.Out, "storebackup/%s created: kubectl get storebackup %s -n %s follows it\n", b.Name, b.Name, b.Namespace)
			return nil
		},
	}
	cmd.Flags().StringVar(&name, "name", "", "the StoreBackup's name (default NAME-<UTC time>)")
	cmd.Flags().StringSliceVar(&tables, "tables", nil, "tables to back up, namespace:table (default: every table)")
	return cmd
}

// Backup creates a StoreBackup of a cluster.
func (e *Env) Backup(ctx context.Context, cluster, name string, tables []string) (*v1alpha1.StoreBackup, error) {
	c, err := e.cluster(ctx, cluster)
	if err != nil {
		return nil, err
	}
	if c.Spec.Backup == nil {
		return nil, fmt.Errorf("StoreCluster %s has no backup location: set spec.backup.s3 first (docs/snapshots.md)", cluster)
	}
	if name == "" {
		name = cluster + "-" + strings.ToLower(e.Now().UTC().Format("20060102150405"))
	}
	b := &v1alpha1.StoreBackup{ObjectMeta: metav1.ObjectMeta{Namespace: c.Namespace, Name: name},
		Spec: v1alpha1.StoreBackupSpec{Cluster: cluster, Tables: tables}}
	if err := e.Client.Create(ctx, b); err != nil {
		return nil, err
	}
	return b, nil
}
