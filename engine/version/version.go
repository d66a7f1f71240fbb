// Package version parses Cellstore's release versions and holds the rule of which versions may run
// together in one cluster during a rolling upgrade (docs/master.md, "Versions").
//
// The rule is HBase's upgrade order: masters first, then region servers. A region server may run
// the active master's minor version or the one before (the servers not restarted yet), never a newer
// one (a master must understand everything a server sends it); a different major version never.
// Builds without a release version ("dev", a commit) are not checked.
package version

import (
	"cmp"
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// Version is a release version MAJOR.MINOR.PATCH.
type Version struct{ Major, Minor, Patch int }

func (v Version) String() string { return fmt.Sprintf("v%d.%d.%d", v.Major, v.Minor, v.Patch) }

// Parse reads "v1.2.3" or "1.2.3", with an optional pre-release or build suffix ("-rc.1", "+abc");
// ok is false for anything else (a development build).
func Parse(s string) (v Version, ok bool) {
	s = strings.TrimPrefix(s, "v")
	if i := strings.IndexAny(s, "-+"); i >= 0 {
		s = s[:i]
	}
	parts := strings.Split(s, ".")
	if len(parts) != 3 {
		return Version{}, false
	}
	var n [3]int
	for i, p := range parts {
		x, err := strconv.Atoi(p)
		if err != nil || x < 0 || p == "" || (len(p) > 1 && p[0] == '0') {
			return Version{}, false
		}
		n[i] = x
	}
	return Version{n[0], n[1], n[2]}, true
}

// CheckServer says whether a region server of version server may join an active master of
// version master, and if not, what to do. Unparseable versions pass.
func CheckServer(master, server string) error {
	m, okM := Parse(master)
	s, okS := Parse(server)
	if !okM || !okS {
		return nil
	}
	switch {
	case s.Major != m.Major:
		return fmt.Errorf("region server %s and master %s are of different major versions, which do not run together: upgrade the whole cluster to one major version", s, m)
	case s.Minor > m.Minor:
		return fmt.Errorf("region server %s is newer than the active master %s: upgrade the masters first, then the region servers", s, m)
	case s.Minor < m.Minor-1:
		return fmt.Errorf("region server %s is more than one minor version older than the active master %s: upgrade one minor version at a time", s, m)
	}
	return nil
}

// CheckUpgrade says whether a cluster running version from may be rolled to version to, masters
// first: the same major version and the same or the next minor (patch releases either way). A
// minor downgrade is refused: rolled masters first, the masters would be older than the region
// servers. Unparseable versions pass.
func CheckUpgrade(from, to string) error {
	f, okF := Parse(from)
	t, okT := Parse(to)
	if !okF || !okT {
		return nil
	}
	switch {
	case t.Major != f.Major:
		return fmt.Errorf("%s to %s changes the major version, which a rolling upgrade cannot do: make a new cluster from a backup", f, t)
	case t.Minor > f.Minor+1:
		return fmt.Errorf("%s to %s skips a minor version: upgrade one minor version at a time (to v%d.%d.x first)", f, t, f.Major, f.Minor+1)
	case t.Minor < f.Minor:
		return fmt.Errorf("%s to %s is a minor downgrade, which a rolling restart cannot do (the masters, rolled first, would be older than the region servers): go back to %s, or restore a backup made before the upgrade", f, t, f)
	}
	return nil
}

// Compare orders two versions: release versions by MAJOR.MINOR.PATCH (a pre-release before its
// release, then by text), each before any build without a release version (those by text). It
// is 0 only for equal strings.
func Compare(a, b string) int {
	va, okA := Parse(a)
	vb, okB := Parse(b)
	switch {
	case okA && okB:
		return cmp.Or(cmp.Compare(va.Major, vb.Major), cmp.Compare(va.Minor, vb.Minor), cmp.Compare(va.Patch, vb.Patch),
			-cmp.Compare(b2i(preRelease(a)), b2i(preRelease(b))), // v1.2.0-rc.1 before v1.2.0
			strings.Compare(a, b))
	case okA != okB:
		return cmp.Compare(b2i(okB), b2i(okA))
	}
	return strings.Compare(a, b)
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

// Distinct is vs without empty strings and repeats, in Compare's order.
func Distinct(vs []string) []string {
	out := slices.DeleteFunc(slices.Clone(vs), func(v string) bool { return v == "" })
	slices.SortFunc(out, Compare)
	return slices.Compact(out)
}

// preRelease says whether a release version has a pre-release suffix ("-rc.1", not "+build").
func preRelease(s string) bool {
	if i := strings.IndexByte(s, '+'); i >= 0 {
		s = s[:i]
	}
	return strings.Contains(s, "-")
}
