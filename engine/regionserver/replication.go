package regionserver

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"

	pb "github.com/cellstore/cellstore/engine/api/cellstore/v1"
	"github.com/cellstore/cellstore/engine/layout"
	"github.com/cellstore/cellstore/engine/memstore"
	"github.com/cellstore/cellstore/engine/region"
	"github.com/cellstore/cellstore/engine/security"
	"github.com/cellstore/cellstore/engine/wal"
)

// Read replicas on the region server (docs/regionserver.md, "Read replicas"). A primary runs a
// shipper per replica: it takes the region's change queue in batches and sends them to the
// replica's server with ReplicateEdits, starting a new session whenever the replica asks. A
// server holding a replica asks the primary's server for a session (RequestReplication) when the
// replica opens and whenever it has heard nothing for replicaSilence.

var (
	// shipHeartbeat: an idle shipper sends an empty batch this often, so the replica knows its
	// primary is alive and its read point current.
	shipHeartbeat = 2 * time.Second
	// replicaSilence: a replica that heard nothing from its primary for this long asks again.
	replicaSilence = 3 * shipHeartbeat
	// shipMaxEntries and shipMaxBytes bound one batch.
	shipMaxEntries       = 1024
	shipMaxBytes   int64 = 1 << 20
)

type shipperKey struct {
	region  string // the primary's name
	replica int32
}

// shipper ships one primary region's changes to one of its replicas.
type shipper struct {
	s       *Server
	or      *onlineRegion
	r       *region.Region
	id      int32
	replica string // the replica's region name

	addr    string // the replica server's Admin address ("" = locate first)
	session uint64
	num     uint64
	sent    atomic.Int64 // batches acknowledged
	lastAck atomic.Int64 // unix nanos
}

// startShippers starts the shippers of a primary that just opened, one per replica its table has.
func (s *Server) startShippers(or *onlineRegion, r *region.Region) {
	for id := int32(1); id < or.table.GetRegionReplication(); id++ {
		s.ensureShipper(or, r, id)
	}
}

func (s *Server) ensureShipper(or *onlineRegion, r *region.Region, id int32) {
	if !r.ReplicationEnabled() {
		return
	}
	key := shipperKey{or.name, id}
	sh := &shipper{s: s, or: or, r: r, id: id, replica: layout.ReplicaName(or.info.GetRegionId(), id)}
	if _, loaded := s.shippers.LoadOrStore(key, sh); loaded {
		return
	}
	s.bg.Add(1)
	go func() {
		defer s.bg.Done()
		defer s.shippers.CompareAndDelete(key, sh)
		defer r.DropReplication(id)
		sh.run()
	}()
}

func (sh *shipper) live() bool {
	return sh.or.live() && sh.or.r.Load() == sh.r && !sh.s.stopping.Load()
}

// sleep waits d or until the server stops; false when it stops.
func (sh *shipper) sleep(d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-sh.s.quit:
		return false
	case <-t.C:
		return true
	}
}

