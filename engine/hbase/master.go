package hbase

import (
	"context"
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"google.golang.org/protobuf/proto"

	pb "github.com/cellstore/cellstore/engine/api/cellstore/v1"
	hb "github.com/cellstore/cellstore/engine/api/hbase/v2"
	"github.com/cellstore/cellstore/engine/pattern"
)

// MasterService: the HBase client calls the server GetActiveMaster named — this one — and each
// call is forwarded to Cellstore's active master. HBase runs DDL as procedures the client polls
// (GetProcedureResult); a forwarded call runs as far as the master's answer first (a failure is
// the call's own error), and its procedure is FINISHED then — or, for a table's create, enable,
// disable, truncate and delete, whose master calls answer after a bounded wait, once the table
// is as the call leaves it (RUNNING until then).

// procedures remembers the procedures handed out, for GetProcedureResult.
type procedures struct {
	mu    sync.Mutex
	next  uint64
	procs map[uint64]*procedure
	order []uint64
}

// procedure is an HBase procedure id handed out for a master call. Most calls are done when the
// master answers; a table's create, enable, disable, truncate and delete are done once the table
// is as they leave it: the master answers them after a bounded wait, and may still be at it (a
// disable of a large table), where HBase's client must keep waiting (RUNNING), not go on to a
// drop that would be refused.
type procedure struct {
	submitted time.Time
	table     *pb.TableName // nil: done at submission
	goal      tableGoal
	done      time.Time // when the goal was seen reached
}

// tableGoal is what a procedure leaves its table as.
type tableGoal int

const (
	goalEnabled tableGoal = iota + 1
	goalDisabled
	goalGone
)

// maxProcedures bounds the procedures remembered (the oldest are forgotten: NOT_FOUND).
const maxProcedures = 10000

func (p *procedures) init() { p.procs = map[uint64]*procedure{} }

func (p *procedures) finished() uint64 { return p.add(&procedure{}) }

// started hands out the id of a procedure done once table reaches goal.
func (p *procedures) started(table *pb.TableName, goal tableGoal) uint64 {
	return p.add(&procedure{table: table, goal: goal})
}

func (p *procedures) add(pr *procedure) uint64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.next++
	pr.submitted = time.Now()
	if pr.table == nil {
		pr.done = pr.submitted
	}
	p.procs[p.next] = pr
	p.order = append(p.order, p.next)
	if len(p.order) > maxProcedures {
		delete(p.procs, p.order[0])
		p.order = p.order[1:]
	}
	return p.next
}

func (p *procedures) lookup(id uint64) (procedure, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	pr, ok := p.procs[id]
	if !ok {
		return procedure{}, false
	}
	return *pr, true
}

func (p *procedures) markDone(id uint64, at time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if pr := p.procs[id]; pr != nil && pr.done.IsZero() {
		pr.done = at
	}
}

// reached says whether a table is as goal wants it (false, with no error, while it is not yet;
// an error when the master cannot say).
func (a *Adapter) reached(ctx context.Context, table *pb.TableName, goal tableGoal) (bool, error) {
	var state pb.TableState
	gone := false
	err := a.b.Master(ctx, func(ctx context.Context, m pb.MasterClient) error {
		resp, err := m.DescribeTable(ctx, &pb.TableRequest{Table: table})
		if d, ok := pb.DetailOf(err); ok && d.GetCode() == pb.ErrorCode_ERROR_CODE_TABLE_NOT_FOUND {
			gone = true
			return nil
		}
		state = resp.GetState()
		return err
	})
	if err != nil {
		return false, err
	}
	switch goal {
	case goalGone:
		return gone, nil
	case goalEnabled:
		return !gone && state == pb.TableState_TABLE_STATE_ENABLED, nil
	case goalDisabled:
		return !gone && state == pb.TableState_TABLE_STATE_DISABLED, nil
	}
	return true, nil
}

func (a *Adapter) master(k *call) {
	nc, ok := hb.Lookup("MasterService", k.method)
	if !ok {
		k.fail(&exception{class: classUnknownProtocol, msg: "MasterService method " + k.method + " is not supported by Cellstore", doNotRetry: true})
		return
	}
	req, _ := nc()
	if err := proto.Unmarshal(k.param, req); err != nil {
		k.fail(doNotRetry("bad %s request: %v", k.method, err))
		return
	}
	ctx, cancel := k.context()
	defer cancel()
	resp, err := a.masterCall(ctx, k.method, req)
	if err != nil {
		k.fail(fromError(err))
		return
	}
	k.reply(resp, nil)
}

