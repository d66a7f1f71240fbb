// Package access decides what an authenticated user may do: HBase's AccessController model of
// permissions (READ, WRITE, EXEC, CREATE, ADMIN) granted to users and groups at global, namespace,
// table, column-family and qualifier scope, plus superusers. The master keeps the grants in its
// catalog and changes them; region servers hold a copy (fetched when the version the master
// announces in heartbeats changes). Both check requests with a Checker. docs/security.md has the
// table of what each operation needs.
package access

import (
	"bytes"
	"fmt"
	"slices"
	"strings"

	pb "github.com/cellstore/cellstore/engine/api/cellstore/v1"
	"github.com/cellstore/cellstore/engine/security"
)

// Action is a set of permissions.
type Action uint32

// The actions, with their HBase letters.
const (
	Read   = Action(pb.PermissionAction_PERMISSION_ACTION_READ)   // R
	Write  = Action(pb.PermissionAction_PERMISSION_ACTION_WRITE)  // W
	Exec   = Action(pb.PermissionAction_PERMISSION_ACTION_EXEC)   // X
	Create = Action(pb.PermissionAction_PERMISSION_ACTION_CREATE) // C
	Admin  = Action(pb.PermissionAction_PERMISSION_ACTION_ADMIN)  // A
	All    = Read | Write | Exec | Create | Admin
)

const letters = "RWXCA"

// ParseActions reads HBase's letters ("RW", "RWXCA").
func ParseActions(s string) (Action, error) {
	var a Action
	for _, r := range strings.ToUpper(s) {
		i := strings.IndexRune(letters, r)
		if i < 0 {
			return 0, fmt.Errorf("permission %q: %q is not one of R (read), W (write), X (exec), C (create), A (admin)", s, r)
		}
		a |= 1 << i
	}
	if a == 0 {
		return 0, fmt.Errorf("no permission given: use letters of RWXCA")
	}
	return a, nil
}

func (a Action) String() string {
	var b strings.Builder
	for i := range letters {
		if a&(1<<i) != 0 {
			b.WriteByte(letters[i])
		}
	}
	return b.String()
}

// Name is the action's HBase name, for errors ("WRITE"); a set gives its names joined by "|".
func (a Action) Name() string {
	names := []string{"READ", "WRITE", "EXEC", "CREATE", "ADMIN"}
	var out []string
	for i, n := range names {
		if a&(1<<i) != 0 {
			out = append(out, n)
		}
	}
	return strings.Join(out, "|")
}

// Column is a family, or one qualifier of it (Qualifier non-nil).
type Column struct {
	Family, Qualifier []byte
}

// tableKey is "namespace:table".
func tableKey(ns, table string) string { return ns + ":" + table }

// tablePerms are the grants of one table: table-wide, per family, per family and qualifier.
type tablePerms struct {
	whole  map[string]Action
	family map[string]map[string]Action            // family → subject → actions
	qual   map[string]map[string]map[string]Action // family → qualifier → subject → actions
}

// Checker answers what an identity may do under one version of the grants. It is immutable:
// a new version makes a new Checker.
type Checker struct {
	version uint64
	super   map[string]bool // user names and "@group"
	global  map[string]Action
	ns      map[string]map[string]Action
	tables  map[string]*tablePerms
	labels  *Labels
}

// WithLabels sets the visibility labels of the Checker's version (while it is being made).
func (c *Checker) WithLabels(l *Labels) *Checker {
	c.labels = l
	return c
}

// Labels are the visibility labels and authorizations of the Checker's version (nil without).
func (c *Checker) Labels() *Labels { return c.labels }

