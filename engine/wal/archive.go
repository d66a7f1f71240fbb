package wal

import (
	"cmp"
	"container/heap"
	"context"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"path"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cellstore/cellstore/engine/storage"
)

// The WAL archive keeps a cluster's logs for point-in-time recovery: a copy of every log unit
// (directory segment or log object) at a backup location, kept after the unit itself is gone from
// the cluster's storage. Archive objects are immutable and written whole, create-only:
//
//	wal/<log>/<first>-<last>.log     the records of units first..last of one log, in order
//	wal-regions/<region>             the table of a region ("namespace:table")
//	wal-pruned                       how far the archive was pruned (PruneArchive)
//	wal-resets/<table, hex>/<time>   a truncate, drop or restore of a table (RecordTableReset)
//
// where <log> is a region server process's log name (its WAL directory's name: server and start
// code) and the numbers have 20 digits. An archive object is the 24-byte WAL header (kind 5, the
// number field holding <first>) then records exactly as in a segment. A region server archives
// its own closed units (Archiver on a Log; a unit is deleted only once flushed and archived) and
// the master archives what a dead server had not (ArchiveDeadLog) before deleting its log.
// ReadArchive merges every log's edits back into sequence order.

// ArchivePrefix and ArchiveRegionsPrefix are the archive's key prefixes at a backup location.
const (
	ArchivePrefix        = "wal"
	ArchiveRegionsPrefix = "wal-regions"
	// ArchivePrunedKey holds the newest last-modified time (RFC 3339, nanoseconds) of the archive
	// objects PruneArchive deleted: every edit written after it is still in the archive, and one
	// written before it may not be.
	ArchivePrunedKey = "wal-pruned"
	// ArchiveResetsPrefix holds a record of each truncate, drop or snapshot restore of a table: its
	// regions' edits before and after one are not one history, so a point-in-time recovery must
	// not replay across it.
	ArchiveResetsPrefix = "wal-resets"
)

// archiveObjectBytes cuts archive objects at about this size.
const archiveObjectBytes = 16 << 20

const kindArchive = 5

// ArchiveTarget is where a log is archived: a backup location and the log's name there.
type ArchiveTarget struct {
	Bucket storage.Bucket
	Log    string
}

func (t *ArchiveTarget) check() error {
	if t.Bucket == nil || t.Log == "" || strings.Contains(t.Log, "/") {
		return fmt.Errorf("wal: an ArchiveTarget needs a Bucket and a log name without '/' (got %q)", t.Log)
	}
	return nil
}

// ArchiveKey names the archive object holding units first..last of log.
func ArchiveKey(log string, first, last uint64) string {
	return path.Join(ArchivePrefix, log, fmt.Sprintf("%0*d-%0*d.log", segmentNameDigits, first, segmentNameDigits, last))
}

// archivedObject is one archive object's key and unit range.
type archivedObject struct {
	key         string
	log         string
	first, last uint64
	size        int64
	modTime     time.Time
}

func parseArchiveKey(key string) (archivedObject, bool) {
	rest, ok := strings.CutPrefix(key, ArchivePrefix+"/")
	if !ok {
		return archivedObject{}, false
	}
	log, name, ok := strings.Cut(rest, "/")
	if !ok || log == "" || strings.Contains(name, "/") {
		return archivedObject{}, false
	}
	name, ok = strings.CutSuffix(name, ".log")
	if !ok {
		return archivedObject{}, false
	}
	a, b, ok := strings.Cut(name, "-")
	if !ok {
		return archivedObject{}, false
	}
	first, ok1 := parseNumbered(a, "")
	last, ok2 := parseNumbered(b, "")
	if !ok1 || !ok2 || last < first {
		return archivedObject{}, false
	}
	return archivedObject{key: key, log: log, first: first, last: last}, true
}

