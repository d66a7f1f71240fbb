package access

import (
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"unicode/utf8"

	pb "github.com/cellstore/cellstore/engine/api/cellstore/v1"
	"github.com/cellstore/cellstore/engine/cell"
	"github.com/cellstore/cellstore/engine/security"
)

// Visibility labels (HBase's VisibilityController): an administrator defines labels, gives
// users and groups authorizations to them, and a mutation may carry a visibility expression over
// labels with & (and), | (or), ! (not) and parentheses. The region server stores the expression
// with every cell the mutation writes, as cell.TagVisibility tags: one per term of its
// disjunctive normal form, each the term's literals as
//
//	uvarint(label ordinal << 1 | negated), sorted by ordinal
//
// (labels by their ordinal: a few bytes whatever their names). A read sees a cell with visibility
// tags only when its authorizations satisfy one of the terms; cells without are visible to all.
// docs/security.md, "Visibility labels", has the rules.

// VisibilityAttribute is the mutation attribute holding a visibility expression (text, as
// HBase's CellVisibility).
const VisibilityAttribute = "visibility"

// AuthorizationsAttribute is the get or scan attribute holding the labels a read asks to use
// (HBase's Authorizations), joined by newlines: the read uses those of them the user holds.
// Without it a read uses every label the user holds.
const AuthorizationsAttribute = "authorizations"

// Limits that keep a hostile expression from costing memory or stack.
const (
	maxExpressionLength = 4096
	maxExpressionDepth  = 64
	maxTerms            = 64  // terms of the disjunctive normal form
	maxTermLiterals     = 64  // literals of one term
	maxLabelLength      = 256 // bytes of a label's name
)

// ValidLabel checks a label's name: 1 to 256 bytes of UTF-8 without control characters.
func ValidLabel(name string) error {
	switch {
	case name == "":
		return errors.New("a visibility label needs a name")
	case len(name) > maxLabelLength:
		return fmt.Errorf("visibility label %.20q… is %d bytes (at most %d)", name, len(name), maxLabelLength)
	case !utf8.ValidString(name):
		return fmt.Errorf("visibility label %q is not UTF-8", name)
	case strings.ContainsFunc(name, func(r rune) bool { return r < 0x20 || r == 0x7f }):
		return fmt.Errorf("visibility label %q holds a control character", name)
	}
	return nil
}

// Expr is a parsed visibility expression.
type Expr struct {
	op    byte // 'L' label, '!' not, '&' and, '|' or
	label string
	kids  []*Expr
}

// ParseVisibility parses a visibility expression: labels (letters, digits and _-:/. unquoted, or
// anything in double quotes with \" and \\ escapes), ! binding tightest, & and | with one
// precedence read left to right as HBase's ExpressionParser reads them (a|b&c is (a|b)&c), and
// parentheses.
func ParseVisibility(s string) (*Expr, error) {
	if len(s) > maxExpressionLength {
		return nil, fmt.Errorf("visibility expression of %d bytes is too long (at most %d)", len(s), maxExpressionLength)
	}
	p := &exprParser{s: s}
	e, err := p.or(0)
	if err != nil {
		return nil, fmt.Errorf("visibility expression %q: %w", s, err)
	}
	p.space()
	if p.i < len(s) {
		return nil, fmt.Errorf("visibility expression %q: unexpected %q at offset %d", s, s[p.i], p.i)
	}
	return e, nil
}

type exprParser struct {
	s string
	i int
}

func (p *exprParser) space() {
	for p.i < len(p.s) && (p.s[p.i] == ' ' || p.s[p.i] == '\t') {
		p.i++
	}
}

// or parses operands joined by & and |, left to right with no precedence between them (HBase's
// rule: each operator takes what is left of it whole). A run of one operator makes one node.
func (p *exprParser) or(depth int) (*Expr, error) {
	e, err := p.unary(depth)
	if err != nil {
		return nil, err
	}
	joined := false // e is a node this loop made (not a parenthesised one, kept whole)
	for {
		p.space()
		if p.i >= len(p.s) || (p.s[p.i] != '&' && p.s[p.i] != '|') {
			return e, nil
		}
		op := p.s[p.i]
		p.i++
		next, err := p.unary(depth)
		if err != nil {
			return nil, err
		}
		if joined && e.op == op {
			e.kids = append(e.kids, next)
			continue
		}
		e, joined = &Expr{op: op, kids: []*Expr{e, next}}, true
	}
}

