package hbase

import (
	"bytes"
	"context"
	"crypto/md5"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"time"

	"google.golang.org/protobuf/proto"

	pb "github.com/cellstore/cellstore/engine/api/cellstore/v1"
	hb "github.com/cellstore/cellstore/engine/api/hbase/v2"
	"github.com/cellstore/cellstore/engine/cell"
	"github.com/cellstore/cellstore/engine/security"
)

// hbase:meta as the HBase client sees it. Cellstore keeps region locations in the master's
// catalog; the client finds regions by reading hbase:meta, so every region server says it serves
// hbase:meta (GetMetaRegionLocations) and answers reads of it from the master's locations:
//
//	row    <table>,<start key>,<region id>.<md5 of what precedes>.
//	info:regioninfo            "PBUF" + RegionInfo
//	info:server[_RRRR]         "host:port" of the primary (or replica RRRR, hex) when open
//	info:serverstartcode[_RRRR] 8 bytes
//	info:seqnumDuringOpen[_RRRR] 8 bytes
//	info:state                 OPEN, OPENING, CLOSED…
//	row <table>, table:state   TableState
//
// ordered as HBase's MetaCellComparator orders them (table, then start key, then the rest).

var (
	metaTableName = &hb.TableName{Namespace: []byte("hbase"), Qualifier: []byte("meta")}
	familyInfo    = []byte("info")
	familyTable   = []byte("table")
	pbufMagic     = []byte("PBUF")
)

// metaRegionInfo is hbase:meta's one region.
func metaRegionInfo() *hb.RegionInfo {
	return &hb.RegionInfo{RegionId: proto.Uint64(1), TableName: metaTableName, StartKey: []byte{}, EndKey: []byte{},
		Offline: proto.Bool(false), Split: proto.Bool(false), ReplicaId: proto.Int32(0)}
}

// isMeta reports whether a region specifier names hbase:meta.
func isMeta(spec *hb.RegionSpecifier) bool {
	v := spec.GetValue()
	return bytes.HasPrefix(v, []byte("hbase:meta,")) || string(v) == "1588230740"
}

// tableString is a table's name as HBase writes it: the default namespace left out.
func tableString(t *pb.TableName) string {
	if t.GetNamespace() == "" || t.GetNamespace() == "default" {
		return t.GetName()
	}
	return t.GetNamespace() + ":" + t.GetName()
}

// parseTableString reads "ns:name" or "name".
func parseTableString(s string) *pb.TableName {
	if i := bytes.IndexByte([]byte(s), ':'); i >= 0 {
		return &pb.TableName{Namespace: s[:i], Name: s[i+1:]}
	}
	return &pb.TableName{Namespace: "default", Name: s}
}

// regionName is a region's name in HBase's new format (what the client computes from its
// RegionInfo and sends back in every request).
func regionName(t *pb.TableName, start []byte, id uint64, replica int32) []byte {
	b := []byte(tableString(t))
	b = append(b, ',')
	b = append(b, start...)
	b = append(b, ',')
	b = strconv.AppendUint(b, id, 10)
	if replica > 0 {
		b = append(b, fmt.Sprintf("_%04X", replica)...)
	}
	sum := md5.Sum(b)
	b = append(b, '.')
	b = append(b, hex.EncodeToString(sum[:])...)
	return append(b, '.')
}

// parsedRegion is what a region name says.
type parsedRegion struct {
	table   *pb.TableName
	start   []byte
	id      uint64
	replica int32
}

