// Package sfile implements store files: the immutable, sorted files a
// region's memstore flushes to and compactions rewrite, in the manner of
// HBase's HFile v3. docs/storage-format.md ("Store files") describes the
// bytes; FormatVersion is the version this package writes and reads.
//
// A file is a sequence of blocks followed by a fixed-size trailer:
//
//	data blocks (with leaf index blocks and bloom chunks written inline as they fill)
//	intermediate index blocks, root index block
//	bloom index block, file info block
//	trailer (64 bytes: offsets of root index, file info, bloom index; counts; version; CRC; magic)
//
// Every block carries a header (kind, codec, uncompressed length) and a
// CRC32C of its on-disk bytes; a mismatch is a *CorruptionError naming the
// file, the block's offset and its kind.
//
// # Data blocks
//
// Data blocks hold cells (key, value, sequence id) in store order
// (cell.CompareWithSeq), encoded NONE, PREFIX or DIFF, with restart points
// every RestartInterval cells where a key is stored whole, so a seek
// binary-searches the restart points and then steps at most
// RestartInterval cells. A block closes at the first cell boundary at or
// past BlockSize (uncompressed). Blocks are compressed with SNAPPY, LZ4 or
// ZSTD; a block that does not shrink is stored uncompressed.
//
// # Index
//
// The block index has the first key and handle (offset, size) of every
// data block. Entries fill leaf index blocks; when the entries do not fit
// a root block of IndexBlockSize, leaf blocks are written inline and
// intermediate levels are added until the root fits. The root is loaded
// at Open; a seek descends levels with binary searches.
//
// # Bloom filters
//
// ROW and ROWCOL filters are cache-line-blocked bloom filters sized for
// the configured false-positive rate, in chunks of BloomBlockSize with a
// bloom index (first key of each chunk) loaded at Open.
//
// # Caching and zero copy
//
// With a blockcache.Combined, data blocks live uncompressed in the
// off-heap L2 cache: a miss decompresses the block straight into its L2
// slot (BucketCache.PutFrom), and scanners return keys and values that
// point into the slot, holding its reference (BlockRef) until they move
// to another block or close. Index blocks and bloom chunks go to the
// on-heap L1 cache. Blocks are validated completely when they are read
// from the file, so a damaged block is reported as corruption and cached
// blocks can be decoded without further checks.
//
// # Trust
//
// Readers never panic on file contents: checksums catch damage, every
// structure is bounds-checked when read, and fuzz tests feed arbitrary
// bytes to the block decoders and to Open. Cache keys are (FileID, block
// offset): callers must give distinct files distinct ids.
package sfile
