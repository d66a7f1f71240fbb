package wal

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cellstore/cellstore/engine/storage"
	"github.com/cellstore/cellstore/engine/storage/buckettest"
	s3 "github.com/cellstore/cellstore/engine/storage/s3"
	"github.com/cellstore/cellstore/engine/storage/s3/s3test"
)

func dirBucket(t testing.TB) storage.Bucket { return buckettest.Dir(t) }

// minioBucket is a bucket on a real S3 server (skipped, saying how to get it, outside make test),
// reached through a fault-injecting proxy.
func minioBucket(t testing.TB, name string) (storage.Bucket, *s3test.Proxy) {
	t.Helper()
	srv := s3test.Start(t)
	srv.CreateBucket(t, name)
	proxy := srv.StartProxy(t)
	cfg := srv.Config(name)
	cfg.Endpoint = proxy.Endpoint
	cfg.MaxBackoff = 20 * time.Millisecond
	b, err := s3.Open(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	return b, proxy
}

func openLog(t testing.TB, b storage.Bucket, prefix string, inFlight int) *ObjectLog {
	t.Helper()
	l, err := OpenObjectLog(context.Background(), ObjectLogOptions{Bucket: b, Prefix: prefix, Writer: "test", MaxInFlight: inFlight})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return l
}

func readLog(t testing.TB, b storage.Bucket, prefix string) []Edit {
	t.Helper()
	var out []Edit
	if _, err := ReadObjectLog(context.Background(), b, prefix, func(e *Edit) error {
		out = append(out, cloneEdit(e))
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return out
}

// Concurrent appenders share PUTs; every acknowledged edit reads back, whole, in sequence order.
func TestObjectLogAppendAndRead(t *testing.T) {
	b := dirBucket(t)
	l := openLog(t, b, "wal/rs1_1", 4)
	const writers, each = 8, 100
	var mu sync.Mutex
	acked := map[uint64]*Edit{}
	var wg sync.WaitGroup
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range each {
				e := testEdit(fmt.Sprintf("region-%d", w), i)
				seq, err := l.Append(e)
				if err != nil {
					t.Errorf("append: %v", err)
					return
				}
				c := cloneEdit(e)
				c.Seq = seq
				mu.Lock()
				acked[seq] = &c
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	got := readLog(t, b, "wal/rs1_1")
	if len(got) != writers*each {
		t.Fatalf("read %d edits, appended %d", len(got), writers*each)
	}
	for i := range got {
		if i > 0 && got[i].Seq <= got[i-1].Seq {
			t.Fatalf("sequence ids out of order at %d: %d after %d", i, got[i].Seq, got[i-1].Seq)
		}
		if want := acked[got[i].Seq]; want == nil || !sameEdit(&got[i], want) {
			t.Fatalf("edit %d (seq %d) differs from what was appended", i, got[i].Seq)
		}
	}
	st := l.Stats()
	if st.Appends != writers*each || st.Puts == 0 || st.Puts > st.Appends {
		t.Fatalf("stats %+v", st)
	}
	t.Logf("%d edits in %d PUTs (%.1f edits per PUT)", st.Appends, st.Puts, float64(st.Appends)/float64(st.Puts))
}

func TestObjectLogRefusesAUsedPrefix(t *testing.T) {
	b := dirBucket(t)
	l := openLog(t, b, "wal/rs1_1", 1)
	if _, err := l.Append(testEdit("r", 1)); err != nil {
		t.Fatal(err)
	}
	if _, err := OpenObjectLog(context.Background(), ObjectLogOptions{Bucket: b, Prefix: "wal/rs1_1"}); err == nil {
		t.Fatal("a second writer opened a log that holds objects")
	}
}

// The fencing property, on a directory and on a real S3 server: a writer under load is fenced
// while it writes; afterwards it acknowledges nothing, and every edit it acknowledged — before
// or during the fence — is in what the log reads back.
func TestObjectLogFencing(t *testing.T) {
	for _, inFlight := range []int{1, 4, 16} {
		t.Run(fmt.Sprintf("dir/inflight=%d", inFlight), func(t *testing.T) {
			checkFencing(t, dirBucket(t), nil, inFlight)
		})
	}
	t.Run("s3/inflight=4", func(t *testing.T) {
		b, proxy := minioBucket(t, "fencing")
		checkFencing(t, b, proxy, 4)
	})
}

func checkFencing(t *testing.T, b storage.Bucket, proxy *s3test.Proxy, inFlight int) {
	const prefix = "wal/rs-7_1700000000000"
	l := openLog(t, b, prefix, inFlight)
	var mu sync.Mutex
	acked := map[uint64]bool{}
	var ackedAfterFence atomic.Int64
	var fenced atomic.Bool
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				seq, err := l.Append(testEdit(fmt.Sprintf("r%d", w), i))
				if err != nil {
					if !errors.Is(err, ErrFenced) {
						t.Errorf("append failed with %v, want ErrFenced", err)
					}
					return
				}
				if fenced.Load() {
					ackedAfterFence.Add(1)
				}
				mu.Lock()
				acked[seq] = true
				mu.Unlock()
			}
		}()
	}
	// Let the writer get going, then fence it (through lost answers, on S3).
	deadline := time.Now().Add(30 * time.Second)
	for l.Stats().Puts < 20 {
		if time.Now().After(deadline) {
			t.Fatal("the writer made fewer than 20 PUTs in 30 s")
		}
		time.Sleep(time.Millisecond) // polling the writer's progress
	}
	if proxy != nil {
		proxy.Inject(s3test.LoseAnswer, "PUT", 3, 0)
	}
	top, err := FenceObjectLog(context.Background(), b, prefix, "master-0")
	if err != nil {
		t.Fatal(err)
	}
	fenced.Store(true)
	// The writer stops acknowledging: every appender ends with ErrFenced.
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(60 * time.Second):
		close(stop)
		<-done
		t.Fatal("appenders still succeed 60 s after the fence")
	}
	if err := l.Err(); !errors.Is(err, ErrFenced) {
		t.Fatalf("log error %v, want ErrFenced", err)
	}
	read := readLog(t, b, prefix)
	inLog := map[uint64]bool{}
	for _, e := range read {
		inLog[e.Seq] = true
	}
	mu.Lock()
	defer mu.Unlock()
	var lost []uint64
	for seq := range acked {
		if !inLog[seq] {
			lost = append(lost, seq)
		}
	}
	slices.Sort(lost)
	if len(lost) > 0 {
		t.Fatalf("%d acknowledged edits are not in the fenced log (first %d)", len(lost), lost[0])
	}
	// Fencing again is harmless, and nothing lands above the fence afterwards.
	if _, err := FenceObjectLog(context.Background(), b, prefix, "master-1"); err != nil {
		t.Fatal(err)
	}
	t.Logf("%d edits acknowledged (%d of them returned after the fence was up), %d in the log, fence at object %d",
		len(acked), ackedAfterFence.Load(), len(read), top)
}