func (sh *shipper) run() {
	log := sh.s.log.With("region", sh.or.name, "replica", sh.id)
	backoff := 50 * time.Millisecond
	fail := func() bool {
		ok := sh.sleep(backoff)
		backoff = min(2*backoff, 2*time.Second)
		return ok
	}
	var pending *region.ReplicationBatch
	lastSend := time.Now()
	for sh.live() {
		if pending == nil {
			b, wait := sh.r.NextReplicationBatch(sh.id, shipMaxEntries, shipMaxBytes)
			if b.NeedSession {
				sh.session = 0
				// Only for a replica that is open somewhere: a session costs a flush, and the
				// queue would only fill up again meanwhile.
				if sh.addr == "" {
					if err := sh.locateNow(); err != nil {
						if errors.Is(err, errNoSuchReplica) {
							log.Info("the table no longer has this replica: not shipping to it")
							return
						}
						if !fail() {
							return
						}
						continue
					}
				}
				if err := sh.r.StartReplicationSession(sh.id); err != nil {
					log.Debug("starting a replication session failed", "error", err)
					if !fail() {
						return
					}
				}
				sh.s.m.replicationSessions.Add(1)
				continue
			}
			if len(b.Entries) == 0 {
				idle := time.Since(lastSend)
				if idle < shipHeartbeat || sh.session == 0 || b.Session != sh.session {
					t := time.NewTimer(max(shipHeartbeat-idle, 10*time.Millisecond))
					select {
					case <-sh.s.quit:
						t.Stop()
						return
					case <-wait:
					case <-t.C:
					}
					t.Stop()
					continue
				}
			}
			if len(b.Entries) > 0 && b.Entries[0].SessionStart {
				sh.session, sh.num = b.Session, 1
			} else {
				sh.num++
			}
			pending = &b
		}
		resp, err := sh.send(pending)
		if errors.Is(err, errNoSuchReplica) {
			log.Info("the table no longer has this replica: not shipping to it")
			return
		}
		if err != nil {
			log.Debug("replicating to the replica failed", "to", sh.addr, "error", err)
			if d, ok := pb.DetailOf(err); !ok || d.GetCode() != pb.ErrorCode_ERROR_CODE_REGION_OPENING {
				sh.addr = "" // locate again
			}
			if !fail() {
				return
			}
			continue
		}
		lastSend = time.Now()
		if resp.GetFlushRequested() {
			sh.s.requestPrimaryFlush(sh.r)
		}
		if resp.GetResync() {
			// Backing off here too: a replica that keeps failing to apply must not make the
			// primary flush in a tight loop.
			pending, sh.session = nil, 0
			if !fail() {
				return
			}
			sh.s.m.replicationSessions.Add(1)
			if err := sh.r.StartReplicationSession(sh.id); err != nil {
				log.Debug("starting a replication session failed", "error", err)
			}
			continue
		}
		backoff = 50 * time.Millisecond
		sh.r.AckReplication(*pending)
		sh.sent.Add(1)
		sh.lastAck.Store(time.Now().UnixNano())
		pending = nil
	}
}

var (
	errReplicaNotOpen = errors.New("the replica is not open anywhere yet")
	errNoSuchReplica  = errors.New("the master lists no such replica")
)

func (sh *shipper) locateNow() error {
	ctx, cancel := sh.s.callContext(10 * time.Second)
	defer cancel()
	return sh.locate(ctx)
}

// locate finds the replica's server.
func (sh *shipper) locate(ctx context.Context) error {
	ti := sh.or.info.GetTable()
	var resp *pb.LocateRegionResponse
	err := sh.s.callMaster(ctx, func(ctx context.Context, mc pb.MasterClient) error {
		var err error
		resp, err = mc.LocateRegion(ctx, &pb.LocateRegionRequest{Table: ti, Row: sh.or.info.GetStartKey(), AllReplicas: true})
		return err
	})
	if err != nil {
		return err
	}
	for _, loc := range resp.GetLocations() {
		ri := loc.GetRegion()
		if ri.GetReplicaId() == sh.id && ri.GetRegionId() == sh.or.info.GetRegionId() {
			if loc.GetServer() == nil || loc.GetAdminAddress() == "" {
				return errReplicaNotOpen
			}
			sh.addr, sh.replica = loc.GetAdminAddress(), ri.GetName()
			return nil
		}
	}
	return fmt.Errorf("%w: replica %d of region %s", errNoSuchReplica, sh.id, sh.or.name)
}

// callContext bounds a call to another server by d and by the server's stop (so Stop and Abort do
// not wait for calls to a dead peer).
func (s *Server) callContext(d time.Duration) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	go func() {
		select {
		case <-s.quit:
			cancel()
		case <-ctx.Done():
		}
	}()
	return ctx, cancel
}

func (sh *shipper) send(b *region.ReplicationBatch) (*pb.ReplicateEditsResponse, error) {
	ctx, cancel := sh.s.callContext(10 * time.Second)
	defer cancel()
	if sh.addr == "" {
		if err := sh.locate(ctx); err != nil {
			return nil, err
		}
	}
	req := &pb.ReplicateEditsRequest{Region: sh.replica, ReplicaId: sh.id, Session: sh.session, Batch: sh.num,
		ReadPoint: b.ReadPoint, Entries: make([]*pb.ReplicationEntry, 0, len(b.Entries))}
	for i, e := range b.Entries {
		if i == 0 {
			req.OldestUnixMs = e.Time.UnixMilli()
		}
		pe := &pb.ReplicationEntry{Seq: e.Seq, FlushCommit: e.FlushCommit, SessionStart: e.SessionStart}
		switch e.Kind {
		case region.ReplEdit:
			pe.Kind = pb.ReplicationEntry_KIND_EDIT
			var err error
			if pe.Edit, err = wal.AppendEditRecord(nil, e.Edit); err != nil {
				return nil, err
			}
		case region.ReplFlushStart:
			pe.Kind = pb.ReplicationEntry_KIND_FLUSH_START
			if len(e.Families) > 0 {
				pe.Kind, pe.Families = pb.ReplicationEntry_KIND_FLUSH_START_FAMILIES, e.Families
			}
		case region.ReplFiles:
			pe.Kind, pe.Manifest = pb.ReplicationEntry_KIND_FILES, e.Manifest
		}
		req.Entries = append(req.Entries, pe)
	}
	ac, err := sh.s.adminClient(sh.addr)
	if err != nil {
		return nil, err
	}
	return ac.ReplicateEdits(ctx, req)
}

