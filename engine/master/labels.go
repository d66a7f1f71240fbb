package master

import (
	"context"
	"fmt"
	"regexp"
	"slices"
	"strings"

	"google.golang.org/protobuf/proto"

	"github.com/cellstore/cellstore/engine/access"
	pb "github.com/cellstore/cellstore/engine/api/cellstore/v1"
	"github.com/cellstore/cellstore/engine/pattern"
)

// Visibility labels (HBase's VisibilityController): defined by AddLabels, held by users and
// groups through SetAuths/ClearAuths; they live in the catalog's ACL row beside the permissions,
// so a change bumps its version and region servers fetch it with the permissions.

// updateACL commits edit's change of a copy of the catalog's ACL row (permissions, labels and
// authorizations) under the next version; edit reports whether it changed anything (nothing is
// written otherwise) or refuses the change. Every change of the row goes through here or, inside
// a larger commit, stageACLLocked, so none can drop what another kind of change keeps in it.
func (m *Master) updateACL(edit func(next *pb.CatalogACL) (bool, *pb.ErrorDetail)) (version uint64, changed bool, err error) {
	if err := m.lock(); err != nil {
		return 0, false, err
	}
	defer m.mu.Unlock()
	var b batch
	next, changed, d := m.stageACLLocked(&b, edit)
	if d != nil {
		return 0, false, d.Status()
	}
	if !changed {
		return next.GetVersion() - 1, false, nil
	}
	if err := m.commit(&b); err != nil {
		return 0, false, toStatus(err)
	}
	return next.GetVersion(), true, nil
}

// stageACLLocked puts on b edit's change of a copy of the catalog's ACL row under the next version
// (m.mu held), for a commit that changes the row with other things (a table's drop drops its
// grants); it stages nothing when edit changes nothing or refuses.
func (m *Master) stageACLLocked(b *batch, edit func(next *pb.CatalogACL) (bool, *pb.ErrorDetail)) (*pb.CatalogACL, bool, *pb.ErrorDetail) {
	next := proto.CloneOf(m.st.acl)
	if next == nil {
		next = &pb.CatalogACL{}
	}
	next.Version++
	changed, d := edit(next)
	if d == nil && changed {
		b.putACL(next)
	}
	return next, changed && d == nil, d
}

// changeLabels commits a change of the labels or authorizations.
func (m *Master) changeLabels(what string, edit func(next *pb.CatalogACL) *pb.ErrorDetail) error {
	version, _, err := m.updateACL(func(next *pb.CatalogACL) (bool, *pb.ErrorDetail) { return true, edit(next) })
	if err != nil {
		return err
	}
	m.log.Info("visibility labels changed", "change", what, "version", version)
	return nil
}

