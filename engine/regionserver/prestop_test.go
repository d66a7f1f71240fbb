package regionserver

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	pb "github.com/cellstore/cellstore/engine/api/cellstore/v1"
	"github.com/cellstore/cellstore/engine/cell"
	"github.com/cellstore/cellstore/engine/client"
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
	defer func(d time.Duration) { masterSilence = d }(masterSilence)
	masterSilence = 500 * time.Millisecond
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
	// the hook's first look at the cluster (a second after it starts).
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
