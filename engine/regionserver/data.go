package regionserver

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/protobuf/proto"

	pb "github.com/cellstore/cellstore/engine/api/cellstore/v1"
	"github.com/cellstore/cellstore/engine/cell"
	"github.com/cellstore/cellstore/engine/quota"
	"github.com/cellstore/cellstore/engine/region"
	"github.com/cellstore/cellstore/engine/region/filter"
	"github.com/cellstore/cellstore/engine/rpc"
	"github.com/cellstore/cellstore/engine/wal"
)

func (s *Server) handlers() map[uint32]rpc.Handler {
	return map[uint32]rpc.Handler{
		uint32(pb.Method_METHOD_PING):   s.handlePing,
		uint32(pb.Method_METHOD_GET):    s.handleGet,
		uint32(pb.Method_METHOD_MUTATE): s.handleMutate,
		uint32(pb.Method_METHOD_MULTI):  s.handleMulti,
		uint32(pb.Method_METHOD_SCAN):   s.handleScan,

		uint32(pb.Method_METHOD_AGGREGATE):     s.handleAggregate,
		uint32(pb.Method_METHOD_CALL_FUNCTION): s.handleCallFunction,
		uint32(pb.Method_METHOD_BULK_DELETE):   s.handleBulkDelete,
	}
}

// safe turns a panic in a handler into an error answer, so that a malformed request the checks
// missed cannot take the server down.
func (s *Server) safe(c *rpc.Call, answered *bool) {
	if p := recover(); p != nil {
		s.logPanic("panic serving a call", p, "method", c.Method)
		if !*answered {
			*answered = true
			c.Fail(&pb.ErrorDetail{Code: pb.ErrorCode_ERROR_CODE_UNKNOWN, Message: "internal error serving the request"})
		}
	}
}

// logPanic logs a recovered panic p with where it happened: called in the deferred function that
// recovered it, the stack still holds the panicking frames.
func (s *Server) logPanic(msg string, p any, args ...any) {
	s.log.Error(msg, append(args, "panic", p, "stack", string(debug.Stack()))...)
}

func fail(c *rpc.Call, answered *bool, d *pb.ErrorDetail) {
	*answered = true
	c.Fail(d)
}

func reply(c *rpc.Call, answered *bool, m proto.Message, cells ...[]byte) {
	*answered = true
	c.Reply(m, cells...)
}

func (s *Server) handlePing(_ context.Context, c *rpc.Call) {
	req, err := rpc.Request[pb.PingRequest](c)
	if err != nil {
		c.Fail(invalid("bad PingRequest: %v", err))
		return
	}
	c.Reply(&pb.PingResponse{Payload: req.GetPayload()})
}

// errDetail maps a region error to a typed error.
func (s *Server) errDetail(err error, regionName string) *pb.ErrorDetail {
	var d *pb.ErrorDetail
	if errors.As(err, &d) {
		if d.Region == "" && regionName != "" {
			d = proto.Clone(d).(*pb.ErrorDetail)
			d.Region = regionName
		}
		return d
	}
	var th *quota.Throttled
	if errors.As(err, &th) {
		return &pb.ErrorDetail{Code: pb.ErrorCode_ERROR_CODE_THROTTLED, Message: th.Error(), Region: regionName,
			RetryAfterMs: max(th.RetryAfter.Milliseconds(), 1), Retryable: true, ThrottleType: th.Type}
	}
	mk := func(code pb.ErrorCode, retry bool) *pb.ErrorDetail {
		return &pb.ErrorDetail{Code: code, Message: err.Error(), Region: regionName, Retryable: retry}
	}
	switch {
	case errors.Is(err, wal.ErrBroken):
		return walBroken(regionName, err)
	case errors.Is(err, region.ErrClosed), errors.Is(err, region.ErrBroken), errors.Is(err, wal.ErrFenced):
		// A fenced WAL: the master took this server for dead and recovers its regions elsewhere.
		// The write was not acknowledged (with several PUTs in flight its object may still have
		// been written, and recovered): a retry finds the region's new server, and an
		// increment's nonce keeps a retry from counting twice, as after any unanswered call.
		return s.notServing(regionName)
	case errors.Is(err, region.ErrReadOnlyReplica):
		return mk(pb.ErrorCode_ERROR_CODE_READ_ONLY_REPLICA, false)
	case errors.Is(err, region.ErrWrongRegion):
		return mk(pb.ErrorCode_ERROR_CODE_WRONG_REGION, true)
	case errors.Is(err, region.ErrNoSuchFamily):
		return mk(pb.ErrorCode_ERROR_CODE_NO_SUCH_FAMILY, false)
	case errors.Is(err, region.ErrWritesBlocked):
		d := mk(pb.ErrorCode_ERROR_CODE_WRITES_BLOCKED, true)
		d.RetryAfterMs = 500
		return d
	case errors.Is(err, region.ErrRowLockTimeout):
		return mk(pb.ErrorCode_ERROR_CODE_TOO_BUSY, true)
	case errors.Is(err, region.ErrNotALong):
		return mk(pb.ErrorCode_ERROR_CODE_BAD_VALUE, false)
	case errors.Is(err, region.ErrCorrupt):
		return mk(pb.ErrorCode_ERROR_CODE_CORRUPTION, false)
	case errors.Is(err, region.ErrFunctionBusy):
		// No instance of the function could run the call in time: nothing was written or read
		// (a post-mutate hook's errors never reach the client), so the client may retry, as
		// after HBase's RegionTooBusyException.
		return mk(pb.ErrorCode_ERROR_CODE_TOO_BUSY, true)
	case errors.Is(err, region.ErrFunction):
		return mk(pb.ErrorCode_ERROR_CODE_FUNCTION_FAILED, false)
	case errors.Is(err, region.ErrInvalid), errors.Is(err, cell.ErrCellTooLarge), errors.Is(err, cell.ErrRowTooLong),
		errors.Is(err, cell.ErrEmptyRow), errors.Is(err, cell.ErrEmptyFamily), errors.Is(err, cell.ErrFamilyTooLong),
		errors.Is(err, cell.ErrInvalidType), errors.Is(err, cell.ErrNegativeTimestamp), errors.Is(err, cell.ErrMalformed):
		return mk(pb.ErrorCode_ERROR_CODE_INVALID_ARGUMENT, false)
	}
	return mk(pb.ErrorCode_ERROR_CODE_UNKNOWN, false)
}