// parseRegionName reads a region name of either format.
func parseRegionName(name []byte) (parsedRegion, error) {
	bad := func(why string) (parsedRegion, error) {
		if len(name) > 256 {
			return parsedRegion{}, doNotRetry("region name %q... (%d bytes): %s", name[:256], len(name), why)
		}
		return parsedRegion{}, doNotRetry("region name %q: %s", name, why)
	}
	n := name
	// New format: a trailing ".<32 hex digits>.".
	if len(n) >= 34 && n[len(n)-1] == '.' && n[len(n)-34] == '.' {
		n = n[:len(n)-34]
	}
	first := bytes.IndexByte(n, ',')
	last := bytes.LastIndexByte(n, ',')
	if first < 0 || last == first {
		return bad("not <table>,<start key>,<region id>")
	}
	idPart := n[last+1:]
	var replica int64
	if i := bytes.IndexByte(idPart, '_'); i >= 0 {
		r, err := strconv.ParseInt(string(idPart[i+1:]), 16, 32)
		if err != nil {
			return bad("bad replica id")
		}
		replica, idPart = r, idPart[:i]
	}
	id, err := strconv.ParseUint(string(idPart), 10, 64)
	if err != nil {
		return bad("bad region id")
	}
	if len(n[first+1:last]) > cell.MaxRowLength {
		return bad("a start key of more than 32767 bytes")
	}
	return parsedRegion{table: parseTableString(string(n[:first])), start: n[first+1 : last], id: id, replica: int32(replica)}, nil
}

// compareMetaKeys orders hbase:meta row keys as HBase's MetaCellComparator: by table, then
// start key, then the rest (region id and encoded name).
func compareMetaKeys(a, b []byte) int {
	at, as, ar := splitMetaKey(a)
	bt, bs, br := splitMetaKey(b)
	if c := bytes.Compare(at, bt); c != 0 {
		return c
	}
	// A table's own row (its name, no delimiter) comes before its regions' rows.
	if ac, bc := bytes.IndexByte(a, ',') >= 0, bytes.IndexByte(b, ',') >= 0; ac != bc {
		if ac {
			return 1
		}
		return -1
	}
	if c := bytes.Compare(as, bs); c != 0 {
		return c
	}
	return bytes.Compare(ar, br)
}

func splitMetaKey(k []byte) (table, start, rest []byte) {
	first := bytes.IndexByte(k, ',')
	if first < 0 {
		return k, nil, nil
	}
	last := bytes.LastIndexByte(k, ',')
	if last == first {
		return k[:first], k[first+1:], nil
	}
	return k[:first], k[first+1 : last], k[last+1:]
}

func long(v int64) []byte { return binary.BigEndian.AppendUint64(nil, uint64(v)) }

func hbRegionInfo(ri *pb.RegionInfo) *hb.RegionInfo {
	return &hb.RegionInfo{RegionId: proto.Uint64(ri.GetRegionId()), TableName: hbTableName(ri.GetTable()),
		StartKey: nonNil(ri.GetStartKey()), EndKey: nonNil(ri.GetEndKey()), Offline: proto.Bool(ri.GetOffline()),
		Split: proto.Bool(ri.GetSplit()), ReplicaId: proto.Int32(0)}
}

func hbTableName(t *pb.TableName) *hb.TableName {
	ns := t.GetNamespace()
	if ns == "" {
		ns = "default"
	}
	return &hb.TableName{Namespace: []byte(ns), Qualifier: []byte(t.GetName())}
}

func nonNil(b []byte) []byte {
	if b == nil {
		return []byte{}
	}
	return b
}

// metaRow is one synthesized row of hbase:meta: its key and its cells (sorted).
type metaRow struct {
	key   []byte
	cells []cell.KeyValue
}

