// Package settings names the engine settings that change without a restart (HBase's dynamic
// configuration: update_config): the flags a running master or region server re-reads from its
// configuration file and applies at once. Every other flag takes effect at the next start. The
// operator reads it too: a StoreCluster change that touches only these flags updates the
// configuration file the pods read and restarts nothing.
package settings

import "slices"

// Role is a kind of engine process.
type Role string

const (
	Master       Role = "master"
	RegionServer Role = "regionserver"
)

// online lists, per role, the flags applied without a restart.
var online = map[Role][]string{
	Master: {"archive-ttl", "balancer-period", "close-timeout", "log-level", "max-moves-in-flight",
		"max-moves-per-server", "max-regions-per-server", "normalizer-period", "open-timeout", "split-size"},
	RegionServer: {"compaction-max-file-size", "compaction-max-files", "compaction-min-files", "compaction-ratio",
		"compaction-throughput", "idle-timeout", "log-level", "max-connections", "max-scanners", "scan-max-result-size",
		"slow-call-threshold"},
}

// Online returns the flags of role applied without a restart, sorted.
func Online(role Role) []string { return slices.Clone(online[role]) }

// IsOnline says whether flag changes without a restart in role.
func IsOnline(role Role, flag string) bool { return slices.Contains(online[role], flag) }
