package hbase

import (
	"context"
	"encoding/binary"
	"net"
	"strconv"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/cellstore/cellstore/engine/access"
	pb "github.com/cellstore/cellstore/engine/api/cellstore/v1"
	hb "github.com/cellstore/cellstore/engine/api/hbase/v2"
	"github.com/cellstore/cellstore/engine/cell"
)

// ClientService: each call is converted to Cellstore's data-path request and run by the region
// server's own handler (rpc.ForeignConn.Call); its answer is converted back. hbase:meta's region
// is answered from the master's locations (meta.go).

func (a *Adapter) client(k *call) {
	switch k.method {
	case "Get":
		var req hb.GetRequest
		if err := proto.Unmarshal(k.param, &req); err != nil {
			k.fail(doNotRetry("bad Get request: %v", err))
			return
		}
		a.get(k, &req)
	case "Mutate":
		var req hb.MutateRequest
		if err := proto.Unmarshal(k.param, &req); err != nil {
			k.fail(doNotRetry("bad Mutate request: %v", err))
			return
		}
		a.mutate(k, &req)
	case "Scan":
		var req hb.ScanRequest
		if err := proto.Unmarshal(k.param, &req); err != nil {
			k.fail(doNotRetry("bad Scan request: %v", err))
			return
		}
		a.scan(k, &req)
	case "Multi":
		var req hb.MultiRequest
		if err := proto.Unmarshal(k.param, &req); err != nil {
			k.fail(doNotRetry("bad Multi request: %v", err))
			return
		}
		a.multi(k, &req)
	case "ExecService":
		var req hb.CoprocessorServiceRequest
		if err := proto.Unmarshal(k.param, &req); err != nil {
			k.fail(doNotRetry("bad ExecService request: %v", err))
			return
		}
		a.execService(k, &req)
	default:
		k.fail(&exception{class: classUnknownProtocol, msg: "ClientService method " + k.method + " is not supported by Cellstore (no bulk load)", doNotRetry: true})
	}
}

// region resolves a region specifier to the encoded name of a region online here.
func (a *Adapter) region(spec *hb.RegionSpecifier) (string, int32, *exception) {
	if spec.GetType() == hb.RegionSpecifier_ENCODED_REGION_NAME {
		return "", 0, doNotRetry("regions are named by their full name here, not by the encoded name %q", spec.GetValue())
	}
	if v, ok := a.regions.Load(string(spec.GetValue())); ok {
		if r := v.(knownRegion); a.b.Online(r.name) {
			return r.name, r.replica, nil
		}
	}
	p, err := parseRegionName(spec.GetValue())
	if err != nil {
		return "", 0, err.(*exception)
	}
	name, ok := a.b.Region(p.table, p.id, p.replica)
	if !ok {
		return "", 0, &exception{class: classNotServingRegion, msg: "region " + string(spec.GetValue()) + " is not online on " + a.selfString()}
	}
	if !a.b.Online(name) {
		// Found but not online here (it moved away: the server answers where it went). Not
		// remembered: the cache would miss on it anyway, and each store counts towards the
		// bound that empties it.
		return name, p.replica, nil
	}
	// The names' bytes count too: a client may name a region with any start key (only the table,
	// id and replica select it), and a start key may have up to 32 KiB.
	if a.regionCount.Add(1) > maxKnownRegions || a.regionBytes.Add(int64(len(spec.GetValue()))) > maxKnownRegionBytes {
		a.regions.Clear()
		a.regionCount.Store(0)
		a.regionBytes.Store(0)
	}
	a.regions.Store(string(spec.GetValue()), knownRegion{name: name, replica: p.replica})
	return name, p.replica, nil
}

// knownRegion is what an HBase region name resolved to (Adapter.regions).
type knownRegion struct {
	name    string
	replica int32
}

// maxKnownRegions and maxKnownRegionBytes bound the names remembered, and their bytes (all are
// forgotten past either).
const (
	maxKnownRegions     = 1 << 16
	maxKnownRegionBytes = 16 << 20
)

func (a *Adapter) selfString() string {
	s := a.b.Self()
	return s.GetHost() + "," + strconv.Itoa(int(s.GetPort())) + "," + strconv.FormatInt(s.GetStartCode(), 10)
}

// lean runs a data-path method for the call: done converts the answer (run on the handler's
// goroutine, before the call's buffers are reused).
func (k *call) lean(method pb.Method, req proto.Message, cells []byte, done func(msg proto.Message, cells [][]byte)) {
	k.c.fc.Call(uint32(method), req, cells, k.c.id, k.timeout, func(msg proto.Message, fail *pb.ErrorDetail, cells [][]byte) {
		defer k.recover() // (the region server's handler would recover it, but not answer this call)
		if fail != nil {
			k.fail(fromDetail(fail))
			return
		}
		done(msg, cells)
	})
}

