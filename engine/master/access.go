package master

import (
	"context"
	"strings"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"

	"github.com/cellstore/cellstore/engine/access"
	pb "github.com/cellstore/cellstore/engine/api/cellstore/v1"
	"github.com/cellstore/cellstore/engine/cell"
	"github.com/cellstore/cellstore/engine/layout"
	"github.com/cellstore/cellstore/engine/security"
)

// aclChecker returns the Checker of the current permissions (nil when this master is not active).
func (m *Master) aclChecker() *access.Checker {
	acl := m.acl.Load()
	if acl == nil || m.status.Load() != stateActive {
		return nil
	}
	if c := m.checker.Load(); c != nil && c.Version() == acl.GetVersion() {
		return c
	}
	c := access.NewChecker(acl.GetVersion(), acl.GetPermissions(), m.cfg.Superusers)
	m.checker.Store(c)
	return c
}

// standbyAnswers are the calls a master that is not active answers itself, to anyone.
var standbyAnswers = map[string]bool{"GetExternalAddresses": true}

// serverOnly are the calls only servers make (their identity must be a superuser).
var serverOnly = map[string]bool{"RegisterServer": true, "Heartbeat": true, "ReportRegionTransition": true, "ReportStandby": true}

// globalAdmin are the calls that need ADMIN everywhere (HBase: balance, move, drain, quotas,
// cluster status and settings).
var globalAdmin = map[string]bool{"MoveRegion": true, "SplitRegion": true, "MergeRegions": true, "UpdateConfiguration": true, "Normalize": true, "SetNormalizerRunning": true, "DrainServer": true, "UndrainServer": true, "Balance": true,
	"SetBalancerRunning": true, "ClusterStatus": true, "SetClusterConfig": true, "SetQuota": true, "ListQuotas": true, "SetServerZone": true,
	"AddLabels": true, "ListLabels": true, "SetAuths": true, "ClearAuths": true,
	"ArchiveClusterWAL": true, "SetExternalAddresses": true}

// authorize is the master's gRPC interceptor: with Authorization on, a call runs only when the
// caller's identity (set by security's authentication) holds what the call needs
// (docs/security.md, "What each operation needs"); ListTables answers only the tables the caller
// holds something on.
func (m *Master) authorize(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	if !m.cfg.Authorization {
		return handler(ctx, req)
	}
	method := info.FullMethod[strings.LastIndexByte(info.FullMethod, '/')+1:]
	ck := m.aclChecker()
	if ck == nil {
		// Not the active master (a standby, or one loading the catalog): nothing can be checked,
		// so nothing runs — a handler may work before it finds the master inactive (a table's
		// functions are compiled and stored first), or find it active by then, unchecked. Only
		// what every master answers to anyone runs.
		if standbyAnswers[method] {
			return handler(ctx, req)
		}
		return nil, m.notActive()
	}
	id, _ := security.FromContext(ctx)
	if ck.Superuser(id) {
		return handler(ctx, req)
	}
	if d := m.need(ck, id, method, req); d != nil {
		m.log.Info("access denied", "user", id.User, "method", method, "why", d.GetMessage())
		return nil, d.Status()
	}
	resp, err := handler(ctx, req)
	if lt, ok := resp.(*pb.ListTablesResponse); ok && err == nil {
		kept := lt.Tables[:0]
		for _, t := range lt.Tables {
			n := t.GetTable().GetName()
			if ck.AnyOnTable(id, n.GetNamespace(), n.GetName()) != 0 {
				kept = append(kept, t)
			}
		}
		lt.Tables = kept
	}
	return resp, err
}

