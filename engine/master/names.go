package master

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math/bits"
	"net"
	"path"
	"slices"
	"strconv"
	"strings"

	pb "github.com/cellstore/cellstore/engine/api/cellstore/v1"
	"github.com/cellstore/cellstore/engine/schema"
)

// Names and paths on shared storage (docs/master.md, "Names and paths").
//
//	data/<ns>/<table>/<region>/                 a region's directory (every replica reads the primary's)
//	data/<ns>/<table>/<region>/recovered.edits/ edits split from dead servers' logs
//	wal/<wal dir>/                              a region server process's WAL (WALDirName)
//	wal/<wal dir>-splitting/                    the same, fenced by the master, being split
//	archive/wal/<wal dir>/                      split logs, kept for inspection, deleted later
//	archive/data/<ns>/<table>/...               data of dropped tables and truncated regions

const (
	// DefaultNamespace is the namespace of a table named without one.
	DefaultNamespace = schema.DefaultNamespace
	// SystemNamespace is HBase's namespace of system tables (hbase:meta and the like): users
	// cannot create tables in it.
	SystemNamespace = schema.SystemNamespace
	// SplittingSuffix marks a fenced WAL directory.
	SplittingSuffix = "-splitting"
	// MaxSplitKeys bounds the regions of a pre-split table.
	MaxSplitKeys = 10000
)

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

// TableKey is "namespace:name", the key of a table in the catalog and in messages.
func TableKey(t *pb.TableName) string { return t.GetNamespace() + ":" + t.GetName() }

// normTableName fills in the default namespace.
func normTableName(t *pb.TableName) *pb.TableName {
	if t == nil {
		return nil
	}
	ns := t.GetNamespace()
	if ns == "" {
		ns = DefaultNamespace
	}
	return &pb.TableName{Namespace: ns, Name: t.GetName()}
}

// The rules for names and a descriptor's numbers are the schema package's, shared with the
// shell, the client and the region.
func validNamespace(ns string) error               { return schema.Namespace(ns) }
func validTableName(t *pb.TableName) error         { return schema.TableName(t) }
func validFamilyName(f []byte) error               { return schema.Family(f) }
func validDescriptor(td *pb.TableDescriptor) error { return schema.Descriptor(td) }

const maxReplication = schema.MaxReplication

// splitKeysFor returns the sorted split keys of a new table: the given ones (checked) or
// numRegions-1 keys spread evenly over the first 8 bytes of the key space.
func splitKeysFor(keys [][]byte, numRegions int32) ([][]byte, error) {
	if len(keys) > 0 && numRegions > 0 {
		return nil, fmt.Errorf("give split keys or a number of regions, not both")
	}
	if numRegions < 0 {
		return nil, fmt.Errorf("number of regions %d is negative", numRegions)
	}
	if numRegions > MaxSplitKeys+1 || len(keys) > MaxSplitKeys {
		return nil, fmt.Errorf("at most %d regions per table at creation", MaxSplitKeys+1)
	}
	if numRegions > 1 {
		out := make([][]byte, 0, numRegions-1)
		for i := uint64(1); i < uint64(numRegions); i++ {
			q, _ := bits.Div64(i, 0, uint64(numRegions)) // i * 2^64 / n
			out = append(out, bytes.TrimRight(binary.BigEndian.AppendUint64(nil, q), "\x00"))
		}
		return out, nil
	}
	out := make([][]byte, 0, len(keys))
	for i, k := range keys {
		if len(k) == 0 {
			return nil, fmt.Errorf("split key %d is empty (the first region starts at the empty key already)", i)
		}
		out = append(out, bytes.Clone(k))
	}
	slices.SortFunc(out, bytes.Compare)
	for i := 1; i < len(out); i++ {
		if bytes.Equal(out[i-1], out[i]) {
			return nil, fmt.Errorf("split key %q is given twice", out[i])
		}
	}
	return out, nil
}
