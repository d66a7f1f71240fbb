package client

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/cellstore/cellstore/engine/access"
	pb "github.com/cellstore/cellstore/engine/api/cellstore/v1"
	"github.com/cellstore/cellstore/engine/cell"
	"github.com/cellstore/cellstore/engine/rpc"
	"github.com/cellstore/cellstore/engine/schema"
)

// Result is one row's cells as a server returned them, in store order.
type Result struct {
	Row   []byte
	Cells []cell.Cell
	// Exists answers an existence-only Get.
	Exists bool
	// Stale is set when a read replica answered a TIMELINE read: it may lag the primary.
	Stale bool
	// Partial is set on scan results that hold only part of a row (when the scan allows them).
	Partial bool
}

// Value is the newest value of family:qualifier, or nil.
func (r *Result) Value(family, qualifier string) []byte {
	for i := range r.Cells {
		c := &r.Cells[i]
		if string(c.Family) == family && string(c.Qualifier) == qualifier && c.Type == cell.Put {
			return c.Value
		}
	}
	return nil
}

// Int64 is the newest value of family:qualifier as an 8-byte counter (Increment); ok is false
// when the cell is missing or not 8 bytes.
func (r *Result) Int64(family, qualifier string) (v int64, ok bool) {
	b := r.Value(family, qualifier)
	if len(b) != 8 {
		return 0, false
	}
	return int64(binary.BigEndian.Uint64(b)), true
}

// Mutation is one row's change: a Put, Delete, Increment or Append.
type Mutation struct {
	Type       pb.MutationProto_Type
	Row        []byte
	Cells      []cell.Cell
	Durability pb.Durability
	// TimeRange limits which versions count as current for increments and appends.
	TimeRange *pb.TimeRange
	// ReturnResults asks increments and appends for the new values.
	ReturnResults bool
	// TTL is the per-cell time to live of the cells a put, increment or
	// append writes (HBase's Mutation.setTTL; millisecond precision, 0:
	// none): they expire once their timestamp + TTL is past. It cannot make
	// a cell outlive its family's TTL.
	TTL time.Duration
	// ACL is a put's cell ACL (HBase's Mutation.setACL): users and "@group"s with the actions
	// each may take on the cells written (docs/security.md, "Cell ACLs").
	ACL map[string]access.Action
	// Visibility is a put's or delete's visibility expression (HBase's CellVisibility): labels
	// with & | ! and parentheses, e.g. "secret & !eu" (docs/security.md, "Visibility labels").
	Visibility string
}

// WithAuthorizations returns attrs (made when nil) with the labels a get or scan asks to read
// with (HBase's setAuthorizations): it sees the cells those of them its user holds satisfy.
// Set it on pb.Get.Attributes or pb.Scan.Attributes.
func WithAuthorizations(attrs map[string][]byte, labels ...string) (map[string][]byte, error) {
	v, err := access.EncodeAuthorizations(labels)
	if err != nil {
		return nil, fmt.Errorf("client: authorizations: %w", err)
	}
	if attrs == nil {
		attrs = map[string][]byte{}
	}
	attrs[access.AuthorizationsAttribute] = v
	return attrs, nil
}

// ttlAttribute carries a mutation's TTL in milliseconds (the name HBase uses).
const ttlAttribute = "_ttl"

// NewPut starts a Put of row.
func NewPut(row []byte) *Mutation { return &Mutation{Type: pb.MutationProto_TYPE_PUT, Row: row} }

// Add adds a cell; ts cell.LatestTimestamp lets the server stamp it.
func (m *Mutation) Add(family, qualifier string, ts int64, value []byte) *Mutation {
	m.Cells = append(m.Cells, cell.Cell{Row: m.Row, Family: []byte(family), Qualifier: []byte(qualifier), Timestamp: ts, Type: cell.Put, Value: value})
	return m
}

// AddTagged adds a cell with tags (cell.Tags form: cell.AppendTag): a TTL tag (cell.TagTTL, 8
// bytes of milliseconds) or tags of the application's own types (cell.FirstClientTagType and
// above), stored with the cell for server-side code; reads do not return them. The system's tag
// types (ACLs, visibility) come from the mutation's ACL and Visibility instead.
func (m *Mutation) AddTagged(family, qualifier string, ts int64, value, tags []byte) *Mutation {
	m.Cells = append(m.Cells, cell.Cell{Row: m.Row, Family: []byte(family), Qualifier: []byte(qualifier), Timestamp: ts, Type: cell.Put,
		Value: value, Tags: tags})
	return m
}