// need checks what a non-superuser's call needs; nil when it may run.
func (m *Master) need(ck *access.Checker, id security.Identity, method string, req any) *pb.ErrorDetail {
	onTable := func(tn *pb.TableName, want access.Action) *pb.ErrorDetail {
		ns := tn.GetNamespace()
		if ns == "" {
			ns = "default"
		}
		if ck.Table(id, ns, tn.GetName())&want != 0 {
			return nil
		}
		return access.Denied(id, want, access.TableScope(ns, tn.GetName(), nil, nil))
	}
	switch {
	case serverOnly[method]:
		return access.Denied(id, access.Admin, "calls made by region servers and masters only; servers' certificates must name a superuser (--superusers)")
	case globalAdmin[method]:
		if ck.Global(id)&access.Admin != 0 {
			return nil
		}
		return access.Denied(id, access.Admin, "global")
	}
	switch r := req.(type) {
	case *pb.CreateTableRequest:
		ns := r.GetTable().GetName().GetNamespace()
		if ns == "" {
			ns = "default"
		}
		if ck.Namespace(id, ns)&(access.Create|access.Admin) != 0 {
			return nil
		}
		return access.Denied(id, access.Create|access.Admin, "namespace="+ns)
	case *pb.ModifyTableRequest:
		return onTable(r.GetTable().GetName(), access.Create|access.Admin)
	case *pb.TruncateTableRequest:
		return onTable(r.GetTable(), access.Create|access.Admin)
	case *pb.SnapshotRequest: // HBase: ADMIN on the table; the other snapshot calls need global ADMIN
		return onTable(r.GetTable(), access.Admin)
	case *pb.FlushCompactRequest: // HBase: ADMIN or CREATE on the table
		if r.GetTable() != nil {
			return onTable(r.GetTable(), access.Create|access.Admin)
		}
		if tn := m.tableOfRegion(r.GetRegion()); tn != nil {
			return onTable(tn, access.Create|access.Admin)
		}
		if ck.Global(id)&access.Admin != 0 {
			return nil // an unknown region: the call says so
		}
		return access.Denied(id, access.Admin, "global")
	case *pb.CloneSnapshotRequest:
		// Global ADMIN, as HBase's preCloneSnapshot (whose exception, the snapshot's owner
		// cloning to the table it took it of, needs an owner snapshots here do not record):
		// CREATE on the target namespace would let anyone copy any table into a namespace of
		// theirs and read it there.
		if ck.Global(id)&access.Admin != 0 {
			return nil
		}
		return access.Denied(id, access.Admin, "global")
	case *pb.TableRequest:
		switch method {
		case "EnableTable", "DisableTable", "DeleteTable":
			return onTable(r.GetTable(), access.Create|access.Admin)
		case "DescribeTable":
			tn := r.GetTable()
			ns := tn.GetNamespace()
			if ns == "" {
				ns = "default"
			}
			if ck.AnyOnTable(id, ns, tn.GetName()) != 0 {
				return nil
			}
			return access.Denied(id, access.All, access.TableScope(ns, tn.GetName(), nil, nil))
		case "GetTableRegions":
			return nil // region locations are public, as hbase:meta is readable by all
		}
	case *pb.LocateRegionRequest, *pb.ListTablesRequest, *pb.GetExternalAddressesRequest:
		return nil
	case *pb.GrantRequest:
		return needAdminAt(ck, id, r.GetPermission())
	case *pb.RevokeRequest:
		return needAdminAt(ck, id, r.GetPermission())
	case *pb.GetAuthsRequest:
		if r.GetUser() == id.User && r.GetUser() != "" {
			return nil // one's own labels
		}
		if ck.Global(id)&access.Admin != 0 {
			return nil
		}
		return access.Denied(id, access.Admin, "global")
	case *pb.GetUserPermissionsRequest:
		if r.GetUser() == id.User && r.GetUser() != "" {
			return nil // one's own permissions
		}
		return needAdminAt(ck, id, &pb.Permission{Namespace: r.GetNamespace(), Table: r.GetTable()})
	}
	// Anything else (a call added later and not listed here) needs global ADMIN.
	if ck.Global(id)&access.Admin != 0 {
		return nil
	}
	return access.Denied(id, access.Admin, "global")
}

// needAdminAt: granting, revoking or listing at a scope needs ADMIN there (or above).
func needAdminAt(ck *access.Checker, id security.Identity, p *pb.Permission) *pb.ErrorDetail {
	switch {
	case p.GetTable().GetName() != "":
		ns := p.GetTable().GetNamespace()
		if ns == "" {
			ns = DefaultNamespace // where the grant lands (as the handlers read it)
		}
		if ck.Table(id, ns, p.GetTable().GetName())&access.Admin != 0 {
			return nil
		}
		return access.Denied(id, access.Admin, access.TableScope(ns, p.GetTable().GetName(), nil, nil))
	case p.GetNamespace() != "":
		if ck.Namespace(id, p.GetNamespace())&access.Admin != 0 {
			return nil
		}
		return access.Denied(id, access.Admin, "namespace="+p.GetNamespace())
	}
	if ck.Global(id)&access.Admin != 0 {
		return nil
	}
	return access.Denied(id, access.Admin, "global")
}

// checkPermission validates and normalises a permission of a request.
// maxPermissionUser and maxPermissionQualifier bound a permission's user (or @group; a
// certificate's subject fits) and qualifier: every grant lives in the catalog's one ACL row.
const (
	maxPermissionUser      = 1024
	maxPermissionQualifier = 4096
)

func checkPermission(p *pb.Permission, grant bool) (*pb.Permission, error) {
	if p == nil || p.GetUser() == "" || p.GetUser() == "@" {
		return nil, errInvalid("permission: give a user or an @group")
	}
	p = proto.CloneOf(p)
	if p.GetTable().GetName() != "" {
		tn, err := checkTableName(p.GetTable())
		if err != nil {
			return nil, errInvalid("permission: %v", err)
		}
		p.Table, p.Namespace = tn, ""
	} else {
		p.Table = nil
		if len(p.GetFamily()) > 0 || len(p.GetQualifier()) > 0 {
			return nil, errInvalid("permission: a family or qualifier needs a table")
		}
		if p.GetNamespace() != "" {
			if err := validNamespace(p.GetNamespace()); err != nil {
				return nil, errInvalid("permission: %v", err)
			}
		}
	}
	if len(p.GetQualifier()) > 0 && len(p.GetFamily()) == 0 {
		return nil, errInvalid("permission: a qualifier needs its family")
	}
	if len(p.GetUser()) > maxPermissionUser || len(p.GetFamily()) > cell.MaxFamilyLength || len(p.GetQualifier()) > maxPermissionQualifier {
		return nil, errInvalid("permission: a user of at most %d bytes, a family of at most %d and a qualifier of at most %d (got %d, %d, %d)",
			maxPermissionUser, cell.MaxFamilyLength, maxPermissionQualifier, len(p.GetUser()), len(p.GetFamily()), len(p.GetQualifier()))
	}
	p.Actions &= uint32(access.All)
	if grant && p.Actions == 0 {
		return nil, errInvalid("permission: no action given (letters of RWXCA)")
	}
	return p, nil
}

