package main

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// chromium is the headless browser of the status-page test: make test installs Debian's
// (hack/chromium.sh) and passes it in CELLSTORE_CHROMIUM.
func chromium(t *testing.T) string {
	t.Helper()
	p := os.Getenv("CELLSTORE_CHROMIUM")
	if p == "" {
		t.Skip("needs Chromium: make test installs it, or set CELLSTORE_CHROMIUM=$(hack/chromium.sh)")
	}
	return p
}

// browse loads a page in headless Chromium and returns the DOM it rendered; with shot, it also
// saves a screenshot there.
func browse(t *testing.T, browser, url, shot string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	profile := t.TempDir() // no state shared between runs
	args := []string{"--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--user-data-dir=" + profile,
		"--window-size=1280,1100", "--hide-scrollbars"}
	out, err := exec.CommandContext(ctx, browser, append(args, "--dump-dom", url)...).Output()
	if err != nil {
		t.Fatalf("chromium %s: %v", url, err)
	}
	if shot != "" {
		if b, err := exec.CommandContext(ctx, browser, append(args, "--screenshot="+shot, url)...).CombinedOutput(); err != nil {
			t.Fatalf("chromium screenshot of %s: %v\n%s", url, err, b)
		}
	}
	return string(out)
}

// The status pages of a running master and region server (a standalone: both, on their own HTTP
// ports), loaded in a real browser: the cluster page with its server (a link to the server's
// page), table (a link to the table's page), quota and settings; the table's page with its
// regions, their keys and server; the region server's page with its regions, memory and a link
// back to the master. CELLSTORE_SCREENSHOTS=dir also saves screenshots there (docs/images).
func TestStatusPagesInABrowser(t *testing.T) {
	browser := chromium(t)
	bin := cellstoreBinary(t)
	masterHTTP := "127.0.0.1:" + freePort(t)
	p := startStandalone(t, bin, t.TempDir(), "--master-http-addr", masterHTTP)
	runShell(t, bin, p.master, "create 'orders', 'f', SPLITS => ['m']; put 'orders', 'apple', 'f:q', '1'; put 'orders', 'zebra', 'f:q', '2'; "+
		"get 'orders', 'apple'; set_quota TYPE => THROTTLE, TABLE => 'orders', LIMIT => '100req/sec'")
	shots := os.Getenv("CELLSTORE_SCREENSHOTS")
	shot := func(name string) string {
		if shots == "" {
			return ""
		}
		return filepath.Join(shots, name)
	}
	cluster := browse(t, browser, "http://"+masterHTTP+"/", shot("status-master.png"))
	for _, want := range []string{
		"<title>Cellstore master " + p.master + "</title>",
		"(this one)",
		`<a href="http://` + p.httpAddr + `/">` + p.data + `</a>`, // the server, linked to its page
		"<td>live</td>",
		`<a href="/table?name=default%3aorders">default:orders</a>`, "<td>ENABLED</td>",
		"TABLE =&gt; default:orders, THROTTLE_TYPE =&gt; REQUEST_NUMBER, LIMIT =&gt; 100 per 1s",
		"quotas_enabled", "Recent warnings and errors", "No procedure under way.",
	} {
		if !strings.Contains(cluster, want) {
			t.Errorf("the cluster page lacks %q:\n%s", want, cluster)
		}
	}
	table := browse(t, browser, "http://"+masterHTTP+"/table?name=default:orders", shot("status-table.png"))
	for _, want := range []string{"Table default:orders", "<td>m</td>", "<td>OPEN</td>", `<a href="http://` + p.httpAddr + `/">` + p.data + `</a>`} {
		if !strings.Contains(table, want) {
			t.Errorf("the table page lacks %q:\n%s", want, table)
		}
	}
	if strings.Count(table, "<td>OPEN</td>") != 2 {
		t.Errorf("the table page shows %d open regions, want 2:\n%s", strings.Count(table, "<td>OPEN</td>"), table)
	}
	if missing := browse(t, browser, "http://"+masterHTTP+"/table?name=nope", ""); !strings.Contains(missing, "There is no table default:nope.") {
		t.Errorf("the page of a missing table:\n%s", missing)
	}
	rs := browse(t, browser, "http://"+p.httpAddr+"/", shot("status-regionserver.png"))
	for _, want := range []string{
		"<title>Cellstore region server " + p.data + "</title>",
		`<a id="master" href="http://` + masterHTTP + `/">Master</a>`,
		"<td>default:orders</td>", "<td>m</td>", "Block cache L1 (on-heap)", "Memstore (off-heap chunks)", "<td>ready</td>",
	} {
		if !strings.Contains(rs, want) {
			t.Errorf("the region server page lacks %q:\n%s", want, rs)
		}
	}
	if n := strings.Count(rs, "<td>default:orders</td>"); n != 2 {
		t.Errorf("the region server page lists %d regions of orders, want 2", n)
	}
}
