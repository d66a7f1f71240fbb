package region

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/cellstore/cellstore/engine/memstore"
)

// Table attributes that choose which families a region's own flush writes, with HBase's names (a
// table descriptor's FLUSH_POLICY, and the lower bound its per-family policies read from the
// table's values).
const (
	FlushPolicyAttribute     = "FLUSH_POLICY"
	FlushLowerBoundAttribute = "hbase.hregion.percolumnfamilyflush.size.lower.bound"
)

// DefaultFlushLowerBoundMin is the least lower bound of the per-family policies when the table
// sets none (HBase's hbase.hregion.percolumnfamilyflush.size.lower.bound.min): the flush size
// divided by the family count, but not below this.
const DefaultFlushLowerBoundMin = 16 << 20

// FlushPolicy is a table's flush policy (HBase's FlushPolicy): which families a flush the region
// asks for itself — its memstores reached the flush size — writes. Flushes asked for from
// outside (an admin's flush, a close, a snapshot, the WAL's backlog, a server's memory
// pressure, a replica's session) write every family.
type FlushPolicy struct {
	// Name is the policy's short class name ("" for the default, FlushAllLargeStoresPolicy).
	Name string
	// AllStores: every flush writes every family (FlushAllStoresPolicy).
	AllStores bool
	// NonSloppyFirst: the large families without in-memory compaction first, then the large
	// compacting ones, then all (FlushNonSloppyStoresFirstPolicy).
	NonSloppyFirst bool
	// LowerBound: a family holding more than this many bytes is large (0: the flush size divided
	// by the family count, at least DefaultFlushLowerBoundMin).
	LowerBound int64
}

// ParseFlushPolicy reads a table's flush policy from its attributes. The names HBase uses are
// accepted with or without their package (org.apache.hadoop.hbase.regionserver.).
func ParseFlushPolicy(attrs map[string]string) (FlushPolicy, error) {
	name := attrs[FlushPolicyAttribute]
	short := name[strings.LastIndexByte(name, '.')+1:]
	p := FlushPolicy{Name: short}
	switch short {
	case "", "FlushAllLargeStoresPolicy", "FlushLargeStoresPolicy":
	case "FlushAllStoresPolicy":
		p.AllStores = true
	case "FlushNonSloppyStoresFirstPolicy":
		p.NonSloppyFirst = true
	default:
		return p, fmt.Errorf("region: unknown %s %q (FlushAllLargeStoresPolicy, FlushAllStoresPolicy or FlushNonSloppyStoresFirstPolicy)", FlushPolicyAttribute, name)
	}
	if v, ok := attrs[FlushLowerBoundAttribute]; ok {
		n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
		if err != nil || n <= 0 {
			return p, fmt.Errorf("region: %s %q is not a positive number of bytes", FlushLowerBoundAttribute, v)
		}
		p.LowerBound = n
	}
	return p, nil
}

// chooseFamilies is the chooser of a flush the region asks for itself.
func (r *Region) chooseFamilies(unflushed []memstore.Stats) []bool {
	return r.cfg.FlushPolicy.choose(r.fams, unflushed, r.cfg.FlushSize)
}

// choose picks the families to flush (nil: all).
func (p FlushPolicy) choose(fams []Family, unflushed []memstore.Stats, flushSize int64) []bool {
	if p.AllStores || len(fams) < 2 {
		return nil
	}
	bound := p.LowerBound
	if bound <= 0 {
		bound = max(flushSize/int64(len(fams)), DefaultFlushLowerBoundMin)
	}
	pick := make([]bool, len(fams))
	large := func(sloppy bool) bool {
		found := false
		for i, st := range unflushed {
			if (fams[i].InMemoryCompaction != InMemoryNone) == sloppy && st.DataBytes > bound {
				pick[i], found = true, true
			}
		}
		return found
	}
	if p.NonSloppyFirst {
		if large(false) || large(true) { // the compacting ones only when no other is large
			return pick
		}
		return nil
	}
	if plain, sloppy := large(false), large(true); plain || sloppy {
		return pick
	}
	return nil
}