// NewDelete starts a Delete of row. With no cells added it deletes the whole row (every family,
// every version up to now), as HBase's deleteall.
func NewDelete(row []byte) *Mutation { return &Mutation{Type: pb.MutationProto_TYPE_DELETE, Row: row} }

// AddMarker adds a delete marker: cell.Delete (one version; LatestTimestamp = the newest),
// cell.DeleteColumn (versions up to ts), cell.DeleteFamily (the family up to ts; qualifier
// ignored) or cell.DeleteFamilyVersion (the family's cells at exactly ts).
func (m *Mutation) AddMarker(t cell.Type, family, qualifier string, ts int64) *Mutation {
	m.Cells = append(m.Cells, cell.Cell{Row: m.Row, Family: []byte(family), Qualifier: []byte(qualifier), Timestamp: ts, Type: t})
	return m
}

// NewIncrement starts an Increment of row.
func NewIncrement(row []byte) *Mutation {
	return &Mutation{Type: pb.MutationProto_TYPE_INCREMENT, Row: row, ReturnResults: true}
}

// AddAmount adds amount to the 8-byte big-endian counter at family:qualifier.
func (m *Mutation) AddAmount(family, qualifier string, amount int64) *Mutation {
	return m.Add(family, qualifier, cell.LatestTimestamp, binary.BigEndian.AppendUint64(nil, uint64(amount)))
}

// NewAppend starts an Append of row (values appended to the current ones).
func NewAppend(row []byte) *Mutation {
	return &Mutation{Type: pb.MutationProto_TYPE_APPEND, Row: row, ReturnResults: true}
}

// validate checks what the client can before sending: a row, cells, a sane TTL, and every cell
// within maxCell bytes (HBase's hbase.client.keyvalue.maxsize), so an oversized value fails here
// instead of after its bytes crossed the network.
func (m *Mutation) validate(maxCell int) error {
	if len(m.Row) == 0 {
		return errors.New("client: mutation of an empty row")
	}
	if len(m.Row) > cell.MaxRowLength {
		return fmt.Errorf("client: row of %d bytes exceeds %d", len(m.Row), cell.MaxRowLength)
	}
	if m.Type != pb.MutationProto_TYPE_DELETE && len(m.Cells) == 0 {
		return fmt.Errorf("client: %s of row %q has no cells", m.Type, m.Row)
	}
	for i := range m.Cells {
		c := &m.Cells[i]
		if n := cell.KeyValueLen(len(m.Row), len(c.Family), len(c.Qualifier), len(c.Value)); n > maxCell {
			return fmt.Errorf("client: a cell of row %s (%s:%s) is %d bytes, over the limit of %d (Config.MaxCellSize; servers refuse it too)",
				schema.Key(m.Row), schema.Key(c.Family), schema.Key(c.Qualifier), n, maxCell)
		}
		if len(c.Tags) > 0 {
			if err := cell.ParseTags(c.Tags); err != nil {
				return fmt.Errorf("client: the tags of a cell of row %s: %w", schema.Key(m.Row), err)
			}
			var bad byte
			refused := false
			cell.ForEachTag(c.Tags, func(typ byte, _ []byte) bool {
				bad, refused = typ, !cell.ClientTagType(typ)
				return !refused
			})
			if refused {
				return fmt.Errorf("client: a cell of row %s carries a tag of type %d, which only the server writes; use types from %d (or the mutation's ACL, Visibility, TTL)",
					schema.Key(m.Row), bad, cell.FirstClientTagType)
			}
		}
	}
	if m.TTL < 0 || m.TTL > 0 && m.TTL < time.Millisecond {
		return fmt.Errorf("client: TTL %v of a mutation of row %q: use a positive number of milliseconds", m.TTL, m.Row)
	}
	if len(m.ACL) > 0 {
		if m.Type != pb.MutationProto_TYPE_PUT {
			return fmt.Errorf("client: a cell ACL goes on puts, not on a %v of row %q", m.Type, m.Row)
		}
		if _, err := access.EncodeCellACL(m.ACL); err != nil {
			return fmt.Errorf("client: mutation of row %q: %w", m.Row, err)
		}
	}
	if m.Visibility != "" {
		if m.Type != pb.MutationProto_TYPE_PUT && m.Type != pb.MutationProto_TYPE_DELETE {
			return fmt.Errorf("client: a visibility expression goes on puts and deletes, not on a %v of row %q", m.Type, m.Row)
		}
		if _, err := access.ParseVisibility(m.Visibility); err != nil {
			return fmt.Errorf("client: mutation of row %q: %w", m.Row, err)
		}
	}
	if m.TTL != 0 && m.Type == pb.MutationProto_TYPE_DELETE {
		return fmt.Errorf("client: a delete of row %q cannot carry a TTL (TTLs apply to puts, increments and appends)", m.Row)
	}
	return nil
}