func (p *exprParser) unary(depth int) (*Expr, error) {
	if depth > maxExpressionDepth {
		return nil, fmt.Errorf("nested more than %d deep", maxExpressionDepth)
	}
	p.space()
	if p.i >= len(p.s) {
		return nil, errors.New("a label is missing at the end")
	}
	switch c := p.s[p.i]; {
	case c == '!':
		p.i++
		k, err := p.unary(depth + 1)
		if err != nil {
			return nil, err
		}
		return &Expr{op: '!', kids: []*Expr{k}}, nil
	case c == '(':
		p.i++
		e, err := p.or(depth + 1)
		if err != nil {
			return nil, err
		}
		p.space()
		if p.i >= len(p.s) || p.s[p.i] != ')' {
			return nil, fmt.Errorf("( at offset %d is not closed", p.i)
		}
		p.i++
		return e, nil
	case c == '"':
		return p.quoted()
	case unquotedLabelByte(c):
		start := p.i
		for p.i < len(p.s) && unquotedLabelByte(p.s[p.i]) {
			p.i++
		}
		return &Expr{op: 'L', label: p.s[start:p.i]}, nil
	default:
		return nil, fmt.Errorf("expected a label, ! or ( at offset %d, found %q", p.i, c)
	}
}

func (p *exprParser) quoted() (*Expr, error) {
	start := p.i
	p.i++
	var b strings.Builder
	for p.i < len(p.s) {
		c := p.s[p.i]
		switch {
		case c == '\\' && p.i+1 < len(p.s) && (p.s[p.i+1] == '"' || p.s[p.i+1] == '\\'):
			b.WriteByte(p.s[p.i+1])
			p.i += 2
		case c == '"':
			p.i++
			if err := ValidLabel(b.String()); err != nil {
				return nil, err
			}
			return &Expr{op: 'L', label: b.String()}, nil
		default:
			b.WriteByte(c)
			p.i++
		}
	}
	return nil, fmt.Errorf("the quote at offset %d is not closed", start)
}

func unquotedLabelByte(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.IndexByte("_-:/.", c) >= 0
}

