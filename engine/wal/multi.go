package wal

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"path"
	"strconv"
	"strings"
	"sync/atomic"

	"github.com/cellstore/cellstore/engine/storage"
)

// A MultiWAL is several WALs of one region server in one directory (HBase's multiwal with its
// bounded region-grouping strategy): group k is the WAL in the subdirectory g<k>, and a region's
// edits always go to the group its name hashes to. Each group commits and syncs on its own, so
// writers of regions in different groups never wait for each other's syncs. The groups share
// one sequence counter: ids are unique across them, and a read of the directory (NewReader)
// merges the groups back into one sequence in id order, so a split, a replay and the archive see
// what one WAL would have held. Fencing the directory (renaming it) fences every group.

// SeqCounter hands out sequence ids to several logs (the groups of a MultiWAL).
type SeqCounter struct{ last atomic.Uint64 }

// next returns an id above every id handed out and at least atLeast.
func (c *SeqCounter) next(atLeast uint64) uint64 {
	for {
		cur := c.last.Load()
		n := max(cur+1, atLeast)
		if c.last.CompareAndSwap(cur, n) {
			return n
		}
	}
}

// advance makes every later id greater than seq.
func (c *SeqCounter) advance(seq uint64) {
	for {
		cur := c.last.Load()
		if cur >= seq || c.last.CompareAndSwap(cur, seq) {
			return
		}
	}
}

// MaxGroups bounds a MultiWAL's groups.
const MaxGroups = 16

// groupDirPrefix names a group's subdirectory: g0, g1, ...
const groupDirPrefix = "g"

// GroupDir is the directory of group k of the WAL in dir.
func GroupDir(dir string, k int) string { return path.Join(dir, groupDirPrefix+strconv.Itoa(k)) }

// parseGroupDir returns k of a group subdirectory's name.
func parseGroupDir(name string) (int, bool) {
	d, ok := strings.CutPrefix(name, groupDirPrefix)
	if !ok || d == "" || (len(d) > 1 && d[0] == '0') {
		return 0, false
	}
	k, err := strconv.Atoi(d)
	return k, err == nil && k >= 0 && k < MaxGroups
}

// GroupLog is the archive log name of group k of a log (ArchiveTarget.Log).
func GroupLog(log string, k int) string { return log + "." + groupDirPrefix + strconv.Itoa(k) }

// MultiWAL is a region server's WAL as several groups.
type MultiWAL struct {
	dir    string
	groups []*WAL
	seqs   SeqCounter
}

// OpenMulti opens groups WALs under opts.Dir (each with opts, in its own subdirectory; an
// ArchiveTarget's log gets the group's suffix). One group is allowed, but a plain WAL (Open) is
// what a server with one group uses: its segments lie in opts.Dir itself.
func OpenMulti(opts Options, groups int) (*MultiWAL, error) {
	if groups < 1 || groups > MaxGroups {
		return nil, fmt.Errorf("wal: %d WAL groups: want 1 to %d", groups, MaxGroups)
	}
	if opts.ArchiveDir != "" {
		return nil, errors.New("wal: a MultiWAL does not move segments to an ArchiveDir")
	}
	m := &MultiWAL{dir: opts.Dir}
	for k := range groups {
		o := opts
		o.Dir = GroupDir(opts.Dir, k)
		o.Seqs = &m.seqs
		if opts.Archive != nil {
			a := *opts.Archive
			a.Log = GroupLog(a.Log, k)
			o.Archive = &a
		}
		w, err := Open(o)
		if err != nil {
			for _, g := range m.groups {
				g.Close()
			}
			return nil, fmt.Errorf("wal: group %d: %w", k, err)
		}
		m.groups = append(m.groups, w)
	}
	return m, nil
}

// For returns the group that logs region's edits.
func (m *MultiWAL) For(region string) *WAL {
	if len(m.groups) == 1 {
		return m.groups[0]
	}
	h := fnv.New32a()
	h.Write([]byte(region))
	return m.groups[h.Sum32()%uint32(len(m.groups))]
}

// Groups are the group WALs, by number.
func (m *MultiWAL) Groups() []*WAL { return m.groups }

// Err is the first group's error (a broken or closed group: its regions' writes fail).
func (m *MultiWAL) Err() error {
	for k, g := range m.groups {
		if err := g.Err(); err != nil {
			return fmt.Errorf("WAL group %d: %w", k, err)
		}
	}
	return nil
}

// Backlog is the units every group keeps (a recovery reads them all) and the regions pinning
// each group's oldest.
func (m *MultiWAL) Backlog() (units int, pinning []string) {
	for _, g := range m.groups {
		u, p := g.Backlog()
		units += u
		pinning = append(pinning, p...)
	}
	return units, pinning
}

// Archive archives every group's closed segments.
func (m *MultiWAL) Archive(ctx context.Context) (int, error) {
	var n int
	var errs []error
	for _, g := range m.groups {
		k, err := g.Archive(ctx)
		n += k
		errs = append(errs, err)
	}
	return n, errors.Join(errs...)
}

// Stats sums the groups' counters (LastSeq and SyncedSeq: the highest of any group's).
func (m *MultiWAL) Stats() Stats {
	var st Stats
	for _, g := range m.groups {
		gs := g.Stats()
		st.Appends += gs.Appends
		st.AppendedBytes += gs.AppendedBytes
		st.BytesWritten += gs.BytesWritten
		st.Syncs += gs.Syncs
		st.SyncNanos += gs.SyncNanos
		st.Rolls += gs.Rolls
		st.RollErrors += gs.RollErrors
		st.Failures += gs.Failures
		st.SegmentsArchived += gs.SegmentsArchived
		st.ZeroedBytes += gs.ZeroedBytes
		st.ZeroErrors += gs.ZeroErrors
		st.Segments += gs.Segments
		st.LastSeq = max(st.LastSeq, gs.LastSeq)
		st.SyncedSeq = max(st.SyncedSeq, gs.SyncedSeq)
		for i, n := range gs.SyncLatency {
			st.SyncLatency[i] += n
		}
	}
	return st
}

// Close closes every group.
func (m *MultiWAL) Close() error {
	var errs []error
	for _, g := range m.groups {
		errs = append(errs, g.Close())
	}
	return errors.Join(errs...)
}

// groupDirs lists the group subdirectories of a WAL directory, by group number (nil: the
// directory is a plain WAL's).
func groupDirs(fs storage.FS, dir string) ([]string, error) {
	names, err := fs.List(dir)
	if err != nil {
		return nil, err
	}
	var out []string
	byK := map[int]string{}
	maxK := -1
	for _, n := range names {
		if k, ok := parseGroupDir(n); ok {
			byK[k] = path.Join(dir, n)
			maxK = max(maxK, k)
		}
	}
	for k := 0; k <= maxK; k++ {
		if d, ok := byK[k]; ok {
			out = append(out, d)
		}
	}
	return out, nil
}
