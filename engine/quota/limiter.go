package quota

import (
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	pb "github.com/cellstore/cellstore/engine/api/cellstore/v1"
)

// bucket is a token bucket holding up to one time unit's worth of the limit, refilled continuously.
// Tokens may go below zero when a read turns out larger than what it was admitted with: the debt
// delays the next requests.
type bucket struct {
	capacity float64
	rate     float64 // tokens per nanosecond
	tokens   float64
	last     time.Time
}

func newBucket(amount float64, per time.Duration, now time.Time) *bucket {
	return &bucket{capacity: amount, rate: amount / float64(per), tokens: amount, last: now}
}

func (b *bucket) refill(now time.Time) {
	if now.After(b.last) {
		b.tokens = min(b.capacity, b.tokens+float64(now.Sub(b.last))*b.rate)
		b.last = now
	}
}

// wait is how long until n tokens are available (0: now).
func (b *bucket) wait(n float64, now time.Time) time.Duration {
	b.refill(now)
	n = min(n, b.capacity) // a request larger than the whole bucket waits for a full bucket
	if b.tokens >= n {
		return 0
	}
	return time.Duration((n-b.tokens)/b.rate) + time.Millisecond
}

// Subject kinds a quota applies to.
const (
	SubjectUser      = "user"
	SubjectTable     = "table"
	SubjectNamespace = "namespace"
)

type limiterKey struct {
	kind, name string
	tt         pb.ThrottleType
}

// Request describes a request for the check.
type Request struct {
	User      string
	Table     string // namespace:name
	Namespace string
	Write     bool
	// Size is the bytes a write carries. Reads are charged their size afterwards (Charge).
	Size int64
}

// Throttled is the answer to a request over quota.
type Throttled struct {
	Subject    string // e.g. user=alice
	Type       pb.ThrottleType
	RetryAfter time.Duration
}

func (t *Throttled) Error() string {
	return fmt.Sprintf("throttled by the %s quota of %s: retry after %v", t.Type, t.Subject, t.RetryAfter)
}

// Limiters holds a region server's token buckets for the quotas in the catalog. Each server
// enforces its share of a quota (Share), so a cluster as a whole gives about the quota's rate.
type Limiters struct {
	clock func() time.Time

	active atomic.Bool // quotas enabled and at least one: requests skip the lock when false

	mu       sync.Mutex
	version  uint64
	enabled  bool
	buckets  map[limiterKey]*bucket
	limits   map[limiterKey]Limit
	throttle map[string]int64 // throttled requests by subject, for metrics
}

// NewLimiters makes an empty set (no quota: everything passes).
func NewLimiters(clock func() time.Time) *Limiters {
	if clock == nil {
		clock = time.Now
	}
	return &Limiters{clock: clock, enabled: true, buckets: map[limiterKey]*bucket{}, limits: map[limiterKey]Limit{}, throttle: map[string]int64{}}
}

// Share is the fraction of a quota this server enforces: for users and namespaces 1/servers, for a
// table the fraction of the table's regions it serves.
type Share func(kind, name string) float64

// Update replaces the quotas with the catalog's list (version orders updates; older ones are
// ignored). Buckets of unchanged quotas keep their state, so a refresh does not grant a burst.
func (l *Limiters) Update(version uint64, enabled bool, quotas []*pb.Quota, share Share) error {
	limits := map[limiterKey]Limit{}
	for _, q := range quotas {
		lim, err := FromProto(q)
		if err != nil {
			return err
		}
		var k limiterKey
		switch s := q.GetSubject().(type) {
		case *pb.Quota_User:
			k = limiterKey{SubjectUser, s.User, q.GetType()}
		case *pb.Quota_Table:
			k = limiterKey{SubjectTable, s.Table.GetNamespace() + ":" + s.Table.GetName(), q.GetType()}
		case *pb.Quota_Namespace:
			k = limiterKey{SubjectNamespace, s.Namespace, q.GetType()}
		default:
			return fmt.Errorf("quota: a quota without user, table or namespace")
		}
		f := 1.0
		if share != nil {
			f = share(k.kind, k.name)
		}
		if f <= 0 {
			continue // nothing of it is served here
		}
		lim.Amount = max(1, int64(float64(lim.Amount)*min(f, 1)))
		limits[k] = lim
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if version != 0 && version < l.version {
		return nil
	}
	l.version, l.enabled = version, enabled
	now := l.clock()
	for k, lim := range limits {
		if old, ok := l.limits[k]; !ok || old != lim {
			l.buckets[k] = newBucket(float64(lim.Amount), lim.Per, now)
		}
	}
	for k := range l.limits {
		if _, ok := limits[k]; !ok {
			delete(l.buckets, k)
		}
	}
	l.limits = limits
	l.active.Store(enabled && len(l.buckets) > 0)
	return nil
}

// Version is the version of the quotas in force.
func (l *Limiters) Version() uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.version
}

