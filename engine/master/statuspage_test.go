package master_test

import (
	"fmt"
	"io"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"
	"time"
)

// The cluster page lists the procedures under way — kind, step, region, target — beside the
// regions in transition, and says so when there is none.
func TestStatusPageListsProcedures(t *testing.T) {
	c := newCluster(t, 1, nil, nil)
	hung := c.servers[0]
	hung.SetHangOpens(true)
	infos := c.createTable("procs", 2, 0)
	c.waitFor("opens hanging", 10*time.Second, func() (bool, string) {
		return len(hung.Hung()) == 2, fmt.Sprint(hung.Hung())
	})
	page := func() string {
		t.Helper()
		rec := httptest.NewRecorder()
		c.m.StatusPage().ServeHTTP(rec, httptest.NewRequest("GET", "/", nil))
		b, _ := io.ReadAll(rec.Result().Body)
		body := string(b)
		i := strings.Index(body, `<table id="procedures">`)
		if i < 0 {
			t.Fatalf("no procedures table on the page:\n%s", body)
		}
		return body[i : i+strings.Index(body[i:], "</table>")]
	}
	procs := page()
	for _, info := range infos {
		row := regexp.MustCompile(`<tr><td class="n">\d+</td><td>ASSIGN</td><td>OPEN</td><td>` + info.GetName() + `</td><td>` + regexp.QuoteMeta(hung.Name()))
		if !row.MatchString(procs) {
			t.Errorf("no ASSIGN procedure at its OPEN step for region %s on %s:\n%s", info.GetName(), hung.Name(), procs)
		}
	}
	hung.SetHangOpens(false)
	hung.ReleaseHung()
	c.waitAllOpen("procs", 20*time.Second)
	if procs := page(); !strings.Contains(procs, "No procedure under way.") {
		t.Errorf("procedures listed once every region is open:\n%s", procs)
	}
}
