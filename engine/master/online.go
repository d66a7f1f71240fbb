package master

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"time"

	pb "github.com/cellstore/cellstore/engine/api/cellstore/v1"
)

// Settings that change without a restart (engine/settings; HBase's dynamic configuration).

// Reconfigure changes settings of a running master: fn edits a copy of its configuration,
// which replaces it under the master's lock when it is valid — the start-up rules (Config.fill:
// zero means the default, the same limits), and no zero timeout, region limit or split size,
// which a running master is never meant to be given. The balancer's and normalizer's next runs
// move to their new periods.
func (m *Master) Reconfigure(fn func(c *Config)) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	c := m.cfg
	fn(&c)
	switch {
	case c.OpenTimeout <= 0 || c.CloseTimeout <= 0:
		return errors.New("open-timeout and close-timeout must be positive")
	case c.MaxRegionsPerServer <= 0:
		return errors.New("max-regions-per-server must be positive")
	case c.SplitSize <= 0:
		return errors.New("split-size must be positive")
	}
	if err := c.fill(); err != nil {
		return err
	}
	if c.BalancerInterval != m.cfg.BalancerInterval && c.BalancerInterval > 0 {
		m.nextBalance = m.clock().Add(c.BalancerInterval)
	}
	if c.NormalizerInterval != m.cfg.NormalizerInterval && c.NormalizerInterval > 0 {
		m.nextNormalize = m.clock().Add(c.NormalizerInterval)
	}
	m.cfg = c
	return nil
}

// UpdateConfiguration implements pb.MasterServer: this master, a region server, or (all) this
// master and every live region server re-read their configuration files.
func (m *Master) UpdateConfiguration(ctx context.Context, req *pb.UpdateClusterConfigurationRequest) (*pb.UpdateClusterConfigurationResponse, error) {
	resp, err := m.updateConfiguration(ctx, req)
	return resp, toStatus(err)
}

func (m *Master) updateConfiguration(ctx context.Context, req *pb.UpdateClusterConfigurationRequest) (*pb.UpdateClusterConfigurationResponse, error) {
	if req.GetAll() == (req.GetServer() != "") {
		return nil, errInvalid("name a server (host:port) or ask for all, not both")
	}
	if err := m.lock(); err != nil {
		return nil, err
	}
	type target struct{ name, admin string }
	var targets []target
	self := req.GetAll() || req.GetServer() == m.cfg.Address
	for _, s := range m.reg.All() {
		if s.Live && (req.GetAll() || s.Name == req.GetServer()) {
			targets = append(targets, target{s.Name, s.AdminAddress})
		}
	}
	m.mu.Unlock()
	if !self && len(targets) == 0 {
		return nil, errInvalid("%q is neither this master (%s) nor a live region server", req.GetServer(), m.cfg.Address)
	}
	resp := &pb.UpdateClusterConfigurationResponse{}
	if self {
		resp.Reports = append(resp.Reports, m.reloadConfig())
	}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, t := range targets {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := &pb.ConfigurationReport{Process: t.name}
			c, err := m.admin.client(t.admin)
			if err == nil {
				cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
				var got *pb.ConfigurationReport
				if got, err = c.UpdateConfiguration(cctx, &pb.UpdateConfigurationRequest{}); err == nil {
					r = got
				}
				cancel()
			}
			if err != nil {
				r.Error = err.Error()
			}
			mu.Lock()
			resp.Reports = append(resp.Reports, r)
			mu.Unlock()
		}()
	}
	wg.Wait()
	slices.SortStableFunc(resp.Reports[min(1, len(resp.Reports)):], func(a, b *pb.ConfigurationReport) int {
		return strings.Compare(a.GetProcess(), b.GetProcess())
	})
	return resp, nil
}

// reloadConfig re-reads this master's configuration file (Config.Reload).
func (m *Master) reloadConfig() *pb.ConfigurationReport {
	if m.cfg.Reload == nil {
		return &pb.ConfigurationReport{Process: m.cfg.Address} // no file: nothing to re-read
	}
	r := m.cfg.Reload()
	r.Process = m.cfg.Address
	return r
}