// cellReader walks the KeyValues of a lean answer's cell blocks.
type cellReader struct {
	blocks [][]byte
}

func (r *cellReader) next() (cell.KeyValue, bool) {
	for len(r.blocks) > 0 && len(r.blocks[0]) == 0 {
		r.blocks = r.blocks[1:]
	}
	if len(r.blocks) == 0 {
		return nil, false
	}
	kv, n, err := cell.ParseKeyValue(r.blocks[0])
	if err != nil {
		return nil, false
	}
	r.blocks[0] = r.blocks[0][n:]
	return kv, true
}

// take appends n cells to an HBase cell block.
func (r *cellReader) take(dst []byte, n int) ([]byte, int) {
	if dst == nil && n > 0 { // room for all of them: the lean blocks and a length per cell
		size := 4 * n
		for _, b := range r.blocks {
			size += len(b)
		}
		dst = make([]byte, 0, size)
	}
	got := 0
	for ; got < n; got++ {
		kv, ok := r.next()
		if !ok {
			break
		}
		dst = appendCell(dst, kv)
	}
	return dst, got
}

// requestCells hands out the cells of an HBase request's cell block, mutation by mutation.
type requestCells struct {
	block []byte
	// budget is what the cells built from mutations' column_value lists may still take: each
	// such cell repeats its row, so a small request could otherwise make cells many times its
	// size. A call gets the server's largest request (the most a cell block could carry).
	budget, limit int
}

// newRequestCells hands out the cells of block, a cell block of call k.
func newRequestCells(k *call, block []byte) *requestCells {
	return &requestCells{block: block, budget: k.c.opts.MaxFrame, limit: k.c.opts.MaxFrame}
}

// take converts the next n cells to the lean protocol's block.
func (r *requestCells) take(n int) ([]byte, error) {
	if n < 0 {
		return nil, doNotRetry("negative cell count %d", n)
	}
	var out []byte
	for range n {
		if len(r.block) < 4 {
			return nil, doNotRetry("the request's cell block holds fewer cells than its mutations announce")
		}
		l := binary.BigEndian.Uint32(r.block)
		if uint64(l) > uint64(len(r.block)-4) {
			return nil, doNotRetry("a cell of %d bytes overruns the request's cell block", l)
		}
		kv := r.block[4 : 4+l]
		parsed, used, err := cell.ParseKeyValue(kv)
		if err != nil {
			return nil, doNotRetry("bad cell in the request's cell block: %v", err)
		}
		switch rest := kv[used:]; {
		case len(rest) == 0:
			out = append(out, kv...)
		case len(rest) >= 2 && int(binary.BigEndian.Uint16(rest)) == len(rest)-2 && parsed.Tags() == nil:
			// KeyValueCodecWithTags: a tags section after the value. The tags go on: the region
			// takes a TTL tag and a client's own types, and refuses the system's.
			tags := rest[2:]
			if err := cell.ParseTags(tags); err != nil {
				return nil, doNotRetry("bad tags in the request's cell block: %v", err)
			}
			out = cell.AppendTaggedKeyValue(out, parsed.Key(), parsed.Value(), tags)
		default:
			return nil, doNotRetry("bad cell in the request's cell block: %d bytes after its value", len(rest))
		}
		r.block = r.block[4+l:]
	}
	return out, nil
}

// ---- Get ----

func (a *Adapter) get(k *call, req *hb.GetRequest) {
	if isMeta(req.GetRegion()) {
		go func() {
			defer k.recover()
			ctx, cancel := k.context()
			defer cancel()
			res, block, err := a.metaGet(ctx, req.GetGet())
			if err != nil {
				k.fail(fromError(err))
				return
			}
			k.reply(&hb.GetResponse{Result: res}, block)
		}()
		return
	}
	name, replica, e := a.region(req.GetRegion())
	if e != nil {
		k.fail(e)
		return
	}
	g, err := leanGet(req.GetGet(), replica)
	if err != nil {
		k.fail(fromError(err))
		return
	}
	k.lean(pb.Method_METHOD_GET, &pb.GetRequest{Region: &pb.RegionSpecifier{Name: name}, Get: g}, nil, func(msg proto.Message, cells [][]byte) {
		res := msg.(*pb.GetResponse).GetResult()
		r := &cellReader{blocks: cells}
		block, n := r.take(nil, int(res.GetCellCount()))
		k.reply(&hb.GetResponse{Result: hbResult(res, n, req.GetGet().GetExistenceOnly())}, block)
	})
}