// NewChecker indexes perms; superusers are user names and "@group" names that may do anything.
func NewChecker(version uint64, perms []*pb.Permission, superusers []string) *Checker {
	c := &Checker{version: version, super: map[string]bool{}, global: map[string]Action{}, ns: map[string]map[string]Action{},
		tables: map[string]*tablePerms{}}
	for _, s := range superusers {
		c.super[s] = true
	}
	for _, p := range perms {
		a := Action(p.GetActions()) & All
		subj := p.GetUser()
		switch {
		case p.GetTable().GetName() != "":
			k := tableKey(p.GetTable().GetNamespace(), p.GetTable().GetName())
			tp := c.tables[k]
			if tp == nil {
				tp = &tablePerms{whole: map[string]Action{}, family: map[string]map[string]Action{}, qual: map[string]map[string]map[string]Action{}}
				c.tables[k] = tp
			}
			fam := string(p.GetFamily())
			switch {
			case fam == "":
				tp.whole[subj] |= a
			case len(p.GetQualifier()) == 0:
				if tp.family[fam] == nil {
					tp.family[fam] = map[string]Action{}
				}
				tp.family[fam][subj] |= a
			default:
				if tp.qual[fam] == nil {
					tp.qual[fam] = map[string]map[string]Action{}
				}
				q := string(p.GetQualifier())
				if tp.qual[fam][q] == nil {
					tp.qual[fam][q] = map[string]Action{}
				}
				tp.qual[fam][q][subj] |= a
			}
		case p.GetNamespace() != "":
			if c.ns[p.GetNamespace()] == nil {
				c.ns[p.GetNamespace()] = map[string]Action{}
			}
			c.ns[p.GetNamespace()][subj] |= a
		default:
			c.global[subj] |= a
		}
	}
	return c
}

// Version is the version of the grants the Checker holds.
func (c *Checker) Version() uint64 { return c.version }

// subjects are the names grants to id are made to: the user and "@group" per group.
func subjects(id security.Identity) []string {
	out := make([]string, 0, 1+len(id.Groups))
	out = append(out, id.User)
	for _, g := range id.Groups {
		out = append(out, "@"+g)
	}
	return out
}

func union(m map[string]Action, subj []string) Action {
	var a Action
	for _, s := range subj {
		a |= m[s]
	}
	return a
}

// Superuser says whether id may do anything.
func (c *Checker) Superuser(id security.Identity) bool {
	for _, s := range subjects(id) {
		if c.super[s] {
			return true
		}
	}
	return false
}

// Global is what id may do everywhere.
func (c *Checker) Global(id security.Identity) Action {
	if c.Superuser(id) {
		return All
	}
	return union(c.global, subjects(id))
}

// Namespace is what id may do in namespace ns (global grants included).
func (c *Checker) Namespace(id security.Identity, ns string) Action {
	if c.Superuser(id) {
		return All
	}
	subj := subjects(id)
	return union(c.global, subj) | union(c.ns[ns], subj)
}

// Table is what id may do on the whole of table ns:table (global and namespace grants included;
// not the grants on some of its families).
func (c *Checker) Table(id security.Identity, ns, table string) Action {
	a := c.Namespace(id, ns)
	if tp := c.tables[tableKey(ns, table)]; tp != nil {
		a |= union(tp.whole, subjects(id))
	}
	return a
}

// Column is what id may do on family (and qualifier, when non-nil) of ns:table.
func (c *Checker) Column(id security.Identity, ns, table string, family, qualifier []byte) Action {
	a := c.Table(id, ns, table)
	tp := c.tables[tableKey(ns, table)]
	if tp == nil || a == All {
		return a
	}
	subj := subjects(id)
	a |= union(tp.family[string(family)], subj)
	if qualifier != nil {
		a |= union(tp.qual[string(family)][string(qualifier)], subj)
	}
	return a
}

// AnyOnTable is every action id holds anywhere in ns:table, down to single qualifiers: what
// "has some access" means (a table it holds nothing on is not listed to it).
func (c *Checker) AnyOnTable(id security.Identity, ns, table string) Action {
	a := c.Table(id, ns, table)
	tp := c.tables[tableKey(ns, table)]
	if tp == nil {
		return a
	}
	subj := subjects(id)
	for _, m := range tp.family {
		a |= union(m, subj)
	}
	for _, qs := range tp.qual {
		for _, m := range qs {
			a |= union(m, subj)
		}
	}
	return a
}

