package master

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"

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

var limitRE = regexp.MustCompile(`^([1-9][0-9]{0,17})(req|B|K|M|G|T|P)/(sec|min|hour|day)$`)

var sizeShift = map[string]uint{"B": 0, "K": 10, "M": 20, "G": 30, "T": 40, "P": 50}

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
	m := limitRE.FindStringSubmatch(q.Limit)
	if m == nil {
		return Quota{}, fmt.Errorf("quota limit %q is not valid: write e.g. 100req/sec or 10M/sec", q.Limit)
	}
	amount, err := strconv.ParseUint(m[1], 10, 64)
	if err != nil {
		return Quota{}, fmt.Errorf("quota limit %q: %v", q.Limit, err)
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
	var unit string
	switch m[2] {
	case "req":
		unit = "NUMBER"
	default:
		unit = "SIZE"
		shift := sizeShift[m[2]]
		if amount > uint64(1<<63-1)>>shift {
			return Quota{}, fmt.Errorf("quota limit %q is too large", q.Limit)
		}
		amount <<= shift
	}
	tu := map[string]TimeUnit{"sec": Second, "min": Minute, "hour": Hour, "day": Day}[m[3]]
	return Quota{
		Subject:  Subject{User: q.User, Table: q.Table, Namespace: q.Namespace},
		Type:     ThrottleType(kind + "_" + unit),
		Limit:    amount,
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