// hbResult converts a result header: exists only for existence-only gets (the client refuses it
// beside cells).
func hbResult(res *pb.Result, cells int, existenceOnly bool) *hb.Result {
	out := &hb.Result{AssociatedCellCount: proto.Int32(int32(cells)), Stale: proto.Bool(res.GetStale())}
	if existenceOnly && cells == 0 {
		out.Exists = proto.Bool(res.GetExists())
	}
	if res.GetPartial() {
		out.Partial = proto.Bool(true)
	}
	return out
}

func leanColumns(cols []*hb.Column) []*pb.Column {
	out := make([]*pb.Column, 0, len(cols))
	for _, c := range cols {
		out = append(out, &pb.Column{Family: c.GetFamily(), Qualifiers: c.GetQualifier()})
	}
	return out
}

func leanTimeRange(tr *hb.TimeRange) *pb.TimeRange {
	if tr == nil {
		return nil
	}
	out := &pb.TimeRange{From: int64(tr.GetFrom())}
	if tr.To != nil && int64(tr.GetTo()) != int64(^uint64(0)>>1) {
		out.To = int64(tr.GetTo())
		if out.To == out.From {
			return pb.EmptyTimeRange() // HBase's [t, t) is empty, [0, 0) too
		}
	}
	return out
}

// HBase's operation attributes that Cellstore names and encodes its own way.
const (
	// hbaseVisibility: a mutation's CellVisibility or a read's Authorizations (protobuf), HBase's
	// VisibilityConstants.VISIBILITY_LABELS_ATTR_KEY.
	hbaseVisibility = "VISIBILITY"
	// hbaseACL: a mutation's cell ACL as HBase's UsersAndPermissions (protobuf),
	// AccessControlConstants.OP_ATTRIBUTE_ACL.
	hbaseACL = "acl"
)

// leanAttributes carries an operation's attributes over, turning HBase's visibility attribute into
// Cellstore's: a mutation's (write) CellVisibility expression into access.VisibilityAttribute, a
// read's Authorizations into access.AuthorizationsAttribute. A cell ACL in HBase's form is
// refused: it would otherwise be read as Cellstore's encoding of one (or, before, dropped with the
// cells stored unprotected).
func leanAttributes(attrs []*hb.NameBytesPair, write bool) (map[string][]byte, error) {
	if len(attrs) == 0 {
		return nil, nil
	}
	out := make(map[string][]byte, len(attrs))
	for _, p := range attrs {
		switch {
		case p.GetName() == hbaseVisibility && write:
			var cv hb.CellVisibility
			if err := proto.Unmarshal(p.GetValue(), &cv); err != nil {
				return nil, doNotRetry("bad CellVisibility attribute: %v", err)
			}
			out[access.VisibilityAttribute] = []byte(cv.GetExpression())
		case p.GetName() == hbaseVisibility:
			var a hb.Authorizations
			if err := proto.Unmarshal(p.GetValue(), &a); err != nil {
				return nil, doNotRetry("bad Authorizations attribute: %v", err)
			}
			v, err := access.EncodeAuthorizations(a.GetLabel())
			if err != nil {
				return nil, doNotRetry("authorizations: %v", err)
			}
			out[access.AuthorizationsAttribute] = v
		case p.GetName() == hbaseACL && write:
			return nil, doNotRetry("cell ACLs from HBase clients (Mutation.setACL) are not supported: grant at a table, family or qualifier instead, or set cell ACLs with Cellstore's client")
		default:
			out[p.GetName()] = p.GetValue()
		}
	}
	return out, nil
}

func leanGet(g *hb.Get, replica int32) (*pb.Get, error) {
	if len(g.GetCfTimeRange()) > 0 {
		return nil, doNotRetry("per-family time ranges (Get.setColumnFamilyTimeRange) are not supported")
	}
	if g.GetClosestRowBefore() {
		return nil, doNotRetry("closest-row-before gets are not supported: use a reversed scan")
	}
	f, err := convertFilter(g.GetFilter())
	if err != nil {
		return nil, err
	}
	attrs, err := leanAttributes(g.GetAttribute(), false)
	if err != nil {
		return nil, err
	}
	return &pb.Get{Row: g.GetRow(), Columns: leanColumns(g.GetColumn()), Filter: f, TimeRange: leanTimeRange(g.GetTimeRange()),
		MaxVersions: int32(g.GetMaxVersions()), ExistenceOnly: g.GetExistenceOnly(), Consistency: pb.Consistency(g.GetConsistency()),
		NoCacheBlocks: g.CacheBlocks != nil && !g.GetCacheBlocks(), StoreLimit: int32(g.GetStoreLimit()), StoreOffset: int32(g.GetStoreOffset()),
		ReplicaId: replica, Attributes: attrs}, nil
}

// ---- Mutate ----