// requestPrimaryFlush flushes a primary whose replica is short of memory, at most once a second.
func (s *Server) requestPrimaryFlush(r *region.Region) {
	key := r.Name()
	now := time.Now().UnixNano()
	if v, ok := s.replFlushAt.Load(key); ok && now-v.(int64) < int64(time.Second) {
		return
	}
	s.replFlushAt.Store(key, now)
	go func() {
		if _, err := r.Flush(); err != nil {
			s.log.Debug("flush for a replica failed", "region", key, "error", err)
		}
	}()
}

// adminClient returns a (cached) client of another server's Admin service.
func (s *Server) adminClient(addr string) (pb.AdminClient, error) {
	s.adminMu.Lock()
	defer s.adminMu.Unlock()
	if c, ok := s.adminConns[addr]; ok {
		return pb.NewAdminClient(c), nil
	}
	c, err := security.Dial(addr, s.cfg.creds())
	if err != nil {
		return nil, err
	}
	if s.adminConns == nil {
		s.adminConns = map[string]*grpc.ClientConn{}
	}
	s.adminConns[addr] = c
	return pb.NewAdminClient(c), nil
}

func (s *Server) closeAdminConns() {
	s.adminMu.Lock()
	defer s.adminMu.Unlock()
	for a, c := range s.adminConns {
		c.Close()
		delete(s.adminConns, a)
	}
}

// ReplicateEdits applies a primary's batch to a replica held here.
func (a *adminService) ReplicateEdits(_ context.Context, req *pb.ReplicateEditsRequest) (*pb.ReplicateEditsResponse, error) {
	s := a.s
	or, r, d := s.lookup(req.GetRegion())
	if d != nil {
		return nil, d.Status()
	}
	if !r.IsReplica() {
		return nil, (&pb.ErrorDetail{Code: pb.ErrorCode_ERROR_CODE_FAILED_PRECONDITION, Region: or.name,
			Message: "region " + or.name + " is not a read replica"}).Status()
	}
	entries := make([]*region.ReplicationEntry, 0, len(req.GetEntries()))
	edits := 0
	for i, pe := range req.GetEntries() {
		e := &region.ReplicationEntry{Seq: pe.GetSeq(), FlushCommit: pe.GetFlushCommit(), SessionStart: pe.GetSessionStart(),
			Session: req.GetSession()}
		switch pe.GetKind() {
		case pb.ReplicationEntry_KIND_EDIT:
			e.Kind, e.Edit = region.ReplEdit, &wal.Edit{}
			if err := wal.DecodeEditRecord(pe.GetEdit(), e.Edit); err != nil {
				return nil, invalid("replication entry %d: %v", i, err).Status()
			}
			if e.Edit.Seq != e.Seq {
				return nil, invalid("replication entry %d: edit has sequence id %d, entry %d", i, e.Edit.Seq, e.Seq).Status()
			}
			edits++
		case pb.ReplicationEntry_KIND_FLUSH_START:
			e.Kind = region.ReplFlushStart
		case pb.ReplicationEntry_KIND_FLUSH_START_FAMILIES:
			if len(pe.GetFamilies()) == 0 {
				return nil, invalid("replication entry %d: a per-family flush start names no family", i).Status()
			}
			e.Kind, e.Families = region.ReplFlushStart, pe.GetFamilies()
		case pb.ReplicationEntry_KIND_FILES:
			e.Kind, e.Manifest = region.ReplFiles, pe.GetManifest()
		default:
			return nil, invalid("replication entry %d has kind %v", i, pe.GetKind()).Status()
		}
		entries = append(entries, e)
	}
	or.lastReplicated.Store(time.Now().UnixNano())
	res, err := r.ApplyReplication(req.GetSession(), req.GetBatch(), entries, req.GetReadPoint())
	resp := &pb.ReplicateEditsResponse{AppliedSeq: res.ReadPoint, Resync: res.Resync}
	if err != nil {
		if !res.Resync {
			return nil, s.errDetail(err, or.name).Status()
		}
		s.log.Warn("a replica could not apply a batch; asking for a new session", "region", or.name, "error", err)
		resp.FlushRequested = errors.Is(err, memstore.ErrFull) || errors.Is(err, region.ErrWritesBlocked)
	}
	if res.Resync {
		s.m.replicationResyncs.Add(1)
	} else if !res.Duplicate {
		s.m.replicatedEdits.Add(int64(edits))
	}
	if or.flushWanted.Swap(false) {
		resp.FlushRequested = true
	}
	return resp, nil
}

