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

// noteRegionForArchive queues a primary region's table record for the archive.
func (s *Server) noteRegionForArchive(region, table string) {
	if s.cfg.WALArchive == nil {
		return
	}
	s.archiveMu.Lock()
	defer s.archiveMu.Unlock()
	if s.archiveRecorded[region] {
		return
	}
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
	s.archiveMu.Lock()
	pending := make(map[string]string, len(s.archivePending))
	for r, t := range s.archivePending {
		pending[r] = t
	}
	s.archiveMu.Unlock()
	for r, t := range pending {
		// A region's record goes first: no edit of it is archived without it.
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
	n, err := s.currentWAL().Archive(ctx)
	s.m.walArchivedUnits.Add(int64(n))
	return n, err
}