// outcomeUnknown answers a conditional write that was applied while the server could not
// acknowledge it: a retry would find its own effect (the condition failing, or applied twice).
func outcomeUnknown(regionName string) *pb.ErrorDetail {
	return unknownOutcome(regionName, "this server's lease at the master may have expired meanwhile")
}

// unknownOutcome is outcomeUnknown with why the write cannot be acknowledged.
func unknownOutcome(regionName, why string) *pb.ErrorDetail {
	return &pb.ErrorDetail{Code: pb.ErrorCode_ERROR_CODE_OUTCOME_UNKNOWN, Region: regionName, Retryable: false,
		Message: "the conditional write was applied, but " + why + ", so it cannot be acknowledged: " +
			"whether it stays is not known; read the row to know (not retried: a retry would see its own effect)"}
}

// conditionalWriteErr answers a conditional write's error: one whose WAL sync failed after it was
// applied is outcomeUnknown (its edit may be in the log and recovered with the region), any other
// is errDetail's (the write was refused before it reached the log).
func (s *Server) conditionalWriteErr(err error, regionName string) *pb.ErrorDetail {
	if errors.Is(err, region.ErrUnsynced) {
		return unknownOutcome(regionName, "its WAL write failed ("+err.Error()+"); the region moves once storage recovers")
	}
	return s.errDetail(err, regionName)
}

// unknownOutcomes rewrites a multi's answer when the fence closed after its writes: when a
// conditional region action was applied, every region action is answered on its own — that one
// outcomeUnknown, the others fenced (retryable) — and true; else false (the whole call is
// answered fenced).
func unknownOutcomes(ras []*pb.RegionAction, resp *pb.MultiResponse, fenced *pb.ErrorDetail) bool {
	applied := func(i int) bool {
		ra, r := ras[i], resp.Results[i]
		return (ra.GetCondition() != nil || len(ra.GetConditions()) > 0) && r.GetException() == nil && r.GetProcessed()
	}
	some := false
	for i := range ras {
		some = some || applied(i)
	}
	if !some {
		return false
	}
	for i, ra := range ras {
		name := ra.GetRegion().GetName()
		if applied(i) {
			resp.Results[i] = &pb.RegionActionResult{Exception: outcomeUnknown(name)}
			continue
		}
		d := proto.CloneOf(fenced)
		d.Region = name
		resp.Results[i] = &pb.RegionActionResult{Exception: d}
	}
	return true
}

// walBroken is the answer to writes while the WAL cannot be written: retryable, since the server
// hands its regions back to the master once storage takes a new WAL.
func walBroken(regionName string, err error) *pb.ErrorDetail {
	return &pb.ErrorDetail{Code: pb.ErrorCode_ERROR_CODE_WRITES_BLOCKED, Region: regionName, Retryable: true, RetryAfterMs: 1000,
		Message: "this region server cannot write its WAL (" + err.Error() + "): its regions move once storage recovers; retry"}
}

// checkRead refuses reads of a primary while the fence is closed: the lease may have expired (a
// server paused past its lease, say) and the region may already be open elsewhere, taking writes
// this server has not seen, so an answer could be stale. Read replicas answer anyway: their reads
// are stale by contract (TIMELINE).
func (s *Server) checkRead(or *onlineRegion) *pb.ErrorDetail {
	if or.info.GetReplicaId() > 0 {
		return nil
	}
	return s.fenceClosed(or.name)
}

// checkWrite refuses writes this server may not acknowledge.
func (s *Server) checkWrite(or *onlineRegion) *pb.ErrorDetail {
	if s.stopping.Load() {
		return &pb.ErrorDetail{Code: pb.ErrorCode_ERROR_CODE_SERVER_STOPPING, Region: or.name,
			Message: "region server is stopping", Retryable: true, RetryAfterMs: 200}
	}
	if or.info.GetReplicaId() > 0 {
		return &pb.ErrorDetail{Code: pb.ErrorCode_ERROR_CODE_READ_ONLY_REPLICA, Region: or.name,
			Message: "read replicas refuse writes; write to the primary"}
	}
	if or.table.GetReadOnly() {
		return &pb.ErrorDetail{Code: pb.ErrorCode_ERROR_CODE_FAILED_PRECONDITION, Region: or.name,
			Message: "table " + or.tkey + " is read-only"}
	}
	return s.fenceClosed(or.name)
}

// fenceClosed is LEASE_EXPIRED when the fence is closed: writes may not be acknowledged.
func (s *Server) fenceClosed(regionName string) *pb.ErrorDetail {
	if f := s.fence.Load(); f == nil || !f.Open() {
		return &pb.ErrorDetail{Code: pb.ErrorCode_ERROR_CODE_LEASE_EXPIRED, Region: regionName,
			Message: "this server's lease at the master may have expired: it does not acknowledge writes", Retryable: true, RetryAfterMs: 200}
	}
	return nil
}

func hasWrites(ras []*pb.RegionAction) bool {
	for _, ra := range ras {
		if ra.Writes() {
			return true
		}
	}
	return false
}

// regionGroups groups a multi's region actions by region (indexes in request order, regions in
// the order they first appear) and counts the regions written to.
func regionGroups(ras []*pb.RegionAction) (groups [][]int, writers int) {
	if len(ras) < 2 {
		return nil, 0
	}
	byName := map[string]int{}
	var writes []bool
	for i, ra := range ras {
		name := string(ra.GetRegion().GetName())
		g, ok := byName[name]
		if !ok {
			g = len(groups)
			byName[name] = g
			groups = append(groups, nil)
			writes = append(writes, false)
		}
		groups[g] = append(groups[g], i)
		if !writes[g] && ra.Writes() {
			writes[g] = true
			writers++
		}
	}
	return groups, writers
}

// maxParallelRegions bounds the regions of one multi request written at once.
const maxParallelRegions = 8

// admit applies the quotas.
func (s *Server) admit(c *rpc.Call, or *onlineRegion, write bool, size int64) *pb.ErrorDetail {
	return s.admitN(c, or, write, size, 1)
}

// admitN is admit for a request of count operations (each counts against the number quotas).
func (s *Server) admitN(c *rpc.Call, or *onlineRegion, write bool, size int64, count int) *pb.ErrorDetail {
	if th := s.limiters.Check(quota.Request{User: c.User, Table: or.tkey, Namespace: or.ns, Write: write, Size: size, Count: count}); th != nil {
		s.m.throttled.Add(1)
		return s.errDetail(th, or.name)
	}
	return nil
}