// AddLabels implements pb.MasterServer.
func (m *Master) AddLabels(_ context.Context, req *pb.AddLabelsRequest) (*pb.AddLabelsResponse, error) {
	if len(req.GetLabels()) == 0 {
		return nil, errInvalid("add_labels: give at least one label").Status()
	}
	if len(req.GetLabels()) > maxLabelsPerCall {
		return nil, errInvalid("add_labels: %d labels in one call, at most %d: split the call", len(req.GetLabels()), maxLabelsPerCall).Status()
	}
	for i, l := range req.GetLabels() {
		if err := access.ValidLabel(l); err != nil {
			return nil, errInvalid("add_labels: %v", err).Status()
		}
		if slices.Contains(req.GetLabels()[:i], l) {
			return nil, errInvalid("add_labels: label %q is given twice", l).Status()
		}
	}
	err := m.changeLabels("add "+quoteList(req.GetLabels()), func(next *pb.CatalogACL) *pb.ErrorDetail {
		top := uint32(0)
		for _, l := range next.GetLabels() {
			if slices.Contains(req.GetLabels(), l.GetName()) {
				return errInvalid("visibility label %q already exists (labels are never removed; list them with list_labels)", l.GetName())
			}
			top = max(top, l.GetOrdinal())
		}
		for _, l := range req.GetLabels() {
			top++
			next.Labels = append(next.Labels, &pb.VisibilityLabel{Name: l, Ordinal: top})
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return &pb.AddLabelsResponse{}, nil
}

// ListLabels implements pb.MasterServer.
func (m *Master) ListLabels(_ context.Context, req *pb.ListLabelsRequest) (*pb.ListLabelsResponse, error) {
	var re *regexp.Regexp
	if req.GetRegex() != "" {
		var err error
		if re, err = pattern.Compile(req.GetRegex()); err != nil {
			return nil, errInvalid("list_labels: %v", err).Status()
		}
	}
	if err := m.lock(); err != nil {
		return nil, err
	}
	var names []string
	for _, l := range m.st.acl.GetLabels() {
		names = append(names, l.GetName())
	}
	m.mu.Unlock()
	resp := &pb.ListLabelsResponse{} // (matched off the master's lock)
	for _, n := range names {
		if re == nil || re.MatchString(n) {
			resp.Labels = append(resp.Labels, n)
		}
	}
	slices.Sort(resp.Labels)
	return resp, nil
}

// SetAuths implements pb.MasterServer: the user or group gets the labels beside those it holds.
func (m *Master) SetAuths(_ context.Context, req *pb.SetAuthsRequest) (*pb.SetAuthsResponse, error) {
	if err := checkAuthsRequest("set_auths", req.GetUser(), req.GetLabels()); err != nil {
		return nil, err.Status()
	}
	err := m.changeLabels("set_auths "+req.GetUser()+" "+quoteList(req.GetLabels()), func(next *pb.CatalogACL) *pb.ErrorDetail {
		for _, l := range req.GetLabels() {
			if !slices.ContainsFunc(next.GetLabels(), func(x *pb.VisibilityLabel) bool { return x.GetName() == l }) {
				return errInvalid("visibility label %q is not defined: add it with add_labels first", l)
			}
		}
		a := authsOf(next, req.GetUser(), true)
		for _, l := range req.GetLabels() {
			if !slices.Contains(a.Labels, l) {
				a.Labels = append(a.Labels, l)
			}
		}
		slices.Sort(a.Labels)
		return nil
	})
	if err != nil {
		return nil, err
	}
	return &pb.SetAuthsResponse{}, nil
}

// ClearAuths implements pb.MasterServer.
func (m *Master) ClearAuths(_ context.Context, req *pb.ClearAuthsRequest) (*pb.ClearAuthsResponse, error) {
	if err := checkAuthsRequest("clear_auths", req.GetUser(), req.GetLabels()); err != nil {
		return nil, err.Status()
	}
	err := m.changeLabels("clear_auths "+req.GetUser()+" "+quoteList(req.GetLabels()), func(next *pb.CatalogACL) *pb.ErrorDetail {
		a := authsOf(next, req.GetUser(), false)
		for _, l := range req.GetLabels() {
			if a == nil || !slices.Contains(a.Labels, l) {
				return errInvalid("%s does not hold visibility label %q (see get_auths)", req.GetUser(), l)
			}
		}
		a.Labels = slices.DeleteFunc(a.Labels, func(l string) bool { return slices.Contains(req.GetLabels(), l) })
		if len(a.Labels) == 0 {
			next.Auths = slices.DeleteFunc(next.Auths, func(x *pb.LabelAuths) bool { return x == a })
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return &pb.ClearAuthsResponse{}, nil
}

// GetAuths implements pb.MasterServer: the labels the user or group holds itself (a user's
// groups' labels are not listed, as HBase's get_auths).
func (m *Master) GetAuths(_ context.Context, req *pb.GetAuthsRequest) (*pb.GetAuthsResponse, error) {
	if req.GetUser() == "" || req.GetUser() == "@" {
		return nil, errInvalid("get_auths: give a user or an @group").Status()
	}
	if err := m.lock(); err != nil {
		return nil, err
	}
	defer m.mu.Unlock()
	resp := &pb.GetAuthsResponse{}
	if a := authsOf(m.st.acl, req.GetUser(), false); a != nil {
		resp.Labels = slices.Clone(a.GetLabels())
	}
	return resp, nil
}

func checkAuthsRequest(verb, user string, labels []string) *pb.ErrorDetail {
	if user == "" || user == "@" {
		return errInvalid("%s: give a user or an @group", verb)
	}
	if len(labels) == 0 {
		return errInvalid("%s: give at least one label", verb)
	}
	if len(labels) > maxLabelsPerCall {
		return errInvalid("%s: %d labels in one call, at most %d: split the call", verb, len(labels), maxLabelsPerCall)
	}
	if len(user) > maxPermissionUser {
		return errInvalid("%s: the user is %d bytes long, at most %d", verb, len(user), maxPermissionUser)
	}
	return nil
}

// maxLabelsPerCall bounds the labels one call names (each is checked against those defined and
// held, under the master's lock).
const maxLabelsPerCall = 1000

// authsOf finds the entry of user in acl (adding an empty one when add).
func authsOf(acl *pb.CatalogACL, user string, add bool) *pb.LabelAuths {
	for _, a := range acl.GetAuths() {
		if a.GetUser() == user {
			return a
		}
	}
	if !add {
		return nil
	}
	a := &pb.LabelAuths{User: user}
	acl.Auths = append(acl.Auths, a)
	return a
}

// quoteList is labels for the log: the first ten, and how many more.
func quoteList(l []string) string {
	var b strings.Builder
	b.WriteByte('[')
	for i, s := range l {
		if i == 10 {
			fmt.Fprintf(&b, ", and %d more", len(l)-i)
			break
		}
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString("'" + s + "'")
	}
	b.WriteByte(']')
	return b.String()
}
