package access

import (
	"fmt"
	"testing"

	pb "github.com/cellstore/cellstore/engine/api/cellstore/v1"
	"github.com/cellstore/cellstore/engine/cell"
	"github.com/cellstore/cellstore/engine/security"
)

func perm(user, ns, table, family, qualifier, acts string) *pb.Permission {
	a, err := ParseActions(acts)
	if err != nil {
		panic(err)
	}
	p := &pb.Permission{User: user, Namespace: ns, Actions: uint32(a), Family: []byte(family)}
	if table != "" {
		p.Table, p.Namespace = &pb.TableName{Namespace: ns, Name: table}, ""
	}
	if qualifier != "" {
		p.Qualifier = []byte(qualifier)
	}
	return p
}

func TestParseActions(t *testing.T) {
	for in, want := range map[string]string{"rw": "RW", "AC": "CA", "RWXCA": "RWXCA", "r": "R"} {
		a, err := ParseActions(in)
		if err != nil || a.String() != want {
			t.Errorf("%q: %v %v, want %s", in, a, err, want)
		}
	}
	for _, bad := range []string{"", "RZ", "read"} {
		if _, err := ParseActions(bad); err == nil {
			t.Errorf("%q parsed", bad)
		}
	}
	if got := (Read | Admin).Name(); got != "READ|ADMIN" {
		t.Errorf("name %q", got)
	}
}

func TestCheckerScopes(t *testing.T) {
	ck := NewChecker(7, []*pb.Permission{
		perm("gina", "", "", "", "", "A"),
		perm("nora", "ns1", "", "", "", "RC"),
		perm("tom", "default", "t", "", "", "RW"),
		perm("fred", "default", "t", "f", "", "R"),
		perm("quinn", "default", "t", "f", "q", "RW"),
		perm("@readers", "default", "t", "", "", "R"),
	}, []string{"root", "@cellstore:servers"})
	id := func(user string, groups ...string) security.Identity {
		return security.Identity{User: user, Groups: groups, Method: security.MethodCertificate}
	}
	cases := []struct {
		who       security.Identity
		got, want Action
	}{
		{id("root"), ck.Table(id("root"), "any", "thing"), All},
		{id("rs-1", "cellstore:servers"), ck.Global(id("rs-1", "cellstore:servers")), All},
		{id("gina"), ck.Table(id("gina"), "default", "t"), Admin},
		{id("nora"), ck.Namespace(id("nora"), "ns1"), Read | Create},
		{id("nora"), ck.Table(id("nora"), "ns1", "x"), Read | Create},
		{id("nora"), ck.Table(id("nora"), "default", "t"), 0},
		{id("tom"), ck.Table(id("tom"), "default", "t"), Read | Write},
		{id("tom"), ck.Table(id("tom"), "default", "u"), 0},
		{id("fred"), ck.Table(id("fred"), "default", "t"), 0},
		{id("fred"), ck.Column(id("fred"), "default", "t", []byte("f"), []byte("any")), Read},
		{id("fred"), ck.Column(id("fred"), "default", "t", []byte("g"), nil), 0},
		{id("quinn"), ck.Column(id("quinn"), "default", "t", []byte("f"), []byte("q")), Read | Write},
		{id("quinn"), ck.Column(id("quinn"), "default", "t", []byte("f"), []byte("r")), 0},
		{id("quinn"), ck.AnyOnTable(id("quinn"), "default", "t"), Read | Write},
		{id("ann", "readers"), ck.Table(id("ann", "readers"), "default", "t"), Read},
		{id("readers"), ck.Table(id("readers"), "default", "t"), 0}, // a user named like the group is not in it
	}
	for i, c := range cases {
		if c.got != c.want {
			t.Errorf("case %d (%s): %s, want %s", i, c.who, c.got, c.want)
		}
	}
	if ck.Version() != 7 {
		t.Errorf("version %d", ck.Version())
	}
}

