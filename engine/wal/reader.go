package wal

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	iofs "io/fs"
	"path"
	"slices"

	"github.com/cellstore/cellstore/engine/storage"
)

// ReplayOptions selects the edits a Reader yields.
type ReplayOptions struct {
	// FromSeq skips edits with a sequence id below it (a region replays
	// from its flushed sequence id + 1).
	FromSeq uint64
	// Filter, if set, yields only edits whose region it accepts.
	Filter func(region []byte) bool
}

// TornTail describes where a Reader stopped reading the last file because
// its end was torn (a crash during a write): the bytes from Offset on were
// ignored (see Reader for when damage is a torn tail).
type TornTail struct {
	File   string
	Offset int64
	Reason string
}

// Reader iterates over the edits of a WAL directory or of a region's
// recovered edits, in file order. Sequence ids must increase strictly
// across the whole iteration; a violation is reported as corruption.
//
//	r, err := wal.NewReader(fs, "wal/rs1-splitting", wal.ReplayOptions{FromSeq: 100})
//	...
//	defer r.Close()
//	for r.Next() {
//		e := r.Edit() // valid until the next call to Next
//	}
//	if err := r.Err(); err != nil { ... }
//
// In a WAL directory, a torn tail of the last segment (a partial record, a
// record with a bad checksum, zeros) is ignored and reported by TornTail,
// provided nothing after it shows that its bytes had been synced: no later
// commit marker says so (a segment of format version 2), or no valid record
// follows at all (version 1). Damage anywhere else stops the iteration with
// a *CorruptionError naming the file and byte offset.
// Recovered-edits files are written whole and synced before they are
// renamed into place, so no torn tail is tolerated there.
type Reader struct {
	fs           storage.FS
	files        []string
	tolerateTail bool
	kind         byte
	opts         ReplayOptions

	idx     int
	cur     *fileReader
	edit    Edit
	raw     []byte // the current record, header included
	buf     []byte // read window, reused across files
	haveSeq bool
	lastSeq uint64
	err     error
	torn    *TornTail

	// parts: the groups of a MultiWAL's directory, merged in sequence-id order; active is the
	// part whose edit is current (-1: none yet), has whether each part holds an edit.
	parts  []*Reader
	has    []bool
	active int
}

// NewReader returns a Reader over the segments of a WAL directory. The directory of a MultiWAL
// (group subdirectories) reads as one WAL: its groups' edits merged in sequence-id order.
func NewReader(fs storage.FS, dir string, opts ReplayOptions) (*Reader, error) {
	groups, err := groupDirs(fs, dir)
	if err != nil {
		return nil, fmt.Errorf("wal: list %s: %w", dir, err)
	}
	if len(groups) > 0 {
		m := &Reader{fs: fs, active: -1, opts: opts}
		for _, g := range groups {
			p, err := NewReader(fs, g, opts)
			if err != nil {
				m.Close()
				return nil, err
			}
			m.parts = append(m.parts, p)
			m.files = append(m.files, p.files...)
		}
		return m, nil
	}
	names, err := fs.List(dir)
	if err != nil {
		return nil, fmt.Errorf("wal: list %s: %w", dir, err)
	}
	var files []string
	for _, n := range names {
		if _, ok := parseSegmentName(n); ok {
			files = append(files, path.Join(dir, n))
		}
	}
	slices.Sort(files) // zero-padded numbers: lexical order is numeric order
	return &Reader{fs: fs, files: files, tolerateTail: true, kind: kindSegment, opts: opts}, nil
}

// NewRecoveredEditsReader returns a Reader over the recovered-edits files
// that Split wrote into dir (one region's directory). A missing directory
// holds no edits.
func NewRecoveredEditsReader(fs storage.FS, dir string, opts ReplayOptions) (*Reader, error) {
	names, err := fs.List(dir)
	if err != nil {
		if errors.Is(err, iofs.ErrNotExist) {
			names = nil
		} else {
			return nil, fmt.Errorf("wal: list %s: %w", dir, err)
		}
	}
	var files []string
	for _, n := range names {
		if _, ok := parseNumbered(n, recoveredSuffix); ok {
			files = append(files, path.Join(dir, n))
		}
	}
	slices.Sort(files)
	return &Reader{fs: fs, files: files, kind: kindRecovered, opts: opts}, nil
}

