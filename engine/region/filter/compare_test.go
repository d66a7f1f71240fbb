package filter

import (
	"strings"
	"testing"
)

// A filter's regular expression is compiled within the pattern package's bounds: a few KiB from a
// client could otherwise make the region server build a program of hundreds of MiB per scan.
func TestRegexComparatorIsBounded(t *testing.T) {
	if _, err := NewRegexStringComparator(strings.Repeat("(?:.?){999}|", 300) + "x"); err == nil || !strings.Contains(err.Error(), "too large") {
		t.Fatalf("a regular expression of a huge program: %v", err)
	}
	c, err := NewRegexStringComparator("(?s)user[0-9]+.*")
	if err != nil {
		t.Fatal(err)
	}
	if c.CompareTo([]byte("user42\nx")) != 0 || c.CompareTo([]byte("admin")) == 0 {
		t.Error("the comparator does not match as the expression says")
	}
}
