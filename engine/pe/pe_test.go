package pe

import (
	"bytes"
	"context"
	"fmt"
	"math"
	"sort"
	"strings"
	"testing"
	"time"

	pb "github.com/cellstore/cellstore/engine/api/cellstore/v1"
	"github.com/cellstore/cellstore/engine/client"
)

func TestRowKeysSortLikeNumbers(t *testing.T) {
	keys := []string{string(rowKey(10)), string(rowKey(9)), string(rowKey(100)), string(rowKey(0))}
	sort.Strings(keys)
	want := []string{string(rowKey(0)), string(rowKey(9)), string(rowKey(10)), string(rowKey(100))}
	for i := range want {
		if keys[i] != want[i] {
			t.Fatalf("row keys sort as %q", keys)
		}
	}
}

func TestRunRejectsBadArguments(t *testing.T) {
	c, err := client.New(client.Config{Masters: []string{"127.0.0.1:1"}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for _, tc := range []struct {
		cmd     string
		threads int
		opts    Options
		want    string
	}{
		{"randomReed", 1, Options{Rows: 1}, "unknown command"},
		{"randomRead", 0, Options{Rows: 1}, "threads must be positive"},
		{"randomRead", 1, Options{}, "--rows"},
		{"randomRead", 1, Options{Rows: 1, Rate: -5}, "--rate"},
	} {
		_, err := Run(context.Background(), []*client.Client{c}, tc.cmd, tc.threads, tc.opts)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s/%d: want %q, got %v", tc.cmd, tc.threads, tc.want, err)
		}
	}
}

// TestConnections: HBase PE's connection options — a connection per thread by default, one with
// --oneCon (which wins over --connCount), --connCount otherwise; a negative count is refused.
func TestConnections(t *testing.T) {
	for _, tc := range []struct {
		oneCon             bool
		connCount, threads int
		want               int
	}{
		{false, 0, 4, 4}, {false, 0, 16, 16}, {true, 0, 4, 1}, {true, 3, 4, 1}, {false, 2, 4, 2}, {false, 0, 0, 1},
	} {
		got, err := Connections(tc.oneCon, tc.connCount, tc.threads)
		if err != nil || got != tc.want {
			t.Errorf("Connections(%v, %d, %d) = %d, %v; want %d", tc.oneCon, tc.connCount, tc.threads, got, err, tc.want)
		}
	}
	if _, err := Connections(false, -1, 4); err == nil || !strings.Contains(err.Error(), "--connCount") {
		t.Errorf("a negative --connCount: %v", err)
	}
}

func TestErrorKindsAndReport(t *testing.T) {
	if k := errorKind(&pb.ErrorDetail{Code: pb.ErrorCode_ERROR_CODE_THROTTLED}); k != "THROTTLED" {
		t.Errorf("kind %q", k)
	}
	if k := errorKind(errMissing); k != "MISSING_ROW" {
		t.Errorf("kind %q", k)
	}
	var b bytes.Buffer
	(&Report{Command: "randomRead", Threads: 4, Operations: 10, Rows: 10, Seconds: 1, OpsPerSec: 10, RowsPerSec: 10,
		Errors: map[string]int64{"TIMEOUT": 2}, LatencyUs: Latency{Min: 1, P50: 2, P95: 3, P99: 4, P999: 5, Max: 6}}).Print(&b)
	for _, want := range []string{"randomRead, 4 threads", "p99 4", "errors TIMEOUT: 2"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("report lacks %q:\n%s", want, b.String())
		}
	}
}

// A paced run's operations are due evenly from its start: the n-th at n/rate seconds.
func TestDueAt(t *testing.T) {
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for n, want := range map[int64]time.Duration{0: 0, 1: 250 * time.Microsecond, 4000: time.Second, 6000: 1500 * time.Millisecond} {
		if got := dueAt(start, n, 4000).Sub(start); got != want {
			t.Errorf("operation %d at 4000/s: due after %v, want %v", n, got, want)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if pace(ctx, start.Add(time.Hour*24*365*100)) {
		t.Error("pacing went on after its context ended")
	}
}

// rowKey writes HBase PE's keys without fmt: the same bytes as "%026d".
func TestRowKeyIsHBasePEs(t *testing.T) {
	for _, i := range []int{0, 1, 9, 10, 12345, 99999999, math.MaxInt32, math.MaxInt, -5} {
		if got, want := string(rowKey(i)), fmt.Sprintf("%026d", i); got != want {
			t.Fatalf("row %d: %q, want %q", i, got, want)
		}
	}
}
