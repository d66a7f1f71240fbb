package master

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/cellstore/cellstore/engine/quota"
	"github.com/cellstore/cellstore/operator/api/v1alpha1"
)

// ThrottleType is HBase's throttle type: what a throttle counts.
type ThrottleType string

// Throttle types (HBase's QuotaProtos.ThrottleType).
const (
	RequestNumber ThrottleType = "REQUEST_NUMBER"
	RequestSize   ThrottleType = "REQUEST_SIZE"
	ReadNumber    ThrottleType = "READ_NUMBER"
	ReadSize      ThrottleType = "READ_SIZE"
	WriteNumber   ThrottleType = "WRITE_NUMBER"
	WriteSize     ThrottleType = "WRITE_SIZE"
)

// TimeUnit of a throttle.
type TimeUnit string

// Time units.
const (
	Second TimeUnit = "SECONDS"
	Minute TimeUnit = "MINUTES"
	Hour   TimeUnit = "HOURS"
	Day    TimeUnit = "DAYS"
)

// Subject is who or what a throttle applies to: exactly one of a user, a table (namespace:name)
// or a namespace.
type Subject struct {
	User      string
	Table     string
	Namespace string
}

func (s Subject) String() string {
	var parts []string
	if s.User != "" {
		parts = append(parts, "user="+s.User)
	}
	if s.Table != "" {
		parts = append(parts, "table="+s.Table)
	}
	if s.Namespace != "" {
		parts = append(parts, "namespace="+s.Namespace)
	}
	return strings.Join(parts, ",")
}

// QuotaKey identifies a throttle: a subject has at most one throttle of each type.
type QuotaKey struct {
	Subject Subject
	Type    ThrottleType
}

// String is the key in a stable form ("user=alice,table=ns:t/WRITE_SIZE"), as recorded in the
// StoreCluster's managed-quotas annotation.
func (k QuotaKey) String() string { return k.Subject.String() + "/" + string(k.Type) }

// Quota is one throttle: at most Limit (requests or bytes, by Type) per TimeUnit.
type Quota struct {
	Subject  Subject
	Type     ThrottleType
	Limit    uint64
	TimeUnit TimeUnit
}

// Key is the quota's identity.
func (q Quota) Key() QuotaKey { return QuotaKey{Subject: q.Subject, Type: q.Type} }

// QuotaFromSpec translates a spec quota (HBase shell syntax) into a throttle.
func QuotaFromSpec(q v1alpha1.QuotaSpec) (Quota, error) {
	n := 0
	for _, v := range []string{q.User, q.Table, q.Namespace} {
		if v != "" {
			n++
		}
	}
	if n != 1 {
		return Quota{}, fmt.Errorf("quota with limit %q must name exactly one of user, table or namespace", q.Limit)
	}
	// The engine's own parser (what the shell's set_quota uses), so the two never disagree.
	lim, err := quota.ParseLimit(q.Limit)
	if errors.Is(err, quota.ErrNoLimit) {
		return Quota{}, fmt.Errorf("quota limit %q removes a quota: delete the entry from spec.quotas instead", q.Limit)
	}
	if err != nil {
		return Quota{}, fmt.Errorf("quota limit %q is not valid (%v): write e.g. 100req/sec or 10M/sec", q.Limit, err)
	}
	kind := "REQUEST"
	switch q.Kind() {
	case v1alpha1.ThrottleRead:
		kind = "READ"
	case v1alpha1.ThrottleWrite:
		kind = "WRITE"
	case v1alpha1.ThrottleRequest:
	default:
		return Quota{}, fmt.Errorf("quota throttleType %q is not REQUEST, READ or WRITE", q.ThrottleType)
	}
	unit := "SIZE"
	if lim.Unit == quota.Requests {
		unit = "NUMBER"
	}
	tu, ok := map[time.Duration]TimeUnit{time.Second: Second, time.Minute: Minute, time.Hour: Hour, 24 * time.Hour: Day}[lim.Per]
	if !ok {
		return Quota{}, fmt.Errorf("quota limit %q: time unit %v is not sec, min, hour or day", q.Limit, lim.Per)
	}
	return Quota{
		Subject:  Subject{User: q.User, Table: q.Table, Namespace: q.Namespace},
		Type:     ThrottleType(kind + "_" + unit),
		Limit:    uint64(lim.Amount),
		TimeUnit: tu,
	}, nil
}

// QuotasFromSpec translates every spec quota; two quotas with the same identity are an error.
func QuotasFromSpec(specs []v1alpha1.QuotaSpec) ([]Quota, error) {
	out := make([]Quota, 0, len(specs))
	seen := map[QuotaKey]int{}
	for i, s := range specs {
		q, err := QuotaFromSpec(s)
		if err != nil {
			return nil, fmt.Errorf("spec.quotas[%d]: %w", i, err)
		}
		if j, dup := seen[q.Key()]; dup {
			return nil, fmt.Errorf("spec.quotas[%d] and spec.quotas[%d] are both a %s throttle of %s: keep one", j, i, q.Type, q.Subject)
		}
		seen[q.Key()] = i
		out = append(out, q)
	}
	return out, nil
}