// Files returns the files the Reader reads, in order.
func (r *Reader) Files() []string { return slices.Clone(r.files) }

// Next advances to the next edit that matches the options. It returns false
// at the end or on error (see Err).
func (r *Reader) Next() bool {
	if r.parts != nil {
		return r.nextMerged()
	}
	for r.err == nil {
		if r.cur == nil {
			if r.idx >= len(r.files) {
				return false
			}
			if !r.openFile() {
				continue
			}
		}
		payload, raw, off, err := r.cur.next()
		if err == io.EOF {
			r.closeFile()
			continue
		}
		if err != nil {
			var bad *badRecord
			if !errors.As(err, &bad) {
				r.err = err
				return false
			}
			if r.handleBad(off, bad.reason) {
				r.closeFile()
				continue
			}
			return false
		}
		if r.cur.marked {
			_, ok, err := commitMarker(payload, off)
			if err != nil {
				r.err = &CorruptionError{File: r.cur.name, Offset: off, Reason: "bad commit marker: " + err.Error()}
				return false
			}
			if ok {
				continue
			}
		}
		if err := decodeEdit(payload, &r.edit); err != nil {
			r.err = &CorruptionError{File: r.cur.name, Offset: off, Reason: "undecodable record: " + err.Error()}
			return false
		}
		if r.haveSeq && r.edit.Seq <= r.lastSeq {
			r.err = &CorruptionError{File: r.cur.name, Offset: off,
				Reason: fmt.Sprintf("sequence id %d is not above the previous %d", r.edit.Seq, r.lastSeq)}
			return false
		}
		r.haveSeq, r.lastSeq = true, r.edit.Seq
		r.raw = raw
		if r.edit.Seq < r.opts.FromSeq || (r.opts.Filter != nil && !r.opts.Filter(r.edit.Region)) {
			continue
		}
		return true
	}
	return false
}

// nextMerged advances the part whose edit was current and makes the lowest of the parts'
// edits current.
func (r *Reader) nextMerged() bool {
	if r.err != nil {
		return false
	}
	if r.has == nil {
		r.has = make([]bool, len(r.parts))
		for i, p := range r.parts {
			if r.has[i] = p.Next(); !r.has[i] && p.Err() != nil {
				r.err = p.Err()
				return false
			}
		}
	} else if r.active >= 0 {
		p := r.parts[r.active]
		if r.has[r.active] = p.Next(); !r.has[r.active] && p.Err() != nil {
			r.err = p.Err()
			return false
		}
	}
	r.active = -1
	for i, p := range r.parts {
		if r.has[i] && (r.active < 0 || p.edit.Seq < r.parts[r.active].edit.Seq) {
			r.active = i
		}
	}
	if r.active < 0 {
		return false
	}
	p := r.parts[r.active]
	if r.haveSeq && p.edit.Seq <= r.lastSeq {
		r.err = &CorruptionError{File: p.cur.name, Offset: p.cur.recOff,
			Reason: fmt.Sprintf("sequence id %d of one WAL group is not above %d of another", p.edit.Seq, r.lastSeq)}
		return false
	}
	r.haveSeq, r.lastSeq = true, p.edit.Seq
	r.edit, r.raw = p.edit, p.raw
	return true
}

// Edit returns the current edit. It and the slices it holds are valid until
// the next call to Next.
func (r *Reader) Edit() *Edit { return &r.edit }

// Position returns the file and byte offset of the current record.
func (r *Reader) Position() (file string, offset int64) {
	if r.parts != nil {
		if r.active < 0 {
			return "", 0
		}
		return r.parts[r.active].Position()
	}
	if r.cur == nil {
		return "", 0
	}
	return r.cur.name, r.cur.recOff
}

