package cell

// Scanner iterates over cells in store order: Compare order of the keys, and for equal keys the
// higher sequence id first (CompareWithSeq). The memstore, store-file readers and the region's
// merging scanners all implement it, so the region can merge them into one sorted stream (as HBase's
// KeyValueHeap merges KeyValueScanners).
//
// A new Scanner is unpositioned: call Seek, SeekToLastRow or SeekToPreviousRow first. The methods
// that move it return true when it is positioned on a cell and false when there is none left; a
// false return may be an error, reported by Err. Key, Value and Seq are valid only while the scanner
// is positioned and only until the next call that moves or closes it: they may point into a memstore
// chunk or a cached block in off-heap memory, so a caller that keeps a cell must copy it.
//
// A Scanner is used by one goroutine at a time. Close releases what it holds (block references,
// chunk references) and is safe to call more than once.
type Scanner interface {
	// Seek positions the scanner at the first cell whose key is at or after key (Compare order;
	// for equal keys, at the first such cell). key may be a seek key built with the
	// AppendFirstOn*/AppendLastOn* functions.
	Seek(key Key) bool
	// Next moves to the following cell.
	Next() bool
	// SeekToPreviousRow positions the scanner at the first cell of the last row that sorts
	// before the row of key. Reversed scans use it to step back one row at a time.
	SeekToPreviousRow(key Key) bool
	// SeekToLastRow positions the scanner at the first cell of the last row.
	SeekToLastRow() bool

	// Key is the current cell's key.
	Key() Key
	// Value is the current cell's value.
	Value() []byte
	// Tags are the current cell's tags (nil for a cell without; see Tags).
	Tags() []byte
	// Seq is the current cell's sequence id (the MVCC write number of the write that made it; 0
	// for cells whose sequence id a major compaction dropped because no reader can need it).
	Seq() uint64

	// Err is the error that ended the iteration, if any (I/O, checksum, corrupt block).
	Err() error
	// Close releases the scanner's resources.
	Close() error
}

// Current is implemented by scanners that return the current cell's key, value, tags and sequence
// id in one call, which a merge of scanners uses to read each cell once (the same rules as Key,
// Value, Tags and Seq apply).
type Current interface {
	Current() (key Key, value, tags []byte, seq uint64)
}

// Parker is implemented by scanners that can give back what they hold between uses: Park
// releases the block (or other shared memory) the current cell lies in and keeps a private copy
// of the cell, so Key, Value, Tags, Seq (and Current) still return it; the next call that moves
// the scanner picks up where it was (loading the block again if it needs it). Slices returned
// before Park are invalid after it, as after a move. A merge holds its sources' current cells
// between calls, so an idle merge can park every source (HBase's KeyValueScanner.shipped).
type Parker interface {
	Park()
}
