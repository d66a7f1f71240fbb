package plugin

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"text/tabwriter"
	"time"
	"unicode"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/cellstore/cellstore/operator/api/v1alpha1"
	"github.com/cellstore/cellstore/operator/internal/resources"
)

func statusCommand(env func() (*Env, error)) *cobra.Command {
	var master bool
	cmd := &cobra.Command{
		Use:   "status NAME",
		Short: "Show a StoreCluster: phase, servers, regions, conditions, rollout and the last restarts",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			e, err := env()
			if err != nil {
				return err
			}
			return e.Status(cmd.Context(), args[0], master)
		},
	}
	cmd.Flags().BoolVar(&master, "master", false, "also show the active master's own view (cellstore shell's status 'detailed')")
	return cmd
}

// Status prints a StoreCluster's state.
func (e *Env) Status(ctx context.Context, name string, master bool) error {
	c, err := e.cluster(ctx, name)
	if err != nil {
		return err
	}
	now := e.Now()
	w := tabwriter.NewWriter(e.Out, 0, 4, 2, ' ', 0)
	row := func(k, v string) { fmt.Fprintf(w, "%s:\t%s\n", k, v) }
	st := &c.Status
	row("Cluster", fmt.Sprintf("%s (namespace %s)", c.Name, c.Namespace))
	row("Phase", or(string(st.Phase), "(not reconciled yet)"))
	if st.Version != "" {
		row("Version", st.Version)
	}
	row("Masters", fmt.Sprintf("%d/%d ready, %d updated; active %s", st.Masters.Ready, st.Masters.Replicas, st.Masters.Updated, or(st.Masters.Active, "none")))
	row("Region servers", fmt.Sprintf("%d/%d ready, %d updated, %d draining", st.RegionServers.Ready, st.RegionServers.Replicas,
		st.RegionServers.Updated, st.RegionServers.Draining))
	row("Regions", fmt.Sprintf("%d, %d in transition", st.Regions.Total, st.Regions.InTransition))
	if r := st.Rollout; r != nil {
		v := fmt.Sprintf("%s %s %s: %s (%s)", r.Group, r.Pod, r.Action, r.Step, r.Reason)
		if r.Since != nil {
			v += ", for " + age(now, r.Since.Time)
		}
		if r.Blocked != "" {
			v += "; blocked: " + r.Blocked
		}
		row("Rollout", v)
	}
	if h := st.Hibernation; h != nil {
		row("Hibernation", fmt.Sprintf("%s since %s (%d tables to enable on waking)", h.State, age(now, h.Since.Time), len(h.Tables)))
	}
	if r := st.Recovery; r != nil {
		v := "from StoreBackup " + r.Backup
		if r.Cluster != "" {
			v += " of " + r.Cluster
		}
		if r.TargetTime != nil {
			v += ", to " + r.TargetTime.UTC().Format(time.RFC3339)
		}
		if r.CompletedAt != nil {
			v += fmt.Sprintf(", %d tables, done %s ago", len(r.Restored), age(now, r.CompletedAt.Time))
		} else {
			v += fmt.Sprintf(", %d tables so far", len(r.Restored))
		}
		row("Recovery", v)
	}
	if c.Spec.Backup != nil {
		v := fmt.Sprintf("s3://%s/%s", c.Spec.Backup.S3.Bucket, c.Spec.Backup.S3.Prefix)
		if c.Spec.Backup.WALArchive != nil {
			v += fmt.Sprintf(" (WAL archived every %s)", c.Spec.Backup.WALArchive.WALArchiveInterval())
		}
		row("Backups", v)
	}
	if err := w.Flush(); err != nil {
		return err
	}

	fmt.Fprintln(e.Out, "\nConditions:")
	w = tabwriter.NewWriter(e.Out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "  TYPE\tSTATUS\tREASON\tAGE\tMESSAGE")
	for _, cd := range st.Conditions {
		fmt.Fprintf(w, "  %s\t%s\t%s\t%s\t%s\n", cd.Type, cd.Status, cd.Reason, age(now, cd.LastTransitionTime.Time), oneLine(cd.Message))
	}
	if err := w.Flush(); err != nil {
		return err
	}

	pods, err := e.pods(ctx, c, "")
	if err != nil {
		return err
	}
	regions := map[string]v1alpha1.ServerRegions{}
	for _, s := range st.Regions.PerServer {
		regions[s.Pod] = s
	}
	fmt.Fprintln(e.Out, "\nPods:")
	w = tabwriter.NewWriter(e.Out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "  NAME\tROLE\tREADY\tRESTARTS\tAGE\tREGIONS\tSERVER STATE\tNODE")
	for _, p := range pods {
		role := p.Labels[resources.LabelComponent]
		ready := "false"
		if podReady(&p) {
			ready = "true"
		}
		var restarts int32
		for _, cs := range p.Status.ContainerStatuses {
			restarts += cs.RestartCount
		}
		regs, state := "-", "-"
		if s, ok := regions[p.Name]; ok {
			regs, state = fmt.Sprint(s.Regions), or(s.State, "-")
			if s.Draining {
				state += " (draining)"
			}
		} else if role == string(resources.GroupMaster) {
			state = "standby"
			if strings.HasPrefix(st.Masters.Active, p.Name+".") || st.Masters.Active == p.Name {
				state = "active"
			}
		}
		fmt.Fprintf(w, "  %s\t%s\t%s\t%d\t%s\t%s\t%s\t%s\n", p.Name, role, ready, restarts, age(now, p.CreationTimestamp.Time), regs, state, or(p.Spec.NodeName, "-"))
	}
	if err := w.Flush(); err != nil {
		return err
	}

	// The last restarts and the reasons the operator gave (its RollingRestart events).
	var events corev1.EventList
	if err := e.Client.List(ctx, &events, client.InNamespace(c.Namespace)); err != nil {
		return err
	}
	var restarts []corev1.Event
	for _, ev := range events.Items {
		if ev.InvolvedObject.Kind == "StoreCluster" && ev.InvolvedObject.Name == c.Name && ev.Reason == "RollingRestart" {
			restarts = append(restarts, ev)
		}
	}
	slices.SortFunc(restarts, func(a, b corev1.Event) int { return eventTime(b).Compare(eventTime(a)) })
	if len(restarts) > 0 {
		fmt.Fprintln(e.Out, "\nLast restarts:")
		w = tabwriter.NewWriter(e.Out, 0, 4, 2, ' ', 0)
		fmt.Fprintln(w, "  AGE\tMESSAGE")
		for _, ev := range restarts[:min(5, len(restarts))] {
			fmt.Fprintf(w, "  %s\t%s\n", age(now, eventTime(ev)), oneLine(ev.Message))
		}
		if err := w.Flush(); err != nil {
			return err
		}
	}
	if master {
		fmt.Fprintln(e.Out, "\nThe master's view:")
		return e.runShell(ctx, c, "status 'detailed'")
	}
	return nil
}

