package wal

import (
	"cmp"
	"context"
	"crypto/rand"
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

	"github.com/klauspost/compress/s2"

	"github.com/cellstore/cellstore/engine/storage"
)

// ObjectLog is a region server's write-ahead log on a storage.Bucket (an object store, or a
// directory through storage.DirBucket): a sequence of immutable objects under a prefix, one per
// group commit, numbered 1, 2, 3, ... Each object is written whole by a create-only PUT; many
// appenders share one PUT, and up to MaxInFlight PUTs are under way at once, so a slow store costs
// latency, not throughput. Acknowledgement stays in order: an edit is durable once its object and
// every object before it are written.
//
// Fencing is by conditional create, not rename: FenceObjectLog writes fence markers at the numbers
// the writer would use next, and the writer's PUT of such a number fails its condition — from
// then on it acknowledges nothing. An edit is acknowledged only if its object, and every object
// before it, were written before the fence; ReadObjectLog, run after the fence, reads them all.
//
// Object format: the 24-byte WAL header (kind 3 = log object, 4 = fence marker; the segment
// number field holds the object number), then, for a log object, WAL records exactly as in a
// segment; for a fence marker, who fenced (text). Bodies are unique to their writer (sequence ids,
// the fencer's nonce), which Bucket.Put's retry rule needs.
type ObjectLog struct {
	opts ObjectLogOptions

	mu         sync.Mutex
	cond       sync.Cond
	cur        []byte            // records of the batch being filled
	curRegions map[string]uint64 // highest sequence id of each region in cur
	nextSeq    uint64
	// gc numbers the PUTs (a commit's number is its object's), bounds them to MaxInFlight and
	// acknowledges them in order (group.go).
	gc       committer[putResult]
	delay    *commitDelay // ObjectLogOptions.CommitDelay (nil: none)
	synced   uint64       // every edit with a sequence id <= synced is durable
	err      error        // fenced or broken: nothing more is acknowledged
	failErr  error        // the first PUT failure: start no more (err follows in order)
	closed   bool
	finished bool // the writing goroutine has stopped (after Close drained the batches)
	// live: the objects written and acknowledged, with their regions' highest sequence ids;
	// flushed: each region's flushed sequence id (MarkFlushed). An object whose regions all
	// flushed past it is deleted.
	live    []liveObject
	flushed map[string]uint64
	// archived: how far the log is archived (with opts.Archive).
	archived archiveProgress

	kick    chan struct{}
	stop    chan struct{}
	stopped chan struct{}

	// The deletes of flushed objects run on their own goroutine (dropLoop), so a region's flush
	// or close never waits for them; dropMu makes one run at a time.
	dropMu                       sync.Mutex
	dropKick, dropStop, dropDone chan struct{}
	deleteErrors                 atomic.Uint64

	puts       atomic.Uint64
	putRetries atomic.Uint64 // PUTs asked again after the store was unavailable
	appends    atomic.Uint64
	deleted    atomic.Uint64
	// putBytes and putNanos: bytes and time of the successful PUTs.
	putBytes, putNanos atomic.Uint64
	plainBytes         atomic.Uint64 // the size of those objects before compression
}

// ObjectLogOptions configure an ObjectLog.
type ObjectLogOptions struct {
	Bucket storage.Bucket
	// Prefix is the log's key prefix: one per region server process ("wal/<server>_<start code>").
	Prefix string
	// Writer names the process in errors and metrics.
	Writer string
	// FirstSeq is the first sequence id to assign (default 1); AdvanceSeq moves it up.
	FirstSeq uint64
	// MaxInFlight bounds the PUTs under way at once (default 1, at most MaxFenceWindow/2). More
	// than one pays only on a store whose latency is high and whose capacity is parallel: on a
	// local MinIO it made batches smaller and the log slower (docs/benchmarks.md).
	MaxInFlight int
	// MaxBatchBytes closes a batch at this size (default 8 MiB).
	MaxBatchBytes int
	// Timeout bounds one object's PUT, the store client's attempts and the log's own retries of
	// an unavailable store included (default 30 s): edits wait that long at most for their
	// object before the log breaks.
	Timeout time.Duration
	// Archive, if set, keeps every object until Archive has copied it there (point-in-time
	// recovery), as well as until its regions flushed.
	Archive *ArchiveTarget
	// Slow, if set, is told of every PUT that took SlowCommit (default 500 ms) or longer.
	Slow       func(SlowCommit)
	SlowCommit time.Duration
	// CommitDelay, if positive, lets the appender that is about to PUT (one PUT in flight only)
	// wait up to this long, until as many writers wait for the next object as waited at once
	// lately (the directory WAL's Options.CommitDelay, group.go): writers that would otherwise
	// take turns in two groups, one PUT each, share one. At most 100 ms. Default 0.
	CommitDelay time.Duration
	// Compress S2-compresses each object's records (kind 6 in the object's header) when that
	// saves an eighth of them or more: fewer bytes to PUT, to store and to read back at
	// recovery. Readers handle both kinds whatever this says.
	Compress bool
}

// MaxFenceWindow is how many numbers past the highest object a fence covers: more than any
// writer can have in flight, so every PUT a fenced writer may still be making fails.
const MaxFenceWindow = 64

// maxFenceAhead bounds how far above the highest object a fencing round puts markers.
const maxFenceAhead = 1 << 14

// Errors of an ObjectLog.
var (
	// ErrFenced: the log was fenced (the master declared this server dead): the edit is not
	// acknowledged and none after it will be.
	ErrFenced = errors.New("wal: the log was fenced by the master")
)

const (
	kindObject = 3
	kindFence  = 4
	// kindObjectS2: a log object whose records, as in a kindObject, are compressed whole in S2's
	// block format (the decoded length first, as a uvarint). ObjectLogOptions.Compress.
	kindObjectS2 = 6
)

// maxCompressedRecords bounds what one compressed object decodes to: the writer compresses no
// larger batch (a region server's are at most 2 × 8 MiB: MaxBatchBytes and one record past it),
// so a reader never allocates more than this for a damaged length.
const maxCompressedRecords = 64 << 20

// compressObject returns body (a kindObject with number n) with its records S2-compressed, as a
// kindObjectS2, or body itself when that would not save an eighth of them.
func compressObject(body []byte, n uint64) []byte {
	recs := body[headerSize:]
	if len(recs) == 0 || len(recs) > maxCompressedRecords {
		return body
	}
	out := make([]byte, headerSize+s2.MaxEncodedLen(len(recs)))
	appendHeader(out[:0], kindObjectS2, n)
	enc := s2.Encode(out[headerSize:], recs)
	if len(enc) > len(recs)-len(recs)/8 {
		return body
	}
	return out[:headerSize+len(enc)]
}

