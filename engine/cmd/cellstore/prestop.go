package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"
)

// masterPrestop is the master's /prestop: nothing to prepare, SIGTERM then closes the catalog and
// releases the election Lease so a standby takes over at once.
var masterPrestop = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		http.Error(w, "use POST", http.StatusMethodNotAllowed)
		return
	}
	fmt.Fprintln(w, "master: nothing to prepare; SIGTERM closes the catalog and releases the Lease")
})

func prestopCommand() *cobra.Command {
	var addr string
	var timeout time.Duration
	cmd := &cobra.Command{
		Use:   "prestop",
		Short: "Prepare the local process for shutdown (a pod's preStop hook)",
		Long: `Asks the master or region server listening on --http-addr to prepare for shutdown and waits
until it has, or the timeout passes: a region server has the master drain it and waits until it holds
no regions. It exits with status 0 either way (a preStop hook must not block the shutdown); what
happened is printed.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, cancel := context.WithTimeout(context.Background(), timeout+5*time.Second)
			defer cancel()
			u := fmt.Sprintf("http://%s/prestop?timeout=%s", addr, url.QueryEscape(timeout.String()))
			req, err := http.NewRequestWithContext(ctx, http.MethodPost, u, nil)
			if err == nil {
				var resp *http.Response
				if resp, err = http.DefaultClient.Do(req); err == nil {
					body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
					resp.Body.Close()
					fmt.Fprintln(cmd.OutOrStdout(), strings.TrimSpace(string(body)))
					return nil
				}
			}
			fmt.Fprintf(os.Stderr, "cellstore prestop: %v (continuing with the shutdown)\n", err)
			return nil
		},
	}
	cmd.Flags().StringVar(&addr, "http-addr", "127.0.0.1:16030", "the local process's telemetry address")
	cmd.Flags().DurationVar(&timeout, "timeout", 5*time.Minute, "how long to wait for the drain")
	return cmd
}
