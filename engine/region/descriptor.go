package region

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"math"
	"slices"
	"strings"

	"github.com/cellstore/cellstore/engine/schema"
	"github.com/cellstore/cellstore/engine/sfile"
)

// KeepDeletedCells is a family's KEEP_DELETED_CELLS setting.
type KeepDeletedCells int

const (
	// KeepDeletedFalse: deleted cells are never visible and a major
	// compaction removes them and their delete markers.
	KeepDeletedFalse KeepDeletedCells = iota
	// KeepDeletedTrue: deleted cells stay visible to reads whose time
	// range ends before the delete marker and to raw scans; major
	// compactions keep them (subject to VERSIONS and TTL) and their
	// markers.
	KeepDeletedTrue
	// KeepDeletedTTL: as KeepDeletedTrue until the marker's TTL expires,
	// then as KeepDeletedFalse.
	KeepDeletedTTL
)

func (k KeepDeletedCells) String() string {
	switch k {
	case KeepDeletedFalse:
		return "FALSE"
	case KeepDeletedTrue:
		return "TRUE"
	case KeepDeletedTTL:
		return "TTL"
	}
	return fmt.Sprintf("KeepDeletedCells(%d)", int(k))
}

// ParseKeepDeletedCells parses FALSE, TRUE or TTL.
func ParseKeepDeletedCells(s string) (KeepDeletedCells, error) {
	switch strings.ToUpper(s) {
	case "FALSE":
		return KeepDeletedFalse, nil
	case "TRUE":
		return KeepDeletedTrue, nil
	case "TTL":
		return KeepDeletedTTL, nil
	}
	return 0, fmt.Errorf("region: unknown KEEP_DELETED_CELLS %q (want FALSE, TRUE or TTL)", s)
}

// Family describes a column family (HBase's ColumnFamilyDescriptor).
type Family struct {
	Name string
	// MaxVersions (VERSIONS) is the number of versions kept per column;
	// 0 means the default, 1.
	MaxVersions int
	// MinVersions (MIN_VERSIONS) is the number of newest versions kept
	// even when their TTL expired.
	MinVersions int
	// TTL in seconds; 0 means forever (HBase's FOREVER).
	TTL int64
	// KeepDeletedCells (KEEP_DELETED_CELLS).
	KeepDeletedCells KeepDeletedCells
	// Bloom (BLOOMFILTER); HBase's default is ROW.
	Bloom sfile.BloomType
	// BlockSize (BLOCKSIZE); 0 means 64 KiB.
	BlockSize int
	// Compression (COMPRESSION).
	Compression sfile.Compression
	// Encoding (DATA_BLOCK_ENCODING).
	Encoding sfile.Encoding
	// InMemory (IN_MEMORY) caches the family's blocks with in-memory
	// priority.
	InMemory bool
	// NoBlockCache turns BLOCKCACHE off: user reads do not cache data
	// blocks of this family.
	NoBlockCache bool
	// InMemoryCompaction (IN_MEMORY_COMPACTION): a region with a BASIC or EAGER family keeps its
	// memstore as a pipeline of in-memory segments (docs/region.md).
	InMemoryCompaction InMemoryCompaction
}

// InMemoryCompaction is a family's IN_MEMORY_COMPACTION policy (HBase's Accordion).
type InMemoryCompaction int

const (
	InMemoryNone InMemoryCompaction = iota
	// InMemoryBasic freezes the active segment in memory when it fills and merges the frozen
	// segments now and then; it drops nothing.
	InMemoryBasic
	// InMemoryEager also drops, while merging, the family's versions beyond VERSIONS that no
	// read sees any more.
	InMemoryEager
)

func (p InMemoryCompaction) String() string {
	switch p {
	case InMemoryNone:
		return "NONE"
	case InMemoryBasic:
		return "BASIC"
	case InMemoryEager:
		return "EAGER"
	}
	return fmt.Sprintf("InMemoryCompaction(%d)", int(p))
}

// maxVersions returns VERSIONS with the default applied.
func (f *Family) maxVersions() int {
	if f.MaxVersions <= 0 {
		return 1
	}
	return f.MaxVersions
}

// ttlMillis returns the TTL in milliseconds, or 0 for forever.
func (f *Family) ttlMillis() int64 {
	if f.TTL <= 0 || f.TTL > math.MaxInt64/1000 {
		return 0
	}
	return f.TTL * 1000
}

// Validate checks the family's attributes.
func (f *Family) Validate() error {
	if err := schema.Family(f.Name); err != nil {
		return fmt.Errorf("region: %w", err)
	}
	if f.MaxVersions < 0 || f.MinVersions < 0 {
		return fmt.Errorf("region: family %q: negative VERSIONS or MIN_VERSIONS", f.Name)
	}
	if f.MinVersions > f.maxVersions() {
		return fmt.Errorf("region: family %q: MIN_VERSIONS %d exceeds VERSIONS %d", f.Name, f.MinVersions, f.maxVersions())
	}
	if f.TTL < 0 {
		return fmt.Errorf("region: family %q: negative TTL", f.Name)
	}
	if f.BlockSize < 0 {
		return fmt.Errorf("region: family %q: negative BLOCKSIZE", f.Name)
	}
	return nil
}

