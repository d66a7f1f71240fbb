package regionserver

import (
	"context"
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"

	pb "github.com/cellstore/cellstore/engine/api/cellstore/v1"
	"github.com/cellstore/cellstore/engine/cell"
	"github.com/cellstore/cellstore/engine/client"
	"github.com/cellstore/cellstore/engine/storage/faultfs"
)

// TestRecoversWhenTheWALCannotBeWritten: the disk fills (the WAL's writes fail with ENOSPC, then
// EIO): writes fail fast with a retryable WRITES_BLOCKED that says why, /readyz fails, and once
// storage takes writes again the server recovers by itself — its regions come back (through the
// master's recovery of the old WAL) with every acknowledged write, and new writes succeed. It
// used to stay broken until restarted.
func TestRecoversWhenTheWALCannotBeWritten(t *testing.T) {
	for _, fault := range []error{syscall.ENOSPC, syscall.EIO} {
		t.Run(fault.Error(), func(t *testing.T) { testWALFailureRecovery(t, fault) })
	}
}

func testWALFailureRecovery(t *testing.T, fault error) {
	c := startClusterWith(t, 0, nil, nil)
	var ffs *faultfs.FS
	c.tune = func(cfg *Config) { ffs = faultfs.New(cfg.FS); cfg.FS = ffs }
	s := c.startServer()
	createTable(t, c, "df", [][]byte{[]byte("g"), []byte("n"), []byte("t")})
	tbl := c.client.Table("df")
	ctx := context.Background()
	var acked []string
	put := func(row string) error {
		pctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		return tbl.Put(pctx, client.NewPut([]byte(row)).Add("f", "q", cell.LatestTimestamp, []byte(row)))
	}
	for i := range 40 {
		row := fmt.Sprintf("%c%03d", 'a'+i%26, i)
		if err := put(row); err != nil {
			t.Fatal(err)
		}
		acked = append(acked, row)
	}

	// The disk is full: every write to the WAL's files fails.
	ffs.AddRule(faultfs.Rule{Ops: faultfs.OpWrite | faultfs.OpSync | faultfs.OpCreate, Path: "wal/*/*", Action: faultfs.Fail, Err: fault})
	regionName, conn := locate(t, c, "df", []byte("a"))
	p := cell.AppendKeyValue(nil, []byte("a-full"), []byte("f"), []byte("q"), cell.LatestTimestamp, cell.Put, []byte("x"))
	for i := range 2 { // the first write breaks the WAL; the next one's append is refused at once
		_, err := conn.Call(ctx, pb.Method_METHOD_MUTATE, &pb.MutateRequest{Region: &pb.RegionSpecifier{Name: regionName},
			Mutation: &pb.MutationProto{Type: pb.MutationProto_TYPE_PUT, Row: []byte("a-full"), CellCount: 1}}, p, &pb.MutateResponse{}, nil)
		d, ok := pb.DetailOf(err)
		if !ok || d.GetCode() != pb.ErrorCode_ERROR_CODE_WRITES_BLOCKED || !d.GetRetryable() || !strings.Contains(d.GetMessage(), fault.Error()) {
			t.Fatalf("write %d with a full disk: want a retryable WRITES_BLOCKED naming %q, got %v", i, fault, err)
		}
	}
	if err := s.Ready(); err == nil || !strings.Contains(err.Error(), "WAL cannot be written") {
		t.Fatalf("Ready with a full disk: %v", err)
	}

	// Space returns: the server recovers on its own.
	ffs.ClearRules()
	waitFor(t, "the server to be ready again", 30*time.Second, func() bool { return s.Ready() == nil })
	c.waitOpen("df", 4, "", 30*time.Second)
	if s.m.walFailures.Load() == 0 {
		t.Error("no WAL failure was counted")
	}
	for _, row := range acked {
		r, err := tbl.Get(ctx, &pb.Get{Row: []byte(row)})
		if err != nil || len(r.Cells) != 1 || string(r.Cells[0].Value) != row {
			t.Fatalf("acknowledged row %s after the recovery: %v, %v", row, r, err)
		}
	}
	for i := range 10 {
		if err := put(fmt.Sprintf("after%02d", i)); err != nil {
			t.Fatalf("write after the recovery: %v", err)
		}
	}
}

// A slow disk (each WAL sync takes 300 ms) slows writes down but breaks nothing: every write is
// acknowledged, none before its sync, and the WAL never counts as failed.
func TestSlowWALSyncSlowsWritesOnly(t *testing.T) {
	c := startClusterWith(t, 0, nil, nil)
	var ffs *faultfs.FS
	c.tune = func(cfg *Config) { ffs = faultfs.New(cfg.FS); cfg.FS = ffs }
	s := c.startServer()
	createTable(t, c, "slow", nil)
	tbl := c.client.Table("slow")
	ctx := context.Background()
	ffs.AddRule(faultfs.Rule{Ops: faultfs.OpSync, Path: "wal/*/*", Action: faultfs.Delay, Delay: 300 * time.Millisecond})
	syncsBefore := ffs.Count(faultfs.OpSync)
	for i := range 5 {
		start := time.Now()
		row := fmt.Sprintf("r%d", i)
		if err := tbl.Put(ctx, client.NewPut([]byte(row)).Add("f", "q", cell.LatestTimestamp, []byte(row))); err != nil {
			t.Fatalf("put %d on a slow disk: %v", i, err)
		}
		if took := time.Since(start); took < 300*time.Millisecond {
			t.Fatalf("put %d acknowledged after %s, before its 300 ms sync", i, took)
		}
	}
	if ffs.Count(faultfs.OpSync) == syncsBefore {
		t.Fatal("no WAL sync happened")
	}
	if s.m.walFailures.Load() != 0 || s.Ready() != nil {
		t.Fatalf("a slow disk counted as a failure: %d failures, ready %v", s.m.walFailures.Load(), s.Ready())
	}
}

