package master

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"path"
	"sort"
	"strings"
	"sync"

	"github.com/cellstore/cellstore/engine/cell"
	"github.com/cellstore/cellstore/engine/storage"
	"github.com/cellstore/cellstore/engine/wal"
)

// The catalog is the master's durable state: tables, regions and their assignments, quotas,
// cluster settings and in-flight procedures, as rows of one column (family "i", qualifier "v")
// whose values are protobuf messages. It lives under meta/ on shared storage, so a standby master
// that takes over reads exactly what the last active one wrote:
//
//	meta/wal/       the catalog's write-ahead log (engine/wal segments, one edit per change)
//	meta/snapshot   every row as of a sequence id, written atomically; the log after it replays
//
// Each Apply is one WAL edit synced before it returns, so a batch of row changes is atomic and
// durable. The rows are also held in memory (the catalog is small), and Snapshot bounds replay.

var (
	catalogFamily    = []byte("i")
	catalogQualifier = []byte("v")
	catalogRegion    = []byte("meta")
	snapshotMagic    = []byte("CSCATLG1")
	castagnoli       = crc32.MakeTable(crc32.Castagnoli)
)

// CatalogChange is one row change: Value nil deletes the row.
type CatalogChange struct {
	Key   string
	Value []byte
}

// Catalog is the master's durable key-value state: a snapshot and a log of the changes since.
type Catalog struct {
	store catalogStore
	dir   string

	mu          sync.RWMutex
	rows        map[string][]byte
	sinceSnap   int
	snapshotSeq uint64
	closed      bool
	// releaseMu: one release of what the snapshots cover runs at a time (a background one that
	// finds another running skips: the next covers what it skipped). released waits for the
	// background ones on Close.
	releaseMu sync.Mutex
	released  sync.WaitGroup
	// snapshotPending: the opening read earlier logs that a snapshot would let go.
	snapshotPending bool
	// broken: a log write failed (fenced, the store failing): the log may have handed out a
	// sequence id nothing durable holds, which a successor's first change takes, so nothing
	// more is written — no change, no snapshot claiming that id (the master stops on the
	// failure and a new activation opens the catalog afresh).
	broken error
}

// catalogStore is where the catalog lives: a directory tree (a snapshot file and a segment WAL,
// guarded by the master's lock of the directory) or a bucket (catalog_bucket.go).
type catalogStore interface {
	// append makes one edit durable.
	append(e *wal.Edit) error
	// lastSeq is the highest sequence id of the log.
	lastSeq() uint64
	// writeSnapshot replaces the snapshot and lets the log drop what it covers (up to seq), or
	// leaves the dropping to release.
	writeSnapshot(b []byte, seq uint64) error
	// release drops what the snapshots written so far cover (nothing to do for some stores). It
	// runs without the catalog's lock: on a bucket it deletes objects one by one, which took
	// seconds while every commit — and so the master's every call, heartbeats included — waited.
	release() error
	close() error
}

// fsCatalog: meta/snapshot and the segment WAL meta/wal (the segments a snapshot covers deleted).
type fsCatalog struct {
	fs  storage.FS
	dir string
	log *wal.WAL
}

func (f *fsCatalog) append(e *wal.Edit) error {
	_, err := f.log.Append(e, wal.SyncWAL)
	return err
}

func (f *fsCatalog) lastSeq() uint64 { return f.log.LastSeq() }

func (f *fsCatalog) writeSnapshot(b []byte, seq uint64) error {
	if err := storage.WriteFile(f.fs, path.Join(f.dir, "snapshot"), b); err != nil {
		return err
	}
	if err := f.log.MarkFlushed(string(catalogRegion), seq); err != nil {
		return err
	}
	return f.log.Roll()
}

func (f *fsCatalog) release() error { return nil }

func (f *fsCatalog) close() error { return f.log.Close() }

// SnapshotEvery is the number of changes after which Apply writes a snapshot.
const SnapshotEvery = 4096

