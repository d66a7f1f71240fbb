package master

import (
	"fmt"
	"strings"

	"github.com/cellstore/cellstore/engine/access"
	"github.com/cellstore/cellstore/operator/api/v1alpha1"
)

// Permission is a grant of actions (HBase's letters, "RW") to a user or "@group" at a scope: the
// whole store (Namespace and Table empty), a namespace, a table ("namespace:table"), a family of
// it, or one qualifier.
type Permission struct {
	User                                string
	Namespace, Table, Family, Qualifier string
	Actions                             string
}

// Scope renders where the permission applies, also its identity within a user's grants.
func (p Permission) Scope() string {
	switch {
	case p.Table != "":
		s := "table=" + p.Table
		if p.Family != "" {
			s += ",family=" + p.Family
		}
		if p.Qualifier != "" {
			s += ",qualifier=" + p.Qualifier
		}
		return s
	case p.Namespace != "":
		return "namespace=" + p.Namespace
	}
	return "global"
}

// String is "scope: actions" (StoreUser status.appliedACLs).
func (p Permission) String() string { return p.Scope() + ": " + p.Actions }

// ParsePermission reads back String's form for user.
func ParsePermission(user, s string) (Permission, error) {
	scope, actions, ok := strings.Cut(s, ": ")
	if !ok {
		return Permission{}, fmt.Errorf("permission %q is not 'scope: actions'", s)
	}
	p := Permission{User: user, Actions: actions}
	if scope == "global" {
		return p, nil
	}
	for _, part := range strings.Split(scope, ",") {
		k, v, _ := strings.Cut(part, "=")
		switch k {
		case "table":
			p.Table = v
		case "family":
			p.Family = v
		case "qualifier":
			p.Qualifier = v
		case "namespace":
			p.Namespace = v
		default:
			return Permission{}, fmt.Errorf("permission %q: unknown scope %q", s, k)
		}
	}
	return p, nil
}

// PermissionsFromSpec turns a StoreUser's ACLs into permissions of user; two ACLs at one scope
// are refused (a grant replaces what the user had there).
func PermissionsFromSpec(user string, acls []v1alpha1.UserACL) ([]Permission, error) {
	seen := map[string]int{}
	out := make([]Permission, 0, len(acls))
	for i, a := range acls {
		if _, err := access.ParseActions(a.Actions); err != nil {
			return nil, fmt.Errorf("acls[%d]: %w", i, err)
		}
		p := Permission{User: user, Namespace: a.Namespace, Table: a.Table, Family: a.Family, Qualifier: a.Qualifier, Actions: a.Actions}
		if p.Table != "" && !strings.Contains(p.Table, ":") {
			p.Table = "default:" + p.Table
		}
		if j, dup := seen[p.Scope()]; dup {
			return nil, fmt.Errorf("acls[%d] and acls[%d] are both at %s: merge their actions into one", j, i, p.Scope())
		}
		seen[p.Scope()] = i
		out = append(out, p)
	}
	return out, nil
}
