package master

import (
	"bytes"
	"context"
	"fmt"
	"path"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	pb "github.com/cellstore/cellstore/engine/api/cellstore/v1"
	"github.com/cellstore/cellstore/engine/cell"
	"github.com/cellstore/cellstore/engine/layout"
	"github.com/cellstore/cellstore/engine/storage"
	"github.com/cellstore/cellstore/engine/wal"
)

// Point-in-time recovery: a clone or restore of a snapshot with a target time (until_ms) gets,
// on top of the snapshot's files, the edits of the WAL archive (Config.WALArchive, at
// Config.Backup) made after the snapshot and up to the target: before its regions open, the
// master writes those edits into each new region's recovered.edits, which the region replays
// when it opens, as after a crash.
//
// Which edits: those of the snapshot's regions with a sequence id above what the snapshot's
// files of that region hold, and those of regions made later from them (splits, merges: the
// archive records each region's table) written from the snapshot's time on; all with a write
// time at or before the target. The archive is read in sequence-id order (wal.ReadArchive),
// each edit's cells go to the new region holding their rows, renumbered above the region's
// files so that they replay in the order they were made.

// recoveredObjectBytes cuts a region's recovered edits into objects of about this size;
// recoveredBufferBytes bounds what all the regions' buffers hold together.
const (
	recoveredObjectBytes = 8 << 20
	recoveredBufferBytes = 64 << 20
)

// archiveSkew is how much older than a flushed snapshot's first flush an archive object may be
// and still hold edits its files lack (clocks differ).
const archiveSkew = 10 * time.Minute

// replayFrom is the time a point-in-time recovery from man replays the archive from: the start of
// its flushes (a region flushed first misses the edits made while the others flush), or, in a
// manifest of an older master, its time.
func replayFrom(man *pb.SnapshotManifest) time.Time {
	if ms := man.GetFlushStartedMs(); ms > 0 {
		return time.UnixMilli(ms)
	}
	return time.UnixMilli(man.GetCreatedMs())
}

// checkArchiveKept refuses a point-in-time recovery from man when the WAL archive was pruned past
// the edits it replays (from archiveSkew before replayFrom): replayed with a gap, writes would be
// lost and deleted rows come back from the snapshot's files. The replay checks again once it has
// read the archive: a prune advances the mark before it deletes.
func checkArchiveKept(ctx context.Context, bucket storage.Bucket, man *pb.SnapshotManifest) error {
	pruned, err := wal.ArchivePrunedThrough(ctx, bucket)
	if err != nil {
		return err
	}
	if from := replayFrom(man).Add(-archiveSkew); !pruned.IsZero() && !pruned.Before(from) {
		return errPrecondition("the WAL archive at the backup location was pruned through %s, and snapshot %s was taken at %s: edits made between the two are gone. "+
			"Recover from a snapshot taken after %s, and keep the archive at least as long as the backups (--wal-archive-retention)",
			pruned.UTC().Format(time.RFC3339), man.GetName(), replayFrom(man).UTC().Format(time.RFC3339), pruned.Add(archiveSkew).UTC().Format(time.RFC3339))
	}
	return nil
}

// headerLen is the size of an empty recovered-edits buffer.
func headerLen(*pitrTarget) int { return len(wal.RecoveredEditsHeader(nil)) }

// pitrTarget is one region of the recovered table and the edits it gets.
type pitrTarget struct {
	name  string
	start []byte
	dir   string
	seq   uint64 // the last sequence id given
	n     uint64 // recovered-edits objects written
	buf   []byte
	edits int
	total int64
}

