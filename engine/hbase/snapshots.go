package hbase

import (
	"context"
	"regexp"
	"strings"

	"google.golang.org/protobuf/proto"

	pb "github.com/cellstore/cellstore/engine/api/cellstore/v1"
	hb "github.com/cellstore/cellstore/engine/api/hbase/v2"
)

// Snapshots through MasterService: Admin.snapshot, listSnapshots, deleteSnapshot, cloneSnapshot
// and restoreSnapshot of the stock client, forwarded to Cellstore's master (docs/snapshots.md).
// A snapshot is taken before the call answers, so the procedure it hands out is FINISHED and
// IsSnapshotDone says done.

// snapshotTable reads SnapshotDescription.table: "namespace:table", or "table" in the default
// namespace (HBase's TableName.getNameAsString).
func snapshotTable(s string) *pb.TableName {
	if ns, t, ok := strings.Cut(s, ":"); ok {
		return &pb.TableName{Namespace: ns, Name: t}
	}
	return &pb.TableName{Namespace: "default", Name: s}
}

// snapshotTableString writes a table name as HBase does.
func snapshotTableString(t *pb.TableName) string {
	if t.GetNamespace() == "" || t.GetNamespace() == "default" {
		return t.GetName()
	}
	return t.GetNamespace() + ":" + t.GetName()
}

func hbSnapshot(d *pb.SnapshotDescription) *hb.SnapshotDescription {
	typ := hb.SnapshotDescription_FLUSH
	if d.GetSkipFlush() {
		typ = hb.SnapshotDescription_SKIPFLUSH
	}
	return &hb.SnapshotDescription{Name: proto.String(d.GetName()), Table: proto.String(snapshotTableString(d.GetTable())),
		CreationTime: proto.Int64(d.GetCreatedMs()), Type: typ.Enum(), Version: proto.Int32(2)}
}

// findSnapshot looks a snapshot up by name (nil when there is none).
func (a *Adapter) findSnapshot(ctx context.Context, name string) (*pb.SnapshotDescription, error) {
	var found *pb.SnapshotDescription
	err := a.b.Master(ctx, func(ctx context.Context, m pb.MasterClient) error {
		resp, err := m.ListSnapshots(ctx, &pb.ListSnapshotsRequest{Pattern: regexp.QuoteMeta(name)})
		for _, d := range resp.GetSnapshots() {
			if d.GetName() == name {
				found = d
			}
		}
		return err
	})
	return found, err
}

func (a *Adapter) snapshotCall(ctx context.Context, req proto.Message, proc func() *uint64) (proto.Message, error) {
	switch r := req.(type) {
	case *hb.SnapshotRequest:
		d := r.GetSnapshot()
		if d.GetType() == hb.SnapshotDescription_DISABLED {
			return nil, doNotRetry("snapshots of type DISABLED are not supported: take a FLUSH or SKIPFLUSH snapshot (of an enabled or disabled table)")
		}
		if err := a.b.Master(ctx, func(ctx context.Context, m pb.MasterClient) error {
			_, err := m.Snapshot(ctx, &pb.SnapshotRequest{Table: snapshotTable(d.GetTable()), Name: d.GetName(),
				SkipFlush: d.GetType() == hb.SnapshotDescription_SKIPFLUSH})
			return err
		}); err != nil {
			return nil, err
		}
		return &hb.SnapshotResponse{ExpectedTimeout: proto.Int64(60000), ProcId: proto.Int64(int64(*proc()))}, nil
	case *hb.IsSnapshotDoneRequest:
		name := r.GetSnapshot().GetName()
		d, err := a.findSnapshot(ctx, name)
		if err != nil {
			return nil, err
		}
		if d == nil {
			return nil, &exception{class: classUnknownSnapshot, msg: "snapshot " + name + " does not exist", doNotRetry: true}
		}
		return &hb.IsSnapshotDoneResponse{Done: proto.Bool(true), Snapshot: hbSnapshot(d)}, nil
	case *hb.GetCompletedSnapshotsRequest:
		resp := &hb.GetCompletedSnapshotsResponse{}
		if err := a.b.Master(ctx, func(ctx context.Context, m pb.MasterClient) error {
			list, err := m.ListSnapshots(ctx, &pb.ListSnapshotsRequest{})
			for _, d := range list.GetSnapshots() {
				resp.Snapshots = append(resp.Snapshots, hbSnapshot(d))
			}
			return err
		}); err != nil {
			return nil, err
		}
		return resp, nil
	case *hb.DeleteSnapshotRequest:
		if err := a.b.Master(ctx, func(ctx context.Context, m pb.MasterClient) error {
			_, err := m.DeleteSnapshot(ctx, &pb.SnapshotNameRequest{Name: r.GetSnapshot().GetName()})
			return err
		}); err != nil {
			return nil, err
		}
		return &hb.DeleteSnapshotResponse{}, nil
	case *hb.RestoreSnapshotRequest:
		// HBase sends clone_snapshot and restore_snapshot alike: the description's table is the
		// target. Into the snapshot's own table it is a restore (a dropped table comes back);
		// into another table, a clone.
		name := r.GetSnapshot().GetName()
		d, err := a.findSnapshot(ctx, name)
		if err != nil {
			return nil, err
		}
		if d == nil {
			return nil, &exception{class: classSnapshotDoesNotExist, msg: "snapshot " + name + " does not exist", doNotRetry: true}
		}
		target := snapshotTable(r.GetSnapshot().GetTable())
		if r.GetSnapshot().GetTable() == "" {
			target = d.GetTable()
		}
		if err := a.b.Master(ctx, func(ctx context.Context, m pb.MasterClient) error {
			if proto.Equal(target, snapshotTable(snapshotTableString(d.GetTable()))) {
				_, err := m.RestoreSnapshot(ctx, &pb.SnapshotNameRequest{Name: name})
				return err
			}
			_, err := m.CloneSnapshot(ctx, &pb.CloneSnapshotRequest{Name: name, Table: target})
			return err
		}); err != nil {
			return nil, err
		}
		return &hb.RestoreSnapshotResponse{ProcId: proc()}, nil
	}
	return nil, doNotRetry("not a snapshot call")
}
