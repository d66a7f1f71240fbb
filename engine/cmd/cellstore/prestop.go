package main

import (
	"context"
	"crypto/tls"
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
	var https bool
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
			scheme, hc := "http", http.DefaultClient
			if https {
				// The endpoint is this pod's own process on the loopback interface: its
				// certificate names the pod, not 127.0.0.1, and there is no one in between.
				scheme = "https"
				hc = &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true, MinVersion: tls.VersionTLS13}}} //nolint:gosec // loopback to the pod's own process
			}
			u := fmt.Sprintf("%s://%s/prestop?timeout=%s", scheme, addr, url.QueryEscape(timeout.String()))
			req, err := http.NewRequestWithContext(ctx, http.MethodPost, u, nil)
			if err == nil {
				var resp *http.Response
				if resp, err = hc.Do(req); err == nil {
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
	cmd.Flags().BoolVar(&https, "https", false, "the process serves HTTPS (it runs with --tls-cert-file)")
	return cmd
}
