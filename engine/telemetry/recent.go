package telemetry

import (
	"context"
	"log/slog"
	"strings"
	"sync"
	"time"
)

// Recent keeps the last warnings and errors a process logged, for its status page ("recent
// errors"): a slog.Handler in front of the process's own, which keeps a copy of each record at
// Warn or above in a ring of fixed size.
type Recent struct {
	mu   sync.Mutex
	ring []RecentRecord
	next int
	full bool
}

// RecentRecord is one kept record.
type RecentRecord struct {
	Time    time.Time
	Level   slog.Level
	Message string
	Attrs   string
}

// NewRecent keeps the last n records.
func NewRecent(n int) *Recent { return &Recent{ring: make([]RecentRecord, max(n, 1))} }

// Records returns the kept records, newest first.
func (r *Recent) Records() []RecentRecord {
	if r == nil {
		return nil
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	n := r.next
	if r.full {
		n = len(r.ring)
	}
	out := make([]RecentRecord, 0, n)
	for i := 1; i <= n; i++ {
		out = append(out, r.ring[(r.next-i+len(r.ring))%len(r.ring)])
	}
	return out
}

func (r *Recent) keep(rec RecentRecord) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.ring[r.next] = rec
	r.next++
	if r.next == len(r.ring) {
		r.next, r.full = 0, true
	}
}

// Handler wraps h: every record goes to h, and those at Warn or above are also kept.
func (r *Recent) Handler(h slog.Handler) slog.Handler { return &recentHandler{r: r, h: h} }

type recentHandler struct {
	r     *Recent
	h     slog.Handler
	attrs []slog.Attr
	group string
}

func (h *recentHandler) Enabled(ctx context.Context, l slog.Level) bool {
	return l >= slog.LevelWarn || h.h.Enabled(ctx, l)
}

func (h *recentHandler) Handle(ctx context.Context, rec slog.Record) error {
	if rec.Level >= slog.LevelWarn {
		var b strings.Builder
		add := func(a slog.Attr) bool {
			if b.Len() > 0 {
				b.WriteByte(' ')
			}
			if h.group != "" {
				b.WriteString(h.group + ".")
			}
			b.WriteString(a.Key + "=" + a.Value.String())
			return true
		}
		for _, a := range h.attrs {
			add(a)
		}
		rec.Attrs(add)
		h.r.keep(RecentRecord{Time: rec.Time, Level: rec.Level, Message: rec.Message, Attrs: b.String()})
	}
	if h.h.Enabled(ctx, rec.Level) {
		return h.h.Handle(ctx, rec)
	}
	return nil
}

func (h *recentHandler) WithAttrs(as []slog.Attr) slog.Handler {
	return &recentHandler{r: h.r, h: h.h.WithAttrs(as), attrs: append(append([]slog.Attr(nil), h.attrs...), as...), group: h.group}
}

func (h *recentHandler) WithGroup(name string) slog.Handler {
	g := name
	if h.group != "" {
		g = h.group + "." + name
	}
	return &recentHandler{r: h.r, h: h.h.WithGroup(name), attrs: h.attrs, group: g}
}
