package telemetry

import (
	"context"
	"log/slog"
	"sync"
	"time"
)

// RateLimitOptions tune RateLimited.
type RateLimitOptions struct {
	// Burst lines of one message pass per Period; more are counted and dropped. Defaults 10 per
	// 10 s.
	Burst  int
	Period time.Duration
	// MinLevel: lines below it are never limited (debug output is asked for). Default Info.
	MinLevel slog.Level
	// Now is the clock (tests). Default time.Now.
	Now func() time.Time
}

// maxRateKeys bounds the messages tracked at once; past it the table starts afresh.
const maxRateKeys = 4096

// RateLimited wraps h so that a repeated log line (the same level and message, whatever its
// attributes) passes at most Burst times per Period: a failing peer or a storm of one error
// cannot flood the log. The first line after a period in which lines were dropped carries
// suppressed=N, the number dropped.
func RateLimited(h slog.Handler, o RateLimitOptions) slog.Handler {
	if o.Burst <= 0 {
		o.Burst = 10
	}
	if o.Period <= 0 {
		o.Period = 10 * time.Second
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	return &rateLimited{next: h, st: &rateState{opts: o, keys: map[rateKey]*rateEntry{}}}
}

type rateKey struct {
	level slog.Level
	msg   string
}

type rateEntry struct {
	start      time.Time
	n          int
	suppressed int
}

type rateState struct {
	opts RateLimitOptions
	mu   sync.Mutex
	keys map[rateKey]*rateEntry
}

type rateLimited struct {
	next slog.Handler
	st   *rateState
}

func (r *rateLimited) Enabled(ctx context.Context, l slog.Level) bool { return r.next.Enabled(ctx, l) }

func (r *rateLimited) Handle(ctx context.Context, rec slog.Record) error {
	if rec.Level < r.st.opts.MinLevel {
		return r.next.Handle(ctx, rec)
	}
	dropped, pass := r.st.admit(rateKey{rec.Level, rec.Message})
	if !pass {
		return nil
	}
	if dropped > 0 {
		rec = rec.Clone()
		rec.AddAttrs(slog.Int("suppressed", dropped))
	}
	return r.next.Handle(ctx, rec)
}

// admit says whether a line of key passes, and how many of its lines were dropped before it.
func (s *rateState) admit(k rateKey) (dropped int, pass bool) {
	now := s.opts.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	e := s.keys[k]
	if e == nil {
		if len(s.keys) >= maxRateKeys {
			s.keys = map[rateKey]*rateEntry{}
		}
		e = &rateEntry{start: now}
		s.keys[k] = e
	}
	if now.Sub(e.start) >= s.opts.Period {
		e.start, e.n = now, 0
	}
	if e.n >= s.opts.Burst {
		e.suppressed++
		return 0, false
	}
	e.n++
	dropped, e.suppressed = e.suppressed, 0
	return dropped, true
}

func (r *rateLimited) WithAttrs(as []slog.Attr) slog.Handler {
	return &rateLimited{next: r.next.WithAttrs(as), st: r.st}
}

func (r *rateLimited) WithGroup(name string) slog.Handler {
	return &rateLimited{next: r.next.WithGroup(name), st: r.st}
}
