package region

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"path"
	"slices"
	"time"

	"github.com/cellstore/cellstore/engine/cell"
	"github.com/cellstore/cellstore/engine/wal"
)

// A move's close hands the region's last edits to the next opener through the manifest.
//
// Writes to a region wait while it moves, from the start of its close's last flush (the pre-close
// flush took the bulk while it still served) until it is open at its destination. On object
// storage that last flush is two PUTs one after the other — the new store file, then the manifest
// naming it — and under load each took hundreds of milliseconds. A close for a move writes the
// memstore's edits into the manifest instead (WAL records, as the read replicas are shipped), by
// the one conditional replace that fences a region anyway: the opener finds them with the manifest
// it reads in any case, replays them into its memstore and serves without flushing first; its
// first flush writes them to a store file and drops them from the manifest. Only small memstores
// are handed off (maxHandoffBytes); anything else is flushed as before.

// maxHandoffBytes bounds the cell bytes a close hands off in the manifest, which every open reads
// and every flush and compaction rewrites until a flush takes the edits into a store file.
const maxHandoffBytes = 64 << 10

// handoffFlushAfter is how long after an open that replayed handed-off edits its region asks for
// the flush that writes them (and drops them from the manifest): until then every manifest commit
// carries them, and a region server of an earlier release opening the region would not see them.
var handoffFlushAfter = 3 * time.Second

// handoffEdit is one edit a move's close left in the manifest: a WAL record (wal.AppendEditRecord,
// checksummed) and its sequence id.
type handoffEdit struct {
	Seq    uint64 `json:"seq"`
	Record []byte `json:"record"`
}

// handoffBytes is the record bytes of edits.
func handoffBytes(edits []handoffEdit) int {
	n := 0
	for _, e := range edits {
		n += len(e.Record)
	}
	return n
}

// pruneHandoff drops the handed-off edits that the store files hold (every family flushed past
// them).
func pruneHandoff(edits []handoffEdit, flushed uint64) []handoffEdit {
	if len(edits) == 0 {
		return nil
	}
	out := slices.DeleteFunc(slices.Clone(edits), func(e handoffEdit) bool { return e.Seq <= flushed })
	if len(out) == 0 {
		return nil
	}
	return out
}

// errNoHandoff: the snapshot cannot be handed off (too large once encoded, or a cell the manifest
// says is flushed); the close writes a store file instead.
var errNoHandoff = errors.New("region: the memstore cannot be handed off in the manifest")

// CloseForMove is Close for a region that will open on another server right after (a move): the
// last edits go to the manifest rather than a store file when they are few (the opener replays
// them), so the region's writes wait for one write to storage instead of two.
func (r *Region) CloseForMove() error { return r.close(true) }

// HoldCompactions keeps compactions from starting, and has one under way give up at its next
// check, until the region closes: a move's source calls it before its pre-close flush, so that
// its close does not wait for a compaction's last writes (and the destination, which prepared
// the region's files, does not find them replaced). The next server compacts once it serves.
func (r *Region) HoldCompactions() { r.compactionsHeld.Store(true) }

// HandoffFits reports whether the memstore is small enough for CloseForMove to hand it off (a
// move's source flushes again, still serving, when it is not).
func (r *Region) HandoffFits() bool { return r.MemstoreStats().DataBytes <= maxHandoffBytes }

// handoffOK reports whether a flush with these unflushed accounts may hand the edits off (the
// caller holds the updates lock).
func (r *Region) handoffOK(closing bool, session uint64, choose chooser, dataBytes int64) bool {
	return closing && session == 0 && choose == nil && !r.replica && r.handoffClose.Load() && dataBytes <= maxHandoffBytes
}

