package regionserver

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

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
