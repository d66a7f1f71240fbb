package client

import (
	"testing"

	pb "github.com/cellstore/cellstore/engine/api/cellstore/v1"
)

// A location the master just returned is used even when a concurrent request invalidated it in the
// cache meanwhile (seen as "the master returned no region" failing TIMELINE reads during a crash).
func TestPickLocationFromTheAnswer(t *testing.T) {
	c := newLocationCache()
	added := c.add("t", []*pb.RegionLocation{
		{Region: &pb.RegionInfo{Name: "b", StartKey: []byte("m")}, Server: &pb.ServerName{Host: "h2", Port: 2}},
		{Region: &pb.RegionInfo{Name: "a", EndKey: []byte("m")}, Server: &pb.ServerName{Host: "h1", Port: 1}},
	})
	c.invalidate("t", "b") // another request's NOT_SERVING answer, between add and lookup
	if c.lookup("t", []byte("x")) != nil {
		t.Fatal("the cache still holds the invalidated region")
	}
	if l := pickLocation("t", added, []byte("x"), false); l == nil || l.region != "b" {
		t.Fatalf("row x: %+v", l)
	}
	if l := pickLocation("t", added, []byte("m"), true); l == nil || l.region != "a" {
		t.Fatalf("rows before m: %+v", l)
	}
	if l := pickLocation("t", added, []byte("a"), false); l == nil || l.region != "a" {
		t.Fatalf("row a: %+v", l)
	}
}
