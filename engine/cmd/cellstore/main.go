// Command cellstore is Cellstore's one binary: the master, the region server, the standalone store
// (both in one process), the shell, the performance-evaluation tool and file tools.
package main

import (
	"fmt"
	"os"
	"runtime/debug"

	"github.com/spf13/cobra"
)

// version is set at build time (-ldflags "-X main.version=...").
var version = "dev"

func main() {
	root := &cobra.Command{
		Use:           "cellstore",
		Short:         "Cellstore: an HBase-style wide-column store",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.AddCommand(versionCommand(), shellCommand(), peCommand(), sfileCommand())
	root.AddCommand(masterCommand())
	root.AddCommand(regionServerCommand(), standaloneCommand(), prestopCommand(), bucketCommand(), snapshotCommand())
	root.AddCommand(certsCommand(), tokenCommand())
	if err := root.Execute(); err != nil {
		fmt.Fprintln(os.Stderr, "cellstore:", err)
		os.Exit(1)
	}
}

func versionCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print the version",
		Args:  cobra.NoArgs,
		Run: func(cmd *cobra.Command, _ []string) {
			goVersion := ""
			if bi, ok := debug.ReadBuildInfo(); ok {
				goVersion = bi.GoVersion
			}
			fmt.Fprintf(cmd.OutOrStdout(), "cellstore %s (%s)\n", version, goVersion)
		},
	}
}