// ReadableColumns narrows the columns a read asks for (none: every family of the table,
// families) to those id may read: a family or qualifier readable table-wide stays as asked; a
// family readable only in some qualifiers becomes those qualifiers. ok is false when nothing is
// left (the read is denied). When everything asked is readable, cols comes back unchanged.
func (c *Checker) ReadableColumns(id security.Identity, ns, table string, families [][]byte, cols []Column) (out []Column, ok bool) {
	if c.Table(id, ns, table)&Read != 0 {
		return cols, true
	}
	tp := c.tables[tableKey(ns, table)]
	if tp == nil {
		return nil, false
	}
	subj := subjects(id)
	if len(cols) == 0 {
		for _, f := range families {
			cols = append(cols, Column{Family: f})
		}
	}
	changed := false
	for _, col := range cols {
		fam := string(col.Family)
		if union(tp.family[fam], subj)&Read != 0 {
			out = append(out, col)
			continue
		}
		changed = true
		if col.Qualifier != nil {
			if union(tp.qual[fam][string(col.Qualifier)], subj)&Read != 0 {
				out = append(out, col)
			}
			continue
		}
		// The whole family was asked: the qualifiers id may read, in a stable order.
		var qs []string
		for q, m := range tp.qual[fam] {
			if union(m, subj)&Read != 0 {
				qs = append(qs, q)
			}
		}
		slices.Sort(qs)
		for _, q := range qs {
			out = append(out, Column{Family: col.Family, Qualifier: []byte(q)})
		}
	}
	if len(out) == 0 {
		return nil, false
	}
	if !changed {
		return cols, true
	}
	return out, true
}

// Denied is the error of an operation id may not do: who, what and where, as HBase's
// AccessDeniedException says it.
func Denied(id security.Identity, need Action, scope string) *pb.ErrorDetail {
	return &pb.ErrorDetail{Code: pb.ErrorCode_ERROR_CODE_ACCESS_DENIED,
		Message: fmt.Sprintf("access denied: insufficient permissions for user '%s' (%s, action=%s); an admin can grant them: grant '%s', '%s', ...",
			id.String(), scope, need.Name(), id.User, need.String())}
}

// TableScope names a table (and family, qualifier) for Denied.
func TableScope(ns, table string, family, qualifier []byte) string {
	s := "table=" + ns + ":" + table
	if len(family) > 0 {
		s += ", family=" + string(family)
	}
	if qualifier != nil {
		s += ", qualifier=" + string(qualifier)
	}
	return s
}

// Covers says whether a grant's scope lies inside (or is) the scope of a filter: the global
// filter covers everything; a namespace filter its namespace and its tables; a table filter the
// table and its families.
func Covers(filterNS string, filterTable *pb.TableName, p *pb.Permission) bool {
	switch {
	case filterTable.GetName() != "":
		return p.GetTable().GetNamespace() == filterTable.GetNamespace() && p.GetTable().GetName() == filterTable.GetName()
	case filterNS != "":
		return p.GetNamespace() == filterNS || p.GetTable().GetNamespace() == filterNS && p.GetTable().GetName() != ""
	}
	return true
}

// SameScope says whether two permissions are at the same scope for the same subject.
func SameScope(a, b *pb.Permission) bool {
	return a.GetUser() == b.GetUser() && a.GetNamespace() == b.GetNamespace() &&
		a.GetTable().GetNamespace() == b.GetTable().GetNamespace() && a.GetTable().GetName() == b.GetTable().GetName() &&
		bytes.Equal(a.GetFamily(), b.GetFamily()) &&
		bytes.Equal(a.GetQualifier(), b.GetQualifier())
}
