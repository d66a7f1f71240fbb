// Package master is Cellstore's master: the only writer of the catalog, it assigns regions to
// region servers, tracks their leases (no ZooKeeper: heartbeats to the active master, which is
// elected through a Kubernetes Lease), recovers dead servers' regions, and balances.
//
// This package so far holds the pure parts the rest is built on: the balancer (Balance,
// AssignmentFor) and the server registry with its lease rules (Registry on the master's side,
// Fence on a region server's side). The catalog, the assignment procedures, crash recovery and the
// gRPC service come with the rest of the cluster work (docs/architecture.md, "Master").
package master
