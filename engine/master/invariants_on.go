//go:build invariants

package master

import (
	"bytes"
	"fmt"

	pb "github.com/cellstore/cellstore/engine/api/cellstore/v1"
)

// Invariants reports whether the binary was built with the invariants tag.
const Invariants = true

// checkModel recounts what the model counts incrementally and checks its indexes, after every
// catalog write.
func checkModel(m *model) {
	rit := 0
	for _, r := range m.regions {
		if m.regionInTransition(r) {
			rit++
		}
	}
	if rit != m.inTransition {
		panic(fmt.Sprintf("master: invariant violated: %d regions in transition counted, %d in fact", m.inTransition, rit))
	}
	primaries := 0
	for _, r := range m.regions {
		split := r.GetState() == pb.RegionState_REGION_STATE_SPLIT
		if split != r.GetInfo().GetSplit() {
			panic(fmt.Sprintf("master: invariant violated: region %s is %s with split=%v", r.GetInfo().GetName(), r.GetState(), r.GetInfo().GetSplit()))
		}
		if r.GetInfo().GetReplicaId() == 0 && !split { // split parents leave the index
			primaries++
		}
		if r.GetState() == pb.RegionState_REGION_STATE_OPEN && r.GetServer() == "" {
			panic(fmt.Sprintf("master: invariant violated: region %s is OPEN on no server", r.GetInfo().GetName()))
		}
	}
	indexed := 0
	for key, idx := range m.index {
		for i, r := range idx {
			if m.regions[r.GetInfo().GetName()] != r {
				panic(fmt.Sprintf("master: invariant violated: index of %s holds a stale region %s", key, r.GetInfo().GetName()))
			}
			if i > 0 && bytes.Compare(idx[i-1].GetInfo().GetStartKey(), r.GetInfo().GetStartKey()) >= 0 {
				panic(fmt.Sprintf("master: invariant violated: index of %s out of order at %d", key, i))
			}
		}
		indexed += len(idx)
	}
	if indexed != primaries {
		panic(fmt.Sprintf("master: invariant violated: %d primaries indexed of %d", indexed, primaries))
	}
	for name, p := range m.procs {
		if p.p.GetRegion() != name {
			panic(fmt.Sprintf("master: invariant violated: procedure of %s filed under %s", p.p.GetRegion(), name))
		}
	}
}
