package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/cellstore/cellstore/engine/region"
	"github.com/cellstore/cellstore/engine/snapshot"
	"github.com/cellstore/cellstore/engine/storage"
)

// The other end of an export or import: a backup bucket (or prefix), or a directory. Its keys come
// from these variables, else the AWS ambient chain.
const (
	envBackupAccessKey = "CELLSTORE_BACKUP_S3_ACCESS_KEY_ID"
	envBackupSecretKey = "CELLSTORE_BACKUP_S3_SECRET_ACCESS_KEY"
)

// clusterStorageFlags name a cluster's storage, as its master's flags do.
type clusterStorageFlags struct {
	dir    string
	bucket bucketFlags
}

func (f *clusterStorageFlags) add(fl *pflag.FlagSet) {
	fl.StringVar(&f.dir, "storage-dir", "", "the cluster's shared storage root (as its master's --storage-dir), unless its data is in a bucket (--s3-bucket, --bucket-dir)")
	addBucketFlags(fl, &f.bucket)
}

func (f *clusterStorageFlags) open(ctx context.Context) (region.Storage, error) {
	switch {
	case f.bucket.set():
		b, err := f.bucket.open(ctx, nil)
		return region.Storage{Bucket: b}, err
	case f.dir != "":
		fs, err := storage.NewLocal(f.dir)
		if err != nil {
			return region.Storage{}, fmt.Errorf("--storage-dir: %w", err)
		}
		return region.Storage{FS: fs}, nil
	}
	return region.Storage{}, errors.New("name the cluster's storage: --storage-dir, --s3-bucket (with --s3-endpoint ...) or --bucket-dir")
}

// addRemoteFlags are the other end's flags: --<side>-dir or --<side>-s3-*.
func addRemoteFlags(fl *pflag.FlagSet, f *bucketFlags, side, what string) {
	fl.StringVar(&f.dir, side+"-dir", "", what+": a directory (used as an object store)")
	fl.StringVar(&f.bucket, side+"-s3-bucket", "", what+": an S3 bucket (keys: "+envBackupAccessKey+" and "+envBackupSecretKey+", or the AWS ambient chain)")
	fl.StringVar(&f.endpoint, side+"-s3-endpoint", "", "its S3 endpoint URL (default: AWS's for the region)")
	fl.StringVar(&f.prefix, side+"-s3-prefix", "", "key prefix in that bucket")
	fl.StringVar(&f.region, side+"-s3-region", "", "that bucket's region (default us-east-1)")
	fl.BoolVar(&f.pathStyle, side+"-s3-path-style", false, "address that bucket in the URL path (MinIO and most self-hosted stores)")
	fl.StringVar(&f.caFile, side+"-s3-ca-file", "", "PEM file of certificates to trust for that endpoint")
	fl.BoolVar(&f.create, side+"-s3-create-bucket", false, "create that bucket when it does not exist")
	f.accessEnv, f.secretEnv = envBackupAccessKey, envBackupSecretKey
}

func openRemote(ctx context.Context, f *bucketFlags, side string) (region.Storage, error) {
	if !f.set() {
		return region.Storage{}, fmt.Errorf("name the other end: --%s-dir or --%s-s3-bucket", side, side)
	}
	b, err := f.open(ctx, nil)
	return region.Storage{Bucket: b}, err
}

// openBackup opens a server's backup location (--backup-dir, --backup-s3-*); none when not given.
func openBackup(ctx context.Context, f *bucketFlags) (storage.Bucket, error) {
	if !f.set() {
		return nil, nil
	}
	b, err := f.open(ctx, nil)
	if err != nil {
		return nil, fmt.Errorf("the backup location: %w", err)
	}
	return b, nil
}

