package shell

import (
	"context"
	"fmt"
	"time"

	pb "github.com/cellstore/cellstore/engine/api/cellstore/v1"
	"github.com/cellstore/cellstore/engine/client"
)

// HBase's snapshot commands: snapshot, list_snapshots, delete_snapshot, clone_snapshot,
// restore_snapshot.

func (s *Shell) snapshot(ctx context.Context, args []Value) error {
	t, err := str(args, 0, "table")
	if err != nil {
		return err
	}
	name, err := str(args, 1, "snapshot name")
	if err != nil {
		return err
	}
	opts, err := optHash(args, 2)
	if err != nil {
		return err
	}
	req := &pb.SnapshotRequest{Table: client.ParseTableName(t), Name: name}
	for _, k := range opts.Keys {
		switch k {
		case "SKIP_FLUSH":
			req.SkipFlush = boolOf(opts.Map[k])
		default:
			return usage("unknown snapshot option %s", k)
		}
	}
	return s.Client.MasterWait(ctx, func(ctx context.Context, m pb.MasterClient) error {
		_, err := m.Snapshot(ctx, req)
		return err
	})
}

func (s *Shell) listSnapshots(ctx context.Context, args []Value) error {
	pattern := ""
	if len(args) > 0 {
		pattern = args[0].Text()
	}
	var resp *pb.ListSnapshotsResponse
	if err := s.master(ctx, func(ctx context.Context, m pb.MasterClient) error {
		var err error
		resp, err = m.ListSnapshots(ctx, &pb.ListSnapshotsRequest{Pattern: pattern})
		return err
	}); err != nil {
		return err
	}
	fmt.Fprintf(s.Out, "%-24s %s\n", "SNAPSHOT", "TABLE + CREATION TIME")
	for _, d := range resp.GetSnapshots() {
		flush := ""
		if d.GetSkipFlush() {
			flush = ", SKIP_FLUSH"
		}
		fmt.Fprintf(s.Out, " %-23s %s (%s) %d region(s), %d file(s), %d bytes%s\n", d.GetName(), tableName(d.GetTable()),
			formatTimestamp(d.GetCreatedMs()), d.GetRegions(), d.GetFiles(), d.GetSizeBytes(), flush)
	}
	fmt.Fprintf(s.Out, "%d row(s)\n", len(resp.GetSnapshots()))
	return nil
}

func (s *Shell) deleteSnapshot(ctx context.Context, args []Value) error {
	name, err := str(args, 0, "snapshot name")
	if err != nil {
		return err
	}
	return s.master(ctx, func(ctx context.Context, m pb.MasterClient) error {
		_, err := m.DeleteSnapshot(ctx, &pb.SnapshotNameRequest{Name: name})
		return err
	})
}

func (s *Shell) cloneSnapshot(ctx context.Context, args []Value) error {
	name, err := str(args, 0, "snapshot name")
	if err != nil {
		return err
	}
	t, err := str(args, 1, "table")
	if err != nil {
		return err
	}
	until, err := untilOption(args, 2, "clone_snapshot")
	if err != nil {
		return err
	}
	return s.Client.MasterWait(ctx, func(ctx context.Context, m pb.MasterClient) error {
		_, err := m.CloneSnapshot(ctx, &pb.CloneSnapshotRequest{Name: name, Table: client.ParseTableName(t), UntilMs: until})
		return err
	})
}

func (s *Shell) restoreSnapshot(ctx context.Context, args []Value) error {
	name, err := str(args, 0, "snapshot name")
	if err != nil {
		return err
	}
	until, err := untilOption(args, 1, "restore_snapshot")
	if err != nil {
		return err
	}
	return s.Client.MasterWait(ctx, func(ctx context.Context, m pb.MasterClient) error {
		_, err := m.RestoreSnapshot(ctx, &pb.SnapshotNameRequest{Name: name, UntilMs: until})
		return err
	})
}

// untilOption reads the optional {UNTIL => time} of clone_snapshot and restore_snapshot
// (point-in-time recovery, a Cellstore extension): a time as RFC 3339 text or Unix
// milliseconds. 0: none.
func untilOption(args []Value, i int, verb string) (int64, error) {
	opts, err := optHash(args, i)
	if err != nil {
		return 0, err
	}
	var until int64
	for _, k := range opts.Keys {
		if k != "UNTIL" {
			return 0, usage("unknown %s option %s (UNTIL => '2006-01-02T15:04:05Z' recovers to a point in time)", verb, k)
		}
		v := opts.Map[k]
		if v.Kind == Int {
			until = v.Int
			continue
		}
		ts, err := time.Parse(time.RFC3339Nano, v.Text())
		if err != nil {
			return 0, usage("%s: UNTIL must be a time such as '2006-01-02T15:04:05Z' or Unix milliseconds, got %s", verb, v.Text())
		}
		until = ts.UnixMilli()
	}
	return until, nil
}

// archiveWAL is archive_wal (a Cellstore extension, Postgres's pg_switch_wal): the WAL of every
// live region server goes to the backup location now.
func (s *Shell) archiveWAL(ctx context.Context, _ []Value) error {
	return s.Client.MasterWait(ctx, func(ctx context.Context, m pb.MasterClient) error {
		resp, err := m.ArchiveClusterWAL(ctx, &pb.ArchiveClusterWALRequest{})
		if err == nil {
			fmt.Fprintf(s.Out, "archived %d WAL unit(s) of %d region server(s)\n", resp.GetUnits(), resp.GetServers())
		}
		return err
	})
}