// objectRecords returns the records of a log object (kindObject or kindObjectS2, header checked
// by the caller) after a header: data itself for a kindObject, the decoded records behind a copy
// of its header for a kindObjectS2. Offsets in the result are those of the uncompressed records.
func objectRecords(data []byte, kind byte) ([]byte, error) {
	if kind != kindObjectS2 {
		return data, nil
	}
	n, err := s2.DecodedLen(data[headerSize:])
	if err != nil {
		return nil, fmt.Errorf("compressed records: %w", err)
	}
	if n > maxCompressedRecords {
		return nil, fmt.Errorf("compressed records say they decode to %d bytes, more than the %d a log object holds", n, maxCompressedRecords)
	}
	out := make([]byte, headerSize+n)
	copy(out, data[:headerSize])
	if _, err := s2.Decode(out[headerSize:], data[headerSize:]); err != nil {
		return nil, fmt.Errorf("compressed records: %w", err)
	}
	return out, nil
}

type putResult struct {
	n       uint64            // object number
	maxSeq  uint64            // every sequence id up to it is durable once the object is
	regions map[string]uint64 // highest sequence id of each region in it
}

type liveObject struct {
	n       uint64
	regions map[string]uint64
}

func objectKey(prefix string, n uint64) string {
	return path.Join(prefix, fmt.Sprintf("%0*d%s", segmentNameDigits, n, ".log"))
}

func parseObjectKey(prefix, key string) (uint64, bool) {
	rel, ok := strings.CutPrefix(key, prefix+"/")
	if !ok {
		return 0, false
	}
	return parseNumbered(rel, ".log")
}

// ObjectCommitDelayFits says whether a commit delay (ObjectLogOptions.CommitDelay) can act with this
// many PUTs in flight (0: the default, one): the appender about to PUT waits while none is under
// way, which needs one. The directory WAL's rule is CommitDelayFits.
func ObjectCommitDelayFits(puts int) bool { return puts <= 1 }

// OpenObjectLog starts a log under a prefix that must hold no object yet: each process writes its
// own log (its name carries the start code), so a restarted server never writes where the master
// may be fencing its predecessor.
func OpenObjectLog(ctx context.Context, opts ObjectLogOptions) (*ObjectLog, error) {
	if opts.Bucket == nil || opts.Prefix == "" {
		return nil, errors.New("wal: ObjectLogOptions needs a Bucket and a Prefix")
	}
	if opts.FirstSeq == 0 {
		opts.FirstSeq = 1
	}
	if opts.MaxInFlight <= 0 {
		opts.MaxInFlight = 1
	}
	opts.MaxInFlight = min(opts.MaxInFlight, MaxFenceWindow/2)
	if opts.MaxBatchBytes <= 0 {
		opts.MaxBatchBytes = 8 << 20
	}
	if opts.Timeout <= 0 {
		opts.Timeout = 30 * time.Second
	}
	switch {
	case opts.CommitDelay < 0 || opts.CommitDelay > 100*time.Millisecond:
		return nil, fmt.Errorf("wal: ObjectLogOptions.CommitDelay %s: from 0 to 100ms", opts.CommitDelay)
	case opts.CommitDelay > 0 && !ObjectCommitDelayFits(opts.MaxInFlight):
		return nil, errors.New("wal: a commit delay needs one PUT in flight (it waits while none is under way)")
	}
	if opts.Archive != nil {
		if err := opts.Archive.check(); err != nil {
			return nil, err
		}
	}
	existing, err := opts.Bucket.List(ctx, opts.Prefix+"/", "", 1)
	if err != nil {
		return nil, fmt.Errorf("wal: open log %s: %w", opts.Prefix, err)
	}
	if len(existing) > 0 {
		return nil, fmt.Errorf("wal: log %s in %s already holds %s: a log is written by one process only; start with a new prefix",
			opts.Prefix, opts.Bucket.Describe(), existing[0].Key)
	}
	l := &ObjectLog{opts: opts, nextSeq: opts.FirstSeq, gc: newCommitter[putResult](opts.MaxInFlight),
		curRegions: map[string]uint64{}, flushed: map[string]uint64{},
		synced: opts.FirstSeq - 1, kick: make(chan struct{}, 1), stop: make(chan struct{}), stopped: make(chan struct{}),
		dropKick: make(chan struct{}, 1), dropStop: make(chan struct{}), dropDone: make(chan struct{})}
	l.cond.L = &l.mu
	l.delay = newCommitDelay(opts.CommitDelay, opts.FirstSeq-1)
	go l.run()
	go l.dropLoop()
	return l, nil
}

// AdvanceSeq makes the next sequence id at least seq+1 (a region opened with higher ids).
func (l *ObjectLog) AdvanceSeq(seq uint64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if seq >= l.nextSeq {
		if l.synced == l.nextSeq-1 {
			l.synced = seq // nothing pending: no edit up to seq waits for anything
		}
		l.nextSeq = seq + 1
	}
}

// AppendNoWait adds the edit to the batch being filled, assigns its sequence id (also stored in
// e.Seq) and returns; WaitDurable waits for it.
func (l *ObjectLog) AppendNoWait(e *Edit) (uint64, error) {
	if len(e.Region) == 0 {
		return 0, fmt.Errorf("%w: empty region name", ErrInvalidEdit)
	}
	size := payloadSize(e)
	if size > MaxRecordSize || size > l.opts.MaxBatchBytes {
		return 0, fmt.Errorf("%w: %d bytes, limit %d", ErrRecordTooLarge, size, min(MaxRecordSize, l.opts.MaxBatchBytes))
	}
	wt := e.WriteTime
	if wt == 0 {
		wt = time.Now().UnixNano()
	}
	l.mu.Lock()
	// Backpressure: while the batch being filled is full and every PUT slot busy, wait (a slow
	// store must not let the batch grow without bound).
	for len(l.cur) >= l.opts.MaxBatchBytes && l.err == nil && !l.closed && l.failErr == nil {
		l.cond.Wait()
	}
	if l.closed {
		l.mu.Unlock()
		return 0, ErrClosed
	}
	if err := cmp.Or(l.err, l.failErr); err != nil {
		l.mu.Unlock()
		return 0, err
	}
	seq := l.nextSeq
	l.nextSeq++
	l.cur = appendRecord(l.cur, e, seq, wt, size)
	l.curRegions[string(e.Region)] = seq
	l.mu.Unlock()
	l.appends.Add(1)
	l.signal()
	e.Seq = seq
	return seq, nil
}

