package sfile

import (
	"fmt"
	"strings"
	"time"

	"github.com/cellstore/cellstore/engine/blockcache"
	"github.com/cellstore/cellstore/engine/cell"
)

// Encoding is the data block encoding (the family's DATA_BLOCK_ENCODING).
type Encoding uint8

// Data block encodings. docs/storage-format.md describes the bytes.
const (
	// EncodingNone stores every key whole.
	EncodingNone Encoding = iota
	// EncodingPrefix stores the bytes a key shares with the previous key
	// as a length.
	EncodingPrefix
	// EncodingDiff shares the prefix of the row/family/qualifier part and
	// stores timestamp, type, value length and sequence id as deltas or
	// "same as previous" flags.
	EncodingDiff
	// EncodingRowIndex (HBase's ROW_INDEX_V1) stores every key whole, as NONE, with a restart
	// point at the first cell of every row (and every RestartInterval cells within a longer
	// row): a seek to a row binary-searches the block's rows and lands on its first cell.
	EncodingRowIndex
	numEncodings
)

var encodingNames = [numEncodings]string{"NONE", "PREFIX", "DIFF", "ROW_INDEX_V1"}

func (e Encoding) String() string {
	if e < numEncodings {
		return encodingNames[e]
	}
	return fmt.Sprintf("Encoding(%d)", uint8(e))
}

// ParseEncoding parses NONE, PREFIX, DIFF or ROW_INDEX_V1 (case-insensitive).
func ParseEncoding(s string) (Encoding, error) {
	for i, n := range encodingNames {
		if strings.EqualFold(s, n) {
			return Encoding(i), nil
		}
	}
	return 0, fmt.Errorf("sfile: unknown data block encoding %q (want NONE, PREFIX, DIFF or ROW_INDEX_V1)", s)
}

// Compression is the data block compression codec (the family's
// COMPRESSION).
type Compression uint8

// Compression codecs.
const (
	CompressionNone Compression = iota
	CompressionSnappy
	CompressionLZ4
	CompressionZstd
	// CompressionGZ is DEFLATE in gzip's framing (HBase's GZ), whose trailer carries the length
	// and CRC-32 of what it holds.
	CompressionGZ
	numCompressions
)

var compressionNames = [numCompressions]string{"NONE", "SNAPPY", "LZ4", "ZSTD", "GZ"}

func (c Compression) String() string {
	if c < numCompressions {
		return compressionNames[c]
	}
	return fmt.Sprintf("Compression(%d)", uint8(c))
}

// ParseCompression parses NONE, SNAPPY, LZ4, ZSTD or GZ (case-insensitive).
func ParseCompression(s string) (Compression, error) {
	for i, n := range compressionNames {
		if strings.EqualFold(s, n) {
			return Compression(i), nil
		}
	}
	return 0, fmt.Errorf("sfile: unknown compression %q (want NONE, SNAPPY, LZ4, ZSTD or GZ)", s)
}

// BloomType is the kind of bloom filter a file carries (the family's
// BLOOMFILTER).
type BloomType uint8

// Bloom filter types.
const (
	BloomNone BloomType = iota
	// BloomRow holds each row once: MayContainRow can exclude a file.
	BloomRow
	// BloomRowCol holds each row/family:qualifier once: MayContainRowCol
	// can exclude a file.
	BloomRowCol
	numBloomTypes
)

var bloomNames = [numBloomTypes]string{"NONE", "ROW", "ROWCOL"}

func (b BloomType) String() string {
	if b < numBloomTypes {
		return bloomNames[b]
	}
	return fmt.Sprintf("BloomType(%d)", uint8(b))
}

// ParseBloomType parses NONE, ROW or ROWCOL (case-insensitive).
func ParseBloomType(s string) (BloomType, error) {
	for i, n := range bloomNames {
		if strings.EqualFold(s, n) {
			return BloomType(i), nil
		}
	}
	return 0, fmt.Errorf("sfile: unknown bloom filter type %q (want NONE, ROW or ROWCOL)", s)
}

// Defaults of WriterOptions.
const (
	DefaultBlockSize       = 64 << 10
	DefaultIndexBlockSize  = 128 << 10
	DefaultBloomBlockSize  = 128 << 10
	DefaultBloomFPRate     = 0.01
	DefaultRestartInterval = 16
)

