// Command firstsource is an example table function (docs/functions.md): Bloomberg's "find the
// first source for this row that matches", moved into the region servers. Each row (say, a
// security) has a column per data source in family s; the table's sources argument lists them
// by priority ("exchange,vendor1,vendor2"). The endpoint "first" answers, for every row, the
// first source in that order whose value starts with the call's argument (empty: any value), as
// lines "row<TAB>source<TAB>value"; rows without one are left out. Regions answer in row order,
// so the client's concatenation is the whole answer.
//
// Build: GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared -o firstsource.wasm .
package main

import (
	"bytes"
	"errors"
	"strings"

	"github.com/cellstore/cellstore/engine/compute/function/abi"
	"github.com/cellstore/cellstore/engine/compute/function/guest"
)

var (
	family  = []byte("s")
	sources [][]byte
)

func init() {
	guest.OnInit(func(args map[string]string) error {
		sources = nil
		for _, s := range strings.Split(args["sources"], ",") {
			if s = strings.TrimSpace(s); s != "" {
				sources = append(sources, []byte(s))
			}
		}
		if len(sources) == 0 {
			return errors.New("firstsource needs the sources argument: the source columns by priority, comma-separated")
		}
		return nil
	})
	guest.RegisterEndpoint("first", func(arg []byte) (guest.Endpoint, error) {
		return &first{prefix: bytes.Clone(arg)}, nil
	})
}

type first struct {
	prefix []byte
	out    []byte
}

func (f *first) Row(r *guest.Row) bool {
	for _, src := range sources {
		// The newest value of the source's column (cells of a column come newest first).
		for i := range r.Cells {
			c := &r.Cells[i]
			if c.Type != abi.TypePut || !bytes.Equal(c.Family, family) || !bytes.Equal(c.Qualifier, src) {
				continue
			}
			if bytes.HasPrefix(c.Value, f.prefix) {
				f.out = append(append(append(append(append(append(f.out, r.Key...), '\t'), src...), '\t'), c.Value...), '\n')
				return false
			}
			break
		}
	}
	return false
}

func (f *first) End() []byte { return f.out }

func main() {}