// encode makes the mutation's message and appends its cells to block.
func (m *Mutation) encode(block []byte, nonce uint64) (*pb.MutationProto, []byte) {
	for i := range m.Cells {
		c := &m.Cells[i]
		if len(c.Tags) > 0 {
			block = cell.AppendTaggedKeyValue(block, cell.AppendKey(nil, m.Row, c.Family, c.Qualifier, c.Timestamp, c.Type), c.Value, c.Tags)
			continue
		}
		block = cell.AppendKeyValue(block, m.Row, c.Family, c.Qualifier, c.Timestamp, c.Type, c.Value)
	}
	mp := &pb.MutationProto{Type: m.Type, Row: m.Row, CellCount: int32(len(m.Cells)), Durability: m.Durability,
		TimeRange: m.TimeRange, Nonce: nonce, ReturnResults: m.ReturnResults}
	if m.TTL > 0 {
		mp.Attributes = map[string][]byte{ttlAttribute: binary.BigEndian.AppendUint64(nil, uint64(m.TTL.Milliseconds()))}
	}
	if len(m.ACL) > 0 {
		if mp.Attributes == nil {
			mp.Attributes = map[string][]byte{}
		}
		mp.Attributes[access.ACLAttribute], _ = access.EncodeCellACL(m.ACL) // checked by validate
	}
	if m.Visibility != "" {
		if mp.Attributes == nil {
			mp.Attributes = map[string][]byte{}
		}
		mp.Attributes[access.VisibilityAttribute] = []byte(m.Visibility)
	}
	return mp, block
}

func (m *Mutation) idempotent() bool {
	return m.Type == pb.MutationProto_TYPE_PUT || m.Type == pb.MutationProto_TYPE_DELETE
}

// Table is a handle on one table ("namespace:name" or "name" in the default namespace).
type Table struct {
	c    *Client
	name string
	pb   *pb.TableName
}

// Table returns a handle; it does not check that the table exists.
func (c *Client) Table(name string) *Table {
	return &Table{c: c, name: name, pb: ParseTableName(name)}
}

// ParseTableName splits "namespace:name"; the namespace is "default" when none is given.
func ParseTableName(s string) *pb.TableName {
	for i := 0; i < len(s); i++ {
		if s[i] == ':' {
			return &pb.TableName{Namespace: s[:i], Name: s[i+1:]}
		}
	}
	return &pb.TableName{Namespace: "default", Name: s}
}

// Name is the table's name as given.
func (t *Table) Name() string { return t.name }

var nonceCounter atomic.Uint64

func (c *Client) nonce(m *Mutation) uint64 {
	if m.idempotent() {
		return 0
	}
	return nonceCounter.Add(1)
}

// Get reads one row.
func (t *Table) Get(ctx context.Context, g *pb.Get) (*Result, error) {
	if len(g.GetRow()) == 0 {
		return nil, errors.New("client: Get of an empty row")
	}
	if g.GetConsistency() == pb.Consistency_CONSISTENCY_TIMELINE {
		return t.timelineGet(ctx, g)
	}
	var res *Result
	err := t.c.withRegion(ctx, t, g.Row, func(ctx context.Context, conn *rpc.Conn, loc *location) error {
		var resp pb.GetResponse
		cells, err := conn.Call(ctx, pb.Method_METHOD_GET, &pb.GetRequest{Region: &pb.RegionSpecifier{Name: loc.region}, Get: g}, nil, &resp, nil)
		if err != nil {
			return err
		}
		res, err = decodeResult(g.Row, resp.GetResult(), cells)
		return err
	})
	return res, err
}