var mutationTypes = map[hb.MutationProto_MutationType]pb.MutationProto_Type{
	hb.MutationProto_PUT: pb.MutationProto_TYPE_PUT, hb.MutationProto_DELETE: pb.MutationProto_TYPE_DELETE,
	hb.MutationProto_INCREMENT: pb.MutationProto_TYPE_INCREMENT, hb.MutationProto_APPEND: pb.MutationProto_TYPE_APPEND,
}

// leanMutation converts a mutation and its cells (from the cell block, or its column_value
// list when it carries no cells).
func leanMutation(m *hb.MutationProto, rc *requestCells) (*pb.MutationProto, []byte, error) {
	var cells []byte
	var n int
	if m.AssociatedCellCount != nil {
		// Taken first, whatever else is wrong with the mutation: the next mutation's cells
		// follow these in the cell block.
		var err error
		if cells, err = rc.take(int(m.GetAssociatedCellCount())); err != nil {
			return nil, nil, err
		}
		n = int(m.GetAssociatedCellCount())
	}
	t, ok := mutationTypes[m.GetMutateType()]
	if !ok {
		return nil, nil, doNotRetry("unknown mutation type %v", m.GetMutateType())
	}
	if m.AssociatedCellCount == nil {
		var err error
		if cells, n, err = columnValueCells(m, t, rc); err != nil {
			return nil, nil, err
		}
	}
	attrs, err := leanAttributes(m.GetAttribute(), true)
	if err != nil {
		return nil, nil, err
	}
	out := &pb.MutationProto{Type: t, Row: m.GetRow(), CellCount: int32(n), Durability: pb.Durability(m.GetDurability()),
		TimeRange: leanTimeRange(m.GetTimeRange()), Nonce: m.GetNonce(),
		ReturnResults: (t == pb.MutationProto_TYPE_INCREMENT || t == pb.MutationProto_TYPE_APPEND) && returnResults(m),
		Attributes:    attrs}
	if t == pb.MutationProto_TYPE_DELETE && n == 0 && m.Timestamp != nil && int64(m.GetTimestamp()) != cell.LatestTimestamp {
		// A whole-row delete up to a timestamp: a family marker with no family (every family).
		cells = cell.AppendKeyValue(nil, m.GetRow(), nil, nil, int64(m.GetTimestamp()), cell.DeleteFamily, nil)
		out.CellCount = 1
	}
	return out, cells, nil
}

// columnValueCells makes the cells of a mutation sent without a cell block (the stock client's
// single mutations), with their tags, charging their bytes to rc's budget.
func columnValueCells(m *hb.MutationProto, t pb.MutationProto_Type, rc *requestCells) ([]byte, int, error) {
	var out []byte
	n := 0
	row := m.GetRow()
	if len(row) > cell.MaxRowLength {
		return nil, 0, doNotRetry("row of %d bytes exceeds the limit of %d bytes", len(row), cell.MaxRowLength)
	}
	defTs := cell.LatestTimestamp
	if m.Timestamp != nil {
		defTs = int64(m.GetTimestamp())
	}
	for _, cv := range m.GetColumnValue() {
		if len(cv.GetFamily()) > cell.MaxFamilyLength {
			return nil, 0, doNotRetry("family of %d bytes exceeds the limit of %d bytes", len(cv.GetFamily()), cell.MaxFamilyLength)
		}
		for _, qv := range cv.GetQualifierValue() {
			value := len(qv.GetValue())
			if len(qv.GetTags()) > 0 {
				value = cell.TaggedLen(value, len(qv.GetTags()))
			}
			size := cell.KeyValueLen(len(row), len(cv.GetFamily()), len(qv.GetQualifier()), value)
			if size > rc.budget {
				return nil, 0, doNotRetry("the cells made from the request's column values would exceed the server's request limit of %d bytes (each repeats its row); send fewer columns per request", rc.limit)
			}
			rc.budget -= size
			ts := defTs
			if qv.Timestamp != nil {
				ts = int64(qv.GetTimestamp())
			}
			typ := cell.Put
			if t == pb.MutationProto_TYPE_DELETE {
				switch qv.GetDeleteType() {
				case hb.MutationProto_DELETE_ONE_VERSION:
					typ = cell.Delete
				case hb.MutationProto_DELETE_MULTIPLE_VERSIONS:
					typ = cell.DeleteColumn
				case hb.MutationProto_DELETE_FAMILY:
					typ = cell.DeleteFamily
				case hb.MutationProto_DELETE_FAMILY_VERSION:
					typ = cell.DeleteFamilyVersion
				}
			}
			if tags := qv.GetTags(); len(tags) > 0 {
				if err := cell.ParseTags(tags); err != nil {
					return nil, 0, doNotRetry("bad tags of a cell of row %q: %v", m.GetRow(), err)
				}
				out = cell.AppendTaggedKeyValue(out, cell.AppendKey(nil, m.GetRow(), cv.GetFamily(), qv.GetQualifier(), ts, typ), qv.GetValue(), tags)
			} else {
				out = cell.AppendKeyValue(out, m.GetRow(), cv.GetFamily(), qv.GetQualifier(), ts, typ, qv.GetValue())
			}
			n++
		}
	}
	return out, n, nil
}

