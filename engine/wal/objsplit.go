package wal

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"path"
	"slices"
	"strings"

	"github.com/cellstore/cellstore/engine/storage"
)

// SplitObjectLogOptions configure SplitObjectLog.
type SplitObjectLogOptions struct {
	Bucket storage.Bucket
	// Prefix is the dead server's log, already fenced (FenceObjectLog).
	Prefix string
	// RecoveredEditsDir returns the key prefix ("directory") that receives a region's recovered
	// edits, e.g. "data/<ns>/<table>/<region>/recovered.edits".
	RecoveredEditsDir func(region string) string
	// FlushedSeq, if set, returns the highest sequence id a region has already flushed; older
	// edits are not written.
	FlushedSeq func(region string) uint64
	// MaxObjectBytes cuts a region's recovered edits into objects of about this size (default
	// 8 MiB).
	MaxObjectBytes int
	// MaxBufferedBytes bounds what the regions' buffers hold together (default 64 MiB): past it,
	// the largest is written, so the split of a log of many regions (a server's unflushed
	// memstores, gigabytes) does not hold it all at once.
	MaxBufferedBytes int
}

// SplitObjectLog reads a fenced object log (every edit its writer acknowledged: ReadObjectLog) and
// writes each region's edits, in order and in the WAL record format, to recovered-edits objects
// under the region's RecoveredEditsDir, named "<highest sequence id>.edits" (20 digits) as on a
// directory tree. Each object is written whole by one PUT; running the split again after a crash
// writes the same objects (same keys, same bodies). The log is not modified: the caller deletes
// it once the split succeeded.
func SplitObjectLog(ctx context.Context, opts SplitObjectLogOptions) (*SplitResult, error) {
	if opts.Bucket == nil || opts.Prefix == "" || opts.RecoveredEditsDir == nil {
		return nil, errors.New("wal: split: Bucket, Prefix and RecoveredEditsDir are required")
	}
	if opts.MaxObjectBytes <= 0 {
		opts.MaxObjectBytes = 8 << 20
	}
	if opts.MaxBufferedBytes <= 0 {
		opts.MaxBufferedBytes = 64 << 20
	}
	type out struct {
		dir    string
		buf    []byte
		maxSeq uint64
	}
	outs := map[string]*out{}
	res := &SplitResult{MaxSeq: map[string]uint64{}}
	buffered := 0 // records in the buffers
	write := func(o *out) error {
		if len(o.buf) <= headerSize {
			return nil
		}
		key := path.Join(o.dir, fmt.Sprintf("%0*d%s", segmentNameDigits, o.maxSeq, recoveredSuffix))
		if _, err := opts.Bucket.Put(ctx, key, o.buf, storage.Condition{}); err != nil {
			return fmt.Errorf("wal: split %s: writing %s: %w", opts.Prefix, key, err)
		}
		res.Files = append(res.Files, key)
		buffered -= len(o.buf) - headerSize
		// A new buffer: one kept at its capacity (up to twice MaxObjectBytes) by every region
		// would hold what the bound lets go.
		o.buf = appendHeader(nil, kindRecovered, 0)
		return nil
	}
	var rec []byte
	_, err := ReadObjectLog(ctx, opts.Bucket, opts.Prefix, func(e *Edit) error {
		region := string(e.Region)
		if opts.FlushedSeq != nil && e.Seq <= opts.FlushedSeq(region) {
			return nil
		}
		o := outs[region]
		if o == nil {
			dir := opts.RecoveredEditsDir(region)
			if err := storage.CheckKey(dir); err != nil {
				return fmt.Errorf("wal: split: region %q: %w", region, err)
			}
			o = &out{dir: dir, buf: appendHeader(nil, kindRecovered, 0)}
			outs[region] = o
		}
		size := payloadSize(e)
		rec = appendRecord(rec[:0], e, e.Seq, e.WriteTime, size)
		o.buf = append(o.buf, rec...)
		buffered += len(rec)
		o.maxSeq = e.Seq
		res.MaxSeq[region] = e.Seq
		res.Edits++
		if len(o.buf) >= opts.MaxObjectBytes {
			return write(o)
		}
		if buffered >= opts.MaxBufferedBytes {
			// The largest buffer (ties: the first region by name, so that a split run again
			// writes the same objects).
			var big *out
			var bigName string
			for name, c := range outs {
				if big == nil || len(c.buf) > len(big.buf) || (len(c.buf) == len(big.buf) && name < bigName) {
					big, bigName = c, name
				}
			}
			return write(big)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	regions := make([]string, 0, len(outs))
	for r := range outs {
		regions = append(regions, r)
	}
	slices.Sort(regions)
	for _, r := range regions {
		if err := write(outs[r]); err != nil {
			return nil, err
		}
	}
	return res, nil
}

// ReadRecoveredEdits calls fn with every edit of the recovered-edits objects under dir (written
// by SplitObjectLog), objects in key order (their highest sequence ids). A missing dir has none.
// Damage is corruption, reported with the object's key. The Edit passed to fn aliases the object:
// copy what you keep.
func ReadRecoveredEdits(ctx context.Context, b storage.Bucket, dir string, fn func(*Edit) error) (objects []string, err error) {
	objects, err = ListRecoveredEdits(ctx, b, dir)
	if err != nil {
		return nil, err
	}
	if err := ReadRecoveredEditObjects(ctx, b, objects, fn); err != nil {
		return nil, err
	}
	return objects, nil
}

// ListRecoveredEdits returns the keys of the recovered-edits objects under dir, in key order (the
// order ReadRecoveredEditObjects must read them in): a region lists them while it opens its store
// files, and reads them after.
func ListRecoveredEdits(ctx context.Context, b storage.Bucket, dir string) ([]string, error) {
	var objects []string
	err := storage.Walk(ctx, b, dir+"/", func(o storage.ObjectInfo) error {
		if _, ok := parseNumbered(strings.TrimPrefix(o.Key, dir+"/"), recoveredSuffix); ok {
			objects = append(objects, o.Key)
		}
		return nil
	})
	if err != nil {
		return nil, err // the store's errors name the prefix
	}
	return objects, nil
}

// ReadRecoveredEditObjects calls fn with every edit of the recovered-edits objects at keys (from
// ListRecoveredEdits), in that order; as ReadRecoveredEdits.
func ReadRecoveredEditObjects(ctx context.Context, b storage.Bucket, keys []string, fn func(*Edit) error) error {
	for _, key := range keys {
		data, _, err := b.Get(ctx, key)
		if err != nil {
			return fmt.Errorf("wal: read %s: %w", key, err)
		}
		kind, _, err := checkHeader(data)
		if err != nil {
			return &CorruptionError{File: key, Offset: 0, Reason: err.Error()}
		}
		if kind != kindRecovered {
			return &CorruptionError{File: key, Offset: 10, Reason: fmt.Sprintf("kind %d is not recovered edits", kind)}
		}
		if err := decodeRecords(data, key, fn); err != nil {
			return err
		}
	}
	return nil
}

// decodeRecords calls fn with each record of a whole object after its header; any damage is
// corruption (objects are written whole: there is no torn tail).
func decodeRecords(data []byte, key string, fn func(*Edit) error) error {
	var e Edit
	for off := headerSize; off < len(data); {
		payload, n, err := readRecord(data[off:])
		if err != nil {
			return &CorruptionError{File: key, Offset: int64(off), Reason: err.Error()}
		}
		if err := decodeEdit(payload, &e); err != nil {
			return &CorruptionError{File: key, Offset: int64(off), Reason: err.Error()}
		}
		if err := fn(&e); err != nil {
			return err
		}
		off += n
	}
	return nil
}

// readRecord checks the record at the start of p and returns its payload and size.
func readRecord(p []byte) (payload []byte, n int, err error) {
	if len(p) < recordHeaderSize {
		return nil, 0, errors.New("truncated record header")
	}
	sum := binary.LittleEndian.Uint32(p)
	ln := int(binary.LittleEndian.Uint32(p[4:]))
	if ln <= 0 || ln > len(p)-recordHeaderSize {
		return nil, 0, errors.New("bad record length")
	}
	if crc32.Checksum(p[4:recordHeaderSize+ln], castagnoli) != sum {
		return nil, 0, errors.New("checksum mismatch")
	}
	return p[recordHeaderSize : recordHeaderSize+ln], recordHeaderSize + ln, nil
}