// OpenCatalog opens (or creates) the catalog under dir: it loads the snapshot and replays the log.
// Only the active master opens it, after fencing the previous one by winning the election.
func OpenCatalog(fs storage.FS, dir string) (*Catalog, error) {
	c := &Catalog{dir: dir, rows: map[string][]byte{}}
	if err := fs.MkdirAll(path.Join(dir, "wal")); err != nil {
		return nil, fmt.Errorf("catalog: %w", err)
	}
	name := path.Join(dir, "snapshot")
	b, err := storage.ReadFile(fs, name)
	if err != nil {
		if ok, _ := storage.Exists(fs, name); ok {
			return nil, fmt.Errorf("catalog: read %s: %w", name, err)
		}
		b = nil
	}
	if err := c.loadSnapshot(name, b); err != nil {
		return nil, err
	}
	r, err := wal.NewReader(fs, path.Join(dir, "wal"), wal.ReplayOptions{FromSeq: c.snapshotSeq + 1})
	if err != nil {
		return nil, fmt.Errorf("catalog: replay: %w", err)
	}
	last := c.snapshotSeq
	for r.Next() {
		e := r.Edit()
		c.applyEdit(e)
		last = max(last, e.Seq)
		c.sinceSnap++
	}
	err = r.Err()
	r.Close()
	if err != nil {
		return nil, fmt.Errorf("catalog: replay: %w", err)
	}
	// Segments the snapshot covers are deleted: nothing reads them again (they were moved to
	// meta/archive, which grew by a segment a snapshot for good; what an earlier release left
	// there goes now).
	if old, err := fs.List(path.Join(dir, "archive")); err == nil {
		for _, n := range old {
			_ = fs.Remove(path.Join(dir, "archive", n))
		}
		_ = fs.Remove(path.Join(dir, "archive"))
	}
	log, err := wal.Open(wal.Options{FS: fs, Dir: path.Join(dir, "wal"), InitialSeq: last})
	if err != nil {
		return nil, fmt.Errorf("catalog: open log: %w", err)
	}
	log.AdvanceSeq(last)
	c.store = &fsCatalog{fs: fs, dir: dir, log: log}
	return c, nil
}

func (c *Catalog) applyEdit(e *wal.Edit) {
	for _, kv := range e.Cells {
		k := kv.Key()
		row := string(k.Row())
		if k.Type() == cell.DeleteFamily {
			delete(c.rows, row)
		} else {
			c.rows[row] = bytes.Clone(kv.Value())
		}
	}
}