func appendResultCells(block []byte, res *region.Result) []byte {
	if res == nil {
		return block
	}
	for i := range res.Cells {
		block = cell.AppendKeyValueFromKey(block, res.Cells[i].Key, res.Cells[i].Value)
	}
	return block
}

// answerSize is what res's cells take in an answer's cell block.
func answerSize(res *region.Result) int64 {
	if res == nil {
		return 0
	}
	return resultSize(res) + int64(cell.KeyValueHeaderLen*len(res.Cells))
}

func resultSize(res *region.Result) int64 {
	var n int64
	if res != nil {
		for i := range res.Cells {
			n += int64(len(res.Cells[i].Key) + len(res.Cells[i].Value))
		}
	}
	return n
}

func (s *Server) handleGet(ctx context.Context, c *rpc.Call) {
	start := time.Now()
	answered := false
	defer s.safe(c, &answered)
	req, err := rpc.Request[pb.GetRequest](c)
	if err != nil {
		fail(c, &answered, invalid("bad GetRequest: %v", err))
		return
	}
	name := req.GetRegion().GetName()
	failed := func(d *pb.ErrorDetail) {
		fail(c, &answered, d)
		s.noteSlowFailure("get", name, start, d)
	}
	or, r, d := s.lookupUntil(name, openingDeadline(ctx), true)
	if d == nil {
		d = s.checkRead(or)
	}
	if d != nil {
		failed(d)
		return
	}
	res, d := s.get(c, or, r, req.GetGet())
	if d != nil {
		failed(d)
		return
	}
	out := &pb.Result{CellCount: int32(len(res.Cells)), Exists: len(res.Cells) > 0, Stale: or.info.GetReplicaId() > 0}
	if out.Stale {
		s.m.staleReads.Add(1)
	}
	var block []byte
	if req.GetGet().GetExistenceOnly() {
		out.CellCount = 0
	} else {
		block = appendResultCells(nil, res)
	}
	reply(c, &answered, &pb.GetResponse{Result: out}, block)
	s.m.gets.Add(1)
	elapsed := time.Since(start)
	took := elapsed.Seconds()
	s.m.getLatency.Observe(took)
	if or.lat != nil {
		or.lat.get.Observe(took)
	}
	or.noteCall(opGet, elapsed)
	s.noteSlowCall("get", name, start)
}

func (s *Server) get(c *rpc.Call, or *onlineRegion, r *region.Region, g *pb.Get) (*region.Result, *pb.ErrorDetail) {
	rg, err := convertGet(g)
	if err != nil {
		return nil, s.errDetail(err, or.name)
	}
	var d *pb.ErrorDetail
	if rg.Columns, rg.CellCheck, d = s.readable(c, or, rg.Columns, g.GetAttributes()); d != nil {
		return nil, d
	}
	if d := s.admit(c, or, false, 0); d != nil {
		return nil, d
	}
	res, err := r.Get(rg)
	if err != nil {
		return nil, s.errDetail(err, or.name)
	}
	if res == nil {
		res = &region.Result{Row: g.GetRow()}
	}
	s.limiters.Charge(quota.Request{User: c.User, Table: or.tkey, Namespace: or.ns}, resultSize(res))
	s.m.readRequests.Add(1)
	return res, nil
}

func (s *Server) handleMutate(ctx context.Context, c *rpc.Call) {
	start := time.Now()
	answered := false
	defer s.safe(c, &answered)
	req, err := rpc.Request[pb.MutateRequest](c)
	if err != nil {
		fail(c, &answered, invalid("bad MutateRequest: %v", err))
		return
	}
	name := req.GetRegion().GetName()
	failed := func(d *pb.ErrorDetail) {
		fail(c, &answered, d)
		s.noteSlowFailure("mutate", name, start, d)
	}
	or, r, d := s.lookupUntil(name, openingDeadline(ctx), false)
	if d != nil {
		failed(d)
		return
	}
	m := req.GetMutation()
	if m == nil {
		fail(c, &answered, invalid("MutateRequest has no mutation"))
		return
	}
	cells, rest, err := takeCells(c.Cells, m.GetCellCount(), m.GetRow())
	if err != nil {
		fail(c, &answered, s.errDetail(err, name))
		return
	}
	if len(rest) != 0 {
		fail(c, &answered, invalid("%d stray bytes after the mutation's cells", len(rest)))
		return
	}
	if d := s.checkWrite(or); d != nil {
		failed(d)
		return
	}
	if d := s.mayWrite(c, or, cells); d != nil {
		failed(d)
		return
	}
	if d := s.mayCheck(c, or, req.GetCondition()); d != nil {
		failed(d)
		return
	}
	if d := s.admit(c, or, true, int64(len(c.Cells))); d != nil {
		failed(d)
		return
	}
	var resp pb.MutateResponse
	var block []byte
	if req.GetCondition() != nil {
		if m.GetType() != pb.MutationProto_TYPE_PUT && m.GetType() != pb.MutationProto_TYPE_DELETE {
			fail(c, &answered, invalid("check-and-mutate supports puts and deletes, not %v", m.GetType()))
			return
		}
		mu, err := mutationOf(m, cells, req.GetNonceGroup(), or.table.GetDurability(), s.labelsFor(m))
		if err != nil {
			fail(c, &answered, s.errDetail(err, name))
			return
		}
		ok, d := s.checkAndMutate(c, r, or, req.GetCondition(), []*region.Mutation{mu})
		if d != nil {
			failed(d)
			return
		}
		resp.Processed = ok
		resp.Result = &pb.Result{}
	} else {
		res, d := s.mutate(r, or, m, cells, req.GetNonceGroup())
		if d != nil {
			failed(d)
			return
		}
		resp.Result = &pb.Result{}
		if res != nil && m.GetReturnResults() {
			resp.Result.CellCount = int32(len(res.Cells))
			resp.Result.Exists = len(res.Cells) > 0
			block = appendResultCells(nil, res)
		}
		resp.Processed = true
	}
	if d := s.fenceClosed(or.name); d != nil {
		// The write is in the WAL but the lease may have run out meanwhile: do not acknowledge it.
		if req.GetCondition() != nil && resp.Processed {
			d = outcomeUnknown(or.name)
		}
		failed(d)
		return
	}
	resp.Pressure = s.writePressure(r)
	reply(c, &answered, &resp, block)
	s.m.mutates.Add(1)
	elapsed := time.Since(start)
	took := elapsed.Seconds()
	s.m.mutateLatency.Observe(took)
	if or.lat != nil {
		or.lat.mutate.Observe(took)
	}
	or.noteCall(opMutate, elapsed)
	s.noteSlowCall("mutate", name, start)
}