// Append appends and waits until the edit is durable.
func (l *ObjectLog) Append(e *Edit) (uint64, error) {
	seq, err := l.AppendNoWait(e)
	if err != nil {
		return 0, err
	}
	return seq, l.WaitDurable(seq)
}

// WaitDurable waits until the edit with sequence id seq, and every earlier one, is durable. An
// error means it is not acknowledged (fenced, broken or closed).
func (l *ObjectLog) WaitDurable(seq uint64) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if seq >= l.nextSeq {
		return fmt.Errorf("wal: sequence id %d was never assigned", seq)
	}
	if l.delay != nil && l.synced < seq { // the commit delay counts the writers
		l.delay.arrived(seq)
		defer func() { // (before the unlock deferred above)
			l.delay.left()
			if l.delay.waiting == 0 && len(l.cur) > 0 {
				l.signal() // what nobody waits for now is the log goroutine's to write
			}
		}()
	}
	for l.synced < seq {
		if l.err != nil {
			return l.err
		}
		if len(l.cur) == 0 && !l.gc.busy() && l.failErr == nil {
			// Nothing is buffered or being written: every id assigned so far is durable (the ids
			// above the last object's belong to no record: NextSeq).
			l.synced = l.nextSeq - 1
			continue
		}
		if l.finished { // Close wrote what it could: this edit is not durable
			return ErrClosed
		}
		// Leader-based group commit (group.go): with a slot free, this appender PUTs the batch
		// itself, for everyone in it — after the commit delay, if there is one, holding the slot.
		if l.delay != nil && l.canTake() && l.gc.reserve() {
			l.mu.Unlock()
			l.delay.linger(&l.mu, func() bool { return l.closed || l.err != nil || l.failErr != nil })
			l.mu.Lock()
			if !l.canTake() {
				l.gc.release()
				l.cond.Broadcast()
				l.signal() // a draining Close waits for the slot
				continue
			}
			c := l.stage()
			l.mu.Unlock()
			l.put(c)
			l.mu.Lock()
			continue
		}
		if c, ok := l.take(); ok {
			l.mu.Unlock()
			l.put(c)
			l.mu.Lock()
			continue
		}
		l.cond.Wait()
	}
	return nil
}

// Err is why the log acknowledges nothing more (ErrFenced, a store error), or nil.
func (l *ObjectLog) Err() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.err
}

// Close writes what is buffered, waits for the PUTs under way, and stops.
func (l *ObjectLog) Close() error {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return nil
	}
	l.closed = true
	l.mu.Unlock()
	close(l.stop)
	<-l.stopped
	close(l.dropStop)
	<-l.dropDone
	if err := l.DropFlushed(); err != nil {
		l.deleteErrors.Add(1) // left for the master's cleanup of the log
	}
	return l.Err()
}

// ObjectLogStats counts the log's work.
type ObjectLogStats struct {
	Appends uint64 // edits appended
	Puts    uint64 // objects written (group commits)
	Deleted uint64 // objects deleted because every edit in them was flushed
	// DeleteErrors counts failed rounds of those deletes (retried at the next flush).
	DeleteErrors uint64
	// PutRetries counts PUTs asked again because the store was unavailable for now (throttled,
	// a server error, no answer) after the client's own attempts.
	PutRetries uint64
	// PutBytes and PutNanos sum the size and the time of the objects written.
	PutBytes, PutNanos uint64
	// PlainBytes sums the size the objects written would have had without compression
	// (Compress): PlainBytes/PutBytes is the compression ratio; equal to PutBytes without it.
	PlainBytes uint64
	// CommitsDelayed and CommitDelaysExpired: PUTs whose appender waited for more writers
	// (CommitDelay) and saw them come, and those whose delay ran out first.
	CommitsDelayed, CommitDelaysExpired uint64
}

// Stats returns the counters: Appends/Puts is the edits one PUT carries.
func (l *ObjectLog) Stats() ObjectLogStats {
	s := ObjectLogStats{Appends: l.appends.Load(), Puts: l.puts.Load(), Deleted: l.deleted.Load(),
		DeleteErrors: l.deleteErrors.Load(), PutBytes: l.putBytes.Load(), PutNanos: l.putNanos.Load(),
		PutRetries: l.putRetries.Load(), PlainBytes: l.plainBytes.Load()}
	if l.delay != nil {
		s.CommitsDelayed, s.CommitDelaysExpired = l.delay.joined.Load(), l.delay.expired.Load()
	}
	return s
}

func (l *ObjectLog) signal() { kick(l.kick) }

// run commits what nobody waits for: whenever there is a batch and a free slot it starts a PUT.
// On Close it drains: writes what is buffered and waits for the PUTs under way.
func (l *ObjectLog) run() {
	defer close(l.stopped)
	defer func() {
		l.mu.Lock()
		l.finished = true
		l.cond.Broadcast()
		l.mu.Unlock()
	}()
	stop := l.stop
	for {
		l.mu.Lock()
		// With a commit delay, writers waiting for their edits commit them themselves (after the
		// delay): this goroutine commits only what nobody waits for.
		for l.delay == nil || l.delay.waiting == 0 {
			c, ok := l.take()
			if !ok {
				break
			}
			go l.put(c)
		}
		idle := !l.gc.busy() && (len(l.cur) == 0 || l.err != nil || l.failErr != nil)
		l.mu.Unlock()
		if stop == nil && idle {
			return
		}
		select {
		case <-l.kick:
		case <-stop:
			stop = nil // drain: write what is buffered, wait for the PUTs under way
		}
	}
}

// objectCommit is a batch taken for a PUT.
type objectCommit struct {
	putResult
	body []byte
}

// canTake says whether there is a batch to write and nothing has failed (l.mu held).
// The objects not yet acknowledged stay within MaxFenceWindow/2 of the last acknowledged one,
// also while one of them is asked again for a long time: a fence covers them all.
func (l *ObjectLog) canTake() bool {
	return len(l.cur) > 0 && l.err == nil && l.failErr == nil && l.gc.issued-l.gc.acked < MaxFenceWindow/2
}

