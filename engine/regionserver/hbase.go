package regionserver

import (
	"context"
	"strconv"
	"sync"

	pb "github.com/cellstore/cellstore/engine/api/cellstore/v1"
	"github.com/cellstore/cellstore/engine/hbase"
)

// The HBase protocol on the data port (Config.HBaseProtocol): engine/hbase serves the stock HBase
// client's connections and runs their calls through this server's handlers; hbaseBackend gives
// it what it needs from the server.

type hbaseBackend struct {
	s *Server
	// byID finds a region's encoded name from what HBase's region names carry (table, region
	// id, replica); filled on demand and checked against s.regions on every use.
	mu   sync.Mutex
	byID map[string]string
}

func (b *hbaseBackend) ClusterID() string {
	if b.s.cfg.ClusterID != "" {
		return b.s.cfg.ClusterID
	}
	return "cellstore"
}

func (b *hbaseBackend) Self() *pb.ServerName { return b.s.serverName() }

func (b *hbaseBackend) Secure() bool { return b.s.cfg.Authorization }

func (b *hbaseBackend) Online(name string) bool {
	v, ok := b.s.regions.Load(name)
	return ok && v.(*onlineRegion).r.Load() != nil
}

func (b *hbaseBackend) Master(ctx context.Context, fn func(context.Context, pb.MasterClient) error) error {
	return b.s.callMaster(ctx, fn)
}

func regionKey(ns, table string, id uint64, replica int32) string {
	return ns + "\x00" + table + "\x00" + strconv.FormatUint(id, 10) + "\x00" + strconv.Itoa(int(replica))
}

func (b *hbaseBackend) Region(t *pb.TableName, id uint64, replica int32) (string, bool) {
	ns := t.GetNamespace()
	if ns == "" {
		ns = "default"
	}
	key := regionKey(ns, t.GetName(), id, replica)
	matches := func(or *onlineRegion) bool {
		i := or.info
		return i.GetRegionId() == id && i.GetReplicaId() == replica && i.GetTable().GetName() == t.GetName() && or.ns == ns
	}
	b.mu.Lock()
	name, ok := b.byID[key]
	b.mu.Unlock()
	if ok {
		if v, ok := b.s.regions.Load(name); ok && matches(v.(*onlineRegion)) {
			return name, true
		}
	}
	found := ""
	b.s.regions.Range(func(_, v any) bool {
		if or := v.(*onlineRegion); matches(or) {
			found = or.name
			return false
		}
		return true
	})
	if found == "" {
		return "", false
	}
	b.mu.Lock()
	if b.byID == nil || len(b.byID) > 1<<16 {
		b.byID = map[string]string{}
	}
	b.byID[key] = found
	b.mu.Unlock()
	return found, true
}

var _ hbase.Backend = (*hbaseBackend)(nil)
