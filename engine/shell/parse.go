// Package shell is `cellstore shell`: HBase shell verbs (create, put, get, scan, delete, deleteall,
// incr, count, list, describe, alter, disable, enable, drop, truncate, set_quota, list_quotas,
// balancer, move, status) with HBase shell syntax, run interactively with history, with -e, or from
// a script file.
//
// The syntax is the subset of Ruby that HBase shell commands use: a verb followed by
// comma-separated arguments, each a quoted string ('single' or "double", with \ escapes and \xNN
// bytes), an integer, a bare constant (TRUE, FALSE, NONE, THROTTLE, READ, ...), a hash
// {KEY => value, ...} or an array [a, b].
package shell

import (
	"fmt"
	"strconv"
	"strings"
	"unicode/utf8"
)

// Kind is the kind of a Value.
type Kind int

const (
	String Kind = iota
	Int
	Const
	Hash
	Array
)

// Value is one argument.
type Value struct {
	Kind Kind
	Str  string // String and Const
	Int  int64
	Keys []string // Hash, in order, upper-cased (HBase's keys are constants: TTL, NAME)
	// RawKeys are a Hash's keys as written (user names in an ACL are not constants).
	RawKeys []string
	Map     map[string]Value
	Items   []Value // Array
}

func (v Value) String() string {
	switch v.Kind {
	case String:
		return strconv.Quote(v.Str)
	case Int:
		return strconv.FormatInt(v.Int, 10)
	case Const:
		return v.Str
	case Hash:
		parts := make([]string, len(v.Keys))
		for i, k := range v.Keys {
			parts[i] = k + " => " + v.Map[k].String()
		}
		return "{" + strings.Join(parts, ", ") + "}"
	default:
		parts := make([]string, len(v.Items))
		for i, it := range v.Items {
			parts[i] = it.String()
		}
		return "[" + strings.Join(parts, ", ") + "]"
	}
}

// Text is the value as text: strings and constants as they are, integers in decimal.
func (v Value) Text() string {
	if v.Kind == Int {
		return strconv.FormatInt(v.Int, 10)
	}
	return v.Str
}

// Command is a parsed line.
type Command struct {
	Verb string
	Args []Value
}

// SyntaxError says where a line stopped making sense.
type SyntaxError struct {
	Pos int
	Msg string
}

func (e *SyntaxError) Error() string {
	return fmt.Sprintf("syntax error at column %d: %s", e.Pos+1, e.Msg)
}

// Parse reads one command. An empty or comment line gives a Command with an empty verb.
func Parse(line string) (Command, error) {
	p := &parser{s: line}
	p.space()
	if p.eof() || p.peek() == '#' {
		return Command{}, nil
	}
	verb := p.word()
	if verb == "" {
		return Command{}, p.errorf("expected a command name")
	}
	cmd := Command{Verb: verb}
	p.space()
	for !p.eof() && p.peek() != '#' {
		start := p.pos
		v, err := p.value()
		if err != nil {
			return Command{}, err
		}
		p.space()
		if strings.HasPrefix(p.s[p.pos:], "=>") {
			// Ruby's trailing hash without braces: set_quota TYPE => THROTTLE, USER => 'u'.
			p.pos = start
			h, err := p.hashBody(func() bool { return p.eof() || p.peek() == '#' })
			if err != nil {
				return Command{}, err
			}
			cmd.Args = append(cmd.Args, h)
			break
		}
		cmd.Args = append(cmd.Args, v)
		if p.eof() || p.peek() == '#' {
			break
		}
		if p.peek() != ',' {
			return Command{}, p.errorf("expected ',' between arguments")
		}
		p.pos++
		p.space()
		if p.eof() {
			return Command{}, p.errorf("expected an argument after ','")
		}
	}
	return cmd, nil
}

type parser struct {
	s   string
	pos int
}

func (p *parser) eof() bool  { return p.pos >= len(p.s) }
func (p *parser) peek() byte { return p.s[p.pos] }

func (p *parser) errorf(format string, a ...any) error {
	return &SyntaxError{Pos: p.pos, Msg: fmt.Sprintf(format, a...)}
}

func (p *parser) space() {
	for !p.eof() && (p.peek() == ' ' || p.peek() == '\t' || p.peek() == '\r' || p.peek() == '\n') {
		p.pos++
	}
}

func isWordByte(c byte) bool {
	return c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
}

func (p *parser) word() string {
	start := p.pos
	for !p.eof() && isWordByte(p.peek()) {
		p.pos++
	}
	return p.s[start:p.pos]
}