// quoteLabel writes a label as the parser reads it: bare when it can be.
func quoteLabel(l string) string {
	bare := l != ""
	for i := 0; i < len(l); i++ {
		bare = bare && unquotedLabelByte(l[i])
	}
	if bare {
		return l
	}
	return `"` + strings.NewReplacer(`\`, `\\`, `"`, `\"`).Replace(l) + `"`
}

// String writes the expression back, parenthesised where a reader needs it.
func (e *Expr) String() string {
	switch e.op {
	case 'L':
		return quoteLabel(e.label)
	case '!':
		k := e.kids[0].String()
		if e.kids[0].op == '&' || e.kids[0].op == '|' {
			k = "(" + k + ")"
		}
		return "!" + k
	}
	// & and | read left to right with one precedence: every & or | inside another is bracketed.
	parts := make([]string, len(e.kids))
	for i, k := range e.kids {
		parts[i] = k.String()
		if k.op == '|' || k.op == '&' {
			parts[i] = "(" + parts[i] + ")"
		}
	}
	return strings.Join(parts, string(e.op))
}

// Eval evaluates the expression directly (the reference the stored form is tested against).
func (e *Expr) Eval(has func(label string) bool) bool {
	switch e.op {
	case 'L':
		return has(e.label)
	case '!':
		return !e.kids[0].Eval(has)
	case '&':
		for _, k := range e.kids {
			if !k.Eval(has) {
				return false
			}
		}
		return true
	}
	for _, k := range e.kids {
		if k.Eval(has) {
			return true
		}
	}
	return false
}

// Labels lists the labels the expression names, sorted, once each.
func (e *Expr) Labels() []string {
	var out []string
	var walk func(*Expr)
	walk = func(x *Expr) {
		if x.op == 'L' {
			out = append(out, x.label)
		}
		for _, k := range x.kids {
			walk(k)
		}
	}
	walk(e)
	slices.Sort(out)
	return slices.Compact(out)
}

// literal is a label ordinal, negated or not, in its stored form (ordinal<<1 | negated).
type literal = uint64

var errTooComplex = fmt.Errorf("visibility expression is too complex: its disjunctive normal form has more than %d terms or a term more than %d labels", maxTerms, maxTermLiterals)

// dnf returns the disjunctive normal form of e (of !e when neg).
func dnf(e *Expr, neg bool, ord map[string]uint32) ([][]literal, error) {
	switch e.op {
	case 'L':
		l := uint64(ord[e.label]) << 1
		if neg {
			l |= 1
		}
		return [][]literal{{l}}, nil
	case '!':
		return dnf(e.kids[0], !neg, ord)
	}
	if (e.op == '|') != neg { // a disjunction: the terms of every operand
		var out [][]literal
		for _, k := range e.kids {
			t, err := dnf(k, neg, ord)
			if err != nil {
				return nil, err
			}
			out = append(out, t...)
			if len(out) > maxTerms {
				return nil, errTooComplex
			}
		}
		return out, nil
	}
	out := [][]literal{{}} // a conjunction: the product of its operands' terms
	for _, k := range e.kids {
		t, err := dnf(k, neg, ord)
		if err != nil {
			return nil, err
		}
		if len(out)*len(t) > maxTerms {
			return nil, errTooComplex
		}
		next := make([][]literal, 0, len(out)*len(t))
		for _, a := range out {
			for _, b := range t {
				if len(a)+len(b) > maxTermLiterals {
					return nil, errTooComplex
				}
				next = append(next, append(slices.Clip(a), b...))
			}
		}
		out = next
	}
	return out, nil
}

// EncodeVisibility turns an expression into the tags the cells it guards carry; ordinal
// resolves a label (false: not defined, an error naming it).
func EncodeVisibility(e *Expr, ordinal func(label string) (uint32, bool)) ([]byte, error) {
	ord := map[string]uint32{}
	for _, l := range e.Labels() {
		o, ok := ordinal(l)
		if !ok {
			return nil, fmt.Errorf("visibility label %q is not defined: an administrator adds it with add_labels", l)
		}
		ord[l] = o
	}
	terms, err := dnf(e, false, ord)
	if err != nil {
		return nil, err
	}
	var encoded []string
	for _, t := range terms {
		slices.Sort(t)
		t = slices.Compact(t)
		contradiction := false
		for i := 1; i < len(t); i++ {
			contradiction = contradiction || t[i]>>1 == t[i-1]>>1 // a & !a
		}
		if contradiction {
			continue
		}
		var b []byte
		for _, l := range t {
			b = binary.AppendUvarint(b, l)
		}
		encoded = append(encoded, string(b))
	}
	sort.Strings(encoded)
	encoded = slices.Compact(encoded)
	if len(encoded) == 0 {
		return nil, fmt.Errorf("visibility expression %q can never be satisfied", e.String())
	}
	var tags []byte
	for _, t := range encoded {
		tags = cell.AppendTag(tags, cell.TagVisibility, []byte(t))
	}
	if len(tags) > cell.MaxTagsLength/4 {
		return nil, fmt.Errorf("visibility expression %q stores as %d bytes (at most %d)", e.String(), len(tags), cell.MaxTagsLength/4)
	}
	return tags, nil
}

// walkTerm calls fn with every literal of a stored term; false when the term is malformed.
func walkTerm(v []byte, fn func(ordinal uint32, negated bool) bool) bool {
	for len(v) > 0 {
		l, n := binary.Uvarint(v)
		if n <= 0 || l>>1 > 1<<32-1 {
			return false
		}
		v = v[n:]
		if !fn(uint32(l>>1), l&1 == 1) {
			return true
		}
	}
	return true
}

// VisibilityExpression writes the visibility of a cell's tags back as an expression in
// disjunctive normal form ("" without); name resolves an ordinal ("#n" when it does not).
func VisibilityExpression(tags []byte, name func(ordinal uint32) (string, bool)) string {
	var terms []string
	cell.EachTag(tags, cell.TagVisibility, func(v []byte) bool {
		var lits []string
		walkTerm(v, func(o uint32, negated bool) bool {
			n, ok := name(o)
			if !ok {
				n = fmt.Sprintf("#%d", o)
			} else {
				n = quoteLabel(n)
			}
			if negated {
				n = "!" + n
			}
			lits = append(lits, n)
			return true
		})
		t := strings.Join(lits, "&")
		if len(lits) > 1 {
			t = "(" + t + ")"
		}
		terms = append(terms, t)
		return true
	})
	if len(terms) == 1 {
		return strings.TrimSuffix(strings.TrimPrefix(terms[0], "("), ")")
	}
	return strings.Join(terms, "|")
}

// Authorizations are the label ordinals a read may use, sorted.
type Authorizations []uint32

// Has reports whether ordinal o is among them.
func (a Authorizations) Has(o uint32) bool {
	_, ok := slices.BinarySearch(a, o)
	return ok
}

// Visible reports whether a cell with these (well-formed) tags is visible under a: it has no
// visibility tags, or a satisfies one of its terms. A malformed term satisfies nothing.
func (a Authorizations) Visible(tags []byte) bool {
	if !cell.HasVisibility(tags) {
		return true
	}
	visible := false
	cell.EachTag(tags, cell.TagVisibility, func(v []byte) bool {
		ok := len(v) > 0
		if !walkTerm(v, func(o uint32, negated bool) bool {
			if a.Has(o) == negated {
				ok = false
				return false
			}
			return true
		}) {
			ok = false
		}
		visible = ok
		return !ok
	})
	return visible
}

// Labels are the visibility labels defined and the authorizations given, under one version of
// the catalog's ACL row. Immutable.
type Labels struct {
	ordinal map[string]uint32
	name    map[uint32]string
	auths   map[string][]string // user or "@group" → label names
}

// NewLabels indexes the catalog's labels and authorizations.
func NewLabels(labels []*pb.VisibilityLabel, auths []*pb.LabelAuths) *Labels {
	l := &Labels{ordinal: map[string]uint32{}, name: map[uint32]string{}, auths: map[string][]string{}}
	for _, x := range labels {
		l.ordinal[x.GetName()] = x.GetOrdinal()
		l.name[x.GetOrdinal()] = x.GetName()
	}
	for _, a := range auths {
		l.auths[a.GetUser()] = append(l.auths[a.GetUser()], a.GetLabels()...)
	}
	return l
}

// Defined reports whether any label exists (without, no cell can carry one).
func (l *Labels) Defined() bool { return l != nil && len(l.ordinal) > 0 }

// Ordinal resolves a label's name.
func (l *Labels) Ordinal(name string) (uint32, bool) {
	if l == nil {
		return 0, false
	}
	o, ok := l.ordinal[name]
	return o, ok
}

// Name resolves a label's ordinal.
func (l *Labels) Name(o uint32) (string, bool) {
	if l == nil {
		return "", false
	}
	n, ok := l.name[o]
	return n, ok
}

// Held lists the labels an identity holds, for itself or through its groups, sorted.
func (l *Labels) Held(id security.Identity) []string {
	if l == nil {
		return nil
	}
	var out []string
	for _, s := range subjects(id) {
		out = append(out, l.auths[s]...)
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// Authorizations are the ordinals a read by id uses: the labels it holds, narrowed to those it
// asked for when it asked (requested non-nil; HBase's default scan label generators).
func (l *Labels) Authorizations(id security.Identity, requested []string) Authorizations {
	var out Authorizations
	for _, n := range l.Held(id) {
		if requested != nil && !slices.Contains(requested, n) {
			continue
		}
		if o, ok := l.Ordinal(n); ok {
			out = append(out, o)
		}
	}
	slices.Sort(out)
	return out
}

// ParseAuthorizations reads an AuthorizationsAttribute value (nil: none asked for).
func ParseAuthorizations(v []byte, present bool) []string {
	if !present {
		return nil
	}
	out := []string{}
	for _, l := range strings.Split(string(v), "\n") {
		if l != "" {
			out = append(out, l)
		}
	}
	return out
}

// EncodeAuthorizations makes an AuthorizationsAttribute value.
func EncodeAuthorizations(labels []string) ([]byte, error) {
	for _, l := range labels {
		if err := ValidLabel(l); err != nil {
			return nil, err
		}
	}
	return []byte(strings.Join(labels, "\n")), nil
}
