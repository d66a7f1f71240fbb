package regionserver

import (
	"context"
	"errors"
	"fmt"
	"path"
	"time"

	pb "github.com/cellstore/cellstore/engine/api/cellstore/v1"
	"github.com/cellstore/cellstore/engine/layout"
	"github.com/cellstore/cellstore/engine/region"
	"github.com/cellstore/cellstore/engine/storage"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// adminService is the Admin gRPC service: the master's orders.
type adminService struct {
	pb.UnimplementedAdminServer
	s *Server
}

func (a *adminService) Ping(_ context.Context, req *pb.PingRequest) (*pb.PingResponse, error) {
	return &pb.PingResponse{Payload: req.GetPayload()}, nil
}

func (a *adminService) StopServer(_ context.Context, req *pb.StopServerRequest) (*pb.StopServerResponse, error) {
	a.s.log.Info("stop requested", "reason", req.GetReason())
	go a.s.Stop()
	return &pb.StopServerResponse{}, nil
}

func (a *adminService) ArchiveWAL(ctx context.Context, _ *pb.ArchiveWALRequest) (*pb.ArchiveWALResponse, error) {
	if a.s.cfg.WALArchive == nil {
		return nil, status.Error(codes.FailedPrecondition, "this region server does not archive its WAL: run it with --wal-archive and a backup location")
	}
	n, err := a.s.archiveWALOnce(ctx)
	if err != nil {
		a.s.m.walArchiveErrors.Add(1)
		return nil, status.Errorf(codes.Unavailable, "archiving the WAL: %v", err)
	}
	return &pb.ArchiveWALResponse{Units: int32(n)}, nil
}

func (a *adminService) GetOnlineRegions(context.Context, *pb.GetOnlineRegionsRequest) (*pb.GetOnlineRegionsResponse, error) {
	resp := &pb.GetOnlineRegionsResponse{}
	a.s.regions.Range(func(_, v any) bool {
		or := v.(*onlineRegion)
		if or.state.Load() == stateOpen {
			resp.Regions = append(resp.Regions, or.info)
		}
		return true
	})
	return resp, nil
}

func (a *adminService) FlushRegion(_ context.Context, req *pb.RegionRequest) (*pb.RegionResponse, error) {
	_, r, d := a.s.lookup(req.GetRegion())
	if d != nil {
		return nil, d.Status()
	}
	if _, err := r.Flush(); err != nil {
		return nil, a.s.errDetail(err, req.GetRegion()).Status()
	}
	return &pb.RegionResponse{}, nil
}

func (a *adminService) CompactRegion(_ context.Context, req *pb.CompactRegionRequest) (*pb.RegionResponse, error) {
	_, r, d := a.s.lookup(req.GetRegion())
	if d != nil {
		return nil, d.Status()
	}
	// engine/region compacts every family; a family restriction is not supported yet.
	if _, err := r.Compact(req.GetMajor()); err != nil {
		return nil, a.s.errDetail(err, req.GetRegion()).Status()
	}
	return &pb.RegionResponse{}, nil
}

func (a *adminService) OpenRegion(ctx context.Context, req *pb.OpenRegionRequest) (*pb.OpenRegionResponse, error) {
	s := a.s
	ri := req.GetRegion()
	if ri == nil || ri.GetName() == "" || ri.GetTable() == nil || req.GetTable() == nil {
		return nil, invalid("OpenRegion needs a region with a name, its table and the table descriptor").Status()
	}
	if d := s.checkProcess(req.GetServerStartCode()); d != nil {
		return nil, d.Status()
	}
	if _, here := s.regions.Load(ri.GetName()); !here && s.stopping.Load() {
		// (A region this server has, even one the stop is closing, is answered below: a refusal
		// as stopping would have the master place it elsewhere before this server closed it.)
		return nil, errStopping
	}
	// Orders may arrive before RegisterServer's answer has been processed here: the master
	// assigns as soon as it registered the server, so they are accepted while registering.
	or := &onlineRegion{name: ri.GetName(), info: ri, table: req.GetTable(), tkey: layout.TableKey(ri.GetTable()), ns: ri.GetTable().GetNamespace(),
		settled: make(chan struct{}), closeDone: make(chan struct{})}
	or.openProc.Store(req.GetProcedureId())
	or.lat, or.calls = s.tm.latencyOf(or.tkey), s.tm.newRegionCalls()
	if v, ok := s.regions.Load(ri.GetName()); ok {
		if ex := v.(*onlineRegion); ex.closing.Load() {
			// Closing here (an order to open it again came before the close was reported):
			// open it once the close is done. Answering as for a region opening here would
			// have the master take the order as accepted and wait for an OPENED report that
			// never comes; an answer that is no answer (Unavailable) has it send the order again.
			if !wait(ex.closeDone, deadlineWithin(ctx, closeForOpenWait)) {
				return nil, status.Error(codes.Unavailable, "region "+ri.GetName()+" is still closing on this server: send the open again")
			}
			if cur, ok := s.regions.Load(ri.GetName()); ok && cur == v {
				// Its close failed to flush (the server is aborting, for its WAL to be recovered):
				// opened again from its files it would miss what only that WAL has.
				return nil, status.Error(codes.Unavailable, "region "+ri.GetName()+" failed to close on this server: send the open again")
			}
			if s.stopping.Load() {
				return nil, errStopping
			}
		} else if ex.state.Load() == stateClosing {
			// A graceful stop (or a refused open) is closing it: it leaves the map once flushed,
			// and the order sent again then gets its answer.
			return nil, status.Error(codes.Unavailable, "region "+ri.GetName()+" is being closed on this server: send the open again")
		}
	}
	if v, loaded := s.regions.LoadOrStore(ri.GetName(), or); loaded {
		ex := v.(*onlineRegion)
		ex.openProc.Store(req.GetProcedureId()) // the master's latest order: its reports answer it
		if ex.state.Load() == stateOpen {
			r := ex.r.Load()
			go func() {
				ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
				defer cancel()
				_ = s.report(ctx, ex.info, pb.RegionTransition_REGION_TRANSITION_OPENED, r.ReadPoint(), req.GetProcedureId(), "")
			}()
		}
		return &pb.OpenRegionResponse{}, nil // opening: it reports when done
	}
	if s.stopping.Load() {
		// The stop began after the check above: it may not have seen this entry.
		s.regions.CompareAndDelete(ri.GetName(), or)
		return nil, errStopping
	}
	s.movedMu.Lock()
	delete(s.moved, ri.GetName())
	s.movedMu.Unlock()
	go s.openRegion(or)
	return &pb.OpenRegionResponse{}, nil
}

// errStopping refuses an open order on a stopping server (the master places the region elsewhere).
var errStopping = (&pb.ErrorDetail{Code: pb.ErrorCode_ERROR_CODE_SERVER_STOPPING, Message: "region server is stopping", Retryable: true}).Status()

// closeForOpenWait bounds how long an open order waits for a close of the same region under way
// here.
const closeForOpenWait = 10 * time.Second

// openRegion opens a region in the background and reports the outcome.
func (s *Server) openRegion(or *onlineRegion) {
	defer or.settle()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	start := time.Now()
	var ot openTimes
	r, err := s.doOpen(or, &ot)
	if err != nil {
		s.regions.CompareAndDelete(or.name, or)
		s.log.Warn("opening region failed", "region", or.name, "error", err)
		s.m.failedOpens.Add(1)
		if or.cancel.Load() {
			_ = s.report(ctx, or.info, pb.RegionTransition_REGION_TRANSITION_CLOSED, 0, or.cancelProc.Load(), "")
			return
		}
		_ = s.report(ctx, or.info, pb.RegionTransition_REGION_TRANSITION_FAILED_OPEN, 0, or.openProc.Load(), err.Error())
		return
	}
	r.SetLabelsInUse(s.acl.Load().Labels().Defined())
	or.r.Store(r)
	if or.cancel.Load() {
		r.Abort()
		s.regions.CompareAndDelete(or.name, or)
		_ = s.report(ctx, or.info, pb.RegionTransition_REGION_TRANSITION_CLOSED, 0, or.cancelProc.Load(), "")
		return
	}
	// Serve from here on, while the OPENED report is on its way (HBase's region servers serve a
	// region as soon as it is open, too): the master placed the region on this server before it
	// ordered the open and moves it away only after a close this server confirms (a close that
	// arrives meanwhile is done below, with a flush) or after fencing this server's WAL. Requests
	// no longer wait for the master's catalog write of OPENED, which queues behind others while
	// many regions open at once.
	openSeq := r.ReadPoint()
	or.serving.Store(true)
	or.settle()
	reportStart := time.Now()
	servingAfter := reportStart.Sub(start)
	err = s.report(ctx, or.info, pb.RegionTransition_REGION_TRANSITION_OPENED, openSeq, or.openProc.Load(), "")
	if took := time.Since(start); took >= slowOpen {
		// Requests for the region wait (REGION_OPENING) until it serves: what took it.
		s.log.Info("slow open", "region", or.name, "took", took.Round(time.Millisecond),
			"serving_after", servingAfter.Round(time.Millisecond),
			"functions", ot.functions.Round(time.Millisecond), "open", ot.open.Round(time.Millisecond), "prepared_files", ot.prepared,
			"report_opened", time.Since(reportStart).Round(time.Millisecond))
	}
	if err != nil {
		or.state.Store(stateClosing)
		if d, ok := pb.DetailOf(err); ok && d.GetCode() == pb.ErrorCode_ERROR_CODE_LEASE_EXPIRED {
			// This server was declared dead (report has it start over under a new start code):
			// the master recovers its WAL, which holds what the region took; a flush now could
			// only race the region's next server.
			s.regions.CompareAndDelete(or.name, or)
			r.Abort()
			return
		}
		// The master did not want it here (or could not be told): stop serving and close it
		// as an ordered close does, flushing what it took meanwhile (or aborting the server when
		// that fails), and report it CLOSED — which a close ordered meanwhile waits for.
		s.log.Warn("the master refused the OPENED report; closing the region", "region", or.name, "error", err)
		req := &pb.CloseRegionRequest{Region: or.name, Flush: true}
		s.beginClose(or, req)
		s.closeRegion(or, req)
		return
	}
	// A close may have arrived while reporting: it set the region closing and left the close to
	// this opener, which had already looked at cancel. Close it now (the master took OPENED, so
	// it may have been written to) and report CLOSED, which the order waits for.
	if !or.state.CompareAndSwap(stateOpening, stateOpen) {
		if or.cancel.Load() {
			req := &pb.CloseRegionRequest{Region: or.name, Flush: true, ProcedureId: or.cancelProc.Load()}
			s.beginClose(or, req)
			s.closeRegion(or, req)
			return
		}
		// A graceful stop took the region: it closed the region if it found it stored (a second
		// Close waits for that one); if not, the region never served, and is closed here so
		// that it does not stay open (its blocks, its files) on a server that forgot it. The
		// stop's CLOSED report may have reached the master before this OPENED (and been taken
		// for a stale one): report CLOSED again now that the master has it open here.
		if cerr := r.Close(); cerr == nil || errors.Is(cerr, region.ErrClosed) {
			_ = s.report(ctx, or.info, pb.RegionTransition_REGION_TRANSITION_CLOSED, 0, 0, "")
		}
		return
	}
	if !r.IsReplica() {
		s.startShippers(or, r)
		// A prepare that finished after this open took the map's entry (or found none) is not
		// needed: its readers go now, not when its 30 s are up.
		s.takePrepared(or.name, nil).Release()
	}
	s.log.Info("region opened", "region", or.name, "table", or.tkey, "seconds", time.Since(start).Seconds(), "prepared_files", ot.prepared)
}

// slowOpen is how long an open, its OPENED report included, takes before it is logged with its
// parts ("slow open"), as the region's "slow close".
const slowOpen = 300 * time.Millisecond

// openTimes are the parts of an open, for the slow-open log.
type openTimes struct {
	functions time.Duration // loading the table's functions
	open      time.Duration // .regioninfo and manifest, the store files, replaying what is left
	prepared  int           // store files the open took from a move's prepare (prepare.go)
}

func (s *Server) doOpen(or *onlineRegion, ot *openTimes) (*region.Region, error) {
	t := time.Now()
	set, err := s.openFunctions(or)
	ot.functions = time.Since(t)
	if err != nil {
		return nil, err
	}
	r, err := s.openStorage(or, ot)
	if err != nil {
		if set != nil {
			set.Close()
		}
		return nil, err
	}
	if set != nil {
		or.functions.Store(set)
		r.SetObserver(set) // the region closes it
	}
	return r, nil
}

func (s *Server) openStorage(or *onlineRegion, ot *openTimes) (*region.Region, error) {
	info := layout.StorageInfo(or.info)
	td, err := layout.RegionTableDescriptor(or.table, or.info)
	if err != nil {
		return nil, err
	}
	if or.info.GetReplicaId() > 0 {
		// A read replica opens over its primary's directory, read-only. A new table's primary
		// may be creating it right now: wait a little, then create it (same descriptor).
		info.Name = layout.PrimaryName(or.info.GetName())
		ri := path.Join(info.Dir(), ".regioninfo")
		for wait := 0; ; wait++ {
			ok, err := s.exists(ri)
			if err != nil {
				return nil, err
			}
			if ok {
				break
			}
			if wait == 50 || or.cancel.Load() {
				if err := s.createRegion(td, info); err != nil {
					return nil, err
				}
				break
			}
			time.Sleep(100 * time.Millisecond) // polling the shared storage for the primary's directory
		}
		cfg := s.regionConfig(or.table, or.name)
		cfg.Descriptor = &td // the master's, which the primary's .regioninfo may not have yet (an alter)
		return region.OpenReplica(cfg, info)
	}
	// The open writes the directory when new and refreshes .regioninfo (atomically) with the
	// master's table descriptor, so a reopen after ModifyTable sees the new families.
	s.noteRegionForArchive(or.name, or.tkey)
	cfg := s.regionConfig(or.table, or.name)
	cfg.Descriptor = &td
	cfg.Prepared = s.takePrepared(or.name, nil)
	t := time.Now()
	r, err := region.Open(cfg, info)
	ot.open = time.Since(t)
	if err != nil {
		return nil, err
	}
	if ot.prepared = cfg.Prepared.Taken(); ot.prepared > 0 {
		s.m.preparedOpens.Add(1)
	}
	// Every primary keeps a change queue for read replicas; it holds nothing until a replica
	// asks (a table's replication may be raised while the region is open).
	if err := r.EnableReplication(region.ReplicationOptions{MaxBytes: s.cfg.ReplicationQueueBytes}); err != nil {
		r.Abort()
		return nil, err
	}
	return r, nil
}

// checkProcess refuses an order meant for another process of this server's name (the master
// still thinks a process this one replaced is live: after a failover, or before this process
// registered with it).
func (s *Server) checkProcess(startCode int64) *pb.ErrorDetail {
	cur := s.serverName().GetStartCode()
	if startCode != 0 && startCode == s.droppedCode.Load() {
		return &pb.ErrorDetail{Code: pb.ErrorCode_ERROR_CODE_WRONG_SERVER_PROCESS,
			Message: fmt.Sprintf("process %d of %s dropped its regions unflushed and is starting over under a new start code: recover its WAL", startCode, s.nameStr)}
	}
	if startCode == 0 || startCode == cur {
		return nil
	}
	return &pb.ErrorDetail{Code: pb.ErrorCode_ERROR_CODE_WRONG_SERVER_PROCESS,
		Message: fmt.Sprintf("the order is for process %d of %s, which is gone; this is process %d: recover the old process's WAL", startCode, s.nameStr, cur)}
}

func (a *adminService) CloseRegion(_ context.Context, req *pb.CloseRegionRequest) (*pb.CloseRegionResponse, error) {
	s := a.s
	name := req.GetRegion()
	if d := s.checkProcess(req.GetServerStartCode()); d != nil {
		// Before the lookup: this process does not have the region because it is not the process
		// the order is for, and that one's unflushed edits are in its WAL (not "closed").
		return nil, d.Status()
	}
	v, ok := s.regions.Load(name)
	if !ok {
		return nil, (&pb.ErrorDetail{Code: pb.ErrorCode_ERROR_CODE_NOT_SERVING_REGION, Region: name,
			Message: "region is not on " + s.nameStr}).Status()
	}
	or := v.(*onlineRegion)
	if req.GetFlush() && or.state.Load() == stateOpen {
		// A move: flush while the region still serves (HBase's pre-close flush), then close it
		// with what was written meanwhile. The region is unavailable only for that last,
		// small flush instead of a flush of its whole memstore.
		if !or.preClosing.CompareAndSwap(false, true) {
			return &pb.CloseRegionResponse{}, nil // already closing: it reports when done
		}
		go func() {
			if r := or.r.Load(); r != nil {
				// No compaction from here on: the close would wait for its writes.
				r.HoldCompactions()
			}
			preCloseFlush := func() {
				if r := or.r.Load(); r != nil && or.info.GetReplicaId() == 0 && r.MemstoreStats().DataBytes > 0 {
					start := time.Now()
					if _, err := r.Flush(); err != nil && !errors.Is(err, region.ErrClosed) {
						s.log.Warn("pre-close flush failed; the close flushes", "region", name, "error", err)
					}
					s.log.Debug("pre-close flush", "region", name, "took", time.Since(start).Round(time.Millisecond))
				}
			}
			preCloseFlush()
			// The destination opens the store files now, while the region still serves here.
			if s.prepareAt(or, req) && req.GetHandoff() {
				if r := or.r.Load(); r != nil && !r.HandoffFits() {
					// Written meanwhile more than the close can hand off: flushed again while the
					// region serves (the destination opens that one file itself), not by the
					// close while its writes wait.
					preCloseFlush()
				}
			}
			if !or.state.CompareAndSwap(stateOpen, stateClosing) {
				return // a stop or an abort took it over meanwhile: that reports
			}
			s.beginClose(or, req)
			s.closeRegion(or, req)
		}()
		return &pb.CloseRegionResponse{}, nil
	}
	if or.state.Load() == stateOpening {
		// Before the switch to closing, not after: an opener that finds the region closing reads
		// cancel to tell this order from a stop, and must find it set. (If the opener switches
		// to open first, cancel is never read again and the case below closes the region.)
		if req.GetDestination() != nil {
			s.rememberMoved(name, req.GetDestination(), req.GetDestinationSeq(), nil)
		}
		or.cancelProc.Store(req.GetProcedureId())
		or.cancel.Store(true)
	}
	switch {
	case or.state.CompareAndSwap(stateOpening, stateClosing):
		// The opener sees the cancel, aborts and reports CLOSED.
		return &pb.CloseRegionResponse{}, nil
	case or.state.CompareAndSwap(stateOpen, stateClosing):
		s.beginClose(or, req)
	default:
		return &pb.CloseRegionResponse{}, nil // already closing: it reports when done
	}
	go s.closeRegion(or, req)
	return &pb.CloseRegionResponse{}, nil
}

// beginClose marks a region this server has just put in stateClosing as closeRegion's (right
// after the switch, before anything else can look at it): lookups and a stop see a close under
// way, and a move's destination is remembered for REGION_MOVED.
func (s *Server) beginClose(or *onlineRegion, req *pb.CloseRegionRequest) {
	if or.closeDone != nil {
		or.closing.Store(true)
	}
	if req.GetDestination() != nil {
		s.rememberMoved(or.name, req.GetDestination(), req.GetDestinationSeq(), or.closeDone)
	}
}

// closeRegion closes a region this server has put in stateClosing (with a flush unless the order
// says not) and reports it CLOSED.
//
// The region stays in the server's map while it closes: reads are served until its last flush is
// done, writes wait (lookup) until it was reported. It leaves the map before the report, so an
// order to open it here again, sent when the master has the report, finds no trace of it.
func (s *Server) closeRegion(or *onlineRegion, req *pb.CloseRegionRequest) {
	name := or.name
	if or.closing.Load() {
		defer close(or.closeDone)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	start := time.Now()
	var closed time.Duration
	if r := or.r.Load(); r != nil {
		if req.GetFlush() {
			var err error
			if req.GetDestination() != nil && req.GetHandoff() {
				// A move (and every live server reads handed-off edits): the region opens at
				// once elsewhere, which replays a few last edits from the manifest as cheaply as
				// it reads a store file.
				err = r.CloseForMove()
			} else {
				err = r.Close()
			}
			closed = time.Since(start)
			if errors.Is(err, region.ErrAborted) {
				// The server dropped its regions unflushed (it is aborting or starting over under a
				// new start code): their edits are recovered from its WAL, not reported closed.
				s.regions.CompareAndDelete(name, or)
				s.log.Warn("region aborted while closing: left to WAL recovery", "region", name)
				return
			}
			if err != nil && !errors.Is(err, region.ErrClosed) {
				// Its unflushed edits are only in this server's WAL: reporting CLOSED would
				// let the region open elsewhere (or split) without them. Abort instead, as
				// HBase does: the master recovers this server's WAL and reassigns.
				// The region stays in the map (closing): orders for it are answered as for a
				// region being closed here, never as for one this server does not have, which
				// the master would take for closed.
				s.log.Error("closing region failed to flush: aborting the server so that its WAL is recovered",
					"region", name, "error", err)
				go s.Abort()
				return
			}
		} else {
			r.Abort()
		}
	}
	s.regions.CompareAndDelete(name, or)
	reportStart := time.Now()
	err := s.report(ctx, or.info, pb.RegionTransition_REGION_TRANSITION_CLOSED, 0, req.GetProcedureId(), "")
	if took := time.Since(start); took >= slowOpen {
		// Writes for the region wait all this time (the region's own "slow close" says what its
		// flush took): the CLOSED report is answered once the master has written it and sent the
		// open order to the destination.
		s.log.Info("slow close reported", "region", name, "took", took.Round(time.Millisecond),
			"close", closed.Round(time.Millisecond), "report_closed", time.Since(reportStart).Round(time.Millisecond))
	}
	s.log.Info("region closed", "region", name, "flushed", req.GetFlush(), "close_took", closed.Round(time.Millisecond),
		"took", time.Since(start).Round(time.Millisecond), "report_error", err)
}

// exists reports whether a file (or object) of the shared storage exists.
func (s *Server) exists(p string) (bool, error) {
	if s.cfg.Bucket != nil {
		_, err := s.cfg.Bucket.Stat(context.Background(), p)
		if errors.Is(err, storage.ErrNoObject) {
			return false, nil
		}
		return err == nil, err
	}
	return storage.Exists(s.cfg.FS, p)
}

// createRegion writes a region's .regioninfo (and directories) where this server keeps regions.
func (s *Server) createRegion(td region.TableDescriptor, info region.Info) error {
	if s.cfg.Bucket != nil {
		return region.CreateOnBucket(s.cfg.Bucket, td, info)
	}
	return region.Create(s.cfg.FS, td, info)
}
