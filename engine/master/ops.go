package master

import (
	"context"
	"errors"
	"path"
	"slices"
	"strconv"
	"strings"
	"time"

	"google.golang.org/protobuf/proto"

	pb "github.com/cellstore/cellstore/engine/api/cellstore/v1"
	"github.com/cellstore/cellstore/engine/layout"
	"github.com/cellstore/cellstore/engine/storage"
)

// sweepEvery is the period of the safety-net sweep over every region.
const sweepEvery = 10 * time.Second

// queuedMove is a move decided by the balancer or a drain, started when the bound on moves in
// flight allows (not persisted: a new master's balancer decides again).
type queuedMove struct {
	region, from, to string
}

// progressTablesLocked advances enabling, disabling, deleted and truncated tables.
func (m *Master) progressTablesLocked(now time.Time) error {
	keys := make([]string, 0, len(m.st.tables))
	for k := range m.st.tables {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	var b batch
	for _, key := range keys {
		t := m.st.tables[key]
		if t.GetDeleting() {
			if !m.busyTables[key] {
				m.busyTables[key] = true
				m.runTableIO(key, nil, true)
			}
			continue
		}
		if t.GetRestore() != nil {
			m.progressRestoreLocked(key, t)
			continue
		}
		if len(t.GetArchiveDirs()) > 0 && !m.busyTables[key] {
			m.busyTables[key] = true
			m.runTableIO(key, slices.Clone(t.GetArchiveDirs()), false)
		}
		switch t.GetState() {
		case pb.TableState_TABLE_STATE_ENABLING:
			busy := false
			for _, r := range m.st.tableRegions(key) {
				if m.st.procs[r.GetInfo().GetName()] != nil {
					busy = true
					continue
				}
				if name := r.GetInfo().GetName(); r.GetServer() == "" && (r.GetState() == stateOffline || r.GetState() == stateClosed) &&
					!m.splitBlocksLocked(name) && !m.mergeBlocksLocked(name) {
					// EnableTable assigns as many as its write takes (maxBatchBytes): the rest here.
					if !b.full() {
						m.assignLocked(&b, r)
					}
					busy = true
				}
			}
			if !busy {
				nt := proto.CloneOf(t)
				nt.State, nt.StateSinceMs = pb.TableState_TABLE_STATE_ENABLED, now.UnixMilli()
				b.putTable(nt)
				m.log.Info("table enabled", "table", key)
			}
		case pb.TableState_TABLE_STATE_DISABLING:
			done := true
			for _, r := range m.st.tableRegions(key) {
				name := r.GetInfo().GetName()
				if m.st.procs[name] != nil {
					done = false
					continue
				}
				switch r.GetState() {
				case stateOpen, stateOpening, stateClosing:
					if r.GetServer() != "" && !m.deadPendingLocked(r.GetServer(), r.GetServerStartCode()) && !b.full() {
						m.closeLocked(&b, r, kindUnassign, closeOpts{}) // the rest at the next tick when full
					}
					done = false
				case stateClosed:
				default:
					m.finishClosedLocked(&b, r)
				}
			}
			if done {
				nt := proto.CloneOf(t)
				nt.State, nt.StateSinceMs = pb.TableState_TABLE_STATE_DISABLED, now.UnixMilli()
				b.putTable(nt)
				m.log.Info("table disabled", "table", key)
			}
		}
	}
	return m.commit(&b)
}

// runTableIO archives a table's directory (drop) or replaced region directories (truncate) and
// records it.
func (m *Master) runTableIO(key string, dirs []string, drop bool) {
	t := m.st.tables[key]
	tn := proto.CloneOf(t.GetTable().GetName())
	m.runIO(func() (err error) {
		if drop {
			// Every file keeps its path under archive/ (region ids are never reused, so a table
			// dropped again under the same name adds its own region directories): snapshots and
			// tables cloned from them find their files there.
			if err = m.archiveDir(layout.TableDir(tn), path.Join("archive", layout.TableDir(tn))); err == nil {
				err = m.deleteLinkManifests(tn)
			}
		} else {
			for _, d := range dirs {
				if err = m.archiveDir(d, path.Join("archive", d)); err != nil {
					break
				}
			}
		}
		return err
	}, func(err error) {
		delete(m.busyTables, key)
		if err != nil {
			m.log.Error("archiving table data failed: retrying", "table", key, "err", err)
			return
		}
		cur := m.st.tables[key]
		if cur == nil {
			return
		}
		var b batch
		if drop {
			for _, r := range append(m.st.tableRegions(key), m.st.splitParents(key)...) {
				b.deleteRegion(r.GetInfo().GetName())
				if m.st.procs[r.GetInfo().GetName()] != nil {
					b.deleteProc(r.GetInfo().GetName())
				}
			}
			b.deleteTable(key)
			m.log.Info("table deleted; its files are in archive/ until the cleaner deletes them (--archive-ttl) unless a snapshot names them", "table", key)
		} else {
			nt := proto.CloneOf(cur)
			nt.ArchiveDirs = slices.DeleteFunc(nt.ArchiveDirs, func(d string) bool { return slices.Contains(dirs, d) })
			b.putTable(nt)
		}
		_ = m.commit(&b)
	})
}

// archiveDir moves a directory under archive/ (nothing when it does not exist). On a bucket it
// copies every object under src/ to the same place under dst/ and deletes it (no rename there);
// it is idempotent, a retry finishes what a failed run left.
func (m *Master) archiveDir(src, dst string) error {
	if b := m.cfg.Bucket; b != nil {
		return archiveObjects(b, src, dst)
	}
	fs := m.cfg.FS
	ok, err := storage.Exists(fs, src)
	if err != nil || !ok {
		return err
	}
	if err := fs.MkdirAll(path.Dir(dst)); err != nil {
		return err
	}
	if di, err := fs.Stat(dst); err == nil {
		if si, err := fs.Stat(src); err == nil && si.IsDir && di.IsDir {
			// Merge: the archive keeps every path (a table dropped again under its name adds
			// its own region directories); an interrupted merge is finished by a retry.
			names, err := fs.List(src)
			if err != nil {
				return err
			}
			for _, n := range names {
				if err := m.archiveDir(path.Join(src, n), path.Join(dst, n)); err != nil {
					return err
				}
			}
			if err := fs.Remove(src); err != nil {
				return err
			}
			return fs.SyncDir(path.Dir(src))
		}
		dst += "." + strconv.FormatInt(m.clock().UnixNano(), 10)
	}
	if err := fs.Rename(src, dst); err != nil {
		return err
	}
	if err := fs.SyncDir(path.Dir(src)); err != nil {
		return err
	}
	return fs.SyncDir(path.Dir(dst))
}

// sweepLocked is a safety net run every sweepEvery: regions of enabled tables that are offline
// without a procedure get one, and regions on servers nobody recovers get their server recovered.
func (m *Master) sweepLocked(now time.Time) error {
	if now.Before(m.nextSweep) {
		return nil
	}
	m.nextSweep = now.Add(sweepEvery)
	var b batch
	type proc struct {
		name string
		sc   int64
	}
	var orphans []proc
	for _, r := range m.st.regions {
		name := r.GetInfo().GetName()
		if srv := r.GetServer(); srv != "" {
			if !m.serverLiveLocked(srv, r.GetServerStartCode()) && m.st.dead[layout.WALDirName(srv, r.GetServerStartCode())] == nil {
				orphans = append(orphans, proc{srv, r.GetServerStartCode()})
			}
			continue
		}
		if m.st.procs[name] != nil || !m.tableWantsOpenLocked(r) || m.splitBlocksLocked(name) || m.mergeBlocksLocked(name) {
			continue
		}
		if t := m.st.tables[layout.TableKey(r.GetInfo().GetTable())]; t.GetState() != pb.TableState_TABLE_STATE_ENABLED {
			continue
		}
		if r.GetState() == stateOffline || r.GetState() == stateClosed {
			if b.full() {
				m.nextSweep = now // the rest at the next tick
				continue
			}
			m.assignLocked(&b, r)
		}
	}
	if err := m.commit(&b); err != nil {
		return err
	}
	for _, o := range orphans {
		if err := m.serverDiedLocked(o.name, o.sc); err != nil {
			return err
		}
	}
	return nil
}

// drainLocked queues moves for the regions still on draining servers.
func (m *Master) drainLocked(time.Time) error {
	draining := map[string]bool{}
	for _, s := range m.reg.All() {
		if s.Live && s.Draining {
			draining[s.Name] = true
		}
	}
	if len(draining) == 0 {
		return nil
	}
	var front []queuedMove
	for name, r := range m.st.regions {
		if draining[r.GetServer()] && r.GetState() == stateOpen && m.st.procs[name] == nil && !m.queued[name] {
			front = append(front, queuedMove{region: name, from: r.GetServer()})
			m.queued[name] = true
		}
	}
	slices.SortFunc(front, func(a, b queuedMove) int { return compareStrings(a.region, b.region) })
	m.moveQueue = append(front, m.moveQueue...)
	return nil
}

// startMovesLocked starts queued moves while fewer than MaxMovesInFlight run and, for each, fewer
// than MaxMovesPerServer run from its source and to its destination: a drain's closes at once on
// one server (or the opens on one) share its flushes' PUTs and its CPU, so each region is away longer
// than if they took turns — HBase's region mover moves one region at a time. A move that must wait
// for its server stays in the queue, in its place.
func (m *Master) startMovesLocked(time.Time) error {
	if len(m.moveQueue) == 0 {
		return nil
	}
	inFlight := 0
	perServer := map[string]int{}
	for name, p := range m.st.procs {
		if !p.p.GetBalancer() {
			continue
		}
		inFlight++
		src := m.st.regions[name].GetServer()
		perServer[src]++
		if t := p.p.GetTarget(); t != "" && t != src {
			perServer[t]++
		}
	}
	free := func(server string) bool { return perServer[server] < m.cfg.MaxMovesPerServer }
	var b batch
	var started []string
	var pl *balancerState
	var waiting []queuedMove
	for len(m.moveQueue) > 0 && inFlight < m.cfg.MaxMovesInFlight {
		mv := m.moveQueue[0]
		m.moveQueue = m.moveQueue[1:]
		r := m.st.regions[mv.region]
		if r == nil || r.GetState() != stateOpen || r.GetServer() != mv.from || m.st.procs[mv.region] != nil {
			delete(m.queued, mv.region)
			continue
		}
		if !free(mv.from) {
			waiting = append(waiting, mv)
			continue
		}
		if pl == nil {
			pl = m.placerLocked()
		}
		br := &BalancerRegion{Name: mv.region, Group: layout.PrimaryName(mv.region), Server: mv.from}
		to := mv.to
		if to == "" || to == mv.from || !pl.fits(br, to) {
			to = pl.pick(br, mv.from)
		}
		if to == "" {
			// Every server it could go to holds a replica of its region (as many replicas as
			// servers): a primary takes a secondary's place there (placeLocked closes that one
			// when the primary opens); a secondary closes, and opens again once a server
			// can take it (the drained one back from its restart, say).
			to, _ = pl.displacing(br, "", func(s string) bool { return s == mv.from }, m.displaceableLocked)
			if to == "" && layout.PrimaryName(mv.region) != mv.region {
				delete(m.queued, mv.region)
				m.log.Info("drain closes a region replica no other server can take; it opens again when one can", "region", mv.region, "server", mv.from)
				m.closeLocked(&b, r, kindMove, closeOpts{})
				perServer[mv.from]++
				started = append(started, mv.region)
				continue
			}
		}
		if to == "" {
			delete(m.queued, mv.region)
			continue // nowhere to go now; a drain queues it again
		}
		if !free(to) {
			// The move waits for the destination it should have rather than go to a busier one
			// now: the balancer would move the region again later, another move under load.
			waiting = append(waiting, mv)
			continue
		}
		delete(m.queued, mv.region)
		m.closeLocked(&b, r, kindMove, closeOpts{target: to, balancer: true})
		pl.moveTo(mv.region, to)
		perServer[mv.from]++
		perServer[to]++
		started = append(started, mv.region)
		inFlight++
	}
	m.moveQueue = append(waiting, m.moveQueue...)
	if err := m.commit(&b); err != nil {
		return err
	}
	m.metrics.balancerMoves.Add(float64(len(started)))
	for _, name := range started {
		m.dispatchLocked(name)
	}
	return nil
}

// balancerTickLocked runs the balancer every BalancerInterval while it is on and the cluster is
// quiet (no region in transition, no recovery, no queued move).
func (m *Master) balancerTickLocked(now time.Time) error {
	if m.cfg.BalancerInterval < 0 || m.st.state.GetBalancerOff() || now.Before(m.nextBalance) {
		return nil
	}
	m.nextBalance = now.Add(m.cfg.BalancerInterval)
	if busy := m.busyProcsLocked(); busy > 0 || len(m.st.dead) > 0 || len(m.moveQueue) > 0 {
		m.log.Info("balancer skipped: regions in transition or servers being recovered",
			"procedures", busy, "dead_servers", len(m.st.dead))
		return nil
	}
	m.balanceLocked()
	return nil
}

// busyProcsLocked counts the procedures under way, leaving out opens waiting for a server that
// can take their region (a replica beyond the servers there are: it may wait for ever, and the
// balancer would never run again).
func (m *Master) busyProcsLocked() int {
	n := 0
	for name, p := range m.st.procs {
		if p.p.GetStep() == stepOpen && m.st.regions[name].GetServer() == "" {
			continue
		}
		n++
	}
	return n
}

// balanceLocked runs Balance over the live servers and queues its moves; it returns how many.
func (m *Master) balanceLocked() int {
	m.metrics.balancerRuns.Inc()
	pl := m.placerLocked()
	var servers []BalancerServer
	for _, s := range pl.servers {
		servers = append(servers, *s)
	}
	var regions []BalancerRegion
	for _, r := range pl.regions {
		regions = append(regions, *r)
	}
	n := 0
	for _, mv := range Balance(servers, regions) {
		r := m.st.regions[mv.Region]
		if mv.From == "" || r == nil || r.GetState() != stateOpen || r.GetServer() != mv.From ||
			m.st.procs[mv.Region] != nil || m.queued[mv.Region] || !m.serverLiveLocked(mv.From, r.GetServerStartCode()) {
			continue
		}
		m.moveQueue = append(m.moveQueue, queuedMove{region: mv.Region, from: mv.From, to: mv.To})
		m.queued[mv.Region] = true
		n++
	}
	if n > 0 {
		m.log.Info("balancer queued moves", "moves", n)
		m.kick()
	}
	return n
}

func archiveObjects(b storage.Bucket, src, dst string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	return storage.Walk(ctx, b, src+"/", func(o storage.ObjectInfo) error {
		err := storage.MoveObject(ctx, b, o.Key, path.Join(dst, strings.TrimPrefix(o.Key, src+"/")))
		if errors.Is(err, storage.ErrNoObject) {
			return nil // moved by an earlier attempt
		}
		return err
	})
}