// mutate applies one non-conditional mutation.
func (s *Server) mutate(r *region.Region, or *onlineRegion, m *pb.MutationProto, cells []cell.Cell, nonceGroup uint64) (*region.Result, *pb.ErrorDetail) {
	s.m.writeRequests.Add(1)
	switch m.GetType() {
	case pb.MutationProto_TYPE_PUT, pb.MutationProto_TYPE_DELETE:
		mu, err := mutationOf(m, cells, nonceGroup, or.table.GetDurability(), s.labelsFor(m))
		if err != nil {
			return nil, s.errDetail(err, or.name)
		}
		if err := r.Mutate(mu); err != nil {
			return nil, s.errDetail(err, or.name)
		}
		return nil, nil
	case pb.MutationProto_TYPE_INCREMENT, pb.MutationProto_TYPE_APPEND:
		if _, err := mutationACL(m); err != nil {
			return nil, s.errDetail(err, or.name)
		}
		if _, err := mutationVisibility(m, nil); err != nil {
			return nil, s.errDetail(err, or.name)
		}
		d, err := convertDurability(effectiveDurability(m.GetDurability(), or.table.GetDurability()))
		if err != nil {
			return nil, s.errDetail(err, or.name)
		}
		if len(cells) == 0 {
			return nil, invalid("%v of row %q has no cells", m.GetType(), m.GetRow())
		}
		for _, c := range cells {
			if len(c.Tags) > 0 {
				return nil, invalid("%v of row %q: a cell carries tags, which only puts may (the result keeps the tags of the cell it replaces)", m.GetType(), m.GetRow())
			}
		}
		var nonce uint64
		if m.GetNonce() != 0 {
			nonce = m.GetNonce()
		}
		ttl, err := mutationTTL(m)
		if err != nil {
			return nil, s.errDetail(err, or.name)
		}
		tr, err := convertTimeRange(m.GetTimeRange())
		if err != nil {
			return nil, s.errDetail(err, or.name)
		}
		var res *region.Result
		if m.GetType() == pb.MutationProto_TYPE_INCREMENT {
			inc := &region.Increment{Row: m.GetRow(), Durability: d, NonceGroup: nonceGroup, Nonce: nonce, NoReturnResults: !m.GetReturnResults(),
				TTL: ttl, TimeRange: tr}
			for _, c := range cells {
				if len(c.Value) != 8 {
					return nil, &pb.ErrorDetail{Code: pb.ErrorCode_ERROR_CODE_BAD_VALUE, Region: or.name,
						Message: "increment amount of " + string(c.Family) + ":" + string(c.Qualifier) + " is not an 8-byte big-endian long"}
				}
				inc.Columns = append(inc.Columns, region.IncrementColumn{Family: c.Family, Qualifier: c.Qualifier,
					Amount: int64(binary.BigEndian.Uint64(c.Value))})
			}
			res, err = r.Increment(inc)
		} else {
			app := &region.Append{Row: m.GetRow(), Durability: d, NonceGroup: nonceGroup, Nonce: nonce, NoReturnResults: !m.GetReturnResults(),
				TTL: ttl, TimeRange: tr}
			for _, c := range cells {
				app.Columns = append(app.Columns, region.AppendColumn{Family: c.Family, Qualifier: c.Qualifier, Value: c.Value})
			}
			res, err = r.Append(app)
		}
		if err != nil {
			return nil, s.errDetail(err, or.name)
		}
		return res, nil
	}
	return nil, invalid("unknown mutation type %d", int32(m.GetType()))
}

// checkAndMutate applies ms when cond holds.
func (s *Server) checkAndMutate(c *rpc.Call, r *region.Region, or *onlineRegion, cond *pb.Condition, ms []*region.Mutation) (bool, *pb.ErrorDetail) {
	row := ms[0].Row
	if len(cond.GetRow()) > 0 && !bytes.Equal(cond.GetRow(), row) {
		return false, invalid("condition row %q differs from the mutation row %q", cond.GetRow(), row)
	}
	cm, d := s.conditionOf(c, or, cond, row)
	if d != nil {
		return false, d
	}
	cm.Mutations = ms
	s.m.writeRequests.Add(1)
	ok, err := r.CheckAndMutate(cm)
	if err != nil {
		return false, s.conditionalWriteErr(err, or.name)
	}
	return ok, nil
}

// conditionOf converts the condition of a check-and-mutate on row.
func (s *Server) conditionOf(c *rpc.Call, or *onlineRegion, cond *pb.Condition, row []byte) (*region.CheckAndMutate, *pb.ErrorDetail) {
	tr, err := convertTimeRange(cond.GetTimeRange())
	if err != nil {
		return nil, s.errDetail(err, or.name)
	}
	// The check sees what a get by the caller would (visibility labels); its READ on the
	// checked column was asked by mayCheck.
	cm := &region.CheckAndMutate{Row: row, TimeRange: tr, CellCheck: s.withVisibility(c, nil, nil)}
	if cond.GetFilter() != nil {
		f, err := convertFilter(cond.GetFilter())
		if err != nil {
			return nil, s.errDetail(err, or.name)
		}
		cm.Filter = f
	} else {
		if len(cond.GetFamily()) == 0 {
			return nil, invalid("condition names no family and no filter")
		}
		op, err := convertOp(cond.GetOp())
		if err != nil {
			return nil, s.errDetail(err, or.name)
		}
		cm.Family, cm.Qualifier, cm.Op = cond.GetFamily(), cond.GetQualifier(), op
		if cm.Qualifier == nil {
			cm.Qualifier = []byte{}
		}
		switch k := cond.GetComparator().GetKind().(type) {
		case nil, *pb.Comparator_Null:
			cm.Value = nil
		case *pb.Comparator_Binary:
			cm.Value = k.Binary
			if cm.Value == nil {
				cm.Value = []byte{}
			}
		default:
			if comparatorValueEmpty(cond.GetComparator()) {
				cm.Value = nil // HBase: any comparator with an empty value is a check for no value
				break
			}
			cmp, err := convertComparator(cond.GetComparator())
			if err != nil {
				return nil, s.errDetail(err, or.name)
			}
			// A condition holds when "expected op stored" (HBase's checkAndMutate: the comparator
			// compares its value to the cell's); the filter passes when "stored op expected".
			cm.Family, cm.Qualifier = nil, nil
			cm.Filter = &filter.SingleColumnValueFilter{Family: cond.GetFamily(), Qualifier: cond.GetQualifier(), Op: op.Swapped(),
				Comparator: cmp, FilterIfMissing: true, LatestVersionOnly: true}
		}
	}
	return cm, nil
}

