package regionserver

import (
	"context"
	"time"

	pb "github.com/cellstore/cellstore/engine/api/cellstore/v1"
	"github.com/cellstore/cellstore/engine/hbase"
	"github.com/cellstore/cellstore/engine/layout"
)

// The HBase protocol on the data port (Config.HBaseProtocol): engine/hbase serves the stock HBase
// client's connections and runs their calls through this server's handlers; hbaseBackend gives
// it what it needs from the server.

type hbaseBackend struct {
	s *Server
}

func (b *hbaseBackend) ClusterID() string {
	if b.s.cfg.ClusterID != "" {
		return b.s.cfg.ClusterID
	}
	return "cellstore"
}

func (b *hbaseBackend) Self() *pb.ServerName { return b.s.serverName() }

func (b *hbaseBackend) SlowCall() time.Duration { return b.s.slowCall() }

func (b *hbaseBackend) Online(name string) bool {
	v, ok := b.s.regions.Load(name)
	return ok && v.(*onlineRegion).r.Load() != nil
}

func (b *hbaseBackend) Master(ctx context.Context, fn func(context.Context, pb.MasterClient) error) error {
	return b.s.callMaster(ctx, fn)
}

// Region looks through the online regions: the adapter remembers what it found (checked with
// Online on every use), so this runs once per region name a client sends. A region that recently
// moved away is found too (by its name, which its id makes): the data path answers for it —
// REGION_MOVED with the new location, once a move's close under way has been reported — where
// "not online here" would send an HBase client to look it up again after its pause.
func (b *hbaseBackend) Region(t *pb.TableName, id uint64, replica int32) (string, bool) {
	if name, ok := b.region(t, id, replica); ok {
		return name, true
	}
	name := layout.ReplicaName(id, replica)
	_, moved := b.s.movedAway(name)
	return name, moved
}

func (b *hbaseBackend) region(t *pb.TableName, id uint64, replica int32) (string, bool) {
	ns := t.GetNamespace()
	if ns == "" {
		ns = "default"
	}
	found := ""
	b.s.regions.Range(func(_, v any) bool {
		or := v.(*onlineRegion)
		if i := or.info; i.GetRegionId() == id && i.GetReplicaId() == replica && i.GetTable().GetName() == t.GetName() && or.ns == ns {
			found = or.name
			return false
		}
		return true
	})
	return found, found != ""
}

var _ hbase.Backend = (*hbaseBackend)(nil)
