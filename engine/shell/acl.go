package shell

import (
	"context"
	"fmt"
	"strings"

	"github.com/cellstore/cellstore/engine/access"
	pb "github.com/cellstore/cellstore/engine/api/cellstore/v1"
	"github.com/cellstore/cellstore/engine/client"
)

// scopeArgs reads HBase's scope arguments after the user (and, for grant, the permissions):
// nothing (global), '@namespace', or 'table'[, 'family'[, 'qualifier']].
func scopeArgs(args []Value) (*pb.Permission, error) {
	p := &pb.Permission{}
	if len(args) == 0 {
		return p, nil
	}
	for _, a := range args {
		if a.Kind != String {
			return nil, usage("scope arguments are quoted strings: '@namespace' or 'table'[, 'family'[, 'qualifier']], got %s", a)
		}
	}
	first := args[0].Str
	if ns, ok := strings.CutPrefix(first, "@"); ok {
		if len(args) > 1 {
			return nil, usage("a namespace scope ('@%s') takes no family or qualifier", ns)
		}
		p.Namespace = ns
		return p, nil
	}
	if len(args) > 3 {
		return nil, usage("too many scope arguments: 'table'[, 'family'[, 'qualifier']]")
	}
	p.Table = client.ParseTableName(first)
	if len(args) > 1 {
		p.Family = []byte(args[1].Str)
	}
	if len(args) > 2 {
		p.Qualifier = []byte(args[2].Str)
	}
	return p, nil
}

// grant 'user' | '@group', 'RWXCA'[, '@ns' | 'table'[, 'family'[, 'qualifier']]]
func (s *Shell) grant(ctx context.Context, args []Value) error {
	user, err := str(args, 0, "user or @group")
	if err != nil {
		return err
	}
	letters, err := str(args, 1, "permissions (letters of RWXCA)")
	if err != nil {
		return err
	}
	acts, err := access.ParseActions(letters)
	if err != nil {
		return usage("%v", err)
	}
	p, err := scopeArgs(args[2:])
	if err != nil {
		return err
	}
	p.User, p.Actions = user, uint32(acts)
	return s.master(ctx, func(ctx context.Context, m pb.MasterClient) error {
		_, err := m.Grant(ctx, &pb.GrantRequest{Permission: p})
		return err
	})
}

// revoke 'user' | '@group'[, '@ns' | 'table'[, 'family'[, 'qualifier']]]
func (s *Shell) revoke(ctx context.Context, args []Value) error {
	user, err := str(args, 0, "user or @group")
	if err != nil {
		return err
	}
	p, err := scopeArgs(args[1:])
	if err != nil {
		return err
	}
	p.User = user
	return s.master(ctx, func(ctx context.Context, m pb.MasterClient) error {
		_, err := m.Revoke(ctx, &pb.RevokeRequest{Permission: p})
		return err
	})
}

// user_permission['@ns' | 'table']
func (s *Shell) userPermission(ctx context.Context, args []Value) error {
	req := &pb.GetUserPermissionsRequest{}
	if len(args) > 0 {
		p, err := scopeArgs(args[:1])
		if err != nil {
			return err
		}
		req.Namespace, req.Table = p.GetNamespace(), p.GetTable()
	}
	var resp *pb.GetUserPermissionsResponse
	if err := s.master(ctx, func(ctx context.Context, m pb.MasterClient) error {
		var err error
		resp, err = m.GetUserPermissions(ctx, req)
		return err
	}); err != nil {
		return err
	}
	tb := newTable(s.Out, "User", "Namespace,Table,Family,Qualifier:Permission")
	for _, p := range resp.GetPermissions() {
		ns := p.GetNamespace()
		if p.GetTable().GetName() != "" {
			ns = p.GetTable().GetNamespace()
		}
		tb.row(p.GetUser(), fmt.Sprintf("%s,%s,%s,%s: [Permission: actions=%s]", ns, p.GetTable().GetName(), p.GetFamily(), p.GetQualifier(),
			strings.ReplaceAll(access.Action(p.GetActions()).Name(), "|", ",")))
	}
	tb.done()
	fmt.Fprintf(s.Out, "%d row(s)\n", len(resp.GetPermissions()))
	return nil
}

// cellACL reads a put's ACL => {'user' => 'RW', '@group' => 'R'} (HBase's shell syntax).
func cellACL(v Value) (map[string]access.Action, error) {
	if v.Kind != Hash || len(v.Keys) == 0 {
		return nil, usage("ACL takes a hash of users (or '@group's) and permissions: ACL => {'bob' => 'RW'}")
	}
	out := map[string]access.Action{}
	for i, k := range v.Keys {
		a, err := access.ParseActions(v.Map[k].Text())
		if err != nil {
			return nil, usage("ACL for %s: %v", v.RawKeys[i], err)
		}
		out[v.RawKeys[i]] = a // user names keep their case
	}
	return out, nil
}