// Mutate applies one mutation. Increments and appends return the new values when asked.
func (t *Table) Mutate(ctx context.Context, m *Mutation) (*Result, error) {
	if err := m.validate(t.c.cfg.MaxCellSize); err != nil {
		return nil, err
	}
	msg, block := m.encode(nil, t.c.nonce(m))
	var res *Result
	err := t.c.withRegionWrite(ctx, t, m.Row, func(ctx context.Context, conn *rpc.Conn, loc *location) error {
		var resp pb.MutateResponse
		req := &pb.MutateRequest{Region: &pb.RegionSpecifier{Name: loc.region}, Mutation: msg, NonceGroup: t.c.nonceGroup}
		cells, err := conn.Call(ctx, pb.Method_METHOD_MUTATE, req, block, &resp, nil)
		if err != nil {
			return err
		}
		t.c.notePressure(loc.region, resp.GetPressure())
		res, err = decodeResult(m.Row, resp.GetResult(), cells)
		return err
	})
	return res, err
}

// Put writes a Put.
func (t *Table) Put(ctx context.Context, m *Mutation) error { _, err := t.Mutate(ctx, m); return err }

// CheckAndMutate applies the mutations (one row) when cond holds; it reports whether it did.
func (t *Table) CheckAndMutate(ctx context.Context, cond *pb.Condition, ms ...*Mutation) (bool, error) {
	if len(ms) == 0 {
		return false, errors.New("client: CheckAndMutate without a mutation")
	}
	if len(cond.GetRow()) == 0 {
		cond.Row = ms[0].Row
	}
	var processed bool
	err := t.rowAction(ctx, cond, ms, &processed)
	return processed, err
}

// MutateRow applies mutations of one row atomically (HBase's RowMutations).
func (t *Table) MutateRow(ctx context.Context, ms ...*Mutation) error {
	return t.rowAction(ctx, nil, ms, nil)
}

func (t *Table) rowAction(ctx context.Context, cond *pb.Condition, ms []*Mutation, processed *bool) error {
	actions, block, err := t.c.encodeAtomic(ms, "atomic row mutations", true, false)
	if err != nil {
		return err
	}
	ok, err := t.sendAtomic(ctx, ms[0].Row, block, func(region *pb.RegionSpecifier) *pb.RegionAction {
		return &pb.RegionAction{Region: region, Atomic: true, Actions: actions, Condition: cond}
	})
	if err == nil && processed != nil {
		*processed = ok
	}
	return err
}

// encodeAtomic checks and encodes the mutations of an atomic region action (what names them in
// errors): of one row when sameRow, only puts and deletes when putsDeletes (else the server says
// what it refuses).
func (c *Client) encodeAtomic(ms []*Mutation, what string, sameRow, putsDeletes bool) ([]*pb.Action, []byte, error) {
	var block []byte
	actions := make([]*pb.Action, len(ms))
	for i, m := range ms {
		if err := m.validate(c.cfg.MaxCellSize); err != nil {
			return nil, nil, err
		}
		if sameRow && string(m.Row) != string(ms[0].Row) {
			return nil, nil, fmt.Errorf("client: %s must share one row (%q and %q)", what, ms[0].Row, m.Row)
		}
		if putsDeletes && m.Type != pb.MutationProto_TYPE_PUT && m.Type != pb.MutationProto_TYPE_DELETE {
			return nil, nil, fmt.Errorf("client: %s take puts and deletes", what)
		}
		var msg *pb.MutationProto
		msg, block = m.encode(block, c.nonce(m))
		actions[i] = &pb.Action{Index: uint32(i), Mutation: msg}
	}
	return actions, block, nil
}

// sendAtomic sends one atomic region action (made for the region holding row) and answers
// whether it was processed.
func (t *Table) sendAtomic(ctx context.Context, row, block []byte, action func(*pb.RegionSpecifier) *pb.RegionAction) (bool, error) {
	var processed bool
	err := t.c.withRegionWrite(ctx, t, row, func(ctx context.Context, conn *rpc.Conn, loc *location) error {
		var resp pb.MultiResponse
		req := &pb.MultiRequest{NonceGroup: t.c.nonceGroup, RegionActions: []*pb.RegionAction{action(&pb.RegionSpecifier{Name: loc.region})}}
		if _, err := conn.Call(ctx, pb.Method_METHOD_MULTI, req, block, &resp, nil); err != nil {
			return err
		}
		if len(resp.Results) != 1 {
			return fmt.Errorf("client: server answered %d region results for 1 region action", len(resp.Results))
		}
		r := resp.Results[0]
		t.c.notePressure(loc.region, r.GetPressure())
		if r.Exception != nil {
			return r.Exception
		}
		for _, a := range r.Results {
			if a.Exception != nil {
				return a.Exception
			}
		}
		processed = r.Processed
		return nil
	})
	return processed, err
}

