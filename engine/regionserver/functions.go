package regionserver

import (
	"context"
	"errors"
	"io/fs"
	"path"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	pb "github.com/cellstore/cellstore/engine/api/cellstore/v1"
	"github.com/cellstore/cellstore/engine/compute/function"
	"github.com/cellstore/cellstore/engine/layout"
	"github.com/cellstore/cellstore/engine/quota"
	"github.com/cellstore/cellstore/engine/region"
	"github.com/cellstore/cellstore/engine/rpc"
)

// The tables' WebAssembly functions (docs/functions.md): loaded when a region opens, run by the
// region as its observer, and their endpoints served here.

// openFunctions loads the functions of the region's table (nil without any).
func (s *Server) openFunctions(or *onlineRegion) (*function.Set, error) {
	fns := or.table.GetFunctions()
	if len(fns) == 0 {
		return nil, nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	return s.functions.Open(ctx, or.tkey, fns, s.readModule)
}

// readModule reads a function's module from the cluster's storage: functions/, or archive/
// for a table cloned from a snapshot copied in from elsewhere.
func (s *Server) readModule(sha []byte) ([]byte, error) {
	st := region.Storage{FS: s.cfg.FS, Bucket: s.cfg.Bucket}
	key := layout.FunctionModuleKey(sha)
	b, err := st.ReadObject(key)
	if errors.Is(err, fs.ErrNotExist) {
		b, err = st.ReadObject(path.Join("archive", key))
	}
	return b, err
}

// stopRow is the scanFor answer of an endpoint that asked to stop.
var stopRow = &pb.ErrorDetail{}

func (s *Server) handleCallFunction(ctx context.Context, c *rpc.Call) {
	answered := false
	defer s.safe(c, &answered)
	req, err := rpc.Request[pb.CallFunctionRequest](c)
	if err != nil {
		fail(c, &answered, invalid("bad CallFunctionRequest: %v", err))
		return
	}
	name := req.GetRegion().GetName()
	or, r, d := s.readableRegion(c, name)
	if d == nil {
		d = s.mayExec(c, or)
	}
	if d != nil {
		fail(c, &answered, d)
		return
	}
	set := or.functions.Load()
	if set == nil {
		fail(c, &answered, invalid("table %s has no functions (alter it to load one: docs/functions.md)", or.tkey))
		return
	}
	deadline := endpointDeadline(ctx, req.GetTimeLimitMs())
	rs, d := s.endpointScan(c, or, r, req.GetScan(), deadline)
	if d != nil {
		fail(c, &answered, d)
		return
	}
	defer rs.Close()
	var resp pb.CallFunctionResponse
	var read int64
	out, err := set.RunEndpoint(ctx, req.GetFunction(), req.GetEndpoint(), req.GetArgument(), func(e *function.Endpoint) error {
		resume, d, err := scanFor(rs, req.GetScan().GetStartRow(), deadline, func(res *region.Result) *pb.ErrorDetail {
			resp.Rows++
			for i := range res.Cells {
				read += int64(len(res.Cells[i].Key) + len(res.Cells[i].Value))
			}
			stop, err := e.Row(res.Row, res.Cells)
			if err != nil {
				return s.errDetail(err, name) // stops the scan; RunEndpoint reports the failure
			}
			if stop {
				return stopRow
			}
			return nil
		})
		switch {
		case err != nil:
			return err
		case d == stopRow:
			resp.Stopped = true
		case d != nil:
			return errors.New(d.GetMessage()) // the endpoint's own failure, reported by Row
		}
		resp.ResumeRow = resume
		return nil
	})
	if err != nil {
		if errors.Is(err, function.ErrNoEndpoint) {
			fail(c, &answered, invalid("%v", err))
			return
		}
		fail(c, &answered, s.errDetail(err, name))
		return
	}
	s.limiters.Charge(quota.Request{User: c.User, Table: or.tkey, Namespace: or.ns}, read)
	resp.Output = out
	reply(c, &answered, &resp)
	s.m.functionCalls.Add(1)
}

// functionCollector reports the functions loaded here.
type functionCollector struct{ s *Server }

var (
	functionCallsDesc = prometheus.NewDesc("cellstore_regionserver_function_calls_total",
		"Calls of a table function's hooks and endpoints on this server.", []string{"table", "function"}, nil)
	functionFailuresDesc = prometheus.NewDesc("cellstore_regionserver_function_failures_total",
		"Calls of a table function that trapped, ran out of time or memory, or answered wrongly.", []string{"table", "function"}, nil)
	functionDisabledDesc = prometheus.NewDesc("cellstore_regionserver_function_disabled",
		"1 when this server stopped running a table function after repeated failures (alter the table to load a fixed module).", []string{"table", "function"}, nil)
	functionMemoryDesc = prometheus.NewDesc("cellstore_regionserver_function_memory_bytes",
		"What is counted against --function-memory: the MEMORY_MB of the instances each loaded table function keeps reserved and of its further running or idle instances.", nil, nil)
	functionMemoryLimitDesc = prometheus.NewDesc("cellstore_regionserver_function_memory_limit_bytes",
		"The bound on cellstore_regionserver_function_memory_bytes (--function-memory; 0: none).", nil, nil)
)

func (c *functionCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- functionCallsDesc
	ch <- functionFailuresDesc
	ch <- functionDisabledDesc
	ch <- functionMemoryDesc
	ch <- functionMemoryLimitDesc
}

func (c *functionCollector) Collect(ch chan<- prometheus.Metric) {
	used, limit := c.s.functions.Memory()
	ch <- prometheus.MustNewConstMetric(functionMemoryDesc, prometheus.GaugeValue, float64(used))
	ch <- prometheus.MustNewConstMetric(functionMemoryLimitDesc, prometheus.GaugeValue, float64(limit))
	for _, st := range functionSeries(c.s.functions.Stats()) {
		ch <- prometheus.MustNewConstMetric(functionCallsDesc, prometheus.CounterValue, float64(st.Calls), st.Table, st.Name)
		ch <- prometheus.MustNewConstMetric(functionFailuresDesc, prometheus.CounterValue, float64(st.Failures), st.Table, st.Name)
		disabled := 0.0
		if st.Disabled {
			disabled = 1
		}
		ch <- prometheus.MustNewConstMetric(functionDisabledDesc, prometheus.GaugeValue, disabled, st.Table, st.Name)
	}
}

// functionSeries merges the loaded versions of each table function into one: while an alter
// changing a function's module or its ARGS or limits reaches the table's regions, regions here
// hold different versions of it under the same table and name, and two series with the same
// labels would fail the whole scrape. Their calls and failures add up; the function counts as
// disabled when any version of it is.
func functionSeries(stats []function.Stats) []function.Stats {
	type key struct{ table, name string }
	at := make(map[key]int, len(stats))
	out := make([]function.Stats, 0, len(stats))
	for _, st := range stats {
		k := key{st.Table, st.Name}
		i, seen := at[k]
		if !seen {
			at[k] = len(out)
			out = append(out, st)
			continue
		}
		m := &out[i]
		m.Calls += st.Calls
		m.Failures += st.Failures
		m.Disabled = m.Disabled || st.Disabled
		m.Instances += st.Instances
		m.Active += st.Active
	}
	return out
}
