// Package client is Cellstore's Go client. It asks the active master where regions are, caches the
// locations, and talks to region servers over the data-path protocol (engine/rpc), retrying with
// backoff on the answers that say a retry can succeed: a region that moved (the answer names the new
// server), is not served, is opening, a busy or throttled server (honouring retry-after), a broken
// connection. Batches are grouped by region and server; scans stream across regions, assemble
// partial rows and survive region moves; TIMELINE reads hedge to read replicas.
//
// Non-idempotent mutations (increments, appends) carry a nonce so a retry after a lost answer is
// applied once: the region remembers recent nonces.
package client