// metaRowsOf makes the rows of a table's regions from their locations (primaries and replicas).
func metaRowsOf(locs []*pb.RegionLocation) []metaRow {
	byID := map[uint64][]*pb.RegionLocation{}
	var ids []uint64
	for _, l := range locs {
		id := l.GetRegion().GetRegionId()
		if _, ok := byID[id]; !ok {
			ids = append(ids, id)
		}
		byID[id] = append(byID[id], l)
	}
	var rows []metaRow
	for _, id := range ids {
		group := byID[id]
		var primary *pb.RegionLocation
		for _, l := range group {
			if l.GetRegion().GetReplicaId() == 0 {
				primary = l
			}
		}
		if primary == nil {
			continue
		}
		ri := primary.GetRegion()
		key := regionName(ri.GetTable(), ri.GetStartKey(), ri.GetRegionId(), 0)
		info, _ := proto.Marshal(hbRegionInfo(ri))
		type col struct {
			q string
			v []byte
		}
		cols := []col{{"regioninfo", append(slices.Clip(pbufMagic), info...)}, {"state", []byte(stateName(primary.GetState()))}}
		for _, l := range group {
			if l.GetState() != pb.RegionState_REGION_STATE_OPEN || l.GetServer().GetHost() == "" {
				continue
			}
			suffix := ""
			if r := l.GetRegion().GetReplicaId(); r > 0 {
				suffix = fmt.Sprintf("_%04X", r)
			}
			s := l.GetServer()
			cols = append(cols,
				col{"server" + suffix, []byte(fmt.Sprintf("%s:%d", s.GetHost(), s.GetPort()))},
				col{"serverstartcode" + suffix, long(s.GetStartCode())},
				col{"seqnumDuringOpen" + suffix, long(int64(l.GetSeq()))},
				col{"sn" + suffix, []byte(fmt.Sprintf("%s,%d,%d", s.GetHost(), s.GetPort(), s.GetStartCode()))})
		}
		slices.SortFunc(cols, func(a, b col) int { return bytes.Compare([]byte(a.q), []byte(b.q)) })
		row := metaRow{key: key}
		for _, c := range cols {
			row.cells = append(row.cells, cell.KeyValue(cell.AppendKeyValue(nil, key, familyInfo, []byte(c.q), 1, cell.Put, c.v)))
		}
		rows = append(rows, row)
	}
	return rows
}

func stateName(s pb.RegionState) string {
	switch s {
	case pb.RegionState_REGION_STATE_OPEN:
		return "OPEN"
	case pb.RegionState_REGION_STATE_OPENING:
		return "OPENING"
	case pb.RegionState_REGION_STATE_CLOSING:
		return "CLOSING"
	case pb.RegionState_REGION_STATE_CLOSED:
		return "CLOSED"
	}
	return "OFFLINE"
}

// tableStateRow is the row <table> with table:state.
func tableStateRow(t *pb.TableName, st pb.TableState) metaRow {
	v, _ := proto.Marshal(&hb.TableState{State: hbTableState(st).Enum()})
	key := []byte(tableString(t))
	// Written without the "PBUF" prefix, as HBase's MetaTableAccessor writes table states.
	return metaRow{key: key, cells: []cell.KeyValue{cell.KeyValue(cell.AppendKeyValue(nil, key, familyTable, []byte("state"), 1, cell.Put, v))}}
}

// metaRows makes the rows of hbase:meta between two row keys (empty: unbounded), for the tables
// those bounds cover.
// metaLookupWaitMs is how long a region lookup waits at the master for a moving region.
const metaLookupWaitMs = 2000

func (a *Adapter) metaRows(ctx context.Context, lo, hi []byte) ([]metaRow, error) {
	lt, _, _ := splitMetaKey(lo)
	ht, _, _ := splitMetaKey(hi)
	_, hrow, _ := splitMetaKey(hi)
	var names []*pb.TableName
	if len(lo) > 0 && len(hi) > 0 && bytes.Equal(lt, ht) {
		names = []*pb.TableName{parseTableString(string(lt))} // a region lookup: one table
		if len(hrow) > 0 {
			// The client locates the region of hrow (the scan's upper bound): if that region is
			// moving, wait at the master until it is open again, so that the client's next
			// request goes to its new server instead of backing off. Best effort: the rows
			// below are read anyway.
			_ = a.b.Master(ctx, func(ctx context.Context, m pb.MasterClient) error {
				_, err := m.LocateRegion(ctx, &pb.LocateRegionRequest{Table: names[0], Row: hrow, WaitMs: metaLookupWaitMs})
				return err
			})
		}
	} else {
		err := a.b.Master(ctx, func(ctx context.Context, m pb.MasterClient) error {
			resp, err := m.ListTables(ctx, &pb.ListTablesRequest{})
			for _, t := range resp.GetTables() {
				names = append(names, t.GetTable().GetName())
			}
			return err
		})
		if err != nil {
			return nil, err
		}
	}
	var rows []metaRow
	for _, name := range names {
		// A table's locations and state, which every user may read (as hbase:meta): a user who
		// may not read the table is refused by the region server, as HBase does, not while
		// locating.
		var resp *pb.GetTableRegionsResponse
		err := a.b.Master(ctx, func(ctx context.Context, m pb.MasterClient) error {
			var err error
			resp, err = m.GetTableRegions(ctx, &pb.TableRequest{Table: name})
			return err
		})
		if d, ok := pb.DetailOf(err); ok && d.GetCode() == pb.ErrorCode_ERROR_CODE_TABLE_NOT_FOUND {
			continue // dropped meanwhile, or never there
		}
		if err != nil {
			return nil, err
		}
		rows = append(rows, tableStateRow(name, resp.GetState()))
		rows = append(rows, metaRowsOf(resp.GetLocations())...)
	}
	slices.SortFunc(rows, func(x, y metaRow) int { return compareMetaKeys(x.key, y.key) })
	return rows, nil
}

