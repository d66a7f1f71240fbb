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
// Warn or above in a ring of fixed size. A record with the level and message of one kept replaces
// it, counted: a storm of one warning (a client sending malformed requests, a failing peer)
// takes one place and does not push the other records out.
type Recent struct {
	mu   sync.Mutex
	n    int
	kept []RecentRecord // oldest first
}

// RecentRecord is one kept record.
type RecentRecord struct {
	Time    time.Time // of the last time it was logged
	Level   slog.Level
	Message string
	Attrs   string // of the last time
	Count   int    // how many times it was logged since it was kept
}

// NewRecent keeps the last n records.
func NewRecent(n int) *Recent {
	n = max(n, 1)
	return &Recent{n: n, kept: make([]RecentRecord, 0, n)}
}

// Records returns the kept records, newest first.
func (r *Recent) Records() []RecentRecord {
	if r == nil {
		return nil
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]RecentRecord, 0, len(r.kept))
	for i := len(r.kept) - 1; i >= 0; i-- {
		out = append(out, r.kept[i])
	}
	return out
}

func (r *Recent) keep(rec RecentRecord) {
	r.mu.Lock()
	defer r.mu.Unlock()
	rec.Count = 1
	for i, k := range r.kept {
		if k.Level == rec.Level && k.Message == rec.Message {
			rec.Count = k.Count + 1
			r.kept = append(r.kept[:i], r.kept[i+1:]...)
			break
		}
	}
	if len(r.kept) == r.n {
		r.kept = append(r.kept[:0], r.kept[1:]...)
	}
	r.kept = append(r.kept, rec)
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