func (p *parser) value() (Value, error) {
	if p.eof() {
		return Value{}, p.errorf("expected a value")
	}
	switch c := p.peek(); {
	case c == '\'' || c == '"':
		s, err := p.quoted()
		return Value{Kind: String, Str: s}, err
	case c == '{':
		return p.hash()
	case c == '[':
		return p.array()
	case c == '-' || c >= '0' && c <= '9':
		start := p.pos
		p.pos++
		for !p.eof() && (p.peek() >= '0' && p.peek() <= '9' || p.peek() == '_') {
			p.pos++
		}
		n, err := strconv.ParseInt(strings.ReplaceAll(p.s[start:p.pos], "_", ""), 10, 64)
		if err != nil {
			return Value{}, &SyntaxError{Pos: start, Msg: fmt.Sprintf("bad number %q", p.s[start:p.pos])}
		}
		return Value{Kind: Int, Int: n}, nil
	case isWordByte(c):
		w := p.word()
		// Ruby constants such as org.apache.hadoop.hbase...: accept dotted names.
		for !p.eof() && p.peek() == '.' {
			p.pos++
			w += "." + p.word()
		}
		return Value{Kind: Const, Str: w}, nil
	default:
		// The whole character (a UTF-8 sequence), or the byte as \xNN: %q of the byte c would
		// print its Latin-1 reading (the first byte of "é" as 'Ã').
		r, _ := utf8.DecodeRuneInString(p.s[p.pos:])
		if r == utf8.RuneError {
			return Value{}, p.errorf(`unexpected '\x%02x' (not UTF-8)`, c)
		}
		return Value{}, p.errorf("unexpected %q", r)
	}
}

func (p *parser) quoted() (string, error) {
	q := p.peek()
	start := p.pos
	p.pos++
	var b strings.Builder
	for {
		if p.eof() {
			return "", &SyntaxError{Pos: start, Msg: "unterminated string"}
		}
		c := p.peek()
		p.pos++
		switch {
		case c == q:
			return b.String(), nil
		case c == '\\' && !p.eof():
			e := p.peek()
			p.pos++
			switch {
			case q == '\'' && e != '\'' && e != '\\':
				// Ruby single quotes keep other backslashes as they are.
				b.WriteByte('\\')
				b.WriteByte(e)
			case e == 'n' && q == '"':
				b.WriteByte('\n')
			case e == 't' && q == '"':
				b.WriteByte('\t')
			case e == 'x' && q == '"':
				if p.pos+2 > len(p.s) {
					return "", p.errorf("\\x needs two hex digits")
				}
				n, err := strconv.ParseUint(p.s[p.pos:p.pos+2], 16, 8)
				if err != nil {
					return "", p.errorf("bad \\x escape %q", p.s[p.pos:p.pos+2])
				}
				b.WriteByte(byte(n))
				p.pos += 2
			default:
				b.WriteByte(e)
			}
		default:
			b.WriteByte(c)
		}
	}
}

func (p *parser) hash() (Value, error) {
	p.pos++ // {
	v, err := p.hashBody(func() bool { return !p.eof() && p.peek() == '}' })
	if err != nil {
		return Value{}, err
	}
	if p.eof() {
		return Value{}, p.errorf("unterminated '{'")
	}
	p.pos++ // }
	return v, nil
}

// hashBody reads KEY => value pairs separated by commas until end() holds (not consumed).
func (p *parser) hashBody(end func() bool) (Value, error) {
	v := Value{Kind: Hash, Map: map[string]Value{}}
	for {
		p.space()
		if end() {
			return v, nil
		}
		if p.eof() {
			return Value{}, p.errorf("unterminated '{'")
		}
		keyPos := p.pos
		k, err := p.value()
		if err != nil {
			return Value{}, err
		}
		if k.Kind != String && k.Kind != Const {
			return Value{}, &SyntaxError{Pos: keyPos, Msg: "a hash key must be a name or a string"}
		}
		p.space()
		if !strings.HasPrefix(p.s[p.pos:], "=>") {
			return Value{}, p.errorf("expected '=>' after %s", k.Str)
		}
		p.pos += 2
		p.space()
		val, err := p.value()
		if err != nil {
			return Value{}, err
		}
		key := strings.ToUpper(k.Str)
		if _, dup := v.Map[key]; dup {
			return Value{}, &SyntaxError{Pos: keyPos, Msg: "duplicate key " + key}
		}
		v.Keys = append(v.Keys, key)
		v.RawKeys = append(v.RawKeys, k.Str)
		v.Map[key] = val
		p.space()
		if !p.eof() && p.peek() == ',' {
			p.pos++
		} else if !end() {
			return Value{}, p.errorf("expected ',' or the end of the hash")
		}
	}
}

func (p *parser) array() (Value, error) {
	p.pos++ // [
	v := Value{Kind: Array}
	for {
		p.space()
		if p.eof() {
			return Value{}, p.errorf("unterminated '['")
		}
		if p.peek() == ']' {
			p.pos++
			return v, nil
		}
		it, err := p.value()
		if err != nil {
			return Value{}, err
		}
		v.Items = append(v.Items, it)
		p.space()
		if !p.eof() && p.peek() == ',' {
			p.pos++
		} else if !p.eof() && p.peek() != ']' {
			return Value{}, p.errorf("expected ',' or ']' in an array")
		}
	}
}
