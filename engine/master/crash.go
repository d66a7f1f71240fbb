package master

import (
	"context"
	"fmt"
	"math"
	"path"
	"slices"
	"strconv"
	"time"

	"google.golang.org/protobuf/proto"

	pb "github.com/cellstore/cellstore/engine/api/cellstore/v1"
	"github.com/cellstore/cellstore/engine/layout"
	"github.com/cellstore/cellstore/engine/storage"
	"github.com/cellstore/cellstore/engine/wal"
)

// Crash recovery of a dead region server process (HBase's ServerCrashProcedure), one persisted
// record per process, dead/<WAL dir>, whose step says how far it got:
//
//	FENCE   rename wal/<dir> to wal/<dir>-splitting and sync wal/: the server, should it still
//	        run, can no longer roll its log and must stop (a vanished WAL directory is fatal to it)
//	SPLIT   split the fenced logs into recovered.edits of each region, skipping what the region
//	        had flushed
//	ASSIGN  take the server's regions off it (one catalog write with the step change) and assign
//	        them elsewhere; an open replays the recovered edits
//	WAIT    when every one of them is settled, archive the fenced logs, forget the server and
//	        delete the record
//
// Each step is idempotent, so a master that takes over redoes the recorded step and goes on.

// deadPendingLocked: that process of the server is dead and its regions are not taken off it
// yet (they wait for the log split).
func (m *Master) deadPendingLocked(name string, startCode int64) bool {
	d := m.st.dead[layout.WALDirName(name, startCode)]
	return d != nil && d.d.GetStep() < pb.DeadServerStep_DEAD_SERVER_STEP_WAIT
}

// serverDiedLocked starts the recovery of a dead server process (idempotent).
func (m *Master) serverDiedLocked(name string, startCode int64) error {
	dir := layout.WALDirName(name, startCode)
	if m.st.dead[dir] != nil {
		return nil
	}
	var b batch
	b.putDead(&pb.DeadServer{Server: name, StartCode: startCode, WalDir: dir,
		Step: pb.DeadServerStep_DEAD_SERVER_STEP_FENCE, DeclaredMs: m.clock().UnixMilli()})
	if row := m.st.servers[name]; row != nil && row.GetStartCode() == startCode {
		nr := proto.CloneOf(row)
		nr.StartCode, nr.AdminAddress = 0, ""
		b.putServer(nr)
	}
	if err := m.commit(&b); err != nil {
		return err
	}
	if s, ok := m.reg.Get(name); !ok || !s.Live || s.StartCode == startCode {
		delete(m.loads, name)
	}
	if sc, ok := m.stoppingSrv[name]; ok && sc == startCode {
		delete(m.stoppingSrv, name)
		m.log.Info("region server stopped: recovering its log", "server", name, "start_code", startCode, "wal_dir", dir)
		return nil
	}
	m.metrics.serverCrashes.Inc()
	m.log.Warn("recovering dead region server", "server", name, "start_code", startCode, "wal_dir", dir)
	return nil
}

// progressDeadLocked moves every dead-server recovery on.
func (m *Master) progressDeadLocked(now time.Time) error {
	dirs := make([]string, 0, len(m.st.dead))
	for dir := range m.st.dead {
		dirs = append(dirs, dir)
	}
	slices.Sort(dirs)
	for _, dir := range dirs {
		ds := m.st.dead[dir]
		if ds == nil || ds.running || (!ds.lastTry.IsZero() && now.Sub(ds.lastTry) < m.cfg.RetryDelay) {
			continue
		}
		switch ds.d.GetStep() {
		case pb.DeadServerStep_DEAD_SERVER_STEP_FENCE, pb.DeadServerStep_DEAD_SERVER_STEP_SPLIT:
			m.runDeadStepLocked(ds, now)
		case pb.DeadServerStep_DEAD_SERVER_STEP_ASSIGN:
			if err := m.reassignDeadLocked(ds.d); err != nil {
				return err
			}
		case pb.DeadServerStep_DEAD_SERVER_STEP_WAIT:
			if m.deadSettledLocked(ds.d) {
				m.runDeadStepLocked(ds, now)
			}
		}
	}
	return nil
}