func TestReadableColumns(t *testing.T) {
	ck := NewChecker(1, []*pb.Permission{
		perm("tom", "default", "t", "", "", "R"),
		perm("fred", "default", "t", "f", "", "R"),
		perm("quinn", "default", "t", "f", "q2", "R"),
		perm("quinn", "default", "t", "f", "q1", "R"),
		perm("wendy", "default", "t", "f", "", "W"),
	}, nil)
	fams := [][]byte{[]byte("f"), []byte("g")}
	cols := func(cs ...Column) []Column { return cs }
	fq := func(f, q string) Column {
		c := Column{Family: []byte(f)}
		if q != "" {
			c.Qualifier = []byte(q)
		}
		return c
	}
	str := func(cs []Column) string { return fmt.Sprintf("%q", cs) }
	cases := []struct {
		user string
		in   []Column
		want []Column
		ok   bool
	}{
		{"tom", nil, nil, true},
		{"fred", nil, cols(fq("f", "")), true},
		{"fred", cols(fq("g", "")), nil, false},
		{"fred", cols(fq("f", "x"), fq("g", "y")), cols(fq("f", "x")), true},
		{"quinn", nil, cols(fq("f", "q1"), fq("f", "q2")), true},
		{"quinn", cols(fq("f", "q2"), fq("f", "q3")), cols(fq("f", "q2")), true},
		{"wendy", nil, nil, false},
		{"nobody", cols(fq("f", "")), nil, false},
	}
	for _, c := range cases {
		got, ok := ck.ReadableColumns(security.Identity{User: c.user}, "default", "t", fams, c.in)
		if ok != c.ok || str(got) != str(c.want) {
			t.Errorf("%s %s: %s %v, want %s %v", c.user, str(c.in), str(got), ok, str(c.want), c.ok)
		}
	}
}

func TestSameScopeAndCovers(t *testing.T) {
	a := perm("u", "default", "t", "f", "", "R")
	if !SameScope(a, perm("u", "default", "t", "f", "", "W")) || SameScope(a, perm("u", "default", "t", "", "", "R")) ||
		SameScope(a, perm("v", "default", "t", "f", "", "R")) || SameScope(a, perm("u", "default", "t", "f", "q", "R")) {
		t.Error("SameScope")
	}
	if !Covers("", nil, a) || !Covers("default", nil, a) || Covers("other", nil, a) ||
		!Covers("", &pb.TableName{Namespace: "default", Name: "t"}, a) || Covers("", &pb.TableName{Namespace: "default", Name: "u"}, a) {
		t.Error("Covers")
	}
	if !Covers("ns1", nil, perm("u", "ns1", "", "", "", "R")) {
		t.Error("a namespace grant is in its namespace")
	}
}

func TestCellACL(t *testing.T) {
	v, err := EncodeCellACL(map[string]Action{"dave": Read, "@ops": Read | Write, "eve": Write})
	if err != nil {
		t.Fatal(err)
	}
	back, err := DecodeCellACL(v)
	if err != nil || len(back) != 3 || back["@ops"] != Read|Write {
		t.Fatalf("decoded %v, %v", back, err)
	}
	tags := cell.AppendTTLTag(nil, 1000)
	tags = cell.AppendTag(tags, cell.TagACL, v)
	id := func(user string, groups ...string) security.Identity {
		return security.Identity{User: user, Groups: groups}
	}
	for _, c := range []struct {
		who  security.Identity
		want Action
		ok   bool
	}{
		{id("dave"), Read, true},
		{id("dave"), Write, false},
		{id("eve"), Read, false},
		{id("eve"), Write, true},
		{id("fay", "ops"), Write, true},
		{id("ops"), Read, false}, // a user named like the group is not in it
		{id("gil"), Read, false},
	} {
		if got := CellGrants(tags, c.who, c.want); got != c.ok {
			t.Errorf("%s %s: %v, want %v", c.who, c.want.Name(), got, c.ok)
		}
	}
	if CellGrants(cell.AppendTTLTag(nil, 1), id("dave"), Read) || CellGrants(nil, id("dave"), Read) {
		t.Error("a cell without an ACL granted something")
	}
	for _, bad := range []map[string]Action{{}, {"": Read}, {"a b": Read}, {"x": 0}, {"y": 64}} {
		if _, err := EncodeCellACL(bad); err == nil {
			t.Errorf("%v encoded", bad)
		}
	}
	if _, err := DecodeCellACL([]byte{5, 'a'}); err == nil {
		t.Error("a truncated ACL decoded")
	}
}