// snapshotCommand is `cellstore snapshot export|import|list`: HBase's ExportSnapshot, run where
// the cluster's storage can be read (the shell's snapshot verbs take and restore snapshots).
func snapshotCommand() *cobra.Command {
	cmd := &cobra.Command{Use: "snapshot", Short: "Copy table snapshots between a cluster's storage and backup locations"}
	var parallel int
	copyCmd := func(use, short, side string, export bool) *cobra.Command {
		var cluster clusterStorageFlags
		var remote bucketFlags
		c := &cobra.Command{
			Use:   use + " NAME...",
			Short: short,
			Args:  cobra.MinimumNArgs(1),
			RunE: func(cmd *cobra.Command, names []string) error {
				ctx := cmd.Context()
				local, err := cluster.open(ctx)
				if err != nil {
					return err
				}
				other, err := openRemote(ctx, &remote, side)
				if err != nil {
					return err
				}
				src, dst := local, other
				if !export {
					src, dst = other, local
				}
				for _, name := range names {
					if err := copySnapshot(ctx, cmd.OutOrStdout(), src, dst, name, parallel); err != nil {
						return err
					}
				}
				return nil
			},
		}
		cluster.add(c.Flags())
		what := "where to copy the snapshots to"
		if !export {
			what = "where to copy the snapshots from"
		}
		addRemoteFlags(c.Flags(), &remote, side, what)
		c.Flags().IntVar(&parallel, "parallel", 4, "files copied at once")
		return c
	}
	cmd.AddCommand(copyCmd("export", "Copy snapshots from the cluster's storage to a backup location (files already there are not copied again)", "to", true))
	cmd.AddCommand(copyCmd("import", "Copy snapshots from a backup location into the cluster's storage, ready for clone_snapshot or restore_snapshot", "from", false))

	var cluster clusterStorageFlags
	var remote bucketFlags
	list := &cobra.Command{
		Use:   "list",
		Short: "List the snapshots in the cluster's storage, or at a backup location (--from-...)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var st region.Storage
			var err error
			if remote.set() {
				st, err = openRemote(cmd.Context(), &remote, "from")
			} else {
				st, err = cluster.open(cmd.Context())
			}
			if err != nil {
				return err
			}
			ds, err := snapshot.ReadFrom(st)
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			for _, d := range ds {
				fmt.Fprintf(out, "%s\t%s:%s\t%s\t%d regions\t%d files\t%d bytes\n", d.GetName(), d.GetTable().GetNamespace(), d.GetTable().GetName(),
					time.UnixMilli(d.GetCreatedMs()).UTC().Format(time.RFC3339), d.GetRegions(), d.GetFiles(), d.GetSizeBytes())
			}
			fmt.Fprintf(out, "%d snapshot(s)\n", len(ds))
			return nil
		},
	}
	cluster.add(list.Flags())
	addRemoteFlags(list.Flags(), &remote, "from", "a backup location to list instead of the cluster's storage")
	cmd.AddCommand(list)
	return cmd
}

// copySnapshot copies one snapshot, printing progress at most every second and a summary.
func copySnapshot(ctx context.Context, out io.Writer, src, dst region.Storage, name string, parallel int) error {
	start := time.Now()
	last := start
	prog, err := snapshot.Copy(ctx, src, dst, name, snapshot.CopyOptions{Parallel: parallel, Progress: func(p snapshot.CopyProgress) {
		if now := time.Now(); now.Sub(last) >= time.Second {
			last = now
			fmt.Fprintf(out, "%s: %d/%d files, %d/%d bytes (%.1f MiB/s)\n", name, p.Files, p.FilesTotal, p.Bytes, p.BytesTotal,
				float64(p.Bytes)/(1<<20)/now.Sub(start).Seconds())
		}
	}})
	if err != nil {
		return fmt.Errorf("snapshot %s: %w (run the same command again: what was copied is not copied twice)", name, err)
	}
	fmt.Fprintf(out, "%s: copied %d files (%d already there), %d bytes, verified, in %v\n", name, prog.Files-prog.Skipped, prog.Skipped,
		prog.Bytes, time.Since(start).Round(time.Millisecond))
	return nil
}