// runDeadStepLocked runs a recovery step's I/O on a goroutine and records its result.
func (m *Master) runDeadStepLocked(ds *deadServer, now time.Time) {
	ds.running, ds.lastTry = true, now
	d := ds.d
	var dirs map[string]string
	var flushed map[string]uint64
	if d.GetStep() == pb.DeadServerStep_DEAD_SERVER_STEP_SPLIT {
		// The regions that may have edits in the log: every primary the catalog knows.
		dirs, flushed = map[string]string{}, map[string]uint64{}
		for name, r := range m.st.regions {
			// A split parent never opens again: every edit of it was flushed before its split
			// (the split is refused otherwise), and the janitor may be archiving its directory.
			if r.GetInfo().GetReplicaId() == 0 && !r.GetInfo().GetSplit() {
				dirs[name] = layout.RecoveredEditsDir(r.GetInfo())
				flushed[name] = r.GetMaxFlushedSeq()
			}
		}
	}
	var tables map[string]string
	if d.GetStep() == pb.DeadServerStep_DEAD_SERVER_STEP_WAIT && m.cfg.WALArchive {
		// The tables of the regions whose edits the archive gets (a server records each region
		// it opens, but may have died before it did).
		tables = map[string]string{}
		for name, r := range m.st.regions {
			if r.GetInfo().GetReplicaId() == 0 {
				tables[name] = layout.TableKey(r.GetInfo().GetTable())
			}
		}
	}
	next := proto.CloneOf(d)
	actx := m.activeCtx
	m.runIO(func() (err error) {
		switch d.GetStep() {
		case pb.DeadServerStep_DEAD_SERVER_STEP_FENCE:
			start := time.Now()
			err = m.fence(d.GetWalDir())
			next.Step = pb.DeadServerStep_DEAD_SERVER_STEP_SPLIT
			if err == nil {
				m.log.Info("fenced a dead server's log", "server", d.GetServer(), "wal_dir", d.GetWalDir(), "took", time.Since(start).Round(time.Millisecond))
			}
		case pb.DeadServerStep_DEAD_SERVER_STEP_SPLIT:
			var res *wal.SplitResult
			start := time.Now()
			res, err = m.split(d.GetWalDir(), dirs, flushed)
			if err == nil {
				next.Step = pb.DeadServerStep_DEAD_SERVER_STEP_ASSIGN
				next.SplitFiles, next.SplitEdits = int32(len(res.Files)), int64(res.Edits)
				m.metrics.splitEdits.Add(float64(res.Edits))
				m.log.Info("split a dead server's logs", "server", d.GetServer(), "wal_dir", d.GetWalDir(),
					"recovered_edits_files", len(res.Files), "edits", res.Edits, "took", time.Since(start).Round(time.Millisecond))
			}
		case pb.DeadServerStep_DEAD_SERVER_STEP_WAIT:
			if m.cfg.WALArchive {
				if err = m.archiveDeadLog(actx, d.GetWalDir(), tables); err != nil {
					return err
				}
			}
			err = m.archiveWAL(d.GetWalDir())
		}
		return err
	}, func(err error) {
		cur := m.st.dead[d.GetWalDir()]
		if cur == nil {
			return
		}
		cur.running = false
		if err != nil {
			m.log.Error("dead server recovery step failed: retrying", "server", d.GetServer(), "step", d.GetStep(), "err", err)
			cur.lastTry = m.clock()
			return
		}
		cur.lastTry = time.Time{} // the next step runs at the next tick, not a retry delay later
		var b batch
		if d.GetStep() == pb.DeadServerStep_DEAD_SERVER_STEP_WAIT {
			m.finishDeadLocked(&b, d)
		} else {
			b.putDead(next)
		}
		if m.commit(&b) != nil {
			return
		}
		if next.GetStep() == pb.DeadServerStep_DEAD_SERVER_STEP_ASSIGN && d.GetStep() != pb.DeadServerStep_DEAD_SERVER_STEP_WAIT {
			_ = m.reassignDeadLocked(next)
		}
	})
}

// fence renames a dead server's WAL directory to <dir>-splitting and makes the rename durable;
// on a bucket it puts fence markers on the server's object log (wal.FenceObjectLog).
func (m *Master) fence(dir string) error {
	if b := m.cfg.Bucket; b != nil {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		_, err := wal.FenceObjectLog(ctx, b, path.Join("wal", dir), "master "+m.cfg.Address)
		return err
	}
	fs := m.cfg.FS
	src := path.Join("wal", dir)
	dst := src + layout.SplittingSuffix
	if err := fs.MkdirAll("wal"); err != nil {
		return err
	}
	srcOK, err := storage.Exists(fs, src)
	if err != nil {
		return err
	}
	dstOK, err := storage.Exists(fs, dst)
	if err != nil {
		return err
	}
	switch {
	case srcOK && !dstOK:
		if err := fs.Rename(src, dst); err != nil {
			return fmt.Errorf("fence %s: %w", src, err)
		}
	case srcOK && dstOK:
		// Fenced before, and the directory came back (a process that ignored the fence): move
		// what it wrote into the fenced directory, keeping names that do not clash.
		names, err := fs.List(src)
		if err != nil {
			return err
		}
		for _, n := range names {
			if ok, _ := storage.Exists(fs, path.Join(dst, n)); ok {
				m.log.Error("WAL file written after the fence clashes with a fenced one: left out of the split", "file", path.Join(src, n))
				continue
			}
			if err := fs.Rename(path.Join(src, n), path.Join(dst, n)); err != nil {
				return err
			}
		}
		if err := fs.SyncDir(dst); err != nil {
			return err
		}
		if err := fs.RemoveAll(src); err != nil {
			return err
		}
	}
	return fs.SyncDir("wal")
}

