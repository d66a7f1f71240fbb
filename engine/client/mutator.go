package client

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"
)

// MutatorOptions configure a BufferedMutator. Zero values take the defaults named.
type MutatorOptions struct {
	// WriteBufferSize sends the buffered mutations as one batch once their size reaches it
	// (HBase's hbase.client.write.buffer; default 2 MiB).
	WriteBufferSize int64
	// MaxMutations sends a batch once this many mutations are buffered (HBase's
	// hbase.client.write.buffer.maxmutations; 0: no limit).
	MaxMutations int
	// MaxInFlight is how many batches may be under way at once (default 1). With one, a batch is
	// sent only once the one before it was answered, so a row's mutations in different batches
	// apply in the order they were given (within a batch the server applies puts and deletes
	// before increments and appends, as it does for any batch). With more, the next batch leaves
	// while the previous one is still under way, which keeps a server busy while the client fills
	// it (HBase's BufferedMutator lets about two buffers be outstanding); a retried batch can then
	// land after a later one, so two mutations of one row in different batches may apply in
	// either order (give them timestamps when that matters).
	MaxInFlight int
	// FlushInterval sends a batch once its first mutation has waited this long, so a trickle of
	// writes does not sit in the buffer (HBase's periodic flush; 0: only when full or flushed).
	FlushInterval time.Duration
	// OnBatch, when set, is called after each batch is answered with its mutations, their
	// results (in the same order) and when it was sent: where a caller counts or times batches.
	// It runs on the goroutine that sent the batch, before the batch counts as answered (Flush
	// and Close wait for it, and it holds the batch's slot), and must neither panic nor call the
	// mutator.
	OnBatch func(ms []*Mutation, results []BatchResult, sent time.Time)
}

// MutationError is what a failed mutation of a BufferedMutator left behind.
type MutationError struct {
	Mutation *Mutation
	Err      error
}

// MutationsError lists the mutations of a BufferedMutator that failed (HBase's
// RetriesExhaustedWithDetailsException): Flush, Close and the next Mutate return it.
type MutationsError struct {
	Failed []MutationError
}

func (e *MutationsError) Error() string {
	if len(e.Failed) == 0 {
		return "client: buffered mutations failed"
	}
	first := e.Failed[0]
	if len(e.Failed) == 1 {
		return fmt.Sprintf("client: a buffered mutation of row %q failed: %v", first.Mutation.Row, first.Err)
	}
	return fmt.Sprintf("client: %d buffered mutations failed; the first, of row %q: %v", len(e.Failed), first.Mutation.Row, first.Err)
}

// Unwrap gives the failures' errors, so errors.Is and errors.As see them.
func (e *MutationsError) Unwrap() []error {
	errs := make([]error, len(e.Failed))
	for i, f := range e.Failed {
		errs[i] = f.Err
	}
	return errs
}

// BufferedMutator collects mutations of one table and sends them in batches in the background
// (HBase's BufferedMutator): Mutate returns at once unless the buffer is full and MaxInFlight
// batches are already under way. Mutations that fail (after the client's retries) are reported
// by the next Mutate, Flush or Close. Safe for concurrent use.
type BufferedMutator struct {
	t    *Table
	ctx  context.Context // the batches' context
	opts MutatorOptions

	mu       sync.Mutex
	cond     *sync.Cond // a batch was answered, the buffer was sent, or the mutator closed
	buf      []*Mutation
	bufSize  int64
	bufSince time.Time // when the buffer's first mutation arrived
	// Batches are numbered as they are sent; pending holds the numbers of those not yet answered.
	sent    uint64
	pending map[uint64]struct{}
	failed  []MutationError
	closed  bool // Close was called: Mutate refuses
	done    bool // Close finished: everything was sent and answered
	timer   *time.Timer
}

// BufferedMutator makes a BufferedMutator for the table. Its batches run under ctx, which should
// live as long as the mutator (cancelling it fails the batches not yet answered), and each batch
// under the client's operation timeout unless ctx has a deadline of its own.
func (t *Table) BufferedMutator(ctx context.Context, opts MutatorOptions) *BufferedMutator {
	if opts.WriteBufferSize <= 0 {
		opts.WriteBufferSize = 2 << 20
	}
	if opts.MaxInFlight <= 0 {
		opts.MaxInFlight = 1
	}
	m := &BufferedMutator{t: t, ctx: ctx, opts: opts, pending: map[uint64]struct{}{}}
	m.cond = sync.NewCond(&m.mu)
	return m
}

// mutationSize estimates what a mutation costs in the buffer and on the wire.
func mutationSize(m *Mutation) int64 {
	n := int64(len(m.Row)) + 64
	for i := range m.Cells {
		c := &m.Cells[i]
		n += int64(len(c.Family)+len(c.Qualifier)+len(c.Value)+len(c.Tags)) + 32
	}
	return n
}