// Grant implements pb.MasterServer: the user gets exactly the actions at the scope.
func (m *Master) Grant(_ context.Context, req *pb.GrantRequest) (*pb.GrantResponse, error) {
	p, err := checkPermission(req.GetPermission(), true)
	if err != nil {
		return nil, toStatus(err)
	}
	if err := m.changeACL(p, func(old *pb.Permission) *pb.Permission { return p }); err != nil {
		return nil, err
	}
	return &pb.GrantResponse{}, nil
}

// Revoke implements pb.MasterServer: the actions (all when none) leave the user at the scope.
func (m *Master) Revoke(_ context.Context, req *pb.RevokeRequest) (*pb.RevokeResponse, error) {
	p, err := checkPermission(req.GetPermission(), false)
	if err != nil {
		return nil, toStatus(err)
	}
	drop := p.GetActions()
	if drop == 0 {
		drop = uint32(access.All)
	}
	if err := m.changeACL(p, func(old *pb.Permission) *pb.Permission {
		if old == nil || old.GetActions()&^drop == 0 {
			return nil
		}
		n := proto.CloneOf(old)
		n.Actions &^= drop
		return n
	}); err != nil {
		return nil, err
	}
	return &pb.RevokeResponse{}, nil
}

// changeACL replaces the permission at p's scope by edit(the current one, or nil); edit
// returning nil removes it. The new ACL is committed to the catalog with its version bumped; region
// servers fetch it on their next heartbeat.
func (m *Master) changeACL(p *pb.Permission, edit func(old *pb.Permission) *pb.Permission) error {
	var n *pb.Permission
	version, changed, err := m.updateACL(func(next *pb.CatalogACL) (bool, *pb.ErrorDetail) {
		var old *pb.Permission
		kept := next.Permissions[:0]
		for _, q := range next.GetPermissions() {
			if access.SameScope(q, p) {
				old = q
				continue
			}
			kept = append(kept, q)
		}
		if n = edit(old); n != nil {
			kept = append(kept, n)
		}
		next.Permissions = kept
		return old != nil || n != nil, nil // nothing to revoke: no new version
	})
	if err != nil || !changed {
		return err
	}
	m.log.Info("permissions changed", "user", p.GetUser(), "scope", scopeString(p), "actions", access.Action(n.GetActions()).String(), "version", version)
	return nil
}

func scopeString(p *pb.Permission) string {
	switch {
	case p.GetTable().GetName() != "":
		return access.TableScope(p.GetTable().GetNamespace(), p.GetTable().GetName(), p.GetFamily(), nilIfEmpty(p.GetQualifier()))
	case p.GetNamespace() != "":
		return "namespace=" + p.GetNamespace()
	}
	return "global"
}

func nilIfEmpty(b []byte) []byte {
	if len(b) == 0 {
		return nil
	}
	return b
}

// GetUserPermissions implements pb.MasterServer.
func (m *Master) GetUserPermissions(_ context.Context, req *pb.GetUserPermissionsRequest) (*pb.GetUserPermissionsResponse, error) {
	if err := m.lock(); err != nil {
		return nil, err
	}
	defer m.mu.Unlock()
	tn := req.GetTable()
	if tn.GetName() != "" && tn.GetNamespace() == "" {
		tn = &pb.TableName{Namespace: "default", Name: tn.GetName()}
	}
	resp := &pb.GetUserPermissionsResponse{Version: m.st.acl.GetVersion()}
	if req.GetUser() == "" && req.GetNamespace() == "" && tn.GetName() == "" {
		// Everything, as region servers ask: the visibility labels too.
		for _, l := range m.st.acl.GetLabels() {
			resp.Labels = append(resp.Labels, proto.CloneOf(l))
		}
		for _, a := range m.st.acl.GetAuths() {
			resp.Auths = append(resp.Auths, proto.CloneOf(a))
		}
	}
	for _, p := range m.st.acl.GetPermissions() {
		if (req.GetUser() == "" || p.GetUser() == req.GetUser()) && access.Covers(req.GetNamespace(), tn, p) {
			resp.Permissions = append(resp.Permissions, proto.CloneOf(p))
		}
	}
	return resp, nil
}

// tableOfRegion is the table of a region (nil when the region is not known).
func (m *Master) tableOfRegion(name string) *pb.TableName {
	if err := m.lock(); err != nil {
		return nil
	}
	defer m.mu.Unlock()
	if r := m.st.regions[layout.PrimaryName(name)]; r != nil {
		return proto.CloneOf(r.GetInfo().GetTable())
	}
	return nil
}
