package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"

	"github.com/cellstore/cellstore/engine/storage"
	"github.com/cellstore/cellstore/engine/storage/s3"
	"github.com/cellstore/cellstore/engine/storage/s3/s3test"
)

// The standalone store with all its data in a bucket — a directory used as one, and a real S3
// server (MinIO, started by PID) — works through a clean restart and a kill -9: the new process's
// master fences the old catalog log and the old region server's object log, splits it, and the
// region replays every acknowledged write. A split works there too; drop archives the table's
// objects.
func TestStandaloneOnBucket(t *testing.T) {
	bin := cellstoreBinary(t)
	for _, backend := range []string{"dir", "s3"} {
		t.Run(backend, func(t *testing.T) {
			var flags []string
			var b storage.Bucket
			if backend == "dir" {
				dir := t.TempDir()
				flags = []string{"--bucket-dir", dir}
				db, err := storage.NewDirBucket(dir)
				if err != nil {
					t.Fatal(err)
				}
				defer db.Close()
				b = db
			} else {
				srv := s3test.Start(t)
				srv.CreateBucket(t, "cellstore")
				cfg := srv.Config("cellstore")
				cfg.Prefix = "clusters/one"
				t.Setenv(envAccessKey, cfg.AccessKeyID)
				t.Setenv(envSecretKey, cfg.SecretAccessKey)
				flags = []string{"--s3-endpoint", cfg.Endpoint, "--s3-bucket", "cellstore", "--s3-path-style", "--s3-prefix", cfg.Prefix}
				sb, err := s3.Open(context.Background(), cfg)
				if err != nil {
					t.Fatal(err)
				}
				b = sb
			}
			p := startStandalone(t, bin, "", flags...)
			runShell(t, bin, p.master, "create 't1', 'cf'; put 't1', 'r1', 'cf:a', 'hello'; put 't1', 'r2', 'cf:a', 'world'")
			p.stop(t, os.Interrupt)

			p = startStandalone(t, bin, "", flags...)
			if out := runShell(t, bin, p.master, "get 't1', 'r2'"); !strings.Contains(out, "value=world") {
				t.Fatalf("get after a clean restart:\n%s", out)
			}
			// r3's value compresses: its WAL object is written compressed (--wal-compression).
			runShell(t, bin, p.master, "put 't1', 'r3', 'cf:a', 'unflushed"+strings.Repeat(" and unflushed", 30)+"'; put 't1', 'r1', 'cf:a', 'changed'")
			m := metricsOf(t, p.httpAddr)
			if rec, written := metricValue(t, m, "cellstore_regionserver_wal_record_bytes"), metricValue(t, m, "cellstore_regionserver_wal_written_bytes"); rec <= written {
				t.Fatalf("WAL records %v bytes, written %v: the compressible edit was not compressed", rec, written)
			}
			p.stop(t, syscall.SIGKILL)

			p = startStandalone(t, bin, "", flags...)
			out := runShell(t, bin, p.master, "get 't1', 'r3'; get 't1', 'r1'; count 't1'")
			if !strings.Contains(out, "value=unflushed") || !strings.Contains(out, "value=changed") || !strings.Contains(out, "3 row(s)") {
				t.Fatalf("after kill -9 and restart:\n%s", out)
			}
			// A split on the bucket: two regions, the same rows, also after a kill -9.
			if out := runShell(t, bin, p.master, "split 't1', 'r2'"); !strings.Contains(out, "split region") {
				t.Fatalf("split:\n%s", out)
			}
			p.stop(t, syscall.SIGKILL)
			p = startStandalone(t, bin, "", flags...)
			out = runShell(t, bin, p.master, "list_regions 't1'; count 't1'; get 't1', 'r3'")
			if !strings.Contains(out, `"" "r2"`) || !strings.Contains(out, `"r2" ""`) || !strings.Contains(out, "3 row(s)") ||
				!strings.Contains(out, "value=unflushed") {
				t.Fatalf("after the split and a kill -9:\n%s", out)
			}
			// A snapshot of the split table (its daughters may still hold halves of the parent's
			// files), a clone of it, and after the drop below, the table back from the snapshot.
			out = runShell(t, bin, p.master, "snapshot 't1', 's1'; list_snapshots; clone_snapshot 's1', 'c1'; count 'c1'; get 'c1', 'r3'")
			if !strings.Contains(out, " s1 ") || !strings.Contains(out, "1 row(s)") || !strings.Contains(out, "3 row(s)") ||
				!strings.Contains(out, "value=unflushed") {
				t.Fatalf("snapshot and clone:\n%s", out)
			}
			runShell(t, bin, p.master, "disable 't1'; drop 't1'")
			left, err := b.List(context.Background(), "data/default/t1/", "", 0)
			if err != nil {
				t.Fatal(err)
			}
			archived, err := b.List(context.Background(), "archive/data/default/t1/", "", 0)
			if err != nil {
				t.Fatal(err)
			}
			if len(left) != 0 || len(archived) == 0 {
				t.Fatalf("after drop: %d objects left under data/, %d archived", len(left), len(archived))
			}
			out = runShell(t, bin, p.master, "restore_snapshot 's1'; count 't1'; get 't1', 'r1'; delete_snapshot 's1'; list_snapshots")
			if !strings.Contains(out, "3 row(s)") || !strings.Contains(out, "value=changed") || !strings.Contains(out, "0 row(s)") {
				t.Fatalf("the dropped table restored from its snapshot:\n%s", out)
			}
			p.stop(t, os.Interrupt)
		})
	}
}