// RequestReplication starts (if it is not running) the shipper of a primary held here to one of
// its replicas.
func (a *adminService) RequestReplication(_ context.Context, req *pb.RequestReplicationRequest) (*pb.RequestReplicationResponse, error) {
	s := a.s
	or, r, d := s.lookup(req.GetRegion())
	if d != nil {
		return nil, d.Status()
	}
	if r.IsReplica() || req.GetReplicaId() < 1 || req.GetReplicaId() > 16 {
		return nil, invalid("RequestReplication needs a primary region and a replica id 1..16").Status()
	}
	s.ensureShipper(or, r, req.GetReplicaId())
	return &pb.RequestReplicationResponse{}, nil
}

// replicaWatch makes every replica held here ask its primary for changes when it has none
// coming: right after it opened, and after replicaSilence without a batch (the primary moved,
// or its table's replication was raised after it opened).
func (s *Server) replicaWatch() {
	s.every(500*time.Millisecond, func() {
		now := time.Now().UnixNano()
		s.regions.Range(func(_, v any) bool {
			or := v.(*onlineRegion)
			r := or.r.Load()
			if r == nil || !r.IsReplica() || or.state.Load() != stateOpen {
				return true
			}
			st := r.ReplicaState()
			quiet := now-or.lastReplicated.Load() > int64(replicaSilence)
			if (st.Session != 0 && !quiet) || now-or.lastAsked.Load() < int64(replicaSilence/2) {
				return true
			}
			or.lastAsked.Store(now)
			s.bg.Add(1)
			go func() {
				defer s.bg.Done()
				if err := s.askPrimary(or); err != nil {
					s.log.Debug("asking the primary for replication failed", "region", or.name, "error", err)
				}
			}()
			return true
		})
	})
}

func (s *Server) askPrimary(or *onlineRegion) error {
	ctx, cancel := s.callContext(10 * time.Second)
	defer cancel()
	var resp *pb.LocateRegionResponse
	if err := s.callMaster(ctx, func(ctx context.Context, mc pb.MasterClient) error {
		var err error
		resp, err = mc.LocateRegion(ctx, &pb.LocateRegionRequest{Table: or.info.GetTable(), Row: or.info.GetStartKey()})
		return err
	}); err != nil {
		return err
	}
	locs := resp.GetLocations()
	if len(locs) == 0 || locs[0].GetRegion().GetRegionId() != or.info.GetRegionId() || locs[0].GetAdminAddress() == "" {
		return errors.New("the primary is not open")
	}
	ac, err := s.adminClient(locs[0].GetAdminAddress())
	if err != nil {
		return err
	}
	_, err = ac.RequestReplication(ctx, &pb.RequestReplicationRequest{Region: locs[0].GetRegion().GetName(), ReplicaId: or.info.GetReplicaId()})
	return err
}

// replicationLag is a primary's queue for one replica: entries not acknowledged and the age of the
// oldest.
func (s *Server) replicationLag(fn func(replica string, edits int, age time.Duration)) {
	now := time.Now()
	s.shippers.Range(func(_, v any) bool {
		sh := v.(*shipper)
		st := sh.r.ReplicationStats(sh.id)
		var age time.Duration
		if !st.Oldest.IsZero() {
			age = now.Sub(st.Oldest)
		}
		fn(sh.replica, st.Pending, age)
		return true
	})
}