// take takes the batch being filled as the next object, if there is one, nothing has failed and
// a PUT slot is free (l.mu held).
func (l *ObjectLog) take() (objectCommit, bool) {
	if !l.canTake() || !l.gc.reserve() {
		return objectCommit{}, false
	}
	return l.stage(), true
}

// stage makes the batch being filled the next object, in a slot already reserved (l.mu held).
func (l *ObjectLog) stage() objectCommit {
	n := l.gc.issue()
	body := appendHeader(make([]byte, 0, headerSize+len(l.cur)), kindObject, n)
	body = append(body, l.cur...)
	// Every id assigned so far is in this object or in an earlier one, or has no record.
	c := objectCommit{putResult{n: n, maxSeq: l.nextSeq - 1, regions: l.curRegions}, body}
	l.curRegions = map[string]uint64{}
	l.cur = l.cur[:0]
	if cap(l.cur) > 16<<20 {
		l.cur = nil
	}
	l.cond.Broadcast() // appenders waiting for room
	if l.delay != nil {
		l.delay.staged(c.maxSeq)
	}
	return c
}

// putRetry: the pauses between an object's PUTs to a store that was unavailable (each jittered
// down by up to half).
var putRetry = storage.Backoff{First: 100 * time.Millisecond, Max: 2 * time.Second}

// put writes a taken batch by create-only PUT and acknowledges, in order, every object now written.
// A store that is unavailable for now (storage.ErrUnavailable: throttled, a server error, no
// answer; or storage.ErrConflict: a conditional write of the key, perhaps this PUT's own earlier
// attempt, still under way) is asked again, with backoff, until Timeout has passed since the first
// try or an earlier object has failed: the edits are not acknowledged meanwhile, and a retry of a
// PUT that did take effect finds its own object (Bucket.Put's rule). A fence written meanwhile
// fails the retry's condition, as it would the first try's (the log is fenced). Any other
// failure, or Timeout, breaks the log (ErrBroken: the server starts a new one).
func (l *ObjectLog) put(c objectCommit) {
	key := objectKey(l.opts.Prefix, c.n)
	plain := len(c.body)
	if l.opts.Compress {
		c.body = compressObject(c.body, c.n)
	}
	start := time.Now()
	deadline := start.Add(l.opts.Timeout)
	var err error
	retries := 0
	for attempt := 1; ; attempt++ {
		ctx, cancel := context.WithDeadline(context.Background(), deadline)
		_, err = l.opts.Bucket.Put(ctx, key, c.body, storage.Condition{IfNoneMatch: true})
		cancel()
		if err == nil || !errors.Is(err, storage.ErrUnavailable) && !errors.Is(err, storage.ErrConflict) {
			break
		}
		pause := putRetry.Jittered(attempt) // the server's other PUTs retry too
		l.mu.Lock()
		gaveUp := l.failErr != nil || l.err != nil // an earlier object failed: this one is never acknowledged
		l.mu.Unlock()
		if gaveUp || time.Until(deadline) < pause {
			break
		}
		retries++
		l.putRetries.Add(1)
		time.Sleep(pause)
	}
	took := time.Since(start)
	slowCommit(l.opts.Slow, l.opts.SlowCommit, SlowCommit{Log: key, Bytes: len(c.body), Took: took, Err: err, Retries: retries})
	l.mu.Lock()
	if err == nil {
		l.puts.Add(1)
		l.putBytes.Add(uint64(len(c.body)))
		l.plainBytes.Add(uint64(plain))
		l.putNanos.Add(uint64(took))
	} else if l.failErr == nil {
		l.failErr = l.failure(c.n, err)
	}
	l.gc.complete(c.n, c.putResult, err, func(r putResult, err error) {
		if err != nil {
			// Nothing after the failed object is ever acknowledged, even if it was written.
			l.err = cmp.Or(l.err, l.failure(r.n, err))
			return
		}
		l.synced = max(l.synced, r.maxSeq)
		l.live = append(l.live, liveObject{n: r.n, regions: r.regions})
	})
	l.gc.release()
	l.cond.Broadcast()
	l.mu.Unlock()
	l.signal() // a batch may be waiting for this slot
}

// Backlog returns how many written objects the log keeps (those with edits some region has not
// flushed) and the regions whose unflushed edits keep the oldest of them: flushing those lets it
// go. A dead server's recovery reads every object kept, so the region server flushes when the
// backlog grows too long (HBase's maximum number of WAL files).
func (l *ObjectLog) Backlog() (units int, pinning []string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.live) == 0 {
		return 0, nil
	}
	oldest := l.live[0]
	for _, o := range l.live[1:] {
		if o.n < oldest.n {
			oldest = o
		}
	}
	for r, seq := range oldest.regions {
		if l.flushed[r] < seq {
			pinning = append(pinning, r)
		}
	}
	slices.Sort(pinning)
	return len(l.live), pinning
}

// NextSeq assigns a sequence id without logging anything (SKIP_WAL).
func (l *ObjectLog) NextSeq() (uint64, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return 0, ErrClosed
	}
	seq := l.nextSeq
	l.nextSeq++
	return seq, nil
}

// LastSeq returns the highest sequence id assigned so far.
func (l *ObjectLog) LastSeq() uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.nextSeq - 1
}

// MarkFlushed records that region flushed every edit up to seq; the objects whose regions have
// all flushed past their edits (HBase archives such WAL files), and that are archived when the
// log is, are deleted in the background: a flush (a region's close, so a region move) never
// waits for a store's DELETEs, of which a server's last flushes free hundreds. A failed delete
// is retried at the next flush; Close deletes what is left.
func (l *ObjectLog) MarkFlushed(region string, seq uint64) error {
	l.mu.Lock()
	if seq > l.flushed[region] {
		l.flushed[region] = seq
	}
	l.mu.Unlock()
	kick(l.dropKick)
	return nil
}

// dropLoop deletes the objects no longer needed whenever a flush was marked.
func (l *ObjectLog) dropLoop() {
	defer close(l.dropDone)
	for {
		select {
		case <-l.dropKick:
			if err := l.DropFlushed(); err != nil {
				l.deleteErrors.Add(1)
			}
		case <-l.dropStop:
			return
		}
	}
}

