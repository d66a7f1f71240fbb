package master

import (
	"context"
	"fmt"
	"sync"

	pb "github.com/cellstore/cellstore/engine/api/cellstore/v1"
	"github.com/cellstore/cellstore/engine/layout"
)

// maintenanceParallel is how many regions FlushCompact works on at once.
const maintenanceParallel = 4

// FlushCompact implements pb.MasterServer: it flushes or compacts the open primaries of a table,
// or one region, through their servers' Admin service, and answers when they are done.
func (m *Master) FlushCompact(ctx context.Context, req *pb.FlushCompactRequest) (*pb.FlushCompactResponse, error) {
	resp, err := m.flushCompact(ctx, req)
	return resp, toStatus(err)
}

func (m *Master) flushCompact(ctx context.Context, req *pb.FlushCompactRequest) (*pb.FlushCompactResponse, error) {
	if _, ok := pb.FlushCompactRequest_Kind_name[int32(req.GetKind())]; !ok {
		return nil, errInvalid("unknown kind %d (flush, compact or major compact)", req.GetKind())
	}
	if (req.GetTable() == nil) == (req.GetRegion() == "") {
		return nil, errInvalid("name a table or a region, not both")
	}
	type target struct{ region, admin string }
	var targets []target
	resp := &pb.FlushCompactResponse{}
	add := func(r *pb.CatalogRegion) {
		if r.GetState() == stateOpen && r.GetServer() != "" {
			if s, ok := m.reg.Get(r.GetServer()); ok && s.StartCode == r.GetServerStartCode() {
				targets = append(targets, target{r.GetInfo().GetName(), s.AdminAddress})
				return
			}
		}
		resp.Skipped = append(resp.Skipped, r.GetInfo().GetName())
	}
	if req.GetRegion() != "" {
		if err := m.lock(); err != nil {
			return nil, err
		}
		r, d := m.regionLocked(layout.PrimaryName(req.GetRegion()))
		if d == nil {
			add(r)
		}
		m.mu.Unlock()
		if d != nil {
			return nil, d
		}
	} else {
		key, _, err := m.lockTable(req.GetTable())
		if err != nil {
			return nil, err
		}
		for _, r := range m.st.index[key] {
			add(r)
		}
		m.mu.Unlock()
	}
	var mu sync.Mutex
	var firstErr error
	sem := make(chan struct{}, maintenanceParallel)
	var wg sync.WaitGroup
	for _, tg := range targets {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			err := m.maintainRegion(ctx, tg.admin, tg.region, req.GetKind())
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				if firstErr == nil {
					firstErr = fmt.Errorf("region %s: %w", tg.region, err)
				}
				return
			}
			resp.Regions++
		}()
	}
	wg.Wait()
	if firstErr != nil {
		return nil, errDetail(pb.ErrorCode_ERROR_CODE_FAILED_PRECONDITION, true, "%s stopped after %d regions: %v (retry; regions done stay done)",
			req.GetKind(), resp.Regions, firstErr)
	}
	m.log.Info("regions flushed or compacted", "kind", req.GetKind().String(), "table", layout.TableKey(req.GetTable()), "region", req.GetRegion(),
		"regions", resp.Regions, "skipped", len(resp.Skipped))
	return resp, nil
}

// maintainRegion flushes or compacts one region at its server.
func (m *Master) maintainRegion(ctx context.Context, addr, region string, kind pb.FlushCompactRequest_Kind) error {
	if kind == pb.FlushCompactRequest_KIND_FLUSH {
		return m.flushRegion(ctx, addr, region)
	}
	c, err := m.admin.client(addr)
	if err != nil {
		return err
	}
	// A compaction rewrites the region's files: it gets the caller's time, not an RPC timeout.
	_, err = c.CompactRegion(ctx, &pb.CompactRegionRequest{Region: region, Major: kind == pb.FlushCompactRequest_KIND_MAJOR_COMPACT})
	return err
}
