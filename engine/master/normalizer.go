package master

import (
	"context"
	"strconv"
	"strings"
	"time"

	pb "github.com/cellstore/cellstore/engine/api/cellstore/v1"
	"github.com/cellstore/cellstore/engine/layout"
)

// The region normalizer (docs/master.md, "Normalizer"; HBase's SimpleRegionNormalizer): for each
// table with NORMALIZATION_ENABLED it splits regions more than twice the table's target size and
// merges neighbours whose sizes together stay below it. The target is NORMALIZER_TARGET_REGION_SIZE_MB,
// else the table's size over NORMALIZER_TARGET_REGION_COUNT, else the mean region size. Sizes
// are the store file bytes region servers report in heartbeats.

// Table attributes of the normalizer (HBase's names).
const (
	attrNormalizationEnabled = "NORMALIZATION_ENABLED"
	attrTargetRegionCount    = "NORMALIZER_TARGET_REGION_COUNT"
	attrTargetRegionSizeMB   = "NORMALIZER_TARGET_REGION_SIZE_MB"
	// normalizerMinRegions: a table with fewer regions is not merged (HBase's
	// hbase.normalizer.min.region.count).
	normalizerMinRegions = 3
)

// checkNormalizerAttributes refuses normalizer attributes a table cannot mean.
func checkNormalizerAttributes(attrs map[string]string) error {
	if v, ok := attrs[attrNormalizationEnabled]; ok && !strings.EqualFold(v, "true") && !strings.EqualFold(v, "false") {
		return errInvalid("%s must be true or false, got %q", attrNormalizationEnabled, v)
	}
	for _, k := range []string{attrTargetRegionCount, attrTargetRegionSizeMB} {
		if v, ok := attrs[k]; ok {
			if n, err := strconv.ParseInt(v, 10, 64); err != nil || n < 0 {
				return errInvalid("%s must be a whole number (0: unset), got %q", k, v)
			}
		}
	}
	return nil
}

// normalizerTickLocked runs the normalizer every NormalizerInterval while it is switched on.
func (m *Master) normalizerTickLocked(now time.Time) error {
	if m.cfg.NormalizerInterval < 0 || m.st.state.GetNormalizerOff() || now.Before(m.nextNormalize) {
		return nil
	}
	m.nextNormalize = now.Add(m.cfg.NormalizerInterval)
	splits, merges := m.normalizeLocked(nil)
	if splits+merges > 0 {
		m.log.Info("normalizer started splits and merges", "splits", splits, "merges", merges)
	}
	return nil
}

// Normalize implements pb.MasterServer: the normalizer runs now, on the given tables (whatever
// their NORMALIZATION_ENABLED) or on every table that sets it; the splits and merges it starts
// go on after the call.
func (m *Master) Normalize(_ context.Context, req *pb.NormalizeRequest) (*pb.NormalizeResponse, error) {
	var names []*pb.TableName
	for _, t := range req.GetTables() {
		tn, err := checkTableName(t)
		if err != nil {
			return nil, toStatus(err)
		}
		names = append(names, tn)
	}
	if err := m.lock(); err != nil {
		return nil, toStatus(err)
	}
	defer m.mu.Unlock()
	var keys []string
	for _, tn := range names {
		if m.st.table(tn) == nil {
			return nil, toStatus(errTableNotFound(layout.TableKey(tn)))
		}
		keys = append(keys, layout.TableKey(tn))
	}
	splits, merges := m.normalizeLocked(keys) // nil: every table that asks for it
	m.log.Info("normalizer ran", "tables", keys, "splits", splits, "merges", merges)
	return &pb.NormalizeResponse{Splits: int32(splits), Merges: int32(merges)}, nil
}

// SetNormalizerRunning implements pb.MasterServer (HBase's normalizer_switch).
func (m *Master) SetNormalizerRunning(_ context.Context, req *pb.SetBalancerRunningRequest) (*pb.SetBalancerRunningResponse, error) {
	return m.flipSwitch(req.GetOn(), "normalizer", func(st *pb.CatalogMasterState) *bool { return &st.NormalizerOff }, func() {
		m.nextNormalize = m.clock().Add(m.cfg.NormalizerInterval)
	})
}

// normalizeLocked plans and starts the splits and merges of the given tables (nil: every enabled
// table with NORMALIZATION_ENABLED) and returns how many of each it started. A table whose
// regions are not all open with a known size, or that has a region in transition, waits for
// the next run.
func (m *Master) normalizeLocked(keys []string) (splits, merges int) {
	if keys == nil {
		for key, t := range m.st.tables {
			if !t.GetDeleting() && strings.EqualFold(t.GetTable().GetAttributes()[attrNormalizationEnabled], "true") {
				keys = append(keys, key)
			}
		}
	}
	now := m.clock()
	for _, key := range keys {
		t := m.st.tables[key]
		if t == nil || t.GetDeleting() || t.GetState() != pb.TableState_TABLE_STATE_ENABLED {
			continue
		}
		regions := m.st.index[key]
		sizes := make([]int64, len(regions))
		ready := len(regions) > 0
		var total int64
		for i, r := range regions {
			rl := m.regionLoadLocked(r)
			if rl == nil || r.GetState() != stateOpen || m.st.procs[r.GetInfo().GetName()] != nil {
				ready = false
				break
			}
			sizes[i] = rl.GetStoreFileBytes()
			total += sizes[i]
		}
		if !ready {
			continue
		}
		target := total / int64(len(regions))
		attrs := t.GetTable().GetAttributes()
		if mb, err := strconv.ParseInt(attrs[attrTargetRegionSizeMB], 10, 64); err == nil && mb > 0 {
			target = mb << 20
		} else if n, err := strconv.ParseInt(attrs[attrTargetRegionCount], 10, 64); err == nil && n > 0 {
			target = total / n
		}
		var b batch
		var started []string
		planned := make([]bool, len(regions))
		if !splitPolicyOf(t).NoAutoSplit {
			for i, r := range regions {
				if target > 0 && sizes[i] > 2*target {
					if _, d := m.startSplitLocked(&b, r, nil, "normalizer: "+strconv.FormatInt(sizes[i], 10)+" bytes > twice the target "+strconv.FormatInt(target, 10)); d == nil {
						planned[i] = true
						started = append(started, r.GetInfo().GetName())
						splits++
					}
				}
			}
		}
		if len(regions) >= normalizerMinRegions {
			mergeable := func(i int) bool {
				id := regions[i].GetInfo().GetRegionId()
				return !planned[i] && sizes[i] >= m.cfg.NormalizerMergeMinSize && len(regions[i].GetMergeParents()) == 0 &&
					now.Sub(time.UnixMilli(int64(id))) >= m.cfg.NormalizerMergeMinAge
			}
			for i := 0; i+1 < len(regions); i++ {
				if !mergeable(i) || !mergeable(i+1) || sizes[i]+sizes[i+1] >= target {
					continue
				}
				if _, d := m.startMergeLocked(&b, regions[i], regions[i+1]); d == nil {
					planned[i], planned[i+1] = true, true
					started = append(started, regions[i].GetInfo().GetName(), regions[i+1].GetInfo().GetName())
					merges++
					i++
				}
			}
		}
		if len(started) == 0 {
			continue
		}
		if err := m.commit(&b); err != nil {
			m.log.Warn("normalizer: the catalog refused its plan", "table", key, "err", err)
			return splits, merges
		}
		for _, name := range started {
			m.dispatchLocked(name)
		}
	}
	return splits, merges
}
