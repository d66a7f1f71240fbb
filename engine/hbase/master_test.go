package hbase

import (
	"context"
	"sync/atomic"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"

	pb "github.com/cellstore/cellstore/engine/api/cellstore/v1"
	hb "github.com/cellstore/cellstore/engine/api/hbase/v2"
)

// statusMaster is a Cellstore master answering ClusterStatus and ListTables (what GetClusterStatus
// asks); any other call panics (the nil MasterClient).
type statusMaster struct {
	pb.MasterClient
	status *pb.ClusterStatusResponse
}

func (m statusMaster) ClusterStatus(context.Context, *pb.ClusterStatusRequest, ...grpc.CallOption) (*pb.ClusterStatusResponse, error) {
	return m.status, nil
}

func (m statusMaster) ListTables(context.Context, *pb.ListTablesRequest, ...grpc.CallOption) (*pb.ListTablesResponse, error) {
	return &pb.ListTablesResponse{}, nil
}

// masterBackend is fakeBackend whose master is a fake MasterClient.
type masterBackend struct {
	fakeBackend
	master pb.MasterClient
}

func (b masterBackend) Master(ctx context.Context, fn func(context.Context, pb.MasterClient) error) error {
	return fn(ctx, b.master)
}

// TestClusterStatusMasters: GetClusterStatus (Admin.getClusterMetrics, the HBase shell's status)
// names as the active master the server HBase clients reach it at — this one, as GetActiveMaster
// says — and Cellstore's standby masters as its backup masters, so the shell counts them.
func TestClusterStatusMasters(t *testing.T) {
	self := fakeBackend{}.Self()
	for _, c := range []struct {
		standbys []string
		want     []*hb.ServerName
	}{
		{nil, nil},
		{[]string{"10.0.0.2:16000"}, []*hb.ServerName{{HostName: proto.String("10.0.0.2"), Port: proto.Uint32(16000)}}},
		{[]string{"cs-master-1.cs-master.ns.svc:16000", "[fd00::3]:16000"}, []*hb.ServerName{
			{HostName: proto.String("cs-master-1.cs-master.ns.svc"), Port: proto.Uint32(16000)},
			{HostName: proto.String("fd00::3"), Port: proto.Uint32(16000)}}},
	} {
		st := &pb.ClusterStatusResponse{ActiveMaster: "10.0.0.1:16000", StandbyMasters: c.standbys, BalancerOn: true,
			Servers: []*pb.ServerStatus{{Server: self, Live: true}, {Server: &pb.ServerName{Host: "127.0.0.2", Port: 2, StartCode: 9}}}}
		addr := startServerOf(t, masterBackend{master: statusMaster{status: st}}, nil)

		mc := dial(t, addr)
		mc.hello("MasterService")
		h, msg, _ := mc.call("GetClusterStatus", &hb.GetClusterStatusRequest{}, nil)
		var resp hb.GetClusterStatusResponse
		if err := proto.Unmarshal(msg, &resp); h.GetException() != nil || err != nil {
			t.Fatalf("GetClusterStatus: %v %v", h.GetException(), err)
		}
		cs := resp.GetClusterStatus()
		if got := cs.GetBackupMasters(); len(got) != len(c.want) {
			t.Fatalf("standbys %q: %d backup masters %v, want %d", c.standbys, len(got), got, len(c.want))
		}
		for i, w := range c.want {
			if got := cs.GetBackupMasters()[i]; !proto.Equal(got, w) {
				t.Fatalf("standbys %q: backup master %d is %v, want %v", c.standbys, i, got, w)
			}
		}

		// The active master is the one the registry names: this server, where HBase's protocol
		// reaches Cellstore's master.
		rc := dial(t, addr)
		rc.hello("ClientMetaService")
		_, msg, _ = rc.call("GetActiveMaster", &hb.GetActiveMasterRequest{}, nil)
		var am hb.GetActiveMasterResponse
		if err := proto.Unmarshal(msg, &am); err != nil {
			t.Fatal(err)
		}
		if !proto.Equal(cs.GetMaster(), am.GetServerName()) || !proto.Equal(cs.GetMaster(), hbServerName(self)) {
			t.Fatalf("active master %v, want %v (GetActiveMaster: %v)", cs.GetMaster(), hbServerName(self), am.GetServerName())
		}
		if len(cs.GetLiveServers()) != 1 || len(cs.GetDeadServers()) != 1 || !cs.GetBalancerOn() {
			t.Fatalf("servers: %d live, %d dead, balancer %v", len(cs.GetLiveServers()), len(cs.GetDeadServers()), cs.GetBalancerOn())
		}

		// Admin.updateConfiguration() (2.4's options, 2.6's) is told of no backup master: it would
		// call each over HBase's RPC, which a standby's address does not speak. Asked for the
		// masters alone (as HBase's own tests do), or for everything, they are listed.
		for _, o := range []struct {
			options []hb.Option
			backups int
		}{
			{[]hb.Option{hb.Option_LIVE_SERVERS, hb.Option_MASTER, hb.Option_BACKUP_MASTERS}, 0},
			{[]hb.Option{hb.Option_SERVERS_NAME, hb.Option_MASTER, hb.Option_BACKUP_MASTERS}, 0},
			{[]hb.Option{hb.Option_MASTER, hb.Option_BACKUP_MASTERS}, len(c.want)},
			{[]hb.Option{hb.Option_LIVE_SERVERS, hb.Option_DEAD_SERVERS, hb.Option_MASTER, hb.Option_BACKUP_MASTERS}, len(c.want)},
		} {
			h, msg, _ := mc.call("GetClusterStatus", &hb.GetClusterStatusRequest{Options: o.options}, nil)
			var resp hb.GetClusterStatusResponse
			if err := proto.Unmarshal(msg, &resp); h.GetException() != nil || err != nil {
				t.Fatalf("GetClusterStatus %v: %v %v", o.options, h.GetException(), err)
			}
			if got := len(resp.GetClusterStatus().GetBackupMasters()); got != o.backups {
				t.Fatalf("standbys %q, options %v: %d backup masters, want %d", c.standbys, o.options, got, o.backups)
			}
		}
	}
}