// slowTry is how long a try that succeeded must have taken for noteTry to log it.
const slowTry = 100 * time.Millisecond

// noteTry logs a try of a request at one server (Debug, with the request's context: a caller
// that traces requests sees where each slow one spent its time) when it failed or took slowTry
// or longer.
func (c *Client) noteTry(ctx context.Context, loc *location, start time.Time, err error) {
	if c.cfg.Logger == nil {
		return
	}
	if took := time.Since(start); err != nil || took >= slowTry {
		c.cfg.Logger.DebugContext(ctx, "try", "server", loc.addr, "region", loc.region, "took", took.Round(time.Millisecond), "error", err)
	}
}

// withRegion runs fn against the primary of the region holding row, relocating and retrying on
// the answers that say a retry can succeed, until the operation's deadline.
func (c *Client) withRegion(ctx context.Context, t *Table, row []byte, fn func(context.Context, *rpc.Conn, *location) error) error {
	return c.withRegionTries(ctx, t, row, false, fn)
}

// withRegionWrite is withRegion for a write: each try first waits out the region's write
// backoff (backoff.go), on the operation's time, not the try's.
func (c *Client) withRegionWrite(ctx context.Context, t *Table, row []byte, fn func(context.Context, *rpc.Conn, *location) error) error {
	return c.withRegionTries(ctx, t, row, true, fn)
}

func (c *Client) withRegionTries(ctx context.Context, t *Table, row []byte, write bool, fn func(context.Context, *rpc.Conn, *location) error) error {
	ctx, cancel := c.opContext(ctx)
	defer cancel()
	var lastErr error
	var refused *location // the location that last said it does not serve the region
	// pauses counts the backoffs taken (their growth); hops the relocations made at once since
	// the last one — a move's REGION_MOVED, a NOT_SERVING_REGION whose relocation waits at the
	// master for the region's next place — bounded, should the answers go round in a circle.
	pauses, hops := 0, 0
	for {
		loc, err := c.locateAfter(ctx, t, row, false, true, refused)
		refused = nil
		if err == nil {
			var conn *rpc.Conn
			if conn, err = c.conn(ctx, loc.addr); err == nil {
				if write {
					if err := c.writeBackoff(ctx, loc.region); err != nil {
						return fmt.Errorf("client: %w while the region's write backoff held the write (last error: %v)", err, lastErr)
					}
				}
				actx, acancel := context.WithTimeout(ctx, c.cfg.RPCTimeout)
				start := time.Now()
				err = fn(actx, conn, loc)
				acancel()
				c.noteTry(ctx, loc, start, err)
				if err == nil {
					return nil
				}
			} else if ctx.Err() == nil { // (a dial given up by the caller says nothing of the server)
				c.cache.invalidateServer(loc.addr)
			}
			lastErr = err
			d, typed := pb.DetailOf(err)
			switch {
			case typed && !retryable(d):
				return d
			case typed:
				switch d.GetCode() {
				case pb.ErrorCode_ERROR_CODE_REGION_MOVED:
					if a := serverAddr(d.GetNewLocation()); a != "" {
						c.cache.moved(t.name, loc.region, a)
						if hops < maxHops {
							hops++
							continue // retry at once where the region went
						}
					} else {
						c.cache.invalidate(t.name, loc.region)
					}
				case pb.ErrorCode_ERROR_CODE_NOT_SERVING_REGION, pb.ErrorCode_ERROR_CODE_WRONG_REGION:
					c.cache.invalidate(t.name, loc.region)
					refused = loc
					if hops < maxHops {
						hops++
						continue // relocate at once: the lookup waits for a moving region
					}
				}
			case errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil:
				// One attempt timed out; the operation has time left.
			case ctx.Err() != nil:
				// The operation's deadline passed (or its caller went away): says nothing of the
				// server, whose cached regions stay.
				return fmt.Errorf("client: %w (last error: %v)", ctx.Err(), lastErr)
			case !transient(err):
				return err
			default:
				c.cache.invalidateServer(loc.addr)
			}
		} else {
			lastErr = err
			if permanent(err) {
				return err
			}
		}
		if err := c.backoff(ctx, pauses, lastErr); err != nil {
			return fmt.Errorf("client: gave up on table %s row %q: %w (last error: %v)", t.name, row, err, lastErr)
		}
		pauses, hops = pauses+1, 0
	}
}

