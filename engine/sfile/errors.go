package sfile

import (
	"errors"
	"fmt"
)

var (
	// ErrCorruption is matched (errors.Is) by every *CorruptionError.
	ErrCorruption = errors.New("sfile: corruption")
	// ErrUnsupportedVersion is wrapped by Open's error for a store file of
	// a format version this build cannot read.
	ErrUnsupportedVersion = errors.New("sfile: unsupported store file version")
	// ErrOutOfOrder is wrapped by Append's error for a cell that does not
	// sort after the previous one (cell.CompareWithSeq).
	ErrOutOfOrder = errors.New("sfile: cell out of order")
	// ErrInvalidCell is wrapped by Append's error for a key that is not a
	// storable cell (malformed, a seek key, a negative timestamp).
	ErrInvalidCell = errors.New("sfile: invalid cell")
	// ErrFinished is returned by Writer methods after Finish or Abort.
	ErrFinished = errors.New("sfile: writer finished")
	// ErrClosed is returned when a closed Reader or scanner is used.
	ErrClosed = errors.New("sfile: closed")
	// ErrEmpty is returned by MidKey for a file without cells.
	ErrEmpty = errors.New("sfile: store file holds no cells")
)

// CorruptionError reports bytes of a store file that fail a check: a
// block checksum, a malformed block, an index entry pointing outside the
// file, a damaged trailer. It names the file and the byte offset of the
// block (or trailer) concerned.
type CorruptionError struct {
	File   string // path within the storage backend
	Offset int64  // offset of the damaged block or trailer
	Reason string // what is wrong, naming the kind of block
}

func (e *CorruptionError) Error() string {
	return fmt.Sprintf("sfile: corruption in %s at offset %d: %s", e.File, e.Offset, e.Reason)
}

// Is makes errors.Is(err, ErrCorruption) true.
func (e *CorruptionError) Is(target error) bool { return target == ErrCorruption }

func corruptf(file string, off int64, format string, args ...any) *CorruptionError {
	return &CorruptionError{File: file, Offset: off, Reason: fmt.Sprintf(format, args...)}
}