// A writer that finds its objects' numbers taken stops at once; a new writer under a new prefix
// (the server's next process) starts clean.
func TestObjectLogFencedBeforeItWrites(t *testing.T) {
	b := dirBucket(t)
	l := openLog(t, b, "wal/a_1", 2)
	if _, err := FenceObjectLog(context.Background(), b, "wal/a_1", "master"); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Append(testEdit("r", 1)); !errors.Is(err, ErrFenced) {
		t.Fatalf("append to a fenced log: %v, want ErrFenced", err)
	}
	if _, err := l.AppendNoWait(testEdit("r", 2)); !errors.Is(err, ErrFenced) {
		t.Fatalf("append after the fence was seen: %v, want ErrFenced at once", err)
	}
	if got := readLog(t, b, "wal/a_1"); len(got) != 0 {
		t.Fatalf("a fenced empty log reads %d edits", len(got))
	}
	l2 := openLog(t, b, "wal/a_2", 2)
	if _, err := l2.Append(testEdit("r", 3)); err != nil {
		t.Fatal(err)
	}
}

// Damage in an object is reported as corruption naming the object.
func TestObjectLogCorruptObject(t *testing.T) {
	b := dirBucket(t)
	l := openLog(t, b, "wal/c_1", 1)
	for i := range 3 {
		if _, err := l.Append(testEdit("r", i)); err != nil {
			t.Fatal(err)
		}
	}
	l.Close()
	ctx := context.Background()
	data, _, err := b.Get(ctx, objectKey("wal/c_1", 2))
	if err != nil {
		t.Fatal(err)
	}
	data[len(data)-3] ^= 0xff
	if _, err := b.Put(ctx, objectKey("wal/c_1", 2), data, storage.Condition{}); err != nil {
		t.Fatal(err)
	}
	_, err = ReadObjectLog(ctx, b, "wal/c_1", func(*Edit) error { return nil })
	var ce *CorruptionError
	if !errors.As(err, &ce) || ce.File != objectKey("wal/c_1", 2) {
		t.Fatalf("want corruption in object 2, got %v", err)
	}
}

// BenchmarkObjectLogAppend: concurrent synced appends; reports edits per PUT (how many writes a
// group commit carries: the requests an object store bills per row is its inverse).
func BenchmarkObjectLogAppend(b *testing.B) {
	for _, backend := range []string{"dir", "s3"} {
		for _, inFlight := range []int{1, 4} {
			b.Run(fmt.Sprintf("%s/inflight=%d", backend, inFlight), func(b *testing.B) {
				var bucket storage.Bucket
				if backend == "dir" {
					bucket = dirBucket(b)
				} else {
					srv := s3test.Start(b)
					srv.CreateBucket(b, "bench")
					var err error
					if bucket, err = s3.Open(context.Background(), srv.Config("bench")); err != nil {
						b.Fatal(err)
					}
				}
				l := openLog(b, bucket, "wal/bench_1", inFlight)
				var i atomic.Int64
				b.SetParallelism(8) // 16 appenders on 2 cores
				b.ResetTimer()
				b.RunParallel(func(pb *testing.PB) {
					for pb.Next() {
						if _, err := l.Append(testEdit("r", int(i.Add(1)))); err != nil {
							b.Error(err)
							return
						}
					}
				})
				b.StopTimer()
				st := l.Stats()
				b.ReportMetric(float64(st.Appends)/float64(max(st.Puts, 1)), "edits/PUT")
			})
		}
	}
}