// mutateRows applies an atomic multi-row region action (HBase's MultiRowMutationEndpoint): its
// mutations, of rows of this region, all or none, when its conditions hold.
func (s *Server) mutateRows(c *rpc.Call, r *region.Region, or *onlineRegion, ra *pb.RegionAction, ms []*region.Mutation) (bool, *pb.ErrorDetail) {
	conds := ra.GetConditions()
	if ra.GetCondition() != nil {
		conds = append([]*pb.Condition{ra.GetCondition()}, conds...)
	}
	info := r.Info() // the open region's range: region.Info.ContainsRow
	var cms []*region.CheckAndMutate
	for _, cond := range conds {
		if len(cond.GetRow()) == 0 {
			return false, invalid("a multi-row condition names no row")
		}
		if !info.ContainsRow(cond.GetRow()) {
			return false, &pb.ErrorDetail{Code: pb.ErrorCode_ERROR_CODE_FAILED_PRECONDITION, Region: or.name,
				Message: fmt.Sprintf("condition row %q is not in region %s: an atomic multi-row mutation checks rows of its region", cond.GetRow(), or.name)}
		}
		if d := s.mayCheck(c, or, cond); d != nil {
			return false, d
		}
		cm, d := s.conditionOf(c, or, cond, cond.GetRow())
		if d != nil {
			return false, d
		}
		cms = append(cms, cm)
	}
	for _, m := range ms {
		if !info.ContainsRow(m.Row) {
			return false, &pb.ErrorDetail{Code: pb.ErrorCode_ERROR_CODE_FAILED_PRECONDITION, Region: or.name,
				Message: fmt.Sprintf("row %q is not in region %s: an atomic multi-row mutation takes rows of one region "+
					"(a KeyPrefixRegionSplitPolicy or DelimitedKeyPrefixRegionSplitPolicy keeps rows of a prefix together)", m.Row, or.name)}
		}
	}
	s.m.writeRequests.Add(int64(len(ms)))
	ok, err := r.MutateRows(ms, cms)
	if err != nil {
		if len(cms) > 0 {
			return false, s.conditionalWriteErr(err, or.name)
		}
		return false, s.errDetail(err, or.name)
	}
	return ok, nil
}

// parsedAction is one action of a multi request with its cells.
type parsedAction struct {
	a     *pb.Action
	cells []cell.Cell
}

func (s *Server) handleMulti(ctx context.Context, c *rpc.Call) {
	start := time.Now()
	answered := false
	defer s.safe(c, &answered)
	req, err := rpc.Request[pb.MultiRequest](c)
	if err != nil {
		fail(c, &answered, invalid("bad MultiRequest: %v", err))
		return
	}
	until := openingDeadline(ctx)
	// Read every action's cells first: the block is in request order, whatever happens to each
	// region action.
	block := c.Cells
	parsed := make([][]parsedAction, len(req.GetRegionActions()))
	for i, ra := range req.GetRegionActions() {
		for _, a := range ra.GetActions() {
			pa := parsedAction{a: a}
			if m := a.GetMutation(); m != nil {
				cells, rest, err := takeCells(block, m.GetCellCount(), m.GetRow())
				if err != nil {
					fail(c, &answered, s.errDetail(err, ""))
					return
				}
				pa.cells, block = cells, rest
			}
			parsed[i] = append(parsed[i], pa)
		}
	}
	if len(block) != 0 {
		fail(c, &answered, invalid("%d stray bytes after the actions' cells", len(block)))
		return
	}
	ras := req.GetRegionActions()
	resp := &pb.MultiResponse{Results: make([]*pb.RegionActionResult, len(ras))}
	var out []byte
	var answer atomic.Int64 // the bytes of the answer's cells so far (regionAction)
	if groups, writers := regionGroups(ras); writers > 1 {
		// Writes to several regions: the regions go at once, so their WAL appends share group
		// commits instead of each waiting for a sync of its own. One region's actions stay in
		// request order (a RowMutations or check-and-mutate after a put of the same row sees it),
		// and the results' cells are joined in request order.
		outs := make([][]byte, len(ras))
		sem := make(chan struct{}, maxParallelRegions)
		var wg sync.WaitGroup
		for _, g := range groups {
			wg.Add(1)
			sem <- struct{}{}
			go func() {
				defer wg.Done()
				defer func() { <-sem }()
				defer func() { // as safe does for the handler's own goroutine
					if p := recover(); p != nil {
						s.logPanic("panic serving a multi's region actions", p, "method", c.Method, "region", ras[g[0]].GetRegion().GetName())
						for _, i := range g {
							if resp.Results[i] == nil {
								resp.Results[i], outs[i] = &pb.RegionActionResult{Exception: &pb.ErrorDetail{Code: pb.ErrorCode_ERROR_CODE_UNKNOWN,
									Message: "internal error serving the region action"}}, nil
							}
						}
					}
				}()
				for _, i := range g {
					resp.Results[i], outs[i] = s.regionAction(c, until, ras[i], parsed[i], req.GetNonceGroup(), &answer, nil)
				}
			}()
		}
		wg.Wait()
		for _, o := range outs {
			out = append(out, o...)
		}
	} else {
		for i, ra := range ras {
			resp.Results[i], out = s.regionAction(c, until, ra, parsed[i], req.GetNonceGroup(), &answer, out)
		}
	}
	if hasWrites(req.GetRegionActions()) {
		if d := s.fenceClosed(""); d != nil {
			if !unknownOutcomes(req.GetRegionActions(), resp, d) {
				fail(c, &answered, d)
				return
			}
			out = nil
		}
	}
	reply(c, &answered, resp, out)
	s.m.multis.Add(1)
	s.m.multiLatency.Observe(time.Since(start).Seconds())
	s.noteSlowCall("multi", "", start)
}