func (a *Adapter) masterCall(ctx context.Context, method string, req proto.Message) (proto.Message, error) {
	proc := func() *uint64 { return proto.Uint64(a.procs.finished()) }
	switch r := req.(type) {
	case *hb.IsMasterRunningRequest:
		return &hb.IsMasterRunningResponse{IsMasterRunning: proto.Bool(true)}, nil
	case *hb.IsInMaintenanceModeRequest:
		return &hb.IsInMaintenanceModeResponse{InMaintenanceMode: proto.Bool(false)}, nil
	case *hb.CreateTableRequest:
		td, err := tableDescriptor(r.GetTableSchema())
		if err != nil {
			return nil, err
		}
		if err := a.b.Master(ctx, func(ctx context.Context, m pb.MasterClient) error {
			_, err := m.CreateTable(ctx, &pb.CreateTableRequest{Table: td, SplitKeys: r.GetSplitKeys()})
			return err
		}); err != nil {
			return nil, err
		}
		return &hb.CreateTableResponse{ProcId: proto.Uint64(a.procs.started(td.GetName(), goalEnabled))}, nil
	case *hb.DeleteTableRequest:
		if err := a.tableOp(ctx, r.GetTableName(), func(ctx context.Context, m pb.MasterClient, t *pb.TableName) error {
			_, err := m.DeleteTable(ctx, &pb.TableRequest{Table: t})
			return err
		}); err != nil {
			return nil, notDisabled(err)
		}
		return &hb.DeleteTableResponse{ProcId: proto.Uint64(a.procs.started(pbTableName(r.GetTableName()), goalGone))}, nil
	case *hb.EnableTableRequest:
		if err := a.tableOp(ctx, r.GetTableName(), func(ctx context.Context, m pb.MasterClient, t *pb.TableName) error {
			_, err := m.EnableTable(ctx, &pb.TableRequest{Table: t})
			return err
		}); err != nil {
			return nil, notDisabled(err)
		}
		return &hb.EnableTableResponse{ProcId: proto.Uint64(a.procs.started(pbTableName(r.GetTableName()), goalEnabled))}, nil
	case *hb.DisableTableRequest:
		if err := a.tableOp(ctx, r.GetTableName(), func(ctx context.Context, m pb.MasterClient, t *pb.TableName) error {
			_, err := m.DisableTable(ctx, &pb.TableRequest{Table: t})
			return err
		}); err != nil {
			return nil, err
		}
		return &hb.DisableTableResponse{ProcId: proto.Uint64(a.procs.started(pbTableName(r.GetTableName()), goalDisabled))}, nil
	case *hb.FlushTableRequest:
		if len(r.GetColumnFamily()) > 0 {
			return nil, doNotRetry("flushing some column families is not supported: every family is flushed (leave them out)")
		}
		if err := a.tableOp(ctx, r.GetTableName(), func(ctx context.Context, m pb.MasterClient, t *pb.TableName) error {
			_, err := m.FlushCompact(ctx, &pb.FlushCompactRequest{Table: t})
			return err
		}); err != nil {
			return nil, err
		}
		return &hb.FlushTableResponse{ProcId: proc()}, nil
	case *hb.TruncateTableRequest:
		if err := a.tableOp(ctx, r.GetTableName(), func(ctx context.Context, m pb.MasterClient, t *pb.TableName) error {
			_, err := m.TruncateTable(ctx, &pb.TruncateTableRequest{Table: t, PreserveSplits: r.GetPreserveSplits()})
			return err
		}); err != nil {
			return nil, notDisabled(err)
		}
		return &hb.TruncateTableResponse{ProcId: proto.Uint64(a.procs.started(pbTableName(r.GetTableName()), goalEnabled))}, nil
	case *hb.ModifyTableRequest:
		td, err := tableDescriptor(r.GetTableSchema())
		if err != nil {
			return nil, err
		}
		if err := a.b.Master(ctx, func(ctx context.Context, m pb.MasterClient) error {
			// HBase's descriptors cannot say which table functions (docs/functions.md) a table
			// runs: an HBase client's modify keeps them — those of the version it replaces, so
			// a function set meanwhile is not dropped (described again when one was).
			return untilNotConcurrent(func() error {
				cur, err := m.DescribeTable(ctx, &pb.TableRequest{Table: td.GetName()})
				if err != nil {
					return err
				}
				td.Functions = cur.GetTable().GetFunctions()
				version := cur.GetVersion()
				_, err = m.ModifyTable(ctx, &pb.ModifyTableRequest{Table: td, ExpectVersion: &version})
				return err
			})
		}); err != nil {
			return nil, err
		}
		return &hb.ModifyTableResponse{ProcId: proc()}, nil
	case *hb.AddColumnRequest, *hb.ModifyColumnRequest, *hb.DeleteColumnRequest:
		return a.alterFamily(ctx, req, proc)
	case *hb.MoveRegionRequest:
		name, err := a.regionByName(ctx, r.GetRegion())
		if err != nil {
			return nil, err
		}
		dest := ""
		if d := r.GetDestServerName(); d.GetHostName() != "" {
			dest = net.JoinHostPort(d.GetHostName(), strconv.Itoa(int(d.GetPort())))
		}
		if err := a.b.Master(ctx, func(ctx context.Context, m pb.MasterClient) error {
			_, err := m.MoveRegion(ctx, &pb.MoveRegionRequest{Region: name, Destination: dest})
			return err
		}); err != nil {
			return nil, err
		}
		return &hb.MoveRegionResponse{}, nil
	case *hb.SplitTableRegionRequest:
		ri := r.GetRegionInfo()
		name, err := a.regionByName(ctx, &hb.RegionSpecifier{Type: hb.RegionSpecifier_REGION_NAME.Enum(),
			Value: regionName(pbTableName(ri.GetTableName()), ri.GetStartKey(), ri.GetRegionId(), 0)})
		if err != nil {
			return nil, err
		}
		if err := a.b.Master(ctx, func(ctx context.Context, m pb.MasterClient) error {
			_, err := m.SplitRegion(ctx, &pb.SplitRegionRequest{Region: name, SplitKey: r.GetSplitRow()})
			return err
		}); err != nil {
			return nil, err
		}
		return &hb.SplitTableRegionResponse{ProcId: proc()}, nil
	case *hb.MergeTableRegionsRequest:
		if r.GetForcible() {
			return nil, doNotRetry("forced merges of regions that do not touch are not supported: merge two neighbouring regions")
		}
		var names []string
		for _, spec := range r.GetRegion() {
			name, err := a.regionByName(ctx, spec)
			if err != nil {
				return nil, err
			}
			names = append(names, name)
		}
		if len(names) != 2 {
			return nil, doNotRetry("Cellstore merges two regions at a time, got %d", len(names))
		}
		if err := a.b.Master(ctx, func(ctx context.Context, m pb.MasterClient) error {
			_, err := m.MergeRegions(ctx, &pb.MergeRegionsRequest{Regions: names})
			return err
		}); err != nil {
			return nil, err
		}
		return &hb.MergeTableRegionsResponse{ProcId: proc()}, nil
	case *hb.NormalizeRequest:
		if r.GetRegex() != "" || r.GetNamespace() != "" {
			return nil, doNotRetry("normalize by regex or namespace is not supported: name the tables, or none for every table with NORMALIZATION_ENABLED")
		}
		req := &pb.NormalizeRequest{}
		for _, t := range r.GetTableNames() {
			req.Tables = append(req.Tables, pbTableName(t))
		}
		if err := a.b.Master(ctx, func(ctx context.Context, m pb.MasterClient) error {
			_, err := m.Normalize(ctx, req)
			return err
		}); err != nil {
			return nil, err
		}
		return &hb.NormalizeResponse{NormalizerRan: proto.Bool(true)}, nil
	case *hb.SetNormalizerRunningRequest:
		var prev bool
		if err := a.b.Master(ctx, func(ctx context.Context, m pb.MasterClient) error {
			resp, err := m.SetNormalizerRunning(ctx, &pb.SetBalancerRunningRequest{On: r.GetOn()})
			prev = resp.GetPrevious()
			return err
		}); err != nil {
			return nil, err
		}
		return &hb.SetNormalizerRunningResponse{PrevNormalizerValue: proto.Bool(prev)}, nil
	case *hb.IsNormalizerEnabledRequest:
		st, err := a.masterStatus(ctx)
		if err != nil {
			return nil, err
		}
		return &hb.IsNormalizerEnabledResponse{Enabled: proto.Bool(st.GetNormalizerOn())}, nil
	case *hb.GetClusterStatusRequest:
		return a.clusterStatus(ctx, r.GetOptions())
	case *hb.SetBalancerRunningRequest:
		var prev bool
		if err := a.b.Master(ctx, func(ctx context.Context, m pb.MasterClient) error {
			resp, err := m.SetBalancerRunning(ctx, &pb.SetBalancerRunningRequest{On: r.GetOn()})
			prev = resp.GetPrevious()
			return err
		}); err != nil {
			return nil, err
		}
		return &hb.SetBalancerRunningResponse{PrevBalanceValue: proto.Bool(prev)}, nil
	case *hb.BalanceRequest:
		if r.GetDryRun() {
			return nil, doNotRetry("a dry run of the balancer is not supported: Cellstore's balancer moves what it plans")
		}
		var moves int32
		if err := a.b.Master(ctx, func(ctx context.Context, m pb.MasterClient) error {
			resp, err := m.Balance(ctx, &pb.BalanceRequest{})
			moves = resp.GetMoves()
			return err
		}); err != nil {
			return nil, err
		}
		return &hb.BalanceResponse{BalancerRan: proto.Bool(true), MovesCalculated: proto.Uint32(uint32(moves)), MovesExecuted: proto.Uint32(uint32(moves))}, nil
	case *hb.IsBalancerEnabledRequest:
		st, err := a.masterStatus(ctx)
		if err != nil {
			return nil, err
		}
		return &hb.IsBalancerEnabledResponse{Enabled: proto.Bool(st.GetBalancerOn())}, nil
	case *hb.GetSchemaAlterStatusRequest:
		// ModifyTable returns once every region has the new descriptor: nothing is left.
		var n int
		if err := a.tableOp(ctx, r.GetTableName(), func(ctx context.Context, m pb.MasterClient, t *pb.TableName) error {
			resp, err := m.GetTableRegions(ctx, &pb.TableRequest{Table: t})
			n = len(resp.GetLocations())
			return err
		}); err != nil {
			return nil, err
		}
		return &hb.GetSchemaAlterStatusResponse{YetToUpdateRegions: proto.Uint32(0), TotalRegions: proto.Uint32(uint32(n))}, nil
	case *hb.SnapshotRequest, *hb.IsSnapshotDoneRequest, *hb.GetCompletedSnapshotsRequest, *hb.DeleteSnapshotRequest, *hb.RestoreSnapshotRequest:
		return a.snapshotCall(ctx, req, proc)
	case *hb.GetProcedureResultRequest:
		pr, ok := a.procs.lookup(r.GetProcId())
		if !ok {
			return &hb.GetProcedureResultResponse{State: hb.GetProcedureResultResponse_NOT_FOUND.Enum()}, nil
		}
		submitted := proto.Uint64(uint64(pr.submitted.UnixMilli()))
		if pr.done.IsZero() {
			// Asked again while the table is not there yet (or the master cannot say): RUNNING,
			// and the client polls again.
			if done, err := a.reached(ctx, pr.table, pr.goal); err != nil || !done {
				return &hb.GetProcedureResultResponse{State: hb.GetProcedureResultResponse_RUNNING.Enum(), SubmittedTime: submitted,
					LastUpdate: proto.Uint64(uint64(time.Now().UnixMilli()))}, nil
			}
			pr.done = time.Now()
			a.procs.markDone(r.GetProcId(), pr.done)
		}
		return &hb.GetProcedureResultResponse{State: hb.GetProcedureResultResponse_FINISHED.Enum(), SubmittedTime: submitted,
			LastUpdate: proto.Uint64(uint64(pr.done.UnixMilli()))}, nil
	case *hb.GetTableDescriptorsRequest:
		tables, err := a.listTables(ctx, r.GetRegex(), r.GetNamespace(), r.GetTableNames())
		if err != nil {
			return nil, err
		}
		resp := &hb.GetTableDescriptorsResponse{}
		for _, t := range tables {
			resp.TableSchema = append(resp.TableSchema, tableSchema(t.GetTable()))
		}
		return resp, nil
	case *hb.GetTableNamesRequest:
		tables, err := a.listTables(ctx, r.GetRegex(), r.GetNamespace(), nil)
		if err != nil {
			return nil, err
		}
		resp := &hb.GetTableNamesResponse{}
		for _, t := range tables {
			resp.TableNames = append(resp.TableNames, hbTableName(t.GetTable().GetName()))
		}
		return resp, nil
	case *hb.ListTableDescriptorsByNamespaceRequest:
		tables, err := a.listTables(ctx, "", r.GetNamespaceName(), nil)
		if err != nil {
			return nil, err
		}
		resp := &hb.ListTableDescriptorsByNamespaceResponse{}
		for _, t := range tables {
			resp.TableSchema = append(resp.TableSchema, tableSchema(t.GetTable()))
		}
		return resp, nil
	case *hb.ListTableNamesByNamespaceRequest:
		tables, err := a.listTables(ctx, "", r.GetNamespaceName(), nil)
		if err != nil {
			return nil, err
		}
		resp := &hb.ListTableNamesByNamespaceResponse{}
		for _, t := range tables {
			resp.TableName = append(resp.TableName, hbTableName(t.GetTable().GetName()))
		}
		return resp, nil
	case *hb.GetTableStateRequest:
		var st pb.TableState
		if err := a.tableOp(ctx, r.GetTableName(), func(ctx context.Context, m pb.MasterClient, t *pb.TableName) error {
			resp, err := m.DescribeTable(ctx, &pb.TableRequest{Table: t})
			st = resp.GetState()
			return err
		}); err != nil {
			return nil, err
		}
		return &hb.GetTableStateResponse{TableState: &hb.TableState{State: hbTableState(st).Enum()}}, nil
	case *hb.ListNamespaceDescriptorsRequest:
		nss, err := a.namespaces(ctx)
		if err != nil {
			return nil, err
		}
		resp := &hb.ListNamespaceDescriptorsResponse{}
		for _, ns := range nss {
			resp.NamespaceDescriptor = append(resp.NamespaceDescriptor, &hb.NamespaceDescriptor{Name: []byte(ns)})
		}
		return resp, nil
	case *hb.ListNamespacesRequest:
		nss, err := a.namespaces(ctx)
		if err != nil {
			return nil, err
		}
		return &hb.ListNamespacesResponse{NamespaceName: nss}, nil
	case *hb.GetNamespaceDescriptorRequest:
		nss, err := a.namespaces(ctx)
		if err != nil {
			return nil, err
		}
		if !slices.Contains(nss, r.GetNamespaceName()) {
			return nil, &exception{class: classNamespaceNotFound, msg: r.GetNamespaceName(), doNotRetry: true}
		}
		return &hb.GetNamespaceDescriptorResponse{NamespaceDescriptor: &hb.NamespaceDescriptor{Name: []byte(r.GetNamespaceName())}}, nil
	case *hb.CreateNamespaceRequest:
		// Namespaces exist once a table is created in them; creating one records nothing.
		if err := validNamespace(string(r.GetNamespaceDescriptor().GetName())); err != nil {
			return nil, err
		}
		return &hb.CreateNamespaceResponse{ProcId: proc()}, nil
	}
	return nil, &exception{class: classUnknownProtocol, msg: fmt.Sprintf("MasterService method %s is not supported by Cellstore", method), doNotRetry: true}
}

