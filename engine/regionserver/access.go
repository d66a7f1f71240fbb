package regionserver

import (
	"context"
	"time"

	"github.com/cellstore/cellstore/engine/access"
	pb "github.com/cellstore/cellstore/engine/api/cellstore/v1"
	"github.com/cellstore/cellstore/engine/cell"
	"github.com/cellstore/cellstore/engine/region"
	"github.com/cellstore/cellstore/engine/rpc"
	"github.com/cellstore/cellstore/engine/security"
	"google.golang.org/grpc"
)

// Authorization on the data path (Config.Authorization): reads need READ on what they read
// (narrowed to the families and qualifiers the user may read), writes WRITE on every cell they
// write, check-and-mutate also READ on the column it checks. docs/security.md has the table.

func identityOf(c *rpc.Call) security.Identity {
	return security.Identity{User: c.User, Groups: c.Groups}
}

// recheck is called before a request is denied: the permissions may have been granted since
// the last heartbeat, so they are fetched again now (at most once a second, one fetch at a
// time) and the request checked once more. A grant works at once; a revoke takes a heartbeat.
func (s *Server) recheck() bool {
	s.aclMu.Lock()
	recent := time.Since(s.aclFetched) < time.Second
	s.aclMu.Unlock()
	if recent {
		return false
	}
	before := s.acl.Load().Version()
	s.refreshACL()
	return s.acl.Load().Version() != before
}

// aclLoadWait is how long a read waits for the server's first load of the permissions and labels;
// aclLoadRetry how long after a failed load the next may start.
const (
	aclLoadWait  = 2 * time.Second
	aclLoadRetry = time.Second
)

// ensureACL loads the permissions and labels unless they were loaded once: one load at a time,
// shared by every caller, who waits at most aclLoadWait for it (a slow or failing master does not
// hold reads up for its timeout); after a failed load the next starts no sooner than
// aclLoadRetry.
func (s *Server) ensureACL() {
	if s.aclLoaded.Load() {
		return
	}
	s.aclLoadMu.Lock()
	ch := s.aclLoading
	if ch == nil && time.Since(s.aclLoadTried) >= aclLoadRetry {
		ch = make(chan struct{})
		s.aclLoading = ch
		go func() {
			s.fetchACL(false)
			s.aclLoadMu.Lock()
			s.aclLoading, s.aclLoadTried = nil, time.Now()
			s.aclLoadMu.Unlock()
			close(ch)
		}()
	}
	s.aclLoadMu.Unlock()
	if ch == nil {
		return
	}
	t := time.NewTimer(aclLoadWait)
	defer t.Stop()
	select {
	case <-ch:
	case <-t.C:
	}
}

// denied runs check, and when it denies, checks again with fresh permissions (recheck).
func (s *Server) denied(check func(ck *access.Checker) *pb.ErrorDetail) *pb.ErrorDetail {
	d := check(s.acl.Load())
	if d != nil && s.recheck() {
		d = check(s.acl.Load())
	}
	return d
}

func tableOf(or *onlineRegion) (ns, name string) {
	tn := or.table.GetName()
	return tn.GetNamespace(), tn.GetName()
}

// mayWrite answers nil when the call's user may write every cell.
func (s *Server) mayWrite(c *rpc.Call, or *onlineRegion, cells []cell.Cell) *pb.ErrorDetail {
	if !s.cfg.Authorization {
		return nil
	}
	id := identityOf(c)
	ns, name := tableOf(or)
	return s.denied(func(ck *access.Checker) *pb.ErrorDetail {
		if ck.Table(id, ns, name)&access.Write != 0 {
			return nil
		}
		if len(cells) == 0 {
			return access.Denied(id, access.Write, access.TableScope(ns, name, nil, nil))
		}
		for i := range cells {
			if ck.Column(id, ns, name, cells[i].Family, cells[i].Qualifier)&access.Write == 0 {
				return access.Denied(id, access.Write, access.TableScope(ns, name, cells[i].Family, cells[i].Qualifier))
			}
		}
		return nil
	})
}

// mayExec checks that the caller may run a table's functions' endpoints: EXEC on the table (HBase
// asks it of coprocessor endpoints when hbase.security.exec.permission.checks is on; here always).
func (s *Server) mayExec(c *rpc.Call, or *onlineRegion) *pb.ErrorDetail {
	if !s.cfg.Authorization {
		return nil
	}
	id := identityOf(c)
	ns, name := tableOf(or)
	return s.denied(func(ck *access.Checker) *pb.ErrorDetail {
		if ck.Table(id, ns, name)&access.Exec != 0 {
			return nil
		}
		return access.Denied(id, access.Exec, access.TableScope(ns, name, nil, nil))
	})
}