// split writes the recovered edits of every known region found in a fenced WAL directory.
func (m *Master) split(dir string, dirs map[string]string, flushed map[string]uint64) (*wal.SplitResult, error) {
	flushedSeq := func(region string) uint64 {
		if _, ok := dirs[region]; !ok {
			return math.MaxUint64 // not a region any more (its table was dropped): skip
		}
		return flushed[region]
	}
	if b := m.cfg.Bucket; b != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
		defer cancel()
		return wal.SplitObjectLog(ctx, wal.SplitObjectLogOptions{Bucket: b, Prefix: path.Join("wal", dir),
			RecoveredEditsDir: func(region string) string { return dirs[region] }, FlushedSeq: flushedSeq})
	}
	src := path.Join("wal", dir+layout.SplittingSuffix)
	ok, err := storage.Exists(m.cfg.FS, src)
	if err != nil {
		return nil, err
	}
	if !ok {
		return &wal.SplitResult{MaxSeq: map[string]uint64{}}, nil // the process never wrote a log
	}
	res, err := wal.Split(wal.SplitOptions{
		FS:                m.cfg.FS,
		Dir:               src,
		RecoveredEditsDir: func(region string) string { return dirs[region] },
		FlushedSeq:        flushedSeq,
	})
	for _, t := range tornTails(res, err) {
		// A killed server's last segment (of each WAL group) ends in its preallocated zeros
		// (64 MiB by default): cut them off before the directory is archived, or every crash
		// keeps a segment's worth of disk until the archive is cleaned. A crash before this
		// point splits again.
		if terr := m.cfg.FS.Truncate(t.File, t.Offset); terr != nil {
			m.log.Warn("could not cut the torn tail of a split WAL segment (it stays in the archive at full size)",
				"file", t.File, "offset", t.Offset, "error", terr)
		}
	}
	return res, err
}

func tornTails(res *wal.SplitResult, err error) []wal.TornTail {
	if err != nil || res == nil {
		return nil
	}
	return res.TornTails
}

// archiveDeadLog copies to the WAL archive (Config.WALArchive) the units of a dead server's log
// that it had not archived, and records the tables of their regions.
func (m *Master) archiveDeadLog(actx context.Context, dir string, tables map[string]string) error {
	ctx, cancel := context.WithTimeout(actx, 10*time.Minute)
	defer cancel()
	t := wal.ArchiveTarget{Bucket: m.cfg.Backup, Log: dir}
	seen := map[string]bool{}
	onRegion := func(r string) { seen[r] = true }
	var units int
	var err error
	if b := m.cfg.Bucket; b != nil {
		units, err = wal.ArchiveDeadObjectLog(ctx, b, path.Join("wal", dir), t, onRegion)
	} else {
		src := path.Join("wal", dir+layout.SplittingSuffix)
		ok, serr := storage.Exists(m.cfg.FS, src)
		if serr != nil || !ok {
			return serr
		}
		units, err = wal.ArchiveDeadDir(ctx, m.cfg.FS, src, t, onRegion)
	}
	if err != nil {
		return fmt.Errorf("archiving the WAL of %s: %w", dir, err)
	}
	for r := range seen {
		tk, ok := tables[r]
		if !ok {
			m.log.Warn("an archived WAL edit belongs to a region the catalog no longer has (its table was dropped): point-in-time recovery cannot place it unless its server recorded it", "region", r, "wal_dir", dir)
			continue
		}
		if err := wal.RecordRegion(ctx, m.cfg.Backup, r, tk); err != nil {
			return err
		}
	}
	if units > 0 {
		m.log.Info("archived a dead server's WAL", "wal_dir", dir, "units", units, "regions", len(seen))
	}
	return nil
}

