package telemetry

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"
	"time"
)

func TestRateLimitedLog(t *testing.T) {
	var buf bytes.Buffer
	now := time.Unix(1000, 0)
	log := slog.New(RateLimited(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}),
		RateLimitOptions{Burst: 3, Period: 10 * time.Second, Now: func() time.Time { return now }}))
	peer := log.With("component", "replication")
	for i := range 1000 {
		peer.Warn("peer unreachable", "attempt", i)
		log.Debug("debug is never limited", "i", i)
	}
	log.Error("another message passes", "x", 1)
	lines := func(s string) int { return strings.Count(buf.String(), s) }
	if n := lines("peer unreachable"); n != 3 {
		t.Fatalf("%d repeated warnings passed, want 3:\n%s", n, buf.String())
	}
	if n := lines("debug is never limited"); n != 1000 {
		t.Errorf("%d debug lines, want 1000", n)
	}
	if lines("another message passes") != 1 {
		t.Error("a different message was limited")
	}
	// After the period the next one passes and says how many were dropped.
	now = now.Add(11 * time.Second)
	peer.Warn("peer unreachable", "attempt", 1000)
	if !strings.Contains(buf.String(), "suppressed=997") {
		t.Fatalf("no suppressed count:\n%s", buf.String()[max(0, buf.Len()-400):])
	}
}
