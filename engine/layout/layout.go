// Package layout is the vocabulary the master and the region servers share about the cluster's
// durable state: names of servers, regions and tables, the paths of their data and logs on
// storage, and the keys of the cluster configuration. Both sides must agree on every one of these;
// neither owns them, so they live below both (a region server does not import the master).
package layout

import (
	"fmt"
	"net"
	"path"
	"strconv"
	"strings"

	pb "github.com/cellstore/cellstore/engine/api/cellstore/v1"
	"github.com/cellstore/cellstore/engine/region"
	"github.com/cellstore/cellstore/engine/sfile"
)

// Names and paths on shared storage (docs/master.md, "Names and paths").
//
//	data/<ns>/<table>/<region>/                 a region's directory (every replica reads the primary's)
//	data/<ns>/<table>/<region>/recovered.edits/ edits split from dead servers' logs
//	wal/<wal dir>/                              a region server process's WAL (WALDirName)
//	wal/<wal dir>-splitting/                    the same, fenced by the master, being split
//	archive/wal/<wal dir>/                      split logs, kept for inspection, deleted later
//	archive/data/<ns>/<table>/...               files compacted away, data of dropped tables and
//	                                            truncated regions, each at its own path
//	snapshots/<name>/manifest                   snapshots (engine/snapshot)
//	links/<ns>/<table>/<snapshot>-<n>           tables' copies of the manifests they link to

// SplittingSuffix marks a fenced WAL directory.
const SplittingSuffix = "-splitting"

// ServerName is the identity of a region server: the host:port of its data path.
func ServerName(s *pb.ServerName) string { return s.Address() }

// ParseServerName splits "host:port" into a ServerName (start code 0).
func ParseServerName(name string) (*pb.ServerName, error) {
	host, port, err := net.SplitHostPort(name)
	if err != nil {
		return nil, fmt.Errorf("server name %q is not host:port: %w", name, err)
	}
	p, err := strconv.Atoi(port)
	if err != nil || p <= 0 || p > 65535 {
		return nil, fmt.Errorf("server name %q has a bad port", name)
	}
	if host == "" {
		return nil, fmt.Errorf("server name %q has no host", name)
	}
	return &pb.ServerName{Host: host, Port: int32(p)}, nil
}

// WALDirName is the directory under wal/ of one region server process: its name with every
// character other than [A-Za-z0-9.-] replaced by '_', then '_' and the start code in decimal,
// for example "rs-0.rs.ns.svc:16020" started at 1700000000000 → "rs-0.rs.ns.svc_16020_1700000000000".
// Each process (start code) has its own directory, so a restarted server never writes into the
// directory the master is fencing for its predecessor. The region server must use exactly this
// name (it may call this function).
func WALDirName(server string, startCode int64) string {
	b := make([]byte, 0, len(server)+21)
	for i := 0; i < len(server); i++ {
		c := server[i]
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9', c == '.', c == '-':
			b = append(b, c)
		default:
			b = append(b, '_')
		}
	}
	b = append(b, '_')
	b = strconv.AppendInt(b, startCode, 10)
	return string(b)
}

// WALDir is the path of a region server process's WAL directory: "wal/" + WALDirName.
func WALDir(server string, startCode int64) string {
	return path.Join("wal", WALDirName(server, startCode))
}

// RegionName is the name of a region's primary: its id as 16 hex digits.
func RegionName(regionID uint64) string { return fmt.Sprintf("%016x", regionID) }

// ReplicaName is the name of replica replicaID (1..N-1) of a region: "<primary>_<replicaID>";
// the primary (0) has the plain name.
func ReplicaName(regionID uint64, replicaID int32) string {
	if replicaID == 0 {
		return RegionName(regionID)
	}
	return fmt.Sprintf("%016x_%d", regionID, replicaID)
}

// PrimaryName is the name of the primary of a replica's region ("<primary>_<n>" → "<primary>").
func PrimaryName(name string) string {
	if i := strings.IndexByte(name, '_'); i >= 0 {
		return name[:i]
	}
	return name
}

// TableDir is a table's data directory.
func TableDir(t *pb.TableName) string { return path.Join("data", t.GetNamespace(), t.GetName()) }

// RegionDir is a region's data directory: data/<ns>/<table>/<primary name>. Replicas share it.
func RegionDir(r *pb.RegionInfo) string {
	return path.Join(TableDir(r.GetTable()), PrimaryName(r.GetName()))
}

// RecoveredEditsDir is where the master writes a region's edits split from dead servers' logs.
func RecoveredEditsDir(r *pb.RegionInfo) string { return path.Join(RegionDir(r), "recovered.edits") }

// FunctionsDir holds the modules of table functions, each once whatever uses it.
const FunctionsDir = "functions"

// Features a region server announces (RegisterServerRequest.features, and with each heartbeat): what
// it can read or do that servers of earlier releases cannot. The master uses one only while every
// live region server has it, so a cluster in a rolling upgrade or downgrade never writes state that
// one of its servers would misread.
const (
	// FeatureManifestHandoff: the server replays the edits a move's close leaves in a region's
	// manifest (region.Region.CloseForMove); the master lets a move's close leave them there.
	FeatureManifestHandoff = "manifest-handoff"
)