// replayArchive writes the recovered edits of a point-in-time recovery into regions infos (the
// new primaries, in the order of man's regions) and returns how many edits it wrote.
func (m *Master) replayArchive(ctx context.Context, man *pb.SnapshotManifest, infos []*pb.RegionInfo, untilMs int64) (int64, error) {
	if m.cfg.Backup == nil {
		return 0, fmt.Errorf("point-in-time recovery reads the WAL archive at the backup location: start the master with --backup-dir or --backup-s3-*")
	}
	if len(infos) != len(man.GetRegions()) {
		return 0, fmt.Errorf("snapshot %s has %d regions, %d given", man.GetName(), len(man.GetRegions()), len(infos))
	}
	src := layout.TableKey(man.GetTable().GetName())
	regions, err := wal.ArchivedRegions(ctx, m.cfg.Backup)
	if err != nil {
		return 0, err
	}
	st := m.regionStorage()
	snapSeq := map[string]uint64{}                 // the lowest of the families' newest files
	snapFamilies := map[string]map[string]uint64{} // each family's newest file
	targets := make([]*pitrTarget, len(infos))
	for i, sr := range man.GetRegions() {
		rn := layout.RegionName(sr.GetRegionId())
		snapSeq[rn], snapFamilies[rn] = filesHoldThrough(sr, man.GetTable())
		// Replayed edits are numbered above every file's, so the region's open applies them.
		var maxSeq uint64
		for _, seq := range snapFamilies[rn] {
			maxSeq = max(maxSeq, seq)
		}
		t := &pitrTarget{name: infos[i].GetName(), start: infos[i].GetStartKey(), dir: layout.RecoveredEditsDir(infos[i]), seq: maxSeq}
		t.buf = wal.RecoveredEditsHeader(nil)
		targets[i] = t
		// What an earlier attempt wrote goes: the objects are written again from the start.
		var old []string
		if err := st.WalkFiles(t.dir, func(p string) error { old = append(old, p); return nil }); err != nil {
			return 0, err
		}
		for _, p := range old {
			if err := st.DeleteObject(p); err != nil {
				return 0, err
			}
		}
	}
	write := func(t *pitrTarget) error {
		if t.edits == 0 {
			return nil
		}
		t.n++
		if err := st.WriteObject(path.Join(t.dir, wal.RecoveredEditsName(t.n)), t.buf, false); err != nil {
			return fmt.Errorf("writing the recovered edits of region %s: %w", t.name, err)
		}
		t.buf, t.edits = wal.RecoveredEditsHeader(t.buf[:0]), 0
		return nil
	}
	untilNs := (untilMs + 1) * int64(time.Millisecond) // every edit of the target's millisecond
	fromNs := replayFrom(man).UnixNano()
	// Archive objects written well before a flushed snapshot hold only edits its files have
	// (not so for SKIP_FLUSH: edits then in memstores are only in the log).
	var since time.Time
	if !man.GetSkipFlush() {
		since = replayFrom(man).Add(-archiveSkew)
	}
	// What the regions' buffers hold together is bounded: past it, the largest is written.
	var buffered int
	var total int64
	var rec wal.Edit
	var kept []cell.KeyValue
	stats, err := wal.ReadArchiveSince(ctx, m.cfg.Backup, since, time.Unix(0, untilNs), func(_ string, e *wal.Edit) error {
		if e.WriteTime >= untilNs {
			return nil
		}
		name := string(e.Region)
		cells := e.Cells
		if s, ok := snapSeq[name]; ok {
			if e.Seq <= s {
				return nil // in the snapshot's files
			}
			// Only the cells of families whose files do not hold them: a family flushes on its
			// own, and an edit its files hold is not written twice (a delete marker compacted
			// away since would come back).
			fams := snapFamilies[name]
			kept = kept[:0]
			for _, c := range e.Cells {
				if e.Seq > fams[string(cell.KeyValue(c).Key().Family())] {
					kept = append(kept, c)
				}
			}
			cells = kept
		} else if regions[name] != src || e.WriteTime < fromNs {
			return nil
		}
		// The cells, grouped by the region holding their row (an edit of a region merged after
		// the snapshot may span several).
		for i := 0; i < len(cells); {
			t := routeRow(targets, cell.KeyValue(cells[i]).Key().Row())
			j := i + 1
			for j < len(cells) && routeRow(targets, cell.KeyValue(cells[j]).Key().Row()) == t {
				j++
			}
			t.seq++
			rec = wal.Edit{Region: []byte(t.name), Seq: t.seq, WriteTime: e.WriteTime, Cells: cells[i:j]}
			var err error
			before := len(t.buf)
			if t.buf, err = wal.AppendEditRecord(t.buf, &rec); err != nil {
				return err
			}
			buffered += len(t.buf) - before
			t.edits++
			t.total++
			total++
			if len(t.buf) >= recoveredObjectBytes || buffered >= recoveredBufferBytes {
				big := t
				for _, o := range targets {
					if len(o.buf) > len(big.buf) {
						big = o
					}
				}
				buffered -= len(big.buf) - headerLen(big)
				if err := write(big); err != nil {
					return err
				}
			}
			i = j
		}
		return nil
	})
	if err != nil {
		return 0, err
	}
	// Pruned while it was read (here, or at a cluster sharing the location)? Objects it needed may
	// have gone before the listing, leaving no gap to see.
	if err := checkArchiveKept(ctx, m.cfg.Backup, man); err != nil {
		return 0, err
	}
	for _, t := range targets {
		if err := write(t); err != nil {
			return 0, err
		}
	}
	until := time.UnixMilli(untilMs).UTC()
	if stats.Edits > 0 && stats.Oldest > fromNs && man.GetSkipFlush() {
		m.log.Warn("point-in-time recovery: the WAL archive begins after the snapshot was taken; edits between the two are not in it (archived WAL past its retention, or archiving turned on later)",
			"snapshot", man.GetName(), "archive_oldest", time.Unix(0, stats.Oldest).UTC())
	}
	if stats.Edits == 0 || stats.Newest < untilMs*int64(time.Millisecond) {
		m.log.Warn("point-in-time recovery: the WAL archive holds nothing written at or after the target time; if writes were made up to it, the last of them may not have been archived yet (the region servers archive every --wal-archive-interval)",
			"snapshot", man.GetName(), "until", until, "archive_newest", time.Unix(0, stats.Newest).UTC())
	}
	m.log.Info("point-in-time recovery: archived edits written into the regions", "snapshot", man.GetName(), "until", until,
		"edits", total, "archive_edits", stats.Edits, "archive_logs", stats.Logs)
	return total, nil
}