// Mutate buffers mutations, sending a batch whenever the buffer fills. They are checked first and
// buffered all together or not at all: an error other than a *MutationsError means none of them
// was taken. While the buffer is full and MaxInFlight batches are under way it waits (until ctx
// ends) for one to be answered. It returns the failures of earlier batches not yet reported (a
// *MutationsError; the mutations given were taken).
func (m *BufferedMutator) Mutate(ctx context.Context, ms ...*Mutation) error {
	for _, mu := range ms {
		if mu == nil {
			return errors.New("client: nil mutation")
		}
		if err := mu.validate(m.t.c.cfg.MaxCellSize); err != nil {
			return err
		}
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.waitLocked(ctx, "for a buffered batch to be answered", func() bool {
		return !m.fullLocked() || m.freeSlotLocked() || m.closed
	}); err != nil {
		return err
	}
	if m.closed {
		return errors.New("client: buffered mutator is closed")
	}
	if m.fullLocked() {
		m.sendLocked() // a slot is free: the wait above says so
	}
	if len(m.buf) == 0 && len(ms) > 0 {
		m.bufSince = time.Now()
		m.armTimerLocked()
	}
	for _, mu := range ms {
		m.buf = append(m.buf, mu)
		m.bufSize += mutationSize(mu)
	}
	if m.fullLocked() && m.freeSlotLocked() {
		m.sendLocked()
	}
	return m.takeFailedLocked()
}

func (m *BufferedMutator) fullLocked() bool {
	return m.bufSize >= m.opts.WriteBufferSize || m.opts.MaxMutations > 0 && len(m.buf) >= m.opts.MaxMutations
}

func (m *BufferedMutator) freeSlotLocked() bool { return len(m.pending) < m.opts.MaxInFlight }

// waitLocked waits until ready holds (checking on every change), or fails when ctx ends first.
func (m *BufferedMutator) waitLocked(ctx context.Context, what string, ready func() bool) error {
	if ready() {
		return nil
	}
	stop := context.AfterFunc(ctx, func() {
		m.mu.Lock()
		defer m.mu.Unlock()
		m.cond.Broadcast()
	})
	defer stop()
	for !ready() {
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("client: waiting %s: %w", what, err)
		}
		m.cond.Wait()
	}
	return nil
}

// sendLocked sends the buffer as the next batch; a slot must be free.
func (m *BufferedMutator) sendLocked() {
	if len(m.buf) == 0 {
		return
	}
	batch := m.buf
	m.buf, m.bufSize = nil, 0
	if m.timer != nil {
		m.timer.Stop()
	}
	m.sent++
	m.pending[m.sent] = struct{}{}
	go m.run(m.sent, batch)
}

func (m *BufferedMutator) run(n uint64, batch []*Mutation) {
	ops := make([]BatchOp, len(batch))
	for i, mu := range batch {
		ops[i] = BatchOp{Mutation: mu}
	}
	sent := time.Now()
	results := m.t.Batch(m.ctx, ops)
	if m.opts.OnBatch != nil {
		m.opts.OnBatch(batch, results, sent)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	for i, r := range results {
		if r.Err != nil {
			m.failed = append(m.failed, MutationError{Mutation: batch[i], Err: r.Err})
		}
	}
	delete(m.pending, n)
	if m.fullLocked() {
		m.sendLocked() // filled while every slot was taken: it goes in this one
	}
	m.cond.Broadcast()
}

// armTimerLocked starts the periodic flush of a buffer that just got its first mutation.
func (m *BufferedMutator) armTimerLocked() {
	if m.opts.FlushInterval <= 0 || m.closed {
		return
	}
	if m.timer == nil {
		m.timer = time.AfterFunc(m.opts.FlushInterval, m.periodicFlush)
		return
	}
	m.timer.Reset(m.opts.FlushInterval)
}

func (m *BufferedMutator) periodicFlush() {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed || len(m.buf) == 0 {
		return
	}
	if wait := m.opts.FlushInterval - time.Since(m.bufSince); wait > 0 {
		m.timer.Reset(wait) // the buffer was sent and refilled since this timer was set
		return
	}
	if m.freeSlotLocked() {
		m.sendLocked()
		return
	}
	// Every slot is taken: the buffer goes when one is answered, or at the next interval.
	m.timer.Reset(m.opts.FlushInterval)
}

func (m *BufferedMutator) takeFailedLocked() error {
	if len(m.failed) == 0 {
		return nil
	}
	err := &MutationsError{Failed: m.failed}
	m.failed = nil
	return err
}

// Flush sends what is buffered and waits (until ctx ends) until every batch sent before it
// returns was answered, then returns the failures not yet reported. Batches that writers send
// meanwhile are not waited for.
func (m *BufferedMutator) Flush(ctx context.Context) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.flushLocked(ctx)
}

func (m *BufferedMutator) flushLocked(ctx context.Context) error {
	for len(m.buf) > 0 {
		if err := m.waitLocked(ctx, "for a slot to send the buffer", m.freeSlotLocked); err != nil {
			return err
		}
		m.sendLocked()
	}
	through := m.sent
	if err := m.waitLocked(ctx, "for buffered batches to be answered", func() bool { return !m.pendingThrough(through) }); err != nil {
		return err
	}
	return m.takeFailedLocked()
}

// pendingThrough reports whether a batch numbered through or lower is not yet answered.
func (m *BufferedMutator) pendingThrough(through uint64) bool {
	for n := range m.pending {
		if n <= through {
			return true
		}
	}
	return false
}

// Close refuses further mutations, sends what is buffered and waits (until ctx ends) until every
// batch was answered, returning what Flush would. If ctx ends first it returns its error with the
// rest still buffered or under way: call Close again to finish.
func (m *BufferedMutator) Close(ctx context.Context) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.done {
		return m.takeFailedLocked()
	}
	if !m.closed {
		m.closed = true
		if m.timer != nil {
			m.timer.Stop()
		}
		m.cond.Broadcast() // writers waiting for a slot give up
	}
	if err := m.flushLocked(ctx); err != nil {
		var me *MutationsError
		if !errors.As(err, &me) {
			return err
		}
		m.done = true
		return err
	}
	m.done = true
	return nil
}
