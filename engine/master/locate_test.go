package master

import (
	"errors"
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

// notActive: what a master that is not serving tells callers. An elected master loading the
// catalog names itself with a short pause (callers wait for it rather than try the others); one
// stepping down never names itself; a standby names the leader it knows, for callers to go there
// at once.
func TestNotActiveAnswers(t *testing.T) {
	const self, other = "m-0:16000", "m-1:16000"
	for _, tc := range []struct {
		status     int32
		leader     string
		lapsed     bool // the election's Check fails: the leadership may be gone
		newMaster  string
		retryAfter int64
	}{
		{stateActivating, self, false, self, activatingRetryMs},
		{stateActivating, self, true, "", activatingRetryMs}, // lost the Lease while loading
		{stateActivating, "", false, "", activatingRetryMs},
		{stateStandby, self, false, "", notActiveRetryMs}, // stepping down, the Lease not released yet
		{stateStandby, "", false, "", notActiveRetryMs},
		{stateStandby, other, false, other, 0},
		{stateStopped, other, false, other, 0},
		{stateStopped, self, false, "", notActiveRetryMs},
	} {
		var el Elector = NoElection{}
		if tc.lapsed {
			el = lapsedElection{}
		}
		m := &Master{cfg: Config{Address: self, Election: el}}
		m.status.Store(tc.status)
		l := tc.leader
		m.leader.Store(&l)
		d, ok := pb.DetailOf(m.notActive())
		if !ok || d.GetCode() != pb.ErrorCode_ERROR_CODE_NOT_ACTIVE_MASTER || !d.GetRetryable() ||
			d.GetNewMaster() != tc.newMaster || d.GetRetryAfterMs() != tc.retryAfter {
			t.Errorf("status %d, leader %q, lapsed %v: %v (new master %q, retry after %d ms), want new master %q, retry after %d ms",
				tc.status, tc.leader, tc.lapsed, d, d.GetNewMaster(), d.GetRetryAfterMs(), tc.newMaster, tc.retryAfter)
		}
	}
}

// lapsedElection is an election whose leadership may be gone (Check fails).
type lapsedElection struct{ NoElection }

func (lapsedElection) Check() error { return errors.New("the last renewal is too old") }

// An active master whose leadership lapsed (its election's Check fails) renews no server's lease:
// the servers would go on acknowledging writes after its successor took them for dead.
func TestLapsedMasterRefusesHeartbeats(t *testing.T) {
	const self = "m-0:16000"
	m := &Master{cfg: Config{Address: self, Election: lapsedElection{}}}
	m.status.Store(stateActive)
	l := self
	m.leader.Store(&l)
	_, err := m.heartbeat(&pb.HeartbeatRequest{Server: &pb.ServerName{Host: "rs-0", Port: 16020, StartCode: 1}})
	if d, ok := pb.DetailOf(err); !ok || d.GetCode() != pb.ErrorCode_ERROR_CODE_NOT_ACTIVE_MASTER {
		t.Fatalf("a heartbeat to a master whose leadership lapsed: %v, want NOT_ACTIVE_MASTER", err)
	}
}
