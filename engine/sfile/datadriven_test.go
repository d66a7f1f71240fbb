package sfile

import (
	"bytes"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/datadriven"

	"github.com/cellstore/cellstore/engine/cell"
	"github.com/cellstore/cellstore/engine/storage"
)

var ddTypes = map[string]cell.Type{
	"Minimum": cell.Minimum, "Put": cell.Put, "Delete": cell.Delete, "DeleteFamilyVersion": cell.DeleteFamilyVersion,
	"DeleteColumn": cell.DeleteColumn, "DeleteFamily": cell.DeleteFamily, "Maximum": cell.Maximum,
}

// ddKey parses ROW/FAMILY:QUALIFIER/TS/TYPE (TS may be latest or oldest),
// "first-on-row:ROW" or "last-on-row:ROW".
func ddKey(t *testing.T, s string) cell.Key {
	t.Helper()
	if r, ok := strings.CutPrefix(s, "first-on-row:"); ok {
		return cell.AppendFirstOnRow(nil, []byte(r))
	}
	if r, ok := strings.CutPrefix(s, "last-on-row:"); ok {
		return cell.AppendLastOnRow(nil, []byte(r))
	}
	parts := strings.Split(s, "/")
	if len(parts) != 4 {
		t.Fatalf("bad key %q: want ROW/FAMILY:QUALIFIER/TS/TYPE", s)
	}
	fam, qual, _ := strings.Cut(parts[1], ":")
	var ts int64
	switch parts[2] {
	case "latest":
		ts = cell.LatestTimestamp
	case "oldest":
		ts = cell.OldestTimestamp
	default:
		var err error
		if ts, err = strconv.ParseInt(parts[2], 10, 64); err != nil {
			t.Fatalf("bad timestamp in %q", s)
		}
	}
	typ, ok := ddTypes[parts[3]]
	if !ok {
		t.Fatalf("bad type in %q", s)
	}
	return mkKey(parts[0], fam, qual, ts, typ)
}

// ddCells parses input lines "KEY [seq=N] [value=V]".
func ddCells(t *testing.T, input string) []tcell {
	var cells []tcell
	for _, line := range strings.Split(strings.TrimSpace(input), "\n") {
		f := strings.Fields(line)
		if len(f) == 0 {
			continue
		}
		c := tcell{key: ddKey(t, f[0])}
		for _, a := range f[1:] {
			k, v, _ := strings.Cut(a, "=")
			switch k {
			case "seq":
				n, err := strconv.ParseUint(v, 10, 64)
				if err != nil {
					t.Fatal(err)
				}
				c.seq = n
			case "value":
				c.value = []byte(v)
			case "value-len":
				n, _ := strconv.Atoi(v)
				c.value = bytes.Repeat([]byte{'x'}, n)
			default:
				t.Fatalf("bad cell attribute %q", a)
			}
		}
		cells = append(cells, c)
	}
	return cells
}

func ddCell(s cell.Scanner) string {
	v := s.Value()
	if len(v) > 16 {
		return fmt.Sprintf("%v seq=%d value=%q...(%d bytes)", s.Key(), s.Seq(), v[:16], len(v))
	}
	return fmt.Sprintf("%v seq=%d value=%q", s.Key(), s.Seq(), v)
}

