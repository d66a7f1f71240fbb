package master

import (
	"testing"

	pb "github.com/cellstore/cellstore/engine/api/cellstore/v1"
)

// moving: which locations make a LocateRegion with wait_ms wait.
func TestMovingLocations(t *testing.T) {
	at := &pb.ServerName{Host: "rs-1", Port: 16020}
	refused := &pb.RefusedLocation{Region: "r1", Server: "rs-1:16020", Seq: 4}
	for _, tc := range []struct {
		name    string
		state   pb.RegionState
		server  *pb.ServerName
		seq     uint64
		refused *pb.RefusedLocation
		want    bool
	}{
		{"r1", stateOpen, at, 4, nil, false},
		{"r1", stateOpen, at, 4, refused, true},    // a stopping server closed it on its own: its report is on its way
		{"r1", stateClosing, at, 4, refused, true}, // that server closed it: the report is on its way
		{"r1", stateClosing, at, 4, nil, false},    // still served where it is
		{"r1", stateOpen, at, 6, refused, false},   // opened there again since
		{"r2", stateOpen, at, 4, refused, false},   // another region there (a daughter): go there
		{"r1", stateOpen, &pb.ServerName{Host: "rs-2", Port: 16020}, 4, refused, false},
		{"r1", stateOffline, nil, 0, nil, true},
		{"r1", stateOpening, nil, 0, nil, true},
		{"r1", stateSplitting, nil, 0, nil, true},
		{"r1", stateSplit, nil, 0, nil, true},
		{"r1", stateClosed, nil, 0, nil, false},
		{"r1", stateFailedOpen, nil, 0, refused, false},
	} {
		l := &pb.RegionLocation{Region: &pb.RegionInfo{Name: tc.name}, State: tc.state, Server: tc.server, Seq: tc.seq}
		if got := moving(l, tc.refused); got != tc.want {
			t.Errorf("moving(%s %v at %v seq %d, refused %v) = %v, want %v", tc.name, tc.state, tc.server, tc.seq, tc.refused, got, tc.want)
		}
	}
}
