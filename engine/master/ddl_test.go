package master_test

import (
	"bytes"
	"fmt"
	"path"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"google.golang.org/protobuf/proto"

	pb "github.com/cellstore/cellstore/engine/api/cellstore/v1"
	"github.com/cellstore/cellstore/engine/layout"
	"github.com/cellstore/cellstore/engine/master"
	"github.com/cellstore/cellstore/engine/storage"
)

func TestBadInputGetsTypedErrors(t *testing.T) {
	c := newCluster(t, 1, nil, nil)
	c.createTable("t1", 2, 0)
	fam := []*pb.ColumnFamilyDescriptor{{Name: []byte("f")}}
	for _, tc := range []struct {
		what string
		call func() error
		code pb.ErrorCode
		msg  string
	}{
		{"describe an unknown table", func() error {
			_, err := c.mc.DescribeTable(c.ctx(), &pb.TableRequest{Table: tableName("nope")})
			return err
		}, pb.ErrorCode_ERROR_CODE_TABLE_NOT_FOUND, "table default:nope does not exist"},
		{"locate in an unknown table", func() error {
			_, err := c.mc.LocateRegion(c.ctx(), &pb.LocateRegionRequest{Table: tableName("ns1:nope"), Row: []byte("a")})
			return err
		}, pb.ErrorCode_ERROR_CODE_TABLE_NOT_FOUND, "ns1:nope"},
		{"create twice", func() error {
			_, err := c.mc.CreateTable(c.ctx(), &pb.CreateTableRequest{Table: descriptor("t1", 1)})
			return err
		}, pb.ErrorCode_ERROR_CODE_TABLE_EXISTS, "table default:t1 already exists"},
		{"no families", func() error {
			_, err := c.mc.CreateTable(c.ctx(), &pb.CreateTableRequest{Table: &pb.TableDescriptor{Name: tableName("t2")}})
			return err
		}, pb.ErrorCode_ERROR_CODE_INVALID_ARGUMENT, "no column families"},
		{"no descriptor", func() error {
			_, err := c.mc.CreateTable(c.ctx(), &pb.CreateTableRequest{})
			return err
		}, pb.ErrorCode_ERROR_CODE_INVALID_ARGUMENT, "no table descriptor"},
		{"bad table name", func() error {
			_, err := c.mc.CreateTable(c.ctx(), &pb.CreateTableRequest{Table: &pb.TableDescriptor{Name: tableName("a/b"), Families: fam}})
			return err
		}, pb.ErrorCode_ERROR_CODE_INVALID_ARGUMENT, `character '/' is not allowed`},
		{"table name starting with a dot", func() error {
			_, err := c.mc.CreateTable(c.ctx(), &pb.CreateTableRequest{Table: &pb.TableDescriptor{Name: tableName(".x"), Families: fam}})
			return err
		}, pb.ErrorCode_ERROR_CODE_INVALID_ARGUMENT, "must not start with '.'"},
		{"a table in the system namespace", func() error {
			_, err := c.mc.CreateTable(c.ctx(), &pb.CreateTableRequest{Table: &pb.TableDescriptor{Name: tableName("hbase:meta"), Families: fam}})
			return err
		}, pb.ErrorCode_ERROR_CODE_INVALID_ARGUMENT, `namespace "hbase" is reserved for system tables`},
		{"a family over the region's 127-byte limit", func() error {
			_, err := c.mc.CreateTable(c.ctx(), &pb.CreateTableRequest{Table: &pb.TableDescriptor{Name: tableName("t3"),
				Families: []*pb.ColumnFamilyDescriptor{{Name: bytes.Repeat([]byte("f"), 128)}}}})
			return err
		}, pb.ErrorCode_ERROR_CODE_INVALID_ARGUMENT, "longer than 127 bytes"},
		{"bad namespace", func() error {
			_, err := c.mc.CreateTable(c.ctx(), &pb.CreateTableRequest{Table: &pb.TableDescriptor{Name: tableName("n-s:x"), Families: fam}})
			return err
		}, pb.ErrorCode_ERROR_CODE_INVALID_ARGUMENT, "namespace"},
		{"bad family name", func() error {
			_, err := c.mc.CreateTable(c.ctx(), &pb.CreateTableRequest{Table: &pb.TableDescriptor{Name: tableName("t2"),
				Families: []*pb.ColumnFamilyDescriptor{{Name: []byte("a:b")}}}})
			return err
		}, pb.ErrorCode_ERROR_CODE_INVALID_ARGUMENT, "column family name"},
		{"duplicate family", func() error {
			_, err := c.mc.CreateTable(c.ctx(), &pb.CreateTableRequest{Table: &pb.TableDescriptor{Name: tableName("t2"),
				Families: []*pb.ColumnFamilyDescriptor{{Name: []byte("f")}, {Name: []byte("f")}}}})
			return err
		}, pb.ErrorCode_ERROR_CODE_INVALID_ARGUMENT, "listed twice"},
		{"duplicate split keys", func() error {
			_, err := c.mc.CreateTable(c.ctx(), &pb.CreateTableRequest{Table: descriptor("t2", 1), SplitKeys: [][]byte{[]byte("b"), []byte("a"), []byte("b")}})
			return err
		}, pb.ErrorCode_ERROR_CODE_INVALID_ARGUMENT, `split key "b" is given twice`},
		{"empty split key", func() error {
			_, err := c.mc.CreateTable(c.ctx(), &pb.CreateTableRequest{Table: descriptor("t2", 1), SplitKeys: [][]byte{{}}})
			return err
		}, pb.ErrorCode_ERROR_CODE_INVALID_ARGUMENT, "split key 0 is empty"},
		{"split keys and a region count", func() error {
			_, err := c.mc.CreateTable(c.ctx(), &pb.CreateTableRequest{Table: descriptor("t2", 1), SplitKeys: [][]byte{[]byte("a")}, NumRegions: 3})
			return err
		}, pb.ErrorCode_ERROR_CODE_INVALID_ARGUMENT, "not both"},
		{"too many replicas", func() error {
			_, err := c.mc.CreateTable(c.ctx(), &pb.CreateTableRequest{Table: descriptor("t2", 100)})
			return err
		}, pb.ErrorCode_ERROR_CODE_INVALID_ARGUMENT, "REGION_REPLICATION 100"},
		{"delete an enabled table", func() error {
			_, err := c.mc.DeleteTable(c.ctx(), &pb.TableRequest{Table: tableName("t1")})
			return err
		}, pb.ErrorCode_ERROR_CODE_FAILED_PRECONDITION, "disable it before deleting it"},
		{"truncate an enabled table", func() error {
			_, err := c.mc.TruncateTable(c.ctx(), &pb.TruncateTableRequest{Table: tableName("t1")})
			return err
		}, pb.ErrorCode_ERROR_CODE_FAILED_PRECONDITION, "disable it before truncating it"},
		{"enable an enabled table", func() error {
			_, err := c.mc.EnableTable(c.ctx(), &pb.TableRequest{Table: tableName("t1")})
			return err
		}, pb.ErrorCode_ERROR_CODE_FAILED_PRECONDITION, "already enabled"},
		{"bad pattern", func() error {
			_, err := c.mc.ListTables(c.ctx(), &pb.ListTablesRequest{Pattern: "("})
			return err
		}, pb.ErrorCode_ERROR_CODE_INVALID_ARGUMENT, "not a regular expression"},
		{"a pattern of a huge program", func() error { // (Go's regexp: 173 MiB to compile, 0.6 s per name matched under the lock)
			_, err := c.mc.ListTables(c.ctx(), &pb.ListTablesRequest{Pattern: strings.Repeat("(?:.?){999}|", 300) + "x"})
			return err
		}, pb.ErrorCode_ERROR_CODE_INVALID_ARGUMENT, "too large"},
		{"too many labels", func() error {
			_, err := c.mc.SetAuths(c.ctx(), &pb.SetAuthsRequest{User: "u", Labels: make([]string, 300_000)})
			return err
		}, pb.ErrorCode_ERROR_CODE_INVALID_ARGUMENT, "split the call"},
		{"split an unknown region", func() error {
			_, err := c.mc.SplitRegion(c.ctx(), &pb.SplitRegionRequest{Region: "x"})
			return err
		}, pb.ErrorCode_ERROR_CODE_INVALID_ARGUMENT, "unknown region"},
		{"register without a start code", func() error {
			_, err := c.mc.RegisterServer(c.ctx(), &pb.RegisterServerRequest{Server: &pb.ServerName{Host: "h", Port: 1}, AdminAddress: "h:2"})
			return err
		}, pb.ErrorCode_ERROR_CODE_INVALID_ARGUMENT, "start code"},
		{"register without an admin address", func() error {
			_, err := c.mc.RegisterServer(c.ctx(), &pb.RegisterServerRequest{Server: &pb.ServerName{Host: "h", Port: 1, StartCode: 5}})
			return err
		}, pb.ErrorCode_ERROR_CODE_INVALID_ARGUMENT, "admin address"},
		{"report from an unknown server", func() error {
			_, err := c.mc.ReportRegionTransition(c.ctx(), &pb.ReportRegionTransitionRequest{Server: &pb.ServerName{Host: "h", Port: 1, StartCode: 5},
				Region: &pb.RegionInfo{Name: "r"}})
			return err
		}, pb.ErrorCode_ERROR_CODE_LEASE_EXPIRED, "not a live region server"},
		{"unknown cluster setting", func() error {
			_, err := c.mc.SetClusterConfig(c.ctx(), &pb.SetClusterConfigRequest{Config: map[string]string{"colour": "blue"}})
			return err
		}, pb.ErrorCode_ERROR_CODE_INVALID_ARGUMENT, `unknown cluster setting "colour"`},
		{"bad replication setting", func() error {
			_, err := c.mc.SetClusterConfig(c.ctx(), &pb.SetClusterConfigRequest{Config: map[string]string{layout.ConfigDefaultRegionReplication: "0"}})
			return err
		}, pb.ErrorCode_ERROR_CODE_INVALID_ARGUMENT, "default_region_replication must be"},
		{"quota without a subject", func() error {
			_, err := c.mc.SetQuota(c.ctx(), &pb.SetQuotaRequest{Quota: &pb.Quota{Limit: 1, TimeUnitSeconds: 1}})
			return err
		}, pb.ErrorCode_ERROR_CODE_INVALID_ARGUMENT, "give a user, a table or a namespace"},
		{"quota with a bad unit", func() error {
			_, err := c.mc.SetQuota(c.ctx(), &pb.SetQuotaRequest{Quota: &pb.Quota{Subject: &pb.Quota_User{User: "u"}, Limit: 1, TimeUnitSeconds: 7}})
			return err
		}, pb.ErrorCode_ERROR_CODE_INVALID_ARGUMENT, "time unit"},
	} {
		err := tc.call()
		d, ok := pb.DetailOf(err)
		if !ok || d.GetCode() != tc.code || !strings.Contains(d.GetMessage(), tc.msg) {
			t.Errorf("%s: got %v, want %v with %q", tc.what, err, tc.code, tc.msg)
		}
	}
}