// regionByName finds the encoded name of a table's primary region from HBase's region name, or
// from the MD5 encoded name HBase's client computes (every table's regions are looked at).
func (a *Adapter) regionByName(ctx context.Context, spec *hb.RegionSpecifier) (string, error) {
	var tables []*pb.TableName
	var want parsedRegion
	encoded := spec.GetType() == hb.RegionSpecifier_ENCODED_REGION_NAME
	if encoded {
		all, err := a.listTables(ctx, "", "", nil)
		if err != nil {
			return "", err
		}
		for _, t := range all {
			tables = append(tables, t.GetTable().GetName())
		}
	} else {
		var err error
		if want, err = parseRegionName(spec.GetValue()); err != nil {
			return "", err
		}
		tables = []*pb.TableName{want.table}
	}
	for _, t := range tables {
		var locs []*pb.RegionLocation
		if err := a.b.Master(ctx, func(ctx context.Context, m pb.MasterClient) error {
			resp, err := m.GetTableRegions(ctx, &pb.TableRequest{Table: t})
			locs = resp.GetLocations()
			return err
		}); err != nil {
			return "", err
		}
		for _, l := range locs {
			ri := l.GetRegion()
			if ri.GetReplicaId() != 0 {
				continue
			}
			if encoded {
				n := regionName(ri.GetTable(), ri.GetStartKey(), ri.GetRegionId(), 0)
				if string(n[len(n)-33:len(n)-1]) == string(spec.GetValue()) {
					return ri.GetName(), nil
				}
			} else if ri.GetRegionId() == want.id {
				return ri.GetName(), nil
			}
		}
	}
	return "", &exception{class: "org.apache.hadoop.hbase.UnknownRegionException", msg: string(spec.GetValue()), doNotRetry: true}
}