// Features is what this build's region servers announce.
var Features = []string{FeatureManifestHandoff}

// FunctionModuleKey is where the module of a table function with that SHA-256 is stored
// (content-addressed: written once, never replaced).
func FunctionModuleKey(sha []byte) string { return fmt.Sprintf("%s/%x.wasm", FunctionsDir, sha) }

// TableKey is "namespace:name", the key of a table in the catalog and in messages.
func TableKey(t *pb.TableName) string { return t.GetNamespace() + ":" + t.GetName() }

// StorageInfo is engine/region's description of a catalog region: what opens, splits or
// inspects its directory on shared storage (data/<ns>/<table>/<name>). For a replica, Name is
// the replica's; its directory is its primary's (PrimaryName).
func StorageInfo(ri *pb.RegionInfo) region.Info {
	return region.Info{Namespace: ri.GetTable().GetNamespace(), Table: ri.GetTable().GetName(), StartKey: ri.GetStartKey(),
		EndKey: ri.GetEndKey(), ID: ri.GetRegionId(), Name: ri.GetName()}
}

// Cluster configuration keys (SetClusterConfig, RegisterServerResponse.cluster_config).
const (
	ConfigDefaultRegionReplication = "default_region_replication"
	ConfigHedgeDelayMS             = "hedge_delay_ms"
	ConfigQuotasEnabled            = "quotas_enabled"
	// ConfigRegionSplitSize (bytes) overrides Config.SplitSize; ConfigSplitsEnabled = false stops
	// the size policy (SplitRegion still splits).
	ConfigRegionSplitSize = "region_split_size"
	ConfigSplitsEnabled   = "splits_enabled"
	// ConfigSelfFenceMarginMS is in RegisterServerResponse.cluster_config only: how long before
	// its lease can expire a region server stops acknowledging writes (LeaseConfig.SelfFenceMargin).
	ConfigSelfFenceMarginMS = "self_fence_margin_ms"
)

// RegionTableDescriptor is engine/region's form of a table descriptor, for a region of it (the
// region's table name is the one used), checked.
func RegionTableDescriptor(t *pb.TableDescriptor, ri *pb.RegionInfo) (region.TableDescriptor, error) {
	td := region.TableDescriptor{Namespace: ri.GetTable().GetNamespace(), Name: ri.GetTable().GetName(), Families: familyDescriptors(t)}
	return td, td.Validate()
}

func familyDescriptors(t *pb.TableDescriptor) []region.Family {
	var fams []region.Family
	for _, f := range t.GetFamilies() {
		rf := region.Family{Name: string(f.GetName()), MaxVersions: int(f.GetMaxVersions()), MinVersions: int(f.GetMinVersions()),
			TTL: f.GetTtlSeconds(), BlockSize: int(f.GetBlockSize()), InMemory: f.GetInMemory(), NoBlockCache: f.GetBlockCacheDisabled()}
		switch f.GetInMemoryCompaction() {
		case pb.InMemoryCompaction_IN_MEMORY_COMPACTION_BASIC:
			rf.InMemoryCompaction = region.InMemoryBasic
		case pb.InMemoryCompaction_IN_MEMORY_COMPACTION_EAGER:
			rf.InMemoryCompaction = region.InMemoryEager
		}
		switch f.GetKeepDeletedCells() {
		case pb.KeepDeletedCells_KEEP_DELETED_CELLS_TRUE:
			rf.KeepDeletedCells = region.KeepDeletedTrue
		case pb.KeepDeletedCells_KEEP_DELETED_CELLS_TTL:
			rf.KeepDeletedCells = region.KeepDeletedTTL
		}
		switch f.GetBloomFilter() {
		case pb.BloomType_BLOOM_TYPE_NONE:
			rf.Bloom = sfile.BloomNone
		case pb.BloomType_BLOOM_TYPE_ROWCOL:
			rf.Bloom = sfile.BloomRowCol
		default:
			rf.Bloom = sfile.BloomRow
		}
		switch f.GetCompression() {
		case pb.Compression_COMPRESSION_SNAPPY:
			rf.Compression = sfile.CompressionSnappy
		case pb.Compression_COMPRESSION_LZ4:
			rf.Compression = sfile.CompressionLZ4
		case pb.Compression_COMPRESSION_ZSTD:
			rf.Compression = sfile.CompressionZstd
		case pb.Compression_COMPRESSION_GZ:
			rf.Compression = sfile.CompressionGZ
		}
		switch f.GetDataBlockEncoding() {
		case pb.DataBlockEncoding_DATA_BLOCK_ENCODING_PREFIX:
			rf.Encoding = sfile.EncodingPrefix
		case pb.DataBlockEncoding_DATA_BLOCK_ENCODING_DIFF:
			rf.Encoding = sfile.EncodingDiff
		case pb.DataBlockEncoding_DATA_BLOCK_ENCODING_ROW_INDEX_V1:
			rf.Encoding = sfile.EncodingRowIndex
		}
		fams = append(fams, rf)
	}
	return fams
}
