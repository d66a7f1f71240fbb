// Command hfilesize re-runs the experiment of the HBase blog post "The Effect of ColumnFamily,
// RowKey and KeyValue Design on HFile Size" (Meil and Murphy, 2014) on Cellstore's store files:
// the same data set (1000 rows of 10 strings of 20 random characters, 10 random ints and 10
// random longs), the same five designs (fat or thin rowkey and column names, or one serialized
// value per row) and every compression × data block encoding, each written as one store file
// (engine/sfile, 128 KiB blocks as in the post), whose size it prints as markdown tables.
//
//	go run ./hack/tools/hfilesize [-rows 1000] [-seed 1]
//
// (hack/seed-hfile-size.sh runs it; docs/benchmarks.md has the results beside the post's.)
package main

import (
	"crypto/md5"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strings"

	"github.com/cellstore/cellstore/engine/cell"
	"github.com/cellstore/cellstore/engine/sfile"
	"github.com/cellstore/cellstore/engine/storage"
)

// design is one of the post's five cases.
type design struct {
	name             string
	fatKey, fatNames bool
	serialized       bool // one value per row holding the whole row (the post's Avro case)
}

var designs = []design{
	{name: "#1 fat key, fat column names", fatKey: true, fatNames: true},
	{name: "#2 fat key, thin column names", fatKey: true},
	{name: "#3 thin key, fat column names", fatNames: true},
	{name: "#4 thin key, thin column names"},
	{name: "#5 one serialized value per row (thin key)", serialized: true},
}

// row is one generated row: 10 strings, 10 ints, 10 longs.
type row struct {
	strs  [10][]byte
	ints  [10]int32
	longs [10]int64
}

func main() {
	rows := flag.Int("rows", 1000, "rows per file")
	seed := flag.Uint64("seed", 1, "seed of the random data")
	flag.Parse()
	rnd := rand.New(rand.NewPCG(*seed, *seed))
	data := make([]row, *rows)
	const letters = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
	for i := range data {
		for j := range 10 {
			s := make([]byte, 20)
			for k := range s {
				s[k] = letters[rnd.IntN(len(letters))]
			}
			data[i].strs[j] = s
			data[i].ints[j] = rnd.Int32()
			data[i].longs[j] = rnd.Int64()
		}
	}
	// Fat column names: 10 random characters, the same for every row.
	fatNames := make([][]byte, 30)
	for i := range fatNames {
		n := make([]byte, 10)
		for k := range n {
			n[k] = letters[rnd.IntN(len(letters))]
		}
		fatNames[i] = n
	}
	compressions := []sfile.Compression{sfile.CompressionNone, sfile.CompressionGZ, sfile.CompressionLZ4, sfile.CompressionSnappy, sfile.CompressionZstd}
	encodings := []sfile.Encoding{sfile.EncodingNone, sfile.EncodingPrefix, sfile.EncodingDiff, sfile.EncodingRowIndex}
	sizes := map[string]map[sfile.Compression]map[sfile.Encoding]int64{}
	for _, d := range designs {
		cells := cellsOf(d, data, fatNames)
		sizes[d.name] = map[sfile.Compression]map[sfile.Encoding]int64{}
		for _, c := range compressions {
			sizes[d.name][c] = map[sfile.Encoding]int64{}
			for _, e := range encodings {
				n, err := fileSize(cells, c, e)
				if err != nil {
					fmt.Fprintln(os.Stderr, "hfilesize:", err)
					os.Exit(1)
				}
				sizes[d.name][c][e] = n
			}
		}
	}
	fmt.Printf("Store file sizes in bytes, %d rows, 128 KiB blocks, ROW bloom filter (FAST_DIFF is stored as DIFF; LZO is not offered, ZSTD is).\n\n", *rows)
	for _, d := range designs {
		fmt.Printf("Design %s:\n\n| compression \\ encoding |", d.name)
		for _, e := range encodings {
			fmt.Printf(" %s |", e)
		}
		fmt.Printf("\n|---|%s\n", strings.Repeat("---|", len(encodings)))
		for _, c := range compressions {
			fmt.Printf("| %s |", c)
			for _, e := range encodings {
				fmt.Printf(" %s |", group(sizes[d.name][c][e]))
			}
			fmt.Println()
		}
		fmt.Println()
	}
}

// kv is one cell to write.
type kv struct {
	key   cell.Key
	value []byte
}

// cellsOf makes a design's cells, sorted as a store file holds them.
func cellsOf(d design, data []row, fatNames [][]byte) []kv {
	const ts = 1_396_000_000_000 // one timestamp: the cells of one flush written together
	fam := []byte("d")
	var out []kv
	for i, r := range data {
		key := rowKey(i, d.fatKey)
		if d.serialized {
			out = append(out, kv{cell.AppendKey(nil, key, fam, []byte("r"), ts, cell.Put), serialize(r)})
			schema := md5.Sum([]byte("record Row { 10 x string, 10 x int, 10 x long } v1"))
			out = append(out, kv{cell.AppendKey(nil, key, fam, []byte("s"), ts, cell.Put), schema[:]})
			continue
		}
		for j := range 30 {
			name := fmt.Appendf(nil, "c%d", j+1)
			if d.fatNames {
				name = fatNames[j]
			}
			var v []byte
			switch {
			case j < 10:
				v = r.strs[j]
			case j < 20:
				v = binary.BigEndian.AppendUint32(nil, uint32(r.ints[j-10]))
			default:
				v = binary.BigEndian.AppendUint64(nil, uint64(r.longs[j-20]))
			}
			out = append(out, kv{cell.AppendKey(nil, key, fam, name, ts, cell.Put), v})
		}
	}
	slices.SortFunc(out, func(a, b kv) int { return cell.Compare(a.key, b.key) })
	return out
}

// rowKey is the post's thin (16-byte MD5) or fat (64-character SHA-256) key of integer i.
func rowKey(i int, fat bool) []byte {
	b := binary.BigEndian.AppendUint32(nil, uint32(i))
	if fat {
		h := sha256.Sum256(b)
		return []byte(hex.EncodeToString(h[:]))
	}
	h := md5.Sum(b)
	return h[:]
}

// serialize encodes a row as Avro's binary encoding would (strings as a zig-zag varint length
// and their bytes, ints and longs as zig-zag varints), the post's one-value-per-row design.
func serialize(r row) []byte {
	var b []byte
	for _, s := range r.strs {
		b = binary.AppendVarint(b, int64(len(s)))
		b = append(b, s...)
	}
	for _, v := range r.ints {
		b = binary.AppendVarint(b, int64(v))
	}
	for _, v := range r.longs {
		b = binary.AppendVarint(b, v)
	}
	return b
}

// fileSize writes the cells as one store file and returns its size.
func fileSize(cells []kv, c sfile.Compression, e sfile.Encoding) (int64, error) {
	fs := storage.NewMem()
	f, err := fs.Create("f")
	if err != nil {
		return 0, err
	}
	w, err := sfile.NewWriter(f, sfile.WriterOptions{BlockSize: 128 << 10, Encoding: e, Compression: c, Bloom: sfile.BloomRow})
	if err != nil {
		return 0, err
	}
	for _, x := range cells {
		if err := w.Append(x.key, x.value, 1); err != nil {
			return 0, err
		}
	}
	m, err := w.Finish()
	if err != nil {
		return 0, err
	}
	return m.Size, nil
}

// group writes n with thousands separators.
func group(n int64) string {
	s := fmt.Sprint(n)
	var b strings.Builder
	for i, ch := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(ch)
	}
	return b.String()
}