func leanCondition(c *hb.Condition) (*pb.Condition, error) {
	if c == nil {
		return nil, nil
	}
	out := &pb.Condition{Row: c.GetRow(), Family: c.GetFamily(), Qualifier: c.GetQualifier(), Op: pb.CompareOp(c.GetCompareType()),
		TimeRange: leanTimeRange(c.GetTimeRange())}
	if c.GetComparator() != nil {
		cmp, err := convertComparator(c.GetComparator())
		if err != nil {
			return nil, err
		}
		if b, ok := cmp.GetKind().(*pb.Comparator_Binary); ok && len(b.Binary) == 0 {
			// ifNotExists: HBase sends a BinaryComparator of no value, meaning "no such cell".
			cmp = &pb.Comparator{Kind: &pb.Comparator_Null{Null: true}}
		}
		out.Comparator = cmp
	}
	if c.GetFilter() != nil {
		f, err := convertFilter(c.GetFilter())
		if err != nil {
			return nil, err
		}
		out.Filter = f
	}
	return out, nil
}

func (a *Adapter) mutate(k *call, req *hb.MutateRequest) {
	if isMeta(req.GetRegion()) {
		k.fail(doNotRetry("hbase:meta is kept by Cellstore's master and cannot be written"))
		return
	}
	name, _, e := a.region(req.GetRegion())
	if e != nil {
		k.fail(e)
		return
	}
	m, cells, err := leanMutation(req.GetMutation(), newRequestCells(k, k.cells))
	if err != nil {
		k.fail(fromError(err))
		return
	}
	cond, err := leanCondition(req.GetCondition())
	if err != nil {
		k.fail(fromError(err))
		return
	}
	lreq := &pb.MutateRequest{Region: &pb.RegionSpecifier{Name: name}, Mutation: m, Condition: cond, NonceGroup: req.GetNonceGroup()}
	k.lean(pb.Method_METHOD_MUTATE, lreq, cells, func(msg proto.Message, cells [][]byte) {
		resp := msg.(*pb.MutateResponse)
		out := &hb.MutateResponse{Processed: proto.Bool(resp.GetProcessed())}
		var block []byte
		if res := resp.GetResult(); res != nil {
			r := &cellReader{blocks: cells}
			var n int
			block, n = r.take(nil, int(res.GetCellCount()))
			out.Result = hbResult(res, n, false)
		}
		k.reply(out, block)
	})
}

// ---- Multi ----

