package access

import (
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	pb "github.com/cellstore/cellstore/engine/api/cellstore/v1"
	"github.com/cellstore/cellstore/engine/cell"
	"github.com/cellstore/cellstore/engine/security"
)

var testLabels = []string{"secret", "topsecret", "pii", "eu", "a b", `q"x`}

func testOrdinal(l string) (uint32, bool) {
	i := slices.Index(testLabels, l)
	return uint32(i*7 + 3), i >= 0 // ordinals need not be dense
}

func randomExpr(r *rand.Rand, depth int) *Expr {
	if depth == 0 || r.IntN(3) == 0 {
		return &Expr{op: 'L', label: testLabels[r.IntN(len(testLabels))]}
	}
	switch r.IntN(3) {
	case 0:
		return &Expr{op: '!', kids: []*Expr{randomExpr(r, depth-1)}}
	case 1:
		return &Expr{op: '&', kids: []*Expr{randomExpr(r, depth-1), randomExpr(r, depth-1)}}
	}
	return &Expr{op: '|', kids: []*Expr{randomExpr(r, depth-1), randomExpr(r, depth-1)}}
}

// TestVisibilityAgainstReference checks the stored form against direct evaluation: for random
// expressions over six labels and every one of the 64 sets of authorizations, a cell carrying
// the encoded expression is visible exactly when the expression is true.
func TestVisibilityAgainstReference(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	tooComplex, never := 0, 0
	for i := range 3000 {
		e := randomExpr(r, 1+i%5)
		// The written form parses back to the same expression.
		back, err := ParseVisibility(e.String())
		if err != nil {
			t.Fatalf("%s does not parse back: %v", e, err)
		}
		if back.String() != e.String() {
			t.Fatalf("round trip: %s became %s", e, back)
		}
		tags, err := EncodeVisibility(e, testOrdinal)
		if err != nil && err == errTooComplex {
			tooComplex++
			continue
		}
		for set := range 1 << len(testLabels) {
			has := func(l string) bool { return set&(1<<slices.Index(testLabels, l)) != 0 }
			var auths Authorizations
			for j, l := range testLabels {
				if set&(1<<j) != 0 {
					o, _ := testOrdinal(l)
					auths = append(auths, o)
				}
			}
			want := e.Eval(has)
			if err != nil { // never satisfiable: true for no set
				if want {
					t.Fatalf("%s: encoding said it can never be satisfied (%v), but it holds for set %b", e, err, set)
				}
				continue
			}
			if got := auths.Visible(tags); got != want {
				t.Fatalf("%s with set %b: visible %v, reference %v (stored as %s)", e, set, got, want,
					VisibilityExpression(tags, func(o uint32) (string, bool) { return testLabels[(o-3)/7], true }))
			}
		}
		if err != nil {
			never++
		}
	}
	if tooComplex > 300 {
		t.Fatalf("%d of 3000 expressions were too complex: the limit is too low to be useful", tooComplex)
	}
	t.Logf("%d expressions too complex, %d never satisfiable", tooComplex, never)
}

func TestVisibilityParse(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"secret", "secret"},
		{" secret & !pii | topsecret ", "(secret&!pii)|topsecret"},
		// & and | have one precedence, read left to right (HBase's ExpressionParser).
		{"secret|public&eu", "(secret|public)&eu"},
		{"a&b|c&d", "((a&b)|c)&d"},
		{"a&(b|c)&d", "a&(b|c)&d"},
		{"secret & (pii | eu)", "secret&(pii|eu)"},
		{"!!secret", "!!secret"},
		{`"a b" | "q\"x"`, `"a b"|"q\"x"`},
		{"a|b|c", "a|b|c"},
		{"(a|b)|c", "(a|b)|c"},
	} {
		e, err := ParseVisibility(c.in)
		if err != nil {
			t.Fatalf("%q: %v", c.in, err)
		}
		if e.String() != c.want {
			t.Errorf("%q parsed as %s, want %s", c.in, e, c.want)
		}
	}
	for _, bad := range []string{"", "a &", "& a", "(a", "a)", "a b", `"open`, `""`, "a && b", "!", "a|(", strings.Repeat("(", 100) + "a" + strings.Repeat(")", 100),
		strings.Repeat("a|", 3000) + "a"} {
		if e, err := ParseVisibility(bad); err == nil {
			t.Errorf("%.40q parsed as %s, want an error", bad, e)
		}
	}
	// What HBase hides from a reader holding only "secret", this does too.
	if e, err := ParseVisibility("secret|public&eu"); err != nil || e.Eval(func(l string) bool { return l == "secret" }) {
		t.Fatalf("secret|public&eu (%v) is visible with only secret: HBase reads it (secret|public)&eu", err)
	}
	// A product that blows up is refused, not expanded.
	e, err := ParseVisibility(strings.Repeat("(a|b|c)&", 9) + "(a|b)")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := EncodeVisibility(e, func(string) (uint32, bool) { return 1, true }); err != errTooComplex {
		t.Fatalf("3^9*2 terms: %v, want errTooComplex", err)
	}
	e, _ = ParseVisibility("secret & nosuch")
	if _, err := EncodeVisibility(e, testOrdinal); err == nil || !strings.Contains(err.Error(), `"nosuch" is not defined`) {
		t.Fatalf("an undefined label: %v", err)
	}
	e, _ = ParseVisibility("secret & !secret")
	if _, err := EncodeVisibility(e, testOrdinal); err == nil || !strings.Contains(err.Error(), "never be satisfied") {
		t.Fatalf("a contradiction: %v", err)
	}
}

