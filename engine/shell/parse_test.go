package shell

import (
	"errors"
	"math"
	"strings"
	"testing"
)

func TestParse(t *testing.T) {
	cases := map[string]string{
		`create 't1', 'f1', {NAME => 'f2', VERSIONS => 3}`:                    `create ["t1", "f1", {NAME => "f2", VERSIONS => 3}]`,
		`put 'ns:t', "r\x001", 'f:q', 'it''s'`:                                `put ["ns:t" "r\x001" "f:q" "it" "s"]`,
		`scan 't', {STARTROW => 'a', LIMIT => 10, COLUMNS => ['f:a', 'f:b']}`: `scan ["t", {STARTROW => "a", LIMIT => 10, COLUMNS => ["f:a", "f:b"]}]`,
		`set_quota TYPE => THROTTLE, USER => 'u', LIMIT => '10req/sec'`:       `set_quota [{TYPE => THROTTLE, USER => "u", LIMIT => "10req/sec"}]`,
		`list`:          `list []`,
		`  # a comment`: `[]`,
		`get 't', 'r', {TIMERANGE => [1, 2], CONSISTENCY => 'TIMELINE'} # trailing`: `get ["t", "r", {TIMERANGE => [1, 2], CONSISTENCY => "TIMELINE"}]`,
		`incr 't', 'r', 'f:c', -5`:                                               `incr ["t", "r", "f:c", -5]`,
		`put 't', 'r', 'f:q', 'a\'b\\c\d'`:                                       `put ["t", "r", "f:q", "a'b\\c\\d"]`,
		`get 't', 'r', {FILTER => org.apache.hadoop.hbase.filter.KeyOnlyFilter}`: `get ["t", "r", {FILTER => org.apache.hadoop.hbase.filter.KeyOnlyFilter}]`,
	}
	for in, want := range cases {
		cmd, err := Parse(in)
		if in == `put 'ns:t', "r\x001", 'f:q', 'it''s'` {
			// Ruby juxtaposes 'it''s' into "its"; we reject it as a missing comma instead.
			if err == nil {
				t.Errorf("%s: accepted juxtaposed strings", in)
			}
			continue
		}
		if err != nil {
			t.Errorf("%s: %v", in, err)
			continue
		}
		got := cmd.Verb
		if got != "" || len(cmd.Args) > 0 {
			got += " " + Value{Kind: Array, Items: cmd.Args}.String()
		} else {
			got = Value{Kind: Array}.String()
		}
		if got != want {
			t.Errorf("%s\n got %s\nwant %s", in, got, want)
		}
	}
}

func TestParseErrors(t *testing.T) {
	for _, in := range []string{
		`put 't' 'r'`, `get 't',`, `scan 't', {STARTROW 'a'}`, `create 't', {NAME => 'f'`, `put 'unterminated`,
		`get 't', [1, 2`, `x {A => 1, A => 2}`, `get 't', "\xZZ"`, `put 't', @`, `get 't', 99999999999999999999`,
	} {
		_, err := Parse(in)
		var se *SyntaxError
		if !errors.As(err, &se) {
			t.Errorf("%q: want a syntax error, got %v", in, err)
		}
	}
}

func FuzzParse(f *testing.F) {
	for _, s := range []string{`create 't1', 'f1', {NAME => 'f2'}`, `scan 't', {COLUMNS => ['a']}`, `put "a\x00", 1`, `{`, `'`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) { _, _ = Parse(s) })
}

// An unexpected character is shown as itself (UTF-8), an invalid byte as \xNN: never the Latin-1
// reading of a byte ("é" is two bytes; the first, 0xC3, read as Latin-1 is 'Ã').
func TestParseErrorsRenderUTF8(t *testing.T) {
	for in, want := range map[string]string{
		"get 't', é":     "unexpected 'é'",
		"get 't', \xe9x": `unexpected '\xe9' (not UTF-8)`,
		"get 't', 日本":    "unexpected '日'",
	} {
		_, err := Parse(in)
		if err == nil || !strings.Contains(err.Error(), want) || strings.Contains(err.Error(), "Ã") {
			t.Errorf("%q: want %q in the error, got %v", in, want, err)
		}
	}
}

// Hash keys are constants (upper-cased) but keep their written form for ACLs, whose keys are
// user names.
func TestHashRawKeys(t *testing.T) {
	cmd, err := Parse(`put 't', 'r', 'f:q', 'v', {ACL => {'Dave' => 'RW', '@ops' => 'R'}}`)
	if err != nil {
		t.Fatal(err)
	}
	h := cmd.Args[4].Map["ACL"]
	acl, err := cellACL(h)
	if err != nil {
		t.Fatal(err)
	}
	if len(acl) != 2 || acl["Dave"].String() != "RW" || acl["@ops"].String() != "R" {
		t.Fatalf("ACL %v: want Dave RW, @ops R (names as written)", acl)
	}
	if _, err := cellACL(Value{Kind: Hash, Keys: []string{"X"}, RawKeys: []string{"x"}, Map: map[string]Value{"X": {Kind: String, Str: "Q"}}}); err == nil {
		t.Error("a bad permission letter was accepted")
	}
}

// TIMERANGE [t, t] is empty (as in HBase's shell): sent as a range past every timestamp, since a
// To of 0 means unbounded.
func TestEmptyTimeRange(t *testing.T) {
	for _, line := range []string{`get 't', 'r', {TIMERANGE => [5, 5]}`, `get 't', 'r', {TIMERANGE => [0, 0]}`} {
		cmd, err := Parse(line)
		if err != nil {
			t.Fatal(err)
		}
		tr, err := timeRange(cmd.Args[2].Map["TIMERANGE"])
		if err != nil || tr.GetFrom() != math.MaxInt64 || tr.GetTo() != math.MaxInt64 {
			t.Errorf("%s: %v, %v; want [MaxInt64, MaxInt64)", line, tr, err)
		}
	}
}
