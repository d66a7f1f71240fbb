package quota

import (
	"container/heap"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
	"time"

	pb "github.com/cellstore/cellstore/engine/api/cellstore/v1"
)

// A cluster on a virtual clock: servers with their limiters, heartbeats that report demand and
// bring back shares (the master's quota.Shares), and clients that retry after the server's
// retry-after, as Cellstore's and HBase's clients do. Nothing here sleeps: time is the events'.

type event struct {
	at  time.Time
	seq int
	run func()
}

type events []*event

func (e events) Len() int { return len(e) }
func (e events) Less(i, j int) bool {
	return e[i].at.Before(e[j].at) || e[i].at.Equal(e[j].at) && e[i].seq < e[j].seq
}
func (e events) Swap(i, j int) { e[i], e[j] = e[j], e[i] }
func (e *events) Push(x any)   { *e = append(*e, x.(*event)) }
func (e *events) Pop() any {
	old := *e
	x := old[len(old)-1]
	*e = old[:len(old)-1]
	return x
}

type sim struct {
	clock   *clock
	queue   events
	seq     int
	servers []*Limiters
}

func (s *sim) at(t time.Time, f func()) {
	s.seq++
	heap.Push(&s.queue, &event{at: t, seq: s.seq, run: f})
}

func (s *sim) runUntil(end time.Time) {
	for s.queue.Len() > 0 {
		e := heap.Pop(&s.queue).(*event)
		if e.at.After(end) {
			return
		}
		s.clock.now = e.at
		e.run()
	}
}

// newSim starts n servers with the quotas (default share: an even split, as region servers use
// for users and namespaces) and their heartbeats every second, staggered.
func newSim(n int, quotas []*pb.Quota) *sim {
	s := &sim{clock: &clock{now: time.Unix(1000, 0)}}
	for range n {
		l := NewLimiters(s.clock.Now)
		_ = l.Update(1, true, quotas, func(string, string) float64 { return 1 / float64(n) })
		s.servers = append(s.servers, l)
	}
	last := make([][]*pb.QuotaDemand, n)
	for i := range n {
		var beat func()
		beat = func() {
			last[i] = s.servers[i].Demand()
			demand := map[string][]*pb.QuotaDemand{}
			for j := range n {
				demand[fmt.Sprint(j)] = last[j]
			}
			s.servers[i].SetShares(Shares(demand)[fmt.Sprint(i)])
			s.at(s.clock.now.Add(time.Second), beat)
		}
		s.at(s.clock.now.Add(time.Duration(i)*time.Second/time.Duration(n)), beat)
	}
	return s
}

// client sends requests to server (one of its servers, round robin), each taking service time,
// retrying a throttled one after the answer's retry-after; charge is a read's size, charged after
// it. It counts what was admitted after from.
func (s *sim) client(servers []int, r Request, charge int64, service time.Duration, from time.Time, admitted *int64, bytes *int64) {
	next := 0
	rng := rand.New(rand.NewPCG(uint64(len(servers)), uint64(servers[0])))
	var try func()
	try = func() {
		i := servers[next%len(servers)]
		if i < 0 { // a random server for each request (a random row's region)
			i = int(rng.IntN(-i))
		}
		l := s.servers[i]
		if th := l.Check(r); th != nil {
			s.at(s.clock.now.Add(th.RetryAfter), try)
			return
		}
		if charge > 0 {
			l.Charge(r, charge)
		}
		if !s.clock.now.Before(from) {
			*admitted++
			*bytes += r.Size + charge
		}
		next++
		s.at(s.clock.now.Add(service), try)
	}
	s.at(s.clock.now, try)
}