// DropFlushed deletes the objects no longer needed now, after any round under way.
func (l *ObjectLog) DropFlushed() error {
	l.dropMu.Lock()
	defer l.dropMu.Unlock()
	l.mu.Lock()
	// The highest object written stays, flushed or not: a fence finds the writer's numbers from
	// the highest object listed, and of a log with none it would place its markers at 1..64 —
	// below the writer's next number, which it could then still write and acknowledge.
	// (Closed too: a closed log that kept nothing would leave its prefix empty, and the catalog's
	// next master could take the same generation for its own log, whose objects a standby that
	// had read the kept object would then skip.)
	var top uint64
	for _, o := range l.live {
		top = max(top, o.n)
	}
	var drop []uint64
	kept := l.live[:0]
	for _, o := range l.live {
		done := o.n != top && (l.opts.Archive == nil || o.n <= l.archived.through.Load())
		for r, s := range o.regions {
			if !done || l.flushed[r] < s {
				done = false
				break
			}
		}
		if done {
			drop = append(drop, o.n)
		} else {
			kept = append(kept, o)
		}
	}
	clear(l.live[len(kept):])
	l.live = kept
	l.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), l.opts.Timeout)
	defer cancel()
	// In batches where the bucket deletes many objects per request (a busy log drops hundreds
	// of objects at a time, one per group commit).
	keys := make([]string, len(drop))
	for i, n := range drop {
		keys[i] = objectKey(l.opts.Prefix, n)
	}
	done, err := storage.DeleteAll(ctx, l.opts.Bucket, keys)
	l.deleted.Add(uint64(done))
	if err != nil {
		// Keep what may not be deleted, to try again (a second delete of a gone object is
		// harmless).
		l.mu.Lock()
		for _, m := range drop[done:] {
			l.live = append(l.live, liveObject{n: m})
		}
		l.mu.Unlock()
		return fmt.Errorf("wal: deleting flushed objects %d-%d of %s: %w", drop[done], drop[len(drop)-1], l.opts.Prefix, err)
	}
	return nil
}

// Archive copies the acknowledged objects not archived yet to opts.Archive (packed into archive
// objects of about 16 MiB), then deletes those whose regions have flushed. It returns how many
// objects it archived. Nothing is deleted before it is archived, so a failing archive makes the
// log keep its objects (Backlog grows) until it works again.
func (l *ObjectLog) Archive(ctx context.Context) (int, error) {
	t := l.opts.Archive
	if t == nil {
		return 0, errors.New("wal: the log has no archive")
	}
	l.archived.round.Lock()
	defer l.archived.round.Unlock()
	if err := l.archived.begin(ctx, t); err != nil {
		return 0, err
	}
	through := l.archived.through.Load()
	l.mu.Lock()
	var todo []uint64
	for _, o := range l.live {
		if o.n > through {
			todo = append(todo, o.n)
		}
	}
	l.mu.Unlock()
	slices.Sort(todo)
	done := 0
	var p archivePack
	objs := make([]numberedObject, len(todo))
	for i, n := range todo {
		objs[i] = numberedObject{n: n, key: objectKey(l.opts.Prefix, n)}
	}
	err := fetchObjects(ctx, l.opts.Bucket, objs, func(o numberedObject, data []byte) error {
		kind, data, err := readObject(o, data)
		if err != nil {
			return err
		}
		if kind == kindFence { // this log's own object, acknowledged: never a fence marker
			return &CorruptionError{File: o.key, Offset: 10, Reason: fmt.Sprintf("a fence marker where log object %d was written", o.n)}
		}
		p.add(o.n, data[headerSize:])
		done++
		if p.full() {
			return l.archived.put(ctx, t, &p)
		}
		return nil
	})
	if err != nil {
		return done, err
	}
	if err := l.archived.put(ctx, t, &p); err != nil {
		return done, err
	}
	return done, l.DropFlushed()
}

// failure is the error of a failed PUT of object n: ErrFenced when the number was taken.
func (l *ObjectLog) failure(n uint64, err error) error {
	// A conflict that outlasted the retries is not known to be a fence: the log breaks.
	if errors.Is(err, storage.ErrPrecondition) && !errors.Is(err, storage.ErrConflict) {
		return fmt.Errorf("%w: object %d of %s is a fence marker (writer %s)", ErrFenced, n, l.opts.Prefix, l.opts.Writer)
	}
	// ErrBroken: as for a failed sync of a segment, the server starts a new log.
	return fmt.Errorf("%w: writing object %d of %s: %w", ErrBroken, n, l.opts.Prefix, err)
}

// Fenced reports whether the master fenced the log: whether the number this log would write next
// holds a fence marker (FenceObjectLog puts markers at the numbers above the highest object). An
// idle writer learns this way what a writing one learns from its next PUT. A busy writer's own
// object may already be at that number: that is not a fence.
func (l *ObjectLog) Fenced(ctx context.Context) (bool, error) {
	l.mu.Lock()
	next := l.gc.issued + 1
	err := l.err
	l.mu.Unlock()
	if errors.Is(err, ErrFenced) {
		return true, nil
	}
	// The number may hold this log's own object: a commit issued it after the read above. Only a
	// fence marker there means fenced.
	data, _, gerr := l.opts.Bucket.Get(ctx, objectKey(l.opts.Prefix, next))
	switch {
	case errors.Is(gerr, storage.ErrNoObject):
		return false, nil
	case gerr != nil:
		return false, fmt.Errorf("wal: checking whether %s was fenced: %w", l.opts.Prefix, gerr)
	}
	kind, _, err := checkHeader(data)
	if err != nil {
		return false, fmt.Errorf("wal: checking whether %s was fenced: object %d: %w", l.opts.Prefix, next, err)
	}
	return kind == kindFence, nil
}

// DeleteObjectLog deletes a fenced log's objects once its edits were split out, keeping the fence
// markers: a writer that was paused through the fence and the split, and wakes, must still find
// its next numbers taken rather than acknowledge writes nobody will read.
func DeleteObjectLog(ctx context.Context, b storage.Bucket, prefix string) error {
	objs, err := listObjects(ctx, b, prefix)
	if err != nil {
		return fmt.Errorf("wal: delete %s: %w", prefix, err)
	}
	var del []string
	for _, o := range objs {
		marker, err := isFenceMarker(ctx, b, prefix, o.n)
		if err != nil {
			return fmt.Errorf("wal: delete %s: %w", o.key, err)
		}
		if marker {
			continue
		}
		del = append(del, o.key)
	}
	if _, err := storage.DeleteAll(ctx, b, del); err != nil {
		return fmt.Errorf("wal: delete %s: %w", prefix, err)
	}
	return nil
}