func TestTableLifecycle(t *testing.T) {
	fs := storage.NewMem()
	c := newClusterOn(t, fs, 2, nil)
	infos := c.createTable("ns1:t1", 4, 0)
	c.waitAllOpen("ns1:t1", 10*time.Second)
	c.createTable("other", 1, 0)
	c.waitAllOpen("other", 10*time.Second)

	list, err := c.mc.ListTables(c.ctx(), &pb.ListTablesRequest{Pattern: "ns1:.*"})
	if err != nil || len(list.GetTables()) != 1 || list.GetTables()[0].GetRegions() != 4 {
		t.Fatalf("list ns1:.*: %v %v", list, err)
	}
	if list, _ := c.mc.ListTables(c.ctx(), &pb.ListTablesRequest{Pattern: "oth.*"}); len(list.GetTables()) != 1 {
		t.Errorf("a default-namespace table does not match without its namespace: %v", list)
	}
	if list, _ := c.mc.ListTables(c.ctx(), &pb.ListTablesRequest{}); len(list.GetTables()) != 2 {
		t.Errorf("list all: %v", list)
	}

	// Modify: a new family reopens every region where it is.
	td := descriptor("ns1:t1", 0)
	td.Families = append(td.Families, &pb.ColumnFamilyDescriptor{Name: []byte("g"), MaxVersions: 3})
	before := perServer(c.regions("ns1:t1"))
	if _, err := c.mc.ModifyTable(c.ctx(), &pb.ModifyTableRequest{Table: td}); err != nil {
		t.Fatal(err)
	}
	locs := c.waitAllOpen("ns1:t1", 10*time.Second)
	if after := perServer(locs); len(after) != len(before) {
		t.Errorf("a reopen moved regions: %v → %v", before, after)
	}
	for _, l := range locs {
		if l.GetSeq() != 2 {
			t.Errorf("region %s seq %d after a reopen, want 2", l.GetRegion().GetName(), l.GetSeq())
		}
	}
	desc, err := c.mc.DescribeTable(c.ctx(), &pb.TableRequest{Table: tableName("ns1:t1")})
	if err != nil || len(desc.GetTable().GetFamilies()) != 2 || desc.GetTable().GetRegionReplication() != 1 {
		t.Fatalf("describe after modify: %v %v", desc, err)
	}
	// Modify to two replicas adds and opens them.
	td.RegionReplication = 2
	if _, err := c.mc.ModifyTable(c.ctx(), &pb.ModifyTableRequest{Table: td}); err != nil {
		t.Fatal(err)
	}
	if locs := c.waitAllOpen("ns1:t1", 10*time.Second); len(locs) != 8 {
		t.Fatalf("%d replicas after raising REGION_REPLICATION to 2", len(locs))
	}
	td.RegionReplication = 1
	if _, err := c.mc.ModifyTable(c.ctx(), &pb.ModifyTableRequest{Table: td}); err != nil {
		t.Fatal(err)
	}
	if locs := c.waitAllOpen("ns1:t1", 10*time.Second); len(locs) != 4 {
		t.Fatalf("%d replicas after lowering REGION_REPLICATION to 1", len(locs))
	}

	// Disable closes every region; locating then says the table is disabled.
	if _, err := c.mc.DisableTable(c.ctx(), &pb.TableRequest{Table: tableName("ns1:t1")}); err != nil {
		t.Fatal(err)
	}
	for _, l := range c.regions("ns1:t1") {
		if l.GetState() != pb.RegionState_REGION_STATE_CLOSED || l.GetServer() != nil {
			t.Errorf("region %s is %s on %v after disable", l.GetRegion().GetName(), l.GetState(), l.GetServer())
		}
	}
	for _, s := range c.servers {
		for _, r := range s.Regions() {
			if strings.HasPrefix(r, layout.PrimaryName(r)) && containsRegion(infos, r) {
				t.Errorf("server %s still serves %s of the disabled table", s.Name(), r)
			}
		}
	}
	if _, err := c.mc.LocateRegion(c.ctx(), &pb.LocateRegionRequest{Table: tableName("ns1:t1")}); errCode(err) != pb.ErrorCode_ERROR_CODE_TABLE_DISABLED {
		t.Errorf("locate in a disabled table: %v", err)
	}
	if _, err := c.mc.DisableTable(c.ctx(), &pb.TableRequest{Table: tableName("ns1:t1")}); errCode(err) != pb.ErrorCode_ERROR_CODE_TABLE_DISABLED {
		t.Errorf("disable twice: %v", err)
	}
	// Enable opens them again.
	if _, err := c.mc.EnableTable(c.ctx(), &pb.TableRequest{Table: tableName("ns1:t1")}); err != nil {
		t.Fatal(err)
	}
	c.waitAllOpen("ns1:t1", 10*time.Second)
	// Truncate (preserving splits) replaces the regions, archives the old directories, enables.
	if err := fs.MkdirAll(path.Join(layout.RegionDir(infos[0]), "f")); err != nil {
		t.Fatal(err)
	}
	if _, err := c.mc.DisableTable(c.ctx(), &pb.TableRequest{Table: tableName("ns1:t1")}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.mc.TruncateTable(c.ctx(), &pb.TruncateTableRequest{Table: tableName("ns1:t1"), PreserveSplits: true}); err != nil {
		t.Fatal(err)
	}
	locs = c.waitAllOpen("ns1:t1", 10*time.Second)
	if len(locs) != 4 {
		t.Fatalf("%d regions after a truncate preserving 4 splits", len(locs))
	}
	for i, l := range locs {
		if containsRegion(infos, l.GetRegion().GetName()) || string(l.GetRegion().GetStartKey()) != string(infos[i].GetStartKey()) {
			t.Errorf("region %d after truncate: %v (old %v)", i, l.GetRegion(), infos[i])
		}
	}
	c.waitFor("the old region directory archived", 5*time.Second, func() (bool, string) {
		gone, _ := storage.Exists(fs, layout.RegionDir(infos[0]))
		archived, _ := storage.Exists(fs, path.Join("archive", layout.RegionDir(infos[0]), "f"))
		return !gone && archived, "not yet"
	})
	// Delete: disable first, then the table and its rows go and its data moves to archive/.
	if _, err := c.mc.DisableTable(c.ctx(), &pb.TableRequest{Table: tableName("ns1:t1")}); err != nil {
		t.Fatal(err)
	}
	if err := fs.MkdirAll(path.Join(layout.RegionDir(locs[0].GetRegion()), "f")); err != nil {
		t.Fatal(err)
	}
	if _, err := c.mc.DeleteTable(c.ctx(), &pb.TableRequest{Table: tableName("ns1:t1")}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.mc.DescribeTable(c.ctx(), &pb.TableRequest{Table: tableName("ns1:t1")}); errCode(err) != pb.ErrorCode_ERROR_CODE_TABLE_NOT_FOUND {
		t.Errorf("describe after delete: %v", err)
	}
	if ok, _ := storage.Exists(fs, "data/ns1/t1"); ok {
		t.Error("data/ns1/t1 still exists after delete")
	}
	if names, _ := fs.List("archive/data/ns1/t1"); len(names) == 0 {
		t.Error("nothing archived under archive/data/ns1/t1")
	}
	if st := c.status(); st.GetRegions() != 1 {
		t.Errorf("%d regions in the catalog after deleting the table, want 1 (table other)", st.GetRegions())
	}
	// The name is free again.
	c.createTable("ns1:t1", 1, 0)
	c.waitAllOpen("ns1:t1", 10*time.Second)
}

func containsRegion(infos []*pb.RegionInfo, name string) bool {
	for _, ri := range infos {
		if ri.GetName() == name {
			return true
		}
	}
	return false
}

func TestQuotasConfigAndHeartbeats(t *testing.T) {
	c := newCluster(t, 0, nil, func(cfg *master.Config) { cfg.DefaultRegionReplication = 1; cfg.HedgeDelay = 15 * time.Millisecond })
	// A hand-driven region server.
	sn := &pb.ServerName{Host: "127.0.0.1", Port: 1, StartCode: 42}
	reg, err := c.mc.RegisterServer(c.ctx(), &pb.RegisterServerRequest{Server: sn, AdminAddress: "127.0.0.1:2", Zone: "z"})
	if err != nil {
		t.Fatal(err)
	}
	if reg.GetLeaseMs() != testLease.Lease.Milliseconds() || reg.GetHeartbeatIntervalMs() != testLease.HeartbeatInterval.Milliseconds() ||
		reg.GetClusterConfig()[layout.ConfigHedgeDelayMS] != "15" || reg.GetClusterConfig()[layout.ConfigSelfFenceMarginMS] != "200" || reg.GetClusterConfig()[layout.ConfigDefaultRegionReplication] != "1" {
		t.Errorf("register response %v", reg)
	}
	hb := func() *pb.HeartbeatResponse {
		t.Helper()
		resp, err := c.mc.Heartbeat(c.ctx(), &pb.HeartbeatRequest{Server: sn, Load: &pb.ServerLoad{RequestsPerSecond: 7}})
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}
	v0 := hb().GetQuotaVersion()
	q := &pb.Quota{Subject: &pb.Quota_User{User: "bob"}, Type: pb.ThrottleType_THROTTLE_TYPE_REQUEST_NUMBER, Limit: 100, TimeUnitSeconds: 1}
	if _, err := c.mc.SetQuota(c.ctx(), &pb.SetQuotaRequest{Quota: q}); err != nil {
		t.Fatal(err)
	}
	qt := &pb.Quota{Subject: &pb.Quota_Table{Table: tableName("t")}, Type: pb.ThrottleType_THROTTLE_TYPE_WRITE_SIZE, Limit: 1 << 20, TimeUnitSeconds: 60}
	if _, err := c.mc.SetQuota(c.ctx(), &pb.SetQuotaRequest{Quota: qt}); err != nil {
		t.Fatal(err)
	}
	list, err := c.mc.ListQuotas(c.ctx(), &pb.ListQuotasRequest{})
	if err != nil || len(list.GetQuotas()) != 2 || list.GetVersion() != v0+2 {
		t.Fatalf("list quotas: %v %v", list, err)
	}
	if list.GetQuotas()[1].GetTable().GetNamespace() != "default" {
		t.Errorf("a table quota's namespace not filled in: %v", list.GetQuotas()[1])
	}
	if got := hb().GetQuotaVersion(); got != list.GetVersion() {
		t.Errorf("heartbeat quota version %d, want %d", got, list.GetVersion())
	}
	// Replacing changes the version; setting the same again does not; removing does.
	q.Limit = 200
	if _, err := c.mc.SetQuota(c.ctx(), &pb.SetQuotaRequest{Quota: q}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.mc.SetQuota(c.ctx(), &pb.SetQuotaRequest{Quota: q}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.mc.SetQuota(c.ctx(), &pb.SetQuotaRequest{Quota: q, Remove: true}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.mc.SetQuota(c.ctx(), &pb.SetQuotaRequest{Quota: q, Remove: true}); err != nil {
		t.Fatal(err)
	}
	list, _ = c.mc.ListQuotas(c.ctx(), &pb.ListQuotasRequest{})
	if len(list.GetQuotas()) != 1 || list.GetVersion() != v0+4 {
		t.Errorf("after replace and remove: %v", list)
	}
	// A removal takes every type it lists (the shell's LIMIT => NONE), and only that subject's.
	for _, tt := range []pb.ThrottleType{pb.ThrottleType_THROTTLE_TYPE_READ_SIZE, pb.ThrottleType_THROTTLE_TYPE_WRITE_NUMBER} {
		if _, err := c.mc.SetQuota(c.ctx(), &pb.SetQuotaRequest{Quota: &pb.Quota{Subject: &pb.Quota_User{User: "carl"}, Type: tt, Limit: 10, TimeUnitSeconds: 1}}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := c.mc.SetQuota(c.ctx(), &pb.SetQuotaRequest{Quota: &pb.Quota{Subject: &pb.Quota_User{User: "carl"}, Type: pb.ThrottleType_THROTTLE_TYPE_REQUEST_NUMBER},
		Remove: true, RemoveTypes: []pb.ThrottleType{pb.ThrottleType_THROTTLE_TYPE_REQUEST_NUMBER, pb.ThrottleType_THROTTLE_TYPE_READ_SIZE,
			pb.ThrottleType_THROTTLE_TYPE_WRITE_NUMBER}}); err != nil {
		t.Fatal(err)
	}
	list, _ = c.mc.ListQuotas(c.ctx(), &pb.ListQuotasRequest{})
	if len(list.GetQuotas()) != 1 || list.GetQuotas()[0].GetTable() == nil {
		t.Errorf("after removing every type of carl's quotas: %v, want only the table's", list.GetQuotas())
	}
	// Cluster config overrides the flags, and an empty value resets.
	if _, err := c.mc.SetClusterConfig(c.ctx(), &pb.SetClusterConfigRequest{Config: map[string]string{
		layout.ConfigDefaultRegionReplication: "2", layout.ConfigQuotasEnabled: "false"}}); err != nil {
		t.Fatal(err)
	}
	cfg := hb().GetClusterConfig()
	if cfg[layout.ConfigDefaultRegionReplication] != "2" || cfg[layout.ConfigQuotasEnabled] != "false" || cfg[layout.ConfigHedgeDelayMS] != "15" {
		t.Errorf("config after SetClusterConfig: %v", cfg)
	}
	if _, err := c.mc.SetClusterConfig(c.ctx(), &pb.SetClusterConfigRequest{Config: map[string]string{layout.ConfigQuotasEnabled: ""}}); err != nil {
		t.Fatal(err)
	}
	if st := c.status(); st.GetClusterConfig()[layout.ConfigQuotasEnabled] != "true" || !st.GetBalancerOn() {
		t.Errorf("status after reset: %v", st)
	}
	// The balancer switch.
	prev, err := c.mc.SetBalancerRunning(c.ctx(), &pb.SetBalancerRunningRequest{On: false})
	if err != nil || !prev.GetPrevious() {
		t.Fatalf("switch the balancer off: %v %v", prev, err)
	}
	if st := c.status(); st.GetBalancerOn() {
		t.Error("balancer still on")
	}
	// Zones and the server's load show in the status.
	if _, err := c.mc.SetServerZone(c.ctx(), &pb.SetServerZoneRequest{Server: "127.0.0.1:1", Zone: "z2"}); err != nil {
		t.Fatal(err)
	}
	st := c.status()
	if len(st.GetServers()) != 1 || st.GetServers()[0].GetZone() != "z2" || st.GetServers()[0].GetLoad().GetRequestsPerSecond() != 7 ||
		st.GetActiveMaster() != c.m.Addr {
		t.Errorf("status %v", st)
	}
	// A heartbeat from a process the master does not know.
	resp, err := c.mc.Heartbeat(c.ctx(), &pb.HeartbeatRequest{Server: &pb.ServerName{Host: "127.0.0.1", Port: 1, StartCode: 41}})
	if err != nil || !resp.GetUnknownServer() {
		t.Errorf("heartbeat of an unknown process: %v %v", resp, err)
	}
	// An older process of a registered server cannot register.
	if _, err := c.mc.RegisterServer(c.ctx(), &pb.RegisterServerRequest{Server: &pb.ServerName{Host: "127.0.0.1", Port: 1, StartCode: 41},
		AdminAddress: "127.0.0.1:2"}); errCode(err) != pb.ErrorCode_ERROR_CODE_FAILED_PRECONDITION {
		t.Errorf("register an older process: %v", err)
	}
	// A stopping server that holds nothing is recovered at once.
	if _, err := c.mc.Heartbeat(c.ctx(), &pb.HeartbeatRequest{Server: sn, Stopping: true}); err != nil {
		t.Fatal(err)
	}
	c.waitFor("the stopped server forgotten", 5*time.Second, func() (bool, string) {
		st := c.status()
		return len(st.GetServers()) == 1 && !st.GetServers()[0].GetLive() || len(st.GetServers()) == 0, "still live"
	})
}

func TestMetrics(t *testing.T) {
	reg := prometheus.NewRegistry()
	c := newCluster(t, 2, nil, nil)
	// newCluster made its own registry; restart on ours to read it.
	c.m.Close()
	c.cfg.Registerer = reg
	c.startMasterWith(reg)
	c.createTable("t1", 4, 0)
	c.waitAllOpen("t1", 10*time.Second)
	c.waitFor("gauges set", 5*time.Second, func() (bool, string) {
		v := gauges(t, reg)
		return v["cellstore_master_num_region_servers"] == 2 && v["cellstore_master_region_count"] == 4 &&
			v["cellstore_master_rit_count"] == 0 && v["cellstore_master_is_active_master"] == 1, ""
	})
	families, _ := reg.Gather()
	for _, f := range families {
		if f.GetName() == "cellstore_master_assign_seconds" && f.GetMetric()[0].GetHistogram().GetSampleCount() < 4 {
			t.Errorf("assign histogram counted %d opens", f.GetMetric()[0].GetHistogram().GetSampleCount())
		}
	}
}

func gauges(t *testing.T, reg *prometheus.Registry) map[string]float64 {
	t.Helper()
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, f := range families {
		if f.GetType() == dto.MetricType_GAUGE && len(f.GetMetric()) == 1 {
			out[f.GetName()] = f.GetMetric()[0].GetGauge().GetValue()
		}
	}
	return out
}

// A create that would ask the live servers for more than MaxRegionsPerServer each fails before
// doing anything, saying why; within the limit it succeeds.
func TestCreateBeyondCapacityRefused(t *testing.T) {
	c := newCluster(t, 2, nil, func(cfg *master.Config) { cfg.MaxRegionsPerServer = 10 })
	c.createTable("a", 7, 2) // 14 of 20
	_, err := c.mc.CreateTable(c.ctx(), &pb.CreateTableRequest{Table: descriptor("b", 1), NumRegions: 7})
	if d, ok := pb.DetailOf(err); !ok || d.GetCode() != pb.ErrorCode_ERROR_CODE_FAILED_PRECONDITION ||
		!strings.Contains(d.GetMessage(), "needs 7 regions but the cluster holds 14 of at most 20 (2 live servers x 10") {
		t.Fatalf("over capacity: %v", err)
	}
	if _, err := c.mc.DescribeTable(c.ctx(), &pb.TableRequest{Table: tableName("b")}); err == nil {
		t.Fatal("the refused table exists")
	}
	c.createTable("b", 6, 1) // 20 of 20
}

// A close's report that comes again after the region reopened (its first try timed out at the
// server and was applied after all) is not taken for a close the server made on its own: the
// region stays open where it is, and is not opened on another server beside it.
func TestRepeatedCloseReportOfAReopenedRegion(t *testing.T) {
	c := newCluster(t, 2, nil, nil)
	c.createTable("t1", 1, 0)
	loc := primaryLocs(c.waitAllOpen("t1", 10*time.Second))[0]
	name := loc.GetRegion().GetName()
	x := c.server(layout.ServerName(loc.GetServer()))
	td := descriptor("t1", 0)
	td.Families = append(td.Families, &pb.ColumnFamilyDescriptor{Name: []byte("g"), MaxVersions: 1})
	if _, err := c.mc.ModifyTable(c.ctx(), &pb.ModifyTableRequest{Table: td}); err != nil {
		t.Fatal(err)
	}
	c.waitFor("the region reopened", 10*time.Second, func() (bool, string) {
		l := primaryLocs(c.regions("t1"))[0]
		return l.GetSeq() == 2 && l.GetState() == pb.RegionState_REGION_STATE_OPEN, fmt.Sprint(l)
	})
	var closeProc uint64
	for _, call := range x.Calls() {
		if !call.Open && call.Region == name {
			closeProc = call.ProcedureID
		}
	}
	if closeProc == 0 {
		t.Fatalf("no close of %s with a procedure on %s: %v", name, x.Name(), x.Calls())
	}
	server := proto.CloneOf(loc.GetServer())
	server.StartCode = x.StartCode()
	if _, err := c.mc.ReportRegionTransition(c.ctx(), &pb.ReportRegionTransitionRequest{Server: server, Region: loc.GetRegion(),
		Transition: pb.RegionTransition_REGION_TRANSITION_CLOSED, ProcedureId: closeProc}); err != nil {
		t.Fatal(err)
	}
	if l := primaryLocs(c.regions("t1"))[0]; l.GetState() != pb.RegionState_REGION_STATE_OPEN || layout.ServerName(l.GetServer()) != x.Name() {
		t.Fatalf("after the repeated close report the region is %s on %v; want open on %s", l.GetState(), l.GetServer(), x.Name())
	}
	for _, s := range c.servers {
		if s == x {
			continue
		}
		for _, call := range s.Calls() {
			if call.Open && call.Region == name {
				t.Fatalf("the region was opened on %s beside %s", s.Name(), x.Name())
			}
		}
	}
}

// A ModifyTable naming the version it changed is refused, changing nothing, once another alter
// landed after that version was described: two alters made from one describe cannot undo each
// other's change (HBase's ConcurrentTableModificationException).
func TestModifyTableAtAVersion(t *testing.T) {
	c := newCluster(t, 1, nil, nil)
	c.createTable("t1", 1, 1)
	c.waitAllOpen("t1", 10*time.Second)
	describe := func() *pb.DescribeTableResponse {
		t.Helper()
		d, err := c.mc.DescribeTable(c.ctx(), &pb.TableRequest{Table: tableName("t1")})
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	before := describe()
	withFamily := func(name string) *pb.TableDescriptor {
		td := proto.CloneOf(before.GetTable())
		td.Families = append(td.Families, &pb.ColumnFamilyDescriptor{Name: []byte(name)})
		return td
	}
	v := before.GetVersion()
	if _, err := c.mc.ModifyTable(c.ctx(), &pb.ModifyTableRequest{Table: withFamily("a"), ExpectVersion: &v}); err != nil {
		t.Fatal(err)
	}
	c.waitAllOpen("t1", 10*time.Second)
	_, err := c.mc.ModifyTable(c.ctx(), &pb.ModifyTableRequest{Table: withFamily("b"), ExpectVersion: &v})
	if errCode(err) != pb.ErrorCode_ERROR_CODE_CONCURRENT_MODIFICATION {
		t.Fatalf("a modify of a version altered since: %v, want CONCURRENT_MODIFICATION", err)
	}
	after := describe()
	if after.GetVersion() != v+1 || len(after.GetTable().GetFamilies()) != 2 || string(after.GetTable().GetFamilies()[1].GetName()) != "a" {
		t.Fatalf("after the refused modify: version %d (want %d), families %v", after.GetVersion(), v+1, after.GetTable().GetFamilies())
	}
	// Without a version the change applies, as before.
	if _, err := c.mc.ModifyTable(c.ctx(), &pb.ModifyTableRequest{Table: withFamily("b")}); err != nil {
		t.Fatal(err)
	}
	if got := describe().GetVersion(); got != v+2 {
		t.Fatalf("version %d after a second modify, want %d", got, v+2)
	}
}
