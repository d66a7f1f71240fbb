// Package storage defines the backend interface for everything Cellstore
// keeps durably (store files, WALs, region descriptors, the catalog) and two
// implementations:
//
//   - Local (NewLocal): a directory of real files, usable on a local disk or
//     on a shared ReadWriteMany volume. Sync is fdatasync(2); directory
//     syncs fsync the directory so that creates and renames survive a crash.
//   - Mem (NewMem): an in-memory filesystem for fast tests. It models POSIX
//     durability: a file's bytes are durable up to its last Sync, and a
//     create, rename or remove is durable only once its parent directory is
//     synced. CrashClone returns the state a power loss could leave.
//
// Package faultfs wraps any FS to inject errors, short writes and crashes.
//
// # Paths
//
// Names are slash-separated and relative to the backend root ("wal/rs1/x").
// A leading slash is accepted and ignored ("/wal/rs1" is "wal/rs1"), "" and
// "." name the root, and names that escape the root ("../x") are rejected.
//
// # Durability contract
//
//   - File.Sync makes the bytes written so far durable. It does not make the
//     file's name durable: call SyncDir on the parent after Create.
//   - Rename, Create and Remove are atomic but durable only after SyncDir of
//     the affected parent directories (both, for a rename across
//     directories). Rename replaces an existing file; renaming a directory
//     onto an existing name fails.
//   - MkdirAll and Truncate are durable when they return.
//   - After a failed Sync, a File refuses further writes and syncs: on Linux
//     the kernel may have dropped the dirty pages, so a later successful
//     fsync would prove nothing.
//
// Errors wrap the name (as *fs.PathError or *os.LinkError) and the cause,
// so errors.Is(err, fs.ErrNotExist), errors.Is(err, fs.ErrExist) and
// IsNoSpace(err) work across implementations.
package storage
