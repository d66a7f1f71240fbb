package shell

import (
	"context"
	"fmt"
	"os"
	"strings"

	pb "github.com/cellstore/cellstore/engine/api/cellstore/v1"
)

// Table functions (docs/functions.md): alter 't', FUNCTION => {...} loads one, METHOD =>
// 'function_unset' removes it, call_function runs an endpoint.

// alterFunction adds (or replaces) the function a FUNCTION hash describes.
func alterFunction(td *pb.TableDescriptor, v Value) error {
	if v.Kind != Hash {
		return usage("FUNCTION takes a hash: {NAME => 'fn', FILE => 'module.wasm', ...}")
	}
	f := &pb.TableFunction{}
	for _, k := range v.Keys {
		x := v.Map[k]
		var err error
		switch k {
		case "NAME":
			f.Name = x.Text()
		case "FILE":
			if f.Module, err = os.ReadFile(x.Text()); err != nil {
				return fmt.Errorf("reading the function's module: %w", err)
			}
		case "MEMORY_MB":
			f.MemoryMb, err = int32Of(x, k)
		case "TIMEOUT_MS":
			f.TimeoutMs, err = int32Of(x, k)
		case "MAX_FAILURES":
			f.MaxFailures, err = int32Of(x, k)
		case "ARGS":
			if x.Kind != Hash {
				return usage("ARGS takes a hash of strings: {'key' => 'value'}")
			}
			f.Args = map[string]string{}
			for i, rk := range x.RawKeys {
				f.Args[rk] = x.Map[x.Keys[i]].Text()
			}
		default:
			return usage("unknown FUNCTION setting %s (NAME, FILE, MEMORY_MB, TIMEOUT_MS, MAX_FAILURES, ARGS)", k)
		}
		if err != nil {
			return err
		}
	}
	if f.Name == "" {
		return usage("FUNCTION needs a NAME")
	}
	var kept []*pb.TableFunction
	for _, g := range td.Functions {
		if g.Name == f.Name {
			if len(f.Module) == 0 { // new settings for the module loaded before
				f.Sha256 = g.Sha256
			}
			continue
		}
		kept = append(kept, g)
	}
	if len(f.Module) == 0 && len(f.Sha256) == 0 {
		return usage("FUNCTION %s needs a FILE (its WebAssembly module)", f.Name)
	}
	td.Functions = append(kept, f)
	return nil
}

func unsetFunction(td *pb.TableDescriptor, name string) error {
	for i, g := range td.Functions {
		if g.Name == name {
			td.Functions = append(td.Functions[:i], td.Functions[i+1:]...)
			return nil
		}
	}
	return fmt.Errorf("the table has no function %q", name)
}

func (s *Shell) callFunction(ctx context.Context, args []Value) error {
	t, err := str(args, 0, "table")
	if err != nil {
		return err
	}
	fn, err := str(args, 1, "function")
	if err != nil {
		return err
	}
	ep, err := str(args, 2, "endpoint")
	if err != nil {
		return err
	}
	var arg []byte
	rest := args[3:]
	if len(rest) > 0 && rest[0].Kind == String {
		arg, rest = []byte(rest[0].Str), rest[1:]
	}
	h, err := optHash(rest, 0)
	if err != nil {
		return err
	}
	var bad error
	sc, err := scanFromHash(h, "call_function", func(k string, v Value) bool {
		switch k {
		case "LIMIT", "REVERSED", "RAW":
			bad = usage("call_function scans forward, not raw, with no row limit: it does not take %s", k)
			return true
		}
		return false
	})
	if err != nil {
		return err
	}
	if bad != nil {
		return bad
	}
	res, err := s.Client.Table(t).CallFunction(ctx, sc, fn, ep, arg)
	if err != nil {
		return err
	}
	tb := newTable(s.Out, "REGION (ROWS)", "OUTPUT")
	var rows int64
	for _, r := range res {
		rows += r.Rows
		out := string(r.Output)
		if !printableText(r.Output) {
			out = Binary(r.Output)
		}
		tb.row(fmt.Sprintf("%s (%d)", r.Region, r.Rows), out)
	}
	tb.done()
	fmt.Fprintf(s.Out, "%d call(s), %d row(s)\n", len(res), rows)
	return nil
}

func printableText(b []byte) bool {
	return strings.IndexFunc(string(b), func(r rune) bool { return r < 0x20 && r != '\n' && r != '\t' || r == 0xfffd || r == 0x7f }) < 0
}
