package quota

import (
	"errors"
	"strings"
	"testing"
	"time"

	pb "github.com/cellstore/cellstore/engine/api/cellstore/v1"
)

func TestParseLimit(t *testing.T) {
	good := map[string]Limit{
		"100req/sec":  {100, Requests, time.Second},
		"10M/min":     {10 << 20, Bytes, time.Minute},
		"5K/hour":     {5 << 10, Bytes, time.Hour},
		"1000REQ/DAY": {1000, Requests, 24 * time.Hour},
		" 3G/sec ":    {3 << 30, Bytes, time.Second},
		"7B/sec":      {7, Bytes, time.Second},
	}
	for s, want := range good {
		got, err := ParseLimit(s)
		if err != nil || got != want {
			t.Errorf("ParseLimit(%q) = %+v, %v; want %+v", s, got, err, want)
			continue
		}
		if back, err := ParseLimit(got.String()); err != nil || back != got {
			t.Errorf("%q → %q does not parse back: %v", s, got.String(), err)
		}
	}
	if _, err := ParseLimit("none"); !errors.Is(err, ErrNoLimit) {
		t.Errorf("NONE: %v", err)
	}
	for _, s := range []string{"", "100", "req/sec", "100req", "100req/week", "-5req/sec", "0req/sec", "10X/sec", "99999999999999999P/sec"} {
		if _, err := ParseLimit(s); err == nil || errors.Is(err, ErrNoLimit) {
			t.Errorf("ParseLimit(%q) accepted", s)
		} else if !strings.Contains(err.Error(), s) {
			t.Errorf("error for %q does not quote the input: %v", s, err)
		}
	}
}

func TestThrottleType(t *testing.T) {
	req, _ := ParseLimit("10req/sec")
	size, _ := ParseLimit("10M/sec")
	cases := []struct {
		tt   string
		l    Limit
		want pb.ThrottleType
	}{
		{"", req, pb.ThrottleType_THROTTLE_TYPE_REQUEST_NUMBER},
		{"", size, pb.ThrottleType_THROTTLE_TYPE_REQUEST_SIZE},
		{"READ", req, pb.ThrottleType_THROTTLE_TYPE_READ_NUMBER},
		{"write", size, pb.ThrottleType_THROTTLE_TYPE_WRITE_SIZE},
	}
	for _, c := range cases {
		if got, err := ThrottleType(c.tt, c.l); err != nil || got != c.want {
			t.Errorf("ThrottleType(%q, %v) = %v, %v", c.tt, c.l, got, err)
		}
	}
	if _, err := ThrottleType("SCAN", req); err == nil {
		t.Error("THROTTLE_TYPE SCAN accepted")
	}
}

type clock struct{ now time.Time }

func (c *clock) Now() time.Time { return c.now }

func userQuota(user, limit, throttleType string) *pb.Quota {
	l, err := ParseLimit(limit)
	if err != nil {
		panic(err)
	}
	tt, err := ThrottleType(throttleType, l)
	if err != nil {
		panic(err)
	}
	q := ToProto(l, tt)
	q.Subject = &pb.Quota_User{User: user}
	return q
}

// run offers a request every step for d and counts the admitted ones.
func run(l *Limiters, c *clock, r Request, step, d time.Duration) (admitted int) {
	for end := c.now.Add(d); c.now.Before(end); c.now = c.now.Add(step) {
		if l.Check(r) == nil {
			admitted++
		}
	}
	return admitted
}

func TestUserThrottledOthersNot(t *testing.T) {
	c := &clock{now: time.Unix(0, 0)}
	l := NewLimiters(c.Now)
	if err := l.Update(1, true, []*pb.Quota{userQuota("alice", "100req/sec", "")}, nil); err != nil {
		t.Fatal(err)
	}
	got := run(l, c, Request{User: "alice", Table: "default:t"}, time.Millisecond, 10*time.Second)
	if rate := float64(got) / 10; rate < 85 || rate > 115 {
		t.Errorf("alice got %.1f req/s, want 100 ± 15", rate)
	}
	if got := run(l, c, Request{User: "bob"}, time.Millisecond, time.Second); got != 1000 {
		t.Errorf("bob (no quota) admitted %d of 1000", got)
	}
	th := l.Check(Request{User: "alice"})
	for th == nil {
		th = l.Check(Request{User: "alice"})
	}
	if th.RetryAfter <= 0 || th.RetryAfter > 20*time.Millisecond || th.Subject != "user=alice" {
		t.Errorf("throttle answer %+v: want retry-after about 10 ms for user=alice", th)
	}
	c.now = c.now.Add(th.RetryAfter)
	if l.Check(Request{User: "alice"}) != nil {
		t.Error("still throttled after waiting the retry-after")
	}
	if l.ThrottledCounts()["user=alice"] == 0 {
		t.Error("throttled requests not counted")
	}
}

