// Package master is Cellstore's master: the only writer of the catalog, it assigns regions to
// region servers, tracks their leases (no ZooKeeper: heartbeats to the active master, which is
// elected through a Kubernetes Lease), recovers dead servers' regions, and balances.
//
//   - Master (New, Start, Stop, Register) serves the Master gRPC service; only the elected master
//     is active, the others answer NOT_ACTIVE_MASTER naming it (Elector: NoElection,
//     KubernetesElection).
//   - Catalog is its durable state under meta/ (rows of catalog.proto messages, model.go).
//   - Region procedures (assign.go) open, close, move and reopen regions, persisted with the
//     region's state so a new active master resumes them; crash.go recovers dead servers (fence
//     the WAL directory, split it into recovered edits, reassign); ops.go runs the balancer,
//     drains and the table state machine; tables.go is the DDL.
//   - Balance and AssignmentFor are the pure balancer; Registry and lease.Fence the two sides of the
//     region servers' lease.
//
// docs/master.md describes the design, the names and paths on shared storage (layout.WALDirName,
// layout.RegionDir, layout.RecoveredEditsDir) and what a region server must implement. Package mastertest runs
// masters and fake region servers in-process for tests.
package master
