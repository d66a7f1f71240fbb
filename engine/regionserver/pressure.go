package regionserver

import (
	"time"

	pb "github.com/cellstore/cellstore/engine/api/cellstore/v1"
	"github.com/cellstore/cellstore/engine/region"
)

// Global memstore pressure (HBase's hbase.regionserver.global.memstore.size with its lower
// limit): when the regions' memstores hold more than pressureHigh of the memstore budget, the
// largest ones are flushed until they hold less than pressureLow. Without it a region that stopped
// receiving writes would keep its chunks, and writes to other regions would block.
const (
	pressureHigh  = 0.75
	pressureLow   = 0.50
	pressureEvery = 50 * time.Millisecond
)

// The WAL's backlog (HBase's hbase.regionserver.maxlogs): a dead server's recovery reads every
// log unit its regions have not flushed past, so when the log keeps more than this many units the
// regions pinning the oldest are flushed. On a bucket a unit is an object, one per group commit
// (a recovery reads them 32 at a time); on a directory, a closed segment.
const (
	maxBacklogObjects  = 2000
	maxBacklogSegments = 32
	backlogEvery       = time.Second
)

// writePressure is what a write's answer tells the client about region r (pb.WritePressure): the
// nearer of the region's own blocking size and the server's memstore budget, past the watermark
// where the server starts flushing (the server's figure is updated every pressureEvery).
func (s *Server) writePressure(r *region.Region) *pb.WritePressure {
	p := max(r.WritePressure(), s.memPressure.Load())
	if p == 0 {
		return nil
	}
	return &pb.WritePressure{Percent: p}
}

func (s *Server) pressureLoop() {
	blocked := map[*region.Region]int64{}
	var lastBacklog time.Time
	s.every(pressureEvery, func() {
		s.relievePressure()
		s.unblock(blocked)
		if now := time.Now(); now.Sub(lastBacklog) >= backlogEvery {
			lastBacklog = now
			s.trimBacklog()
		}
	})
}

// trimBacklog flushes the regions pinning the oldest unit of a WAL that keeps too many.
func (s *Server) trimBacklog() {
	l := s.currentWAL()
	if l == nil {
		return
	}
	units, pinning := l.Backlog()
	limit := s.cfg.WALMaxBacklog
	switch {
	case limit > 0:
	case s.cfg.Bucket != nil:
		limit = maxBacklogObjects
	default:
		limit = maxBacklogSegments
	}
	if units <= limit {
		return
	}
	for _, name := range pinning {
		v, ok := s.regions.Load(name)
		if !ok {
			continue
		}
		or := v.(*onlineRegion)
		r := or.r.Load()
		if r == nil || !or.live() || r.IsReplica() {
			continue
		}
		s.m.backlogFlushes.Add(1)
		if _, err := r.Flush(); err != nil {
			s.log.Debug("flush for the WAL backlog failed", "region", r.Name(), "error", err)
		}
	}
}

// unblock flushes regions whose writers blocked since the last tick: their own flush may have
// failed while the pool was exhausted, and nothing else would retry it.
func (s *Server) unblock(seen map[*region.Region]int64) {
	live := map[*region.Region]bool{}
	s.regions.Range(func(_, v any) bool {
		or := v.(*onlineRegion)
		r := or.r.Load()
		if r == nil || !or.live() {
			return true
		}
		live[r] = true
		if r.IsReplica() {
			return true
		}
		n := r.Metrics().BlockedWrites.Load()
		if n != seen[r] {
			seen[r] = n
			s.m.pressureFlushes.Add(1)
			if _, err := r.Flush(); err != nil {
				s.log.Debug("flush of a blocked region failed", "region", r.Name(), "error", err)
			}
		}
		return true
	})
	for r := range seen {
		if !live[r] {
			delete(seen, r)
		}
	}
}

// relievePressure flushes the largest memstores while the total is above the high watermark.
func (s *Server) relievePressure() {
	limit := float64(s.cfg.MemstoreBytes)
	type held struct {
		or    *onlineRegion
		r     *region.Region
		bytes int64
	}
	var regions []held
	var total int64
	s.regions.Range(func(_, v any) bool {
		or := v.(*onlineRegion)
		if r := or.r.Load(); r != nil && or.live() {
			// Cells too large for a chunk are kept on the Go heap: memory all the same.
			ms := r.MemstoreStats()
			b := ms.ChunkBytes + ms.HeapBytes
			total += b
			regions = append(regions, held{or, r, b})
		}
		return true
	})
	note := func() { s.memPressure.Store(region.PressureBetween(total, int64(pressureHigh*limit), int64(limit))) }
	note()
	if float64(total) < pressureHigh*limit {
		return
	}
	defer note() // the flushes below take time: write answers meanwhile report the figure from before them
	for float64(total) >= pressureLow*limit && len(regions) > 0 {
		big := 0
		for i := range regions {
			if regions[i].bytes > regions[big].bytes {
				big = i
			}
		}
		h := regions[big]
		regions = append(regions[:big], regions[big+1:]...)
		if h.bytes == 0 {
			return
		}
		s.m.pressureFlushes.Add(1)
		if h.r.IsReplica() {
			// A read replica drops its memstore when its primary flushes: ask for one in the
			// answer to the next batch.
			h.or.flushWanted.Store(true)
			total -= h.bytes
			continue
		}
		if _, err := h.r.Flush(); err != nil {
			s.log.Debug("pressure flush failed", "region", h.r.Name(), "error", err)
			continue
		}
		total -= h.bytes
		note()
	}
}