// masterStatus is the active master's ClusterStatus.
func (a *Adapter) masterStatus(ctx context.Context) (*pb.ClusterStatusResponse, error) {
	var st *pb.ClusterStatusResponse
	err := a.b.Master(ctx, func(ctx context.Context, m pb.MasterClient) error {
		var err error
		st, err = m.ClusterStatus(ctx, &pb.ClusterStatusRequest{})
		return err
	})
	return st, err
}

// clusterStatus answers GetClusterStatus (Admin.getClusterMetrics, the shell's status): the live
// region servers with their request rate, heap and regions, the dead ones, the balancer, the
// masters. The active master is this server, as GetActiveMaster says: HBase clients reach the
// master here (this server forwards their master calls to Cellstore's active master, whose own
// port does not speak HBase's protocol), and they call the master they are told of over HBase's
// RPC (Admin.updateConfiguration() does). The backup masters are Cellstore's standby masters at
// their own addresses, with no start code (HBase's "unknown", -1): the shell's status counts and
// lists them — except to Admin.updateConfiguration() (the shell's update_all_config), which asks for
// the servers, the master and the backup masters only and then calls each backup master over
// HBase's RPC, which a standby's address does not speak.
func (a *Adapter) clusterStatus(ctx context.Context, options []hb.Option) (*hb.GetClusterStatusResponse, error) {
	st, err := a.masterStatus(ctx)
	if err != nil {
		return nil, err
	}
	self := a.b.Self()
	cs := &hb.ClusterStatus{HbaseVersion: &hb.HBaseVersionFileContent{Version: proto.String("2.6.4-cellstore")},
		ClusterId: &hb.ClusterId{ClusterId: proto.String(a.b.ClusterID())}, BalancerOn: proto.Bool(st.GetBalancerOn()),
		Master: hbServerName(self)}
	if !configurationUpdate(options) {
		for _, m := range st.GetStandbyMasters() {
			cs.BackupMasters = append(cs.BackupMasters, hbMasterName(m))
		}
	}
	for _, s := range st.GetServers() {
		sn := hbServerName(s.GetServer())
		if !s.GetLive() {
			cs.DeadServers = append(cs.DeadServers, sn)
			continue
		}
		l := s.GetLoad()
		load := &hb.ServerLoad{NumberOfRequests: proto.Uint64(uint64(l.GetRequestsPerSecond())), TotalNumberOfRequests: proto.Uint64(uint64(l.GetRequestsPerSecond())),
			UsedHeap_MB: proto.Uint32(uint32(l.GetHeapBytes() >> 20)), MaxHeap_MB: proto.Uint32(uint32(l.GetHeapBytes() >> 20))}
		cs.LiveServers = append(cs.LiveServers, &hb.LiveServerInfo{Server: sn, ServerLoad: load})
		cs.ServersName = append(cs.ServersName, sn)
		if s.GetDraining() {
			cs.DecommissionedServers = append(cs.DecommissionedServers, sn)
		}
	}
	// Regions per table (the shell's alter waits on them): all open once ModifyTable returned.
	tables, err := a.listTables(ctx, "", "", nil)
	if err != nil {
		return nil, err
	}
	for _, t := range tables {
		n := proto.Uint32(uint32(t.GetRegions()))
		zero := proto.Uint32(0)
		cs.TableRegionStatesCount = append(cs.TableRegionStatesCount, &hb.TableRegionStatesCount{TableName: hbTableName(t.GetTable().GetName()),
			RegionStatesCount: &hb.RegionStatesCount{OpenRegions: n, SplitRegions: zero, ClosedRegions: zero, RegionsInTransition: zero, TotalRegions: n}})
	}
	return &hb.GetClusterStatusResponse{ClusterStatus: cs}, nil
}

