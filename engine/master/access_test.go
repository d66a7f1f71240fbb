package master

import (
	"context"
	"log/slog"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"

	"github.com/cellstore/cellstore/engine/access"
	pb "github.com/cellstore/cellstore/engine/api/cellstore/v1"
	"github.com/cellstore/cellstore/engine/security"
	"github.com/cellstore/cellstore/engine/storage"
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

// A master that is not active (new, standby, loading the catalog) checks nothing, so it runs
// nothing but what every master answers to anyone: a CreateTable or ModifyTable sent to a
// standby used to compile and store the caller's functions before it was refused, and one queued
// while the master took over ran unchecked once it was active.
func TestInactiveMasterRunsNoUncheckedCall(t *testing.T) {
	m, err := New(Config{FS: storage.NewMem(), Authorization: true, Superusers: []string{"root"},
		Logger: slog.New(slog.DiscardHandler), Registerer: prometheus.NewRegistry()})
	if err != nil {
		t.Fatal(err)
	}
	ctx := security.NewContext(context.Background(), security.Identity{User: "eve"})
	for method, req := range map[string]any{
		"CreateTable": &pb.CreateTableRequest{Table: &pb.TableDescriptor{Name: &pb.TableName{Name: "t"}}},
		"ModifyTable": &pb.ModifyTableRequest{Table: &pb.TableDescriptor{Name: &pb.TableName{Name: "t"}}},
		"Grant":       &pb.GrantRequest{Permission: &pb.Permission{User: "eve", Actions: uint32(access.Admin)}},
		"ListTables":  &pb.ListTablesRequest{},
	} {
		reached := false
		_, err := m.authorize(ctx, req, &grpc.UnaryServerInfo{FullMethod: "/cellstore.v1.Master/" + method}, func(context.Context, any) (any, error) {
			reached = true
			return nil, nil
		})
		if d, ok := pb.DetailOf(err); reached || !ok || d.GetCode() != pb.ErrorCode_ERROR_CODE_NOT_ACTIVE_MASTER {
			t.Errorf("%s on a master not active: handler reached %v, answer %v; want NOT_ACTIVE_MASTER from the check", method, reached, err)
		}
	}
	reached := false
	if _, err := m.authorize(ctx, &pb.GetExternalAddressesRequest{}, &grpc.UnaryServerInfo{FullMethod: "/cellstore.v1.Master/GetExternalAddresses"},
		func(context.Context, any) (any, error) { reached = true; return nil, nil }); err != nil || !reached {
		t.Errorf("GetExternalAddresses, which every master answers: reached %v, %v", reached, err)
	}
}

// A grant on a table named without its namespace is checked where it lands, the default
// namespace: a user with ADMIN on default:orders may grant on it either way.
func TestGrantChecksTheTableItLandsOn(t *testing.T) {
	ck := access.NewChecker(1, []*pb.Permission{
		{User: "erin", Table: &pb.TableName{Namespace: "default", Name: "orders"}, Actions: uint32(access.Admin)},
	}, nil)
	m := &Master{}
	for _, ns := range []string{"", "default"} {
		req := &pb.GrantRequest{Permission: &pb.Permission{User: "frank", Table: &pb.TableName{Namespace: ns, Name: "orders"}, Actions: uint32(access.Read)}}
		if d := m.need(ck, security.Identity{User: "erin"}, "Grant", req); d != nil {
			t.Errorf("a grant on orders in namespace %q by its ADMIN was refused: %v", ns, d)
		}
	}
	req := &pb.GrantRequest{Permission: &pb.Permission{User: "frank", Table: &pb.TableName{Namespace: "other", Name: "orders"}, Actions: uint32(access.Read)}}
	if d := m.need(ck, security.Identity{User: "erin"}, "Grant", req); d == nil {
		t.Error("a grant on other:orders by default:orders's ADMIN was allowed")
	}
}
