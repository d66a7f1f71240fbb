package blockcache

import (
	"errors"
	"fmt"
)

// Key identifies a block: the store file and the block's offset in it.
type Key struct {
	File   uint64 // store file id, unique within the process
	Offset int64  // offset of the block in the file
}

func (k Key) String() string { return fmt.Sprintf("%d@%d", k.File, k.Offset) }

// hash spreads keys over shards.
func (k Key) hash() uint64 {
	h := k.File*0x9E3779B97F4A7C15 ^ uint64(k.Offset)*0xC2B2AE3D27D4EB4F
	h ^= h >> 29
	h *= 0xBF58476D1CE4E5B9
	return h ^ h>>32
}

// BlockKind says what a block holds; the combined cache routes by it.
type BlockKind uint8

const (
	// KindData is a data block (cells): cached in L2, off-heap.
	KindData BlockKind = iota
	// KindIndex is a block-index block: cached in L1, on-heap.
	KindIndex
	// KindBloom is a bloom-filter block: cached in L1, on-heap.
	KindBloom
	// KindMeta is file metadata (trailer, file info): cached in L1.
	KindMeta
)

func (k BlockKind) String() string {
	switch k {
	case KindData:
		return "data"
	case KindIndex:
		return "index"
	case KindBloom:
		return "bloom"
	case KindMeta:
		return "meta"
	}
	return fmt.Sprintf("BlockKind(%d)", uint8(k))
}

// Priority is the eviction priority of a cached block, as in HBase:
// blocks enter as single-access, become multi-access when read again, and
// blocks of IN_MEMORY column families get their own share and are evicted
// last.
type Priority uint8

const (
	PrioritySingle Priority = iota
	PriorityMulti
	PriorityMemory
	numPriorities
)

func (p Priority) String() string {
	switch p {
	case PrioritySingle:
		return "single"
	case PriorityMulti:
		return "multi"
	case PriorityMemory:
		return "memory"
	}
	return fmt.Sprintf("Priority(%d)", uint8(p))
}

var (
	// ErrTooLarge is returned by Put for a block larger than the largest
	// size class (L2) or than a shard's capacity (L1): it is not cached.
	ErrTooLarge = errors.New("block too large to cache")
	// ErrCacheFull is returned by Put when no slot could be freed because
	// every candidate is referenced by readers: the block is not cached.
	ErrCacheFull = errors.New("block cache full: every eviction candidate is in use")
)

// cache-line padding to keep per-shard counters apart.
type pad [64]byte