// mayCheck answers nil when the call's user holds READ and WRITE on what a check-and-mutate's
// condition reads: its column, or the whole table for a filter. HBase's AccessController asks both
// of a check-and-put or check-and-delete (preCheckAndPut: "READ and WRITE permissions on the
// table, CF, and KV to update"); the mutation's own cells need WRITE besides (mayWrite).
func (s *Server) mayCheck(c *rpc.Call, or *onlineRegion, cond *pb.Condition) *pb.ErrorDetail {
	if !s.cfg.Authorization || cond == nil {
		return nil
	}
	id := identityOf(c)
	ns, name := tableOf(or)
	return s.denied(func(ck *access.Checker) *pb.ErrorDetail {
		var held access.Action
		var scope string
		if cond.GetFilter() != nil {
			held, scope = ck.Table(id, ns, name), access.TableScope(ns, name, nil, nil)
		} else {
			held, scope = ck.Column(id, ns, name, cond.GetFamily(), cond.GetQualifier()), access.TableScope(ns, name, cond.GetFamily(), cond.GetQualifier())
		}
		for _, need := range [...]access.Action{access.Read, access.Write} {
			if held&need == 0 {
				return access.Denied(id, need, scope)
			}
		}
		return nil
	})
}

// readable narrows the columns of a get or scan to what the call's user may read; an error when
// it may read none of them.
//
// Cell ACLs (docs/security.md): a user without READ on the whole table may still see the cells
// whose ACL grants it READ. With the cell-first strategy (the read's acl.strategy attribute) or
// with early-out off (Config.NoCellACLEarlyOut), such a read is not refused: it returns the
// cells the user may read by grant or by their cell ACL (a union, as HBase's), through a check of
// every cell. Otherwise (HBase's default) it is narrowed to the granted columns or refused, and
// cell ACLs are not looked at.
func (s *Server) readable(c *rpc.Call, or *onlineRegion, cols []region.Column, attrs map[string][]byte) ([]region.Column, region.CellCheck, *pb.ErrorDetail) {
	cols, check, d := s.readableByGrants(c, or, cols, attrs)
	if d != nil {
		return nil, nil, d
	}
	return cols, s.withVisibility(c, check, attrs), nil
}

// withVisibility adds to a read's check the visibility labels (docs/security.md, "Visibility
// labels"): once a label is defined, a caller that is not a superuser sees a cell with a
// visibility expression only when the labels it holds — narrowed to those it asks for in the
// read's access.AuthorizationsAttribute — satisfy it. Labels apply with security off too, to the
// user the caller names.
//
// Until the server has loaded the labels once (they come with the permissions, fetched when it
// registers; a region may open and serve before that answer), a read waits a little for that
// load (ensureACL), and while they cannot be had it fails closed: a cell with a visibility
// expression is shown to no one but superusers.
func (s *Server) withVisibility(c *rpc.Call, check region.CellCheck, attrs map[string][]byte) region.CellCheck {
	s.ensureACL()
	ck := s.acl.Load()
	labels := ck.Labels()
	if !labels.Defined() && s.aclLoaded.Load() {
		return check
	}
	id := identityOf(c)
	if ck.Superuser(id) {
		return check // as HBase: labels do not apply to superusers
	}
	v, asked := attrs[access.AuthorizationsAttribute]
	auths := labels.Authorizations(id, access.ParseAuthorizations(v, asked))
	if check == nil {
		return func(_ cell.Key, tags []byte) bool { return auths.Visible(tags) }
	}
	return func(k cell.Key, tags []byte) bool { return auths.Visible(tags) && check(k, tags) }
}

// labelsFor returns the labels to store m's visibility expression with: when the expression
// names a label this server does not know, they are fetched again first (recheck), so a put
// right after add_labels works.
func (s *Server) labelsFor(m *pb.MutationProto) *access.Labels {
	l := s.acl.Load().Labels()
	v, ok := m.GetAttributes()[access.VisibilityAttribute]
	if !ok || len(v) == 0 {
		return l
	}
	e, err := access.ParseVisibility(string(v))
	if err != nil {
		return l // mutationVisibility reports it
	}
	for _, n := range e.Labels() {
		if _, ok := l.Ordinal(n); !ok {
			// Fetched within the last second (recheck's limit): wait for the limit to pass,
			// since the label may have been added since.
			s.aclMu.Lock()
			wait := time.Second - time.Since(s.aclFetched)
			s.aclMu.Unlock()
			if wait > 0 {
				time.Sleep(wait)
			}
			s.recheck()
			return s.acl.Load().Labels()
		}
	}
	return l
}

