package telemetry

import (
	"fmt"
	"html/template"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"
)

// The status page's recent warnings and errors, kept in front of the rate-limited log as the
// servers wrap it: one error, then a client's storm of one warning (malformed frames), which the
// log limits to its burst but the ring sees in full. The error stays, the storm takes one place
// and says how many times it was logged, and the ring keeps its bound.
func TestRecentKeepsAnErrorThroughAStormOfOneWarning(t *testing.T) {
	now := time.Unix(1000, 0)
	recent := NewRecent(50)
	log := slog.New(recent.Handler(RateLimited(slog.NewTextHandler(io.Discard, nil),
		RateLimitOptions{Burst: 10, Period: 10 * time.Second, Now: func() time.Time { return now }})))
	log.Error("the WAL could not be written", "err", "disk full")
	for i := range 100 {
		log.Warn("malformed frame", "conn", i)
	}
	got := recent.Records()
	if len(got) != 2 || got[0].Message != "malformed frame" || got[0].Count != 100 || got[0].Attrs != "conn=99" ||
		got[1].Message != "the WAL could not be written" || got[1].Level != slog.LevelError || got[1].Count != 1 {
		t.Fatalf("records %+v: want the warning (100 times, the last one's attributes), then the error", got)
	}
	// The status pages say how many times.
	page := template.Must(template.New("p").Funcs(PageFuncs()).Parse(PageHead))
	var html strings.Builder
	if err := page.ExecuteTemplate(&html, "tail", got); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(html.String(), "malformed frame <span class=\"muted\">(&times;100)</span>") {
		t.Errorf("the status page's recent records:\n%s", html.String())
	}
	// Distinct messages still go round the ring, newest first: the oldest leave.
	for i := range 60 {
		log.Warn(fmt.Sprint("warning ", i))
	}
	got = recent.Records()
	if len(got) != 50 || got[0].Message != "warning 59" || got[49].Message != "warning 10" {
		t.Fatalf("%d records from %q to %q: want 50, warning 59 to warning 10", len(got), got[0].Message, got[len(got)-1].Message)
	}
}
