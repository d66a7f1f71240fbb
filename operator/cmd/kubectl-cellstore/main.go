// Command kubectl-cellstore is the kubectl plugin for Cellstore's StoreClusters: put it on the PATH
// and run `kubectl cellstore ...` (docs/operator.md, "kubectl plugin"). Run as
// kubectl_complete-cellstore (a link to it on the PATH), it completes `kubectl cellstore <TAB>`.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/cellstore/cellstore/operator/internal/plugin"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	connect := func(o plugin.ConnectOptions) (*plugin.Env, error) {
		return plugin.Connect(o, os.Stdin, os.Stdout, os.Stderr)
	}
	if err := plugin.Main(ctx, os.Args, connect, os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "error:", err)
		os.Exit(1)
	}
}
