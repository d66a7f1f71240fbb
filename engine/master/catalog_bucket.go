package master

import (
	"context"
	"errors"
	"fmt"
	"path"
	"strconv"
	"strings"
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
	b       storage.Bucket
	dir     string
	log     *wal.ObjectLog
	etag    string   // of the snapshot this master read or wrote ("" when there is none)
	oldLogs []string // earlier generations' prefixes, fenced and read: dropped after a snapshot
}

const catalogTimeout = time.Minute

// OpenBucketCatalog opens (or creates) the catalog under dir in a bucket: it loads the snapshot,
// fences and replays every earlier generation's log, and starts the next generation.
func OpenBucketCatalog(b storage.Bucket, dir, who string) (*Catalog, error) {
	ctx, cancel := context.WithTimeout(context.Background(), catalogTimeout)
	defer cancel()
	c := &Catalog{dir: dir, rows: map[string][]byte{}}
	name := path.Join(dir, "snapshot")
	snap, info, err := b.Get(ctx, name)
	switch {
	case errors.Is(err, storage.ErrNoObject):
		snap = nil
	case err != nil:
		return nil, fmt.Errorf("catalog: read %s in %s: %w", name, b.Describe(), err)
	}
	if err := c.loadSnapshot(name, snap); err != nil {
		return nil, err
	}
	gens, err := catalogGenerations(ctx, b, dir)
	if err != nil {
		return nil, err
	}
	bc := &bucketCatalog{b: b, dir: dir, etag: info.ETag}
	last := c.snapshotSeq
	var next uint64 = 1
	for _, g := range gens {
		prefix := catalogLogPrefix(dir, g)
		if _, err := wal.FenceObjectLog(ctx, b, prefix, who); err != nil {
			return nil, fmt.Errorf("catalog: fence the log of an earlier master: %w", err)
		}
		if _, err := wal.ReadObjectLog(ctx, b, prefix, func(e *wal.Edit) error {
			if e.Seq > c.snapshotSeq {
				c.applyEdit(e)
				c.sinceSnap++
			}
			last = max(last, e.Seq)
			return nil
		}); err != nil {
			return nil, fmt.Errorf("catalog: replay: %w", err)
		}
		bc.oldLogs = append(bc.oldLogs, prefix)
		next = g + 1
	}
	bc.log, err = wal.OpenObjectLog(ctx, wal.ObjectLogOptions{Bucket: b, Prefix: catalogLogPrefix(dir, next),
		Writer: who, FirstSeq: last + 1})
	if err != nil {
		return nil, fmt.Errorf("catalog: open log: %w", err)
	}
	c.store = bc
	if len(bc.oldLogs) > 0 {
		// A snapshot now lets the earlier logs go: the next opening reads one snapshot, not every
		// earlier activation's log.
		if err := c.Snapshot(); err != nil {
			c.Close()
			return nil, fmt.Errorf("catalog: snapshot after replay: %w", err)
		}
	}
	return c, nil
}

func catalogLogPrefix(dir string, gen uint64) string {
	return path.Join(dir, "log", fmt.Sprintf("%020d", gen))
}

// catalogGenerations lists the generations that have a log, in order.
func catalogGenerations(ctx context.Context, b storage.Bucket, dir string) ([]uint64, error) {
	root := path.Join(dir, "log") + "/"
	var gens []uint64
	err := storage.Walk(ctx, b, root, func(o storage.ObjectInfo) error {
		g, _, _ := strings.Cut(strings.TrimPrefix(o.Key, root), "/")
		if n, err := strconv.ParseUint(g, 10, 64); err == nil && (len(gens) == 0 || gens[len(gens)-1] != n) {
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

// writeSnapshot replaces the snapshot only if it is still the one this master read or wrote, then
// drops what the snapshot covers: the objects of the current log and the earlier logs (their fence
// markers stay).
func (c *bucketCatalog) writeSnapshot(b []byte, seq uint64) error {
	ctx, cancel := context.WithTimeout(context.Background(), catalogTimeout)
	defer cancel()
	cond := storage.Condition{IfMatch: c.etag, IfNoneMatch: c.etag == ""}
	etag, err := c.b.Put(ctx, path.Join(c.dir, "snapshot"), b, cond)
	if errors.Is(err, storage.ErrPrecondition) {
		return fmt.Errorf("catalog: another master replaced the snapshot: this one is no longer active: %w", err)
	}
	if err != nil {
		return err
	}
	c.etag = etag
	if err := c.log.MarkFlushed(string(catalogRegion), seq); err != nil {
		return err
	}
	for len(c.oldLogs) > 0 {
		if err := wal.DeleteObjectLog(ctx, c.b, c.oldLogs[0]); err != nil {
			return err
		}
		c.oldLogs = c.oldLogs[1:]
	}
	return nil
}

func (c *bucketCatalog) close() error { return c.log.Close() }