// WriterOptions configures NewWriter. The zero value is valid: 64 KiB
// blocks, no encoding, no compression, no bloom filter.
type WriterOptions struct {
	// BlockSize is the uncompressed size at which a data block closes: a
	// block closes at the first cell boundary at or past it (so a block
	// holds at least one cell, however large). 0 means 64 KiB.
	BlockSize int
	// Encoding is the data block encoding.
	Encoding Encoding
	// Compression compresses data blocks. A block that does not shrink is
	// stored uncompressed (each block records its codec).
	Compression Compression
	// Bloom selects the bloom filter.
	Bloom BloomType
	// BloomFPRate is the target false-positive rate, in (0, 1); 0 means
	// 0.01.
	BloomFPRate float64
	// ExpectedEntries is a sizing hint for the bloom filter (the number of
	// rows or columns the file will hold); 0 lets the filter grow chunk by
	// chunk.
	ExpectedEntries int
	// Cache, if set and its L2 tier has CacheOnWrite, receives the data
	// blocks as they are written (L2) and the index and bloom blocks (L1).
	Cache *blockcache.Combined
	// FileID is the cache key namespace of the file (the caller assigns
	// unique ids; readers of the file must use the same id to find the
	// blocks cached on write).
	FileID uint64
	// InMemory caches blocks with priority IN_MEMORY.
	InMemory bool

	// IndexBlockSize is the size at which a leaf or intermediate index
	// block closes, and the largest root index before another level is
	// added. 0 means 128 KiB.
	IndexBlockSize int
	// BloomBlockSize is the size of a bloom filter chunk. 0 means 128 KiB.
	BloomBlockSize int
	// RestartInterval is the number of cells between restart points in a
	// data block (a restart point stores its key whole and starts a binary
	// search step). 0 means 16.
	RestartInterval int
}

// ReaderOptions configures Open.
type ReaderOptions struct {
	// Cache caches blocks: data blocks in L2 (in L1 when there is no L2),
	// index and bloom blocks in L1 (not cached without L1). nil: every
	// block read goes to the file.
	Cache *blockcache.Combined
	// FileID is the cache key namespace of the file.
	FileID uint64
	// InMemory caches data blocks with priority IN_MEMORY.
	InMemory bool
	// EvictOnClose evicts the file's blocks from the cache on Close (for
	// files that compaction replaced).
	EvictOnClose bool
}

// ScanOptions configures a scanner.
type ScanOptions struct {
	// CacheBlocks caches the data blocks the scanner reads (user reads).
	// Compactions leave it false so they do not evict hot blocks; cached
	// blocks are used either way.
	CacheBlocks bool
	// Prefetch reads ahead PrefetchBytes when Next crosses into a block
	// that is not cached, so a sequential scan issues one large read per
	// several blocks instead of one read per block (compactions, big
	// scans on remote storage).
	Prefetch bool
	// PrefetchBytes is the read-ahead size; 0 means 1 MiB.
	PrefetchBytes int
	// Recycle returns the scanner to a pool when it is closed (point reads
	// make one per file per read). The caller must not touch it after
	// Close: no second Close, no Err, no positioning.
	Recycle bool
}

// DumpOptions selects what Dump prints (like `hbase hfile -m -i -b -p`).
type DumpOptions struct {
	Meta   bool // file info and trailer
	Index  bool // the block index, every level
	Blocks bool // every data block: offset, sizes, codec, cells
	Cells  bool // every cell: key, value, sequence id
	// MaxValueLen truncates printed values; 0 means 64, -1 prints whole
	// values.
	MaxValueLen int
}

// Meta describes a finished store file.
type Meta struct {
	EntryCount        int64
	MinSeq, MaxSeq    uint64
	MinTimestamp      int64
	MaxTimestamp      int64
	FirstKey, LastKey cell.Key
	DeleteFamilyCount int64
	MajorCompacted    bool
	Size              int64
	DataBlocks        int
	IndexLevels       int
	Bloom             BloomType
	Encoding          Encoding
	Compression       Compression
	CreatedAt         time.Time
	// Info holds the caller's file-info entries (Writer.SetInfo).
	Info map[string][]byte

	// BlockSize and BloomFPRate are the writer's settings.
	BlockSize   int
	BloomFPRate float64
	// BloomKeys counts the keys (rows or columns) in the bloom filter.
	BloomKeys int64

	// EarliestPutTimestamp is the smallest timestamp of a Put cell in the file (HBase's
	// EARLIEST_PUT_TS; delete markers do not count): math.MaxInt64 when the file holds no put,
	// math.MinInt64 when unknown (a file written before the field was recorded), which a
	// reader must take as "puts as old as can be".
	EarliestPutTimestamp int64
}