// ---- ClientMetaService ----

func (a *Adapter) meta(k *call) {
	self := a.b.Self()
	sn := hbServerName(self)
	switch k.method {
	case "GetClusterId":
		k.reply(&hb.GetClusterIdResponse{ClusterId: proto.String(a.b.ClusterID())}, nil)
	case "GetActiveMaster":
		// The master's calls go through this server (forwarded to the active master).
		k.reply(&hb.GetActiveMasterResponse{ServerName: sn}, nil)
	case "GetMasters":
		// HBase 2.4's MasterRegistry asks this (2.5+ ask GetActiveMaster and GetBootstrapNodes).
		k.reply(&hb.GetMastersResponse{MasterServers: []*hb.GetMastersResponseEntry{{ServerName: sn, IsActive: proto.Bool(true)}}}, nil)
	case "GetMetaRegionLocations":
		k.reply(&hb.GetMetaRegionLocationsResponse{MetaLocations: []*hb.RegionLocation{{RegionInfo: metaRegionInfo(), ServerName: sn, SeqNum: proto.Int64(1)}}}, nil)
	case "GetBootstrapNodes":
		k.reply(&hb.GetBootstrapNodesResponse{ServerName: a.bootstrapNodes(sn)}, nil)
	default:
		k.fail(&exception{class: classUnknownProtocol, msg: "ClientMetaService has no method " + k.method, doNotRetry: true})
	}
}

