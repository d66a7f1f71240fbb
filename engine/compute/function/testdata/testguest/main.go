// Command testguest is the table function engine/compute/function's tests load: each hook behaves as
// the values it is handed say (docs/functions.md).
package main

import (
	"bytes"
	"encoding/binary"

	"github.com/cellstore/cellstore/engine/compute/function/abi"
	"github.com/cellstore/cellstore/engine/compute/function/guest"
)

var (
	spins  int
	hoard  [][]byte
	prefix = "row"
)

// misbehave does what a value asks for, if it asks for something bad.
func misbehave(v []byte) {
	switch string(v) {
	case "trap":
		panic("asked to trap")
	case "loop":
		for {
			spins++
		}
	case "oom":
		for {
			hoard = append(hoard, make([]byte, 1<<20))
		}
	}
}

func init() {
	guest.OnInit(func(args map[string]string) error {
		if p, ok := args["prefix"]; ok {
			prefix = p
		}
		if args["fail_init"] == "yes" {
			return strconvErr("init refused")
		}
		return nil
	})
	guest.OnPreMutate(func(r *guest.Row) guest.Decision {
		if !bytes.HasPrefix(r.Key, []byte(prefix)) {
			return guest.Drop("rows start with " + prefix)
		}
		var out []abi.Cell
		replace := false
		for _, c := range r.Cells {
			misbehave(c.Value)
			switch string(c.Value) {
			case "refuse":
				return guest.Drop("value refuse refused")
			case "double":
				c.Value = []byte("doubledouble")
				replace = true
			case "extra":
				out = append(out, abi.Cell{Family: c.Family, Qualifier: []byte("extra"), Timestamp: c.Timestamp, Type: abi.TypePut, Value: []byte("added")})
				replace = true
			}
			out = append(out, c)
		}
		if replace {
			return guest.Replace(r.Key, out)
		}
		return guest.Keep()
	})
	guest.OnPostMutate(func(r *guest.Row) {
		for _, c := range r.Cells {
			if string(c.Value) == "posttrap" {
				panic("asked to trap after a write")
			}
		}
	})
	guest.OnFilterRow(func(r *guest.Row) guest.Decision {
		var out []abi.Cell
		replace := false
		for _, c := range r.Cells {
			switch string(c.Value) {
			case "hidden":
				return guest.Drop("")
			case "secret":
				c.Value = []byte("***")
				replace = true
			case "readtrap":
				panic("asked to trap on read")
			}
			out = append(out, c)
		}
		if replace {
			return guest.Replace(r.Key, out)
		}
		return guest.Keep()
	})
	guest.OnFileRow(func(r *guest.Row) guest.Decision {
		keep := make([]bool, len(r.Cells))
		for i, c := range r.Cells {
			keep[i] = string(c.Value) != "garbage"
			if string(c.Value) == "filetrap" {
				panic("asked to trap in a file write")
			}
		}
		return guest.KeepOnly(keep)
	})
	guest.RegisterEndpoint("count", func(arg []byte) (guest.Endpoint, error) {
		return &counter{stopAt: string(arg)}, nil
	})
	guest.RegisterEndpoint("noop", func([]byte) (guest.Endpoint, error) { return noop{}, nil })
}

type strconvErr string

func (e strconvErr) Error() string { return string(e) }

// counter counts rows and cells; it stops after the row named by its argument.
type counter struct {
	rows, cells int
	stopAt      string
}

func (c *counter) Row(r *guest.Row) bool {
	c.rows++
	c.cells += len(r.Cells)
	for _, x := range r.Cells {
		misbehave(x.Value)
	}
	return c.stopAt != "" && string(r.Key) == c.stopAt
}

func (c *counter) End() []byte {
	return binary.LittleEndian.AppendUint64(binary.LittleEndian.AppendUint64(nil, uint64(c.rows)), uint64(c.cells))
}

// noop is handed rows and answers nothing (the cost of handing them over).
type noop struct{}

func (noop) Row(*guest.Row) bool { return false }
func (noop) End() []byte         { return nil }

func main() {}
