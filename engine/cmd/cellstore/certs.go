package main

import (
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/cellstore/cellstore/engine/security"
)

// certsCommand makes a CA and the certificates of a cluster run by hand (the operator makes its
// own): docs/security.md.
func certsCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "certs",
		Short: "Make a cluster's CA and its server and client certificates (for clusters run by hand; the operator makes its own)",
	}
	var caOut string
	var caValidity time.Duration
	ca := &cobra.Command{
		Use:   "ca",
		Short: "Make a CA: <out>/ca.crt and <out>/ca.key (keep the key private)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := os.MkdirAll(caOut, 0o755); err != nil {
				return err
			}
			crt, key := filepath.Join(caOut, "ca.crt"), filepath.Join(caOut, "ca.key")
			if _, err := os.Stat(key); err == nil {
				return fmt.Errorf("%s exists: a new CA would orphan every certificate it signed; remove it first if that is what you want", key)
			}
			_, is, err := security.NewCA("cellstore-ca", caValidity)
			if err != nil {
				return err
			}
			if err := os.WriteFile(key, is.KeyPEM, 0o600); err != nil {
				return err
			}
			if err := os.WriteFile(crt, is.CertPEM, 0o644); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "wrote %s and %s (valid until %s)\n", crt, key, is.Cert.NotAfter.Format(time.RFC3339))
			return nil
		},
	}
	ca.Flags().StringVar(&caOut, "out", ".", "directory to write ca.crt and ca.key into")
	ca.Flags().DurationVar(&caValidity, "validity", 10*365*24*time.Hour, "how long the CA is valid")

	var caDir, out, cn, groups, hosts string
	var server, client bool
	var validity time.Duration
	issue := &cobra.Command{
		Use:   "issue",
		Short: "Issue a certificate signed by the CA: <out>/tls.crt, tls.key and ca.crt",
		Long: `issue signs a new key's certificate with the CA in --ca. A server certificate (--server) names
the hosts it is reached by (--hosts, wildcards allowed); servers also call each other, so give
servers --client too. A client certificate (--client) names the user (--cn) and its groups
(--groups).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			crt, err := os.ReadFile(filepath.Join(caDir, "ca.crt"))
			if err != nil {
				return fmt.Errorf("--ca: %w (make one with 'cellstore certs ca')", err)
			}
			key, err := os.ReadFile(filepath.Join(caDir, "ca.key"))
			if err != nil {
				return fmt.Errorf("--ca: %w", err)
			}
			authority, err := security.ParseCA(crt, key)
			if err != nil {
				return err
			}
			if cn == "" {
				return errors.New("--cn is required: the user of a client certificate, a name for a server's")
			}
			req := security.Request{CommonName: cn, Server: server, Client: client, Validity: validity}
			if groups != "" {
				req.Organizations = strings.Split(groups, ",")
			}
			for _, h := range strings.Split(hosts, ",") {
				if h = strings.TrimSpace(h); h == "" {
					continue
				}
				if ip := net.ParseIP(h); ip != nil {
					req.IPs = append(req.IPs, ip)
				} else {
					req.DNSNames = append(req.DNSNames, h)
				}
			}
			if server && len(req.IPs)+len(req.DNSNames) == 0 {
				return errors.New("a server certificate needs --hosts: the names and addresses clients reach it by")
			}
			is, err := authority.Issue(req)
			if err != nil {
				return err
			}
			if err := os.MkdirAll(out, 0o755); err != nil {
				return err
			}
			files, err := is.WriteFiles(out, authority.CertPEM)
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "wrote %s, %s and %s (CN %s, valid until %s)\n", files.Cert, files.Key, files.CA, cn, is.Cert.NotAfter.Format(time.RFC3339))
			return nil
		},
	}
	fl := issue.Flags()
	fl.StringVar(&caDir, "ca", ".", "directory holding ca.crt and ca.key")
	fl.StringVar(&out, "out", "", "directory to write tls.crt, tls.key and ca.crt into (required)")
	fl.StringVar(&cn, "cn", "", "subject common name: the user (client) or the server's name")
	fl.StringVar(&groups, "groups", "", "comma-separated groups of the user (the subject's organizations)")
	fl.StringVar(&hosts, "hosts", "", "comma-separated host names and IP addresses of a server (wildcards allowed: *.rs.ns.svc)")
	fl.BoolVar(&server, "server", false, "usable by a server")
	fl.BoolVar(&client, "client", false, "usable by a client (also give it to servers: they call each other)")
	fl.DurationVar(&validity, "validity", 365*24*time.Hour, "how long the certificate is valid (at most the CA's remaining life)")
	_ = issue.MarkFlagRequired("out")
	cmd.AddCommand(ca, issue)
	return cmd
}

// tokenCommand makes bearer tokens.
func tokenCommand() *cobra.Command {
	cmd := &cobra.Command{Use: "token", Short: "Make bearer tokens for users (docs/security.md)"}
	var user, groups, tokenOut, appendTo string
	create := &cobra.Command{
		Use:   "create",
		Short: "Make a token for a user: the token goes to the user, its hash to the servers' --token-file",
		Long: `create makes a random token for --user. The token is written to --token-out (or printed);
the line that admits it — its SHA-256, never the token — is appended to --append (the servers'
--token-file, re-read within seconds) or printed.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var gs []string
			if groups != "" {
				gs = strings.Split(groups, ",")
			}
			tok, line, err := security.NewToken(user, gs)
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			if tokenOut != "" {
				if err := os.WriteFile(tokenOut, []byte(tok+"\n"), 0o600); err != nil {
					return err
				}
				fmt.Fprintf(out, "token for %s written to %s\n", user, tokenOut)
			} else {
				fmt.Fprintln(out, tok)
			}
			if appendTo != "" {
				f, err := os.OpenFile(appendTo, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o600)
				if err != nil {
					return err
				}
				_, err = fmt.Fprintln(f, line)
				if cerr := f.Close(); err == nil {
					err = cerr
				}
				if err != nil {
					return err
				}
				fmt.Fprintf(cmd.ErrOrStderr(), "admitted in %s\n", appendTo)
			} else {
				fmt.Fprintf(cmd.ErrOrStderr(), "add this line to the servers' --token-file:\n%s\n", line)
			}
			return nil
		},
	}
	create.Flags().StringVar(&user, "user", "", "the user the token proves (required)")
	create.Flags().StringVar(&groups, "groups", "", "comma-separated groups of the user")
	create.Flags().StringVar(&tokenOut, "token-out", "", "write the token to this file (mode 0600) instead of printing it")
	create.Flags().StringVar(&appendTo, "append", "", "append the admitting line to this token file")
	_ = create.MarkFlagRequired("user")
	cmd.AddCommand(create)
	return cmd
}
