//go:build linux

package region

import (
	"fmt"
	"testing"
)

// A read replica closed while a batch of edits is being applied (its region split or moved, the
// region server closes it) never writes into memstore memory it has given back: the apply holds
// the region's update lock shared and the close takes it. The invariants build checks every
// access to a released chunk.
func TestReplicaCloseDuringApply(t *testing.T) {
	e := newEnv(t, fam("cf"))
	if err := e.r.EnableReplication(ReplicationOptions{}); err != nil {
		t.Fatal(err)
	}
	for round := range 20 {
		rep := e.openReplica()
		if err := e.r.StartReplicationSession(1); err != nil {
			t.Fatal(err)
		}
		for i := range 2000 {
			putRow(t, e.r, fmt.Sprintf("r%02d-%05d", round, i), "v")
		}
		b, _ := e.r.NextReplicationBatch(1, 1<<20, 256<<20)
		edits := 0
		for _, en := range b.Entries {
			if en.Kind == ReplEdit {
				edits++
			}
		}
		if edits < 1000 {
			t.Fatalf("round %d: a batch of %d edits; the test needs a long apply", round, edits)
		}
		started := make(chan struct{})
		done := make(chan struct{})
		go func() {
			defer close(done)
			close(started)
			_, _ = rep.ApplyReplication(b.Session, 1, b.Entries, b.ReadPoint) // refused once closed: fine
		}()
		<-started
		if err := rep.Close(); err != nil {
			t.Fatal(err)
		}
		<-done
		e.r.AckReplication(b)
	}
}
