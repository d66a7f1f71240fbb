package master_test

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/cellstore/cellstore/engine/master"
	"github.com/cellstore/cellstore/engine/storage"
	"github.com/cellstore/cellstore/engine/storage/faultfs"
)

// catalogGate holds the master's catalog writes while it is shut: the first write to reach it
// waits (with the master's lock held) until it opens.
type catalogGate struct {
	shut    atomic.Bool
	reached chan struct{}
	open    chan struct{}
	once    sync.Once
}

func newCatalogGate(ffs *faultfs.FS) *catalogGate {
	g := &catalogGate{reached: make(chan struct{}, 1), open: make(chan struct{})}
	ffs.AddRule(faultfs.Rule{Ops: faultfs.OpWrite, Path: "meta/wal/*", Action: faultfs.Call, Fn: func() {
		if g.shut.Load() {
			select {
			case g.reached <- struct{}{}:
			default:
			}
			<-g.open
		}
	}})
	return g
}

func (g *catalogGate) release() {
	g.once.Do(func() {
		g.shut.Store(false)
		close(g.open)
	})
}

// metricValue is a gauge's value, or a histogram's count and sum, from the master's registry.
func (c *cluster) metricValue(name string) (value float64, count uint64) {
	c.t.Helper()
	fams, err := c.cfg.Registerer.(*prometheus.Registry).Gather()
	if err != nil {
		c.t.Fatal(err)
	}
	for _, f := range fams {
		if f.GetName() != name {
			continue
		}
		m := f.GetMetric()[0]
		if h := m.GetHistogram(); h != nil {
			return h.GetSampleSum(), h.GetSampleCount()
		}
		return m.GetGauge().GetValue(), 0
	}
	c.t.Fatalf("no metric %s", name)
	return 0, 0
}

// hungTable makes a table whose 8 regions hang opening on the cluster's one server, and shuts
// the catalog's gate.
func hungTable(t *testing.T) (*cluster, *faultfs.FS, *catalogGate) {
	ffs := faultfs.New(storage.NewMem())
	c := newClusterOn(t, ffs, 1, func(cfg *master.Config) { cfg.DDLWait = 200 * time.Millisecond })
	srv := c.servers[0]
	srv.SetHangOpens(true)
	c.createTable("t1", 8, 0)
	c.waitFor("opens hanging", 10*time.Second, func() (bool, string) {
		return len(srv.Hung()) == 8, fmt.Sprint("hung ", srv.Hung())
	})
	srv.SetHangOpens(false)
	gate := newCatalogGate(ffs)
	gate.shut.Store(true)
	t.Cleanup(gate.release)
	return c, ffs, gate
}

// reportAllWhileAWriteIsHeld has the server report its 8 hung opens at once and returns when a
// catalog write is held at the gate and every report has reached the master; the channel closes
// once every report is answered.
func reportAllWhileAWriteIsHeld(t *testing.T, c *cluster, gate *catalogGate) <-chan struct{} {
	t.Helper()
	released := make(chan struct{})
	go func() { c.servers[0].ReleaseHungAtOnce(); close(released) }()
	select {
	case <-gate.reached: // a catalog write holds the master
	case <-time.After(10 * time.Second):
		t.Fatal("no report reached the catalog")
	}
	c.waitFor("every report received", 10*time.Second, func() (bool, string) {
		n, _ := c.metricValue("cellstore_master_reports_waiting")
		return n == 8, fmt.Sprintf("%v received and not answered", n)
	})
	return released
}

// Reports that arrive while the catalog is being written wait together and are written by one
// catalog write: 8 regions that open at once on a server cost two writes, not eight.
func TestReportsThatArriveTogetherShareACatalogWrite(t *testing.T) {
	c, _, gate := hungTable(t)
	released := reportAllWhileAWriteIsHeld(t, c, gate)
	gate.release()
	<-released
	c.waitAllOpen("t1", 10*time.Second)
	sum, writes := c.metricValue("cellstore_master_reports_per_catalog_write")
	if sum != 8 || writes > 2 {
		t.Errorf("8 OPENED reports took %d catalog writes (%v reports in them), want at most 2", writes, sum)
	}
	if n, _ := c.metricValue("cellstore_master_reports_waiting"); n != 0 {
		t.Errorf("%v reports still waiting", n)
	}
}

// A group whose catalog write fails acknowledges none of its reports: the master stops, and
// answers them NOT_ACTIVE_MASTER, so the region server keeps its regions and reports them again
// to the next master — which finds each region as the failed write may or may not have left it.
func TestAFailedGroupWriteLeavesItsReportsToTheNextMaster(t *testing.T) {
	c, ffs, gate := hungTable(t)
	srv := c.servers[0]
	released := reportAllWhileAWriteIsHeld(t, c, gate)
	// The write under way is written but not synced: whether it is durable is not known.
	ffs.ClearRules()
	ffs.AddRule(faultfs.Rule{Ops: faultfs.OpSync, Path: "meta/wal/*", Err: errors.New("disk gone")})
	gate.release()
	select {
	case <-c.m.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("the master did not stop after its group's catalog write failed")
	}
	if err := c.m.Err(); err == nil || !strings.Contains(err.Error(), "catalog write") {
		t.Errorf("master ended with %v", err)
	}
	if _, writes := c.metricValue("cellstore_master_reports_per_catalog_write"); writes != 0 {
		t.Errorf("%d groups counted as written", writes)
	}
	ffs.ClearRules()
	c.startMaster()
	<-released // every report answered, by the new master
	if got := srv.Regions(); len(got) != 8 {
		t.Errorf("the server dropped regions whose reports were refused: it holds %v", got)
	}
	c.waitAllOpen("t1", 10*time.Second)
}