// Apply makes the changes durable (one synced log record) and then visible.
func (c *Catalog) Apply(changes ...CatalogChange) error {
	if len(changes) == 0 {
		return nil
	}
	e := &wal.Edit{Region: catalogRegion}
	for _, ch := range changes {
		if ch.Key == "" {
			return errors.New("catalog: empty key")
		}
		if ch.Value == nil {
			e.Cells = append(e.Cells, cell.KeyValue(cell.AppendKeyValue(nil, []byte(ch.Key), catalogFamily, nil, 0, cell.DeleteFamily, nil)))
		} else {
			e.Cells = append(e.Cells, cell.KeyValue(cell.AppendKeyValue(nil, []byte(ch.Key), catalogFamily, catalogQualifier, 0, cell.Put, ch.Value)))
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return errors.New("catalog: closed")
	}
	if c.broken != nil {
		return fmt.Errorf("catalog: broken by an earlier failed write: %w", c.broken)
	}
	if err := c.store.append(e); err != nil {
		if !errors.Is(err, wal.ErrRecordTooLarge) { // (refused before anything was written)
			c.broken = err
		}
		return fmt.Errorf("catalog: %w", err)
	}
	c.applyEdit(e)
	c.sinceSnap += len(changes)
	if c.sinceSnap >= SnapshotEvery {
		if err := c.snapshotLocked(); err != nil {
			return fmt.Errorf("catalog: change applied, but the snapshot failed: %w", err)
		}
		c.releaseInBackground()
	}
	return nil
}

// releaseInBackground lets the store drop what the snapshot covers, off the caller's path (c.mu
// held or not).
func (c *Catalog) releaseInBackground() {
	if !c.releaseMu.TryLock() {
		return
	}
	c.released.Add(1)
	go func() {
		defer c.released.Done()
		defer c.releaseMu.Unlock()
		_ = c.store.release() // what is left is dropped by the next release
	}()
}

// release lets the store drop what the snapshots cover, waiting for a release under way.
func (c *Catalog) release() error {
	c.releaseMu.Lock()
	defer c.releaseMu.Unlock()
	return c.store.release()
}

// Get returns a row's value (a copy) or nil.
func (c *Catalog) Get(key string) []byte {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return bytes.Clone(c.rows[key])
}

// Scan returns the rows whose key starts with prefix, sorted by key (values are copies).
func (c *Catalog) Scan(prefix string) []CatalogChange {
	c.mu.RLock()
	defer c.mu.RUnlock()
	var out []CatalogChange
	for k, v := range c.rows {
		if strings.HasPrefix(k, prefix) {
			out = append(out, CatalogChange{Key: k, Value: bytes.Clone(v)})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Key < out[j].Key })
	return out
}

// Snapshot writes every row to meta/snapshot and lets the log segments before it be archived.
func (c *Catalog) Snapshot() error {
	c.mu.Lock()
	err := c.snapshotLocked()
	c.mu.Unlock()
	if err != nil {
		return err
	}
	return c.release()
}

func (c *Catalog) snapshotLocked() error {
	if c.broken != nil {
		return fmt.Errorf("catalog: no snapshot after a failed write: %w", c.broken)
	}
	seq := c.store.lastSeq()
	keys := make([]string, 0, len(c.rows))
	for k := range c.rows {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	b := append([]byte(nil), snapshotMagic...)
	b = binary.BigEndian.AppendUint64(b, seq)
	b = binary.BigEndian.AppendUint32(b, uint32(len(keys)))
	for _, k := range keys {
		b = binary.AppendUvarint(b, uint64(len(k)))
		b = append(b, k...)
		b = binary.AppendUvarint(b, uint64(len(c.rows[k])))
		b = append(b, c.rows[k]...)
	}
	b = binary.BigEndian.AppendUint32(b, crc32.Checksum(b, castagnoli))
	if err := c.store.writeSnapshot(b, seq); err != nil {
		return err
	}
	c.snapshotSeq, c.sinceSnap, c.snapshotPending = seq, 0, false
	return nil
}

// loadSnapshot loads a snapshot's rows (none when b is nil: no snapshot yet).
func (c *Catalog) loadSnapshot(name string, b []byte) error {
	if b == nil {
		return nil
	}
	bad := func(off int, why string) error {
		return fmt.Errorf("catalog: %s is corrupt at byte %d: %s", name, off, why)
	}
	if len(b) < len(snapshotMagic)+16 || !bytes.Equal(b[:len(snapshotMagic)], snapshotMagic) {
		return bad(0, "not a catalog snapshot (bad magic or too short)")
	}
	body, sum := b[:len(b)-4], binary.BigEndian.Uint32(b[len(b)-4:])
	if crc32.Checksum(body, castagnoli) != sum {
		return bad(len(b)-4, "checksum mismatch")
	}
	off := len(snapshotMagic)
	c.snapshotSeq = binary.BigEndian.Uint64(body[off:])
	n := binary.BigEndian.Uint32(body[off+8:])
	off += 12
	for i := uint32(0); i < n; i++ {
		var parts [2][]byte
		for j := range parts {
			l, m := binary.Uvarint(body[off:])
			if m <= 0 || l > uint64(len(body)-off-m) {
				return bad(off, "bad length")
			}
			parts[j] = body[off+m : off+m+int(l)]
			off += m + int(l)
		}
		c.rows[string(parts[0])] = bytes.Clone(parts[1])
	}
	if off != len(body) {
		return bad(off, "trailing bytes")
	}
	return nil
}

// Close syncs and closes the log.
func (c *Catalog) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return nil
	}
	c.closed = true
	c.released.Wait()
	return c.store.close()
}