func (a *Adapter) multi(k *call, req *hb.MultiRequest) {
	rc := newRequestCells(k, k.cells)
	out := &hb.MultiResponse{RegionActionResult: make([]*hb.RegionActionResult, len(req.GetRegionAction()))}
	// Clients before HBase 2.4 send a conditional RowMutations with its condition on the request
	// (and read the answer's processed there): it is that one region action's condition.
	oldCond := req.GetCondition()
	if oldCond != nil && len(req.GetRegionAction()) != 1 {
		k.fail(doNotRetry("a MultiRequest's condition applies to one region action, %d given", len(req.GetRegionAction())))
		return
	}
	condOf := func(ra *hb.RegionAction) *hb.Condition {
		if c := ra.GetCondition(); c != nil {
			return c
		}
		return oldCond
	}
	lreq := &pb.MultiRequest{NonceGroup: req.GetNonceGroup()}
	var lcells []byte
	var sent []int // the HBase region action of each lean one
	existenceOnly := map[[2]uint32]bool{}
	badActions := map[int][]*hb.ResultOrException{} // by HBase region action: the actions failed here
	for i, ra := range req.GetRegionAction() {
		fail := func(e *exception) {
			out.RegionActionResult[i] = &hb.RegionActionResult{Exception: e.pair()}
		}
		name, replica, e := "", int32(0), (*exception)(nil)
		if isMeta(ra.GetRegion()) {
			e = doNotRetry("batches on hbase:meta are not supported")
		} else {
			name, replica, e = a.region(ra.GetRegion())
		}
		// A conditional region action (CheckAndMutate in a batch) is applied as one.
		lra := &pb.RegionAction{Region: &pb.RegionSpecifier{Name: name}, Atomic: ra.GetAtomic() || condOf(ra) != nil}
		// An action the adapter cannot take fails alone in a region action that is not applied
		// as one (HBase answers it with its own exception; the others are applied), and fails
		// the whole of one that is.
		var bad []*hb.ResultOrException
		actionFailed := func(index uint32, err error) {
			if lra.Atomic {
				if e == nil {
					e = fromError(err)
				}
				return
			}
			bad = append(bad, &hb.ResultOrException{Index: proto.Uint32(index), Exception: fromError(err).pair()})
		}
		var mine []byte
		for pos, act := range ra.GetAction() {
			// Actions of a RowMutations carry no index: their results are numbered by position,
			// as HBase's server numbers them.
			la := &pb.Action{Index: act.GetIndex()}
			if act.Index == nil {
				la.Index = uint32(pos)
			}
			switch {
			case act.GetMutation() != nil:
				m, cells, err := leanMutation(act.GetMutation(), rc)
				if err != nil {
					actionFailed(la.Index, err)
					continue
				}
				la.Mutation = m
				mine = append(mine, cells...)
			case act.GetGet() != nil:
				existenceOnly[[2]uint32{uint32(i), la.Index}] = act.GetGet().GetExistenceOnly()
				g, err := leanGet(act.GetGet(), replica)
				if err != nil {
					actionFailed(la.Index, err)
					continue
				}
				la.Get = g
			case act.GetServiceCall() != nil:
				actionFailed(la.Index, &exception{class: classUnknownProtocol, msg: "coprocessor service " + act.GetServiceCall().GetServiceName() + " is not available in a batch (Cellstore loads no coprocessors; AggregateService and MultiRowMutationService are served through ExecService)", doNotRetry: true})
				continue
			}
			lra.Actions = append(lra.Actions, la)
		}
		if condOf(ra) != nil {
			cond, err := leanCondition(condOf(ra))
			if err != nil && e == nil {
				e = fromError(err)
			}
			lra.Condition = cond
		}
		if e != nil {
			fail(e)
			continue
		}
		if len(lra.Actions) == 0 && len(bad) > 0 {
			out.RegionActionResult[i] = &hb.RegionActionResult{ResultOrException: bad}
			continue
		}
		lreq.RegionActions = append(lreq.RegionActions, lra)
		lcells = append(lcells, mine...)
		sent = append(sent, i)
		badActions[i] = bad
	}
	if len(lreq.RegionActions) == 0 {
		k.reply(out, nil)
		return
	}
	k.lean(pb.Method_METHOD_MULTI, lreq, lcells, func(msg proto.Message, cells [][]byte) {
		resp := msg.(*pb.MultiResponse)
		r := &cellReader{blocks: cells}
		var block []byte
		for j, lrr := range resp.GetResults() {
			if j >= len(sent) {
				break
			}
			rr := &hb.RegionActionResult{}
			if lrr.GetException() != nil {
				rr.Exception = fromDetail(lrr.GetException()).pair()
			}
			if ra := req.GetRegionAction()[sent[j]]; condOf(ra) != nil || ra.GetAtomic() {
				rr.Processed = proto.Bool(lrr.GetProcessed())
			}
			if oldCond != nil {
				out.Processed = proto.Bool(lrr.GetProcessed())
			}
			for _, roe := range lrr.GetResults() {
				x := &hb.ResultOrException{Index: proto.Uint32(roe.GetIndex())}
				if roe.GetException() != nil {
					x.Exception = fromDetail(roe.GetException()).pair()
				} else {
					var n int
					block, n = r.take(block, int(roe.GetResult().GetCellCount()))
					if oldCond == nil {
						x.Result = hbResult(roe.GetResult(), n, existenceOnly[[2]uint32{uint32(sent[j]), roe.GetIndex()}])
					}
					// (Under a request's condition the answer is an index alone, as HBase 2.3's
					// server gives: those clients read the outcome from processed only when an
					// action has no result, and fail on a result whose exists is unset.)
				}
				rr.ResultOrException = append(rr.ResultOrException, x)
			}
			rr.ResultOrException = append(rr.ResultOrException, badActions[sent[j]]...)
			out.RegionActionResult[sent[j]] = rr
			if p := lrr.GetPressure().GetPercent(); p > 0 {
				// HBase's clients back off by these when hbase.client.backpressure.enabled.
				if out.RegionStatistics == nil {
					out.RegionStatistics = &hb.MultiRegionLoadStats{}
				}
				st := out.RegionStatistics
				st.Region = append(st.Region, req.GetRegionAction()[sent[j]].GetRegion())
				st.Stat = append(st.Stat, &hb.RegionLoadStats{MemStoreLoad: proto.Int32(int32(min(p, 100)))})
			}
		}
		for i, rr := range out.RegionActionResult {
			if rr == nil {
				out.RegionActionResult[i] = &hb.RegionActionResult{Exception: doNotRetry("the region action got no answer").pair()}
			}
		}
		k.reply(out, block)
	})
}