// TableDescriptor describes a table: its name and families.
type TableDescriptor struct {
	Namespace string
	Name      string
	Families  []Family
	// MaxCellSize limits a cell's serialized size (0: cell.DefaultMaxCellSize).
	MaxCellSize int
}

// Validate checks the descriptor.
func (t *TableDescriptor) Validate() error {
	if err := schema.Table(t.Namespace, t.Name); err != nil {
		return fmt.Errorf("region: %w", err)
	}
	if len(t.Families) == 0 {
		return fmt.Errorf("region: table %s:%s has no column family", t.Namespace, t.Name)
	}
	seen := map[string]bool{}
	for i := range t.Families {
		if err := t.Families[i].Validate(); err != nil {
			return err
		}
		if seen[t.Families[i].Name] {
			return fmt.Errorf("region: table %s:%s: family %q listed twice", t.Namespace, t.Name, t.Families[i].Name)
		}
		seen[t.Families[i].Name] = true
	}
	return nil
}

// Info describes a region (HBase's RegionInfo): a key range [StartKey,
// EndKey) of a table. An empty StartKey is the table's start, an empty
// EndKey its end.
type Info struct {
	Namespace string `json:"namespace"`
	Table     string `json:"table"`
	StartKey  []byte `json:"startKey"`
	EndKey    []byte `json:"endKey"`
	// ID distinguishes regions of the same range over time (HBase's
	// region id, the creation time in ms).
	ID uint64 `json:"id"`
	// Parent is the encoded name of the region this one was split from.
	Parent string `json:"parent,omitempty"`
	// Name, when set, is the region's encoded name as the master assigned it
	// (the catalog's name, which the master's log split writes recovered
	// edits under); without it the name is derived (EncodedName).
	Name string `json:"name,omitempty"`
}

// EncodedName is the region's directory name and WAL region name: Name when
// the master gave one, else a hash of table, start key and id, as 32 hex
// digits (HBase's encoded name is an MD5; any stable unique digest serves).
func (i *Info) EncodedName() string {
	if i.Name != "" {
		return i.Name
	}
	h1 := crc32.New(crc32.MakeTable(crc32.Castagnoli))
	h2 := crc32.NewIEEE()
	for _, h := range []interface{ Write([]byte) (int, error) }{h1, h2} {
		fmt.Fprintf(h, "%s:%s,%x,%d", i.Namespace, i.Table, i.StartKey, i.ID)
	}
	h3 := crc32.New(crc32.MakeTable(crc32.Koopman))
	fmt.Fprintf(h3, "%d,%x,%s:%s", i.ID, i.EndKey, i.Namespace, i.Table)
	return fmt.Sprintf("%08x%08x%08x%08x", h1.Sum32(), h2.Sum32(), h3.Sum32(), uint32(i.ID))
}

// String formats the region like HBase: table,startKey,id.encoded.
func (i *Info) String() string {
	return fmt.Sprintf("%s:%s,%q,%d.%s", i.Namespace, i.Table, i.StartKey, i.ID, i.EncodedName())
}

// ContainsRow reports whether row falls in [StartKey, EndKey).
func (i *Info) ContainsRow(row []byte) bool {
	return bytes.Compare(row, i.StartKey) >= 0 && (len(i.EndKey) == 0 || bytes.Compare(row, i.EndKey) < 0)
}

// Dir returns the region's directory: data/<ns>/<table>/<encoded>.
func (i *Info) Dir() string {
	return "data/" + i.Namespace + "/" + i.Table + "/" + i.EncodedName()
}

// regionInfoFile is the .regioninfo content: the region and its table
// descriptor, JSON, followed by a line with the CRC32C of the JSON.
type regionInfoFile struct {
	Info  Info            `json:"info"`
	Table TableDescriptor `json:"table"`
}

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

func encodeChecked(v any) ([]byte, error) {
	b, err := json.MarshalIndent(v, "", " ")
	if err != nil {
		return nil, err
	}
	return fmt.Appendf(b, "\n%08x\n", crc32.Checksum(b, castagnoli)), nil
}

var errBadChecksum = errors.New("checksum mismatch")

func decodeChecked(b []byte, v any) error {
	b = bytes.TrimRight(b, "\n")
	i := bytes.LastIndexByte(b, '\n')
	if i < 0 {
		return fmt.Errorf("no checksum line")
	}
	var sum uint32
	if _, err := fmt.Sscanf(string(b[i+1:]), "%08x", &sum); err != nil {
		return fmt.Errorf("bad checksum line: %w", err)
	}
	if crc32.Checksum(b[:i], castagnoli) != sum {
		return errBadChecksum
	}
	return json.Unmarshal(b[:i], v)
}

func sortedFamilies(fams []Family) []Family {
	out := slices.Clone(fams)
	slices.SortFunc(out, func(a, b Family) int { return strings.Compare(a.Name, b.Name) })
	return out
}
