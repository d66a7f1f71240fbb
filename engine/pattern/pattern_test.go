package pattern

import (
	"regexp"
	"regexp/syntax"
	"strings"
	"testing"
)

// Patterns people list with compile and match as Go's regexp does; patterns that would compile
// to huge programs (a few bytes asking for millions of instructions) or are too long are refused
// with an error that says so, before anything is built.
func TestCompileBounds(t *testing.T) {
	for _, p := range []string{"t.*", "ns:.*", "usertable[0-9]+", "(a|b){3,10}", "x{500}", `\w+_(?:v\d+)?`} {
		re, err := Compile(p)
		if err != nil {
			t.Fatalf("%q: %v", p, err)
		}
		if re.String() != regexp.MustCompile(p).String() {
			t.Errorf("%q compiled as %q", p, re.String())
		}
	}
	for _, p := range []string{"(?:(?:.?){1000}){1000}", "(?:a{1000}){1000}", "((x{10}){10}){10}", strings.Repeat("(?:.?){999}|", 300) + "x", strings.Repeat("a", MaxLength+1), "(", "a{2,1}"} {
		if _, err := Compile(p); err == nil {
			t.Errorf("%.40q compiled", p)
		} else if len(err.Error()) > 400 {
			t.Errorf("%.40q: an error of %d bytes", p, len(err.Error()))
		}
	}
	if re, err := Whole("t1|t2"); err != nil || !re.MatchString("t2") || re.MatchString("t12") {
		t.Errorf("Whole(t1|t2): %v, %v", re, err)
	}
	if re, err := Whole(""); re != nil || err != nil {
		t.Errorf("Whole(\"\"): %v, %v", re, err)
	}
}

// size bounds the compiled program from above for the patterns it accepts.
func TestSizeBoundsTheProgram(t *testing.T) {
	for _, p := range []string{"t.*", "(a|b){3,10}", "x{500}", "(ab){5,}", "([a-c]|d?|e*){4}(f|g)+", "[a-z]+@[a-z]+\\.com", "(?:(?:a?){10}){10}", "(?i)hello|world"} {
		re, err := syntax.Parse(p, syntax.Perl)
		if err != nil {
			t.Fatal(err)
		}
		est := size(re)
		prog, err := syntax.Compile(re.Simplify())
		if err != nil {
			t.Fatal(err)
		}
		if len(prog.Inst) > est+2 { // (the program's fail and match instructions)
			t.Errorf("%q: estimated %d, compiles to %d instructions", p, est, len(prog.Inst))
		}
	}
}