// ddlMaster is a Cellstore master whose DisableTable answers at once while the table stays in the
// state set (as the master answers after its bounded wait while a large table still disables).
type ddlMaster struct {
	pb.MasterClient
	state *atomic.Int32
}

func (m ddlMaster) DisableTable(context.Context, *pb.TableRequest, ...grpc.CallOption) (*pb.TableResponse, error) {
	return &pb.TableResponse{}, nil
}

func (m ddlMaster) DescribeTable(context.Context, *pb.TableRequest, ...grpc.CallOption) (*pb.DescribeTableResponse, error) {
	return &pb.DescribeTableResponse{State: pb.TableState(m.state.Load())}, nil
}

// A disable's procedure is RUNNING until the table is disabled (HBase's client waits on it, then
// drops the table: reported finished while the table still disabled, the drop was refused).
func TestDisableProcedureRunsUntilTheTableIsDisabled(t *testing.T) {
	var state atomic.Int32
	state.Store(int32(pb.TableState_TABLE_STATE_DISABLING))
	mc := dial(t, startServerOf(t, masterBackend{master: ddlMaster{state: &state}}, nil))
	mc.hello("MasterService")
	h, msg, _ := mc.call("DisableTable", &hb.DisableTableRequest{TableName: &hb.TableName{Namespace: []byte("default"), Qualifier: []byte("t")}}, nil)
	var dr hb.DisableTableResponse
	if err := proto.Unmarshal(msg, &dr); h.GetException() != nil || err != nil || dr.ProcId == nil {
		t.Fatalf("DisableTable: %v %v %v", h.GetException(), err, &dr)
	}
	result := func() hb.GetProcedureResultResponse_State {
		t.Helper()
		h, msg, _ := mc.call("getProcedureResult", &hb.GetProcedureResultRequest{ProcId: dr.ProcId}, nil)
		var resp hb.GetProcedureResultResponse
		if err := proto.Unmarshal(msg, &resp); h.GetException() != nil || err != nil {
			t.Fatalf("GetProcedureResult: %v %v", h.GetException(), err)
		}
		return resp.GetState()
	}
	if s := result(); s != hb.GetProcedureResultResponse_RUNNING {
		t.Fatalf("the disable's procedure with the table disabling: %v, want RUNNING", s)
	}
	state.Store(int32(pb.TableState_TABLE_STATE_DISABLED))
	if s := result(); s != hb.GetProcedureResultResponse_FINISHED {
		t.Fatalf("the disable's procedure with the table disabled: %v, want FINISHED", s)
	}
	state.Store(int32(pb.TableState_TABLE_STATE_ENABLED)) // enabled again later: the disable stays done
	if s := result(); s != hb.GetProcedureResultResponse_FINISHED {
		t.Fatalf("a finished procedure asked again: %v, want FINISHED", s)
	}
}

