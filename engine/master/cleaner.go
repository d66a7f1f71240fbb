package master

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"slices"
	"strings"
	"sync"
	"time"

	"google.golang.org/protobuf/proto"

	pb "github.com/cellstore/cellstore/engine/api/cellstore/v1"
	"github.com/cellstore/cellstore/engine/layout"
	"github.com/cellstore/cellstore/engine/region"
	"github.com/cellstore/cellstore/engine/snapshot"
	"github.com/cellstore/cellstore/engine/wal"
)

// The archive cleaner (HBase's HFileCleaner with its snapshot and link checks): files under
// archive/data — store files compacted away, regions of dropped or truncated tables, split parents
// — are deleted once they have been seen there for Config.ArchiveTTL, except the data files a
// snapshot names and those a table cloned or restored from a snapshot still links to (its copies
// of manifests, CatalogTable.link_manifests). The TTL lets read replicas and scanners that still
// read an archived file finish. A file's age counts from when this master first saw it in the
// archive (archiving keeps a file's own times), so a new master waits a TTL again: deleting later
// is always safe.

type archiveCleaner struct {
	mu   sync.Mutex
	seen map[string]time.Time // archived files not protected: when first seen
	busy bool                 // a pass runs (m.mu)
	next time.Time            // m.mu
	// tables whose link check runs (m.mu)
	linkChecks map[string]bool
}

// cleanerLocked starts a pass of the archive cleaner every CleanerInterval.
func (m *Master) cleanerLocked(now time.Time) error {
	pruneWAL := m.cfg.WALArchive && m.cfg.WALRetention > 0
	if (m.cfg.ArchiveTTL < 0 && !pruneWAL) || now.Before(m.cleaner.next) {
		return nil
	}
	m.cleaner.next = now.Add(m.cfg.CleanerInterval)
	if m.cleaner.busy {
		return nil
	}
	m.cleaner.busy = true
	ttl := m.cfg.ArchiveTTL // (it may change meanwhile: Reconfigure)
	m.runIO(func() (err error) {
		if ttl >= 0 {
			var n int
			n, err = m.cleanArchive(now, ttl, false)
			if n > 0 {
				m.log.Info("archive cleaner deleted files", "files", n)
			}
		}
		if pruneWAL {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
			defer cancel()
			pruned, perr := wal.PruneArchive(ctx, m.cfg.Backup, now.Add(-m.cfg.WALRetention))
			if pruned > 0 {
				m.log.Info("deleted archived WAL past its retention", "objects", pruned, "retention", m.cfg.WALRetention)
			}
			err = errors.Join(err, perr)
		}
		return err
	}, func(err error) {
		m.cleaner.busy = false
		if err != nil {
			m.log.Warn("archive cleaner: pass failed, the next one retries", "err", err)
		}
	})
	return nil
}

// CleanArchive runs one pass of the archive cleaner now and returns how many files it deleted.
func (m *Master) CleanArchive() (int, error) {
	m.mu.Lock()
	ttl := m.cfg.ArchiveTTL
	m.mu.Unlock()
	return m.cleanArchive(m.clock(), ttl, true)
}