// until bounds the wait for a region opening here (openingDeadline, one for the whole multi).
// answer counts the bytes of the multi's answer cells: once they reach the cap on a scan's
// answer, the actions that would add cells are answered RESULT_TOO_LARGE, to be sent again (as
// HBase's MultiActionResultTooLarge; the first such action is always served).
func (s *Server) regionAction(c *rpc.Call, until time.Time, ra *pb.RegionAction, acts []parsedAction, nonceGroup uint64, answer *atomic.Int64, out []byte) (*pb.RegionActionResult, []byte) {
	name := ra.GetRegion().GetName()
	rar := &pb.RegionActionResult{}
	or, r, d := s.lookupUntil(name, until, !ra.Writes())
	if d == nil {
		d = s.checkRead(or)
	}
	if d != nil {
		rar.Exception = d
		return rar, out
	}
	writes := 0
	var size int64
	for _, pa := range acts {
		if pa.a.GetMutation() != nil {
			writes++
			for _, cl := range pa.cells {
				size += int64(cl.EncodedLen())
			}
		}
	}
	if writes > 0 {
		if d := s.checkWrite(or); d != nil {
			rar.Exception = d
			return rar, out
		}
		// Each mutation counts against the number quotas (HBase's batch quota): a multi of
		// thousands of puts is not one request.
		if d := s.admitN(c, or, true, size, writes); d != nil {
			rar.Exception = d
			return rar, out
		}
		defer func() { rar.Pressure = s.writePressure(r) }() // after the writes, whatever they answered
	}
	if ra.GetAtomic() {
		var ms []*region.Mutation
		for _, pa := range acts {
			m := pa.a.GetMutation()
			if m == nil || (m.GetType() != pb.MutationProto_TYPE_PUT && m.GetType() != pb.MutationProto_TYPE_DELETE) {
				rar.Exception = invalid("atomic region actions take only puts and deletes")
				return rar, out
			}
			if d := s.mayWrite(c, or, pa.cells); d != nil {
				rar.Exception = d
				return rar, out
			}
			mu, err := mutationOf(m, pa.cells, nonceGroup, or.table.GetDurability(), s.labelsFor(m))
			if err != nil {
				rar.Exception = s.errDetail(err, name)
				return rar, out
			}
			if !ra.GetMultiRow() && len(ms) > 0 && !bytes.Equal(mu.Row, ms[0].Row) {
				rar.Exception = invalid("atomic row mutations must share one row (%q and %q); several rows of one region take multi_row", ms[0].Row, mu.Row)
				return rar, out
			}
			ms = append(ms, mu)
		}
		if len(ms) == 0 {
			rar.Exception = invalid("atomic region action without mutations")
			return rar, out
		}
		if d := s.mayCheck(c, or, ra.GetCondition()); d != nil {
			rar.Exception = d
			return rar, out
		}
		switch {
		case ra.GetMultiRow():
			ok, d := s.mutateRows(c, r, or, ra, ms)
			if d != nil {
				rar.Exception = d
				return rar, out
			}
			rar.Processed = ok
		case len(ra.GetConditions()) > 0:
			rar.Exception = invalid("a list of conditions takes multi_row")
			return rar, out
		case ra.GetCondition() != nil:
			ok, d := s.checkAndMutate(c, r, or, ra.GetCondition(), ms)
			if d != nil {
				rar.Exception = d
				return rar, out
			}
			rar.Processed = ok
		default:
			s.m.writeRequests.Add(1)
			if err := r.MutateRow(ms); err != nil {
				rar.Exception = s.errDetail(err, name)
				return rar, out
			}
			rar.Processed = true
		}
		for _, pa := range acts {
			rar.Results = append(rar.Results, &pb.ResultOrException{Index: pa.a.GetIndex(), Result: &pb.Result{}})
		}
		return rar, out
	}
	if ra.GetCondition() != nil || len(ra.GetConditions()) > 0 || ra.GetMultiRow() {
		rar.Exception = invalid("a region action with a condition or multi_row must be atomic")
		return rar, out
	}
	// Non-atomic: plain puts and deletes go through one Batch; the rest one by one.
	results := make([]*pb.ResultOrException, len(acts))
	cellsOf := make([]*region.Result, len(acts))
	var batch []*region.Mutation
	var batchIdx []int
	for i, pa := range acts {
		results[i] = &pb.ResultOrException{Index: pa.a.GetIndex()}
		m := pa.a.GetMutation()
		if m != nil {
			if d := s.mayWrite(c, or, pa.cells); d != nil {
				results[i].Exception = d
				continue
			}
		}
		if m != nil && (m.GetType() == pb.MutationProto_TYPE_PUT || m.GetType() == pb.MutationProto_TYPE_DELETE) {
			mu, err := mutationOf(m, pa.cells, nonceGroup, or.table.GetDurability(), s.labelsFor(m))
			if err != nil {
				results[i].Exception = s.errDetail(err, name)
				continue
			}
			batch = append(batch, mu)
			batchIdx = append(batchIdx, i)
		}
	}
	if len(batch) > 0 {
		s.m.writeRequests.Add(int64(len(batch)))
		errs := r.Batch(batch)
		for j, i := range batchIdx {
			if j < len(errs) && errs[j] != nil {
				results[i].Exception = s.errDetail(errs[j], name)
			} else {
				results[i].Result = &pb.Result{}
			}
		}
	}
	limit := s.maxScanResult.Load()
	for i, pa := range acts {
		if results[i].Exception != nil || results[i].Result != nil {
			continue
		}
		if n := answer.Load(); n >= limit {
			results[i].Exception = &pb.ErrorDetail{Code: pb.ErrorCode_ERROR_CODE_RESULT_TOO_LARGE, Region: name, Retryable: true,
				Message: fmt.Sprintf("the multi's answer holds %d bytes of cells, the server's limit is %d (max scan result size): send this action again", n, limit)}
			continue
		}
		switch {
		case pa.a.GetGet() != nil:
			res, d := s.get(c, or, r, pa.a.GetGet())
			if d != nil {
				results[i].Exception = d
				continue
			}
			results[i].Result = &pb.Result{CellCount: int32(len(res.Cells)), Exists: len(res.Cells) > 0}
			if pa.a.GetGet().GetExistenceOnly() {
				results[i].Result.CellCount = 0
			} else {
				cellsOf[i] = res
				answer.Add(answerSize(res))
			}
		case pa.a.GetMutation() != nil:
			m := pa.a.GetMutation()
			res, d := s.mutate(r, or, m, pa.cells, nonceGroup)
			if d != nil {
				results[i].Exception = d
				continue
			}
			results[i].Result = &pb.Result{}
			if res != nil && m.GetReturnResults() {
				results[i].Result.CellCount = int32(len(res.Cells))
				results[i].Result.Exists = len(res.Cells) > 0
				cellsOf[i] = res
				answer.Add(answerSize(res))
			}
		default:
			results[i].Exception = invalid("action %d has neither a get nor a mutation", pa.a.GetIndex())
		}
	}
	for i := range acts {
		out = appendResultCells(out, cellsOf[i])
	}
	rar.Results = results
	return rar, out
}