// readableByGrants is readable's part that weighs permissions and cell ACLs.
func (s *Server) readableByGrants(c *rpc.Call, or *onlineRegion, cols []region.Column, attrs map[string][]byte) ([]region.Column, region.CellCheck, *pb.ErrorDetail) {
	if !s.cfg.Authorization {
		return cols, nil, nil
	}
	id := identityOf(c)
	ns, name := tableOf(or)
	if s.acl.Load().Table(id, ns, name)&access.Read != 0 {
		return cols, nil, nil
	}
	if st := attrs[access.ACLStrategyAttribute]; (len(st) == 1 && st[0] == access.ACLStrategyCellFirst) || s.cfg.NoCellACLEarlyOut {
		ck := s.acl.Load()
		return cols, func(k cell.Key, tags []byte) bool {
			return access.CellGrants(tags, id, access.Read) || ck.Column(id, ns, name, k.Family(), k.Qualifier())&access.Read != 0
		}, nil
	}
	fams := make([][]byte, 0, len(or.table.GetFamilies()))
	for _, f := range or.table.GetFamilies() {
		fams = append(fams, f.GetName())
	}
	in := make([]access.Column, len(cols))
	for i, col := range cols {
		in[i] = access.Column{Family: col.Family, Qualifier: col.Qualifier}
	}
	out, ok := s.acl.Load().ReadableColumns(id, ns, name, fams, in)
	if !ok && s.recheck() {
		out, ok = s.acl.Load().ReadableColumns(id, ns, name, fams, in)
	}
	if !ok {
		return nil, nil, access.Denied(id, access.Read, access.TableScope(ns, name, nil, nil))
	}
	narrowed := make([]region.Column, len(out))
	for i, col := range out {
		narrowed[i] = region.Column{Family: col.Family, Qualifier: col.Qualifier}
	}
	return narrowed, nil, nil
}

// mayAdmin answers nil when the caller of an Admin-service call is a superuser (the master and
// other servers), or, for flush and compact, holds ADMIN or CREATE on the region's table.
func (s *Server) mayAdmin(id security.Identity, or *onlineRegion) *pb.ErrorDetail {
	if !s.cfg.Authorization {
		return nil
	}
	ck := s.acl.Load()
	if ck.Superuser(id) {
		return nil
	}
	if or != nil {
		ns, name := tableOf(or)
		if ck.Table(id, ns, name)&(access.Admin|access.Create) != 0 {
			return nil
		}
		return access.Denied(id, access.Admin|access.Create, access.TableScope(ns, name, nil, nil))
	}
	return access.Denied(id, access.Admin, "calls made by the master and other region servers only (a superuser)")
}

// adminRegion is the region named in a flush or compact call whatever its state (an opening one
// too: the handler waits for it to open), nil when this server has none of that name.
func (s *Server) adminRegion(name string) *onlineRegion {
	if v, ok := s.regions.Load(name); ok {
		return v.(*onlineRegion)
	}
	return nil
}

// authorizeAdmin is the Admin service's gRPC interceptor (Config.Authorization): Ping is open;
// FlushRegion and CompactRegion need ADMIN or CREATE on the region's table; everything else
// (open, close, replication, stop) is for the master and other servers, superusers.
func (s *Server) authorizeAdmin(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	if !s.cfg.Authorization {
		return handler(ctx, req)
	}
	id, _ := security.FromContext(ctx)
	var or *onlineRegion
	name, regionCall := "", false
	switch r := req.(type) {
	case *pb.PingRequest:
		return handler(ctx, req)
	case *pb.RegionRequest:
		name, regionCall = r.GetRegion(), true
	case *pb.CompactRegionRequest:
		name, regionCall = r.GetRegion(), true
	}
	if regionCall {
		or = s.adminRegion(name)
	}
	if regionCall && or == nil && !s.acl.Load().Superuser(id) {
		// Not here: the answer the handler would give (not serving, moved), without running it —
		// the region could arrive meanwhile, and the handler waits for an opening one.
		_, _, d := s.lookupUntil(name, time.Now(), false)
		if d == nil {
			d = s.notServing(name)
		}
		return nil, d.Status()
	}
	if d := s.mayAdmin(id, or); d != nil {
		s.log.Info("access denied", "user", id.User, "method", info.FullMethod, "why", d.GetMessage())
		return nil, d.Status()
	}
	return handler(ctx, req)
}
