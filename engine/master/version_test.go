package master_test

import (
	"strings"
	"testing"

	pb "github.com/cellstore/cellstore/engine/api/cellstore/v1"
	"github.com/cellstore/cellstore/engine/master"
)

// A region server of a newer minor version than the active master, or of another major, is
// refused with what to do (the masters are upgraded first); one of the same or the previous minor
// joins, and ClusterStatus reports every version.
func TestRegisterServerVersionSkew(t *testing.T) {
	c := newCluster(t, 0, nil, func(cfg *master.Config) { cfg.Version = "v1.4.0" })
	register := func(port int32, v string) error {
		_, err := c.mc.RegisterServer(c.ctx(), &pb.RegisterServerRequest{
			Server:       &pb.ServerName{Host: "rs.example", Port: port, StartCode: 1},
			AdminAddress: "rs.example:1", Version: v})
		return err
	}
	for port, tc := range map[int32]struct{ version, want string }{
		16020: {"v1.5.0", "upgrade the masters first"},
		16021: {"v2.4.0", "different major versions"},
		16022: {"v1.2.9", "one minor version at a time"},
		16023: {"v1.4.1", ""},
		16024: {"v1.3.7", ""},
		16025: {"fc6eab3", ""}, // a development build is not checked
	} {
		err := register(port, tc.version)
		d, _ := pb.DetailOf(err)
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%s refused: %v", tc.version, err)
		case tc.want != "" && (d.GetCode() != pb.ErrorCode_ERROR_CODE_FAILED_PRECONDITION || !strings.Contains(d.GetMessage(), tc.want)):
			t.Errorf("%s: %v, want FAILED_PRECONDITION saying %q", tc.version, err, tc.want)
		}
	}
	st := c.status()
	versions := map[string]bool{}
	for _, s := range st.GetServers() {
		versions[s.GetVersion()] = true
	}
	if len(st.GetServers()) != 3 || !versions["v1.4.1"] || !versions["v1.3.7"] || !versions["fc6eab3"] {
		t.Errorf("servers in ClusterStatus: %v", st.GetServers())
	}
	if st.GetMasterVersions()[st.GetActiveMaster()] != "v1.4.0" {
		t.Errorf("master versions %v", st.GetMasterVersions())
	}
}