// LastSeq returns the highest sequence id read so far (including edits
// skipped by the options), and whether any edit was read.
func (r *Reader) LastSeq() (uint64, bool) {
	if r.parts != nil {
		var last uint64
		var have bool
		for _, p := range r.parts {
			if s, ok := p.LastSeq(); ok {
				last, have = max(last, s), true
			}
		}
		return last, have
	}
	return r.lastSeq, r.haveSeq
}

// TornTail reports whether the last segment had a torn tail and where (the first group's of a
// MultiWAL's: TornTails has them all).
func (r *Reader) TornTail() (TornTail, bool) {
	if t := r.TornTails(); len(t) > 0 {
		return t[0], true
	}
	return TornTail{}, false
}

// TornTails are the torn tails of the last segments (one per group of a MultiWAL).
func (r *Reader) TornTails() []TornTail {
	var out []TornTail
	if r.torn != nil {
		out = append(out, *r.torn)
	}
	for _, p := range r.parts {
		out = append(out, p.TornTails()...)
	}
	return out
}

// Err returns the error that stopped the iteration, if any.
func (r *Reader) Err() error { return r.err }

// Close releases the open file.
func (r *Reader) Close() error {
	for _, p := range r.parts {
		p.Close()
	}
	if r.cur != nil {
		r.cur.f.Close()
		r.cur = nil
	}
	return nil
}

func (r *Reader) isLast() bool { return r.idx == len(r.files)-1 }

func (r *Reader) openFile() bool {
	name := r.files[r.idx]
	f, err := r.fs.Open(name)
	if err != nil {
		r.err = fmt.Errorf("wal: open %s: %w", name, err)
		return false
	}
	size, err := f.Size()
	if err != nil {
		f.Close()
		r.err = fmt.Errorf("wal: size of %s: %w", name, err)
		return false
	}
	fr := &fileReader{f: f, name: name, size: size, buf: r.buf[:0]}
	r.cur = fr
	h, err := fr.read(0, headerSize)
	if err == errShort {
		err = &badRecord{reason: fmt.Sprintf("truncated header (file of %d bytes)", size)}
	} else if err == nil {
		var kind byte
		var version uint16
		kind, _, version, err = checkVersionedHeader(h)
		fr.marked = version == markedVersion
		if err == nil && kind != r.kind {
			err = fmt.Errorf("file kind %d, expected %d", kind, r.kind)
		}
		if err != nil {
			err = &badRecord{reason: "bad header: " + err.Error()}
		}
	}
	if err != nil {
		var bad *badRecord
		if !errors.As(err, &bad) {
			r.err = err
			return false
		}
		if r.handleBad(0, bad.reason) {
			r.closeFile()
		}
		return false
	}
	fr.off = headerSize
	return true
}

// handleBad decides whether a bad record (or header) at off is a torn tail
// (returns true: stop reading this file) or corruption (sets r.err).
//
// In the last segment, damage is a torn tail if nothing after it shows that its bytes had been
// synced: in a segment with commit markers, no later commit's marker says the segment was synced
// past off (the valid records of unacknowledged commits after the damage are dropped with it: a
// crash during a sync may have kept some of a commit's pages and lost others); in an older
// segment, no valid record follows at all.
func (r *Reader) handleBad(off int64, reason string) bool {
	if r.tolerateTail && r.isLast() {
		if r.cur.marked {
			at, synced, err := r.cur.syncedCommitAfter(off)
			if err != nil {
				r.err = err
				return false
			}
			if at < 0 {
				r.torn = &TornTail{File: r.cur.name, Offset: off, Reason: reason}
				return true
			}
			reason += fmt.Sprintf(" (valid records follow: the commit at offset %d was staged with the segment synced to %d)", at, synced)
		} else {
			found, err := r.cur.validRecordAfter(off)
			if err != nil {
				r.err = err
				return false
			}
			if !found {
				r.torn = &TornTail{File: r.cur.name, Offset: off, Reason: reason}
				return true
			}
			reason += " (valid records follow)"
		}
	}
	r.err = &CorruptionError{File: r.cur.name, Offset: off, Reason: reason}
	return false
}