// cleanArchive runs a pass of the archive cleaner while no snapshot, clone, restore or import is
// recording files. The periodic pass (wait false) skips when one is: waiting for the guard would
// hold every new snapshot, clone and restore behind it (a waiting writer blocks new readers) for
// as long as an import copies.
func (m *Master) cleanArchive(now time.Time, ttl time.Duration, wait bool) (int, error) {
	if wait {
		m.snapGuard.Lock()
	} else if !m.snapGuard.TryLock() {
		m.log.Debug("archive cleaner: a snapshot, clone, restore or import records files: the next pass cleans")
		return 0, nil
	}
	defer m.snapGuard.Unlock()
	m.cleaner.mu.Lock()
	defer m.cleaner.mu.Unlock()
	if err := m.lock(); err != nil {
		return 0, err
	}
	var links []string
	keep := map[string]bool{}
	for _, t := range m.st.tables {
		for _, f := range t.GetTable().GetFunctions() {
			keep[layout.FunctionModuleKey(f.GetSha256())] = true
		}
		links = append(links, t.GetLinkManifests()...)
		if rs := t.GetRestore(); rs != nil {
			links = append(links, rs.GetLinkManifest())
		}
	}
	m.mu.Unlock()

	st := m.regionStorage()
	// An import into this cluster from another process (the CLI) copies files to archive/ before
	// its manifest, and skips files that are there: none may go meanwhile (the master's own
	// imports hold snapGuard).
	ex, err := snapshot.ExcludeCopies(st, "archive cleaner of master "+m.cfg.Address)
	if errors.Is(err, snapshot.ErrCopyUnderway) {
		m.log.Info("archive cleaner: a snapshot is being copied into the cluster; this pass deletes nothing", "reason", err)
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	defer ex.End()
	// The files the snapshots and the tables' copies of manifests name, a manifest at a time.
	bad, err := snapshot.Walk(st, func(man *pb.SnapshotManifest) error {
		for _, p := range snapshot.Paths(man) {
			keep[p] = true
		}
		return nil
	})
	if err != nil {
		return 0, err
	}
	for key, err := range bad {
		return 0, fmt.Errorf("snapshot manifest %s cannot be read (%v): nothing is deleted until it is repaired or deleted", key, err)
	}
	for _, k := range links {
		man, err := snapshot.Read(st, k)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return 0, fmt.Errorf("a table's copy of a snapshot manifest: %w: nothing is deleted until it can be read", err)
		}
		for _, p := range snapshot.Paths(man) {
			keep[p] = true
		}
	}
	seen := map[string]time.Time{}
	deleted := 0
	// Archived store files no snapshot names, and table functions' modules (stored by a
	// ModifyTable before its catalog commit: hence the same wait) no table or snapshot names.
	err = walkAll(st, []string{"archive/data", layout.FunctionsDir, "archive/" + layout.FunctionsDir}, func(p string) error {
		if keep[strings.TrimPrefix(p, "archive/")] {
			return nil
		}
		first, ok := m.cleaner.seen[p]
		if !ok {
			first = now
		}
		if now.Sub(first) < ttl {
			seen[p] = first
			return nil
		}
		if err := ex.Check(); err != nil {
			return err
		}
		if err := st.DeleteObject(p); err != nil {
			return err
		}
		deleted++
		return nil
	})
	if err != nil {
		for p, t := range m.cleaner.seen { // a failed pass forgets nothing it had seen
			if _, ok := seen[p]; !ok {
				seen[p] = t
			}
		}
	}
	m.cleaner.seen = seen
	return deleted, err
}

// checkLinksLocked drops a table's copies of snapshot manifests once none of its regions links to
// a snapshot's files any more (each compacted its links into files of its own). The janitor runs
// it.
func (m *Master) checkLinksLocked() {
	if m.cleaner.linkChecks == nil {
		m.cleaner.linkChecks = map[string]bool{}
	}
	for key, t := range m.st.tables {
		if len(t.GetLinkManifests()) == 0 || t.GetRestore() != nil || t.GetDeleting() || m.cleaner.linkChecks[key] {
			continue
		}
		var infos []region.Info
		for _, p := range m.st.index[key] {
			infos = append(infos, layout.StorageInfo(p.GetInfo()))
		}
		links := slices.Clone(t.GetLinkManifests())
		m.cleaner.linkChecks[key] = true
		m.runIO(func() error {
			for _, info := range infos {
				refs, err := region.HasReferenceFiles(m.regionStorage(), info)
				if err != nil {
					return err
				}
				if refs {
					return errStillReferenced
				}
			}
			return nil
		}, func(err error) {
			delete(m.cleaner.linkChecks, key)
			cur := m.st.tables[key]
			if err != nil || cur == nil || cur.GetRestore() != nil || !slices.Equal(cur.GetLinkManifests(), links) {
				return
			}
			var b batch
			nt := proto.CloneOf(cur)
			nt.LinkManifests = nil
			b.putTable(nt)
			if m.commit(&b) != nil {
				return
			}
			m.log.Info("the table no longer links to snapshot files", "table", key)
			m.runIO(func() error {
				for _, k := range links {
					if err := m.regionStorage().DeleteObject(k); err != nil {
						return err
					}
				}
				return nil
			}, func(error) {})
		})
	}
}

// deleteLinkManifests removes a dropped table's copies of snapshot manifests.
func (m *Master) deleteLinkManifests(tn *pb.TableName) error {
	st := m.regionStorage()
	return st.WalkFiles(snapshot.LinkManifestsDir(tn), st.DeleteObject)
}

// walkAll walks several directories in turn.
func walkAll(st region.Storage, dirs []string, fn func(p string) error) error {
	for _, d := range dirs {
		if err := st.WalkFiles(d, fn); err != nil {
			return err
		}
	}
	return nil
}
