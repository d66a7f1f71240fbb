package master

import (
	"testing"

	pb "github.com/cellstore/cellstore/engine/api/cellstore/v1"
)

// moving: which locations make a LocateRegion with wait_ms wait.
func TestMovingLocations(t *testing.T) {
	at := &pb.ServerName{Host: "rs-1", Port: 16020}
	for _, tc := range []struct {
		state  pb.RegionState
		server *pb.ServerName
		notOn  string
		want   bool
	}{
		{stateOpen, at, "", false},
		{stateOpen, at, "rs-1:16020", true}, // a stopping server closed it on its own: its report is on its way
		{stateClosing, at, "", false},       // still served where it is
		{stateClosing, at, "rs-2:16020", false},
		{stateClosing, at, "rs-1:16020", true}, // that server said it closed it: the report is on its way
		{stateOffline, nil, "", true},
		{stateOpening, nil, "", true},
		{stateSplitting, nil, "", true},
		{stateSplit, nil, "", true},
		{stateClosed, nil, "", false},
		{stateFailedOpen, nil, "", false},
	} {
		if got := moving(&pb.RegionLocation{State: tc.state, Server: tc.server}, tc.notOn); got != tc.want {
			t.Errorf("moving(%v at %v, not on %q) = %v, want %v", tc.state, tc.server, tc.notOn, got, tc.want)
		}
	}
}