// The admin port (through which the master opens and closes regions) ending for good takes the
// server out of readiness and is reported on Failed, so the process exits to be restarted; its
// error used to be discarded.
func TestAdminPortFailureIsNotSilent(t *testing.T) {
	c := startClusterWith(t, 0, nil, nil)
	s := c.startServer()
	waitFor(t, "the server to be ready", 30*time.Second, func() bool { return s.Ready() == nil })
	_ = s.adminLis.Close() // the listener dies under gRPC, as on a fatal accept error
	select {
	case err := <-s.Failed():
		if !strings.Contains(err.Error(), "admin port") {
			t.Fatalf("Failed: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no failure reported within 10 s")
	}
	if err := s.Ready(); err == nil || !strings.Contains(err.Error(), "admin port") {
		t.Fatalf("Ready after the admin port died: %v", err)
	}
}

// TestConditionalWriteWhoseSyncFailedIsNotRetried: a check-and-mutate applied when the WAL's sync
// then fails is answered OUTCOME_UNKNOWN, not a retryable WRITES_BLOCKED. Its edit is in the log
// and comes back with the region, so a retry would find its own effect: a check-and-put lock
// reported as held by someone else. A conditional write the broken WAL refused before it reached
// the log stays retryable.
func TestConditionalWriteWhoseSyncFailedIsNotRetried(t *testing.T) {
	c := startClusterWith(t, 0, nil, nil)
	var ffs *faultfs.FS
	c.tune = func(cfg *Config) { ffs = faultfs.New(cfg.FS); cfg.FS = ffs }
	s := c.startServer()
	createTable(t, c, "us", nil)
	tbl := c.client.Table("us")
	ctx := context.Background()
	absent := func(row string) *pb.Condition {
		return &pb.Condition{Row: []byte(row), Family: []byte("f"), Qualifier: []byte("owner"), Op: pb.CompareOp_COMPARE_OP_EQUAL}
	}
	recoverStorage := func() {
		t.Helper()
		ffs.ClearRules()
		waitFor(t, "the server to be ready again", 30*time.Second, func() bool { return s.Ready() == nil })
		c.waitOpen("us", 1, "", 30*time.Second)
	}
	fail := faultfs.Rule{Ops: faultfs.OpSync, Path: "wal/*/*", Action: faultfs.Fail, Err: syscall.EIO}

	// A check-and-mutate by MUTATE (as HBase's client sends checkAndPut).
	regionName, conn := locate(t, c, "us", []byte("lock"))
	ffs.AddRule(fail)
	checkAndPut := func(row string) error {
		block := cell.AppendKeyValue(nil, []byte(row), []byte("f"), []byte("owner"), cell.LatestTimestamp, cell.Put, []byte("a"))
		_, err := conn.Call(ctx, pb.Method_METHOD_MUTATE, &pb.MutateRequest{Region: &pb.RegionSpecifier{Name: regionName},
			Mutation: &pb.MutationProto{Type: pb.MutationProto_TYPE_PUT, Row: []byte(row), CellCount: 1}, Condition: absent(row)},
			block, &pb.MutateResponse{}, nil)
		return err
	}
	wantCode(t, "a check-and-put whose WAL sync failed", checkAndPut("lock"), pb.ErrorCode_ERROR_CODE_OUTCOME_UNKNOWN)
	err := checkAndPut("lock-refused")
	if d, ok := pb.DetailOf(err); !ok || d.GetCode() != pb.ErrorCode_ERROR_CODE_WRITES_BLOCKED || !d.GetRetryable() {
		t.Fatalf("a check-and-put the broken WAL refused: %v; want a retryable WRITES_BLOCKED", err)
	}
	recoverStorage()

	// A conditional RowMutations in a batch.
	ffs.AddRule(fail)
	res := tbl.Batch(ctx, []client.BatchOp{
		{RowMutations: []*client.Mutation{client.NewPut([]byte("lock2")).Add("f", "owner", cell.LatestTimestamp, []byte("b"))}, Condition: absent("lock2")},
	})
	if d, _ := pb.DetailOf(res[0].Err); d.GetCode() != pb.ErrorCode_ERROR_CODE_OUTCOME_UNKNOWN {
		t.Fatalf("a conditional RowMutations whose WAL sync failed: %+v; want OUTCOME_UNKNOWN", res[0])
	}
	recoverStorage()

	// The synced-but-unacknowledged edits came back with their regions, once each: a retry would
	// have failed its condition.
	for _, row := range []string{"lock", "lock2"} {
		got, err := tbl.Get(ctx, &pb.Get{Row: []byte(row), MaxVersions: 10})
		if err != nil || len(got.Cells) != 1 {
			t.Fatalf("%s after the unknown outcome: %v %v; want one version", row, got, err)
		}
	}
}