// configurationUpdate says whether a GetClusterStatus request is Admin.updateConfiguration()'s: the
// server names (LIVE_SERVERS in HBase 2.4's client, SERVERS_NAME in 2.6's), MASTER and
// BACKUP_MASTERS, nothing else.
func configurationUpdate(options []hb.Option) bool {
	var servers, master, backups bool
	for _, o := range options {
		switch o {
		case hb.Option_LIVE_SERVERS, hb.Option_SERVERS_NAME:
			servers = true
		case hb.Option_MASTER:
			master = true
		case hb.Option_BACKUP_MASTERS:
			backups = true
		default:
			return false
		}
	}
	return servers && master && backups
}

// hbMasterName is a Cellstore master's address (host:port, as ClusterStatus lists them) as HBase's
// messages carry a server's name: masters report no start code, so it is left out (HBase's -1).
func hbMasterName(addr string) *hb.ServerName {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return &hb.ServerName{HostName: proto.String(addr)}
	}
	sn := &hb.ServerName{HostName: proto.String(host)}
	if p, err := strconv.ParseUint(port, 10, 16); err == nil {
		sn.Port = proto.Uint32(uint32(p))
	}
	return sn
}

func validNamespace(ns string) error {
	if ns == "" || strings.ContainsAny(ns, ":, ") {
		return doNotRetry("illegal namespace name %q", ns)
	}
	return nil
}

// tableOp runs a master call on one table, checking its name.
func (a *Adapter) tableOp(ctx context.Context, tn *hb.TableName, fn func(context.Context, pb.MasterClient, *pb.TableName) error) error {
	t := pbTableName(tn)
	return a.b.Master(ctx, func(ctx context.Context, m pb.MasterClient) error { return fn(ctx, m, t) })
}

func pbTableName(t *hb.TableName) *pb.TableName {
	ns := string(t.GetNamespace())
	if ns == "" {
		ns = "default"
	}
	return &pb.TableName{Namespace: ns, Name: string(t.GetQualifier())}
}

func hbTableState(s pb.TableState) hb.TableState_State {
	switch s {
	case pb.TableState_TABLE_STATE_DISABLED:
		return hb.TableState_DISABLED
	case pb.TableState_TABLE_STATE_DISABLING:
		return hb.TableState_DISABLING
	case pb.TableState_TABLE_STATE_ENABLING:
		return hb.TableState_ENABLING
	}
	return hb.TableState_ENABLED
}