func (m ddlMaster) EnableTable(context.Context, *pb.TableRequest, ...grpc.CallOption) (*pb.TableResponse, error) {
	return nil, (&pb.ErrorDetail{Code: pb.ErrorCode_ERROR_CODE_FAILED_PRECONDITION, Message: "table default:t is already enabled"}).Status()
}

// Enabling a table that is not disabled answers HBase's TableNotDisabledException, which
// applications catch by its class (a DoNotRetryIOException before).
func TestEnableOfAnEnabledTableIsTableNotDisabled(t *testing.T) {
	var state atomic.Int32
	mc := dial(t, startServerOf(t, masterBackend{master: ddlMaster{state: &state}}, nil))
	mc.hello("MasterService")
	h, _, _ := mc.call("EnableTable", &hb.EnableTableRequest{TableName: &hb.TableName{Namespace: []byte("default"), Qualifier: []byte("t")}}, nil)
	if e := h.GetException(); e.GetExceptionClassName() != classTableNotDisabled || !e.GetDoNotRetry() {
		t.Fatalf("EnableTable of an enabled table: %v, want %s", e, classTableNotDisabled)
	}
}

func (m ddlMaster) SetBalancerRunning(_ context.Context, req *pb.SetBalancerRunningRequest, _ ...grpc.CallOption) (*pb.SetBalancerRunningResponse, error) {
	return &pb.SetBalancerRunningResponse{Previous: !req.GetOn()}, nil
}

func (m ddlMaster) Balance(context.Context, *pb.BalanceRequest, ...grpc.CallOption) (*pb.BalanceResponse, error) {
	return &pb.BalanceResponse{Moves: 3}, nil
}

// The shell's balance_switch and balancer reach the master (they answered UnknownProtocolException).
func TestBalancerCalls(t *testing.T) {
	var state atomic.Int32
	mc := dial(t, startServerOf(t, masterBackend{master: ddlMaster{state: &state}}, nil))
	mc.hello("MasterService")
	h, msg, _ := mc.call("SetBalancerRunning", &hb.SetBalancerRunningRequest{On: proto.Bool(false)}, nil)
	var sr hb.SetBalancerRunningResponse
	if err := proto.Unmarshal(msg, &sr); h.GetException() != nil || err != nil || !sr.GetPrevBalanceValue() {
		t.Fatalf("SetBalancerRunning: %v %v %v", h.GetException(), err, &sr)
	}
	h, msg, _ = mc.call("Balance", &hb.BalanceRequest{}, nil)
	var br hb.BalanceResponse
	if err := proto.Unmarshal(msg, &br); h.GetException() != nil || err != nil || !br.GetBalancerRan() || br.GetMovesExecuted() != 3 {
		t.Fatalf("Balance: %v %v %v", h.GetException(), err, &br)
	}
}
