// Package client is Cellstore's Go client. It asks the active master where regions are, caches the
// locations, and talks to region servers over the data-path protocol (engine/rpc), retrying with
// backoff on the answers that say a retry can succeed: a region that moved (the answer names the new
// server), is not served, is opening, a busy or throttled server (honouring retry-after), a broken
// connection. Batches are grouped by region and server (RowMutations, conditional or not, each
// go as an atomic region action of their own); scans stream across regions, assemble partial rows
// and survive region moves; TIMELINE reads hedge to read replicas. The built-in endpoints
// (Aggregate, Median, MutateRows, BulkDelete; docs/endpoints.md) run in the region servers over
// a scan's regions, and their answers are merged here. A BufferedMutator (HBase's) collects
// mutations and sends them in batches in the background, up to MaxInFlight batches at once.
//
// A region that is moving (closed on one server, not yet open on the next) is relocated with a
// lookup that waits at the master until the region is open again (LocateRegion's wait_ms), so the
// request goes on when the region does rather than after a backoff; a single-row operation
// relocates up to three times in a row without a pause (REGION_MOVED, or NOT_SERVING_REGION with
// the refused location sent along), and its backoff grows with the pauses it took, not with its
// attempts. While masters hand over, their
// NOT_ACTIVE_MASTER answers carry a short retry-after, which the client honours without growing its
// backoff. Config.Logger receives a Debug record per retry, with the operation's context: what a
// slow request waited for.
//
// Non-idempotent mutations (increments, appends) carry a nonce so a retry after a lost answer is
// applied once: the region remembers recent nonces.
package client