// FenceObjectLog stops the log's writer: it writes fence markers at every number missing among the
// MaxFenceWindow numbers up to the highest object and at the MaxFenceWindow numbers after it (twice
// as many each further round), each by create-only PUT — the top one first, then the others
// fenceParallelism at a time — until
// the highest object under the prefix is one of its markers. From then on every PUT the writer
// makes fails its condition, so it acknowledges nothing more, and ReadObjectLog returns every
// edit it acknowledged. It returns the highest marker's number. Fencing a fenced log again is
// harmless.
func FenceObjectLog(ctx context.Context, b storage.Bucket, prefix, by string) (uint64, error) {
	var nonce [8]byte
	_, _ = rand.Read(nonce[:])
	marker := func(n uint64) []byte {
		body := appendHeader(nil, kindFence, n)
		return append(body, "fenced by "+by+" nonce "+hex.EncodeToString(nonce[:])...)
	}
	// has(n, limit): is there an object numbered in (n, limit) (limit 0: no bound)? One one-key
	// listing; a listing of the whole log may never end while a live writer adds objects faster
	// than it pages, and a listing of a directory bucket reads the whole directory.
	has := func(n, limit uint64) (bool, error) {
		start := ""
		if n > 0 {
			start = objectKey(prefix, n)
		}
		page, err := b.List(ctx, prefix+"/", start, 1)
		if err != nil || len(page) == 0 {
			return false, err
		}
		m, ok := parseObjectKey(prefix, page[0].Key)
		return ok && (limit == 0 || m < limit), nil
	}
	put := func(n uint64) (placed bool, err error) {
		_, err = b.Put(ctx, objectKey(prefix, n), marker(n), storage.Condition{IfNoneMatch: true})
		switch {
		case err == nil:
			return true, nil
		case !errors.Is(err, storage.ErrPrecondition):
			return false, fmt.Errorf("wal: fence %s at %d: %w", prefix, n, err)
		}
		// Taken: by the writer, or by an earlier fence's marker (which stops the writer as well).
		marker, gerr := isFenceMarker(ctx, b, prefix, n)
		if errors.Is(gerr, storage.ErrNoObject) {
			return false, nil // the writer's, deleted since (flushed): it writes no number twice
		}
		if gerr != nil {
			return false, fmt.Errorf("wal: fence %s at %d: %w", prefix, n, gerr)
		}
		return marker, nil
	}

	highest0, fenced, err := fencedBefore(ctx, b, prefix, has)
	if err != nil || fenced {
		return highest0, err
	}
	// How far above the writer the top marker goes: a writer that gets past it between the
	// listing that bounded its numbers and the marker's PUT makes the next round go twice as far.
	ahead := uint64(MaxFenceWindow)
	seen := highest0 // an object lies at seen (or seen is 0): the writer is at or above it
	for attempt := 0; ; attempt++ {
		if attempt > 100 {
			return 0, fmt.Errorf("wal: fence %s: the writer kept ahead of 100 fencing rounds", prefix)
		}
		if attempt > 0 {
			ahead = min(2*ahead, maxFenceAhead)
		}
		// A bound of the writer's numbers as fresh as one listing, then at once the top marker:
		// once it is in place the writer can get past it no more.
		lo, bound, err := searchUp(seen, func(n uint64) (bool, error) { return has(n, 0) })
		if err != nil {
			return 0, fmt.Errorf("wal: fence %s: %w", prefix, err)
		}
		top := bound + ahead
		placed, err := put(top)
		if err != nil {
			return 0, err
		}
		if !placed {
			seen = top // the writer got there first
			continue
		}
		// The writer's highest object below the top marker.
		highest, err := searchDown(lo, top, func(n uint64) (bool, error) { return has(n, top) })
		if err != nil {
			return 0, fmt.Errorf("wal: fence %s: %w", prefix, err)
		}
		// Markers on every free number below the top, down to MaxFenceWindow below the writer's
		// highest object: only the last numbers below it can still be in flight (a writer has at
		// most MaxFenceWindow/2 PUTs under way); lower gaps are objects MarkFlushed deleted. The
		// writer's highest, not the highest object: markers an interrupted fence left may lie far
		// above the writer, with free numbers between it and them.
		first, have, _, err := fenceWindow(ctx, b, prefix, highest, top)
		if err != nil {
			return 0, fmt.Errorf("wal: fence %s: %w", prefix, err)
		}
		var free []uint64
		for n := top - 1; n >= first && n > 0; n-- {
			if !have[n] {
				free = append(free, n)
			}
		}
		if err := putMarkers(free, put); err != nil {
			return 0, err
		}
		// Nothing can lie above the top marker; check anyway (and fence above it if something does).
		if more, err := has(top, 0); err != nil {
			return 0, fmt.Errorf("wal: fence %s: %w", prefix, err)
		} else if !more {
			if err := markFenced(ctx, b, prefix, top); err != nil {
				return 0, err
			}
			return top, nil
		}
		seen = top
	}
}

// fenceParallelism is how many marker PUTs a fence has under way at once: the markers below the
// top one may go in any order (the top marker already stops the writer past it; the others fill
// the numbers it may still reach), and one PUT after another made a fence take a second.
const fenceParallelism = 16

// putMarkers places markers at the numbers given (highest first), fenceParallelism at a time, and
// returns the first error.
func putMarkers(numbers []uint64, put func(uint64) (bool, error)) error {
	return eachParallel(len(numbers), func(i int) error {
		_, err := put(numbers[i])
		return err
	})
}