func (r *Reader) closeFile() {
	if r.cur != nil {
		r.cur.f.Close()
		r.buf = r.cur.buf // keep the window buffer for the next file
		r.cur = nil
	}
	r.idx++
	if r.kind == kindRecovered {
		// Sequence ids rise within a recovered-edits file, not from one to the next: the edits
		// of two stints of a region on one dead server, split into one file, span those of a
		// stint on another between them (its own file). The region skips edits it has.
		r.haveSeq = false
	}
}

// badRecord describes bytes that do not hold a valid record.
type badRecord struct{ reason string }

func (b *badRecord) Error() string { return b.reason }

// fileReader reads records through a window buffer.
type fileReader struct {
	f      storage.ReadableFile
	name   string
	size   int64
	buf    []byte
	bufOff int64
	off    int64 // offset of the next record
	recOff int64 // offset of the current record
	marked bool  // the segment's commits begin with commit markers (format version 2)
}

const readWindow = 256 << 10

var errShort = errors.New("short")

// read returns n bytes at off (aliasing the window), errShort if the file
// ends before, or an I/O error.
func (r *fileReader) read(off int64, n int) ([]byte, error) {
	if off < 0 || int64(n) > r.size-off {
		return nil, errShort
	}
	if off >= r.bufOff && off+int64(n) <= r.bufOff+int64(len(r.buf)) {
		s := off - r.bufOff
		return r.buf[s : s+int64(n)], nil
	}
	want := max(n, readWindow)
	if rest := r.size - off; int64(want) > rest {
		want = int(rest)
	}
	if cap(r.buf) < want {
		r.buf = make([]byte, want)
	}
	r.buf = r.buf[:want]
	m, err := r.f.ReadAt(r.buf, off)
	if err != nil && !(err == io.EOF && m == want) {
		r.buf, r.bufOff = r.buf[:0], 0
		if err == io.EOF {
			// The file shrank under us (a live writer trimmed it): an I/O error, so a
			// split fails with this message and is retried, rather than a torn tail.
			return nil, fmt.Errorf("wal: read %s at %d: the file shrank from %d bytes while being read", r.name, off, r.size)
		}
		return nil, fmt.Errorf("wal: read %s at %d: %w", r.name, off, err)
	}
	r.bufOff = off
	return r.buf[:n], nil
}

// next returns the payload and raw bytes of the record at r.off, io.EOF at
// the end of the file, a *badRecord, or an I/O error.
func (r *fileReader) next() (payload, raw []byte, off int64, err error) {
	off = r.off
	r.recOff = off
	if off == r.size {
		return nil, nil, off, io.EOF
	}
	h, err := r.read(off, recordHeaderSize)
	if err == errShort {
		return nil, nil, off, &badRecord{reason: fmt.Sprintf("truncated record header (%d bytes left)", r.size-off)}
	}
	if err != nil {
		return nil, nil, off, err
	}
	crc := binary.LittleEndian.Uint32(h)
	n := int64(binary.LittleEndian.Uint32(h[4:]))
	switch {
	case n == 0 && crc == 0:
		return nil, nil, off, &badRecord{reason: "zeroed bytes"}
	case n == 0:
		return nil, nil, off, &badRecord{reason: "zero record length"}
	case n > MaxRecordSize:
		return nil, nil, off, &badRecord{reason: fmt.Sprintf("record length %d exceeds %d", n, MaxRecordSize)}
	case off+recordHeaderSize+n > r.size:
		return nil, nil, off, &badRecord{reason: fmt.Sprintf("record of %d bytes overruns the end of the file (%d bytes left)", n, r.size-off-recordHeaderSize)}
	}
	rec, err := r.read(off, recordHeaderSize+int(n))
	if err == errShort {
		return nil, nil, off, &badRecord{reason: "truncated record"}
	}
	if err != nil {
		return nil, nil, off, err
	}
	if got := crc32.Checksum(rec[4:], castagnoli); got != crc {
		return nil, nil, off, &badRecord{reason: fmt.Sprintf("checksum mismatch (stored %#08x, computed %#08x)", crc, got)}
	}
	r.off = off + recordHeaderSize + n
	return rec[recordHeaderSize:], rec, off, nil
}

