package regionserver

import (
	"context"
	"slices"
	"testing"

	pb "github.com/cellstore/cellstore/engine/api/cellstore/v1"
	"github.com/cellstore/cellstore/engine/client"
)

// Two alters of one table made at once both take effect: the one that lands second was made
// from a describe older than the first, so the master refuses it (CONCURRENT_MODIFICATION) and
// the client describes the table again and applies its change to that. Before, the second
// silently removed the first one's family.
func TestConcurrentAltersBothApply(t *testing.T) {
	c := startCluster(t, 1)
	ctx := context.Background()
	createTable(t, c, "ca", nil)
	addFamily := func(name string) func(*pb.TableDescriptor) {
		return func(td *pb.TableDescriptor) {
			td.Families = append(td.Families, &pb.ColumnFamilyDescriptor{Name: []byte(name)})
		}
	}
	attempts := 0
	err := c.client.AlterTable(ctx, "ca", func(td *pb.TableDescriptor) error {
		attempts++
		if attempts == 1 {
			// Another alter lands between this one's describe and its modify.
			if err := c.client.AlterTable(ctx, "ca", func(td *pb.TableDescriptor) error { addFamily("a")(td); return nil }); err != nil {
				return err
			}
		}
		addFamily("b")(td)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	var desc *pb.DescribeTableResponse
	if err := c.client.Master(ctx, func(ctx context.Context, m pb.MasterClient) error {
		var err error
		desc, err = m.DescribeTable(ctx, &pb.TableRequest{Table: client.ParseTableName("ca")})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, f := range desc.GetTable().GetFamilies() {
		names = append(names, string(f.GetName()))
	}
	slices.Sort(names)
	if !slices.Equal(names, []string{"a", "b", "f"}) || attempts != 2 {
		t.Fatalf("families %v after two alters at once (%d attempts), want a, b and f (2 attempts)", names, attempts)
	}
}