// listArchive lists the archive objects of one log (log != "") or of every log, sorted by log
// and first unit.
func listArchive(ctx context.Context, b storage.Bucket, log string) ([]archivedObject, error) {
	prefix := ArchivePrefix + "/"
	if log != "" {
		prefix += log + "/"
	}
	var out []archivedObject
	err := storage.Walk(ctx, b, prefix, func(o storage.ObjectInfo) error {
		if a, ok := parseArchiveKey(o.Key); ok {
			a.modTime, a.size = o.ModTime, o.Size
			out = append(out, a)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("wal: listing the archive at %s: %w", b.Describe(), err)
	}
	slices.SortFunc(out, func(x, y archivedObject) int {
		if c := strings.Compare(x.log, y.log); c != 0 {
			return c
		}
		return cmp.Compare(x.first, y.first)
	})
	return out, nil
}

// ArchivedThrough returns the highest unit of log already archived (0: none).
func ArchivedThrough(ctx context.Context, b storage.Bucket, log string) (uint64, error) {
	objs, err := listArchive(ctx, b, log)
	if err != nil {
		return 0, err
	}
	var through uint64
	for _, o := range objs {
		through = max(through, o.last)
	}
	return through, nil
}

// archiveProgress is how far a live log is archived, shared by WAL and ObjectLog: every unit
// numbered up to through is archived; known says through was read from the archive (after a
// failed PUT, which may have landed, it is read again). One Archive runs at a time (round).
type archiveProgress struct {
	round   sync.Mutex
	through atomic.Uint64
	known   atomic.Bool
}

// begin makes through known (the caller holds round).
func (a *archiveProgress) begin(ctx context.Context, t *ArchiveTarget) error {
	if a.known.Load() {
		return nil
	}
	through, err := ArchivedThrough(ctx, t.Bucket, t.Log)
	if err != nil {
		return err
	}
	a.advance(through)
	a.known.Store(true)
	return nil
}

func (a *archiveProgress) advance(n uint64) {
	for {
		cur := a.through.Load()
		if n <= cur || a.through.CompareAndSwap(cur, n) {
			return
		}
	}
}

// put writes a pack and moves through past it.
func (a *archiveProgress) put(ctx context.Context, t *ArchiveTarget, p *archivePack) error {
	last := p.last
	if err := p.put(ctx, t); err != nil {
		a.known.Store(false)
		return err
	}
	a.advance(last)
	return nil
}

// archivePack gathers the records of consecutive units into one archive object.
type archivePack struct {
	first, last uint64
	buf         []byte
	units       int
}

// add appends unit n's records (a whole number of records in the segment encoding).
func (p *archivePack) add(n uint64, records []byte) {
	if p.units == 0 {
		p.first = n
		p.buf = appendHeader(p.buf[:0], kindArchive, n)
	}
	p.last = n
	p.units++
	p.buf = append(p.buf, records...)
}

func (p *archivePack) full() bool { return len(p.buf) >= archiveObjectBytes }

// put writes the pack (create-only: a retried PUT whose first answer was lost finds its own
// body) and empties it.
func (p *archivePack) put(ctx context.Context, t *ArchiveTarget) error {
	if p.units == 0 {
		return nil
	}
	key := ArchiveKey(t.Log, p.first, p.last)
	if _, err := t.Bucket.Put(ctx, key, p.buf, storage.Condition{IfNoneMatch: true}); err != nil {
		return fmt.Errorf("wal: archiving units %d-%d of %s to %s: %w", p.first, p.last, t.Log, t.Bucket.Describe(), err)
	}
	p.units = 0
	p.buf = p.buf[:0]
	if cap(p.buf) > 2*archiveObjectBytes {
		p.buf = nil
	}
	return nil
}

// segmentRecords reads the valid records of one segment file and appends them, re-encoded, to
// dst. last: the file is the last segment of its log, whose torn tail (such as a killed server's
// preallocated zeros) is left out; damage in any other segment (trimmed and synced at its roll)
// is corruption, as in replay.
func segmentRecords(fs storage.FS, file string, last bool, dst []byte, onRegion func(string)) ([]byte, error) {
	r := &Reader{fs: fs, files: []string{file}, tolerateTail: last, kind: kindSegment}
	defer r.Close()
	for r.Next() {
		dst = append(dst, r.raw...)
		if onRegion != nil {
			onRegion(string(r.edit.Region))
		}
	}
	return dst, r.Err()
}

// ArchiveDeadObjectLog archives the units of a dead server's object log (fenced: nothing more is
// written to it) that its server had not archived, before the log is deleted. Fence markers are
// not archived. onRegion, if set, is called with the region of every edit archived.
func ArchiveDeadObjectLog(ctx context.Context, b storage.Bucket, prefix string, t ArchiveTarget, onRegion func(string)) (units int, err error) {
	if err := t.check(); err != nil {
		return 0, err
	}
	through, err := ArchivedThrough(ctx, t.Bucket, t.Log)
	if err != nil {
		return 0, err
	}
	objs, err := listObjects(ctx, b, prefix)
	if err != nil {
		return 0, fmt.Errorf("wal: archive %s: %w", prefix, err)
	}
	var p archivePack
	var todo []numberedObject
	for _, o := range objs {
		if o.n > through {
			todo = append(todo, o)
		}
	}
	err = fetchObjects(ctx, b, todo, func(o numberedObject, data []byte) error {
		kind, data, err := readObject(o, data)
		if err != nil || kind == kindFence {
			return err
		}
		if err := decodeRecords(data, o.key, func(e *Edit) error {
			if onRegion != nil {
				onRegion(string(e.Region))
			}
			return nil
		}); err != nil {
			return err // damage: checked before a byte of it is archived
		}
		p.add(o.n, data[headerSize:])
		units++
		if p.full() {
			return p.put(ctx, &t)
		}
		return nil
	})
	if err != nil {
		return units, err
	}
	return units, p.put(ctx, &t)
}

// ArchiveDeadDir archives the segments of a dead server's WAL directory (fenced) that its server
// had not archived, before the directory is moved away. onRegion is as for ArchiveDeadObjectLog.
//
// The directory of a MultiWAL is archived group by group, each as its own log (GroupLog), as its
// server archived them.
func ArchiveDeadDir(ctx context.Context, fs storage.FS, dir string, t ArchiveTarget, onRegion func(string)) (units int, err error) {
	if err := t.check(); err != nil {
		return 0, err
	}
	groups, err := groupDirs(fs, dir)
	if err != nil {
		return 0, fmt.Errorf("wal: archive %s: %w", dir, err)
	}
	for _, g := range groups {
		k, _ := parseGroupDir(path.Base(g))
		n, err := ArchiveDeadDir(ctx, fs, g, ArchiveTarget{Bucket: t.Bucket, Log: GroupLog(t.Log, k)}, onRegion)
		units += n
		if err != nil {
			return units, err
		}
	}
	if len(groups) > 0 {
		return units, nil
	}
	through, err := ArchivedThrough(ctx, t.Bucket, t.Log)
	if err != nil {
		return 0, err
	}
	names, err := fs.List(dir)
	if err != nil {
		return 0, fmt.Errorf("wal: archive %s: %w", dir, err)
	}
	slices.Sort(names)
	var lastSeg uint64
	for _, name := range names {
		if n, ok := parseSegmentName(name); ok {
			lastSeg = max(lastSeg, n)
		}
	}
	var p archivePack
	for _, name := range names {
		n, ok := parseSegmentName(name)
		if !ok || n <= through {
			continue
		}
		recs, err := segmentRecords(fs, path.Join(dir, name), n == lastSeg, nil, onRegion)
		if err != nil {
			return units, err
		}
		p.add(n, recs)
		units++
		if p.full() {
			if err := p.put(ctx, &t); err != nil {
				return units, err
			}
		}
	}
	return units, p.put(ctx, &t)
}

// TableReset is a truncate, drop or snapshot restore of a table, recorded in the archive.
type TableReset struct {
	At   time.Time
	What string // "truncate", "drop", "restore of snapshot <name>"
}

func tableResetsPrefix(table string) string {
	return ArchiveResetsPrefix + "/" + hex.EncodeToString([]byte(table)) + "/"
}

// RecordTableReset records in the archive at b that table ("namespace:table") was truncated,
// dropped or restored at at (before the change is made, so that it is never missing).
func RecordTableReset(ctx context.Context, b storage.Bucket, table string, at time.Time, what string) error {
	key := fmt.Sprintf("%s%020d", tableResetsPrefix(table), at.UnixNano())
	if _, err := b.Put(ctx, key, []byte(what), storage.Condition{}); err != nil {
		return fmt.Errorf("wal: recording the %s of table %s in the archive at %s: %w", what, table, b.Describe(), err)
	}
	return nil
}

// TableResets returns the resets of table recorded in the archive at b, oldest first.
func TableResets(ctx context.Context, b storage.Bucket, table string) ([]TableReset, error) {
	var out []TableReset
	prefix := tableResetsPrefix(table)
	err := storage.Walk(ctx, b, prefix, func(o storage.ObjectInfo) error {
		ns, err := strconv.ParseInt(strings.TrimPrefix(o.Key, prefix), 10, 64)
		if err != nil {
			return &CorruptionError{File: o.Key, Reason: "not a table reset record"}
		}
		data, _, err := b.Get(ctx, o.Key)
		if err != nil {
			return err
		}
		out = append(out, TableReset{At: time.Unix(0, ns), What: string(data)})
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("wal: reading the resets of table %s in the archive at %s: %w", table, b.Describe(), err)
	}
	slices.SortFunc(out, func(a, b TableReset) int { return a.At.Compare(b.At) })
	return out, nil
}

// RecordRegion records a region's table in the archive, once (create-only; an existing record
// is kept).
func RecordRegion(ctx context.Context, b storage.Bucket, region, table string) error {
	key := path.Join(ArchiveRegionsPrefix, region)
	if err := storage.CheckKey(key); err != nil {
		return fmt.Errorf("wal: region %q: %w", region, err)
	}
	_, err := b.Put(ctx, key, []byte(table), storage.Condition{IfNoneMatch: true})
	if errors.Is(err, storage.ErrPrecondition) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("wal: recording the table of region %s in the archive at %s: %w", region, b.Describe(), err)
	}
	return nil
}

// ArchivedRegions returns the table of every region the archive has a record of.
func ArchivedRegions(ctx context.Context, b storage.Bucket) (map[string]string, error) {
	out := map[string]string{}
	err := storage.Walk(ctx, b, ArchiveRegionsPrefix+"/", func(o storage.ObjectInfo) error {
		data, _, err := b.Get(ctx, o.Key)
		if err != nil {
			return err
		}
		out[strings.TrimPrefix(o.Key, ArchiveRegionsPrefix+"/")] = string(data)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("wal: reading the archive's regions at %s: %w", b.Describe(), err)
	}
	return out, nil
}

// PruneArchive deletes the archive objects last modified before cutoff, and returns how many.
// Region records are small and kept. Before deleting it records how far the archive is pruned
// (ArchivePrunedThrough), so that a recovery that would need what it deletes can say so.
func PruneArchive(ctx context.Context, b storage.Bucket, cutoff time.Time) (int, error) {
	var old []string
	var newest time.Time
	err := storage.Walk(ctx, b, ArchivePrefix+"/", func(o storage.ObjectInfo) error {
		if _, ok := parseArchiveKey(o.Key); ok && !o.ModTime.IsZero() && o.ModTime.Before(cutoff) {
			old = append(old, o.Key)
			if o.ModTime.After(newest) {
				newest = o.ModTime
			}
		}
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("wal: listing the archive at %s: %w", b.Describe(), err)
	}
	if len(old) == 0 {
		return 0, nil
	}
	if err := advancePrunedMark(ctx, b, newest); err != nil {
		return 0, err
	}
	if n, err := storage.DeleteAll(ctx, b, old); err != nil {
		return n, fmt.Errorf("wal: pruning the archive: %w", err)
	}
	return len(old), nil
}

// advancePrunedMark moves the archive's pruned mark forward to t, never back: it is replaced
// only if it is still the mark read (a conditional write), so two pruners at once (a deposed
// master and its successor, a backup's deletion) cannot leave the earlier of their times,
// which would let a recovery replay across what the other deleted.
func advancePrunedMark(ctx context.Context, b storage.Bucket, t time.Time) error {
	for attempt := 0; ; attempt++ {
		prev, etag, err := readPrunedMark(ctx, b)
		if err != nil {
			return err
		}
		if !t.After(prev) {
			return nil
		}
		cond := storage.Condition{IfNoneMatch: true}
		switch {
		case etag != "":
			cond = storage.Condition{IfMatch: etag}
		case !prev.IsZero():
			return fmt.Errorf("wal: the archive at %s gave no ETag for %s: it cannot be replaced conditionally", b.Describe(), ArchivePrunedKey)
		}
		_, err = b.Put(ctx, ArchivePrunedKey, []byte(t.UTC().Format(time.RFC3339Nano)), cond)
		if err == nil {
			return nil
		}
		if !errors.Is(err, storage.ErrPrecondition) || attempt >= 20 {
			return fmt.Errorf("wal: recording how far the archive at %s is pruned: %w", b.Describe(), err)
		}
		// Another pruner moved it meanwhile: read it again.
	}
}

// readPrunedMark reads the pruned mark and its ETag ("" and the zero time when there is none).
func readPrunedMark(ctx context.Context, b storage.Bucket) (time.Time, string, error) {
	data, info, err := b.Get(ctx, ArchivePrunedKey)
	if errors.Is(err, storage.ErrNoObject) {
		return time.Time{}, "", nil
	}
	if err != nil {
		return time.Time{}, "", fmt.Errorf("wal: reading how far the archive at %s is pruned: %w", b.Describe(), err)
	}
	t, err := time.Parse(time.RFC3339Nano, string(data))
	if err != nil {
		return time.Time{}, "", &CorruptionError{File: ArchivePrunedKey, Reason: fmt.Sprintf("not a time: %q", data)}
	}
	return t, info.ETag, nil
}

// ArchivePrunedThrough returns how far the archive at b was pruned: edits written after that
// time are all in it (the zero time when it was never pruned).
func ArchivePrunedThrough(ctx context.Context, b storage.Bucket) (time.Time, error) {
	t, _, err := readPrunedMark(ctx, b)
	return t, err
}

// ArchiveStats describe what ReadArchive read.
type ArchiveStats struct {
	Logs, Objects int
	Edits         int64
	// Oldest and Newest are the write times (ms) of the first and last edit of the archive.
	Oldest, Newest int64
}

// ReadArchive calls fn with every archived edit, in sequence-id order across all logs: each log
// is in order already, and a region's sequence ids grow across the servers it moves between, so
// the merge gives every region's edits in the order they were made. Each log's objects are read
// a window at a time (archiveReadBudget shared among the logs), so the memory the merge takes
// does not grow with the number of logs or the size of their objects. An edit that a log repeats
// (its number range overlapping an object written before) is given once. A log missing units
// between two of its objects is an *ArchiveGapError. The Edit passed to fn is valid until fn
// returns.
func ReadArchive(ctx context.Context, b storage.Bucket, fn func(log string, e *Edit) error) (ArchiveStats, error) {
	return ReadArchiveSince(ctx, b, time.Time{}, time.Time{}, fn)
}

// archiveReadBudget is what ReadArchive's windows hold together at most (each log's window is
// between archiveMinWindow and archiveMaxWindow, and grows to hold a record larger than it).
// Variables for tests.
var (
	archiveReadBudget = 128 << 20
	archiveMinWindow  = 64 << 10
	archiveMaxWindow  = 8 << 20
)

// ArchiveGapError says a log of the archive lacks units between two of its objects (deleted by
// hand, by a lifecycle rule, lost in a copy): the edits in them are lost.
type ArchiveGapError struct {
	Bucket, Log string
	From, To    uint64 // the missing units
	// After is the write time of the last edit archived before them (zero: none).
	After time.Time
}

func (e *ArchiveGapError) Error() string {
	msg := fmt.Sprintf("wal: the archive at %s lacks units %d-%d of log %s: the edits in them are lost (removed by hand or by a lifecycle rule on the bucket?)",
		e.Bucket, e.From, e.To, e.Log)
	if !e.After.IsZero() {
		msg += fmt.Sprintf("; a recovery to a time before %s does not need them", e.After.UTC().Format(time.RFC3339Nano))
	}
	return msg
}

// ReadArchiveSince is ReadArchive without the archive objects last modified before since (an
// object is written after every edit in it, so those hold only edits older than since) and, when
// until is set, for a caller that needs only the edits written before until: a gap in a log after
// an edit written at or after until is not an error (the log's edits are in write order), and
// that log is read no further.
func ReadArchiveSince(ctx context.Context, b storage.Bucket, since, until time.Time, fn func(log string, e *Edit) error) (ArchiveStats, error) {
	var st ArchiveStats
	objs, err := listArchive(ctx, b, "")
	if err != nil {
		return st, err
	}
	// The last unit of each log's objects left out as older than since: the first object read
	// must follow it, or the objects between are lost (a gap found only between two objects
	// read missed a loss just after since — the edits a recovery from a backup needs first).
	// Objects lost between ones older than since do not count: only the newest of those is
	// compared. A lost object right after it may have held only older edits; it is an error all
	// the same, since what it held cannot be known.
	skipped := map[string]uint64{}
	if !since.IsZero() {
		objs = slices.DeleteFunc(objs, func(o archivedObject) bool {
			old := !o.modTime.IsZero() && o.modTime.Before(since)
			if old {
				skipped[o.log] = max(skipped[o.log], o.last)
			}
			return old
		})
	}
	byLog := map[string][]archivedObject{}
	var logs []string
	for _, o := range objs {
		if byLog[o.log] == nil {
			logs = append(logs, o.log)
		}
		byLog[o.log] = append(byLog[o.log], o)
	}
	st.Logs, st.Objects = len(logs), len(objs)
	window := min(max(archiveReadBudget/max(len(logs), 1), archiveMinWindow), archiveMaxWindow)
	var untilNs int64
	if !until.IsZero() {
		untilNs = until.UnixNano()
	}
	h := &cursorHeap{}
	for _, l := range logs {
		c := &archiveCursor{ctx: ctx, b: b, log: l, objs: byLog[l], window: window, until: untilNs, through: skipped[l]}
		ok, err := c.next()
		if err != nil {
			return st, err
		}
		if ok {
			h.items = append(h.items, c)
		}
	}
	heap.Init(h)
	for h.Len() > 0 {
		c := h.items[0]
		e := &c.edit
		if st.Edits == 0 || e.WriteTime < st.Oldest {
			st.Oldest = e.WriteTime
		}
		st.Newest = max(st.Newest, e.WriteTime)
		st.Edits++
		if err := fn(c.log, e); err != nil {
			return st, err
		}
		ok, err := c.next()
		if err != nil {
			return st, err
		}
		if ok {
			heap.Fix(h, 0)
		} else {
			heap.Pop(h)
		}
	}
	return st, nil
}

// archiveCursor reads one log's archive objects, one at a time and each a window at a time, edit
// by edit.
type archiveCursor struct {
	ctx    context.Context
	b      storage.Bucket
	log    string
	objs   []archivedObject
	window int
	until  int64 // ns; see ReadArchiveSince (0: none)

	key     string // the object being read ("": none)
	size    int64  // its listed size
	arr     []byte // the buffer buf is in
	buf     []byte // its bytes read and not yet decoded
	pos     int64  // the object's offset of buf[0]
	read    int64  // the object's offset of the next byte to read
	eof     bool   // read to its end
	through uint64 // the highest unit of the objects opened

	edit      Edit
	seen      bool
	prev      uint64 // the last sequence id given
	lastWrite int64  // its write time
}

// fill reads the object's next window, or more when n bytes (from buf[0]) are needed — but never
// more than the object has left, whatever a damaged record's length says.
func (c *archiveCursor) fill(n int) error {
	want := max(c.window, n-len(c.buf))
	if c.size > 0 { // (a store that lists no sizes: read until a short answer)
		want = min(want, int(c.size-c.read))
		if want <= 0 {
			c.eof = true
			return nil
		}
	}
	data, err := c.b.GetRange(c.ctx, c.key, c.read, int64(want))
	if err != nil {
		return fmt.Errorf("wal: reading the archive: %s: %w", c.key, err)
	}
	c.read += int64(len(data))
	c.eof = len(data) < want || (c.size > 0 && c.read >= c.size)
	if len(c.buf) == 0 {
		c.arr, c.buf = data, data // (the edit given last is no longer used)
		return nil
	}
	if cap(c.buf)-len(c.buf) < len(data) {
		// Move what is not yet decoded to the front of a buffer with room for the rest.
		if size := len(c.buf) + len(data); cap(c.arr) < size {
			c.arr = make([]byte, size)
		}
		c.buf = c.arr[:copy(c.arr, c.buf)]
	}
	c.buf = append(c.buf, data...)
	return nil
}

// next decodes the log's next edit into c.edit; false at the end.
func (c *archiveCursor) next() (bool, error) {
	for {
		if c.key != "" {
			if len(c.buf) < recordHeaderSize || len(c.buf) < recordHeaderSize+int(binary.LittleEndian.Uint32(c.buf[4:])) {
				if !c.eof {
					need := recordHeaderSize
					if len(c.buf) >= recordHeaderSize {
						need += int(binary.LittleEndian.Uint32(c.buf[4:]))
					}
					if err := c.fill(need); err != nil {
						return false, err
					}
					continue
				}
				if len(c.buf) > 0 {
					return false, &CorruptionError{File: c.key, Offset: c.pos, Reason: "truncated record"}
				}
				c.key = "" // the object is done
				continue
			}
			payload, n, err := readRecord(c.buf)
			if err != nil {
				return false, &CorruptionError{File: c.key, Offset: c.pos, Reason: err.Error()}
			}
			off := c.pos
			c.buf, c.pos = c.buf[n:], c.pos+int64(n)
			if err := decodeEdit(payload, &c.edit); err != nil {
				return false, &CorruptionError{File: c.key, Offset: off, Reason: "undecodable record: " + err.Error()}
			}
			if c.seen && c.edit.Seq <= c.prev {
				continue // archived twice (an overlapping range)
			}
			c.seen, c.prev, c.lastWrite = true, c.edit.Seq, c.edit.WriteTime
			return true, nil
		}
		if len(c.objs) == 0 {
			c.arr, c.buf = nil, nil
			return false, nil
		}
		o := c.objs[0]
		c.objs = c.objs[1:]
		if c.through > 0 && o.first > c.through+1 {
			if c.until != 0 && c.seen && c.lastWrite >= c.until {
				c.objs, c.arr, c.buf = nil, nil, nil // every edit after the gap is newer still
				return false, nil
			}
			gap := &ArchiveGapError{Bucket: c.b.Describe(), Log: c.log, From: c.through + 1, To: o.first - 1}
			if c.seen {
				gap.After = time.Unix(0, c.lastWrite)
			}
			return false, gap
		}
		c.through = max(c.through, o.last)
		c.key, c.size, c.buf, c.pos, c.read, c.eof = o.key, o.size, c.arr[:0], 0, 0, false
		if err := c.fill(headerSize); err != nil {
			return false, err
		}
		if len(c.buf) < headerSize {
			return false, &CorruptionError{File: o.key, Reason: "shorter than a header"}
		}
		kind, first, err := checkHeader(c.buf[:headerSize])
		if err != nil {
			return false, &CorruptionError{File: o.key, Reason: err.Error()}
		}
		if kind != kindArchive || first != o.first {
			return false, &CorruptionError{File: o.key, Offset: 10, Reason: "not the archive object its key names (kind " +
				strconv.Itoa(int(kind)) + ", first unit " + strconv.FormatUint(first, 10) + ")"}
		}
		c.buf, c.pos = c.buf[headerSize:], headerSize
	}
}

type cursorHeap struct{ items []*archiveCursor }

func (h *cursorHeap) Len() int { return len(h.items) }
func (h *cursorHeap) Less(i, j int) bool {
	a, b := h.items[i], h.items[j]
	if a.edit.Seq != b.edit.Seq {
		return a.edit.Seq < b.edit.Seq
	}
	return a.log < b.log
}
func (h *cursorHeap) Swap(i, j int) { h.items[i], h.items[j] = h.items[j], h.items[i] }
func (h *cursorHeap) Push(x any)    { h.items = append(h.items, x.(*archiveCursor)) }
func (h *cursorHeap) Pop() any {
	x := h.items[len(h.items)-1]
	h.items = h.items[:len(h.items)-1]
	return x
}

// RecoveredEditsHeader starts the body of a recovered-edits object or file; records follow
// (AppendEditRecord), in increasing sequence ids across a region's recovered edits.
func RecoveredEditsHeader(dst []byte) []byte { return appendHeader(dst, kindRecovered, 0) }

// RecoveredEditsName is the name of the n-th recovered-edits object or file of a region (they
// are read in the order of n).
func RecoveredEditsName(n uint64) string {
	return fmt.Sprintf("%0*d%s", segmentNameDigits, n, recoveredSuffix)
}