// Close writes what is buffered: an appender waiting on an edit that Close still has to write is
// acknowledged once it is, not told the log closed.
func TestObjectLogCloseDrains(t *testing.T) {
	g := &gatedBucket{Bucket: dirBucket(t), gate: make(chan struct{})}
	l, err := OpenObjectLog(context.Background(), ObjectLogOptions{Bucket: g, Prefix: "wal/close_1", MaxInFlight: 1})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l.AppendNoWait(testEdit("r", 0)); err != nil {
		t.Fatal(err)
	}
	// The first edit's PUT is under way (held by the gate); the next two wait in the batch.
	deadline := time.Now().Add(10 * time.Second)
	for {
		l.mu.Lock()
		taken := l.gc.reserved == 1 && len(l.cur) == 0
		l.mu.Unlock()
		if taken {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the first PUT never started")
		}
		time.Sleep(time.Millisecond) // polling the writer
	}
	var last uint64
	for i := 1; i <= 2; i++ {
		if last, err = l.AppendNoWait(testEdit("r", i)); err != nil {
			t.Fatal(err)
		}
	}
	waited := make(chan error, 1)
	go func() { waited <- l.WaitDurable(last) }()
	closed := make(chan error, 1)
	go func() { closed <- l.Close() }()
	for { // Close has begun
		l.mu.Lock()
		c := l.closed
		l.mu.Unlock()
		if c {
			break
		}
		time.Sleep(time.Millisecond) // polling Close
	}
	close(g.gate) // the store answers only now: the first PUT, then the one Close drains
	if err := <-closed; err != nil {
		t.Fatal(err)
	}
	if err := <-waited; err != nil {
		t.Fatalf("an edit Close wrote was not acknowledged: %v", err)
	}
	if got := readLog(t, g.Bucket, "wal/close_1"); len(got) != 3 {
		t.Fatalf("read %d edits, want 3", len(got))
	}
	if _, err := l.AppendNoWait(testEdit("r", 9)); !errors.Is(err, ErrClosed) {
		t.Fatalf("append after Close: %v", err)
	}
}

// gatedBucket holds every Put until the gate opens; held counts the Puts waiting.
type gatedBucket struct {
	storage.Bucket
	gate chan struct{}
	held atomic.Int64
}

func (g *gatedBucket) Put(ctx context.Context, key string, body []byte, c storage.Condition) (string, error) {
	g.held.Add(1)
	<-g.gate
	g.held.Add(-1)
	return g.Bucket.Put(ctx, key, body, c)
}

// With every PUT slot busy on a stalled store, appends without waiting fill one batch up to
// MaxBatchBytes and then wait: the batch does not grow without bound. When the store answers,
// everything is written.
func TestObjectLogBackpressure(t *testing.T) {
	g := &gatedBucket{Bucket: dirBucket(t), gate: make(chan struct{})}
	const maxBatch = 4 << 10
	l, err := OpenObjectLog(context.Background(), ObjectLogOptions{Bucket: g, Prefix: "wal/bp_1", MaxInFlight: 1, MaxBatchBytes: maxBatch})
	if err != nil {
		t.Fatal(err)
	}
	var appended atomic.Int64
	done := make(chan error, 1)
	go func() {
		var last uint64
		for i := range 1000 {
			seq, err := l.AppendNoWait(testEdit("r", i))
			if err != nil {
				done <- err
				return
			}
			last = seq
			appended.Add(1)
		}
		done <- l.WaitDurable(last)
	}()
	// One batch goes to the stalled PUT, the next fills to the limit; then the appender waits.
	// (A full batch seen before the PUT holds one may be the first, about to be handed over.)
	deadline := time.Now().Add(10 * time.Second)
	for {
		l.mu.Lock()
		full := len(l.cur) >= maxBatch
		l.mu.Unlock()
		if full && g.held.Load() > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the batch never filled")
		}
		time.Sleep(time.Millisecond) // polling the appender's progress
	}
	n := appended.Load()
	// It stays blocked: watching for a while shows no progress and a bounded batch.
	for range 20 {
		time.Sleep(time.Millisecond) // observing that nothing moves
		l.mu.Lock()
		size := len(l.cur)
		l.mu.Unlock()
		if size > maxBatch+1024 {
			t.Fatalf("the batch grew to %d bytes past its %d limit", size, maxBatch)
		}
	}
	// (The append that filled the batch may be counted only after n was read.)
	if appended.Load() > n+1 || n >= 1000 {
		t.Fatalf("appends went on while the store stalled: %d then %d", n, appended.Load())
	}
	close(g.gate)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	l.Close()
	if got := readLog(t, g.Bucket, "wal/bp_1"); len(got) != 1000 {
		t.Fatalf("read %d edits, want 1000", len(got))
	}
}

