package shell

import (
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/cellstore/cellstore/engine/cell"
)

// Binary prints bytes as HBase's Bytes.toStringBinary does: printable ASCII as is, every other
// byte (and the backslash) as \xNN.
func Binary(b []byte) string {
	var s strings.Builder
	for _, c := range b {
		if c >= ' ' && c <= '~' && c != '\\' {
			s.WriteByte(c)
		} else {
			fmt.Fprintf(&s, "\\x%02X", c)
		}
	}
	return s.String()
}

// Text prints a string the store holds for people (a table attribute, a label) as it is, but for
// what a terminal would act on: control characters (escape sequences, carriage returns), invalid
// UTF-8 and the backslash are written \xNN, as Binary writes them.
func Text(v string) string {
	var s strings.Builder
	for i, r := range v {
		switch {
		case r == utf8.RuneError && !strings.HasPrefix(v[i:], "\uFFFD"):
			fmt.Fprintf(&s, "\\x%02X", v[i])
		case r == '\\' || unicode.IsControl(r):
			for _, c := range []byte(string(r)) {
				fmt.Fprintf(&s, "\\x%02X", c)
			}
		default:
			s.WriteRune(r)
		}
	}
	return s.String()
}

// ParseBinary reverses Binary: \xNN escapes become bytes.
func ParseBinary(s string) []byte {
	out := make([]byte, 0, len(s))
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) && s[i+1] == 'x' {
			if v, err := strconv.ParseUint(s[i+2:i+4], 16, 8); err == nil {
				out = append(out, byte(v))
				i += 3
				continue
			}
		}
		out = append(out, s[i])
	}
	return out
}

// cellText is the "column=f:q, timestamp=..., value=..." part of a cell's line.
func cellText(c *cell.Cell, withColumn bool) string {
	var b strings.Builder
	if withColumn {
		fmt.Fprintf(&b, "column=%s:%s, ", Binary(c.Family), Binary(c.Qualifier))
	}
	fmt.Fprintf(&b, "timestamp=%s", formatTimestamp(c.Timestamp))
	if c.Type != cell.Put {
		fmt.Fprintf(&b, ", type=%s", c.Type)
	} else {
		fmt.Fprintf(&b, ", value=%s", Binary(c.Value))
	}
	return b.String()
}

func formatTimestamp(ts int64) string {
	if ts <= 0 || ts == cell.LatestTimestamp {
		return fmt.Sprint(ts)
	}
	return time.UnixMilli(ts).UTC().Format("2006-01-02T15:04:05.000Z")
}

// table prints two columns the way HBase's shell does: a header, then each row indented by one
// space, the second column aligned.
type table struct {
	w      io.Writer
	left   string
	right  string
	width  int
	header bool
}

func newTable(w io.Writer, left, right string) *table {
	return &table{w: w, left: left, right: right, width: 30}
}

func (t *table) row(left, right string) {
	if !t.header {
		fmt.Fprintf(t.w, "%-*s %s\n", t.width, t.left, t.right)
		t.header = true
	}
	fmt.Fprintf(t.w, " %-*s %s\n", t.width-1, left, right)
}

// done prints the header when no row was printed.
func (t *table) done() {
	if !t.header {
		fmt.Fprintf(t.w, "%-*s %s\n", t.width, t.left, t.right)
	}
}