// bootstrapNodes are the live region servers, which HBase's RPC registry keeps as its bootstrap
// list and spreads its calls over (so a client goes on when the server it bootstrapped from
// restarts), remembered for bootstrapTTL; just self when the master cannot say. The list is
// public in HBase: it is asked as this server, not as the caller (who may hold no permission
// to see the cluster's status).
func (a *Adapter) bootstrapNodes(self *hb.ServerName) []*hb.ServerName {
	a.bootstrap.mu.Lock()
	defer a.bootstrap.mu.Unlock()
	if time.Since(a.bootstrap.at) < bootstrapTTL && len(a.bootstrap.nodes) > 0 {
		return a.bootstrap.nodes
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var nodes []*hb.ServerName
	err := a.b.Master(ctx, func(ctx context.Context, m pb.MasterClient) error {
		st, err := m.ClusterStatus(ctx, &pb.ClusterStatusRequest{})
		nodes = nodes[:0]
		for _, s := range st.GetServers() {
			if s.GetLive() && !s.GetDraining() {
				nodes = append(nodes, hbServerName(s.GetServer()))
			}
		}
		return err
	})
	if err != nil || len(nodes) == 0 {
		return []*hb.ServerName{self}
	}
	a.bootstrap.at, a.bootstrap.nodes = time.Now(), nodes
	return nodes
}

// hbServerName is a server's name as HBase's messages carry it.
func hbServerName(s *pb.ServerName) *hb.ServerName {
	return &hb.ServerName{HostName: proto.String(s.GetHost()), Port: proto.Uint32(uint32(s.GetPort())), StartCode: proto.Uint64(uint64(s.GetStartCode()))}
}

// bootstrapTTL is how long the list of bootstrap nodes is remembered.
const bootstrapTTL = 10 * time.Second

// ---- reads of hbase:meta ----

// metaScanners keeps the rows of open hbase:meta scanners not yet returned.
type metaScanners struct {
	mu    sync.Mutex
	open  map[uint64]*metaScanner
	bytes int // of the open scanners' rows
}

type metaScanner struct {
	rows    []metaRow
	bytes   int // of rows (set by put)
	touched time.Time
	owner   string // the user who opened it: only that user continues it
}

// maxMetaScanners and maxMetaScannerBytes bound the open hbase:meta scanners and the rows they
// keep (the oldest go first); one not used for metaScannerTTL (the lease its answers give) goes.
const (
	maxMetaScanners     = 1024
	maxMetaScannerBytes = 64 << 20
	metaScannerTTL      = 60 * time.Second
)

func (s *metaScanners) put(id uint64, ms *metaScanner) {
	ms.bytes = 0
	for _, r := range ms.rows {
		ms.bytes += len(r.key)
		for _, kv := range r.cells {
			ms.bytes += len(kv)
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.open == nil {
		s.open = map[uint64]*metaScanner{}
	}
	for i, o := range s.open {
		if time.Since(o.touched) > metaScannerTTL {
			s.removeLocked(i)
		}
	}
	for len(s.open) > 0 && (len(s.open) >= maxMetaScanners || s.bytes+ms.bytes > maxMetaScannerBytes) {
		var oldest uint64
		var t time.Time
		for i, o := range s.open {
			if t.IsZero() || o.touched.Before(t) {
				oldest, t = i, o.touched
			}
		}
		s.removeLocked(oldest)
	}
	s.open[id] = ms
	s.bytes += ms.bytes
}

func (s *metaScanners) removeLocked(id uint64) {
	if ms, ok := s.open[id]; ok {
		s.bytes -= ms.bytes
		delete(s.open, id)
	}
}

// take removes an open scanner (put returns it): calls on one scanner never run together.
func (s *metaScanners) take(id uint64) (*metaScanner, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	ms, ok := s.open[id]
	s.removeLocked(id)
	return ms, ok && time.Since(ms.touched) <= metaScannerTTL
}

func (s *metaScanners) drop(id uint64) {
	s.mu.Lock()
	s.removeLocked(id)
	s.mu.Unlock()
}

// metaGet answers a Get of hbase:meta: a region's row, or a table's state.
func (a *Adapter) metaGet(ctx context.Context, g *hb.Get) (*hb.Result, []byte, error) {
	row := g.GetRow()
	var rows []metaRow
	var err error
	if bytes.IndexByte(row, ',') < 0 {
		rows, err = a.metaRows(ctx, append(slices.Clip(row), ','), append(slices.Clip(row), ','))
	} else {
		rows, err = a.metaRows(ctx, row, row)
	}
	if err != nil {
		return nil, nil, err
	}
	for _, r := range rows {
		if bytes.Equal(r.key, row) {
			cells := selectColumns(r.cells, g.GetColumn())
			var block []byte
			for _, kv := range cells {
				block = appendCell(block, kv)
			}
			if g.GetExistenceOnly() {
				return &hb.Result{Exists: proto.Bool(len(cells) > 0)}, nil, nil
			}
			return &hb.Result{AssociatedCellCount: proto.Int32(int32(len(cells)))}, block, nil
		}
	}
	if g.GetExistenceOnly() {
		return &hb.Result{Exists: proto.Bool(false)}, nil, nil
	}
	return &hb.Result{AssociatedCellCount: proto.Int32(0)}, nil, nil
}

// selectColumns keeps the cells of the requested families and qualifiers (all without).
func selectColumns(cells []cell.KeyValue, cols []*hb.Column) []cell.KeyValue {
	if len(cols) == 0 {
		return cells
	}
	var out []cell.KeyValue
	for _, kv := range cells {
		k := kv.Key()
		for _, c := range cols {
			if !bytes.Equal(c.GetFamily(), k.Family()) {
				continue
			}
			if len(c.GetQualifier()) == 0 || slices.ContainsFunc(c.GetQualifier(), func(q []byte) bool { return bytes.Equal(q, k.Qualifier()) }) {
				out = append(out, kv)
				break
			}
		}
	}
	return out
}

// metaScan answers a scan of hbase:meta: the rows in the scan's range, number_of_rows at a time.
func (a *Adapter) metaScan(ctx context.Context, req *hb.ScanRequest) (*hb.ScanResponse, []byte, error) {
	caller, _ := security.FromContext(ctx)
	user := caller.User
	var ms *metaScanner
	id := req.GetScannerId()
	if req.Scan != nil && id == 0 {
		sc := req.GetScan()
		start, stop := sc.GetStartRow(), sc.GetStopRow()
		lo, hi := start, stop
		if sc.GetReversed() {
			lo, hi = stop, start
		}
		rows, err := a.metaRows(ctx, lo, hi)
		if err != nil {
			return nil, nil, err
		}
		var in []metaRow
		for _, r := range rows {
			if metaInRange(r.key, sc) {
				r.cells = selectColumns(r.cells, sc.GetColumn())
				if len(r.cells) > 0 {
					in = append(in, r)
				}
			}
		}
		if sc.GetReversed() {
			slices.Reverse(in)
		}
		if l := int(sc.GetLimit()); l > 0 && len(in) > l {
			in = in[:l]
		}
		id = a.metaScannerID.Add(1) | 1<<63 // apart from region scanners' ids
		ms = &metaScanner{rows: in, owner: user}
	} else {
		var ok bool
		if ms, ok = a.metaScanners.take(id); !ok {
			return nil, nil, &exception{class: classUnknownScanner, msg: fmt.Sprintf("unknown hbase:meta scanner %d: it was closed or expired", id), doNotRetry: true}
		}
		if ms.owner != user {
			a.metaScanners.put(id, ms)
			return nil, nil, &exception{class: classUnknownScanner, msg: fmt.Sprintf("unknown hbase:meta scanner %d: it was opened by another user", id), doNotRetry: true}
		}
	}
	resp := &hb.ScanResponse{ScannerId: proto.Uint64(id), Ttl: proto.Uint32(uint32(metaScannerTTL.Milliseconds()))}
	if req.GetCloseScanner() && req.GetScannerId() != 0 {
		a.metaScanners.drop(id)
		resp.MoreResults = proto.Bool(false)
		return resp, nil, nil
	}
	n := int(req.GetNumberOfRows())
	if n <= 0 {
		n = len(ms.rows)
	}
	n = min(n, len(ms.rows))
	var block []byte
	for _, r := range ms.rows[:n] {
		for _, kv := range r.cells {
			block = appendCell(block, kv)
		}
		resp.CellsPerResult = append(resp.CellsPerResult, uint32(len(r.cells)))
		resp.PartialFlagPerResult = append(resp.PartialFlagPerResult, false)
	}
	ms.rows = slices.Clone(ms.rows[n:]) // the rows returned are not kept
	ms.touched = time.Now()
	more := len(ms.rows) > 0
	resp.MoreResultsInRegion = proto.Bool(more)
	resp.MoreResults = proto.Bool(more)
	if more && !req.GetCloseScanner() {
		a.metaScanners.put(id, ms)
	} else {
		// (An open that also closes — HBase 1.x's small scans — answers one batch and closes.)
		a.metaScanners.drop(id)
	}
	return resp, block, nil
}

// metaInRange reports whether a row key is within a scan's bounds, in hbase:meta's order.
func metaInRange(k []byte, sc *hb.Scan) bool {
	start, stop := sc.GetStartRow(), sc.GetStopRow()
	inclStart := sc.IncludeStartRow == nil || sc.GetIncludeStartRow()
	inclStop := sc.GetIncludeStopRow()
	if sc.GetReversed() {
		// start is the upper bound, stop the lower one.
		if len(start) > 0 {
			if c := compareMetaKeys(k, start); c > 0 || c == 0 && !inclStart {
				return false
			}
		}
		if len(stop) > 0 {
			if c := compareMetaKeys(k, stop); c < 0 || c == 0 && !inclStop {
				return false
			}
		}
		return true
	}
	if len(start) > 0 {
		if c := compareMetaKeys(k, start); c < 0 || c == 0 && !inclStart {
			return false
		}
	}
	if len(stop) > 0 {
		if c := compareMetaKeys(k, stop); c > 0 || c == 0 && !inclStop {
			return false
		}
	}
	return true
}
