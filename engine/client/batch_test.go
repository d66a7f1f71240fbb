package client

import (
	"math/rand/v2"
	"testing"

	pb "github.com/cellstore/cellstore/engine/api/cellstore/v1"
)

// Results match their actions by index whatever order the server answers in: in order, shuffled,
// with unknown indexes (no action) and with actions left unanswered.
func TestActionFinder(t *testing.T) {
	var actions []*pb.Action
	for i := range 50 {
		actions = append(actions, &pb.Action{Index: uint32(3 * i)})
	}
	order := func(shuffle bool) []uint32 {
		var idx []uint32
		for _, a := range actions {
			idx = append(idx, a.Index)
		}
		if shuffle {
			rand.Shuffle(len(idx), func(i, j int) { idx[i], idx[j] = idx[j], idx[i] })
		}
		return idx
	}
	for _, shuffle := range []bool{false, true} {
		f := newActionFinder(actions)
		for n, idx := range order(shuffle) {
			if n%7 == 3 {
				continue // unanswered
			}
			if a := f.find(idx); a == nil || a.Index != idx {
				t.Fatalf("shuffled=%v: find(%d) = %v", shuffle, idx, a)
			}
			if a := f.find(idx + 1); a != nil {
				t.Fatalf("shuffled=%v: find(%d), an index no action has, = %v", shuffle, idx+1, a)
			}
		}
	}
	if f := newActionFinder(nil); f.find(0) != nil {
		t.Fatal("found an action among none")
	}
}
