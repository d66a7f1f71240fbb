package filter

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"regexp"
	"strings"

	"github.com/cellstore/cellstore/engine/pattern"
)

// CompareOp is a comparison operator (HBase's CompareOperator). A filter
// with op and comparator c passes a value v when "v op c.value" holds:
// Less passes values smaller than the comparator's.
type CompareOp int

const (
	Less CompareOp = iota
	LessOrEqual
	Equal
	NotEqual
	GreaterOrEqual
	Greater
	// NoOp matches nothing.
	NoOp
)

// Swapped is the operator with its operands swapped: "a op b" holds exactly when
// "b op.Swapped() a" does (Less becomes Greater; Equal, NotEqual and NoOp stay).
func (o CompareOp) Swapped() CompareOp {
	switch o {
	case Less:
		return Greater
	case LessOrEqual:
		return GreaterOrEqual
	case GreaterOrEqual:
		return LessOrEqual
	case Greater:
		return Less
	}
	return o
}

var opNames = []string{"LESS", "LESS_OR_EQUAL", "EQUAL", "NOT_EQUAL", "GREATER_OR_EQUAL", "GREATER", "NO_OP"}

func (o CompareOp) String() string {
	if o >= 0 && int(o) < len(opNames) {
		return opNames[o]
	}
	return fmt.Sprintf("CompareOp(%d)", int(o))
}

// ParseCompareOp parses an operator name (LESS, LESS_OR_EQUAL, EQUAL,
// NOT_EQUAL, GREATER_OR_EQUAL, GREATER, NO_OP) or its symbol (<, <=, =,
// !=, >=, >).
func ParseCompareOp(s string) (CompareOp, error) {
	for i, n := range opNames {
		if strings.EqualFold(s, n) {
			return CompareOp(i), nil
		}
	}
	switch s {
	case "<":
		return Less, nil
	case "<=":
		return LessOrEqual, nil
	case "=", "==":
		return Equal, nil
	case "!=":
		return NotEqual, nil
	case ">=":
		return GreaterOrEqual, nil
	case ">":
		return Greater, nil
	}
	return 0, fmt.Errorf("filter: unknown compare operator %q", s)
}

// Matches reports whether a comparator result (comparator value compared
// with the cell's bytes, HBase's compareTo) satisfies the operator.
func (o CompareOp) Matches(cmp int) bool {
	switch o {
	case Less:
		return cmp > 0
	case LessOrEqual:
		return cmp >= 0
	case Equal:
		return cmp == 0
	case NotEqual:
		return cmp != 0
	case GreaterOrEqual:
		return cmp <= 0
	case Greater:
		return cmp < 0
	}
	return false
}

// Comparator compares its configured value with a cell's bytes.
type Comparator interface {
	// Name is the comparator's stable type name.
	Name() string
	// CompareTo compares the comparator's value with b: negative if the
	// comparator's value sorts first. Substring and regex comparators
	// return 0 on a match and 1 otherwise.
	CompareTo(b []byte) int
}

// Compare reports whether b passes "b op c".
func Compare(op CompareOp, c Comparator, b []byte) bool {
	if op == NoOp || c == nil {
		return false
	}
	return op.Matches(c.CompareTo(b))
}

// BinaryComparator compares bytes lexicographically.
type BinaryComparator struct{ Value []byte }

func (*BinaryComparator) Name() string             { return "BinaryComparator" }
func (c *BinaryComparator) CompareTo(b []byte) int { return bytes.Compare(c.Value, b) }

// BinaryPrefixComparator compares Value with the prefix of b of the same
// length.
type BinaryPrefixComparator struct{ Value []byte }

func (*BinaryPrefixComparator) Name() string { return "BinaryPrefixComparator" }
func (c *BinaryPrefixComparator) CompareTo(b []byte) int {
	if len(b) > len(c.Value) {
		b = b[:len(c.Value)]
	}
	return bytes.Compare(c.Value, b)
}

// SubstringComparator matches values containing Substr, ignoring case (as
// HBase's, which lower-cases both sides).
type SubstringComparator struct{ Substr string }

func (*SubstringComparator) Name() string { return "SubstringComparator" }
func (c *SubstringComparator) CompareTo(b []byte) int {
	if bytes.Contains(bytes.ToLower(b), []byte(strings.ToLower(c.Substr))) {
		return 0
	}
	return 1
}

// RegexStringComparator matches values in which the regular expression
// (Go RE2 syntax) finds a match.
type RegexStringComparator struct {
	Expr string
	re   *regexp.Regexp
	err  error
}

// NewRegexStringComparator compiles expr.
func NewRegexStringComparator(expr string) (*RegexStringComparator, error) {
	c := &RegexStringComparator{Expr: expr}
	if err := c.compile(); err != nil {
		return nil, err
	}
	return c, nil
}

func (c *RegexStringComparator) compile() error {
	if c.re == nil && c.err == nil {
		c.re, c.err = pattern.Compile(c.Expr) // bounded: a client's few bytes could ask for a huge program
		if c.err != nil {
			c.err = fmt.Errorf("filter: bad regular expression: %w", c.err)
		}
	}
	return c.err
}

func (*RegexStringComparator) Name() string { return "RegexStringComparator" }
func (c *RegexStringComparator) CompareTo(b []byte) int {
	if c.compile() != nil {
		return 1
	}
	if c.re.Match(b) {
		return 0
	}
	return 1
}

// LongComparator compares 8-byte big-endian signed integers (values of
// another length compare as greater than the comparator).
type LongComparator struct{ Value int64 }

func (*LongComparator) Name() string { return "LongComparator" }
func (c *LongComparator) CompareTo(b []byte) int {
	if len(b) != 8 {
		return -1
	}
	v := int64(binary.BigEndian.Uint64(b))
	switch {
	case c.Value < v:
		return -1
	case c.Value > v:
		return 1
	}
	return 0
}

// NullComparator matches empty values (CompareTo is 0 for an empty value).
type NullComparator struct{}

func (NullComparator) Name() string { return "NullComparator" }
func (NullComparator) CompareTo(b []byte) int {
	if len(b) == 0 {
		return 0
	}
	return 1
}