// MarkFlushed deletes the objects whose regions all flushed past their edits; what stays reads
// back; a SKIP_WAL id (NextSeq) is durable at once when nothing is pending; fencing a log with
// deleted objects writes markers only around its top, not into the holes.
func TestObjectLogMarkFlushedAndNextSeq(t *testing.T) {
	b := dirBucket(t)
	l := openLog(t, b, "wal/flushed_1", 1)
	var lastA, lastB uint64
	for i := range 100 {
		region := "a"
		if i%10 == 9 {
			region = "b"
		}
		e := testEdit(region, i)
		seq, err := l.Append(e) // one at a time: one object per edit
		if err != nil {
			t.Fatal(err)
		}
		if region == "a" {
			lastA = seq
		} else {
			lastB = seq
		}
	}
	if st := l.Stats(); st.Puts != 100 {
		t.Fatalf("%d objects for 100 sequential appends", st.Puts)
	}
	seq, err := l.NextSeq()
	if err != nil || seq != lastA+1 && seq != lastB+1 {
		t.Fatalf("NextSeq: %d %v", seq, err)
	}
	done := make(chan error, 1)
	go func() { done <- l.WaitDurable(seq) }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a NextSeq id never became durable on an idle log")
	}
	// The backlog: 100 objects kept, the oldest (edit 0) pinned by region a.
	if units, pin := l.Backlog(); units != 100 || len(pin) != 1 || pin[0] != "a" {
		t.Fatalf("backlog %d objects pinned by %v, want 100 by [a]", units, pin)
	}
	if err := l.MarkFlushed("a", lastA); err != nil {
		t.Fatal(err)
	}
	if err := l.DropFlushed(); err != nil { // (the background's deletes, now)
		t.Fatal(err)
	}
	if units, pin := l.Backlog(); units != 10 || len(pin) != 1 || pin[0] != "b" {
		t.Fatalf("after region a flushed: backlog %d objects pinned by %v, want 10 by [b]", units, pin)
	}
	if got := readLog(t, b, "wal/flushed_1"); len(got) != 10 || string(got[0].Region) != "b" {
		t.Fatalf("after region a flushed, %d edits remain (want region b's 10)", len(got))
	}
	if err := l.MarkFlushed("b", lastB-1); err != nil {
		t.Fatal(err)
	}
	if err := l.DropFlushed(); err != nil {
		t.Fatal(err)
	}
	if got := readLog(t, b, "wal/flushed_1"); len(got) != 1 {
		t.Fatalf("after region b flushed all but its last edit, %d remain", len(got))
	}
	if st := l.Stats(); st.Deleted != 99 {
		t.Fatalf("%d objects deleted, want 99", st.Deleted)
	}
	highest, err := FenceObjectLog(context.Background(), b, "wal/flushed_1", "test")
	if err != nil {
		t.Fatal(err)
	}
	objs, err := b.List(context.Background(), "wal/flushed_1/", "", 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(objs) > 2*MaxFenceWindow+1 || highest != 100+MaxFenceWindow {
		t.Fatalf("fence wrote %d objects up to %d: markers went into the deleted holes", len(objs), highest)
	}
	if _, err := l.Append(testEdit("a", 1000)); !errors.Is(err, ErrFenced) {
		t.Fatalf("append after the fence: %v", err)
	}
}

// An idle writer learns it was fenced by asking (Fenced); deleting the fenced log after its split
// keeps the markers, so the writer, waking, still cannot acknowledge anything.
func TestObjectLogFencedAndDeleted(t *testing.T) {
	b := dirBucket(t)
	ctx := context.Background()
	l := openLog(t, b, "wal/idle_1", 2)
	for i := range 5 {
		if _, err := l.Append(testEdit("r", i)); err != nil {
			t.Fatal(err)
		}
	}
	if fenced, err := l.Fenced(ctx); err != nil || fenced {
		t.Fatalf("before the fence: fenced=%v err=%v", fenced, err)
	}
	if _, err := FenceObjectLog(ctx, b, "wal/idle_1", "master"); err != nil {
		t.Fatal(err)
	}
	if fenced, err := l.Fenced(ctx); err != nil || !fenced {
		t.Fatalf("after the fence: fenced=%v err=%v", fenced, err)
	}
	if err := DeleteObjectLog(ctx, b, "wal/idle_1"); err != nil {
		t.Fatal(err)
	}
	if got := readLog(t, b, "wal/idle_1"); len(got) != 0 {
		t.Fatalf("%d edits left after the delete", len(got))
	}
	if _, err := l.Append(testEdit("r", 99)); !errors.Is(err, ErrFenced) {
		t.Fatalf("the writer after its log was deleted: %v, want ErrFenced", err)
	}
	// Fencing a fenced log again (a master that takes over fences every earlier log) adds nothing.
	before, _ := b.List(ctx, "wal/idle_1/", "", 0)
	if _, err := FenceObjectLog(ctx, b, "wal/idle_1", "next master"); err != nil {
		t.Fatal(err)
	}
	if after, _ := b.List(ctx, "wal/idle_1/", "", 0); len(after) != len(before) {
		t.Fatalf("fencing again wrote %d more markers", len(after)-len(before))
	}
	// Also a log fenced by a release that recorded no completion: its markers show it fenced.
	if err := b.Delete(ctx, fencedKey("wal/idle_1")); err != nil {
		t.Fatal(err)
	}
	if _, err := FenceObjectLog(ctx, b, "wal/idle_1", "a third master"); err != nil {
		t.Fatal(err)
	}
	if after, _ := b.List(ctx, "wal/idle_1/", "", 0); len(after) != len(before) {
		t.Fatalf("fencing a log fenced without a completion record wrote %d more markers", len(after)-len(before))
	}
	if _, ok, err := readFenced(ctx, b, "wal/idle_1"); err != nil || !ok {
		t.Fatalf("the completion is recorded once seen: %v, %v", ok, err)
	}
}