func ddWriterOptions(t *testing.T, d *datadriven.TestData) WriterOptions {
	var o WriterOptions
	for _, a := range d.CmdArgs {
		if len(a.Vals) != 1 {
			continue
		}
		v := a.Vals[0]
		var err error
		n, _ := strconv.Atoi(v)
		switch a.Key {
		case "encoding":
			o.Encoding, err = ParseEncoding(v)
		case "compression":
			o.Compression, err = ParseCompression(v)
		case "bloom":
			o.Bloom, err = ParseBloomType(v)
		case "block-size":
			o.BlockSize = n
		case "index-block-size":
			o.IndexBlockSize = n
		case "bloom-block-size":
			o.BloomBlockSize = n
		case "restart-interval":
			o.RestartInterval = n
		default:
			t.Fatalf("%s: unknown argument %s", d.Pos, a.Key)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	return o
}

// TestDataDriven runs the scripts in testdata/datadriven: encodings (the
// bytes of each encoding), scan (seeks and reversed navigation) and dump
// (Dump's output).
func TestDataDriven(t *testing.T) {
	datadriven.Walk(t, "testdata/datadriven", func(t *testing.T, path string) {
		fs := storage.NewMem()
		var r *Reader
		defer func() {
			if r != nil {
				r.Close()
			}
		}()
		files := 0
		datadriven.RunTest(t, path, func(t *testing.T, d *datadriven.TestData) string {
			switch d.Cmd {
			case "encode":
				o := ddWriterOptions(t, d)
				b := blockBuilder{enc: o.Encoding, interval: max(o.RestartInterval, 1)}
				for _, c := range ddCells(t, d.Input) {
					b.add(c.key, c.value, uint32(len(c.value)), c.seq)
				}
				payload := b.finish()
				var v validator
				if reason := validateDataBlock(payload, &v); reason != "" {
					t.Fatal(reason)
				}
				var out strings.Builder
				var it blockIter
				it.init(payload)
				for o := 0; o < it.end; o = it.next {
					it.decode(o)
					fmt.Fprintf(&out, "%3d: % x\n     %v seq=%d\n", o, payload[o:it.next], cell.Key(it.key), it.seq)
				}
				fmt.Fprintf(&out, "%3d: % x (restarts, count, encoding)\n", it.end, payload[it.end:])
				return out.String()

			case "build":
				o := ddWriterOptions(t, d)
				files++
				name := fmt.Sprintf("f%d", files)
				f, err := fs.Create(name)
				if err != nil {
					t.Fatal(err)
				}
				w, err := NewWriter(f, o)
				if err != nil {
					t.Fatal(err)
				}
				w.now = func() time.Time { return time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC) }
				for _, c := range ddCells(t, d.Input) {
					if err := w.Append(c.key, c.value, c.seq); err != nil {
						w.Abort()
						return err.Error()
					}
				}
				m, err := w.Finish()
				if err != nil {
					t.Fatal(err)
				}
				if r != nil {
					r.Close()
				}
				if r, err = Open(fs, name, ReaderOptions{}); err != nil {
					t.Fatal(err)
				}
				return fmt.Sprintf("%d cells, %d data blocks, %d index levels, %d bytes\n", m.EntryCount, m.DataBlocks,
					m.IndexLevels, m.Size)

			case "scan":
				s := r.NewScanner(ScanOptions{})
				defer s.Close()
				var out strings.Builder
				for ok := s.Seek(cell.AppendFirstOnRow(nil, nil)); ok; ok = s.Next() {
					fmt.Fprintln(&out, ddCell(s))
				}
				if s.Err() != nil {
					fmt.Fprintln(&out, "error:", s.Err())
				}
				return out.String()

			case "seek", "seek-prev-row":
				s := r.NewScanner(ScanOptions{})
				defer s.Close()
				var key, next string
				n := 0
				d.ScanArgs(t, "key", &key)
				if d.HasArg("next") {
					d.ScanArgs(t, "next", &next)
					n, _ = strconv.Atoi(next)
				}
				var ok bool
				if d.Cmd == "seek" {
					ok = s.Seek(ddKey(t, key))
				} else {
					ok = s.SeekToPreviousRow(ddKey(t, key))
				}
				var out strings.Builder
				for i := 0; ok && i <= n; i++ {
					fmt.Fprintln(&out, ddCell(s))
					if i < n {
						ok = s.Next()
					}
				}
				if !ok {
					fmt.Fprintln(&out, "none")
				}
				return out.String()

			case "reverse-rows":
				s := r.NewScanner(ScanOptions{})
				defer s.Close()
				var out strings.Builder
				for ok := s.SeekToLastRow(); ok; ok = s.SeekToPreviousRow(s.Key()) {
					fmt.Fprintln(&out, ddCell(s))
				}
				return out.String()

			case "may-contain":
				var out strings.Builder
				for _, line := range strings.Split(strings.TrimSpace(d.Input), "\n") {
					row, col, hasCol := strings.Cut(line, " ")
					if hasCol {
						fam, qual, _ := strings.Cut(col, ":")
						fmt.Fprintf(&out, "%s %s: %v\n", row, col, r.MayContainRowCol([]byte(row), []byte(fam), []byte(qual)))
					} else {
						fmt.Fprintf(&out, "%s: %v\n", row, r.MayContainRow([]byte(row)))
					}
				}
				return out.String()

			case "dump":
				var o DumpOptions
				for _, a := range d.CmdArgs {
					switch a.Key {
					case "meta":
						o.Meta = true
					case "index":
						o.Index = true
					case "blocks":
						o.Blocks = true
					case "cells":
						o.Cells = true
					}
				}
				var out bytes.Buffer
				if err := Dump(&out, fs, r.Path(), o); err != nil {
					fmt.Fprintln(&out, "error:", err)
				}
				return out.String()
			}
			t.Fatalf("%s: unknown command %s", d.Pos, d.Cmd)
			return ""
		})
	})
}
