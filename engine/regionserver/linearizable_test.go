package regionserver

import (
	"context"
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"

	pb "github.com/cellstore/cellstore/engine/api/cellstore/v1"
	"github.com/cellstore/cellstore/engine/client"
	"github.com/cellstore/cellstore/engine/layout"
	"github.com/cellstore/cellstore/engine/master"
)

// counterOp is one operation on a counter row: an increment by one (returning the new value) or
// a read. unknown: the increment failed, so it may or may not have been applied.
type counterOp struct {
	key     string
	incr    bool
	value   int64
	unknown bool
}

// counterModel is a set of independent counters (partitioned by row) for porcupine: an increment
// returns the value before it plus one, a read returns the current value, and an increment of
// unknown outcome takes effect at some point (its return time is "never", so it may also
// linearize after every read, which is the same as not having happened).
var counterModel = porcupine.Model{
	Partition: func(history []porcupine.Operation) [][]porcupine.Operation {
		byKey := map[string][]porcupine.Operation{}
		var keys []string
		for _, op := range history {
			k := op.Input.(counterOp).key
			if _, ok := byKey[k]; !ok {
				keys = append(keys, k)
			}
			byKey[k] = append(byKey[k], op)
		}
		var out [][]porcupine.Operation
		for _, k := range keys {
			out = append(out, byKey[k])
		}
		return out
	},
	Init: func() any { return int64(0) },
	Step: func(state, input, output any) (bool, any) {
		cur, in, out := state.(int64), input.(counterOp), output.(counterOp)
		if in.incr {
			if out.unknown {
				return true, cur + 1
			}
			return out.value == cur+1, cur + 1
		}
		return out.value == cur, cur
	},
	DescribeOperation: func(input, output any) string {
		in, out := input.(counterOp), output.(counterOp)
		switch {
		case in.incr && out.unknown:
			return fmt.Sprintf("incr(%s) -> ?", in.key)
		case in.incr:
			return fmt.Sprintf("incr(%s) -> %d", in.key, out.value)
		}
		return fmt.Sprintf("get(%s) -> %d", in.key, out.value)
	},
}

// Concurrent clients increment and read three counter rows while the region holding them moves,
// splits (the rows end in both daughters) and its server crashes: the history of what the
// callers saw is linearizable (checked with porcupine), so no acknowledged increment is lost,
// none is applied twice (nonces), and no read sees a value that was not current.
func TestLinearizableUnderFaults(t *testing.T) {
	c := startClusterWith(t, 3, nil, func(mc *master.Config) { mc.JanitorInterval = 200 * time.Millisecond })
	ctx := context.Background()
	td := &pb.TableDescriptor{Name: &pb.TableName{Namespace: "default", Name: "lin"},
		Families: []*pb.ColumnFamilyDescriptor{{Name: []byte("f")}}}
	if _, err := c.client.CreateTable(ctx, td, nil); err != nil {
		t.Fatal(err)
	}
	c.waitOpen("lin", 1, "", 30*time.Second)
	tbl := c.client.Table("lin")
	keys := []string{"a-counter", "m-counter", "z-counter"}

	base := time.Now()
	now := func() int64 { return time.Since(base).Nanoseconds() } // monotonic
	var mu sync.Mutex
	var history []porcupine.Operation
	var done, unknown, failedReads atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for id := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				in := counterOp{key: keys[rand.IntN(len(keys))], incr: rand.IntN(2) == 0}
				octx, cancel := context.WithTimeout(ctx, 20*time.Second)
				call := now()
				var out counterOp
				if in.incr {
					r, err := tbl.Mutate(octx, client.NewIncrement([]byte(in.key)).AddAmount("f", "n", 1))
					switch {
					case err != nil:
						out.unknown = true
						unknown.Add(1)
					case len(r.Cells) != 1 || len(r.Cells[0].Value) != 8:
						t.Errorf("increment of %s returned %v", in.key, r.Cells)
						out.unknown = true
					default:
						out.value = int64(binary.BigEndian.Uint64(r.Cells[0].Value))
					}
				} else {
					r, err := tbl.Get(octx, &pb.Get{Row: []byte(in.key)})
					if err != nil {
						failedReads.Add(1) // a failed read observed nothing
						cancel()
						continue
					}
					if len(r.Cells) == 1 && len(r.Cells[0].Value) == 8 {
						out.value = int64(binary.BigEndian.Uint64(r.Cells[0].Value))
					}
				}
				ret := now()
				cancel()
				if out.unknown {
					ret = math.MaxInt64
				}
				mu.Lock()
				history = append(history, porcupine.Operation{ClientId: id, Input: in, Call: call, Output: out, Return: ret})
				mu.Unlock()
				done.Add(1)
			}
		}()
	}
	stopped := false
	halt := func() {
		if !stopped {
			stopped = true
			close(stop)
			wg.Wait()
		}
	}
	defer halt()
	after := func(n int64) {
		t.Helper()
		target := done.Load() + n
		waitForState(t, fmt.Sprintf("%d more operations", n), 60*time.Second, func() (bool, string) {
			return done.Load() >= target, fmt.Sprint(done.Load(), " operations")
		})
	}
	master1 := func(fn func(context.Context, pb.MasterClient) error) {
		t.Helper()
		if err := c.client.Master(ctx, fn); err != nil {
			t.Fatal(err)
		}
	}

	after(300)
	region := primaries(c.tableRegions("lin"))[0].GetRegion().GetName()
	master1(func(ctx context.Context, m pb.MasterClient) error {
		_, err := m.MoveRegion(ctx, &pb.MoveRegionRequest{Region: region})
		return err
	})
	after(300)
	master1(func(ctx context.Context, m pb.MasterClient) error {
		_, err := m.SplitRegion(ctx, &pb.SplitRegionRequest{Region: region, SplitKey: []byte("m")})
		return err
	})
	c.waitOpen("lin", 2, "", 30*time.Second)
	after(300)
	var victim *Server
	top := primaries(c.tableRegions("lin"))[1]
	for _, s := range c.servers {
		if s.Name() == layout.ServerName(top.GetServer()) {
			victim = s
		}
	}
	victim.Abort() // a crash: no flush, the master recovers its WAL
	c.waitOpen("lin", 2, victim.Name(), 60*time.Second)
	after(300)
	halt()

	mu.Lock()
	ops := history
	mu.Unlock()
	res, info := porcupine.CheckOperationsVerbose(counterModel, ops, 2*time.Minute)
	t.Logf("LINEARIZABILITY: %d operations (%d increments of unknown outcome, %d failed reads) over a move, a split and a crash: %v",
		len(ops), unknown.Load(), failedReads.Load(), res)
	switch res {
	case porcupine.Ok:
	case porcupine.Illegal:
		for p, part := range info.PartialLinearizations() {
			if len(part) > 0 {
				t.Logf("partition %d: longest linearizable prefix of %d operations", p, len(part[0]))
			}
		}
		var lines []string
		for _, op := range ops {
			lines = append(lines, fmt.Sprintf("client %d [%d, %d] %s", op.ClientId, op.Call, op.Return, counterModel.DescribeOperation(op.Input, op.Output)))
		}
		t.Fatalf("history is not linearizable; %d operations:\n%v", len(lines), lines[max(0, len(lines)-200):])
	default:
		t.Fatalf("the linearizability check did not finish: %v", res)
	}
}
