package wal

// Log is what a region needs from its server's write-ahead log: *WAL (segments in a directory)
// and *ObjectLog (objects in a bucket) implement it.
type Log interface {
	// AppendNoWait logs the edit, assigns its sequence id (also e.Seq) and returns at once.
	AppendNoWait(e *Edit) (uint64, error)
	// WaitDurable waits until the edit with sequence id seq, and every earlier one, is durable.
	WaitDurable(seq uint64) error
	// NextSeq assigns a sequence id without logging anything (SKIP_WAL).
	NextSeq() (uint64, error)
	// AdvanceSeq makes every later sequence id greater than seq.
	AdvanceSeq(seq uint64)
	// MarkFlushed records that region flushed every edit up to seq, so the log may drop what
	// only held such edits.
	MarkFlushed(region string, seq uint64) error
}

var (
	_ Log = (*WAL)(nil)
	_ Log = (*ObjectLog)(nil)
)
