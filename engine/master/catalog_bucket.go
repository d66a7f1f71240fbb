package master

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"path"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/cellstore/cellstore/engine/storage"
	"github.com/cellstore/cellstore/engine/wal"
)

// The catalog on a bucket: <dir>/snapshot, replaced by conditional PUTs, and one object log per
// activation, <dir>/log/<generation>/ (wal.ObjectLog). A master opening the catalog fences every
// earlier generation's log before reading it, so a deposed master — one paused past its lease —
// can commit nothing once its successor has read the catalog: its next PUT finds a fence marker.
// Its snapshot is replaced only against the ETag its opener read, so it cannot overwrite a newer
// one either. This replaces the directory lock of the directory-tree catalog.
type bucketCatalog struct {
	b    storage.Bucket
	dir  string
	log  *wal.ObjectLog
	etag string // of the snapshot this master read or wrote ("" when there is none)
	// unsure is the SHA-256 of a snapshot whose Put failed without saying whether it landed (an
	// answer lost), and unsureSeq what it covers: found in place later, it is this master's own.
	unsure    []byte
	unsureSeq uint64

	relMu   sync.Mutex
	covered uint64   // the highest sequence id a written snapshot covers
	oldGens []uint64 // earlier generations, fenced and read: dropped after a snapshot
	// toRetire: the highest generation dropped and not yet recorded as retired.
	toRetire uint64
}

const catalogTimeout = time.Minute

// OpenBucketCatalog opens (or creates) the catalog under dir in a bucket: it loads the snapshot,
// fences and replays every earlier generation's log, and starts the next generation. The earlier
// logs are dropped by the next snapshot (SnapshotIfPending).
func OpenBucketCatalog(b storage.Bucket, dir, who string) (*Catalog, error) {
	return OpenBucketCatalogFrom(b, dir, who, nil)
}

// OpenBucketCatalogFrom is OpenBucketCatalog for a master that followed the catalog as a standby:
// when f's copy rests on the current snapshot, only the log objects written since f's last
// refresh are read (after fencing, as always); otherwise the catalog is read whole. f must not be
// used afterwards.
func OpenBucketCatalogFrom(b storage.Bucket, dir, who string, f *CatalogFollower) (*Catalog, error) {
	ctx, cancel := context.WithTimeout(context.Background(), catalogTimeout)
	defer cancel()
	var bc *bucketCatalog
	next := uint64(1)
	for attempt := 0; ; attempt++ {
		var err error
		if bc, next, err = readBucketCatalog(ctx, b, dir, who, &f); err != nil {
			return nil, err
		}
		// A deposed master may have replaced the snapshot between this opening's read of it and
		// its fences, and dropped the log objects the new one covers: what was read of the logs
		// then lacks them. Everything is fenced now, so reading again from the new snapshot is
		// final.
		current, err := f.current(ctx)
		if err != nil {
			return nil, err
		}
		if current {
			// The generation is claimed before anything is written to it: a log of no objects
			// lists as nothing, so the next opening would take the same generation, fence
			// nothing of this one's, and the two would write one log.
			claimed, err := claimGeneration(ctx, b, dir, next, who)
			if err != nil {
				return nil, err
			}
			if claimed {
				break
			}
			// Another opening claimed it meanwhile: read again, fencing it.
		}
		if attempt == 2 {
			return nil, errors.New("catalog: the snapshot was replaced, or the next generation claimed, during each of three openings: another master is opening or writing it")
		}
		f = nil
	}
	c := f.c
	var err error
	bc.log, err = wal.OpenObjectLog(ctx, wal.ObjectLogOptions{Bucket: b, Prefix: catalogLogPrefix(dir, next),
		Writer: who, FirstSeq: f.last + 1})
	if err != nil {
		return nil, fmt.Errorf("catalog: open log: %w", err)
	}
	c.store = bc
	// A snapshot lets the earlier logs go, so that the next opening reads one snapshot and not
	// every earlier activation's log; the master writes it once it serves (SnapshotIfPending).
	c.snapshotPending = len(bc.oldGens) > 0
	f.c = nil
	return c, nil
}