// encodeHandoff turns the flush's snapshots into edits for the manifest man (the region's now),
// merged with those an earlier handoff left there (a retried close, or a region opened from a
// handoff and not flushed since: an edit already there is kept as it was).
func (r *Region) encodeHandoff(p *pendingFlush, man *manifest) ([]handoffEdit, error) {
	bySeq := map[uint64][]cell.KeyValue{}
	for i, snap := range p.snaps {
		if snap == nil {
			continue
		}
		famFlushed := man.familyFlushed(r.fams[i].Name)
		for _, seg := range snap.Segments() {
			sc, err := seg.NewScanner(math.MaxUint64)
			if err != nil {
				return nil, err
			}
			for ok := sc.Seek(cell.AppendFirstOnRow(nil, nil)); ok; ok = sc.Next() {
				if sc.Seq() <= famFlushed {
					sc.Close()
					return nil, fmt.Errorf("%w: cell of sequence id %d, family %s flushed to %d", errNoHandoff, sc.Seq(), r.fams[i].Name, famFlushed)
				}
				bySeq[sc.Seq()] = append(bySeq[sc.Seq()], cell.AppendTaggedKeyValue(nil, sc.Key(), sc.Value(), sc.Tags()))
			}
			err = sc.Err()
			sc.Close()
			if err != nil {
				return nil, err
			}
		}
	}
	out := slices.Clone(man.Handoff)
	for _, e := range man.Handoff {
		delete(bySeq, e.Seq)
	}
	name := []byte(r.name)
	for seq, cells := range bySeq {
		rec, err := wal.AppendEditRecord(nil, &wal.Edit{Region: name, Seq: seq, Cells: cells})
		if err != nil {
			return nil, fmt.Errorf("%w: %w", errNoHandoff, err)
		}
		out = append(out, handoffEdit{Seq: seq, Record: rec})
	}
	slices.SortFunc(out, func(a, b handoffEdit) int { return cmp.Compare(a.Seq, b.Seq) })
	if n := handoffBytes(out); n > 2*maxHandoffBytes {
		return nil, fmt.Errorf("%w: %d bytes of records", errNoHandoff, n)
	}
	return out, nil
}

// commitHandoff commits the flush p by handing its snapshots off in the manifest (no store file):
// the manifest's flushed sequence ids stay, its handed-off edits now hold the snapshots' cells.
// errNoHandoff: nothing was written, the caller writes store files.
func (r *Region) commitHandoff(p *pendingFlush, res FlushResult, t1 time.Time) (FlushResult, error) {
	r.filesMu.Lock()
	man := r.man
	r.filesMu.Unlock()
	edits, err := r.encodeHandoff(p, man)
	if err != nil {
		return FlushResult{}, err
	}
	t2 := time.Now()
	res.Write = t2.Sub(t1)
	res.Handoff = len(edits)
	res.Bytes = int64(handoffBytes(edits))
	res.Families, _ = p.families(r)
	// The snapshots stay: the edits are in no store file, and the region serves reads until its
	// close ends (releasing the memstore then).
	if err := r.commitFiles(nil, nil, -1, false, true, func(m *manifest) { m.Handoff = edits }, nil); err != nil {
		return FlushResult{}, fmt.Errorf("region %s: handing the memstore off in the manifest: %w", r.name, err)
	}
	r.pending = nil
	res.Commit = time.Since(t2)
	// The edits are durable in the manifest: this server's WAL no longer needs them.
	_ = r.wal.MarkFlushed(r.name, p.seq)
	r.metrics.Handoffs.Add(1)
	r.log.Debug("close handed the memstore off in the manifest", "edits", len(edits), "bytes", res.Bytes, "seq", p.seq)
	return res, nil
}

// replayHandoff applies the edits a move's close left in the manifest.
func (r *Region) replayHandoff(apply func(*wal.Edit) error) (int, error) {
	var e wal.Edit
	for _, h := range r.man.Handoff {
		if err := wal.DecodeEditRecord(h.Record, &e); err != nil {
			return 0, fmt.Errorf("%w: region %s: handed-off edit %d in the manifest: %w", ErrCorrupt, r.name, h.Seq, err)
		}
		if e.Seq != h.Seq {
			return 0, fmt.Errorf("%w: region %s: handed-off edit says sequence id %d, the manifest %d", ErrCorrupt, r.name, e.Seq, h.Seq)
		}
		if err := apply(&e); err != nil {
			return 0, err
		}
	}
	return len(r.man.Handoff), nil
}