// Steadily retrying clients get at least 90% of their quota and never more, however their
// requests fall on the servers: all on one of three, spread over two, over all three; for
// request, write and read number quotas and write and read size quotas.
func TestQuotaSharesFollowDemand(t *testing.T) {
	const warmup, window = 10 * time.Second, 60 * time.Second
	for _, tc := range []struct {
		name    string
		quota   *pb.Quota
		req     Request
		charge  int64
		perUnit float64 // the quota per second, in requests or bytes
		bytes   bool
	}{
		{"write number", userQuota("tenant", "10req/sec", "WRITE"), Request{User: "tenant", Write: true, Size: 100}, 0, 10, false},
		{"request number", userQuota("tenant", "20req/sec", ""), Request{User: "tenant"}, 0, 20, false},
		{"read number", userQuota("tenant", "10req/sec", "READ"), Request{User: "tenant"}, 0, 10, false},
		{"write size", userQuota("tenant", "10K/sec", "WRITE"), Request{User: "tenant", Write: true, Size: 1000}, 0, 10 << 10, true},
		{"read size", userQuota("tenant", "10K/sec", "READ"), Request{User: "tenant"}, 1000, 10 << 10, true},
	} {
		for _, layout := range []struct {
			name    string
			clients [][]int // the servers each of 4 clients sends to (-3: one of three at random)
			least   float64
		}{
			{"one server of three", [][]int{{0}, {0}, {0}, {0}}, 0.9},
			{"two servers of three", [][]int{{0}, {1}, {0}, {1}}, 0.9},
			{"uneven", [][]int{{0}, {0}, {0}, {1, 2}}, 0.9},
			{"random rows", [][]int{{-3}, {-3, 0}, {-3, 1}, {-3, 2}}, 0.9},
			// The worst case: every client moves to the next server after each request, in
			// lockstep, so they queue together at one server while the others' buckets overflow
			// (each holds one second of its share, as HBase's limiters do): about 85%.
			{"all three in lockstep", [][]int{{0, 1, 2}, {1, 2, 0}, {2, 0, 1}, {0, 1, 2}}, 0.8},
		} {
			t.Run(tc.name+"/"+layout.name, func(t *testing.T) {
				s := newSim(3, []*pb.Quota{tc.quota})
				from := s.clock.now.Add(warmup)
				var admitted, bytes int64
				for _, servers := range layout.clients {
					s.client(servers, tc.req, tc.charge, 2*time.Millisecond, from, &admitted, &bytes)
				}
				s.runUntil(from.Add(window))
				got := float64(admitted) / window.Seconds()
				if tc.bytes {
					got = float64(bytes) / window.Seconds()
				}
				ratio := got / tc.perUnit
				t.Logf("%.1f per second of %.0f: %.1f%%", got, tc.perUnit, 100*ratio)
				// What the buckets hold when the window opens (at most one unit each, shares
				// adding up to one) may pass on top, and a request's own size at its edges.
				unit := 1.0
				if tc.bytes {
					unit = float64(tc.req.Size + tc.charge)
				}
				over := 1 + (tc.perUnit+3*unit)/(tc.perUnit*window.Seconds())
				if ratio < layout.least || ratio > over || math.IsNaN(ratio) {
					t.Fatalf("the tenant got %.1f%% of its quota, want %.0f%% to %.1f%%", 100*ratio, 100*layout.least, 100*over)
				}
			})
		}
	}
}

func TestSharesAddUp(t *testing.T) {
	demand := map[string][]*pb.QuotaDemand{
		"a": {{Subject: "user=x", Requests: 30, Bytes: 100}, {Subject: "table=ns:t", Requests: 5}},
		"b": {{Subject: "user=x", Requests: 10, Bytes: 300}},
		"c": nil,
	}
	got := Shares(demand)
	for key, want := range map[string][3]float64{
		"user=x#n": {0.75, 0.25, 0}, "user=x#b": {0.25, 0.75, 0}, "table=ns:t#n": {1, 0, 0},
	} {
		for i, server := range []string{"a", "b", "c"} {
			if g, ok := got[server][key]; !ok || math.Abs(g-want[i]) > 1e-12 {
				t.Fatalf("%s share of %s: %v (%v), want %v", server, key, g, ok, want[i])
			}
		}
	}
	if _, ok := got["a"]["table=ns:t#b"]; ok {
		t.Fatal("a share of a subject's size quotas with no bytes asked anywhere")
	}
}