// Equal expressions, however written, store as the same tags (deletes match on them).
func TestVisibilityCanonical(t *testing.T) {
	enc := func(s string) string {
		e, err := ParseVisibility(s)
		if err != nil {
			t.Fatal(err)
		}
		tags, err := EncodeVisibility(e, testOrdinal)
		if err != nil {
			t.Fatal(err)
		}
		return string(tags)
	}
	for _, same := range [][]string{
		{"secret&pii", "pii & secret", "(pii&secret)", "secret&pii&secret"},
		{"secret|pii", "pii|secret", "pii|secret|pii"},
		{"!(secret|pii)", "!secret&!pii"},
		{"eu&(secret|pii)", "(eu&secret)|(pii&eu)"},
	} {
		for _, s := range same[1:] {
			if enc(s) != enc(same[0]) {
				t.Errorf("%q and %q store differently", s, same[0])
			}
			if !cell.SameVisibility([]byte(enc(s)), []byte(enc(same[0]))) {
				t.Errorf("%q and %q: SameVisibility false", s, same[0])
			}
		}
	}
	if cell.SameVisibility([]byte(enc("secret")), []byte(enc("pii"))) || cell.SameVisibility(nil, []byte(enc("pii"))) {
		t.Error("different visibilities compare equal")
	}
	// Other tags around them do not matter.
	withTTL := cell.AppendTTLTag(nil, 10)
	if !cell.SameVisibility(append(withTTL, enc("secret")...), []byte(enc("secret"))) || !cell.SameVisibility(withTTL, nil) {
		t.Error("a TTL tag changed the comparison")
	}
}

func TestLabelsAuthorizations(t *testing.T) {
	l := NewLabels([]*pb.VisibilityLabel{{Name: "secret", Ordinal: 1}, {Name: "pii", Ordinal: 2}, {Name: "eu", Ordinal: 3}},
		[]*pb.LabelAuths{{User: "alice", Labels: []string{"secret"}}, {User: "@analysts", Labels: []string{"pii", "eu"}}})
	alice := security.Identity{User: "alice", Groups: []string{"analysts"}}
	if got := l.Held(alice); !slices.Equal(got, []string{"eu", "pii", "secret"}) {
		t.Fatalf("held %v", got)
	}
	if got := l.Authorizations(alice, nil); !slices.Equal(got, Authorizations{1, 2, 3}) {
		t.Fatalf("all held: %v", got)
	}
	// Asking for a label one does not hold gives nothing more.
	if got := l.Authorizations(alice, []string{"pii", "nosuch"}); !slices.Equal(got, Authorizations{2}) {
		t.Fatalf("narrowed: %v", got)
	}
	if got := l.Authorizations(security.Identity{User: "bob"}, []string{"secret"}); len(got) != 0 {
		t.Fatalf("bob holds nothing: %v", got)
	}
	v, err := EncodeAuthorizations([]string{"a", "b"})
	if err != nil || !slices.Equal(ParseAuthorizations(v, true), []string{"a", "b"}) || ParseAuthorizations(nil, false) != nil ||
		len(ParseAuthorizations(nil, true)) != 0 || ParseAuthorizations(nil, true) == nil {
		t.Fatalf("attribute round trip: %q %v", v, err)
	}
	if _, err := EncodeAuthorizations([]string{"a\nb"}); err == nil {
		t.Fatal("a label with a newline was accepted")
	}
}

func FuzzParseVisibility(f *testing.F) {
	for _, s := range []string{"a&b", "!(a|b)&c", `"x\"y"|z`, "((((a))))"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		e, err := ParseVisibility(s)
		if err != nil {
			return
		}
		back, err := ParseVisibility(e.String())
		if err != nil || back.String() != e.String() {
			t.Fatalf("%q → %s → %v %v", s, e, back, err)
		}
		tags, err := EncodeVisibility(e, func(string) (uint32, bool) { return 5, true })
		if err == nil && cell.ParseTags(tags) != nil {
			t.Fatalf("%q stores as malformed tags", s)
		}
	})
}