// readBucketCatalog reads the catalog into *f (from its copy when that rests on the current
// snapshot, else afresh), fencing and reading every generation after the retired ones; it
// returns the store with the generations read and the next generation's number.
func readBucketCatalog(ctx context.Context, b storage.Bucket, dir, who string, f **CatalogFollower) (*bucketCatalog, uint64, error) {
	// The retired generations first: a snapshot read after it covers them (it is written after
	// the snapshot that does).
	retired, err := readRetired(ctx, b, dir)
	if err != nil {
		return nil, 0, err
	}
	if *f != nil && (*f).loaded {
		current, err := (*f).current(ctx)
		if err != nil {
			return nil, 0, err
		}
		if !current {
			*f = nil // the active master wrote a snapshot since the last refresh
		}
	} else {
		*f = nil
	}
	if *f == nil {
		*f = &CatalogFollower{b: b, dir: dir}
		if err := (*f).load(ctx); err != nil {
			return nil, 0, err
		}
	}
	gens, err := catalogGenerations(ctx, b, dir, retired)
	if err != nil {
		return nil, 0, err
	}
	bc := &bucketCatalog{b: b, dir: dir, etag: (*f).etag}
	next := retired + 1 // never a retired generation: no opening would read it
	for _, g := range gens {
		prefix := catalogLogPrefix(dir, g)
		if _, err := wal.FenceObjectLog(ctx, b, prefix, who); err != nil {
			return nil, 0, fmt.Errorf("catalog: fence the log of an earlier master: %w", err)
		}
		if err := (*f).readLog(ctx, g); err != nil {
			return nil, 0, err
		}
		bc.oldGens = append(bc.oldGens, g)
		next = max(next, g+1)
	}
	return bc, next, nil
}

// SnapshotIfPending writes the snapshot an opening left to do (it read earlier generations' logs,
// which the snapshot lets go). The master calls it once it serves, off the takeover's path.
func (c *Catalog) SnapshotIfPending() error {
	c.mu.Lock()
	if !c.snapshotPending || c.closed {
		c.mu.Unlock()
		return nil
	}
	err := c.snapshotLocked()
	c.mu.Unlock()
	if err != nil {
		return fmt.Errorf("catalog: snapshot after the opening: %w", err)
	}
	return c.release()
}

// CatalogFollower is a standby master's copy of a bucket catalog, kept up to date by reading what
// the active master writes (its snapshot and its log's objects) without writing anything. Elected,
// the standby opens the catalog from it (OpenBucketCatalogFrom) and reads only the objects written
// since its last Refresh instead of the whole catalog: a warm standby takes over in a few requests
// to the bucket. Not safe for concurrent use.
type CatalogFollower struct {
	b   storage.Bucket
	dir string

	loaded bool
	c      *Catalog          // rows and snapshotSeq (no store)
	etag   string            // of the snapshot the copy rests on ("" when there is none)
	last   uint64            // the highest sequence id applied
	read   map[uint64]uint64 // generation → the highest object number applied
	// retired: the generations up to it are fenced and covered by the snapshot (read before it).
	retired uint64
}

// NewCatalogFollower follows the catalog under dir in b.
func NewCatalogFollower(b storage.Bucket, dir string) *CatalogFollower {
	return &CatalogFollower{b: b, dir: dir}
}

// Refresh reads what the active master wrote since the last refresh: the log objects written
// since, or everything again when it replaced the snapshot (which drops the logs it covers).
func (f *CatalogFollower) Refresh(ctx context.Context) error {
	// A log object listed and gone when read was dropped under a newer snapshot meanwhile (the
	// active master deletes what its snapshots cover, in the background): start again from that
	// snapshot, a few times.
	var err error
	for range 3 {
		if err = f.refresh(ctx); !errors.Is(err, storage.ErrNoObject) {
			return err
		}
	}
	return err
}

func (f *CatalogFollower) refresh(ctx context.Context) error {
	if f.loaded {
		current, err := f.current(ctx)
		if err != nil {
			return err
		}
		f.loaded = current
	}
	if !f.loaded {
		if err := f.load(ctx); err != nil {
			return err
		}
	}
	gens, err := catalogGenerations(ctx, f.b, f.dir, f.retired)
	if err != nil {
		return err
	}
	for _, g := range gens {
		if err := f.readLog(ctx, g); err != nil {
			f.loaded = false // logs dropped under a newer snapshot while they were read: start again
			return err
		}
	}
	return nil
}

// current says whether the copy rests on the snapshot the bucket holds now.
func (f *CatalogFollower) current(ctx context.Context) (bool, error) {
	name := path.Join(f.dir, "snapshot")
	info, err := f.b.Stat(ctx, name)
	switch {
	case errors.Is(err, storage.ErrNoObject):
		info.ETag = ""
	case err != nil:
		return false, fmt.Errorf("catalog: stat %s in %s: %w", name, f.b.Describe(), err)
	}
	return info.ETag == f.etag, nil
}

