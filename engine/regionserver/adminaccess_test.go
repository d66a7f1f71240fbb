package regionserver

import (
	"context"
	"log/slog"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/status"

	"github.com/cellstore/cellstore/engine/access"
	pb "github.com/cellstore/cellstore/engine/api/cellstore/v1"
	"github.com/cellstore/cellstore/engine/security"
)

// Flush and compact calls are checked against the region's table whatever the region's state: a
// region still opening (whose handler waits for the open, then flushes or compacts) used to let
// any authenticated user through, and a region not here is answered without running the handler.
func TestAdminCallsOnOpeningRegionsAreChecked(t *testing.T) {
	s := &Server{cfg: Config{Authorization: true}, nameStr: "rs1", log: slog.New(slog.DiscardHandler)}
	s.acl.Store(access.NewChecker(1, []*pb.Permission{
		{User: "olga", Table: &pb.TableName{Namespace: "default", Name: "t"}, Actions: uint32(access.Admin)},
	}, []string{"root"}))
	or := &onlineRegion{name: "r1", table: &pb.TableDescriptor{Name: &pb.TableName{Namespace: "default", Name: "t"}}}
	or.state.Store(stateOpening)
	s.regions.Store("r1", or)

	call := func(user string, req any) (reached bool, err error) {
		ctx := security.NewContext(context.Background(), security.Identity{User: user})
		_, err = s.authorizeAdmin(ctx, req, &grpc.UnaryServerInfo{FullMethod: "/cellstore.v1.Admin/CompactRegion"}, func(context.Context, any) (any, error) {
			reached = true
			return &pb.RegionResponse{}, nil
		})
		return reached, err
	}
	for _, c := range []struct {
		user    string
		req     any
		reached bool
		code    pb.ErrorCode // of a refusal
	}{
		{"eve", &pb.CompactRegionRequest{Region: "r1", Major: true}, false, pb.ErrorCode_ERROR_CODE_ACCESS_DENIED},
		{"eve", &pb.RegionRequest{Region: "r1"}, false, pb.ErrorCode_ERROR_CODE_ACCESS_DENIED},
		{"eve", &pb.CompactRegionRequest{Region: "elsewhere"}, false, pb.ErrorCode_ERROR_CODE_NOT_SERVING_REGION},
		{"olga", &pb.CompactRegionRequest{Region: "r1", Major: true}, true, 0},
		{"olga", &pb.RegionRequest{Region: "elsewhere"}, false, pb.ErrorCode_ERROR_CODE_NOT_SERVING_REGION},
		{"root", &pb.RegionRequest{Region: "elsewhere"}, true, 0},
	} {
		reached, err := call(c.user, c.req)
		if reached != c.reached {
			t.Errorf("%s %T %v: handler reached %v, want %v (%v)", c.user, c.req, c.req, reached, c.reached, err)
		}
		if c.code != 0 {
			d, ok := pb.DetailOf(err)
			if !ok || d.GetCode() != c.code {
				t.Errorf("%s %T %v: %v (%v), want %s", c.user, c.req, c.req, err, status.Code(err), c.code)
			}
		}
	}
}