// Check admits a request or says how long to wait. An admitted request has taken its tokens from
// every bucket that applies (user, table, namespace; number and, for writes, size).
func (l *Limiters) Check(r Request) *Throttled {
	if !l.active.Load() {
		return nil
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.enabled || len(l.buckets) == 0 {
		return nil
	}
	now := l.clock()
	type take struct {
		b *bucket
		n float64
	}
	var takes []take
	for _, subj := range [...]struct{ kind, name string }{{SubjectUser, r.User}, {SubjectTable, r.Table}, {SubjectNamespace, r.Namespace}} {
		if subj.name == "" {
			continue
		}
		for _, tt := range applicable(r.Write) {
			b := l.buckets[limiterKey{subj.kind, subj.name, tt}]
			if b == nil {
				continue
			}
			n := 1.0
			if isSize(tt) {
				n = float64(r.Size)
				if !r.Write {
					n = 1 // reads are admitted while the bucket is not in debt, and charged later
				}
			}
			if w := b.wait(n, now); w > 0 {
				who := subj.kind + "=" + subj.name
				l.throttle[who]++
				return &Throttled{Subject: who, Type: tt, RetryAfter: w}
			}
			if !isSize(tt) || r.Write {
				takes = append(takes, take{b, n})
			}
		}
	}
	for _, t := range takes {
		t.b.tokens -= t.n
	}
	return nil
}

// Charge takes a read's actual size from the size buckets once it is known.
func (l *Limiters) Charge(r Request, size int64) {
	if !l.active.Load() || r.Write {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.clock()
	for _, subj := range [...]struct{ kind, name string }{{SubjectUser, r.User}, {SubjectTable, r.Table}, {SubjectNamespace, r.Namespace}} {
		for _, tt := range []pb.ThrottleType{pb.ThrottleType_THROTTLE_TYPE_REQUEST_SIZE, pb.ThrottleType_THROTTLE_TYPE_READ_SIZE} {
			if b := l.buckets[limiterKey{subj.kind, subj.name, tt}]; b != nil {
				b.refill(now)
				b.tokens -= float64(size)
			}
		}
	}
}

// ThrottledCounts returns the number of throttled requests per subject so far.
func (l *Limiters) ThrottledCounts() map[string]int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := make(map[string]int64, len(l.throttle))
	for k, v := range l.throttle {
		out[k] = v
	}
	return out
}

func applicable(write bool) []pb.ThrottleType {
	if write {
		return []pb.ThrottleType{pb.ThrottleType_THROTTLE_TYPE_REQUEST_NUMBER, pb.ThrottleType_THROTTLE_TYPE_REQUEST_SIZE,
			pb.ThrottleType_THROTTLE_TYPE_WRITE_NUMBER, pb.ThrottleType_THROTTLE_TYPE_WRITE_SIZE}
	}
	return []pb.ThrottleType{pb.ThrottleType_THROTTLE_TYPE_REQUEST_NUMBER, pb.ThrottleType_THROTTLE_TYPE_REQUEST_SIZE,
		pb.ThrottleType_THROTTLE_TYPE_READ_NUMBER, pb.ThrottleType_THROTTLE_TYPE_READ_SIZE}
}

func isSize(tt pb.ThrottleType) bool {
	switch tt {
	case pb.ThrottleType_THROTTLE_TYPE_REQUEST_SIZE, pb.ThrottleType_THROTTLE_TYPE_READ_SIZE, pb.ThrottleType_THROTTLE_TYPE_WRITE_SIZE:
		return true
	}
	return false
}
