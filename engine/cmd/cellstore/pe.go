package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/signal"
	"runtime"
	"runtime/pprof"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/term"

	pb "github.com/cellstore/cellstore/engine/api/cellstore/v1"
	"github.com/cellstore/cellstore/engine/client"
	"github.com/cellstore/cellstore/engine/pe"
)

func peCommand() *cobra.Command {
	var masters []string
	var external bool
	var serverName string
	var user, durability, consistency, cpuProfile, memProfile string
	var oneCon bool
	var connCount int
	var sec clientSecurityFlags
	o := pe.Options{}
	cmd := &cobra.Command{
		Use:   "pe [options] COMMAND THREADS",
		Short: "Performance evaluation (HBase PE's commands)",
		Long:  "Commands: " + strings.Join(pe.Commands, ", ") + ".\nRow keys and the default table (TestTable, family info) are PE's; the table is created when missing.",
		Args:  cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			threads, err := strconv.Atoi(args[1])
			if err != nil {
				return fmt.Errorf("THREADS must be a number, got %q", args[1])
			}
			d, ok := pb.Durability_value["DURABILITY_"+strings.ToUpper(durability)]
			if !ok {
				return fmt.Errorf("--durability must be USE_DEFAULT, SKIP_WAL, ASYNC_WAL, SYNC_WAL or FSYNC_WAL")
			}
			o.Durability = pb.Durability(d)
			cs, ok := pb.Consistency_value["CONSISTENCY_"+strings.ToUpper(consistency)]
			if !ok {
				return fmt.Errorf("--consistency must be STRONG or TIMELINE")
			}
			o.Consistency = pb.Consistency(cs)
			o.Progress = cmd.ErrOrStderr()
			o.Terminal = term.IsTerminal(int(os.Stderr.Fd()))
			certs, token, err := sec.load()
			if err != nil {
				return err
			}
			if err := pe.CheckCommand(args[0], threads); err != nil {
				return err // before any connection is made
			}
			conns, err := pe.Connections(oneCon, connCount, threads)
			if err != nil {
				return err
			}
			clients := make([]*client.Client, min(conns, max(threads, 1)))
			for i := range clients {
				c, err := client.New(client.Config{Masters: masters, User: user, TLS: certs, Token: token, External: external, TLSServerName: serverName})
				if err != nil {
					return err
				}
				defer c.Close()
				clients[i] = c
			}
			if cpuProfile != "" {
				pf, err := os.Create(cpuProfile)
				if err != nil {
					return fmt.Errorf("--cpuprofile: %w", err)
				}
				defer pf.Close()
				if err := pprof.StartCPUProfile(pf); err != nil {
					return fmt.Errorf("--cpuprofile: %w", err)
				}
				defer pprof.StopCPUProfile()
			}
			if memProfile != "" {
				runtime.MemProfileRate = 64 << 10
				defer func() {
					if err := writeHeapProfile(memProfile); err != nil {
						fmt.Fprintln(cmd.ErrOrStderr(), "--memprofile:", err)
					}
				}()
			}
			ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
			defer stop()
			rep, err := pe.Run(ctx, clients, args[0], threads, o)
			if rep != nil {
				if o.JSON {
					enc := json.NewEncoder(cmd.OutOrStdout())
					enc.SetIndent("", "  ")
					_ = enc.Encode(rep)
				} else {
					rep.Print(cmd.OutOrStdout())
				}
			}
			return err
		},
	}
	f := cmd.Flags()
	f.StringSliceVar(&masters, "masters", []string{"127.0.0.1:16000"}, "master addresses")
	f.BoolVar(&external, "external", false, "the masters are external addresses (a StoreCluster's spec.externalAccess): reach every server at the external address the masters publish for it, from outside the cluster's network")
	f.StringVar(&serverName, "tls-server-name", "", "with --external over TLS: the name the masters' certificates hold (default: any server certificate of --tls-ca-file)")
	f.StringVar(&user, "user", "pe", "user presented to a cluster with security off")
	addClientSecurityFlags(f, &sec)
	f.BoolVar(&oneCon, "oneCon", false, "all threads share one client connection (HBase PE's --oneCon)")
	f.IntVar(&connCount, "connCount", 0, "client connections the threads share round-robin (HBase PE's --connCount; 0: one per thread, HBase PE's default)")
	f.StringVar(&o.Table, "table", "TestTable", "table")
	f.IntVar(&o.Rows, "rows", 1_000_000, "rows per thread")
	f.IntVar(&o.ValueSize, "valueSize", 1000, "value size in bytes")
	f.BoolVar(&o.ValueRandom, "valueRandom", false, "random value sizes in [0, 2*valueSize)")
	f.IntVar(&o.Families, "families", 1, "column families")
	f.IntVar(&o.Columns, "columns", 1, "columns per family")
	f.IntVar(&o.Presplit, "presplit", 0, "regions to pre-split a new table into")
	f.BoolVar(&o.AutoFlush, "autoFlush", false, "send each write on its own (false: batch writes in the client)")
	f.Int64Var(&o.BufferSize, "bufferSize", pe.DefaultBufferSize, "bytes of writes the client buffers when autoFlush is false before it sends them as one batch (HBase PE's default, 2 MiB)")
	f.IntVar(&o.BatchSize, "batchSize", 0, "when autoFlush is false, also send a batch once it holds this many rows (0: by --bufferSize only)")
	f.IntVar(&o.InFlight, "inFlight", pe.DefaultInFlight, "batches a thread may have under way when autoFlush is false (1: each waits for the one before)")
	f.StringVar(&durability, "durability", "USE_DEFAULT", "USE_DEFAULT, SKIP_WAL, ASYNC_WAL, SYNC_WAL or FSYNC_WAL")
	f.StringVar(&consistency, "consistency", "STRONG", "STRONG or TIMELINE (reads)")
	f.IntVar(&o.MultiGet, "multiGet", 0, "randomRead: rows per multi-get (0: single gets)")
	f.IntVar(&o.Caching, "caching", 100, "scanner caching")
	f.DurationVar(&o.Duration, "duration", 0, "run for this long instead of --rows")
	f.DurationVar(&o.Warmup, "warmup", 0, "run this long before measuring")
	f.Float64Var(&o.Rate, "rate", 0, "pace the run at this many operations per second over all threads (0: as fast as they go); latencies count from when an operation is sent")
	f.Uint64Var(&o.Seed, "seed", uint64(time.Now().UnixNano()), "random seed")
	f.BoolVar(&o.JSON, "json", false, "print the report as JSON")
	f.StringVar(&cpuProfile, "cpuprofile", "", "write the client's CPU profile to this file (go tool pprof)")
	f.StringVar(&memProfile, "memprofile", "", "write the client's allocation profile to this file at the end")
	return cmd
}

func writeHeapProfile(path string) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := pprof.Lookup("allocs").WriteTo(f, 0); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