// oneLine is a message as the table prints it: control characters — line breaks and tabs that
// would break the table, escape sequences a terminal would act on (messages quote what users
// wrote: bucket names, errors) — each become a space.
func oneLine(msg string) string {
	return strings.Map(func(r rune) rune {
		if unicode.IsControl(r) {
			return ' '
		}
		return r
	}, msg)
}

func eventTime(ev corev1.Event) time.Time {
	switch {
	case !ev.LastTimestamp.IsZero():
		return ev.LastTimestamp.Time
	case !ev.EventTime.IsZero():
		return ev.EventTime.Time
	}
	return ev.CreationTimestamp.Time
}

// age is a duration as kubectl prints ages: 45s, 3m12s, 5h3m, 12d.
func age(now, t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	d := now.Sub(t)
	switch {
	case d < 0:
		return "0s"
	case d < time.Minute:
		return fmt.Sprintf("%ds", int(d.Seconds()))
	case d < time.Hour:
		return fmt.Sprintf("%dm%ds", int(d.Minutes()), int(d.Seconds())%60)
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh%dm", int(d.Hours()), int(d.Minutes())%60)
	}
	return fmt.Sprintf("%dd", int(d.Hours()/24))
}

func or(s, def string) string {
	if s == "" {
		return def
	}
	return s
}
