package regionserver

import (
	"context"
	"time"

	pb "github.com/cellstore/cellstore/engine/api/cellstore/v1"
	"github.com/cellstore/cellstore/engine/layout"
	"github.com/cellstore/cellstore/engine/region"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// A move's destination opens the region's store files while the source still serves it. The
// source asks (PrepareRegion) after its pre-close flush — the last flush that writes a store file
// when the close hands its last edits over in the manifest — and waits for the answer before it
// stops serving, so the open ordered after its CLOSED report reads only the .regioninfo and the
// manifest (one round trip to the storage instead of three: .regioninfo, then the manifest, then
// the store files). Nothing depends on it: an open without it, or after it expired, opens
// everything itself.

// preparedRegion is a region prepared here for an open that has not come yet.
type preparedRegion struct {
	p     *region.Prepared
	timer *time.Timer // releases it if no open takes it
}

// prepareWait bounds how long a move's source waits for its destination to prepare (the region
// still serves meanwhile; the move only starts its close later).
const prepareWait = 2 * time.Second

var (
	// preparedFor is how long a prepared region waits for its open (a variable for tests).
	preparedFor = 30 * time.Second
	// maxPrepared bounds the regions prepared or being prepared and not opened yet (the master
	// moves at most a few to one server at once; a variable for tests).
	maxPrepared = 16
)

// PrepareRegion opens a region's store files for an open expected soon (a move to this server).
func (a *adminService) PrepareRegion(ctx context.Context, req *pb.PrepareRegionRequest) (*pb.PrepareRegionResponse, error) {
	s := a.s
	ri := req.GetRegion()
	if ri == nil || ri.GetName() == "" || ri.GetTable() == nil || req.GetTable() == nil {
		return nil, invalid("PrepareRegion needs a region with a name, its table and the table descriptor").Status()
	}
	if ri.GetReplicaId() > 0 {
		return nil, invalid("PrepareRegion is for primaries: a read replica opens over its primary's files").Status()
	}
	if s.stopping.Load() {
		return nil, errStopping
	}
	if _, here := s.regions.Load(ri.GetName()); here {
		return &pb.PrepareRegionResponse{}, nil // opening or open here already
	}
	s.preparedMu.Lock()
	n := len(s.prepared) + s.preparing
	if n >= maxPrepared {
		s.preparedMu.Unlock()
		return nil, status.Errorf(codes.ResourceExhausted, "%d regions are prepared here already or being prepared, and wait for their opens", n)
	}
	s.preparing++
	s.preparedMu.Unlock()
	p, err := region.Prepare(s.regionConfig(req.GetTable(), ri.GetName()), layout.StorageInfo(ri))
	s.preparedMu.Lock()
	s.preparing--
	s.preparedMu.Unlock()
	if err != nil {
		return nil, status.Errorf(codes.Unavailable, "preparing region %s: %v", ri.GetName(), err)
	}
	files := p.Files()
	pr := &preparedRegion{p: p}
	s.preparedMu.Lock()
	if _, here := s.regions.Load(ri.GetName()); here || s.preparedDropped || ctx.Err() != nil {
		// Its open came meanwhile (and opened everything itself), the server stopped, or the
		// source gave up waiting (and closes the region without it).
		s.preparedMu.Unlock()
		p.Release()
		return &pb.PrepareRegionResponse{}, nil
	}
	if old := s.prepared[ri.GetName()]; old != nil {
		old.timer.Stop()
		old.p.Release()
	}
	if s.prepared == nil {
		s.prepared = map[string]*preparedRegion{}
	}
	s.prepared[ri.GetName()] = pr
	pr.timer = time.AfterFunc(preparedFor, func() {
		if s.takePrepared(ri.GetName(), pr) != nil {
			s.log.Info("a prepared region was not opened here in time: released", "region", ri.GetName())
			pr.p.Release()
		}
	})
	s.preparedMu.Unlock()
	return &pb.PrepareRegionResponse{Files: int32(files)}, nil
}

// takePrepared removes a region's prepared files from the map and returns them (nil: none, or
// not want's when want is set).
func (s *Server) takePrepared(name string, want *preparedRegion) *region.Prepared {
	s.preparedMu.Lock()
	defer s.preparedMu.Unlock()
	pr := s.prepared[name]
	if pr == nil || (want != nil && pr != want) {
		return nil
	}
	delete(s.prepared, name)
	pr.timer.Stop()
	return pr.p
}

// dropPrepared releases every region prepared here (the server stops).
func (s *Server) dropPrepared() {
	s.preparedMu.Lock()
	all := s.prepared
	s.prepared, s.preparedDropped = nil, true
	s.preparedMu.Unlock()
	for _, pr := range all {
		pr.timer.Stop()
		pr.p.Release()
	}
}

// prepareAt asks a move's destination to prepare the region and waits for its answer (at most
// prepareWait), reporting whether it did. A failure costs only the open's speed there: it is
// logged, not returned.
func (s *Server) prepareAt(or *onlineRegion, req *pb.CloseRegionRequest) bool {
	addr := req.GetDestinationAdminAddress()
	if addr == "" || req.GetDestination() == nil || layout.ServerName(req.GetDestination()) == s.nameStr || or.info.GetReplicaId() > 0 {
		return false
	}
	start := time.Now()
	ac, err := s.adminClient(addr)
	var resp *pb.PrepareRegionResponse
	if err == nil {
		ctx, cancel := context.WithTimeout(context.Background(), prepareWait)
		resp, err = ac.PrepareRegion(ctx, &pb.PrepareRegionRequest{Region: or.info, Table: or.table})
		cancel()
	}
	if err != nil {
		if status.Code(err) != codes.Unimplemented { // (a destination of an earlier release)
			s.log.Info("the move's destination did not prepare the region; it opens it all after the close", "region", or.name,
				"destination", addr, "error", err)
		}
		return false
	}
	if took := time.Since(start); took >= slowOpen {
		s.log.Info("slow prepare at the move's destination (the region served meanwhile)", "region", or.name,
			"destination", addr, "files", resp.GetFiles(), "took", took.Round(time.Millisecond))
	}
	return true
}