// ---- Scan ----

func (a *Adapter) scan(k *call, req *hb.ScanRequest) {
	if isMeta(req.GetRegion()) || req.GetScannerId()&(1<<63) != 0 {
		go func() {
			defer k.recover()
			ctx, cancel := k.context()
			defer cancel()
			resp, block, err := a.metaScan(ctx, req)
			if err != nil {
				k.fail(fromError(err))
				return
			}
			k.reply(resp, block)
		}()
		return
	}
	// HBase numbers a scanner's calls after the open from 0; Cellstore counts the open as call 0.
	lreq := &pb.ScanRequest{ScannerId: req.GetScannerId(), NumberOfRows: int32(req.GetNumberOfRows()), CloseScanner: req.GetCloseScanner(),
		NextCallSeq: req.GetNextCallSeq() + 1, ClientHandlesPartials: req.GetClientHandlesPartials(),
		ClientHandlesHeartbeats: req.GetClientHandlesHeartbeats(), Renew: req.GetRenew()}
	if req.GetRegion() != nil {
		name, replica, e := a.region(req.GetRegion())
		if e != nil {
			k.fail(e)
			return
		}
		lreq.Region = &pb.RegionSpecifier{Name: name}
		if req.GetScan() != nil {
			s, err := leanScan(req.GetScan(), replica)
			if err != nil {
				k.fail(fromError(err))
				return
			}
			if l := req.GetLimitOfRows(); l > 0 && (s.Limit == 0 || int32(l) < s.Limit) {
				s.Limit = int32(l)
			}
			lreq.Scan = s
		}
	}
	if lreq.ClientHandlesHeartbeats && k.timeout > 0 {
		lreq.TimeLimitMs = (k.timeout / 2).Milliseconds()
	}
	k.lean(pb.Method_METHOD_SCAN, lreq, nil, func(msg proto.Message, cells [][]byte) {
		resp := msg.(*pb.ScanResponse)
		out := &hb.ScanResponse{ScannerId: proto.Uint64(resp.GetScannerId()), MoreResults: proto.Bool(resp.GetMoreResults()),
			MoreResultsInRegion: proto.Bool(resp.GetMoreResultsInRegion()), Stale: proto.Bool(resp.GetStale()),
			Ttl: proto.Uint32(uint32(min(resp.GetTtlMs(), int64(time.Hour/time.Millisecond)))), HeartbeatMessage: proto.Bool(resp.GetHeartbeat())}
		if len(resp.GetCursorRow()) > 0 {
			out.Cursor = &hb.Cursor{Row: resp.GetCursorRow()}
		}
		r := &cellReader{blocks: cells}
		var block []byte
		for i, n := range resp.GetCellsPerResult() {
			var got int
			block, got = r.take(block, int(n))
			out.CellsPerResult = append(out.CellsPerResult, uint32(got))
			partial := i < len(resp.GetPartialFlagPerResult()) && resp.GetPartialFlagPerResult()[i]
			out.PartialFlagPerResult = append(out.PartialFlagPerResult, partial)
		}
		k.reply(out, block)
	})
}

func leanScan(s *hb.Scan, replica int32) (*pb.Scan, error) {
	if len(s.GetCfTimeRange()) > 0 {
		return nil, doNotRetry("per-family time ranges (Scan.setColumnFamilyTimeRange) are not supported")
	}
	f, err := convertFilter(s.GetFilter())
	if err != nil {
		return nil, err
	}
	attrs, err := leanAttributes(s.GetAttribute(), false)
	if err != nil {
		return nil, err
	}
	return &pb.Scan{StartRow: s.GetStartRow(), ExcludeStartRow: s.IncludeStartRow != nil && !s.GetIncludeStartRow(), StopRow: s.GetStopRow(),
		IncludeStopRow: s.GetIncludeStopRow(), Columns: leanColumns(s.GetColumn()), Filter: f, TimeRange: leanTimeRange(s.GetTimeRange()),
		MaxVersions: int32(s.GetMaxVersions()), NoCacheBlocks: s.CacheBlocks != nil && !s.GetCacheBlocks(), Batch: int32(s.GetBatchSize()),
		MaxResultSize: int64(s.GetMaxResultSize()), Reversed: s.GetReversed(), Consistency: pb.Consistency(s.GetConsistency()),
		Caching: int32(s.GetCaching()), AllowPartialResults: s.GetAllowPartialResults(), StoreLimit: int32(s.GetStoreLimit()),
		StoreOffset: int32(s.GetStoreOffset()), Limit: int32(s.GetLimit()), ReplicaId: replica, Attributes: attrs,
		Raw: rawAttribute(s.GetAttribute()), LoadColumnFamiliesOnDemand: s.GetLoadColumnFamiliesOnDemand()}, nil
}