// validRecordAt returns the record (header included, aliasing the window) if one with a valid
// checksum starts at off, else nil.
func (r *fileReader) validRecordAt(off int64) ([]byte, error) {
	h, err := r.read(off, recordHeaderSize)
	if err != nil {
		if err == errShort {
			return nil, nil
		}
		return nil, err
	}
	n := int64(binary.LittleEndian.Uint32(h[4:]))
	if n == 0 || n > MaxRecordSize || off+recordHeaderSize+n > r.size {
		return nil, nil
	}
	crc := binary.LittleEndian.Uint32(h)
	rec, err := r.read(off, recordHeaderSize+int(n))
	if err != nil {
		if err == errShort {
			return nil, nil
		}
		return nil, err
	}
	if crc32.Checksum(rec[4:], castagnoli) != crc {
		return nil, nil
	}
	return rec, nil
}

// nextCandidate returns the first offset at or after o where a record could start, skipping
// runs of zeros: a record's length (bytes 4-7 of its header) is not zero, so in a run of zeros
// (a preallocated segment's unwritten space) the next candidate is 7 bytes before the next
// non-zero byte. -1: the rest of the file is zeros.
func (r *fileReader) nextCandidate(o int64) (int64, error) {
	nz, err := r.nextNonZero(o + 4)
	if err != nil || nz < 0 {
		return -1, err
	}
	return max(o, nz-7), nil
}

// validRecordAfter reports whether a valid record starts anywhere after
// off: if so, the damage at off is not a torn tail (segments of format
// version 1, whose records are all edits: a candidate whose payload kind is
// not an edit's is skipped before its checksum, which may need the rest of
// the file read).
func (r *fileReader) validRecordAfter(off int64) (bool, error) {
	var err error
	for o := max(off+1, headerSize); o+recordHeaderSize < r.size; o++ {
		if o, err = r.nextCandidate(o); err != nil || o < 0 {
			return false, err
		}
		if h, err := r.read(o, recordHeaderSize+1); err != nil && err != errShort {
			return false, err
		} else if err == errShort || h[recordHeaderSize] != payloadKindEdit {
			continue
		}
		rec, err := r.validRecordAt(o)
		if err != nil || rec != nil {
			return rec != nil, err
		}
	}
	return false, nil
}

// syncedCommitAfter looks, after damage at off, for a commit marker saying that the segment had
// been synced past off when its commit was staged: at is its offset (-1: none) and synced what it
// says. Only markers decide, so only marker-shaped bytes are checked (17 bytes each, every
// offset once: linear in the bytes after off, whatever they hold), and a marker counts only if
// it is one Next would accept (synced between the header's end and its own offset).
func (r *fileReader) syncedCommitAfter(off int64) (at, synced int64, err error) {
	for o := max(off+1, headerSize); o+commitMarkerSize <= r.size; o++ {
		if o, err = r.nextCandidate(o); err != nil || o < 0 {
			return -1, 0, err
		}
		if o+commitMarkerSize > r.size {
			break
		}
		rec, err := r.read(o, commitMarkerSize)
		if err != nil {
			return -1, 0, err
		}
		if binary.LittleEndian.Uint32(rec[4:]) != commitMarkerSize-recordHeaderSize || crc32.Checksum(rec[4:], castagnoli) != binary.LittleEndian.Uint32(rec) {
			continue
		}
		if s, ok, merr := commitMarker(rec[recordHeaderSize:], o); ok && merr == nil && s > off {
			return o, s, nil
		}
	}
	return -1, 0, nil
}

// nextNonZero returns the offset of the first non-zero byte at or after
// off, or -1 if the rest of the file is zeros.
func (r *fileReader) nextNonZero(off int64) (int64, error) {
	for off < r.size {
		n := int(min(int64(readWindow), r.size-off))
		if off >= r.bufOff && off < r.bufOff+int64(len(r.buf)) {
			n = int(r.bufOff + int64(len(r.buf)) - off) // what the window holds: no read
		}
		b, err := r.read(off, n)
		if err != nil {
			return 0, err
		}
		for i, c := range b {
			if c != 0 {
				return off + int64(i), nil
			}
		}
		off += int64(n)
	}
	return -1, nil
}
