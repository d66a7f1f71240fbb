// Package region is a region of a table: a key range [start, end) with a
// store per column family, served in-process (the region server adds RPC,
// quotas and assignment on top).
//
// A Region keeps one off-heap memstore (engine/memstore) for all its
// families and, per family, a list of immutable store files
// (engine/sfile). Writes take row locks, get their MVCC write number from
// the WAL (engine/wal) and go into the memstore; reads merge the memstore
// and the files and apply HBase's rules: MVCC read point, time range,
// delete markers (Delete, DeleteColumn, DeleteFamily, DeleteFamilyVersion,
// including "a marker hides later puts with older timestamps until a major
// compaction"), VERSIONS, MIN_VERSIONS with TTL, KEEP_DELETED_CELLS, raw
// scans, filters (package filter) with seek hints, partial results and
// heartbeats.
//
// Flush writes the memstore to new store files and commits them with an
// atomically replaced manifest; compactions (exploring-policy minor, and
// major) merge files concurrently with reads and writes; Split creates two
// daughter regions made of reference files. Files are laid out as
//
//	data/<ns>/<table>/<region>/.regioninfo
//	data/<ns>/<table>/<region>/MANIFEST
//	data/<ns>/<table>/<region>/<family>/<file>
//	archive/data/<ns>/<table>/<region>/<family>/<file>   (replaced files)
//
// docs/region.md describes the design: MVCC, the read path, flush,
// compaction, split, the manifest and crash safety.
package region