// readHook runs a function once before the first Get or Stat of a key.
type readHook struct {
	storage.Bucket
	key  string
	once sync.Once
	fn   func()
}

func (h *readHook) before(key string) {
	if key == h.key {
		h.once.Do(h.fn)
	}
}

func (h *readHook) Get(ctx context.Context, key string) ([]byte, storage.ObjectInfo, error) {
	h.before(key)
	return h.Bucket.Get(ctx, key)
}

func (h *readHook) Stat(ctx context.Context, key string) (storage.ObjectInfo, error) {
	h.before(key)
	return h.Bucket.Stat(ctx, key)
}

// A busy writer's own object at the number Fenced looks at (a commit issued and written it
// between Fenced's read of the number and its request) is not a fence: taking it for one made a
// region server under load drop every region and register again.
func TestObjectLogFencedIgnoresItsOwnNextObject(t *testing.T) {
	h := &readHook{Bucket: dirBucket(t)}
	l := openLog(t, h, "wal/busy_1", 1)
	for i := range 3 {
		if _, err := l.Append(testEdit("r", i)); err != nil {
			t.Fatal(err)
		}
	}
	h.key = objectKey("wal/busy_1", 4) // the number Fenced checks next
	h.fn = func() {
		if _, err := l.Append(testEdit("r", 3)); err != nil { // writes object 4
			t.Error(err)
		}
	}
	if fenced, err := l.Fenced(context.Background()); err != nil || fenced {
		t.Fatalf("a busy, unfenced writer: fenced=%v err=%v", fenced, err)
	}
	if _, err := FenceObjectLog(context.Background(), h, "wal/busy_1", "master"); err != nil {
		t.Fatal(err)
	}
	if fenced, err := l.Fenced(context.Background()); err != nil || !fenced {
		t.Fatalf("after the fence: fenced=%v err=%v", fenced, err)
	}
}

// slowList makes every listing slow, as listing a large directory bucket is (it reads the whole
// directory): the fencer's rounds then take far longer than the writer needs for 64 objects.
type slowList struct {
	storage.Bucket
	delay time.Duration
}

func (s slowList) List(ctx context.Context, prefix, after string, limit int) ([]storage.ObjectInfo, error) {
	time.Sleep(s.delay) // the injected slowness, not a synchronisation
	return s.Bucket.List(ctx, prefix, after, limit)
}

// A writer much faster than the fencer's rounds is still fenced: each round that finds the writer
// past its markers covers twice as many numbers above the highest object. (With a fixed window a
// writer on a directory bucket under load outran every round and the fence never ended: make test
// hung in TestSplitObjectLog with 660,000 objects in the directory.)
func TestFenceCatchesAFastWriter(t *testing.T) {
	b := dirBucket(t)
	const prefix = "wal/fast_1"
	l := openLog(t, b, prefix, 4)
	var wg sync.WaitGroup
	started := make(chan struct{})
	var once sync.Once
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 20000; i++ { // bounded; the fence must stop it long before
				if i == 20 {
					once.Do(func() { close(started) })
				}
				if _, err := l.Append(testEdit(fmt.Sprintf("r%d", g), i)); err != nil {
					return
				}
			}
		}()
	}
	<-started
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	top, err := FenceObjectLog(ctx, slowList{Bucket: b, delay: 10 * time.Millisecond}, prefix, "master")
	if err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	if err := l.Err(); !errors.Is(err, ErrFenced) {
		t.Fatalf("the writer ended with %v, want ErrFenced", err)
	}
	above, err := b.List(ctx, prefix+"/", objectKey(prefix, top), 0)
	above = slices.DeleteFunc(above, func(o storage.ObjectInfo) bool { _, ok := parseObjectKey(prefix, o.Key); return !ok })
	if err != nil || len(above) != 0 {
		t.Fatalf("%d objects above the top marker %d: %v", len(above), top, err)
	}
}

