package main

import (
	"context"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	pb "github.com/cellstore/cellstore/engine/api/cellstore/v1"
)

// `cellstore master` with a config file: it serves gRPC and telemetry, creates the catalog under
// the storage directory, and stops cleanly when its context (SIGTERM) ends.
func TestMasterCommand(t *testing.T) {
	dir := t.TempDir()
	conf := filepath.Join(dir, "master.conf")
	if err := os.WriteFile(conf, []byte("hedge-delay = 25ms\ndefault-region-replication = 2\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	addrs := make(chan [2]string, 1)
	f := &masterFlags{started: func(g, h string) { addrs <- [2]string{g, h} }}
	cmd := newMasterCommand(f)
	cmd.SetArgs([]string{"--storage-dir", filepath.Join(dir, "store"), "--grpc-addr", "127.0.0.1:0", "--http-addr", "127.0.0.1:0",
		"--advertise-host", "127.0.0.1", "--config", conf, "--log-level", "warn"})
	if err := os.Mkdir(filepath.Join(dir, "store"), 0o755); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	errc := make(chan error, 1)
	go func() { errc <- cmd.ExecuteContext(ctx) }()
	var a [2]string
	select {
	case a = <-addrs:
	case err := <-errc:
		t.Fatalf("master exited: %v", err)
	case <-time.After(20 * time.Second):
		t.Fatal("master did not start")
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		resp, err := http.Get("http://" + a[1] + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("/readyz never OK: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	conn, err := grpc.NewClient(a[0], grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	// /readyz is OK for a standby too: the master may still be becoming active (loading its
	// catalog) at first.
	var st *pb.ClusterStatusResponse
	for {
		st, err = pb.NewMasterClient(conn).ClusterStatus(ctx, &pb.ClusterStatusRequest{})
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal(err)
		}
		time.Sleep(20 * time.Millisecond) // polling the master
	}
	if st.GetActiveMaster() != a[0] || st.GetClusterConfig()["hedge_delay_ms"] != "25" || st.GetClusterConfig()["default_region_replication"] != "2" {
		t.Errorf("status %v (listening on %s)", st, a[0])
	}
	resp, err := http.Get("http://" + a[1] + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(body), "cellstore_master_is_active_master 1") {
		t.Error("metrics do not say the master is active")
	}
	cancel()
	select {
	case err := <-errc:
		if err != nil {
			t.Errorf("graceful stop: %v", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("master did not stop")
	}
	if _, err := os.Stat(filepath.Join(dir, "store", "meta", "wal")); err != nil {
		t.Errorf("no catalog: %v", err)
	}
	// Bad settings fail with a clear error.
	for _, args := range [][]string{
		{"--grpc-addr", "127.0.0.1:0", "--http-addr", "127.0.0.1:0"},
		{"--storage-dir", dir, "--election", "zookeeper", "--grpc-addr", "127.0.0.1:0", "--http-addr", "127.0.0.1:0"},
		{"--storage-dir", dir, "--election", "kubernetes", "--grpc-addr", "127.0.0.1:0", "--http-addr", "127.0.0.1:0"},
	} {
		cmd := newMasterCommand(&masterFlags{})
		cmd.SetArgs(args)
		cmd.SilenceErrors, cmd.SilenceUsage = true, true
		if err := cmd.ExecuteContext(context.Background()); err == nil {
			t.Errorf("%v: no error", args)
		}
	}
}
