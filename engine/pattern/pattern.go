// Package pattern compiles the regular expressions clients give to list things (tables,
// snapshots, labels) with bounds: a pattern of a few bytes can ask for a program of millions of
// instructions (nested counted repetitions), which Go's regexp would build — hundreds of MiB —
// and then run over every name.
package pattern

import (
	"fmt"
	"regexp"
	"regexp/syntax"
)

// Bounds of a pattern: its length in bytes, and the size of what it compiles to (counted
// repetitions multiply what they repeat). Listings' patterns need tens of instructions.
const (
	MaxLength = 4096
	MaxSize   = 2000
)

// Compile compiles p (RE2 syntax, as Go's regexp) within the bounds.
func Compile(p string) (*regexp.Regexp, error) {
	if err := check(p); err != nil {
		return nil, err
	}
	return regexp.Compile(p)
}

// check parses p and refuses it past the bounds, before anything is compiled.
func check(p string) error {
	if len(p) > MaxLength {
		return fmt.Errorf("the pattern is %d bytes long, more than %d", len(p), MaxLength)
	}
	re, err := syntax.Parse(p, syntax.Perl)
	if err != nil {
		return fmt.Errorf("pattern %s is not a regular expression: %w", quote(p), err)
	}
	if n := size(re); n > MaxSize {
		return fmt.Errorf("pattern %s is too large: it would compile to more than %d instructions (counted repetitions such as {1000} multiply what they repeat); give a simpler one", quote(p), MaxSize)
	}
	return nil
}

// quote quotes p for an error, its first 100 bytes.
func quote(p string) string {
	if len(p) > 100 {
		return fmt.Sprintf("%q… (%d bytes)", p[:100], len(p))
	}
	return fmt.Sprintf("%q", p)
}

// Whole compiles p to match whole names only (HBase's Pattern.matches); nil for "".
func Whole(p string) (*regexp.Regexp, error) {
	if p == "" {
		return nil, nil
	}
	if err := check(p); err != nil { // (p alone: the anchors cannot close its groups)
		return nil, err
	}
	return regexp.Compile("^(?:" + p + ")$")
}

// size estimates the instructions re compiles to, from above (a node costs up to three: a
// capture's two saves and an alternation's split; a repetition's copies each add a split),
// saturating past MaxSize.
func size(re *syntax.Regexp) int {
	n := 3
	switch re.Op {
	case syntax.OpLiteral:
		n = len(re.Rune)
	case syntax.OpRepeat:
		times := re.Max
		if times < 0 {
			times = re.Min + 1
		}
		sub := size(re.Sub[0]) + 2
		if times > 0 && sub > MaxSize/times {
			return MaxSize + 1
		}
		n += times * sub
	default:
		for _, s := range re.Sub {
			n += size(s)
			if n > MaxSize {
				return MaxSize + 1
			}
		}
	}
	return min(n, MaxSize+1)
}
