package client

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	pb "github.com/cellstore/cellstore/engine/api/cellstore/v1"
)

// waitFor polls cond until it holds or the deadline passes.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

func mput(i int) *Mutation {
	return NewPut(fmt.Appendf(nil, "row-%03d", i)).Add("f", "q", 1, fmt.Appendf(nil, "v%d", i))
}

func TestBufferedMutatorSendsFullBatchesAndFlushesTheRest(t *testing.T) {
	_, ss, c := newCluster(t, 1)
	tb := c.Table("t")
	var batches, rows atomic.Int64
	m := tb.BufferedMutator(context.Background(), MutatorOptions{MaxMutations: 10, MaxInFlight: 2,
		OnBatch: func(ms []*Mutation, results []BatchResult, _ time.Time) {
			batches.Add(1)
			rows.Add(int64(len(ms)))
			if len(results) != len(ms) {
				t.Errorf("OnBatch got %d results for %d mutations", len(results), len(ms))
			}
		}})
	// Four writers at once: the mutator is safe for concurrent use.
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w * 25; i < w*25+25; i++ {
				if err := m.Mutate(context.Background(), mput(i)); err != nil {
					t.Errorf("mutate %d: %v", i, err)
				}
			}
		}()
	}
	wg.Wait()
	// 100 mutations at 10 a batch: all ten batches leave without a Flush.
	waitFor(t, "ten batches", func() bool { return batches.Load() == 10 })
	if got := ss[0].multis.Load(); got != 10 {
		t.Errorf("multis = %d, want 10", got)
	}
	if err := m.Mutate(context.Background(), mput(100), mput(101), mput(102)); err != nil {
		t.Fatal(err)
	}
	if got := batches.Load(); got != 10 {
		t.Errorf("a part-filled buffer was sent: %d batches", got)
	}
	if err := m.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	if batches.Load() != 11 || rows.Load() != 103 {
		t.Errorf("after Flush: %d batches of %d rows, want 11 of 103", batches.Load(), rows.Load())
	}
	for i := range 103 {
		if got, want := get(t, tb, fmt.Sprintf("row-%03d", i)), fmt.Sprintf("v%d", i); got != want {
			t.Errorf("row %d = %q, want %q", i, got, want)
		}
	}
	// A byte limit sends too: each of these is over it on its own.
	small := tb.BufferedMutator(context.Background(), MutatorOptions{WriteBufferSize: 1})
	before := ss[0].multis.Load()
	for i := range 3 {
		if err := small.Mutate(context.Background(), mput(200+i)); err != nil {
			t.Fatal(err)
		}
	}
	if err := small.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := ss[0].multis.Load() - before; got != 3 {
		t.Errorf("a 1-byte buffer sent %d batches for 3 mutations, want 3", got)
	}
}

func TestBufferedMutatorBoundsBatchesInFlight(t *testing.T) {
	for _, inFlight := range []int{1, 2} {
		t.Run(fmt.Sprintf("inFlight=%d", inFlight), func(t *testing.T) {
			_, ss, c := newCluster(t, 1)
			gate := hold(ss[0])
			m := c.Table("t").BufferedMutator(context.Background(), MutatorOptions{MaxMutations: 1, MaxInFlight: inFlight})
			// inFlight batches leave; the next mutation fills the buffer and waits there.
			for i := range inFlight + 1 {
				if err := m.Mutate(context.Background(), mput(i)); err != nil {
					t.Fatal(err)
				}
			}
			waitFor(t, "the batches to reach the server", func() bool { return ss[0].inMulti.Load() == int64(inFlight) })
			// Full buffer, every slot taken: Mutate waits for a slot, here until its context ends,
			// and then has taken nothing.
			ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
			err := m.Mutate(ctx, mput(inFlight+1), mput(inFlight+2))
			cancel()
			if !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("Mutate with every batch slot taken = %v, want the context's deadline", err)
			}
			close(gate)
			if err := m.Flush(context.Background()); err != nil {
				t.Fatal(err)
			}
			if got := ss[0].maxInMulti.Load(); got != int64(inFlight) {
				t.Errorf("%d batches were under way at once, want at most %d", got, inFlight)
			}
			for i := range inFlight + 3 {
				want := fmt.Sprintf("v%d", i)
				if i > inFlight {
					want = "" // refused
				}
				if got := get(t, c.Table("t"), fmt.Sprintf("row-%03d", i)); got != want {
					t.Errorf("row %d = %q, want %q", i, got, want)
				}
			}
		})
	}
}

// hold makes the server's multis wait until the returned channel is closed.
func hold(s *fakeServer) chan struct{} {
	gate := make(chan struct{})
	s.mu.Lock()
	s.multiGate = gate
	s.mu.Unlock()
	return gate
}