// listTables lists the tables matching a regular expression over their HBase names (HBase's
// Pattern.matches: the whole name), a namespace, or a list of names.
func (a *Adapter) listTables(ctx context.Context, regex, ns string, names []*hb.TableName) ([]*pb.TableSummary, error) {
	re, err := pattern.Whole(regex)
	if err != nil {
		return nil, doNotRetry("bad table name pattern: %v", err)
	}
	var all []*pb.TableSummary
	if err := a.b.Master(ctx, func(ctx context.Context, m pb.MasterClient) error {
		resp, err := m.ListTables(ctx, &pb.ListTablesRequest{})
		all = resp.GetTables()
		return err
	}); err != nil {
		return nil, err
	}
	var out []*pb.TableSummary
	for _, t := range all {
		n := t.GetTable().GetName()
		switch {
		case re != nil && !re.MatchString(tableString(n)):
			continue
		case ns != "" && n.GetNamespace() != ns:
			continue
		case len(names) > 0 && !slices.ContainsFunc(names, func(x *hb.TableName) bool { return proto.Equal(pbTableName(x), n) }):
			continue
		}
		out = append(out, t)
	}
	return out, nil
}

// namespaces are "default", "hbase" and those tables are in.
func (a *Adapter) namespaces(ctx context.Context) ([]string, error) {
	tables, err := a.listTables(ctx, "", "", nil)
	if err != nil {
		return nil, err
	}
	out := []string{"default", "hbase"}
	for _, t := range tables {
		if ns := t.GetTable().GetName().GetNamespace(); !slices.Contains(out, ns) {
			out = append(out, ns)
		}
	}
	slices.Sort(out)
	return out, nil
}

// alterFamily adds, changes or removes one family: the descriptor is read, changed and written.
func (a *Adapter) alterFamily(ctx context.Context, req proto.Message, proc func() *uint64) (proto.Message, error) {
	var tn *hb.TableName
	switch r := req.(type) {
	case *hb.AddColumnRequest:
		tn = r.GetTableName()
	case *hb.ModifyColumnRequest:
		tn = r.GetTableName()
	case *hb.DeleteColumnRequest:
		tn = r.GetTableName()
	}
	err := a.b.Master(ctx, func(ctx context.Context, m pb.MasterClient) error {
		// The change applies to the descriptor as the master has it when it lands: described
		// again when another alter landed in between (expect_version), a few times.
		return untilNotConcurrent(func() error { return alterFamilyOnce(ctx, m, tn, req) })
	})
	if err != nil {
		return nil, err
	}
	switch req.(type) {
	case *hb.AddColumnRequest:
		return &hb.AddColumnResponse{ProcId: proc()}, nil
	case *hb.ModifyColumnRequest:
		return &hb.ModifyColumnResponse{ProcId: proc()}, nil
	}
	return &hb.DeleteColumnResponse{ProcId: proc()}, nil
}

// untilNotConcurrent runs alter (a describe and a modify at the version described) again while
// the master answers that another alter landed in between, up to 10 times.
func untilNotConcurrent(alter func() error) error {
	for attempt := 1; ; attempt++ {
		err := alter()
		if d, _ := pb.DetailOf(err); d.GetCode() != pb.ErrorCode_ERROR_CODE_CONCURRENT_MODIFICATION || attempt == 10 {
			return err
		}
	}
}

// alterFamilyOnce describes the table and changes it as req says, at the version described.
func alterFamilyOnce(ctx context.Context, m pb.MasterClient, tn *hb.TableName, req proto.Message) error {
	cur, err := m.DescribeTable(ctx, &pb.TableRequest{Table: pbTableName(tn)})
	if err != nil {
		return err
	}
	td := cur.GetTable()
	switch r := req.(type) {
	case *hb.AddColumnRequest, *hb.ModifyColumnRequest:
		var cf *hb.ColumnFamilySchema
		if x, ok := r.(*hb.AddColumnRequest); ok {
			cf = x.GetColumnFamilies()
		} else {
			cf = r.(*hb.ModifyColumnRequest).GetColumnFamilies()
		}
		fd, err := familyDescriptor(cf)
		if err != nil {
			return err
		}
		i := slices.IndexFunc(td.Families, func(f *pb.ColumnFamilyDescriptor) bool { return string(f.GetName()) == string(fd.GetName()) })
		if _, add := r.(*hb.AddColumnRequest); add {
			if i >= 0 {
				return doNotRetry("column family %s already exists in %s", fd.GetName(), tableString(td.GetName()))
			}
			td.Families = append(td.Families, fd)
		} else {
			if i < 0 {
				return &exception{class: classNoSuchFamily, msg: fmt.Sprintf("column family %s does not exist in %s", fd.GetName(), tableString(td.GetName())), doNotRetry: true}
			}
			td.Families[i] = fd
		}
	case *hb.DeleteColumnRequest:
		i := slices.IndexFunc(td.Families, func(f *pb.ColumnFamilyDescriptor) bool { return string(f.GetName()) == string(r.GetColumnName()) })
		if i < 0 {
			return &exception{class: classNoSuchFamily, msg: fmt.Sprintf("column family %s does not exist in %s", r.GetColumnName(), tableString(td.GetName())), doNotRetry: true}
		}
		td.Families = slices.Delete(td.Families, i, i+1)
	}
	version := cur.GetVersion()
	_, err = m.ModifyTable(ctx, &pb.ModifyTableRequest{Table: td, ExpectVersion: &version})
	return err
}

// ---- descriptors ----

