package cell

import (
	"bytes"
	"encoding/hex"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/cockroachdb/datadriven"
)

var typeByName = map[string]Type{
	"Minimum": Minimum, "Put": Put, "Delete": Delete, "DeleteFamilyVersion": DeleteFamilyVersion,
	"DeleteColumn": DeleteColumn, "DeleteFamily": DeleteFamily, "Maximum": Maximum,
}

// parseKeySpec parses one line of a key test case:
//
//	ROW/FAMILY:QUALIFIER/TS/TYPE       a key (TS may be "latest" or "oldest")
//	first-on-row ROW
//	last-on-row ROW
//	first-on-family ROW FAMILY
//	first-on-column ROW FAMILY QUALIFIER
//	last-on-column ROW FAMILY QUALIFIER
//	at-ts ROW FAMILY QUALIFIER TS
//
// "-" stands for an empty field and \xNN escapes are accepted.
func parseKeySpec(line string) ([]byte, error) {
	f := strings.Fields(line)
	arg := func(i int) []byte {
		if i >= len(f) || f[i] == "-" {
			return nil
		}
		s, err := strconv.Unquote(`"` + f[i] + `"`)
		if err != nil {
			return []byte(f[i])
		}
		return []byte(s)
	}
	switch f[0] {
	case "first-on-row":
		return AppendFirstOnRow(nil, arg(1)), nil
	case "last-on-row":
		return AppendLastOnRow(nil, arg(1)), nil
	case "first-on-family":
		return AppendFirstOnRowFamily(nil, arg(1), arg(2)), nil
	case "first-on-column":
		return AppendFirstOnColumn(nil, arg(1), arg(2), arg(3)), nil
	case "last-on-column":
		return AppendLastOnColumn(nil, arg(1), arg(2), arg(3)), nil
	case "at-ts":
		ts, err := parseTS(f[4])
		if err != nil {
			return nil, err
		}
		return AppendFirstOnColumnAtTimestamp(nil, arg(1), arg(2), arg(3), ts), nil
	}
	parts := strings.Split(line, "/")
	if len(parts) != 4 {
		return nil, fmt.Errorf("bad key %q", line)
	}
	fam, qual, ok := strings.Cut(parts[1], ":")
	if !ok {
		return nil, fmt.Errorf("bad column %q", parts[1])
	}
	ts, err := parseTS(parts[2])
	if err != nil {
		return nil, err
	}
	typ, ok := typeByName[parts[3]]
	if !ok {
		n, err := strconv.Atoi(parts[3])
		if err != nil {
			return nil, fmt.Errorf("bad type %q", parts[3])
		}
		typ = Type(n)
	}
	unq := func(s string) []byte {
		if u, err := strconv.Unquote(`"` + s + `"`); err == nil {
			return []byte(u)
		}
		return []byte(s)
	}
	return AppendKey(nil, unq(parts[0]), unq(fam), unq(qual), ts, typ), nil
}

func parseTS(s string) (int64, error) {
	switch s {
	case "latest":
		return LatestTimestamp, nil
	case "oldest":
		return OldestTimestamp, nil
	}
	return strconv.ParseInt(s, 10, 64)
}

func TestDataDriven(t *testing.T) {
	datadriven.RunTest(t, "testdata/keys", func(t *testing.T, d *datadriven.TestData) string {
		var keys [][]byte
		var lines []string
		for _, line := range strings.Split(strings.TrimSpace(d.Input), "\n") {
			if line = strings.TrimSpace(line); line == "" {
				continue
			}
			k, err := parseKeySpec(line)
			if err != nil {
				d.Fatalf(t, "%v", err)
			}
			keys = append(keys, k)
			lines = append(lines, line)
		}
		var out strings.Builder
		switch d.Cmd {
		case "encode":
			for _, k := range keys {
				fmt.Fprintf(&out, "%s\n", hex.EncodeToString(k))
				if _, err := ParseKey(k); err != nil {
					fmt.Fprintf(&out, "  parse: %v\n", err)
				} else {
					fmt.Fprintf(&out, "  %s\n", Key(k))
				}
			}
		case "compare":
			if len(keys) != 2 {
				d.Fatalf(t, "compare needs two keys")
			}
			fmt.Fprintf(&out, "%s\n", map[int]string{-1: "<", 0: "=", 1: ">"}[Compare(keys[0], keys[1])])
		case "sort":
			idx := make([]int, len(keys))
			for i := range idx {
				idx[i] = i
			}
			slices.SortStableFunc(idx, func(a, b int) int { return Compare(keys[a], keys[b]) })
			for _, i := range idx {
				fmt.Fprintf(&out, "%s\n", lines[i])
			}
		case "validate":
			var rowLen, famLen, qualLen, valLen, max int
			var ts int64
			typ := "Put"
			for _, name := range []string{"row", "family", "qualifier", "value", "max", "ts", "type"} {
				if !d.HasArg(name) {
					continue
				}
				switch name {
				case "row":
					d.ScanArgs(t, name, &rowLen)
				case "family":
					d.ScanArgs(t, name, &famLen)
				case "qualifier":
					d.ScanArgs(t, name, &qualLen)
				case "value":
					d.ScanArgs(t, name, &valLen)
				case "max":
					d.ScanArgs(t, name, &max)
				case "ts":
					d.ScanArgs(t, name, &ts)
				case "type":
					d.ScanArgs(t, name, &typ)
				}
			}
			tv, ok := typeByName[typ]
			if !ok {
				n, _ := strconv.Atoi(typ)
				tv = Type(n)
			}
			err := Validate(bytes.Repeat([]byte{'r'}, rowLen), bytes.Repeat([]byte{'f'}, famLen),
				bytes.Repeat([]byte{'q'}, qualLen), ts, tv, make([]byte, valLen), max)
			if err != nil {
				return err.Error() + "\n"
			}
			return "ok\n"
		default:
			d.Fatalf(t, "unknown command %s", d.Cmd)
		}
		return out.String()
	})
}