func TestUpdateChangeRemoveDisable(t *testing.T) {
	c := &clock{now: time.Unix(0, 0)}
	l := NewLimiters(c.Now)
	_ = l.Update(1, true, []*pb.Quota{userQuota("u", "10req/sec", "")}, nil)
	for l.Check(Request{User: "u"}) == nil {
	}
	// The same quota again (a refresh) keeps the empty bucket: no free burst.
	_ = l.Update(2, true, []*pb.Quota{userQuota("u", "10req/sec", "")}, nil)
	if l.Check(Request{User: "u"}) == nil {
		t.Error("a refresh of an unchanged quota refilled the bucket")
	}
	// An older version is ignored.
	_ = l.Update(1, true, nil, nil)
	if l.Check(Request{User: "u"}) == nil {
		t.Error("an older quota version replaced a newer one")
	}
	// Raised limit takes effect at once.
	_ = l.Update(3, true, []*pb.Quota{userQuota("u", "1000req/sec", "")}, nil)
	if got := run(l, c, Request{User: "u"}, time.Millisecond, time.Second); got < 900 {
		t.Errorf("after raising the limit: %d/s", got)
	}
	// Removed.
	_ = l.Update(4, true, nil, nil)
	if got := run(l, c, Request{User: "u"}, 100*time.Microsecond, 100*time.Millisecond); got != 1000 {
		t.Errorf("after removal %d of 1000 admitted", got)
	}
	// Disabled cluster-wide.
	_ = l.Update(5, false, []*pb.Quota{userQuota("u", "1req/day", "")}, nil)
	if got := run(l, c, Request{User: "u"}, time.Millisecond, 100*time.Millisecond); got != 100 {
		t.Errorf("quotas off: %d of 100 admitted", got)
	}
}

func TestReadWriteTypesSizesAndShares(t *testing.T) {
	c := &clock{now: time.Unix(0, 0)}
	l := NewLimiters(c.Now)
	table := userQuota("", "2K/sec", "WRITE")
	table.Subject = &pb.Quota_Table{Table: &pb.TableName{Namespace: "default", Name: "t"}}
	reads := userQuota("r", "10K/sec", "READ")
	_ = l.Update(1, true, []*pb.Quota{table, reads, userQuota("w", "10req/sec", "WRITE")}, func(kind, name string) float64 {
		if kind == SubjectTable {
			return 0.5 // half of the table's regions are here
		}
		return 1
	})
	// Writes of 100 bytes to t: 1 KiB/s here (half of 2K) → about 10 writes/s.
	got := run(l, c, Request{Table: "default:t", Write: true, Size: 100}, time.Millisecond, 10*time.Second)
	if rate := float64(got) / 10; rate < 9 || rate > 12 {
		t.Errorf("table write size quota: %.1f writes/s, want about 10", rate)
	}
	// Reads of t are not limited by a WRITE quota.
	if got := run(l, c, Request{Table: "default:t", Size: 100}, time.Millisecond, 100*time.Millisecond); got != 100 {
		t.Errorf("reads throttled by a write quota: %d of 100", got)
	}
	// A user's WRITE number quota does not limit its reads.
	if got := run(l, c, Request{User: "w"}, time.Millisecond, 100*time.Millisecond); got != 100 {
		t.Errorf("reads of w throttled by a write quota: %d of 100", got)
	}
	// Read size is charged after the read: a 50 KiB read puts r in debt for about 4 s.
	if l.Check(Request{User: "r"}) != nil {
		t.Fatal("first read of r throttled")
	}
	l.Charge(Request{User: "r"}, 50<<10)
	th := l.Check(Request{User: "r"})
	if th == nil || th.RetryAfter < 3*time.Second {
		t.Errorf("after a 50 KiB read on a 10K/sec quota: %+v, want a wait of about 4 s", th)
	}
}

func FuzzParseLimit(f *testing.F) {
	for _, s := range []string{"100req/sec", "10M/min", "NONE", "", "1P/day", "5/sec"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		l, err := ParseLimit(s)
		if err == nil && (l.Amount <= 0 || l.Per <= 0) {
			t.Fatalf("ParseLimit(%q) = %+v without error", s, l)
		}
	})
}