// `cellstore bucket check` says whether Cellstore can use a bucket: a missing one is refused with
// what to do, --s3-create-bucket makes it, and then the check passes.
func TestBucketCheck(t *testing.T) {
	bin := cellstoreBinary(t)
	srv := s3test.Start(t)
	cfg := srv.Config("x")
	t.Setenv(envAccessKey, cfg.AccessKeyID)
	t.Setenv(envSecretKey, cfg.SecretAccessKey)
	args := []string{"bucket", "check", "--s3-endpoint", cfg.Endpoint, "--s3-bucket", "checked", "--s3-path-style"}
	out, err := exec.Command(bin, args...).CombinedOutput()
	if err == nil || !strings.Contains(string(out), "checked") || !strings.Contains(strings.ToLower(string(out)), "create") {
		t.Fatalf("a missing bucket: err %v\n%s", err, out)
	}
	out, err = exec.Command(bin, append(args, "--s3-create-bucket")...).CombinedOutput()
	if err != nil || !strings.Contains(string(out), "conditional writes work") {
		t.Fatalf("with --s3-create-bucket: err %v\n%s", err, out)
	}
	out, err = exec.Command(bin, "bucket", "check", "--bucket-dir", t.TempDir()).CombinedOutput()
	if err != nil || !strings.Contains(string(out), "conditional writes work") {
		t.Fatalf("a directory bucket: err %v\n%s", err, out)
	}
}

// HBase's ExportSnapshot, to another cluster: a snapshot of a standalone on a local directory is
// exported to a backup bucket (MinIO), again (nothing copied twice), imported into a second
// standalone whose data is in a bucket directory, and restored there.
func TestSnapshotExportImport(t *testing.T) {
	bin := cellstoreBinary(t)
	srv := s3test.Start(t)
	srv.CreateBucket(t, "backups")
	cfg := srv.Config("backups")
	t.Setenv(envBackupAccessKey, cfg.AccessKeyID)
	t.Setenv(envBackupSecretKey, cfg.SecretAccessKey)
	backup := []string{"--s3-endpoint", cfg.Endpoint, "--s3-bucket", "backups", "--s3-path-style", "--s3-prefix", "cellstore/one"}
	remote := func(side string) []string {
		var out []string
		for i := 0; i < len(backup); i++ {
			if strings.HasPrefix(backup[i], "--s3-") {
				out = append(out, "--"+side+"-"+strings.TrimPrefix(backup[i], "--"))
			} else {
				out = append(out, backup[i])
			}
		}
		return out
	}

	dirA := t.TempDir()
	a := startStandalone(t, bin, dirA)
	var puts []string
	for i := range 50 {
		puts = append(puts, fmt.Sprintf("put 't1', 'r%02d', 'cf:a', 'v%d'", i, i))
	}
	runShell(t, bin, a.master, "create 't1', 'cf', {SPLITS => ['r25']}; "+strings.Join(puts, "; ")+"; snapshot 't1', 'nightly'")
	out := run(t, bin, append([]string{"snapshot", "export", "nightly", "--storage-dir", dirA}, remote("to")...)...)
	if !strings.Contains(out, "nightly: copied") || strings.Contains(out, "copied 0 files") {
		t.Fatalf("export:\n%s", out)
	}
	out = run(t, bin, append([]string{"snapshot", "export", "nightly", "--storage-dir", dirA}, remote("to")...)...)
	if !strings.Contains(out, "copied 0 files") {
		t.Fatalf("a second export copied again:\n%s", out)
	}
	if out := run(t, bin, append([]string{"snapshot", "list"}, remote("from")...)...); !strings.Contains(out, "nightly\tdefault:t1") {
		t.Fatalf("list at the backup location:\n%s", out)
	}
	a.stop(t, os.Interrupt)

	dirB := t.TempDir()
	b := startStandalone(t, bin, "", "--bucket-dir", dirB)
	out = run(t, bin, append([]string{"snapshot", "import", "nightly", "--bucket-dir", dirB}, remote("from")...)...)
	if !strings.Contains(out, "nightly: copied") {
		t.Fatalf("import:\n%s", out)
	}
	out = runShell(t, bin, b.master, "list_snapshots; restore_snapshot 'nightly'; count 't1'; get 't1', 'r42'")
	if !strings.Contains(out, "nightly") || !strings.Contains(out, "50 row(s)") || !strings.Contains(out, "value=v42") {
		t.Fatalf("the imported snapshot restored:\n%s", out)
	}
	b.stop(t, os.Interrupt)
}
