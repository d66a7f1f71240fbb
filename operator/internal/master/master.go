// Package master is the operator's view of a Cellstore master: the calls the operator makes
// (cluster status, drain, balance, zones, quotas, region replication) behind an interface, so that
// the controllers are tested against a fake (package masterfake) and the engine's gRPC client
// plugs in later. docs/operator.md ("Engine contract") describes what the engine implements.
package master

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/cellstore/cellstore/operator/api/v1alpha1"
)

// Client talks to the active master of one StoreCluster. Every call takes a context (deadline) and
// returns an error a person can act on. Mutating calls are idempotent: the operator repeats them
// after a restart without knowing whether the first attempt landed.
type Client interface {
	// ClusterStatus is the master's view: active master, servers, regions.
	ClusterStatus(ctx context.Context) (*ClusterStatus, error)
	// Drain marks a region server draining: the master moves its regions to other servers and
	// assigns it none. Draining a drained server does nothing.
	Drain(ctx context.Context, server string) error
	// Undrain clears the mark, also for a server that is not registered (so that a server that
	// comes back under the same name is not born drained).
	Undrain(ctx context.Context, server string) error
	// Balance asks the balancer to even out regions across the servers that are not draining.
	Balance(ctx context.Context) error
	// SetServerZone tells the master a server's zone; replicas of a region go to different zones
	// when it can.
	SetServerZone(ctx context.Context, server, zone string) error
	// ExternalAddresses returns what the masters publish for clients outside the cluster:
	// each server's advertised address to its external one (empty: none).
	ExternalAddresses(ctx context.Context) (map[string]string, error)
	// SetExternalAddresses replaces that map (empty removes it).
	SetExternalAddresses(ctx context.Context, addrs map[string]string) error
	// SetQuota creates or replaces the throttle of q's identity (Subject and Type).
	SetQuota(ctx context.Context, q Quota) error
	// RemoveQuota removes a throttle; removing a missing one does nothing.
	RemoveQuota(ctx context.Context, key QuotaKey) error
	// ListQuotas returns every throttle.
	ListQuotas(ctx context.Context) ([]Quota, error)
	// Grant gives p.User exactly p.Actions at p's scope (replacing what it had there).
	Grant(ctx context.Context, p Permission) error
	// Revoke takes every action at p's scope from p.User; revoking nothing does nothing.
	Revoke(ctx context.Context, p Permission) error
	// SetDefaultRegionReplication sets REGION_REPLICATION for tables that do not set one.
	SetDefaultRegionReplication(ctx context.Context, n int32) error

	// Backups (StoreBackup, bootstrap.recovery; docs/snapshots.md).
	//
	// ListTables lists the tables, "namespace:table".
	ListTables(ctx context.Context) ([]string, error)
	// Snapshot takes a snapshot of a table; one of that name that exists already is taken for it.
	Snapshot(ctx context.Context, table, name string) error
	// CopySnapshot starts (unless it runs or is done) the copy of a snapshot to the backup
	// location (export) or from it (import), and says how far it is.
	CopySnapshot(ctx context.Context, name string, export bool) (CopyStatus, error)
	// RestoreSnapshot makes the snapshot's table from it (a table that does not exist); with a
	// non-zero until, to that point in time (the snapshot plus the archived WAL up to it).
	RestoreSnapshot(ctx context.Context, name string, until time.Time) error
	// DeleteSnapshot deletes a snapshot in the cluster; a missing one is no error.
	DeleteSnapshot(ctx context.Context, name string) error
	// DeleteBackup deletes a snapshot at the backup location; a missing one is no error.
	DeleteBackup(ctx context.Context, name string) error

	// Hibernation (cellstore.io/hibernation).
	//
	// EnabledTables lists the enabled tables ("namespace:table").
	EnabledTables(ctx context.Context) ([]string, error)
	// TableEnabled says whether a table is ENABLED (not ENABLING: a clone or restore under way)
	// and, for a clone or restore under way whose last try failed at the master, why.
	TableEnabled(ctx context.Context, table string) (enabled bool, restoreErr string, err error)
	// DisableTable disables a table (its regions flush and close); a disabled or missing table
	// is no error.
	DisableTable(ctx context.Context, table string) error
	// EnableTable enables a table; an enabled or missing one is no error.
	EnableTable(ctx context.Context, table string) error
	// Close releases the connection.
	Close() error
}

// ErrTableNotFound: the master has no such table.
var ErrTableNotFound = errors.New("table not found")

// CopyState is where a snapshot copy is.
type CopyState string

// Copy states.
const (
	CopyRunning CopyState = "Running"
	CopyDone    CopyState = "Done"
	CopyFailed  CopyState = "Failed"
)

// CopyStatus is a snapshot copy's progress.
type CopyStatus struct {
	State             CopyState
	Files, FilesTotal int32
	Bytes             int64
	// Error says why it failed (CopyFailed); the next CopySnapshot starts it again.
	Error string
}

// Factory makes a Client for a StoreCluster; the reconcilers get one injected (tests pass the
// fake's). The real one connects to the masters' headless Service, NAME-master.NAMESPACE.svc:16000.
type Factory func(cluster *v1alpha1.StoreCluster) (Client, error)

// ServerState is a region server's state as the master sees it.
type ServerState string

// Server states.
const (
	// ServerOnline: registered, heartbeating and serving.
	ServerOnline ServerState = "Online"
	// ServerStarting: registered, not yet serving (opening regions, replaying WALs).
	ServerStarting ServerState = "Starting"
	// ServerStopping: shutting down.
	ServerStopping ServerState = "Stopping"
	// ServerDead: lease expired; its WALs are being split.
	ServerDead ServerState = "Dead"
)

// ServerStatus is one region server.
type ServerStatus struct {
	// Name is the server's identity: advertise host and data port,
	// POD.NAME-regionserver.NAMESPACE.svc:16020.
	Name     string
	State    ServerState
	Draining bool
	Zone     string
	// Regions the server holds (primaries and replicas), including those opening on it.
	Regions int32
}

// ClusterStatus is the master's view of the cluster.
type ClusterStatus struct {
	// ActiveMaster is the active master's identity, POD.NAME-master.NAMESPACE.svc:16000.
	ActiveMaster string
	// Servers are the registered region servers (and drained ones that left, while marked).
	Servers []ServerStatus
	// RegionsTotal counts every region replica in the catalog.
	RegionsTotal int32
	// RegionsInTransition counts regions opening, closing or moving.
	RegionsInTransition int32
	// DefaultRegionReplication in effect.
	DefaultRegionReplication int32
	// Versions are the release versions the masters and the live region servers report, each once,
	// oldest first (engine/version's order; builds without a release version after them).
	Versions []string
}

// Server returns the server with the name, if the master knows it.
func (s *ClusterStatus) Server(name string) (ServerStatus, bool) {
	for _, sv := range s.Servers {
		if sv.Name == name {
			return sv, true
		}
	}
	return ServerStatus{}, false
}

// ErrNoEngineClient is what the placeholder client returns: this build has no engine client yet.
var ErrNoEngineClient = errors.New("this operator build has no Cellstore master client yet (the engine's gRPC API is not released): " +
	"the operator manages the Kubernetes objects but cannot drain, balance or read the master's status")

// Unavailable is the Factory of operator builds without an engine client: every call fails with
// ErrNoEngineClient (wrapped with the address it would have used).
func Unavailable(cluster *v1alpha1.StoreCluster) (Client, error) {
	return nil, fmt.Errorf("master of StoreCluster %s/%s: %w", cluster.Namespace, cluster.Name, ErrNoEngineClient)
}
