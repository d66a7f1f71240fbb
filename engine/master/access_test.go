package master

import (
	"testing"

	"github.com/cellstore/cellstore/engine/access"
	pb "github.com/cellstore/cellstore/engine/api/cellstore/v1"
	"github.com/cellstore/cellstore/engine/security"
)

// Cloning a snapshot needs global ADMIN, as in HBase: CREATE on a namespace of one's own used to
// be enough, which let a user copy any table (of a snapshot whose name they knew) into it and read
// it through their namespace grant.
func TestCloneSnapshotNeedsGlobalAdmin(t *testing.T) {
	ck := access.NewChecker(1, []*pb.Permission{
		{User: "eve", Namespace: "sandbox", Actions: uint32(access.Read | access.Create | access.Admin)},
		{User: "root", Actions: uint32(access.Admin)},
	}, nil)
	m := &Master{}
	req := &pb.CloneSnapshotRequest{Name: "hr-payroll", Table: &pb.TableName{Namespace: "sandbox", Name: "copy"}}
	if d := m.need(ck, security.Identity{User: "eve"}, "CloneSnapshot", req); d == nil || d.GetCode() != pb.ErrorCode_ERROR_CODE_ACCESS_DENIED {
		t.Errorf("a user with CREATE and ADMIN on the target namespace cloned a snapshot: %v", d)
	}
	if d := m.need(ck, security.Identity{User: "root"}, "CloneSnapshot", req); d != nil {
		t.Errorf("a global ADMIN was refused: %v", d)
	}
}