// tableDescriptor converts HBase's TableSchema.
func tableDescriptor(s *hb.TableSchema) (*pb.TableDescriptor, error) {
	td := &pb.TableDescriptor{Name: pbTableName(s.GetTableName())}
	for _, p := range s.GetAttributes() {
		k, v := string(p.GetFirst()), string(p.GetSecond())
		var err error
		switch k {
		case "REGION_REPLICATION":
			var n int64
			n, err = strconv.ParseInt(v, 10, 32)
			td.RegionReplication = int32(n)
		case "MAX_FILESIZE":
			td.MaxFileSize, err = strconv.ParseInt(v, 10, 64)
		case "MEMSTORE_FLUSHSIZE":
			td.MemstoreFlushSize, err = strconv.ParseInt(v, 10, 64)
		case "READONLY":
			td.ReadOnly = strings.EqualFold(v, "true")
		case "DURABILITY":
			d, ok := pb.Durability_value["DURABILITY_"+strings.ToUpper(v)]
			if !ok {
				return nil, doNotRetry("table attribute DURABILITY %q: use USE_DEFAULT, SKIP_WAL, ASYNC_WAL, SYNC_WAL or FSYNC_WAL", v)
			}
			td.Durability = pb.Durability(d)
		case "NORMALIZATION_ENABLED":
			// HBase writes false by default: kept only when the table asks for the normalizer.
			if strings.EqualFold(v, "true") {
				if td.Attributes == nil {
					td.Attributes = map[string]string{}
				}
				td.Attributes[k] = "true"
			}
		case "COMPACTION_ENABLED", "SPLIT_ENABLED", "MERGE_ENABLED":
			// Cellstore splits, merges and compacts every table: turning one off is refused, not
			// accepted and ignored.
			if !strings.EqualFold(v, "true") {
				return nil, doNotRetry("%s => %s is not supported: Cellstore cannot turn splits, merges or compactions off for a table (leave it out)", k, v)
			}
		case "IS_META", "PRIORITY", "REGION_MEMSTORE_REPLICATION":
			// HBase writes these with their defaults; nothing to keep.
		default:
			if td.Attributes == nil {
				td.Attributes = map[string]string{}
			}
			td.Attributes[k] = v
		}
		if err != nil {
			return nil, doNotRetry("table attribute %s %q: %v", k, v, err)
		}
	}
	for _, cf := range s.GetColumnFamilies() {
		fd, err := familyDescriptor(cf)
		if err != nil {
			return nil, err
		}
		td.Families = append(td.Families, fd)
	}
	return td, nil
}

// familyDescriptor converts HBase's ColumnFamilySchema (attributes as the Java client writes
// them: names and string values).
func familyDescriptor(cf *hb.ColumnFamilySchema) (*pb.ColumnFamilyDescriptor, error) {
	fd := &pb.ColumnFamilyDescriptor{Name: cf.GetName()}
	for _, p := range cf.GetAttributes() {
		k, v := string(p.GetFirst()), string(p.GetSecond())
		var err error
		num := func(bits int) int64 {
			var n int64
			n, err = strconv.ParseInt(v, 10, bits)
			return n
		}
		switch k {
		case "VERSIONS":
			fd.MaxVersions = int32(num(32))
		case "MIN_VERSIONS":
			fd.MinVersions = int32(num(32))
		case "TTL":
			if t := num(64); t < 2147483647 {
				fd.TtlSeconds = t // HBase's FOREVER is Integer.MAX_VALUE
			}
		case "BLOCKSIZE":
			fd.BlockSize = int32(num(32))
		case "KEEP_DELETED_CELLS":
			switch strings.ToUpper(v) {
			case "TRUE":
				fd.KeepDeletedCells = pb.KeepDeletedCells_KEEP_DELETED_CELLS_TRUE
			case "TTL":
				fd.KeepDeletedCells = pb.KeepDeletedCells_KEEP_DELETED_CELLS_TTL
			}
		case "BLOOMFILTER":
			switch strings.ToUpper(v) {
			case "NONE":
				fd.BloomFilter = pb.BloomType_BLOOM_TYPE_NONE
			case "ROWCOL":
				fd.BloomFilter = pb.BloomType_BLOOM_TYPE_ROWCOL
			case "ROW":
			default:
				return nil, doNotRetry("BLOOMFILTER %q of family %s is not supported: use NONE, ROW or ROWCOL", v, cf.GetName())
			}
		case "REPLICATION_SCOPE":
			if v != "0" {
				return nil, doNotRetry("REPLICATION_SCOPE %s of family %s is not supported: Cellstore has no cluster replication (leave it 0)", v, cf.GetName())
			}
		case "NEW_VERSION_BEHAVIOR", "IS_MOB":
			if !strings.EqualFold(v, "false") {
				return nil, doNotRetry("%s => %s of family %s is not supported (leave it out)", k, v, cf.GetName())
			}
		case "COMPRESSION":
			c, ok := pb.Compression_value["COMPRESSION_"+strings.ToUpper(v)]
			if !ok {
				return nil, doNotRetry("COMPRESSION %q of family %s is not supported: use NONE, SNAPPY, LZ4, ZSTD or GZ", v, cf.GetName())
			}
			fd.Compression = pb.Compression(c)
		case "DATA_BLOCK_ENCODING":
			e, ok := pb.DataBlockEncoding_value["DATA_BLOCK_ENCODING_"+strings.ToUpper(v)]
			switch {
			case strings.EqualFold(v, "FAST_DIFF"):
				// HBase's faster variant of DIFF; Cellstore's DIFF is its own layout, already cheap
				// to decode: FAST_DIFF families are stored DIFF (and described so).
				e = int32(pb.DataBlockEncoding_DATA_BLOCK_ENCODING_DIFF)
			case !ok:
				return nil, doNotRetry("DATA_BLOCK_ENCODING %q of family %s is not supported: use NONE, PREFIX, DIFF, FAST_DIFF or ROW_INDEX_V1", v, cf.GetName())
			}
			fd.DataBlockEncoding = pb.DataBlockEncoding(e)
		case "IN_MEMORY":
			fd.InMemory = strings.EqualFold(v, "true")
		case "IN_MEMORY_COMPACTION":
			e, ok := pb.InMemoryCompaction_value["IN_MEMORY_COMPACTION_"+strings.ToUpper(v)]
			if !ok {
				return nil, doNotRetry("IN_MEMORY_COMPACTION %q of family %s: use NONE, BASIC or EAGER (ADAPTIVE is not supported)", v, cf.GetName())
			}
			fd.InMemoryCompaction = pb.InMemoryCompaction(e)
		case "BLOCKCACHE":
			fd.BlockCacheDisabled = strings.EqualFold(v, "false")
		}
		if err != nil {
			return nil, doNotRetry("family %s attribute %s %q: %v", cf.GetName(), k, v, err)
		}
	}
	for _, c := range cf.GetConfiguration() {
		if fd.Configuration == nil {
			fd.Configuration = map[string]string{}
		}
		fd.Configuration[c.GetName()] = c.GetValue()
	}
	return fd, nil
}

