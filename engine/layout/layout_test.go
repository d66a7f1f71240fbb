package layout

import (
	"testing"

	pb "github.com/cellstore/cellstore/engine/api/cellstore/v1"
)

func TestNames(t *testing.T) {
	for _, tc := range []struct {
		server string
		sc     int64
		want   string
	}{
		{"rs-0.rs.ns.svc:16020", 1700000000000, "rs-0.rs.ns.svc_16020_1700000000000"},
		{"[::1]:16020", 7, "___1__16020_7"},
		{"UPPER_case:1", 1, "UPPER_case_1_1"},
	} {
		if got := WALDirName(tc.server, tc.sc); got != tc.want {
			t.Errorf("WALDirName(%q, %d) = %q, want %q", tc.server, tc.sc, got, tc.want)
		}
	}
	if got := WALDir("h:1", 2); got != "wal/h_1_2" {
		t.Errorf("WALDir = %q", got)
	}
	if RegionName(0x1a2b) != "0000000000001a2b" || ReplicaName(0x1a2b, 2) != "0000000000001a2b_2" || ReplicaName(5, 0) != RegionName(5) {
		t.Error("region names")
	}
	if PrimaryName("0000000000001a2b_2") != "0000000000001a2b" || PrimaryName("0000000000001a2b") != "0000000000001a2b" {
		t.Error("PrimaryName")
	}
	ri := &pb.RegionInfo{Table: &pb.TableName{Namespace: "ns", Name: "t"}, Name: ReplicaName(3, 1)}
	if RegionDir(ri) != "data/ns/t/0000000000000003" || RecoveredEditsDir(ri) != "data/ns/t/0000000000000003/recovered.edits" {
		t.Errorf("dirs %s %s", RegionDir(ri), RecoveredEditsDir(ri))
	}
	sn, err := ParseServerName("host.example:16020")
	if err != nil || sn.GetHost() != "host.example" || sn.GetPort() != 16020 || ServerName(sn) != "host.example:16020" {
		t.Errorf("ParseServerName: %v %v", sn, err)
	}
	for _, bad := range []string{"", "host", ":1", "h:0", "h:99999", "h:x"} {
		if _, err := ParseServerName(bad); err == nil {
			t.Errorf("ParseServerName(%q) accepted", bad)
		}
	}
}
