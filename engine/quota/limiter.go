package quota

import (
	"fmt"
	"maps"
	"slices"
	"strings"
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

// resize gives the bucket a new amount per unit (its share of a quota changed) without a burst:
// what it holds carries over, up to the new capacity.
func (b *bucket) resize(amount float64, per time.Duration, now time.Time) {
	b.refill(now)
	b.capacity, b.rate = amount, amount/float64(per)
	b.tokens = min(b.tokens, b.capacity)
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
	if b.tokens >= n && b.capacity > 0 {
		return 0
	}
	if b.rate <= 0 {
		// No share of the quota here (its demand was elsewhere): the next heartbeat brings one.
		return noShareWait
	}
	return time.Duration((n-b.tokens)/b.rate) + time.Millisecond
}

// noShareWait is the retry-after of a request to a server that holds no share of its quota.
const noShareWait = 250 * time.Millisecond

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
	// Count is the operations the request carries (a multi's mutations, a bulk delete's batch),
	// each taken from the number quotas as HBase counts a batch's; 0 counts one.
	Count int
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
// enforces its share of a quota, so that the cluster as a whole gives the quota's rate: the
// master divides each subject's quota among the servers in proportion to the demand they report
// (Demand, Shares, SetShares); a subject with no demand reported anywhere gets the default share
// (Share: an even split, or a table's fraction of regions).
type Limiters struct {
	clock func() time.Time

	active atomic.Bool // quotas enabled and at least one: requests skip the lock when false

	mu           sync.Mutex
	version      uint64
	enabled      bool
	buckets      map[limiterKey]*bucket
	limits       map[limiterKey]Limit // as in the catalog, before shares
	defaultShare Share
	shares       map[string]float64 // from the master (SetShares), by ShareKey
	demand       map[string]*demandCount
	demandSince  time.Time
	throttle     map[string]int64 // throttled requests by subject, for metrics
}

// demandCount is a subject's requests and bytes since the last report, and the smoothed rates
// reported (an exponentially weighted average over heartbeats: demand that moves between servers
// from one second to the next, as a client's requests do, leaves every server it touches a share).
type demandCount struct{ requests, bytes, reqRate, byteRate float64 }

// demandWeight is the weight of the last interval in the reported rates; a subject whose smoothed
// demand falls below minDemand is no longer reported.
const (
	demandWeight = 0.3
	minDemand    = 1e-3
)

// NewLimiters makes an empty set (no quota: everything passes).
func NewLimiters(clock func() time.Time) *Limiters {
	if clock == nil {
		clock = time.Now
	}
	return &Limiters{clock: clock, enabled: true, buckets: map[limiterKey]*bucket{}, limits: map[limiterKey]Limit{},
		throttle: map[string]int64{}, demand: map[string]*demandCount{}, demandSince: clock()}
}

// SubjectID names a quota subject: "user=alice", "table=ns:t", "namespace=ns".
func SubjectID(kind, name string) string { return kind + "=" + name }

// ShareKey is the key of a subject's share for its number quotas (size false) or its size quotas.
func ShareKey(subject string, size bool) string {
	if size {
		return subject + "#b"
	}
	return subject + "#n"
}

// share is this server's share of the quota of k: the master's, else the default.
func (l *Limiters) share(k limiterKey) float64 {
	if f, ok := l.shares[ShareKey(SubjectID(k.kind, k.name), isSize(k.tt))]; ok {
		return max(0, min(f, 1))
	}
	if l.defaultShare == nil {
		return 1
	}
	return max(0, min(l.defaultShare(k.kind, k.name), 1))
}

// applyShares sizes every bucket by its quota and share (under mu).
func (l *Limiters) applyShares(now time.Time) {
	for k, lim := range l.limits {
		amount := float64(lim.Amount) * l.share(k)
		if b := l.buckets[k]; b != nil {
			b.resize(amount, lim.Per, now)
		} else {
			l.buckets[k] = newBucket(amount, lim.Per, now)
		}
	}
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
		limits[k] = lim
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if version != 0 && version < l.version {
		return nil
	}
	l.version, l.enabled, l.defaultShare = version, enabled, share
	for k, lim := range limits {
		if old, ok := l.limits[k]; ok && old != lim {
			delete(l.buckets, k) // a new quota starts with a full bucket
		}
	}
	for k := range l.limits {
		if _, ok := limits[k]; !ok {
			delete(l.buckets, k)
		}
	}
	l.limits = limits
	l.applyShares(l.clock())
	l.active.Store(enabled && len(l.buckets) > 0)
	return nil
}

// SetEnabled turns the quotas in force on or off (the cluster setting quotas_enabled), at once:
// not only with the next change of the quotas.
func (l *Limiters) SetEnabled(enabled bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.enabled = enabled
	l.active.Store(enabled && len(l.buckets) > 0)
}

// SetShares applies the master's shares of the quotas (by ShareKey; subjects not listed get the
// default share). Buckets keep what they hold, up to their new size: a share that grows gives no
// burst.
func (l *Limiters) SetShares(shares map[string]float64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if maps.Equal(shares, l.shares) {
		return
	}
	l.shares = maps.Clone(shares)
	l.applyShares(l.clock())
}

// Shares is a copy of the master's shares in force (by ShareKey).
func (l *Limiters) Shares() map[string]float64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return maps.Clone(l.shares)
}