// TestSlowCommitsAreReported: a PUT the store answers late is reported (its object, bytes,
// time), one answered at once is not; the directory WAL reports its syncs the same way.
func TestSlowCommitsAreReported(t *testing.T) {
	t.Run("object log", func(t *testing.T) {
		b, proxy := minioBucket(t, "slowcommit")
		var mu sync.Mutex
		var slow []SlowCommit
		l, err := OpenObjectLog(context.Background(), ObjectLogOptions{Bucket: b, Prefix: "wal/slow_1", Writer: "test",
			SlowCommit: time.Second, Slow: func(c SlowCommit) { mu.Lock(); slow = append(slow, c); mu.Unlock() }})
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		if _, err := l.Append(testEdit("r", 1)); err != nil {
			t.Fatal(err)
		}
		// (A threshold well above an undelayed PUT on a loaded machine, so that only the delayed
		// one can be reported.)
		proxy.Inject(s3test.Delay, "PUT", 1, 1500*time.Millisecond)
		if _, err := l.Append(testEdit("r", 2)); err != nil {
			t.Fatal(err)
		}
		mu.Lock()
		defer mu.Unlock()
		if len(slow) != 1 || !strings.HasPrefix(slow[0].Log, "wal/slow_1/") || slow[0].Took < 1500*time.Millisecond || slow[0].Bytes == 0 || slow[0].Err != nil {
			t.Fatalf("slow commits reported: %+v; want the one delayed PUT", slow)
		}
	})
	t.Run("directory", func(t *testing.T) {
		var slow []SlowCommit
		w, err := Open(Options{FS: storage.NewMem(), Dir: "wal/rs1", SlowCommit: time.Nanosecond, Slow: func(c SlowCommit) { slow = append(slow, c) }})
		if err != nil {
			t.Fatal(err)
		}
		defer w.Close()
		if _, err := w.Append(testEdit("r", 1), SyncWAL); err != nil {
			t.Fatal(err)
		}
		if len(slow) != 1 || !strings.HasPrefix(slow[0].Log, "wal/rs1/") || slow[0].Bytes == 0 {
			t.Fatalf("slow commits reported: %+v; want the sync (threshold 1 ns)", slow)
		}
	})
}