// locateWait is how long a lookup of a moving region waits at the master; maxHops how many
// relocations a single-row operation makes without a pause.
const (
	locateWait = 2 * time.Second
	maxHops    = 3
)

// locate finds the region holding row (or, with before, the rows just before it), from the cache
// or the master. With wait, a lookup of a region that is moving waits at the master until it is
// open again (up to locateWait): the request then goes on the moment the region does.
func (c *Client) locate(ctx context.Context, t *Table, row []byte, before, wait bool) (*location, error) {
	return c.locateAfter(ctx, t, row, before, wait, nil)
}

// locateAfter is locate after the location refused answered that it does not serve the region: a
// master that still places the region there makes the lookup wait for its next place.
func (c *Client) locateAfter(ctx context.Context, t *Table, row []byte, before, wait bool, refused *location) (*location, error) {
	cached := func() *location {
		if before {
			return c.cache.lookupBefore(t.name, row)
		}
		return c.cache.lookup(t.name, row)
	}
	l := cached()
	if l == nil {
		var resp *pb.LocateRegionResponse
		err := c.Master(ctx, func(ctx context.Context, m pb.MasterClient) error {
			var err error
			req := &pb.LocateRegionRequest{Table: t.pb, Row: row, AllReplicas: true, Before: before}
			if wait {
				req.WaitMs = uint32(min(locateWait, c.cfg.RPCTimeout/2).Milliseconds())
				if refused != nil {
					req.Refused = &pb.RefusedLocation{Region: refused.region, Server: refused.addr, Seq: refused.seq}
				}
			}
			resp, err = m.LocateRegion(ctx, req)
			return err
		})
		if err != nil {
			return nil, err
		}
		added := c.cache.add(t.name, resp.GetLocations())
		if l = cached(); l == nil {
			// A concurrent request may have invalidated the region between the add and the lookup
			// (it answered NOT_SERVING: the region is moving): take it from the answer itself.
			l = pickLocation(t.name, added, row, before)
		}
		if l == nil {
			return nil, fmt.Errorf("client: the master returned no region of table %s for row %q", t.name, row)
		}
	}
	if l.addr == "" { // known region, not assigned right now: ask again next time
		c.cache.invalidate(t.name, l.region)
		return nil, &pb.ErrorDetail{Code: pb.ErrorCode_ERROR_CODE_NOT_SERVING_REGION, Region: l.region,
			Message: "region is not assigned to a server yet", Retryable: true}
	}
	return l, nil
}

// decodeResult turns a Result message and its cell block into a Result.
func decodeResult(row []byte, r *pb.Result, block []byte) (*Result, error) {
	res := &Result{Row: row, Exists: r.GetExists(), Stale: r.GetStale(), Partial: r.GetPartial()}
	cells, rest, err := decodeCells(block, int(r.GetCellCount()))
	if err != nil {
		return nil, err
	}
	if len(rest) != 0 {
		return nil, fmt.Errorf("client: %d stray bytes after the result's cells", len(rest))
	}
	res.Cells = cells
	if len(cells) > 0 {
		res.Row = cells[0].Row
	}
	return res, nil
}

// decodeCells reads n cells from a cell block and returns the rest of the block. The cells point
// into block.
func decodeCells(block []byte, n int) ([]cell.Cell, []byte, error) {
	if n < 0 {
		return nil, nil, fmt.Errorf("client: negative cell count %d", n)
	}
	cells := make([]cell.Cell, 0, n)
	for range n {
		kv, used, err := cell.ParseKeyValue(block)
		if err != nil {
			return nil, nil, fmt.Errorf("client: bad cell block from server: %w", err)
		}
		cells = append(cells, kv.Decode())
		block = block[used:]
	}
	return cells, block, nil
}