// load reads the snapshot (no log yet), and before it the retired generations it covers.
func (f *CatalogFollower) load(ctx context.Context) error {
	f.loaded = false
	retired, err := readRetired(ctx, f.b, f.dir)
	if err != nil {
		return err
	}
	name := path.Join(f.dir, "snapshot")
	snap, info, err := f.b.Get(ctx, name)
	switch {
	case errors.Is(err, storage.ErrNoObject):
		snap, info.ETag = nil, ""
	case err != nil:
		return fmt.Errorf("catalog: read %s in %s: %w", name, f.b.Describe(), err)
	}
	c := &Catalog{dir: f.dir, rows: map[string][]byte{}}
	if err := c.loadSnapshot(name, snap); err != nil {
		return err
	}
	f.c, f.etag, f.last, f.read, f.retired = c, info.ETag, c.snapshotSeq, map[uint64]uint64{}, retired
	f.loaded = true
	return nil
}

// readLog applies generation g's log objects numbered above those read before.
func (f *CatalogFollower) readLog(ctx context.Context, g uint64) error {
	c := f.c
	highest, err := wal.ReadObjectLogAfter(ctx, f.b, catalogLogPrefix(f.dir, g), f.read[g], func(e *wal.Edit) error {
		if e.Seq > c.snapshotSeq {
			c.applyEdit(e)
			c.sinceSnap++
		}
		f.last = max(f.last, e.Seq)
		return nil
	})
	if err != nil {
		return fmt.Errorf("catalog: replay: %w", err)
	}
	f.read[g] = highest
	return nil
}

func catalogLogPrefix(dir string, gen uint64) string {
	return path.Join(dir, "log", fmt.Sprintf("%020d", gen))
}

// claimKey is the object that claims a generation for one opening (beside its log's prefix, which
// a log opens empty; it sorts before the log's objects and is listed with them).
func claimKey(dir string, gen uint64) string { return catalogLogPrefix(dir, gen) + claimSuffix }

const claimSuffix = ".claim"

// claimGeneration claims generation gen for who, reporting false when another opening has.
func claimGeneration(ctx context.Context, b storage.Bucket, dir string, gen uint64, who string) (bool, error) {
	_, err := b.Put(ctx, claimKey(dir, gen), []byte("claimed by "+who), storage.Condition{IfNoneMatch: true})
	switch {
	case err == nil:
		return true, nil
	case errors.Is(err, storage.ErrPrecondition):
		return false, nil
	}
	return false, fmt.Errorf("catalog: claim log generation %d in %s: %w", gen, b.Describe(), err)
}

