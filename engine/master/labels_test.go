package master_test

import (
	"slices"
	"strings"
	"testing"

	pb "github.com/cellstore/cellstore/engine/api/cellstore/v1"
)

// TestVisibilityLabels: labels are defined once, authorizations need defined labels, a change
// bumps the ACL version region servers watch, and everything survives a new master.
func TestVisibilityLabels(t *testing.T) {
	c := newCluster(t, 0, nil, nil)
	fail := func(what string, err error, want string) {
		t.Helper()
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Fatalf("%s: %v, want an error with %q", what, err, want)
		}
	}
	must := func(what string, err error) {
		t.Helper()
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}
	before, err := c.mc.GetUserPermissions(c.ctx(), &pb.GetUserPermissionsRequest{})
	must("permissions", err)
	_, err = c.mc.AddLabels(c.ctx(), &pb.AddLabelsRequest{Labels: []string{"secret", "pii"}})
	must("add_labels", err)
	_, err = c.mc.AddLabels(c.ctx(), &pb.AddLabelsRequest{Labels: []string{"eu", "secret"}})
	fail("a label twice", err, `visibility label "secret" already exists`)
	_, err = c.mc.AddLabels(c.ctx(), &pb.AddLabelsRequest{Labels: []string{"bad\nlabel"}})
	fail("a control character", err, "control character")
	_, err = c.mc.SetAuths(c.ctx(), &pb.SetAuthsRequest{User: "alice", Labels: []string{"secret", "nosuch"}})
	fail("an undefined label", err, `visibility label "nosuch" is not defined`)
	_, err = c.mc.SetAuths(c.ctx(), &pb.SetAuthsRequest{User: "alice", Labels: []string{"secret"}})
	must("set_auths", err)
	_, err = c.mc.SetAuths(c.ctx(), &pb.SetAuthsRequest{User: "alice", Labels: []string{"pii"}})
	must("set_auths again", err)
	_, err = c.mc.ClearAuths(c.ctx(), &pb.ClearAuthsRequest{User: "bob", Labels: []string{"pii"}})
	fail("clearing what bob does not hold", err, `bob does not hold visibility label "pii"`)

	check := func(when string) {
		t.Helper()
		ls, err := c.mc.ListLabels(c.ctx(), &pb.ListLabelsRequest{})
		must("list_labels", err)
		if !slices.Equal(ls.GetLabels(), []string{"pii", "secret"}) {
			t.Fatalf("%s: labels %v", when, ls.GetLabels())
		}
		ls, err = c.mc.ListLabels(c.ctx(), &pb.ListLabelsRequest{Regex: "^s"})
		must("list_labels regex", err)
		if !slices.Equal(ls.GetLabels(), []string{"secret"}) {
			t.Fatalf("%s: labels matching ^s: %v", when, ls.GetLabels())
		}
		a, err := c.mc.GetAuths(c.ctx(), &pb.GetAuthsRequest{User: "alice"})
		must("get_auths", err)
		if !slices.Equal(a.GetLabels(), []string{"pii", "secret"}) {
			t.Fatalf("%s: alice holds %v", when, a.GetLabels())
		}
		p, err := c.mc.GetUserPermissions(c.ctx(), &pb.GetUserPermissionsRequest{})
		must("permissions", err)
		if p.GetVersion() <= before.GetVersion() || len(p.GetLabels()) != 2 || len(p.GetAuths()) != 1 {
			t.Fatalf("%s: version %d (was %d), %d labels, %d authorizations: region servers would not see the change",
				when, p.GetVersion(), before.GetVersion(), len(p.GetLabels()), len(p.GetAuths()))
		}
		if p.GetLabels()[0].GetOrdinal() == p.GetLabels()[1].GetOrdinal() {
			t.Fatalf("%s: two labels share ordinal %d", when, p.GetLabels()[0].GetOrdinal())
		}
	}
	// A grant keeps them (it rewrites the same catalog row).
	_, err = c.mc.Grant(c.ctx(), &pb.GrantRequest{Permission: &pb.Permission{User: "alice", Actions: 1}})
	must("grant", err)
	check("now")
	c.m.Close()
	c.startMaster()
	check("after a new master")
	_, err = c.mc.ClearAuths(c.ctx(), &pb.ClearAuthsRequest{User: "alice", Labels: []string{"secret", "pii"}})
	must("clear_auths", err)
	a, err := c.mc.GetAuths(c.ctx(), &pb.GetAuthsRequest{User: "alice"})
	must("get_auths", err)
	if len(a.GetLabels()) != 0 {
		t.Fatalf("alice still holds %v", a.GetLabels())
	}
}

// Dropping a table drops the grants on it (HBase's postDeleteTable): a table created again under
// the name starts with no one's access; grants elsewhere stay.
func TestDeleteTableDropsItsGrants(t *testing.T) {
	c := newCluster(t, 1, nil, nil)
	c.createTable("t1", 1, 0)
	for _, p := range []*pb.Permission{
		{User: "alice", Table: tableName("t1"), Actions: 1},
		{User: "bob", Table: tableName("t1"), Family: []byte("f"), Actions: 3},
		{User: "alice", Namespace: "default", Actions: 1},
	} {
		if _, err := c.mc.Grant(c.ctx(), &pb.GrantRequest{Permission: p}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := c.mc.DisableTable(c.ctx(), &pb.TableRequest{Table: tableName("t1")}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.mc.DeleteTable(c.ctx(), &pb.TableRequest{Table: tableName("t1")}); err != nil {
		t.Fatal(err)
	}
	p, err := c.mc.GetUserPermissions(c.ctx(), &pb.GetUserPermissionsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range p.GetPermissions() {
		if q.GetTable().GetName() == "t1" {
			t.Errorf("a grant on the dropped table survived: %v", q)
		}
	}
	if len(p.GetPermissions()) != 1 || p.GetPermissions()[0].GetNamespace() != "default" {
		t.Errorf("permissions after the drop: %v, want alice's on the namespace only", p.GetPermissions())
	}
}
