package access

import (
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/cellstore/cellstore/engine/cell"
	"github.com/cellstore/cellstore/engine/security"
)

// Cell ACLs (HBase's cell-level permissions): a mutation may carry an ACL — users and "@group"s
// with the actions each may take on the cells it writes — kept as a cell.TagACL tag on each of
// them. Reads check it per cell (CellGrants) as docs/security.md, "Cell ACLs", describes.
//
// The tag's value is a sequence, sorted by name, of
//
//	name length (uvarint) | name | actions (1 byte, the Action bits)

// ACLAttribute is the mutation attribute holding a cell ACL (HBase's OP_ATTRIBUTE_ACL), in the
// tag value's encoding (EncodeCellACL).
const ACLAttribute = "acl"

// ACLStrategyAttribute is the get or scan attribute choosing how cell ACLs are weighed (HBase's
// OP_ATTRIBUTE_ACL_STRATEGY): one byte, ACLStrategyCellFirst or the default.
const ACLStrategyAttribute = "acl.strategy"

// The strategies (HBase's OP_ATTRIBUTE_ACL_STRATEGY_DEFAULT and _CELL_FIRST).
const (
	ACLStrategyDefault   byte = 0
	ACLStrategyCellFirst byte = 1
)

// EncodeCellACL encodes an ACL (name → actions) as a tag value.
func EncodeCellACL(acl map[string]Action) ([]byte, error) {
	if len(acl) == 0 {
		return nil, errors.New("a cell ACL needs at least one user or @group")
	}
	names := make([]string, 0, len(acl))
	for n, a := range acl {
		if n == "" || n == "@" || strings.ContainsAny(n, " \t\n,") {
			return nil, fmt.Errorf("cell ACL: %q is not a user or @group name", n)
		}
		if a == 0 || a&^All != 0 {
			return nil, fmt.Errorf("cell ACL: %q has no valid action", n)
		}
		names = append(names, n)
	}
	slices.Sort(names)
	var out []byte
	for _, n := range names {
		out = binary.AppendUvarint(out, uint64(len(n)))
		out = append(out, n...)
		out = append(out, byte(acl[n]))
	}
	if len(out) > cell.MaxTagsLength/2 {
		return nil, fmt.Errorf("cell ACL of %d bytes is too large (at most %d)", len(out), cell.MaxTagsLength/2)
	}
	return out, nil
}

// DecodeCellACL decodes a tag value written by EncodeCellACL.
func DecodeCellACL(v []byte) (map[string]Action, error) {
	out := map[string]Action{}
	err := walkCellACL(v, func(name []byte, a Action) bool { out[string(name)] = a; return true })
	return out, err
}

func walkCellACL(v []byte, fn func(name []byte, a Action) bool) error {
	for len(v) > 0 {
		n, used := binary.Uvarint(v)
		if used <= 0 || n == 0 || uint64(len(v)-used) < n+1 {
			return errors.New("malformed cell ACL")
		}
		name := v[used : used+int(n)]
		a := Action(v[used+int(n)])
		v = v[used+int(n)+1:]
		if !fn(name, a) {
			return nil
		}
	}
	return nil
}

// CellGrants says whether a cell's tags hold an ACL that grants want to id (its user or one of
// its groups). A cell without an ACL grants nothing.
func CellGrants(tags []byte, id security.Identity, want Action) bool {
	if len(tags) == 0 {
		return false
	}
	v, ok := cell.FindTag(tags, cell.TagACL)
	if !ok {
		return false
	}
	granted := false
	_ = walkCellACL(v, func(name []byte, a Action) bool {
		if a&want == 0 {
			return true
		}
		if string(name) == id.User {
			granted = true
			return false
		}
		if len(name) > 1 && name[0] == '@' && id.InGroup(string(name[1:])) {
			granted = true
			return false
		}
		return true
	})
	return granted
}