// rawAttribute reads Scan.setRaw, which HBase's client sends as the attribute "_raw_".
func rawAttribute(attrs []*hb.NameBytesPair) bool {
	v, ok := attribute(attrs, "_raw_")
	return ok && len(v) == 1 && v[0] != 0
}

// attribute returns the value of an operation's attribute name, and whether it has one.
func attribute(attrs []*hb.NameBytesPair, name string) ([]byte, bool) {
	for _, p := range attrs {
		if p.GetName() == name {
			return p.GetValue(), true
		}
	}
	return nil, false
}

// ---- AdminService (what clients call there) ----

// admin serves Admin.flush, compact and majorCompact of a region (HBase's client sends them to
// the region's server) through the master's FlushCompact, which flushes or compacts it here.
func (a *Adapter) admin(k *call) {
	nc, ok := hb.Lookup("AdminService", k.method)
	if !ok {
		k.fail(&exception{class: classUnknownProtocol, msg: "AdminService method " + k.method + " is not supported by Cellstore", doNotRetry: true})
		return
	}
	req, _ := nc()
	if err := proto.Unmarshal(k.param, req); err != nil {
		k.fail(doNotRetry("bad %s request: %v", k.method, err))
		return
	}
	if _, ok := req.(*hb.UpdateConfigurationRequest); ok {
		a.updateConfiguration(k)
		return
	}
	var spec *hb.RegionSpecifier
	var family []byte
	lreq := &pb.FlushCompactRequest{}
	switch r := req.(type) {
	case *hb.FlushRegionRequest:
		spec, family = r.GetRegion(), r.GetFamily()
	case *hb.CompactRegionRequest:
		spec, family = r.GetRegion(), r.GetFamily()
		lreq.Kind = pb.FlushCompactRequest_KIND_COMPACT
		if r.GetMajor() {
			lreq.Kind = pb.FlushCompactRequest_KIND_MAJOR_COMPACT
		}
	}
	if len(family) > 0 {
		k.fail(doNotRetry("%s of one column family is not supported: every family is flushed or compacted (leave the family out)", k.method))
		return
	}
	if isMeta(spec) {
		k.fail(doNotRetry("%s of hbase:meta is not supported (Cellstore's catalog is the master's)", k.method))
		return
	}
	name, _, e := a.region(spec)
	if e != nil {
		k.fail(e)
		return
	}
	lreq.Region = name
	ctx, cancel := k.context()
	defer cancel()
	if err := a.b.Master(ctx, func(ctx context.Context, m pb.MasterClient) error {
		_, err := m.FlushCompact(ctx, lreq)
		return err
	}); err != nil {
		k.fail(fromError(err))
		return
	}
	if _, ok := req.(*hb.FlushRegionRequest); ok {
		k.reply(&hb.FlushRegionResponse{LastFlushTime: proto.Uint64(uint64(time.Now().UnixMilli())), Flushed: proto.Bool(true)}, nil)
		return
	}
	k.reply(&hb.CompactRegionResponse{}, nil)
}

// updateConfiguration serves Admin.updateConfiguration(server) (and, server by server,
// updateConfiguration()): this region server re-reads its configuration file, through the master
// (which checks the caller may: ADMIN). A file that could not be applied fails the call.
func (a *Adapter) updateConfiguration(k *call) {
	self := a.b.Self()
	ctx, cancel := k.context()
	defer cancel()
	var resp *pb.UpdateClusterConfigurationResponse
	if err := a.b.Master(ctx, func(ctx context.Context, m pb.MasterClient) error {
		var err error
		resp, err = m.UpdateConfiguration(ctx, &pb.UpdateClusterConfigurationRequest{Server: net.JoinHostPort(self.GetHost(), strconv.Itoa(int(self.GetPort())))})
		return err
	}); err != nil {
		k.fail(fromError(err))
		return
	}
	for _, r := range resp.GetReports() {
		if r.GetError() != "" {
			k.fail(doNotRetry("updating the configuration of %s: %s", r.GetProcess(), r.GetError()))
			return
		}
	}
	k.reply(&hb.UpdateConfigurationResponse{}, nil)
}

// returnResults is an Increment's or Append's setReturnResults: the attribute "_rr_", one byte,
// false when 0; true without it (HBase's Mutation.isReturnResults).
func returnResults(m *hb.MutationProto) bool {
	v, ok := attribute(m.GetAttribute(), "_rr_")
	return !ok || len(v) == 0 || v[0] != 0
}