// catalogGenerations lists the generations after retired that have a log, in order. A listing
// starts after the retired generations' keys: each keeps its fence markers for good.
func catalogGenerations(ctx context.Context, b storage.Bucket, dir string, retired uint64) ([]uint64, error) {
	root := path.Join(dir, "log") + "/"
	after := ""
	if retired > 0 {
		after = catalogLogPrefix(dir, retired) + "~" // past "<retired>/…", before "<retired+1>/…"
	}
	var gens []uint64
	err := storage.WalkAfter(ctx, b, root, after, func(o storage.ObjectInfo) error {
		g, _, _ := strings.Cut(strings.TrimPrefix(o.Key, root), "/")
		g = strings.TrimSuffix(g, claimSuffix) // a claimed generation whose log holds nothing yet
		if n, err := strconv.ParseUint(g, 10, 64); err == nil && n > retired && (len(gens) == 0 || gens[len(gens)-1] != n) {
			gens = append(gens, n)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("catalog: list %s in %s: %w", root, b.Describe(), err)
	}
	return gens, nil
}

func (c *bucketCatalog) append(e *wal.Edit) error {
	_, err := c.log.Append(e)
	return err
}

func (c *bucketCatalog) lastSeq() uint64 { return c.log.LastSeq() }

// writeSnapshot replaces the snapshot only if it is still the one this master read or wrote; what
// it covers — the objects of the current log and the earlier logs (their fence markers stay) — is
// dropped by release.
func (c *bucketCatalog) writeSnapshot(b []byte, seq uint64) error {
	ctx, cancel := context.WithTimeout(context.Background(), catalogTimeout)
	defer cancel()
	key := path.Join(c.dir, "snapshot")
	etag, err := c.b.Put(ctx, key, b, storage.Condition{IfMatch: c.etag, IfNoneMatch: c.etag == ""})
	if errors.Is(err, storage.ErrPrecondition) && c.unsure != nil {
		// The snapshot changed since this master's last known one: it may be the one whose
		// answer was lost. If so it is this master's, and nobody else's write came between.
		cur, info, gerr := c.b.Get(ctx, key)
		if gerr != nil {
			return fmt.Errorf("catalog: reading the snapshot after a write whose answer was lost: %w", gerr)
		}
		if sum := sha256.Sum256(cur); bytes.Equal(sum[:], c.unsure) {
			c.adopt(info.ETag, c.unsureSeq)
			etag, err = c.b.Put(ctx, key, b, storage.Condition{IfMatch: c.etag})
		}
	}
	if errors.Is(err, storage.ErrPrecondition) {
		return fmt.Errorf("catalog: another master replaced the snapshot: this one is no longer active: %w", err)
	}
	if err != nil {
		sum := sha256.Sum256(b)
		c.unsure, c.unsureSeq = sum[:], seq
		return err
	}
	c.adopt(etag, seq)
	return nil
}

// adopt records a snapshot this master wrote: its ETag, and what it covers.
func (c *bucketCatalog) adopt(etag string, seq uint64) {
	c.etag, c.unsure = etag, nil
	c.relMu.Lock()
	c.covered = max(c.covered, seq)
	c.relMu.Unlock()
}

// release drops what the snapshots written so far cover. Catalog.release runs one at a time.
func (c *bucketCatalog) release() error {
	ctx, cancel := context.WithTimeout(context.Background(), catalogTimeout)
	defer cancel()
	c.relMu.Lock()
	seq, old := c.covered, slices.Clone(c.oldGens)
	c.relMu.Unlock()
	if seq == 0 {
		return nil
	}
	if err := c.log.MarkFlushed(string(catalogRegion), seq); err != nil {
		return err
	}
	// (release runs off the catalog's lock already: the deletes are done here, in order.)
	if err := c.log.DropFlushed(); err != nil {
		return err
	}
	for _, g := range old {
		if err := wal.DeleteObjectLog(ctx, c.b, catalogLogPrefix(c.dir, g)); err != nil {
			return err
		}
		c.relMu.Lock()
		c.oldGens = slices.DeleteFunc(c.oldGens, func(x uint64) bool { return x == g })
		c.relMu.Unlock()
	}
	c.relMu.Lock()
	if len(old) > 0 {
		c.toRetire = max(c.toRetire, slices.Max(old))
	}
	g := c.toRetire
	c.relMu.Unlock()
	if g == 0 {
		return nil
	}
	// Their fence markers stay (a deposed master's next write must find one); openings no
	// longer fence, read or list them. (A failed write is tried again by the next release.)
	if err := retire(ctx, c.b, c.dir, g); err != nil {
		return err
	}
	c.relMu.Lock()
	if c.toRetire == g {
		c.toRetire = 0
	}
	c.relMu.Unlock()
	return nil
}

// The retired generations: <dir>/log-retired holds the highest generation whose log is fenced,
// read into a snapshot and dropped (only its fence markers left), so that an opening fences,
// reads and lists only the generations after it — before, each activation of a master left a
// generation that every later opening fenced and read again (dozens of requests each), until
// openings no longer fit their time. Written after the snapshot that covers them, read before
// the snapshot; it only rises.
func retiredKey(dir string) string { return path.Join(dir, "log-retired") }

func readRetired(ctx context.Context, b storage.Bucket, dir string) (uint64, error) {
	g, _, err := getRetired(ctx, b, dir)
	return g, err
}

func getRetired(ctx context.Context, b storage.Bucket, dir string) (uint64, string, error) {
	body, info, err := b.Get(ctx, retiredKey(dir))
	switch {
	case errors.Is(err, storage.ErrNoObject):
		return 0, "", nil
	case err != nil:
		return 0, "", fmt.Errorf("catalog: read %s in %s: %w", retiredKey(dir), b.Describe(), err)
	}
	g, err := strconv.ParseUint(strings.TrimSpace(string(body)), 10, 64)
	if err != nil || len(body) > 64 {
		// Not one this code wrote: retire nothing, reading every generation (always correct).
		return 0, info.ETag, nil
	}
	return g, info.ETag, nil
}

// retire raises the retired generation to g (a write that lost a race reads again).
func retire(ctx context.Context, b storage.Bucket, dir string, g uint64) error {
	for range 3 {
		have, etag, err := getRetired(ctx, b, dir)
		if err != nil || have >= g {
			return err
		}
		_, err = b.Put(ctx, retiredKey(dir), []byte(strconv.FormatUint(g, 10)+"\n"), storage.Condition{IfMatch: etag, IfNoneMatch: etag == ""})
		if !errors.Is(err, storage.ErrPrecondition) {
			if err != nil {
				return fmt.Errorf("catalog: write %s in %s: %w", retiredKey(dir), b.Describe(), err)
			}
			return nil
		}
	}
	return nil // others keep writing it: theirs serves
}

func (c *bucketCatalog) close() error { return c.log.Close() }
