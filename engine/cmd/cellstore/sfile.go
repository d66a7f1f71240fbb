package main

import (
	"path/filepath"

	"github.com/spf13/cobra"

	"github.com/cellstore/cellstore/engine/sfile"
	"github.com/cellstore/cellstore/engine/storage"
)

func sfileCommand() *cobra.Command {
	var o sfile.DumpOptions
	cmd := &cobra.Command{
		Use:   "sfile [-m] [-i] [-b] [-p] FILE",
		Short: "Print a store file's meta, index, blocks or cells (like `hbase hfile`)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if !o.Index && !o.Blocks && !o.Cells {
				o.Meta = true
			}
			abs, err := filepath.Abs(args[0])
			if err != nil {
				return err
			}
			fs, err := storage.NewLocal(filepath.Dir(abs))
			if err != nil {
				return err
			}
			return sfile.Dump(cmd.OutOrStdout(), fs, filepath.Base(abs), o)
		},
	}
	cmd.Flags().BoolVarP(&o.Meta, "meta", "m", false, "print the file info and trailer (the default)")
	cmd.Flags().BoolVarP(&o.Index, "index", "i", false, "print the block index")
	cmd.Flags().BoolVarP(&o.Blocks, "blocks", "b", false, "print every data block")
	cmd.Flags().BoolVarP(&o.Cells, "print", "p", false, "print every cell")
	cmd.Flags().IntVar(&o.MaxValueLen, "max-value-len", 64, "truncate printed values (-1: whole)")
	return cmd
}