// TestMarkFlushedDoesNotWaitForDeletes: the objects a flush frees are deleted in the background
// (a region's close must not wait for a store's DELETEs): MarkFlushed returns while the store
// still holds the delete (one DeleteObjects, a POST, for the 5 objects), and the objects go soon
// after; Close deletes what is left.
func TestMarkFlushedDoesNotWaitForDeletes(t *testing.T) {
	b, proxy := minioBucket(t, "markflushed")
	l := openLog(t, b, "wal/drop_1", 1)
	for i := range 5 {
		if _, err := l.Append(testEdit("a", i)); err != nil {
			t.Fatal(err)
		}
	}
	proxy.Inject(s3test.Delay, "POST", 1, time.Second)
	if err := l.MarkFlushed("a", l.LastSeq()); err != nil {
		t.Fatal(err)
	}
	if d := l.Stats().Deleted; d != 0 {
		t.Fatalf("MarkFlushed returned after %d deletes: it waited for the store", d)
	}
	deadline := time.Now().Add(30 * time.Second)
	for l.Stats().Deleted != 4 {
		if time.Now().After(deadline) {
			t.Fatalf("%d of 4 flushed objects deleted after 30 s (the highest stays while the log is open)", l.Stats().Deleted)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if got := readLog(t, b, "wal/drop_1"); len(got) != 1 {
		t.Fatalf("%d edits left in the log after every object was flushed, want the highest object's", len(got))
	}
	// A close right after a flush leaves nothing flushed behind but the highest object.
	for i := range 3 {
		if _, err := l.Append(testEdit("a", 10+i)); err != nil {
			t.Fatal(err)
		}
	}
	proxy.Inject(s3test.Delay, "POST", 1, 300*time.Millisecond)
	if err := l.MarkFlushed("a", l.LastSeq()); err != nil {
		t.Fatal(err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if got := readLog(t, b, "wal/drop_1"); len(got) != 1 {
		t.Fatalf("%d flushed edits left in the log after Close, want the highest object's", len(got))
	}
}

// slowPuts is a bucket whose PUTs take a while, as an object store's do.
type slowPuts struct {
	storage.Bucket
	delay time.Duration
}

func (s slowPuts) Put(ctx context.Context, key string, body []byte, cond storage.Condition) (string, error) {
	time.Sleep(s.delay) // the store's latency
	return s.Bucket.Put(ctx, key, body, cond)
}

// With a commit delay, writers that take turns at the log's one PUT end up sharing it; a lone
// writer never waits for others; nothing is lost or reordered.
func TestObjectLogCommitDelay(t *testing.T) {
	if _, err := OpenObjectLog(context.Background(), ObjectLogOptions{Bucket: dirBucket(t), Prefix: "wal/x_1",
		CommitDelay: time.Millisecond, MaxInFlight: 2}); err == nil {
		t.Fatal("a commit delay with two PUTs in flight was taken")
	}
	open := func(t *testing.T, b storage.Bucket) *ObjectLog {
		l, err := OpenObjectLog(context.Background(), ObjectLogOptions{Bucket: slowPuts{b, 2 * time.Millisecond},
			Prefix: "wal/d_1", Writer: "test", CommitDelay: 50 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	t.Run("lone writer", func(t *testing.T) {
		l := open(t, dirBucket(t))
		for i := range 30 {
			if _, err := l.Append(testEdit("r", i)); err != nil {
				t.Fatal(err)
			}
		}
		if st := l.Stats(); st.CommitsDelayed+st.CommitDelaysExpired != 0 || st.Puts != 30 {
			t.Fatalf("a lone writer: %+v; want 30 PUTs and none waiting", st)
		}
		if err := l.Close(); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("writers share PUTs", func(t *testing.T) {
		b := dirBucket(t)
		l := open(t, b)
		const writers, each = 8, 60
		appendFrom(t, writers, each, func(e *Edit) error { _, err := l.Append(e); return err })
		// An edit nobody waits for is still written once the writers are done.
		puts := l.Stats().Puts
		if _, err := l.AppendNoWait(testEdit("async", 0)); err != nil {
			t.Fatal(err)
		}
		for deadline := time.Now().Add(10 * time.Second); l.Stats().Puts == puts; {
			if time.Now().After(deadline) {
				t.Fatal("an edit nobody waits for was not written within 10 s")
			}
			time.Sleep(time.Millisecond) // polling the log's PUTs
		}
		st := l.Stats()
		if err := l.Close(); err != nil {
			t.Fatal(err)
		}
		t.Logf("%d appends, %d PUTs, %d commits delayed, %d delays expired", st.Appends, st.Puts, st.CommitsDelayed, st.CommitDelaysExpired)
		// (Without a delay the 8 writers alternate in two groups, about 4 appends per PUT.)
		if st.CommitsDelayed == 0 || st.Puts*5 > writers*each {
			t.Fatalf("%d PUTs for %d appends (%d commits delayed): want at least 5 appends per PUT", st.Puts, writers*each, st.CommitsDelayed)
		}
		got := readLog(t, b, "wal/d_1")
		if len(got) != writers*each+1 {
			t.Fatalf("read back %d edits, want %d", len(got), writers*each+1)
		}
		for i := 1; i < len(got); i++ {
			if got[i].Seq <= got[i-1].Seq {
				t.Fatalf("edits out of order: %d after %d", got[i].Seq, got[i-1].Seq)
			}
		}
	})
}

// A store that is unavailable for a while (throttled past the S3 client's own attempts) delays the
// edits waiting for its PUT, and the log asks again: the edits are acknowledged, in order, and the
// log stays usable. Any other failure, or one that outlasts Timeout, breaks it as before.
func TestObjectLogRetriesAnUnavailableStore(t *testing.T) {
	unavailable := fmt.Errorf("%w: s3: put k: SlowDown", storage.ErrUnavailable)
	conflict := fmt.Errorf("%w: %w: s3: put k: 409", storage.ErrPrecondition, storage.ErrConflict)
	for _, transient := range []error{unavailable, conflict} {
		f := &buckettest.FailingPuts{Bucket: dirBucket(t), Err: transient}
		f.Failures.Store(3)
		l := openLog(t, f, "wal/flaky_1", 1)
		for i := range 5 {
			if _, err := l.Append(testEdit("r", i)); err != nil {
				t.Fatalf("append %d through a store answering %v to three PUTs: %v", i, transient, err)
			}
		}
		if st := l.Stats(); st.PutRetries != 3 || st.Puts != 5 {
			t.Errorf("%v: stats %+v: want 3 PUT retries and 5 objects", transient, st)
		}
		if got := readLog(t, f, "wal/flaky_1"); len(got) != 5 {
			t.Errorf("%v: read back %d edits, want 5", transient, len(got))
		}
	}

	for _, tc := range []struct {
		name    string
		err     error
		n       int64
		timeout time.Duration
	}{
		{"another failure", errors.New("s3: put k: access denied"), 1, 30 * time.Second},
		{"unavailable past the timeout", unavailable, 1 << 30, 300 * time.Millisecond},
		{"a conflict past the timeout", conflict, 1 << 30, 300 * time.Millisecond},
	} {
		f := &buckettest.FailingPuts{Bucket: dirBucket(t), Err: tc.err}
		f.Failures.Store(tc.n)
		l, err := OpenObjectLog(context.Background(), ObjectLogOptions{Bucket: f, Prefix: "wal/broken_1", Writer: "test", Timeout: tc.timeout})
		if err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		if _, err := l.Append(testEdit("r", 0)); err == nil || !errors.Is(err, tc.err) {
			t.Errorf("%s: append answered %v, want the store's failure", tc.name, err)
		}
		if took := time.Since(start); took > tc.timeout+10*time.Second {
			t.Errorf("%s: the append took %v with a timeout of %v", tc.name, took, tc.timeout)
		}
		if _, err := l.Append(testEdit("r", 1)); err == nil {
			t.Errorf("%s: an append after the failure was acknowledged", tc.name)
		} else if !errors.Is(err, ErrBroken) || errors.Is(err, ErrFenced) {
			t.Errorf("%s: the log answered %v, want it broken (a new log is started), not fenced", tc.name, err)
		}
		if tc.name == "another failure" && l.Stats().PutRetries != 0 {
			t.Errorf("%s: retried %d times", tc.name, l.Stats().PutRetries)
		}
		l.Close()
	}
}

// The same through a real S3 server: throttling that outlasts the S3 client's five attempts
// (503 SlowDown twelve times) delays the edits and loses none.
func TestObjectLogThroughThrottlingOnS3(t *testing.T) {
	b, proxy := minioBucket(t, "throttled-wal")
	l := openLog(t, b, "wal/throttled_1", 1)
	if _, err := l.Append(testEdit("r", 0)); err != nil {
		t.Fatal(err)
	}
	proxy.Inject(s3test.SlowDown, "PUT", 12, 0)
	for i := 1; i < 4; i++ {
		if _, err := l.Append(testEdit("r", i)); err != nil {
			t.Fatalf("append %d through twelve SlowDown answers: %v", i, err)
		}
	}
	if st := l.Stats(); st.PutRetries < 2 {
		t.Errorf("stats %+v: the log did not ask again (12 throttled answers, 5 attempts per PUT)", st)
	}
	if got := readLog(t, b, "wal/throttled_1"); len(got) != 4 {
		t.Errorf("read back %d edits, want 4", len(got))
	}
}

// stuckFirst holds the Put of the log's first object until release is closed; other Puts pass.
type stuckFirst struct {
	storage.Bucket
	release chan struct{}
}

func (s *stuckFirst) Put(ctx context.Context, key string, body []byte, c storage.Condition) (string, error) {
	if strings.HasSuffix(key, "00000000000000000001.log") {
		<-s.release
	}
	return s.Bucket.Put(ctx, key, body, c)
}

// While one object is stuck (a store that keeps throttling its PUT, asked again for up to 30 s),
// the PUTs after it in flight go on, but the objects not yet acknowledged never run past half a
// fence window: a fence still covers every one of them.
func TestObjectLogStaysWithinTheFenceWindow(t *testing.T) {
	s := &stuckFirst{Bucket: dirBucket(t), release: make(chan struct{})}
	l := openLog(t, s, "wal/window_1", 8)
	var once sync.Once
	release := func() { once.Do(func() { close(s.release) }) }
	t.Cleanup(release) // before the log's Close, which waits for the stuck PUT
	// One edit at a time, each given up to 50 ms to be taken into an object of its own: a hundred
	// would make a hundred objects if nothing held them back.
	const n = 100
	for i := range n {
		if _, err := l.AppendNoWait(testEdit("r", i)); err != nil {
			t.Fatal(err)
		}
		for wait := time.Now().Add(50 * time.Millisecond); ; time.Sleep(time.Millisecond) {
			l.mu.Lock()
			ahead, waiting := l.gc.issued-l.gc.acked, len(l.cur) > 0
			l.mu.Unlock()
			if ahead > MaxFenceWindow/2 {
				t.Fatalf("%d objects issued past the last acknowledged one, more than %d", ahead, MaxFenceWindow/2)
			}
			if !waiting || time.Now().After(wait) {
				break
			}
		}
	}
	l.mu.Lock()
	ahead := l.gc.issued - l.gc.acked
	l.mu.Unlock()
	if ahead != MaxFenceWindow/2 {
		t.Fatalf("%d objects out behind the stuck one, want the window's %d", ahead, MaxFenceWindow/2)
	}
	release()
	if _, err := l.Append(testEdit("r", n)); err != nil {
		t.Fatal(err)
	}
	if got := readLog(t, s, "wal/window_1"); len(got) != n+1 {
		t.Errorf("read back %d edits, want %d", len(got), n+1)
	}
}

// A fence interrupted after its top marker and most of the others (one PUT failed) leaves a free
// number just above the writer's highest object, below a run of markers. The next fence must
// fill it: it took the run's top for the writer's highest and found the log "fenced before", and
// the writer's next object landed there, acknowledged, where no split reads. Also with only the
// top marker placed.
func TestFenceAfterAnInterruptedFence(t *testing.T) {
	for name, markers := range map[string][2]uint64{"most markers": {6, 69}, "top marker only": {69, 69}} {
		t.Run(name, func(t *testing.T) {
			b := dirBucket(t)
			prefix := "wal/rs_1"
			l := openLog(t, b, prefix, 1)
			for i := range 4 {
				if _, err := l.Append(testEdit("r", i+1)); err != nil {
					t.Fatal(err)
				}
			}
			for n := markers[0]; n <= markers[1]; n++ {
				body := append(appendHeader(nil, kindFence, n), "fenced by m0 nonce 00"...)
				if _, err := b.Put(context.Background(), objectKey(prefix, n), body, storage.Condition{IfNoneMatch: true}); err != nil {
					t.Fatal(err)
				}
			}
			if _, err := FenceObjectLog(context.Background(), b, prefix, "m1"); err != nil {
				t.Fatal(err)
			}
			if _, err := l.Append(testEdit("r", 99)); !errors.Is(err, ErrFenced) {
				t.Fatalf("an append after the second fence: %v, want ErrFenced", err)
			}
			if got := readLog(t, b, prefix); len(got) != 4 {
				t.Fatalf("the fenced log holds %d edits, want the 4 acknowledged", len(got))
			}
		})
	}
}
