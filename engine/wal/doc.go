// Package wal is the write-ahead log of a region server.
//
// One WAL per region server lives in a directory ("wal/<server>") of
// numbered segments ("00000000000000000001.wal"). A segment is a header
// with a magic, a format version and the segment number, then records; a
// record is a CRC32C (Castagnoli) checksum, a length and a payload holding
// one edit: region name, sequence id, write time, optional nonce group and
// nonce, and the serialized cells. docs/storage-format.md describes the
// bytes.
//
// # Writing
//
// Open starts a WAL; Append logs an edit at a durability level:
//
//   - SyncWAL (default) and FsyncWAL return after the record is synced to
//     the storage backend. Concurrent appenders share syncs (group commit):
//     appenders encode into one buffer, a single syncer goroutine writes the
//     buffer with one Write and one Sync and wakes every appender the sync
//     covered.
//   - AsyncWAL returns once the record is buffered; the syncer writes and
//     syncs it within Options.SyncInterval.
//   - SkipWAL writes nothing: Append only allocates a sequence id (the
//     mutation is lost if the server dies before a flush).
//
// AppendNoWait + WaitDurable split an append in two, so a region can insert
// into its memstore while the sync is under way (HBase's write path).
//
// Sequence ids are assigned by the WAL, one per edit, strictly increasing;
// they are the regions' MVCC write numbers. A region opening on this server
// calls AdvanceSeq with its highest persisted sequence id so its ids keep
// increasing after a move.
//
// Segments roll by size and age (Roll forces it). A region reports a
// completed flush with MarkFlushed(region, seq); closed segments in which
// every region has flushed past its edits are moved to Options.ArchiveDir
// (or deleted).
//
// If a write or sync fails (a full disk, an I/O error), every appender
// waiting on it gets the error, the buffered records are dropped and the
// WAL refuses appends: no write is ever acknowledged unless durable. Roll
// truncates the failed segment back to its last good record and resumes.
// Close writes and syncs what is buffered.
//
// # Reading
//
// NewReader iterates over a WAL directory in sequence order (replay),
// optionally from a sequence id and for one region. The last segment may
// end in a torn tail (a crash during a write: a partial record, a bad
// checksum, zeros, with at most records of commits that were never
// acknowledged after it — the commit markers say which bytes had been
// synced): it is ignored. Damage anywhere else stops the iteration with a
// *CorruptionError naming the file and offset.
// Bad bytes never cause a panic.
//
// Split turns a dead server's (fenced) WAL directory into per-region
// recovered-edits files; NewRecoveredEditsReader reads them back when the
// region opens.
package wal
