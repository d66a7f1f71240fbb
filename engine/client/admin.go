package client

import (
	"context"
	"crypto/sha256"
	"fmt"

	"google.golang.org/protobuf/proto"

	pb "github.com/cellstore/cellstore/engine/api/cellstore/v1"
	"github.com/cellstore/cellstore/engine/schema"
)

// CreateTable creates a table, pre-split at splitKeys (regions begin at each key), and waits for its
// regions to open, within the operation timeout (one attempt may take all of it: thousands of
// regions take a while).
func (c *Client) CreateTable(ctx context.Context, td *pb.TableDescriptor, splitKeys [][]byte) ([]*pb.RegionInfo, error) {
	if err := schema.UserTable(td.GetName()); err != nil {
		return nil, fmt.Errorf("client: %w", err)
	}
	if err := schema.Descriptor(td); err != nil {
		return nil, fmt.Errorf("client: %w", err)
	}
	var resp *pb.CreateTableResponse
	err := c.master(ctx, 0, func(ctx context.Context, m pb.MasterClient) error {
		var err error
		resp, err = m.CreateTable(ctx, &pb.CreateTableRequest{Table: td, SplitKeys: splitKeys})
		return err
	})
	if err != nil {
		return nil, err
	}
	return resp.GetRegions(), nil
}

// DeleteTable disables (if needed) and drops a table.
func (c *Client) DeleteTable(ctx context.Context, name string) error {
	tn := ParseTableName(name)
	err := c.Master(ctx, func(ctx context.Context, m pb.MasterClient) error {
		_, err := m.DisableTable(ctx, &pb.TableRequest{Table: tn})
		return err
	})
	if d, ok := pb.DetailOf(err); err != nil && !(ok && d.GetCode() == pb.ErrorCode_ERROR_CODE_TABLE_DISABLED) {
		return err
	}
	c.cache.forgetTable(name)
	return c.Master(ctx, func(ctx context.Context, m pb.MasterClient) error {
		_, err := m.DeleteTable(ctx, &pb.TableRequest{Table: tn})
		return err
	})
}

// SetFunction loads a WebAssembly function into a table, or replaces the one of the same name
// (docs/functions.md): f carries the module's bytes (Module) and its settings. The master
// checks and stores the module and the table's regions reopen with it.
func (c *Client) SetFunction(ctx context.Context, table string, f *pb.TableFunction) error {
	return c.alterFunctions(ctx, table, func(fns []*pb.TableFunction) ([]*pb.TableFunction, error) {
		out := make([]*pb.TableFunction, 0, len(fns)+1)
		for _, g := range fns {
			if g.GetName() != f.GetName() {
				out = append(out, g)
			}
		}
		return append(out, f), nil
	})
}

// RemoveFunction removes a table's function.
func (c *Client) RemoveFunction(ctx context.Context, table, name string) error {
	return c.alterFunctions(ctx, table, func(fns []*pb.TableFunction) ([]*pb.TableFunction, error) {
		out := make([]*pb.TableFunction, 0, len(fns))
		for _, g := range fns {
			if g.GetName() != name {
				out = append(out, g)
			}
		}
		if len(out) == len(fns) {
			return nil, fmt.Errorf("client: table %s has no function %q", table, name)
		}
		return out, nil
	})
}

func (c *Client) alterFunctions(ctx context.Context, table string, change func([]*pb.TableFunction) ([]*pb.TableFunction, error)) error {
	return c.AlterTable(ctx, table, func(td *pb.TableDescriptor) error {
		fns, err := change(td.GetFunctions())
		td.Functions = fns
		return err
	})
}

// maxAlterAttempts bounds how often AlterTable describes the table again after other alters
// landed first.
const maxAlterAttempts = 10

// AlterTable changes table's descriptor: change edits the descriptor the master describes, and
// the master takes the result only if no other alter landed meanwhile
// (ModifyTableRequest.expect_version). When one did, the table is described again and change
// applied to that, so two alters made at once both take effect rather than the later undoing
// the earlier (HBase refuses the later with ConcurrentTableModificationException).
func (c *Client) AlterTable(ctx context.Context, table string, change func(*pb.TableDescriptor) error) error {
	tn := ParseTableName(table)
	for attempt := 1; ; attempt++ {
		var desc *pb.DescribeTableResponse
		if err := c.Master(ctx, func(ctx context.Context, m pb.MasterClient) error {
			d, err := m.DescribeTable(ctx, &pb.TableRequest{Table: tn})
			desc = d
			return err
		}); err != nil {
			return err
		}
		td := desc.GetTable()
		if err := change(td); err != nil {
			return err
		}
		version := desc.GetVersion()
		// The master compiles the modules it is sent and the regions reopen: one attempt may take
		// the whole operation timeout.
		err := c.MasterWait(ctx, func(ctx context.Context, m pb.MasterClient) error {
			_, err := m.ModifyTable(ctx, &pb.ModifyTableRequest{Table: td, ExpectVersion: &version})
			return err
		})
		if d, _ := pb.DetailOf(err); d.GetCode() != pb.ErrorCode_ERROR_CODE_CONCURRENT_MODIFICATION || attempt == maxAlterAttempts {
			return err
		}
		// A retry of a modify whose answer was lost (a master failover) is refused too: the
		// first one raised the version. When the table now reads as what was sent, it was.
		if applied, derr := c.alteredTo(ctx, tn, td); derr == nil && applied {
			return nil
		}
	}
}

// alteredTo says whether table tn's descriptor is td as a ModifyTable stores it (function modules
// by digest, REGION_REPLICATION 0 taking the table's).
func (c *Client) alteredTo(ctx context.Context, tn *pb.TableName, td *pb.TableDescriptor) (bool, error) {
	var cur *pb.TableDescriptor
	if err := c.Master(ctx, func(ctx context.Context, m pb.MasterClient) error {
		d, err := m.DescribeTable(ctx, &pb.TableRequest{Table: tn})
		cur = d.GetTable()
		return err
	}); err != nil {
		return false, err
	}
	sent, stored := proto.CloneOf(td), proto.CloneOf(cur)
	if sent.GetRegionReplication() == 0 {
		sent.RegionReplication = stored.GetRegionReplication()
	}
	for _, d := range []*pb.TableDescriptor{sent, stored} {
		for _, f := range d.GetFunctions() {
			if len(f.GetModule()) > 0 {
				sum := sha256.Sum256(f.GetModule())
				f.Sha256, f.Module = sum[:], nil
			}
			f.Size = 0
		}
	}
	return proto.Equal(sent, stored), nil
}