// Demand reports, per quota subject, the requests (admitted or throttled) and bytes per second
// asked of this server since the last call, for the master's Shares.
func (l *Limiters) Demand() []*pb.QuotaDemand {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.clock()
	secs := now.Sub(l.demandSince).Seconds()
	if secs <= 0 || len(l.demand) == 0 {
		return nil
	}
	l.demandSince = now
	out := make([]*pb.QuotaDemand, 0, len(l.demand))
	for id, d := range l.demand {
		d.reqRate += demandWeight * (d.requests/secs - d.reqRate)
		d.byteRate += demandWeight * (d.bytes/secs - d.byteRate)
		d.requests, d.bytes = 0, 0
		if d.reqRate < minDemand && d.byteRate < minDemand {
			delete(l.demand, id)
			continue
		}
		out = append(out, &pb.QuotaDemand{Subject: id, Requests: d.reqRate, Bytes: d.byteRate})
	}
	slices.SortFunc(out, func(a, b *pb.QuotaDemand) int { return strings.Compare(a.GetSubject(), b.GetSubject()) })
	return out
}

// noteDemand counts a request of a subject with a quota (under mu).
func (l *Limiters) noteDemand(id string, requests, bytes float64) {
	d := l.demand[id]
	if d == nil {
		if len(l.demand) >= maxDemandSubjects {
			return
		}
		d = &demandCount{}
		l.demand[id] = d
	}
	d.requests += requests
	d.bytes += bytes
}

// maxDemandSubjects bounds the subjects whose demand a server counts between heartbeats (only
// subjects with a quota are counted).
const maxDemandSubjects = 1 << 14

// Shares divides each subject's quota among servers in proportion to their demand (by requests
// for number quotas, by bytes for size quotas): a server that asked nothing of a subject others
// asked of gets share 0, and the shares of a subject add up to 1, so that however a tenant's
// requests fall on the servers, the cluster gives its quota, and never more. demand is each live
// server's last report; the answer is each server's shares by ShareKey. Subjects no server asked
// of are left out (the default share applies).
func Shares(demand map[string][]*pb.QuotaDemand) map[string]map[string]float64 {
	type total struct{ requests, bytes float64 }
	totals := map[string]*total{}
	for _, ds := range demand {
		for _, d := range ds {
			t := totals[d.GetSubject()]
			if t == nil {
				t = &total{}
				totals[d.GetSubject()] = t
			}
			t.requests += max(d.GetRequests(), 0)
			t.bytes += max(d.GetBytes(), 0)
		}
	}
	out := make(map[string]map[string]float64, len(demand))
	for server, ds := range demand {
		mine := make(map[string]*pb.QuotaDemand, len(ds))
		for _, d := range ds {
			mine[d.GetSubject()] = d
		}
		shares := make(map[string]float64, len(totals)*2)
		for subject, t := range totals {
			d := mine[subject]
			if t.requests > 0 {
				shares[ShareKey(subject, false)] = max(d.GetRequests(), 0) / t.requests
			}
			if t.bytes > 0 {
				shares[ShareKey(subject, true)] = max(d.GetBytes(), 0) / t.bytes
			}
		}
		out[server] = shares
	}
	return out
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
	ops := float64(max(r.Count, 1))
	for _, subj := range [...]struct{ kind, name string }{{SubjectUser, r.User}, {SubjectTable, r.Table}, {SubjectNamespace, r.Namespace}} {
		if subj.name == "" {
			continue
		}
		counted := false
		for _, tt := range applicable(r.Write) {
			b := l.buckets[limiterKey{subj.kind, subj.name, tt}]
			if b == nil {
				continue
			}
			if !counted { // the request counts in the subject's demand, admitted or not
				counted = true
				l.noteDemand(SubjectID(subj.kind, subj.name), ops, float64(r.Size))
			}
			n := ops
			if isSize(tt) {
				n = float64(r.Size)
				if !r.Write {
					n = 1 // reads are admitted while the bucket is not in debt, and charged later
				}
			}
			if w := b.wait(n, now); w > 0 {
				who := SubjectID(subj.kind, subj.name)
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
		counted := false
		for _, tt := range []pb.ThrottleType{pb.ThrottleType_THROTTLE_TYPE_REQUEST_SIZE, pb.ThrottleType_THROTTLE_TYPE_READ_SIZE} {
			if b := l.buckets[limiterKey{subj.kind, subj.name, tt}]; b != nil {
				b.refill(now)
				b.tokens -= float64(size)
				if !counted {
					counted = true
					l.noteDemand(SubjectID(subj.kind, subj.name), 0, float64(size))
				}
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