func TestBufferedMutatorCloseRefusesWaitingWritersAndCanBeRetried(t *testing.T) {
	_, ss, c := newCluster(t, 1)
	gate := hold(ss[0])
	m := c.Table("t").BufferedMutator(context.Background(), MutatorOptions{MaxMutations: 1})
	for i := range 2 { // row 0 under way, row 1 buffered
		if err := m.Mutate(context.Background(), mput(i)); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, "the first batch", func() bool { return ss[0].inMulti.Load() == 1 })
	waiting := make(chan error, 1)
	go func() { waiting <- m.Mutate(context.Background(), mput(2)) }() // waits for a slot
	// Close cannot finish while the server holds the batch: it gives up with its context, and
	// the writer that waited for a slot is refused rather than buffered after Close.
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	err := m.Close(ctx)
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Close while a batch is held = %v, want the context's deadline", err)
	}
	if err := <-waiting; err == nil || errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("a writer waiting when Close began: %v, want a refusal", err)
	}
	if err := m.Mutate(context.Background(), mput(3)); err == nil {
		t.Fatal("Mutate after Close succeeded")
	}
	close(gate)
	if err := m.Close(context.Background()); err != nil { // finishes what the first left
		t.Fatal(err)
	}
	for i, want := range []string{"v0", "v1", "", ""} {
		if got := get(t, c.Table("t"), fmt.Sprintf("row-%03d", i)); got != want {
			t.Errorf("row %d = %q, want %q", i, got, want)
		}
	}
}

func TestBufferedMutatorFlushReturnsUnderConstantWrites(t *testing.T) {
	_, _, c := newCluster(t, 1)
	m := c.Table("t").BufferedMutator(context.Background(), MutatorOptions{MaxMutations: 5, MaxInFlight: 2})
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var written atomic.Int64
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				if err := m.Mutate(context.Background(), mput(w*100000+i)); err != nil {
					t.Error(err)
					return
				}
				written.Add(1)
			}
		}()
	}
	waitFor(t, "some writes", func() bool { return written.Load() > 50 })
	// Flush waits for the batches sent before it, not for the ones writers keep sending.
	for range 5 {
		if err := m.Flush(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	close(stop)
	wg.Wait()
	if err := m.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
}

func TestBufferedMutatorReportsFailuresOnce(t *testing.T) {
	_, ss, c := newCluster(t, 1)
	m := c.Table("t").BufferedMutator(context.Background(), MutatorOptions{MaxMutations: 3})
	ss[0].failNext(1, &pb.ErrorDetail{Code: pb.ErrorCode_ERROR_CODE_INVALID_ARGUMENT, Message: "refused"})
	if err := m.Mutate(context.Background(), mput(1), mput(2), mput(3)); err != nil {
		t.Fatalf("the batch was only sent: %v", err)
	}
	err := m.Flush(context.Background())
	var me *MutationsError
	if !errors.As(err, &me) || len(me.Failed) != 3 {
		t.Fatalf("Flush = %v, want the 3 failed mutations", err)
	}
	if d, ok := pb.DetailOf(err); !ok || d.GetCode() != pb.ErrorCode_ERROR_CODE_INVALID_ARGUMENT {
		t.Errorf("the failures' server error is not reachable through the MutationsError: %v", err)
	}
	if string(me.Failed[0].Mutation.Row) != "row-001" {
		t.Errorf("first failure names row %q", me.Failed[0].Mutation.Row)
	}
	if err := m.Flush(context.Background()); err != nil {
		t.Errorf("a failure was reported twice: %v", err)
	}
	// The next batch goes through.
	if err := m.Mutate(context.Background(), mput(4)); err != nil {
		t.Fatal(err)
	}
	if err := m.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if get(t, c.Table("t"), "row-004") != "v4" {
		t.Error("the mutation after the failure was not written")
	}
	if err := m.Mutate(context.Background(), mput(5)); err == nil {
		t.Error("Mutate after Close succeeded")
	}
	if err := m.Mutate(context.Background(), mput(6), nil); err == nil {
		t.Error("a nil mutation was taken")
	}
}

func TestBufferedMutatorFlushesPeriodically(t *testing.T) {
	_, ss, c := newCluster(t, 1)
	m := c.Table("t").BufferedMutator(context.Background(), MutatorOptions{FlushInterval: 20 * time.Millisecond})
	defer m.Close(context.Background())
	for round := range 2 { // the timer is armed again for a buffer filled after a flush
		if err := m.Mutate(context.Background(), mput(round)); err != nil {
			t.Fatal(err)
		}
		// multis counts a batch when it arrives, before it is applied: wait for the row itself.
		row, want := fmt.Sprintf("row-%03d", round), fmt.Sprintf("v%d", round)
		waitFor(t, "the periodic flush", func() bool { return get(t, c.Table("t"), row) == want })
		if got := ss[0].multis.Load(); got != int64(round+1) {
			t.Errorf("round %d: %d batches sent, want %d", round, got, round+1)
		}
	}
}
