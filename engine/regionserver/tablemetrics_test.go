package regionserver

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	pb "github.com/cellstore/cellstore/engine/api/cellstore/v1"
	"github.com/cellstore/cellstore/engine/cell"
	"github.com/cellstore/cellstore/engine/client"
)

// series gathers a registry into "name{label=value,...}" → value.
func series(t *testing.T, reg *prometheus.Registry) map[string]float64 {
	t.Helper()
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, f := range fams {
		for _, m := range f.GetMetric() {
			var ls []string
			for _, l := range m.GetLabel() {
				ls = append(ls, l.GetName()+"="+l.GetValue())
			}
			key := f.GetName() + "{" + strings.Join(ls, ",") + "}"
			switch f.GetType() {
			case dto.MetricType_COUNTER:
				out[key] = m.GetCounter().GetValue()
			case dto.MetricType_GAUGE:
				out[key] = m.GetGauge().GetValue()
			case dto.MetricType_HISTOGRAM:
				out[key] = float64(m.GetHistogram().GetSampleCount())
			case dto.MetricType_SUMMARY: // the count, and the sum under NAME_sum
				out[key] = float64(m.GetSummary().GetSampleCount())
				out[f.GetName()+"_sum{"+strings.Join(ls, ",")+"}"] = m.GetSummary().GetSampleSum()
			}
		}
	}
	return out
}

