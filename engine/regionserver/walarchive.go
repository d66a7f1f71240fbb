package regionserver

import (
	"context"
	"time"

	"github.com/cellstore/cellstore/engine/layout"
	"github.com/cellstore/cellstore/engine/wal"
)

// WAL archiving (point-in-time recovery): with Config.WALArchive set, the server copies its log's
// closed units to the backup location every WALArchiveInterval (the active directory segment is
// rolled first, so the interval bounds what a recovery can miss), and records the table of each
// region it opens there (wal.RecordRegion) before any of that region's edits are archived. A
// unit is deleted only once archived and flushed; what a server leaves unarchived when it dies,
// the master archives before deleting its log.

// walArchiveTarget is where the log of the process with start code code is archived.
func (s *Server) walArchiveTarget(code int64) *wal.ArchiveTarget {
	if s.cfg.WALArchive == nil {
		return nil
	}
	return &wal.ArchiveTarget{Bucket: s.cfg.WALArchive, Log: layout.WALDirName(s.nameStr, code)}
}

// noteRegionForArchive records a primary region's table in the archive as it opens, before it
// takes a write; when the backup location fails, the record is queued and the next archiving
// round writes it before any unit.
func (s *Server) noteRegionForArchive(region, table string) {
	if s.cfg.WALArchive == nil {
		return
	}
	s.archiveMu.Lock()
	done := s.archiveRecorded[region]
	s.archiveMu.Unlock()
	if done {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	err := wal.RecordRegion(ctx, s.cfg.WALArchive, region, table)
	s.archiveMu.Lock()
	defer s.archiveMu.Unlock()
	if err == nil {
		if s.archiveRecorded == nil {
			s.archiveRecorded = map[string]bool{}
		}
		s.archiveRecorded[region] = true
		return
	}
	s.log.Warn("recording a region's table in the WAL archive failed: the next archiving round retries it", "region", region, "error", err)
	if s.archivePending == nil {
		s.archivePending = map[string]string{}
	}
	s.archivePending[region] = table
}

// walArchiver archives the log every WALArchiveInterval until the server stops.
func (s *Server) walArchiver() {
	s.every(s.cfg.WALArchiveInterval, func() {
		if s.stopping.Load() {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		go func() { // a stopping server does not wait for a slow store
			select {
			case <-s.quit:
				cancel()
			case <-ctx.Done():
			}
		}()
		if _, err := s.archiveWALOnce(ctx); err != nil {
			s.m.walArchiveErrors.Add(1)
			s.log.Warn("archiving the WAL to the backup location failed: its units are kept until it works (point-in-time recovery cannot reach past the last archived edit meanwhile)",
				"location", s.cfg.WALArchive.Describe(), "error", err)
		}
	})
}

// archiveWALOnce records the pending regions, then archives the log's new units (one round at a
// time: the timer's and ArchiveWAL calls').
func (s *Server) archiveWALOnce(ctx context.Context) (int, error) {
	s.archiveRound.Lock()
	defer s.archiveRound.Unlock()
	// The queued region records go first (until none is left): no edit of a region is archived
	// without its record.
	for {
		s.archiveMu.Lock()
		pending := make(map[string]string, len(s.archivePending))
		for r, t := range s.archivePending {
			pending[r] = t
		}
		s.archiveMu.Unlock()
		if len(pending) == 0 {
			break
		}
		for r, t := range pending {
			if err := wal.RecordRegion(ctx, s.cfg.WALArchive, r, t); err != nil {
				return 0, err
			}
			s.archiveMu.Lock()
			delete(s.archivePending, r)
			if s.archiveRecorded == nil {
				s.archiveRecorded = map[string]bool{}
			}
			s.archiveRecorded[r] = true
			s.archiveMu.Unlock()
		}
	}
	n, err := s.currentWAL().Archive(ctx)
	s.m.walArchivedUnits.Add(int64(n))
	return n, err
}
