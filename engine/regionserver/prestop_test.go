package regionserver

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	pb "github.com/cellstore/cellstore/engine/api/cellstore/v1"
	"github.com/cellstore/cellstore/engine/cell"
	"github.com/cellstore/cellstore/engine/client"
	"github.com/cellstore/cellstore/engine/master"
	"github.com/cellstore/cellstore/engine/storage/faultfs"
)

// The preStop hook drains the server through the master: it returns once the server holds no
// regions, and the data stays readable from the other server.
func TestPrestopDrainsTheServer(t *testing.T) {
	c := startCluster(t, 2)
	ctx := context.Background()
	createTable(t, c, "ps", [][]byte{[]byte("m")})
	tbl := c.client.Table("ps")
	for _, row := range []string{"a", "z"} {
		if err := tbl.Put(ctx, client.NewPut([]byte(row)).Add("f", "q", cell.LatestTimestamp, []byte(row))); err != nil {
			t.Fatal(err)
		}
	}
	s := c.servers[0]
	if len(s.OnlineRegions()) == 0 {
		s = c.servers[1]
	}
	h := httptest.NewServer(s.PrestopHandler())
	defer h.Close()
	resp, err := http.Post(h.URL+"?timeout=30s", "", nil)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !strings.Contains(string(body), "drained") {
		t.Fatalf("prestop answered %d %q", resp.StatusCode, body)
	}
	if n := len(s.OnlineRegions()); n != 0 {
		t.Fatalf("%d regions left after prestop", n)
	}
	for _, row := range []string{"a", "z"} {
		r, err := tbl.Get(ctx, &pb.Get{Row: []byte(row)})
		if err != nil || len(r.Cells) != 1 {
			t.Fatalf("get %s after the drain: %v %v", row, r, err)
		}
	}
	if resp, err := http.Post(h.URL+"?timeout=soon", "", nil); err != nil || resp.StatusCode != http.StatusBadRequest {
		t.Errorf("bad timeout accepted: %v %v", resp, err)
	}
}

// With no other server to take its regions (the whole cluster is being deleted), the hook does not
// wait for its timeout: it says so and returns, and the graceful stop flushes the regions.
func TestPrestopWithNowhereToMoveReturns(t *testing.T) {
	c := startCluster(t, 1)
	createTable(t, c, "alone", nil)
	s := c.servers[0]
	h := httptest.NewServer(s.PrestopHandler())
	defer h.Close()
	resp, err := http.Post(h.URL+"?timeout=10m", "", nil) // the test's deadline ends it if the hook waits
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !strings.Contains(string(body), "no other live region server can take them") {
		t.Fatalf("prestop answered %d %q", resp.StatusCode, body)
	}
	if n := len(s.OnlineRegions()); n == 0 {
		t.Fatal("the server gave up its regions although none could move")
	}
}