// Per-table and per-region metrics: counts per table from the regions' own counters, latency per
// table and operation, the busiest regions only, tables beyond the limit summed under "_other",
// and a table's counters that do not go down when one of its regions moves away.
func TestTableAndRegionMetrics(t *testing.T) {
	var regs []*prometheus.Registry
	c := startTunedCluster(t, 2, func(cfg *Config) {
		reg := prometheus.NewRegistry()
		regs = append(regs, reg)
		cfg.Registerer, cfg.TableMetricsMax, cfg.RegionMetricsTop = reg, 2, 3
	})
	ctx := context.Background()
	for _, name := range []string{"busy", "quiet", "idle"} {
		td := &pb.TableDescriptor{Name: &pb.TableName{Namespace: "default", Name: name}, Families: []*pb.ColumnFamilyDescriptor{{Name: []byte("f")}}}
		if _, err := c.client.CreateTable(ctx, td, [][]byte{rowKey(50)}); err != nil {
			t.Fatal(err)
		}
		c.waitOpen(name, 2, "", 30*time.Second)
	}
	for i := range 100 {
		if err := c.client.Table("busy").Put(ctx, client.NewPut(rowKey(i)).Add("f", "q", cell.LatestTimestamp, []byte("v"))); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 10 {
		if _, err := c.client.Table("quiet").Get(ctx, &pb.Get{Row: rowKey(i)}); err != nil {
			t.Fatal(err)
		}
	}
	sum := func(name string) float64 {
		var n float64
		for _, reg := range regs {
			n += series(t, reg)[name]
		}
		return n
	}
	if got := sum(`cellstore_regionserver_table_write_requests_total{table=default:busy}`); got != 100 {
		t.Errorf("writes of busy: %v, want 100", got)
	}
	// A request's latency is observed once its answer is on its way: the last one may land just
	// after the client has it.
	waitForState(t, "mutate latencies of busy", 10*time.Second, func() (bool, string) {
		got := sum(`cellstore_regionserver_table_request_seconds{op=mutate,table=default:busy}`)
		return got == 100, fmt.Sprintf("%v, want 100", got)
	})
	// Each region of busy (the busiest here) has its own latency: its calls and their summed time.
	waitForState(t, "mutate latencies of busy's regions", 10*time.Second, func() (bool, string) {
		var calls, secs float64
		var flushSeries int
		for _, reg := range regs {
			for k, v := range series(t, reg) {
				if strings.HasPrefix(k, "cellstore_regionserver_region_request_seconds{op=mutate,") && strings.HasSuffix(k, ",table=default:busy}") {
					calls += v
				}
				if strings.HasPrefix(k, "cellstore_regionserver_region_request_seconds_sum{op=mutate,") && strings.HasSuffix(k, ",table=default:busy}") {
					secs += v
				}
				if strings.HasPrefix(k, "cellstore_regionserver_region_flushes_total{") && strings.HasSuffix(k, ",table=default:busy}") {
					flushSeries++
				}
			}
		}
		return calls == 100 && secs > 0 && flushSeries == 2, fmt.Sprintf("%v calls taking %v s, %d flush series; want 100 calls, some time, 2 series", calls, secs, flushSeries)
	})
	if got := sum(`cellstore_regionserver_table_regions{table=default:busy}`); got != 2 {
		t.Errorf("regions of busy: %v", got)
	}
	// With at most 2 tables a server names the busiest and sums the rest: quiet and idle share
	// "_other" on a server that holds regions of all three.
	for i, reg := range regs {
		s := series(t, reg)
		tables := map[string]bool{}
		regions := 0
		for k := range s {
			if rest, ok := strings.CutPrefix(k, "cellstore_regionserver_table_regions{table="); ok {
				tables[strings.TrimSuffix(rest, "}")] = true
			}
			if strings.HasPrefix(k, "cellstore_regionserver_region_write_requests_total{") {
				regions++
			}
		}
		if len(tables) > 2 {
			t.Errorf("server %d: per-table series for %v, want at most 2 tables", i, tables)
		}
		if tables[otherTables] && s["cellstore_regionserver_table_metrics_folded_tables{}"] < 2 {
			t.Errorf("server %d: _other without folded tables: %v", i, s)
		}
		if regions > 3 {
			t.Errorf("server %d: %d regions with series of their own, want at most 3", i, regions)
		}
		if n := len(c.servers[i].OnlineRegions()); float64(regions)+s["cellstore_regionserver_region_metrics_omitted_regions{}"] != float64(n) {
			t.Errorf("server %d: %d region series + %v omitted, %d regions", i, regions, s["cellstore_regionserver_region_metrics_omitted_regions{}"], n)
		}
	}

	// A region of busy moves: the source server still counts what it served.
	var src, dst int
	var moving string
	for i, s := range c.servers {
		s.regions.Range(func(_, v any) bool {
			if or := v.(*onlineRegion); or.tkey == "default:busy" && moving == "" {
				moving, src, dst = or.name, i, 1-i
			}
			return true
		})
	}
	before := series(t, regs[src])[`cellstore_regionserver_table_write_requests_total{table=default:busy}`]
	if before == 0 {
		t.Fatalf("server %d holds region %s of busy but counted no writes", src, moving)
	}
	c.masterCall(t, func(ctx context.Context, m pb.MasterClient) error {
		_, err := m.MoveRegion(ctx, &pb.MoveRegionRequest{Region: moving, Destination: c.servers[dst].Name()})
		return err
	})
	c.waitOpen("busy", 2, "", 30*time.Second)
	deadline := time.Now().Add(30 * time.Second)
	for c.serves(c.servers[src].Name(), moving) {
		if time.Now().After(deadline) {
			t.Fatalf("region %s still on server %d", moving, src)
		}
		time.Sleep(10 * time.Millisecond) // polling the move
	}
	if after := series(t, regs[src])[`cellstore_regionserver_table_write_requests_total{table=default:busy}`]; after < before {
		t.Fatalf("busy's writes on server %d went from %v to %v when a region moved away", src, before, after)
	}
}

// An order for an earlier process of this server's name is refused (WRONG_SERVER_PROCESS), before
// the region is even looked up: "not serving" would tell the master the region is closed while
// its unflushed edits are in the earlier process's WAL.
func TestOrdersForAnotherProcessAreRefused(t *testing.T) {
	c := startCluster(t, 1)
	s := c.servers[0]
	a := &adminService{s: s}
	ctx := context.Background()
	old := s.serverName().GetStartCode() - 1
	_, err := a.CloseRegion(ctx, &pb.CloseRegionRequest{Region: "0000000000000001", ServerStartCode: old})
	wantCode(t, "close for an earlier process", err, pb.ErrorCode_ERROR_CODE_WRONG_SERVER_PROCESS)
	_, err = a.OpenRegion(ctx, &pb.OpenRegionRequest{Region: &pb.RegionInfo{Name: "0000000000000001", Table: &pb.TableName{Namespace: "default", Name: "x"}},
		Table: &pb.TableDescriptor{Name: &pb.TableName{Namespace: "default", Name: "x"}}, ServerStartCode: old})
	wantCode(t, "open for an earlier process", err, pb.ErrorCode_ERROR_CODE_WRONG_SERVER_PROCESS)
	_, err = a.CloseRegion(ctx, &pb.CloseRegionRequest{Region: "0000000000000001", ServerStartCode: s.serverName().GetStartCode()})
	wantCode(t, "close of a region it does not have", err, pb.ErrorCode_ERROR_CODE_NOT_SERVING_REGION)
}

// Tables gone from a server (dropped, or moved away) lose their series once they have had no
// region there for a while: they no longer hold the named slots, so a new busy table gets its
// own series rather than "_other", and their latency series go too.
func TestDepartedTablesAreForgotten(t *testing.T) {
	saved := departedRetention
	departedRetention = 0
	t.Cleanup(func() { departedRetention = saved })
	reg := prometheus.NewRegistry()
	c := startTunedCluster(t, 1, func(cfg *Config) { cfg.Registerer, cfg.TableMetricsMax = reg, 2 })
	ctx := context.Background()
	use := func(name string) {
		t.Helper()
		createTable(t, c, name, nil)
		for i := range 5 {
			if err := c.client.Table(name).Put(ctx, client.NewPut(rowKey(i)).Add("f", "q", cell.LatestTimestamp, []byte("v"))); err != nil {
				t.Fatal(err)
			}
		}
	}
	use("a")
	use("b")
	series(t, reg)
	for _, name := range []string{"a", "b"} {
		if err := c.client.DeleteTable(ctx, name); err != nil {
			t.Fatal(err)
		}
	}
	series(t, reg) // the tables' regions are gone: their last counts are kept a while (here: one scrape)
	series(t, reg)
	use("c")
	s := series(t, reg)
	for k := range s {
		if strings.Contains(k, "table=default:a") || strings.Contains(k, "table=default:b") {
			t.Errorf("a series of a dropped table: %s", k)
		}
	}
	if s[`cellstore_regionserver_table_write_requests_total{table=default:c}`] != 5 {
		var writes []string
		for k, v := range s {
			if strings.HasPrefix(k, "cellstore_regionserver_table_write_requests_total") {
				writes = append(writes, fmt.Sprint(k, " ", v))
			}
		}
		t.Fatalf("the new table's writes are not under its own name: %v", writes)
	}
}