// checkNoHandoff refuses (with kind) a region whose manifest holds handed-off edits, for what
// reads a closed region's files without opening it (a split's or a merge's storage step, a
// snapshot): those edits are in no store file until the region opens and flushes.
func (m *manifest) checkNoHandoff(region string, kind error) error {
	if len(m.Handoff) == 0 {
		return nil
	}
	return fmt.Errorf("%w: region %s holds %d edits that a move's close left in its manifest and no store file has yet: open the region (its first flush writes them) and try again",
		kind, region, len(m.Handoff))
}

// PendingRecoveredEdits is the number of edits in a closed region's recovered edits (split from
// a dead server's log, or written by a point-in-time recovery) above what its store files hold:
// they reach its files only when it next opens.
func PendingRecoveredEdits(st Storage, info Info) (int, error) {
	files := st.files()
	dir := info.Dir()
	if found, err := hasRecoveredEdits(files, dir); err != nil || !found {
		return 0, err // most regions have none: one listing
	}
	man, _, _, err := readManifest(files, dir)
	if err != nil {
		return 0, fmt.Errorf("region %s: %w", info.EncodedName(), err)
	}
	n, err := recoveredAbove(files, dir, man.FlushedSeq)
	if err != nil {
		return 0, fmt.Errorf("region %s: %w", info.EncodedName(), err)
	}
	return n, nil
}

// hasRecoveredEdits says whether the region at dir has recovered-edits files or objects.
func hasRecoveredEdits(files regionFiles, dir string) (bool, error) {
	names, err := files.list(path.Join(dir, "recovered.edits"))
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	return len(names) > 0, err
}

// checkRecoveredReplayed refuses (refusal) a closed region whose recovered edits hold edits its
// files do not: they were never replayed. Stale ones — at or below its flushed sequence id, as a
// log split leaves for a region that moved or stopped with a flush — do not count.
func checkRecoveredReplayed(files regionFiles, dir string, man *manifest, name string, refusal error) error {
	if found, err := hasRecoveredEdits(files, dir); err != nil || !found {
		return err
	}
	n, err := recoveredAbove(files, dir, man.FlushedSeq)
	if err != nil {
		return fmt.Errorf("region %s: %w", name, err)
	}
	if n > 0 {
		return fmt.Errorf("%w: region %s has %d recovered edits that were not replayed: open it first", refusal, name, n)
	}
	return nil
}

// recoveredAbove counts the edits of the region at dir's recovered edits with a sequence id above
// flushed (those at or below it are in its files: a log split writes a region's edits whatever
// it flushed since, and a move or stop leaves them behind).
func recoveredAbove(files regionFiles, dir string, flushed uint64) (int, error) {
	rdir := path.Join(dir, "recovered.edits")
	n := 0
	if b, ok := files.(bucketFiles); ok {
		_, err := wal.ReadRecoveredEdits(context.Background(), b.b, rdir, func(e *wal.Edit) error {
			if e.Seq > flushed {
				n++
			}
			return nil
		})
		return n, err
	}
	rd, err := wal.NewRecoveredEditsReader(files.fs(), rdir, wal.ReplayOptions{FromSeq: flushed + 1})
	if err != nil {
		return 0, err
	}
	defer rd.Close()
	for rd.Next() {
		n++
	}
	return n, rd.Err()
}

// HandedOffEdits is the number of edits a move's close left in the region's manifest on storage
// and no store file holds yet (a region that is not open: they wait for its next open).
func HandedOffEdits(st Storage, info Info) (int, error) {
	man, _, _, err := readManifest(st.files(), info.Dir())
	if err != nil {
		return 0, fmt.Errorf("region %s: %w", info.EncodedName(), err)
	}
	return len(man.Handoff), nil
}
