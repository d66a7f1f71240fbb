package main

import (
	"cmp"
	"context"
	"fmt"
	"os"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/cellstore/cellstore/engine/storage"
	"github.com/cellstore/cellstore/engine/storage/s3"
)

// bucketFlags select object storage instead of a shared directory: an S3-compatible bucket, or a
// local directory used as one (--bucket-dir: what the tests and a laptop use).
type bucketFlags struct {
	endpoint, bucket, prefix, region, caFile string
	pathStyle, create                        bool
	dir                                      string
	// accessEnv and secretEnv name the variables holding the keys (default envAccessKey and
	// envSecretKey: the cluster's own bucket).
	accessEnv, secretEnv string
}

// Credentials are not flags (they would show in the process list): CELLSTORE_S3_ACCESS_KEY_ID and
// CELLSTORE_S3_SECRET_ACCESS_KEY when set, else the AWS SDK's ambient chain (AWS_* variables,
// web identity — IRSA, GKE workload identity —, instance profile).
const (
	envAccessKey = "CELLSTORE_S3_ACCESS_KEY_ID"
	envSecretKey = "CELLSTORE_S3_SECRET_ACCESS_KEY"
)

func addBucketFlags(fl *pflag.FlagSet, f *bucketFlags) {
	fl.StringVar(&f.bucket, "s3-bucket", "", "keep all data in this S3 bucket instead of a shared directory (credentials: "+envAccessKey+" and "+envSecretKey+", or the AWS ambient chain)")
	fl.StringVar(&f.endpoint, "s3-endpoint", "", "the S3 endpoint URL (default: AWS's for --s3-region); e.g. http://minio:9000, https://storage.googleapis.com")
	fl.StringVar(&f.prefix, "s3-prefix", "", "key prefix of this cluster's data in the bucket")
	fl.StringVar(&f.region, "s3-region", "", "the bucket's region (default us-east-1)")
	fl.BoolVar(&f.pathStyle, "s3-path-style", false, "address the bucket in the URL path (MinIO and most self-hosted stores)")
	fl.StringVar(&f.caFile, "s3-ca-file", "", "PEM file of certificates to trust for the S3 endpoint, besides the system's")
	fl.BoolVar(&f.create, "s3-create-bucket", false, "create the bucket when it does not exist (development stores)")
	fl.StringVar(&f.dir, "bucket-dir", "", "keep all data in this directory used as an object store (conditional writes by link and rename): development and tests")
}

// set reports whether object storage was asked for.
func (f *bucketFlags) set() bool { return f.bucket != "" || f.dir != "" }

// open opens the bucket and, for S3, checks once that the store does conditional writes, which
// fencing needs.
func (f *bucketFlags) open(ctx context.Context, reg prometheus.Registerer) (storage.Bucket, error) {
	if f.dir != "" {
		if f.bucket != "" {
			return nil, fmt.Errorf("--bucket-dir and --s3-bucket both given: choose one")
		}
		if err := os.MkdirAll(f.dir, 0o755); err != nil {
			return nil, fmt.Errorf("--bucket-dir: %w", err)
		}
		b, err := storage.NewDirBucket(f.dir)
		if err != nil {
			return nil, fmt.Errorf("--bucket-dir: %w", err)
		}
		return b, nil
	}
	cfg := s3.Config{Endpoint: f.endpoint, Bucket: f.bucket, Prefix: f.prefix, Region: f.region, PathStyle: f.pathStyle,
		AccessKeyID: os.Getenv(cmp.Or(f.accessEnv, envAccessKey)), SecretAccessKey: os.Getenv(cmp.Or(f.secretEnv, envSecretKey)), Registerer: reg}
	if f.caFile != "" {
		ca, err := os.ReadFile(f.caFile)
		if err != nil {
			return nil, fmt.Errorf("--s3-ca-file: %w", err)
		}
		cfg.CABundle = ca
	}
	b, err := s3.Open(ctx, cfg)
	if err != nil {
		return nil, err
	}
	cctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if f.create {
		if err := b.CreateIfMissing(cctx); err != nil {
			return nil, err
		}
	}
	if err := b.CheckConditionalWrites(cctx); err != nil {
		return nil, err
	}
	return b, nil
}

// bucketCollectors are the object store's request metrics, to register where the process serves
// its metrics (none for a directory bucket).
func bucketCollectors(b storage.Bucket) []prometheus.Collector {
	if sb, ok := b.(*s3.Bucket); ok {
		return sb.Collectors()
	}
	return nil
}

// bucketCommand is `cellstore bucket check`: the start check of a server, alone — can Cellstore
// keep its data in this bucket (it answers to these credentials, and does conditional writes)?
// With --s3-create-bucket it makes a missing bucket first (development stores).
func bucketCommand() *cobra.Command {
	var f bucketFlags
	cmd := &cobra.Command{
		Use:   "bucket",
		Short: "Check an object-store bucket for Cellstore",
	}
	check := &cobra.Command{
		Use:   "check",
		Short: "Check that Cellstore can keep its data in a bucket: it answers, and does conditional writes",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if !f.set() {
				return fmt.Errorf("name a bucket: --s3-bucket (with --s3-endpoint ...) or --bucket-dir")
			}
			b, err := f.open(cmd.Context(), nil)
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "%s: reachable, conditional writes work: Cellstore can keep its data there\n", b.Describe())
			return nil
		},
	}
	addBucketFlags(check.Flags(), &f)
	cmd.AddCommand(check)
	return cmd
}
