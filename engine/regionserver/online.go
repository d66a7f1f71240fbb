package regionserver

import (
	"context"
	"fmt"
	"time"

	pb "github.com/cellstore/cellstore/engine/api/cellstore/v1"
	"github.com/cellstore/cellstore/engine/region"
)

// Settings that change without a restart (engine/settings; HBase's dynamic configuration). The
// command that runs the server re-reads its configuration file (Config.Reload) and calls these.

// SetSlowCall changes the slow-call threshold (Config.SlowCall).
func (s *Server) SetSlowCall(d time.Duration) { s.slowCallNanos.Store(int64(s.slowCallFor(d))) }

// SetMaxScanners changes how many scanners may be open at once (Config.MaxScanners).
func (s *Server) SetMaxScanners(n int) error {
	if n <= 0 {
		return fmt.Errorf("max-scanners must be positive, got %d", n)
	}
	s.maxScanners.Store(int64(n))
	return nil
}

// SetMaxScanResultSize changes the cap on one scan answer's bytes (Config.MaxScanResultSize).
func (s *Server) SetMaxScanResultSize(n int64) error {
	if n <= 0 {
		return fmt.Errorf("scan-max-result-size must be positive, got %d", n)
	}
	s.maxScanResult.Store(n)
	return nil
}

// SetMaxConnections changes the data path's connection limit (connections over it stay open).
func (s *Server) SetMaxConnections(n int) error {
	if n <= 0 {
		return fmt.Errorf("max-connections must be positive, got %d", n)
	}
	s.data.SetMaxConns(n)
	return nil
}

// SetIdleTimeout changes how long a quiet data-path connection stays open.
func (s *Server) SetIdleTimeout(d time.Duration) error {
	if d <= 0 {
		return fmt.Errorf("idle-timeout must be positive, got %v", d)
	}
	s.data.SetIdleTimeout(d)
	return nil
}

// SetCompaction changes how regions compact: the open ones at their next selection, those opened
// later from the start. Zero values are the defaults.
func (s *Server) SetCompaction(cc region.CompactionConfig) error {
	filled := cc
	if filled.MinFiles == 0 {
		filled.MinFiles = region.DefaultCompactionMinFiles
	}
	if filled.MaxFiles == 0 {
		filled.MaxFiles = max(region.DefaultCompactionMaxFiles, filled.MinFiles)
	}
	if filled.Ratio == 0 {
		filled.Ratio = region.DefaultCompactionRatio
	}
	if err := region.CheckCompaction(filled); err != nil {
		return err
	}
	s.compaction.Store(&filled)
	var err error
	s.regions.Range(func(_, v any) bool {
		if r := v.(*onlineRegion).r.Load(); r != nil {
			if e := r.SetCompaction(filled); e != nil && err == nil {
				err = e
			}
		}
		return true
	})
	return err
}

// slowCallFor is the threshold d means (0: 500 ms, negative: never).
func (s *Server) slowCallFor(d time.Duration) time.Duration {
	switch {
	case d < 0:
		return time.Duration(1<<63 - 1)
	case d == 0:
		return 500 * time.Millisecond
	}
	return d
}

// UpdateConfiguration re-reads the configuration file (Config.Reload) and applies what changes
// without a restart.
func (a *adminService) UpdateConfiguration(context.Context, *pb.UpdateConfigurationRequest) (*pb.ConfigurationReport, error) {
	return a.s.UpdateConfiguration()
}

// UpdateConfiguration is the Admin call's work: a server started without a configuration file
// has nothing to re-read (no change, as HBase's update_config without a changed hbase-site.xml).
func (s *Server) UpdateConfiguration() (*pb.ConfigurationReport, error) {
	r := &pb.ConfigurationReport{}
	if s.cfg.Reload != nil {
		r = s.cfg.Reload()
	}
	r.Process = s.nameStr
	return r, nil
}