// eachParallel calls fn(0..n-1), fenceParallelism at a time, starts no call after one failed, and
// returns the first error.
func eachParallel(n int, fn func(i int) error) error {
	var (
		wg       sync.WaitGroup
		mu       sync.Mutex
		firstErr error
	)
	sem := make(chan struct{}, fenceParallelism)
	for i := range n {
		mu.Lock()
		failed := firstErr != nil
		mu.Unlock()
		if failed {
			break
		}
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			if err := fn(i); err != nil {
				mu.Lock()
				if firstErr == nil {
					firstErr = err
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return firstErr
}

// fencedBefore returns the highest object and whether the log was fenced completely before (a
// fence places its top marker first: a crash mid-way leaves gaps below it): its highest object is
// a marker and every number from MaxFenceWindow below the writer's highest object up to it is
// taken, so the writer can get past none. Fencing it again adds nothing.
func fencedBefore(ctx context.Context, b storage.Bucket, prefix string, has func(n, limit uint64) (bool, error)) (uint64, bool, error) {
	if top, ok, err := readFenced(ctx, b, prefix); err != nil || ok {
		return top, ok, err // a fence completed (nothing is read of the log: it may be deleted)
	}
	lo, bound, err := searchUp(0, func(n uint64) (bool, error) { return has(n, 0) })
	if err != nil || bound == 0 {
		return 0, false, err
	}
	highest, err := searchDown(lo, bound+1, func(n uint64) (bool, error) { return has(n, 0) })
	if err != nil || highest == 0 {
		return 0, false, err
	}
	if marker, err := isFenceMarker(ctx, b, prefix, highest); errors.Is(err, storage.ErrNoObject) {
		return highest, false, nil // deleted since it was listed (flushed): not a marker
	} else if err != nil || !marker {
		return highest, false, err
	}
	first, have, writer, err := fenceWindow(ctx, b, prefix, highest, highest+1)
	if err != nil {
		return 0, false, err
	}
	for n := first; n <= highest; n++ {
		if !have[n] {
			// Not fenced: the new fence searches up from the writer's highest object (an earlier
			// fence's markers above it are not the writer's).
			return writer, false, nil
		}
	}
	// Fenced completely (by a release that recorded no completion): recorded now, so that the
	// next master's fence of it reads one object.
	return highest, true, markFenced(ctx, b, prefix, highest)
}

// fencedKey is where a fence that completed records it (not a numbered object: listings of the
// log skip it). A fence that finds it has nothing to do; one that does not (an interrupted fence,
// which may have left markers far above the writer with free numbers between) fences anew.
func fencedKey(prefix string) string { return path.Join(prefix, "fenced") }

func markFenced(ctx context.Context, b storage.Bucket, prefix string, top uint64) error {
	if _, err := b.Put(ctx, fencedKey(prefix), strconv.AppendUint(nil, top, 10), storage.Condition{}); err != nil {
		return fmt.Errorf("wal: fence %s: recording it complete: %w", prefix, err)
	}
	return nil
}

func readFenced(ctx context.Context, b storage.Bucket, prefix string) (uint64, bool, error) {
	data, _, err := b.Get(ctx, fencedKey(prefix))
	if errors.Is(err, storage.ErrNoObject) {
		return 0, false, nil
	}
	if err != nil {
		return 0, false, err
	}
	top, perr := strconv.ParseUint(string(data), 10, 64)
	if perr != nil {
		return 0, false, &CorruptionError{File: fencedKey(prefix), Reason: fmt.Sprintf("not a number: %q", data)}
	}
	return top, true, nil
}

// isFenceMarker says whether object n of the log is a fence marker.
func isFenceMarker(ctx context.Context, b storage.Bucket, prefix string, n uint64) (bool, error) {
	head, err := b.GetRange(ctx, objectKey(prefix, n), 0, headerSize)
	if err != nil {
		return false, err
	}
	kind, _, herr := checkHeader(head)
	return herr == nil && kind == kindFence, nil
}

// fenceWindow returns the numbers a fence must hold below top: from MaxFenceWindow below the
// writer's highest object (the highest at or below highest that is not a marker; highest when
// there is none), which of them up to top-1 hold an object, and that writer's highest.
func fenceWindow(ctx context.Context, b storage.Bucket, prefix string, highest, top uint64) (uint64, map[uint64]bool, uint64, error) {
	writer, err := writerHighest(ctx, b, prefix, highest)
	if err != nil {
		return 0, nil, 0, err
	}
	if writer == 0 {
		// Only markers (a log whose objects were deleted after its split, or one its writer
		// never wrote to): the window below the highest of them.
		writer = highest
	}
	first := uint64(1)
	if writer > MaxFenceWindow {
		first = writer - MaxFenceWindow + 1
	}
	have, err := takenIn(ctx, b, prefix, first, top-1)
	if err != nil {
		return 0, nil, 0, err
	}
	return first, have, writer, nil
}

// writerHighest returns the writer's highest object at or below highest — the highest that is
// not a fence marker (0: none, only markers or nothing). It looks down from highest a window at a
// time (MaxFenceWindow numbers, twice as many each further window: an interrupted fence's markers
// may lie far above the writer), reading the headers of the objects there from the top, the first
// alone (mostly the writer's), then a batch at a time.
func writerHighest(ctx context.Context, b storage.Bucket, prefix string, highest uint64) (uint64, error) {
	size := uint64(MaxFenceWindow)
	for hi := highest; hi > 0; size *= 2 {
		lo := uint64(1)
		if hi > size {
			lo = hi - size + 1
		}
		taken, err := takenIn(ctx, b, prefix, lo, hi)
		if err != nil {
			return 0, err
		}
		nums := make([]uint64, 0, len(taken))
		for n := range taken {
			nums = append(nums, n)
		}
		slices.Sort(nums)
		slices.Reverse(nums)
		for batch := 1; len(nums) > 0; batch = MaxFenceWindow {
			these := nums[:min(len(nums), batch)]
			nums = nums[len(these):]
			marker := make([]bool, len(these))
			if err := eachParallel(len(these), func(i int) error {
				m, err := isFenceMarker(ctx, b, prefix, these[i])
				if errors.Is(err, storage.ErrNoObject) {
					m, err = true, nil // deleted meanwhile (a split's DeleteObjectLog): not the writer's
				}
				marker[i] = m
				return err
			}); err != nil {
				return 0, err
			}
			for i, n := range these { // highest first
				if !marker[i] {
					return n, nil
				}
			}
		}
		hi = lo - 1
	}
	return 0, nil
}

// takenIn lists the numbers from lo to hi that hold an object.
func takenIn(ctx context.Context, b storage.Bucket, prefix string, lo, hi uint64) (map[uint64]bool, error) {
	have := map[uint64]bool{}
	after := ""
	if lo > 1 {
		after = objectKey(prefix, lo-1)
	}
	for {
		page, err := b.List(ctx, prefix+"/", after, 1000)
		if err != nil {
			return nil, err
		}
		for _, o := range page {
			n, ok := parseObjectKey(prefix, o.Key)
			if !ok {
				continue
			}
			if n > hi {
				return have, nil
			}
			if n >= lo {
				have[n] = true
			}
		}
		if len(page) < 1000 {
			return have, nil
		}
		after = page[len(page)-1].Key
	}
}

// searchUp finds, from seen, numbers lo < hi with an object after lo and none after hi, in steps
// that double (a few listings when the writer moved little since seen). Nothing after seen:
// (seen, seen). The last listing is the one that found none after hi: hi is as fresh as one
// listing.
func searchUp(seen uint64, after func(uint64) (bool, error)) (lo, hi uint64, err error) {
	more, err := after(seen)
	if err != nil || !more {
		return seen, seen, err
	}
	lo, step := seen, uint64(1)
	for {
		hi = lo + step
		more, err := after(hi)
		if err != nil {
			return 0, 0, err
		}
		if !more {
			return lo, hi, nil
		}
		lo, step = hi, step*2
	}
}

// searchDown finds the highest object below hi by binary search in (lo, hi) — an object after lo
// unless lo is 0 — with after(n) telling whether one lies in (n, hi). 0: none.
func searchDown(lo, hi uint64, after func(uint64) (bool, error)) (uint64, error) {
	more, err := after(lo)
	if err != nil || !more {
		return lo, err
	}
	// An object lies in (lo, hi): narrow to the n with one after n-1 and none after n.
	for hi-lo > 1 {
		mid := lo + (hi-lo)/2
		more, err := after(mid)
		if err != nil {
			return 0, err
		}
		if more {
			lo = mid
		} else {
			hi = mid
		}
	}
	return hi, nil
}

type numberedObject struct {
	n    uint64
	key  string
	size int64 // as listed (0: not known)
}

func listObjects(ctx context.Context, b storage.Bucket, prefix string) ([]numberedObject, error) {
	return listObjectsAfter(ctx, b, prefix, 0)
}

// listObjectsAfter lists the log's objects numbered above after.
func listObjectsAfter(ctx context.Context, b storage.Bucket, prefix string, after uint64) ([]numberedObject, error) {
	start := ""
	if after > 0 {
		start = objectKey(prefix, after) // keys are zero-padded: the listing starts past it
	}
	var out []numberedObject
	err := storage.WalkAfter(ctx, b, prefix+"/", start, func(o storage.ObjectInfo) error {
		if n, ok := parseObjectKey(prefix, o.Key); ok && n > after {
			out = append(out, numberedObject{n: n, key: o.Key, size: o.Size})
		}
		return nil
	})
	return out, err
}

// readAhead is how many of a log's objects ReadObjectLog fetches at once: a log is thousands of
// small objects, and one GET after another would make a dead server's recovery wait for each.
const readAhead = 32

// ReadObjectLog calls fn with every edit of the log's objects in order (fence markers skipped),
// and returns the highest object number. Run after FenceObjectLog, it sees every acknowledged
// edit. Objects are immutable and written whole: any damage is corruption, reported with the
// object's key. The Edit passed to fn aliases the object: copy what you keep. Objects are fetched
// readAhead at a time and applied in order.
func ReadObjectLog(ctx context.Context, b storage.Bucket, prefix string, fn func(*Edit) error) (uint64, error) {
	return ReadObjectLogAfter(ctx, b, prefix, 0, fn)
}

// ReadObjectLogAfter is ReadObjectLog for the objects numbered above after (a reader that read
// the log up to after before: a standby master following the catalog). It returns after when
// there is nothing newer.
func ReadObjectLogAfter(ctx context.Context, b storage.Bucket, prefix string, after uint64, fn func(*Edit) error) (uint64, error) {
	objs, err := listObjectsAfter(ctx, b, prefix, after)
	if err != nil {
		return 0, fmt.Errorf("wal: read %s: %w", prefix, err)
	}
	highest := after
	err = fetchObjects(ctx, b, objs, func(o numberedObject, data []byte) error {
		highest = max(highest, o.n)
		return applyObject(o, data, fn)
	})
	return highest, err
}

// fetchBytes bounds the listed bytes of the objects fetchObjects holds at once (one object larger
// than it is fetched alone).
const fetchBytes = 64 << 20

// fetchBatchEnd is where the batch of objects fetched together from start ends: at most readAhead
// objects, of at most fetchBytes listed together unless the first alone is larger.
func fetchBatchEnd(objs []numberedObject, start int) int {
	bytes, end := objs[start].size, start+1
	for ; end < len(objs) && end-start < readAhead && bytes+objs[end].size <= fetchBytes; end++ {
		bytes += objs[end].size
	}
	return end
}

// fetchObjects gets objs readAhead at a time (fewer when their listed sizes pass fetchBytes) and
// calls fn with each, in order.
func fetchObjects(ctx context.Context, b storage.Bucket, objs []numberedObject, fn func(numberedObject, []byte) error) error {
	bodies := make([][]byte, readAhead)
	errs := make([]error, readAhead)
	for start, end := 0, 0; start < len(objs); start = end {
		end = fetchBatchEnd(objs, start)
		batch := objs[start:end]
		var wg sync.WaitGroup
		for i, o := range batch {
			wg.Add(1)
			go func() {
				defer wg.Done()
				bodies[i], _, errs[i] = b.Get(ctx, o.key)
			}()
		}
		wg.Wait()
		for i, o := range batch {
			if errs[i] != nil {
				return fmt.Errorf("wal: read %s: %w", o.key, errs[i])
			}
			if err := fn(o, bodies[i]); err != nil {
				return err
			}
			bodies[i] = nil
		}
	}
	return nil
}

// applyObject checks one log object and calls fn with its edits.
func applyObject(o numberedObject, data []byte, fn func(*Edit) error) error {
	kind, data, err := readObject(o, data)
	if err != nil || kind == kindFence {
		return err
	}
	return decodeRecords(data, o.key, fn)
}

// readObject checks one log object's header and returns its kind and, for a log object, its
// header followed by its records (decoded from a kindObjectS2) for decodeRecords.
func readObject(o numberedObject, data []byte) (byte, []byte, error) {
	bad := func(off int, why string) error {
		return &CorruptionError{File: o.key, Offset: int64(off), Reason: why}
	}
	kind, n, err := checkHeader(data)
	if err != nil {
		return 0, nil, bad(0, err.Error())
	}
	if n != o.n {
		return 0, nil, bad(12, "object number "+strconv.FormatUint(n, 10)+" in the header of another object's key")
	}
	if kind == kindFence {
		return kind, nil, nil
	}
	if kind != kindObject && kind != kindObjectS2 {
		return 0, nil, bad(10, fmt.Sprintf("kind %d is not a log object", kind))
	}
	if data, err = objectRecords(data, kind); err != nil {
		return 0, nil, bad(headerSize, err.Error())
	}
	return kind, data, nil
}