// ---- scanners ----

type scanner struct {
	mu   sync.Mutex
	open *atomic.Int64 // the server's count of open scanners
	id   uint64
	or   *onlineRegion
	rs   *region.RegionScanner
	// What moreAfterRegion needs of the Scan (not the Scan: its attributes and filter would stay
	// for the scanner's life).
	limit   int32
	stopRow []byte
	// includeStop: the stop row is in the scan (a forward scan whose stop row is this region's
	// end key goes on into the next region, where that row is).
	includeStop bool
	reversed    bool
	nextSeq     uint64
	rows        int64
	lastUsed    time.Time // under mu
	closed      bool
	owner       string // the user who opened it: only they may go on (Config.Authorization)
}

func (sc *scanner) close() {
	if !sc.closed {
		sc.closed = true
		sc.open.Add(-1)
		_ = sc.rs.Close()
	}
}

func (s *Server) closeScanners() {
	s.scanners.Range(func(k, v any) bool {
		sc := v.(*scanner)
		s.scanners.Delete(k)
		sc.mu.Lock()
		sc.close()
		sc.mu.Unlock()
		return true
	})
}

// scannerReaper closes scanners whose lease expired.
func (s *Server) scannerReaper() {
	s.every(max(s.cfg.ScannerLease/4, 10*time.Millisecond), func() {
		now := time.Now()
		s.scanners.Range(func(k, v any) bool {
			sc := v.(*scanner)
			if !sc.mu.TryLock() {
				return true // in use
			}
			if now.Sub(sc.lastUsed) > s.cfg.ScannerLease {
				s.scanners.Delete(k)
				sc.close()
				s.m.scannersExpired.Add(1)
			}
			sc.mu.Unlock()
			return true
		})
	})
}

