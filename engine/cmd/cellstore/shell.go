package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/peterh/liner"
	"github.com/spf13/cobra"

	"github.com/cellstore/cellstore/engine/client"
	"github.com/cellstore/cellstore/engine/shell"
)

func shellCommand() *cobra.Command {
	var masters []string
	var external bool
	var serverName string
	var user, exec string
	var sec clientSecurityFlags
	var timeout time.Duration
	cmd := &cobra.Command{
		Use:   "shell [SCRIPT...]",
		Short: "HBase-style shell: interactive, -e 'command', or script files",
		Long: `The shell speaks the HBase shell's verbs and syntax, for example:

  create 't1', 'f1', {NAME => 'f2', VERSIONS => 3}, {SPLITS => ['g', 'p']}
  put 't1', 'row1', 'f1:a', 'value'
  get 't1', 'row1', {CONSISTENCY => 'TIMELINE'}
  scan 't1', {STARTROW => 'a', LIMIT => 10}
  set_quota TYPE => THROTTLE, USER => 'alice', LIMIT => '100req/sec'

Type 'help' for every verb. With -e or script files it runs them and exits, with status 1 if a
command failed.`,
		RunE: func(cmd *cobra.Command, args []string) error {
			certs, token, err := sec.load()
			if err != nil {
				return err
			}
			c, err := client.New(client.Config{Masters: masters, User: user, TLS: certs, Token: token, External: external, TLSServerName: serverName})
			if err != nil {
				return err
			}
			defer c.Close()
			sh := &shell.Shell{Client: c, Out: cmd.OutOrStdout(), Timeout: timeout}
			ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
			defer stop()
			switch {
			case exec != "":
				return runScript(ctx, sh, strings.NewReader(exec), cmd.ErrOrStderr())
			case len(args) > 0:
				for _, path := range args {
					f, err := os.Open(path)
					if err != nil {
						return err
					}
					err = runScript(ctx, sh, f, cmd.ErrOrStderr())
					f.Close()
					if err != nil {
						return fmt.Errorf("%s: %w", path, err)
					}
				}
				return nil
			}
			return interactive(sh, cmd.ErrOrStderr())
		},
	}
	cmd.Flags().StringSliceVar(&masters, "masters", []string{"127.0.0.1:16000"}, "master addresses (host:port, comma-separated)")
	cmd.Flags().BoolVar(&external, "external", false, "the masters are external addresses (a StoreCluster's spec.externalAccess): reach every server at the external address the masters publish for it, from outside the cluster's network")
	cmd.Flags().StringVar(&serverName, "tls-server-name", "", "with --external over TLS: the name the masters' certificates hold (default: any server certificate of --tls-ca-file)")
	cmd.Flags().StringVar(&user, "user", os.Getenv("USER"), "user name presented to a cluster with security off (quotas are per user); with security on the certificate or token says who you are")
	addClientSecurityFlags(cmd.Flags(), &sec)
	cmd.Flags().StringVarP(&exec, "execute", "e", "", "commands to run (separated by newlines or ';'), then exit")
	cmd.Flags().DurationVar(&timeout, "timeout", 60*time.Second, "time limit of one command")
	return cmd
}

// runScript runs every line; it stops at the first failure.
func runScript(ctx context.Context, sh *shell.Shell, r io.Reader, errOut io.Writer) error {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 16<<20)
	for n := 1; sc.Scan(); n++ {
		for _, line := range splitStatements(sc.Text()) {
			if err := sh.Run(ctx, line); err != nil {
				fmt.Fprintf(errOut, "ERROR (line %d): %v\n", n, err)
				return errors.New("a command failed")
			}
		}
	}
	return sc.Err()
}

// splitStatements splits a line at ';' outside quotes.
func splitStatements(line string) []string {
	var out []string
	var quote byte
	start := 0
	for i := 0; i < len(line); i++ {
		c := line[i]
		switch {
		case quote != 0 && c == '\\':
			i++
		case quote != 0 && c == quote:
			quote = 0
		case quote == 0 && (c == '\'' || c == '"'):
			quote = c
		case quote == 0 && c == ';':
			out = append(out, line[start:i])
			start = i + 1
		}
	}
	return append(out, line[start:])
}

func interactive(sh *shell.Shell, errOut io.Writer) error {
	ln := liner.NewLiner()
	defer ln.Close()
	ln.SetCtrlCAborts(true)
	verbs := shell.Verbs()
	names := make([]string, 0, len(verbs))
	for n := range verbs {
		names = append(names, n)
	}
	sort.Strings(names)
	ln.SetCompleter(func(line string) []string {
		var out []string
		for _, n := range names {
			if strings.HasPrefix(n, line) {
				out = append(out, n+" ")
			}
		}
		return out
	})
	history := ""
	if home, err := os.UserHomeDir(); err == nil {
		history = filepath.Join(home, ".cellstore_history")
		if f, err := os.Open(history); err == nil {
			_, _ = ln.ReadHistory(f)
			f.Close()
		}
	}
	fmt.Fprintln(sh.Out, "Cellstore shell. Type 'help' for the commands, 'exit' or Ctrl-D to leave.")
	for {
		line, err := ln.Prompt("cellstore> ")
		if errors.Is(err, liner.ErrPromptAborted) {
			continue
		}
		if err != nil { // io.EOF: Ctrl-D
			break
		}
		if strings.TrimSpace(line) == "exit" || strings.TrimSpace(line) == "quit" {
			break
		}
		if strings.TrimSpace(line) != "" {
			ln.AppendHistory(line)
		}
		for _, stmt := range splitStatements(line) {
			if err := sh.Run(context.Background(), stmt); err != nil {
				fmt.Fprintf(errOut, "ERROR: %v\n", err)
			}
		}
	}
	if history != "" {
		if f, err := os.Create(history); err == nil {
			_, _ = ln.WriteHistory(f)
			f.Close()
		}
	}
	return nil
}