// With the master gone (deleted with the cluster), the hook stops waiting once the master has been
// silent for masterSilence.
func TestPrestopWithTheMasterGoneReturns(t *testing.T) {
	defer func(d, f time.Duration) { masterSilence, drainFirstCheck = d, f }(masterSilence, drainFirstCheck)
	// The test closes the master between the drain request and the hook's first look at the
	// cluster: time enough for that on a loaded machine.
	masterSilence, drainFirstCheck = 500*time.Millisecond, 5*time.Second
	c := startCluster(t, 1)
	createTable(t, c, "gone", nil)
	s := c.servers[0]
	h := httptest.NewServer(s.PrestopHandler())
	defer h.Close()
	done := make(chan string, 1)
	go func() {
		resp, err := http.Post(h.URL+"?timeout=10m", "", nil)
		if err != nil {
			done <- err.Error()
			return
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		done <- string(body)
	}()
	// Once the master has marked the server draining (the hook's first step), it goes away before
	// the hook's first look at the cluster (drainFirstCheck after it starts).
	ctx := context.Background()
	deadline := time.Now().Add(10 * time.Second)
	for {
		var st *pb.ClusterStatusResponse
		err := c.client.Master(ctx, func(ctx context.Context, m pb.MasterClient) error {
			var err error
			st, err = m.ClusterStatus(ctx, &pb.ClusterStatusRequest{})
			return err
		})
		if err == nil && len(st.GetServers()) == 1 && st.GetServers()[0].GetDraining() {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the server was not marked draining: %v %v", st, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	c.master.Close()
	if body := <-done; !strings.Contains(body, "the master has not answered") {
		t.Fatalf("prestop answered %q", body)
	}
}

// lineCounter counts log lines with a given message.
type lineCounter struct {
	msg string
	n   *atomic.Int64
}

func (h lineCounter) Enabled(context.Context, slog.Level) bool { return true }
func (h lineCounter) Handle(_ context.Context, r slog.Record) error {
	if r.Message == h.msg {
		h.n.Add(1)
	}
	return nil
}
func (h lineCounter) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h lineCounter) WithGroup(string) slog.Handler      { return h }

// A graceful stop whose flushes take several leases keeps heartbeating: the master never declares
// the server dead (and splits its log) while it is still writing, and the stop ends cleanly.
func TestHeartbeatsContinueThroughASlowGracefulStop(t *testing.T) {
	var expired atomic.Int64
	c := startClusterWith(t, 1, nil, func(m *master.Config) {
		m.Logger = slog.New(lineCounter{msg: "region server lease expired: declaring it dead", n: &expired})
	})
	var ffs *faultfs.FS
	c.tune = func(cfg *Config) { ffs = faultfs.New(cfg.FS); cfg.FS = ffs }
	slow := c.startServer()
	createTable(t, c, "hb", [][]byte{[]byte("g"), []byte("n"), []byte("t")})
	tbl := c.client.Table("hb")
	ctx := context.Background()
	for _, row := range []string{"a", "h", "o", "u"} {
		if err := tbl.Put(ctx, client.NewPut([]byte(row)).Add("f", "q", cell.LatestTimestamp, []byte(row))); err != nil {
			t.Fatal(err)
		}
	}
	if len(slow.OnlineRegions()) == 0 {
		t.Fatal("the slow server holds no region")
	}
	// Each store file sync of a flush takes 1.5 s: the stop's flushes outlast the 1 s lease.
	ffs.AddRule(faultfs.Rule{Ops: faultfs.OpSync, Path: "data/*/*/*/*/*", Action: faultfs.Delay, Delay: 1500 * time.Millisecond})
	start := time.Now()
	if err := slow.Stop(); err != nil {
		t.Fatalf("graceful stop: %v", err)
	}
	took := time.Since(start)
	if took < 1500*time.Millisecond {
		t.Fatalf("the stop took %s: the slow flush did not happen", took)
	}
	if n := expired.Load(); n != 0 {
		t.Fatalf("the master declared the stopping server dead %d times during a %s stop", n, took)
	}
	// Its regions open on the other server with every row.
	c.waitOpen("hb", 4, slow.Name(), 30*time.Second)
	for _, row := range []string{"a", "h", "o", "u"} {
		r, err := tbl.Get(ctx, &pb.Get{Row: []byte(row)})
		if err != nil || len(r.Cells) != 1 {
			t.Fatalf("row %s after the stop: %v %v", row, r, err)
		}
	}
}

// A drain is stalled once no region has left for the stall time: the count falling restarts the
// wait, the count standing (or rising: a region opening here) does not.
func TestDrainProgress(t *testing.T) {
	p := drainProgress{stall: time.Minute}
	t0 := time.Unix(1000, 0)
	steps := []struct {
		n     int
		at    time.Duration
		stall bool
	}{
		{10, 0, false},
		{10, 59 * time.Second, false},
		{9, 60 * time.Second, false}, // one left: the wait starts again
		{9, 119 * time.Second, false},
		{11, 110 * time.Second, false}, // a region opened here: not progress
		{11, 120 * time.Second, true},
		{3, 121 * time.Second, false},
		{3, 180 * time.Second, false},
		{3, 181 * time.Second, true},
	}
	for i, s := range steps {
		if got := p.stalled(s.n, t0.Add(s.at)); got != s.stall {
			t.Fatalf("step %d (%d regions at %s): stalled %v, want %v", i, s.n, s.at, got, s.stall)
		}
	}
}