// filesHoldThrough returns, for a snapshot region, the highest sequence id in each family's files
// and the lowest of those over the table's families (0 for a family with none): edits at or
// below the lowest are all in the files. Families flush on their own (the default flush policy
// flushes only the large ones), so a small family's edits below a large family's newest file may
// have been only in its memstore when a SKIP_FLUSH snapshot was taken; the replay keeps an edit's
// cells of each family above that family's own files.
func filesHoldThrough(sr *pb.SnapshotRegion, td *pb.TableDescriptor) (uint64, map[string]uint64) {
	perFamily := map[string]uint64{}
	for _, f := range sr.GetFiles() {
		perFamily[f.GetFamily()] = max(perFamily[f.GetFamily()], f.GetMaxSeq())
	}
	var through uint64
	for i, fd := range td.GetFamilies() {
		seq := perFamily[string(fd.GetName())]
		if i == 0 || seq < through {
			through = seq
		}
	}
	return through, perFamily
}

// routeRow is the target region whose range holds row (targets sorted by start key, the first
// starting at the empty key).
func routeRow(targets []*pitrTarget, row []byte) *pitrTarget {
	i := sort.Search(len(targets), func(i int) bool { return bytes.Compare(targets[i].start, row) > 0 })
	return targets[max(i-1, 0)]
}

// archiveClusterWAL has every live region server archive its WAL now (ArchiveClusterWAL).
func (m *Master) archiveClusterWAL(ctx context.Context) (*pb.ArchiveClusterWALResponse, error) {
	if !m.cfg.WALArchive {
		return nil, errPrecondition("the cluster does not archive its WAL: run the masters and region servers with --wal-archive")
	}
	if err := m.lock(); err != nil {
		return nil, err
	}
	var live []ServerState
	for _, s := range m.reg.All() {
		if s.Live && s.AdminAddress != "" {
			live = append(live, s)
		}
	}
	m.mu.Unlock()
	type result struct {
		units int32
		err   error
	}
	results := make([]result, len(live))
	var wg sync.WaitGroup
	for i, s := range live {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, err := m.admin.client(s.AdminAddress)
			if err != nil {
				results[i].err = err
				return
			}
			cctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
			defer cancel()
			resp, err := c.ArchiveWAL(cctx, &pb.ArchiveWALRequest{})
			results[i] = result{resp.GetUnits(), err}
		}()
	}
	wg.Wait()
	resp := &pb.ArchiveClusterWALResponse{Servers: int32(len(live))}
	var failed []string
	for i, r := range results {
		resp.Units += int64(r.units)
		if r.err != nil {
			failed = append(failed, fmt.Sprintf("%s: %v", live[i].Name, r.err))
		}
	}
	if len(failed) > 0 {
		return nil, errDetail(pb.ErrorCode_ERROR_CODE_FAILED_PRECONDITION, true, "archiving the WAL failed on %d of %d servers (retry): %s",
			len(failed), len(live), strings.Join(failed, "; "))
	}
	// The logs of servers that died or stopped (a rolling restart stops each) are archived by
	// their recovery, at its last step: until then their last writes are in no archive.
	if err := m.lock(); err != nil {
		return nil, err
	}
	defer m.mu.Unlock()
	var dead []string
	for dir := range m.st.dead {
		dead = append(dead, dir)
	}
	recovered := func() bool {
		for _, dir := range dead {
			if m.st.dead[dir] != nil {
				return false
			}
		}
		return true
	}
	if done, _ := m.waitFor(ctx, recovered); !done {
		var left []string
		for _, dir := range dead {
			if d := m.st.dead[dir]; d != nil {
				left = append(left, d.d.GetServer())
			}
		}
		slices.Sort(left)
		return nil, errDetail(pb.ErrorCode_ERROR_CODE_FAILED_PRECONDITION, true,
			"the live servers archived their WAL, but the logs of servers that stopped or died (%s) are archived when their recovery ends: retry", strings.Join(left, ", "))
	}
	m.log.Info("archived the WAL of every live region server", "servers", len(live), "units", resp.Units, "recovered_servers", len(dead))
	return resp, nil
}