func pair(k, v string) *hb.BytesBytesPair {
	return &hb.BytesBytesPair{First: []byte(k), Second: []byte(v)}
}

// tableSchema converts a descriptor back to what the Java client reads.
func tableSchema(td *pb.TableDescriptor) *hb.TableSchema {
	s := &hb.TableSchema{TableName: hbTableName(td.GetName())}
	repl := td.GetRegionReplication()
	if repl <= 0 {
		repl = 1
	}
	s.Attributes = append(s.Attributes, pair("REGION_REPLICATION", strconv.Itoa(int(repl))))
	if td.GetMaxFileSize() > 0 {
		s.Attributes = append(s.Attributes, pair("MAX_FILESIZE", strconv.FormatInt(td.GetMaxFileSize(), 10)))
	}
	if td.GetMemstoreFlushSize() > 0 {
		s.Attributes = append(s.Attributes, pair("MEMSTORE_FLUSHSIZE", strconv.FormatInt(td.GetMemstoreFlushSize(), 10)))
	}
	if td.GetReadOnly() {
		s.Attributes = append(s.Attributes, pair("READONLY", "true"))
	}
	if d := td.GetDurability(); d != pb.Durability_DURABILITY_USE_DEFAULT {
		s.Attributes = append(s.Attributes, pair("DURABILITY", strings.TrimPrefix(d.String(), "DURABILITY_")))
	}
	keys := make([]string, 0, len(td.GetAttributes()))
	for k := range td.GetAttributes() {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		s.Attributes = append(s.Attributes, pair(k, td.GetAttributes()[k]))
	}
	for _, fd := range td.GetFamilies() {
		s.ColumnFamilies = append(s.ColumnFamilies, familySchema(fd))
	}
	return s
}

func familySchema(fd *pb.ColumnFamilyDescriptor) *hb.ColumnFamilySchema {
	versions := fd.GetMaxVersions()
	if versions <= 0 {
		versions = 1
	}
	ttl := "2147483647"
	if fd.GetTtlSeconds() > 0 {
		ttl = strconv.FormatInt(fd.GetTtlSeconds(), 10)
	}
	bs := fd.GetBlockSize()
	if bs <= 0 {
		bs = 64 << 10
	}
	kdc := map[pb.KeepDeletedCells]string{pb.KeepDeletedCells_KEEP_DELETED_CELLS_FALSE: "FALSE", pb.KeepDeletedCells_KEEP_DELETED_CELLS_TRUE: "TRUE",
		pb.KeepDeletedCells_KEEP_DELETED_CELLS_TTL: "TTL"}[fd.GetKeepDeletedCells()]
	bloom := map[pb.BloomType]string{pb.BloomType_BLOOM_TYPE_ROW: "ROW", pb.BloomType_BLOOM_TYPE_NONE: "NONE", pb.BloomType_BLOOM_TYPE_ROWCOL: "ROWCOL"}[fd.GetBloomFilter()]
	cs := &hb.ColumnFamilySchema{Name: fd.GetName(), Attributes: []*hb.BytesBytesPair{
		pair("BLOCKCACHE", strconv.FormatBool(!fd.GetBlockCacheDisabled())),
		pair("BLOCKSIZE", strconv.Itoa(int(bs))),
		pair("BLOOMFILTER", bloom),
		pair("COMPRESSION", strings.TrimPrefix(fd.GetCompression().String(), "COMPRESSION_")),
		pair("DATA_BLOCK_ENCODING", strings.TrimPrefix(fd.GetDataBlockEncoding().String(), "DATA_BLOCK_ENCODING_")),
		pair("IN_MEMORY", strconv.FormatBool(fd.GetInMemory())),
		pair("KEEP_DELETED_CELLS", kdc),
		pair("MIN_VERSIONS", strconv.Itoa(int(fd.GetMinVersions()))),
		pair("TTL", ttl),
		pair("VERSIONS", strconv.Itoa(int(versions))),
	}}
	if p := fd.GetInMemoryCompaction(); p != pb.InMemoryCompaction_IN_MEMORY_COMPACTION_NONE { // HBase leaves the default out
		cs.Attributes = append(cs.Attributes, pair("IN_MEMORY_COMPACTION", strings.TrimPrefix(p.String(), "IN_MEMORY_COMPACTION_")))
	}
	keys := make([]string, 0, len(fd.GetConfiguration()))
	for k := range fd.GetConfiguration() {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		cs.Configuration = append(cs.Configuration, &hb.NameStringPair{Name: proto.String(k), Value: proto.String(fd.GetConfiguration()[k])})
	}
	return cs
}