func (s *Server) handleScan(ctx context.Context, c *rpc.Call) {
	start := time.Now()
	answered := false
	defer s.safe(c, &answered)
	req, err := rpc.Request[pb.ScanRequest](c)
	if err != nil {
		fail(c, &answered, invalid("bad ScanRequest: %v", err))
		return
	}
	if req.GetNumberOfRows() < 0 || req.GetTimeLimitMs() < 0 {
		fail(c, &answered, invalid("negative number_of_rows or time_limit_ms"))
		return
	}
	var sc *scanner
	// An open that also closes (HBase 1.x's small scans) answers one batch, then closes.
	closeAfter := false
	if req.GetScannerId() == 0 {
		if req.GetCloseScanner() && req.GetScan() == nil {
			reply(c, &answered, &pb.ScanResponse{})
			return
		}
		closeAfter = req.GetCloseScanner()
		name := req.GetRegion().GetName()
		or, r, d := s.lookupUntil(name, openingDeadline(ctx), true)
		if d == nil {
			d = s.checkRead(or)
		}
		if d != nil {
			fail(c, &answered, d)
			return
		}
		rscan, err := convertScan(req.GetScan())
		if err != nil {
			fail(c, &answered, s.errDetail(err, name))
			return
		}
		if rscan.Columns, rscan.CellCheck, d = s.readable(c, or, rscan.Columns, req.GetScan().GetAttributes()); d != nil {
			fail(c, &answered, d)
			return
		}
		if n := req.GetNumberOfRows(); n > 0 {
			rscan.Caching = int(n)
		}
		// However many rows the client asks for, one answer holds at most the server's
		// maximum result size (the rest comes with the next call).
		if maxResult := s.maxScanResult.Load(); rscan.MaxResultSize <= 0 || rscan.MaxResultSize > maxResult {
			rscan.MaxResultSize = maxResult
		}
		if req.GetClientHandlesHeartbeats() && req.GetTimeLimitMs() > 0 {
			rscan.TimeLimit = time.Duration(req.GetTimeLimitMs()) * time.Millisecond
		}
		if !req.GetClientHandlesPartials() {
			rscan.AllowPartialResults = false
		}
		// Each batch is the answer's cell block, copied into the
		// connection's output by Reply before the next call reuses it.
		rscan.CellBlock, rscan.ReuseResults = true, true
		if d := s.admit(c, or, false, 0); d != nil {
			fail(c, &answered, d)
			return
		}
		if limit := s.maxScanners.Load(); s.openScanners.Add(1) > limit {
			s.openScanners.Add(-1)
			fail(c, &answered, &pb.ErrorDetail{Code: pb.ErrorCode_ERROR_CODE_TOO_BUSY, Region: name, Retryable: true, RetryAfterMs: 1000,
				Message: fmt.Sprintf("region server has %d open scanners, its limit: close scanners you no longer need (they expire after %s unused)",
					limit, s.cfg.ScannerLease)})
			return
		}
		rs, err := r.Scanner(rscan)
		if err != nil {
			s.openScanners.Add(-1)
			fail(c, &answered, s.errDetail(err, name))
			return
		}
		s.m.readRequests.Add(1)
		if or.info.GetReplicaId() > 0 {
			s.m.staleReads.Add(1)
		}
		sc = &scanner{open: &s.openScanners, id: s.scannerID.Add(1), or: or, rs: rs, limit: req.GetScan().GetLimit(),
			stopRow: req.GetScan().GetStopRow(), includeStop: req.GetScan().GetIncludeStopRow(), reversed: req.GetScan().GetReversed(), lastUsed: time.Now(), owner: c.User}
		sc.mu.Lock()
		s.scanners.Store(sc.id, sc)
	} else {
		v, ok := s.scanners.Load(req.GetScannerId())
		if !ok {
			fail(c, &answered, &pb.ErrorDetail{Code: pb.ErrorCode_ERROR_CODE_UNKNOWN_SCANNER, Region: req.GetRegion().GetName(),
				Message: "unknown scanner (expired or closed); reopen the scan", Retryable: false})
			return
		}
		sc = v.(*scanner)
		if s.cfg.Authorization && sc.owner != c.User {
			// Scanner ids are sequential: another user's must not be readable by guessing.
			fail(c, &answered, &pb.ErrorDetail{Code: pb.ErrorCode_ERROR_CODE_UNKNOWN_SCANNER, Region: req.GetRegion().GetName(),
				Message: "unknown scanner (not opened by this user); reopen the scan"})
			return
		}
		sc.mu.Lock()
		if sc.closed {
			sc.mu.Unlock()
			fail(c, &answered, &pb.ErrorDetail{Code: pb.ErrorCode_ERROR_CODE_UNKNOWN_SCANNER, Region: req.GetRegion().GetName(),
				Message: "scanner was closed; reopen the scan"})
			return
		}
		if req.GetCloseScanner() {
			s.scanners.Delete(sc.id)
			sc.close()
			sc.mu.Unlock()
			reply(c, &answered, &pb.ScanResponse{ScannerId: sc.id})
			return
		}
		if req.GetNextCallSeq() != sc.nextSeq {
			// A retried next: the rows of the lost answer are gone, so the client must reopen.
			s.scanners.Delete(sc.id)
			sc.close()
			sc.mu.Unlock()
			fail(c, &answered, &pb.ErrorDetail{Code: pb.ErrorCode_ERROR_CODE_OUT_OF_ORDER_SCANNER_NEXT, Region: sc.or.name,
				Message: "next_call_seq does not match the scanner's (a retried call?); reopen the scan"})
			return
		}
		if !sc.or.live() && !sc.or.closingHere(sc.or.state.Load()) {
			// (A region closing for a move serves reads until its last flush is done: the
			// region scanner's Next says when it no longer does.)
			s.scanners.Delete(sc.id)
			sc.close()
			sc.mu.Unlock()
			fail(c, &answered, s.notServing(sc.or.name))
			return
		}
		if d := s.checkRead(sc.or); d != nil {
			// The next batch could be stale: this server may no longer hold the region.
			s.scanners.Delete(sc.id)
			sc.close()
			sc.mu.Unlock()
			fail(c, &answered, d)
			return
		}
		if req.GetRenew() {
			sc.lastUsed = time.Now()
			sc.nextSeq++ // a renew uses up its call number, as HBase's (its client counts it)
			sc.mu.Unlock()
			reply(c, &answered, &pb.ScanResponse{ScannerId: sc.id, MoreResultsInRegion: true, MoreResults: true,
				TtlMs: s.cfg.ScannerLease.Milliseconds()})
			return
		}
		// Every next counts against the read quotas, not only the open (HBase checks each scan
		// call): a scanner read a table at full speed past a read quota. The scanner stays, and
		// the same call may be sent again after the wait.
		if d := s.admit(c, sc.or, false, 0); d != nil {
			sc.lastUsed = time.Now()
			sc.mu.Unlock()
			fail(c, &answered, d)
			return
		}
	}
	defer sc.mu.Unlock()
	batch, err := sc.rs.Next()
	sc.lastUsed = time.Now()
	sc.nextSeq++
	if err != nil {
		s.scanners.Delete(sc.id)
		sc.close()
		fail(c, &answered, s.errDetail(err, sc.or.name))
		return
	}
	resp := &pb.ScanResponse{ScannerId: sc.id, TtlMs: s.cfg.ScannerLease.Milliseconds(), Stale: sc.or.info.GetReplicaId() > 0}
	resp.CellsPerResult, resp.PartialFlagPerResult = batch.CellsPerResult, batch.PartialPerResult
	block := batch.Block
	cells := int64(0)
	for _, n := range batch.CellsPerResult {
		cells += int64(n)
	}
	// The region scanner's count: a row whose last result was flagged partial (cells that
	// turned out to be the row's last) still counts towards the limit.
	sc.rows = sc.rs.RowsDone()
	size := int64(len(block)) - cells*cell.KeyValueHeaderLen // keys and values, as resultSize counts
	s.limiters.Charge(quota.Request{User: c.User, Table: sc.or.tkey, Namespace: sc.or.ns}, size)
	if batch.Heartbeat {
		resp.Heartbeat = true
		resp.CursorRow = batch.Cursor
	}
	resp.MoreResultsInRegion = batch.More
	resp.MoreResults = true
	if !batch.More {
		resp.MoreResults = s.moreAfterRegion(sc)
	}
	if !batch.More || closeAfter {
		s.scanners.Delete(sc.id)
		// Closing leaves the batch's memory alone (only a Get's region
		// scanners are recycled), so block is still valid for reply.
		sc.close()
		resp.ScannerId = 0
	}
	reply(c, &answered, resp, block)
	if batch.More && !closeAfter {
		// The answer is copied out: an idle scanner keeps no batch memory.
		sc.rs.ReleaseBatch()
	}
	s.m.scans.Add(1)
	elapsed := time.Since(start)
	took := elapsed.Seconds()
	s.m.scanLatency.Observe(took)
	if sc != nil && sc.or.lat != nil {
		sc.or.lat.scan.Observe(took)
	}
	if sc != nil {
		sc.or.noteCall(opScan, elapsed)
		s.noteSlowCall("scan", sc.or.name, start)
	}
}

// moreAfterRegion says whether the scan goes on past this region: not when its stop row is in
// this region, its limit is reached or the region is the last in the scan's direction.
func (s *Server) moreAfterRegion(sc *scanner) bool {
	if lim := sc.limit; lim > 0 && sc.rows >= int64(lim) {
		return false
	}
	info := sc.or.info
	stop := sc.stopRow
	if !sc.reversed {
		end := info.GetEndKey()
		if len(end) == 0 {
			return false
		}
		if c := bytes.Compare(stop, end); len(stop) > 0 && (c < 0 || c == 0 && !sc.includeStop) {
			return false
		}
		return true
	}
	st := info.GetStartKey()
	if len(st) == 0 {
		return false
	}
	if len(stop) > 0 && bytes.Compare(stop, st) >= 0 {
		return false
	}
	return true
}

// comparatorValueEmpty reports whether a prefix, substring or regex comparator compares with
// nothing (HBase's comparator.getValue() of length 0).
func comparatorValueEmpty(c *pb.Comparator) bool {
	switch k := c.GetKind().(type) {
	case *pb.Comparator_BinaryPrefix:
		return len(k.BinaryPrefix) == 0
	case *pb.Comparator_Substring:
		return k.Substring == ""
	case *pb.Comparator_Regex:
		return k.Regex == ""
	}
	return false
}