// archiveWAL moves a split WAL directory to archive/wal/; on a bucket it deletes the split object
// log, keeping its fence markers (wal.DeleteObjectLog).
func (m *Master) archiveWAL(dir string) error {
	if b := m.cfg.Bucket; b != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
		defer cancel()
		return wal.DeleteObjectLog(ctx, b, path.Join("wal", dir))
	}
	fs := m.cfg.FS
	src := path.Join("wal", dir+layout.SplittingSuffix)
	ok, err := storage.Exists(fs, src)
	if err != nil || !ok {
		return err
	}
	if err := fs.MkdirAll(path.Join("archive", "wal")); err != nil {
		return err
	}
	dst := path.Join("archive", "wal", dir)
	if ok, _ := storage.Exists(fs, dst); ok {
		dst += "." + strconv.FormatInt(m.clock().UnixMilli(), 10)
	}
	if err := fs.Rename(src, dst); err != nil {
		return err
	}
	if err := fs.SyncDir("wal"); err != nil {
		return err
	}
	return fs.SyncDir(path.Join("archive", "wal"))
}

// maxBatchBytes bounds the catalog writes the master's loop makes of many regions (a dead
// server's reassignment, placements, closes of a table being disabled, a group of reports): the
// catalog's log takes at most 8 MiB in one record on object storage. A write stops taking regions
// once past it (so it may end a region's rows beyond it); the rest go in the next.
var maxBatchBytes = 2 << 20

// reassignDeadLocked takes a dead server's regions off it, in one catalog write with the step
// change to WAIT — or, when they are too many for one write, in writes of at most
// maxBatchBytes, each adding the regions it took to the record's list (the step stays ASSIGN
// until the last: a master that takes over goes on with the regions still on the server).
func (m *Master) reassignDeadLocked(d *pb.DeadServer) error {
	var b batch
	var names []string
	for name, r := range m.st.regions {
		if r.GetServer() == d.GetServer() && r.GetServerStartCode() == d.GetStartCode() {
			names = append(names, name)
		}
	}
	slices.Sort(names)
	taken, from := d.GetRegions(), 0 // taken by earlier writes; names[from:] not yet listed
	for i, name := range names {
		if i > from && b.full() {
			part := proto.CloneOf(d)
			part.Regions = slices.Concat(taken, names[from:i])
			b.putDead(part)
			if err := m.commit(&b); err != nil {
				return err
			}
			m.log.Info("reassigning a dead server's regions, in parts", "server", d.GetServer(), "regions", i-from, "so_far", len(part.Regions))
			taken, from, b = part.Regions, i, batch{}
		}
		r, p := m.st.regions[name], m.st.procs[name]
		switch {
		case p == nil:
			if m.tableWantsOpenLocked(r) {
				m.assignLocked(&b, r)
			} else {
				m.finishClosedLocked(&b, r)
			}
		case p.p.GetStep() == stepOpen:
			nr := proto.CloneOf(r)
			nr.State, nr.Server, nr.ServerStartCode, nr.StateSinceMs = stateOffline, "", 0, m.clock().UnixMilli()
			np := proto.CloneOf(p.p)
			np.Target = ""
			b.putRegion(nr)
			b.putProc(np)
		default:
			m.closedLocked(&b, r, p.p)
		}
	}
	next := proto.CloneOf(d)
	next.Step = pb.DeadServerStep_DEAD_SERVER_STEP_WAIT
	next.Regions = slices.Concat(taken, names[from:])
	b.putDead(next)
	if err := m.commit(&b); err != nil {
		return err
	}
	m.log.Info("reassigning a dead server's regions", "server", d.GetServer(), "regions", len(names))
	return nil
}

// deadSettledLocked: every region the dead server held is out of transition.
func (m *Master) deadSettledLocked(d *pb.DeadServer) bool {
	for _, name := range d.GetRegions() {
		r := m.st.regions[name]
		if r == nil {
			continue
		}
		if m.st.procs[name] != nil || r.GetState() == stateOpening || r.GetState() == stateClosing {
			return false
		}
	}
	return true
}

// finishDeadLocked ends a recovery: the record goes, and the server is forgotten unless it came
// back or an operator's mark (drain, zone) must be kept.
func (m *Master) finishDeadLocked(b *batch, d *pb.DeadServer) {
	b.deleteDead(d.GetWalDir())
	name := d.GetServer()
	if s, ok := m.reg.Get(name); ok && !s.Live {
		m.reg.Forget(name)
	}
	if row := m.st.servers[name]; row != nil && row.GetStartCode() == 0 && !row.GetDraining() && row.GetZone() == "" {
		b.deleteServer(name)
	}
	took := m.clock().Sub(time.UnixMilli(d.GetDeclaredMs()))
	m.metrics.recoveryTime.Observe(took.Seconds())
	m.log.Info("dead server recovered", "server", name, "start_code", d.GetStartCode(), "regions", len(d.GetRegions()),
		"took", took.Round(time.Millisecond))
}
