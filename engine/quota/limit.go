// Package quota implements HBase-style request throttling: limits written as HBase's shell writes
// them ('100req/sec', '10M/min', NONE), token buckets per user, table and namespace on each region
// server, and the check a request passes before it runs (a throttled request gets a retry-after).
package quota

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	pb "github.com/cellstore/cellstore/engine/api/cellstore/v1"
)

// Unit is what a limit counts.
type Unit int

const (
	Requests Unit = iota
	Bytes
)

// Limit is an amount per time unit: 100req/sec, 10M/min.
type Limit struct {
	Amount int64
	Unit   Unit
	Per    time.Duration
}

// ErrNoLimit is returned by ParseLimit for NONE: the quota is to be removed.
var ErrNoLimit = errors.New("quota: NONE (no limit)")

var timeUnits = map[string]time.Duration{
	"sec": time.Second, "min": time.Minute, "hour": time.Hour, "day": 24 * time.Hour,
}

var sizeUnits = map[string]int64{
	"B": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40, "P": 1 << 50,
}

// LimitSyntax is the grammar of a limit, for error messages and the operator's validation.
const LimitSyntax = "NUMBER 'req' or NUMBER with a size unit B/K/M/G/T/P, then '/' and sec, min, hour or day " +
	"(for example '100req/sec', '10M/min'), or NONE"

// ParseLimit reads a limit in HBase's shell syntax.
func ParseLimit(s string) (Limit, error) {
	t := strings.TrimSpace(s)
	if strings.EqualFold(t, "NONE") {
		return Limit{}, ErrNoLimit
	}
	amountUnit, per, ok := strings.Cut(t, "/")
	if !ok {
		return Limit{}, fmt.Errorf("quota: bad limit %q: no '/TIMEUNIT'; want %s", s, LimitSyntax)
	}
	d, ok := timeUnits[strings.ToLower(per)]
	if !ok {
		return Limit{}, fmt.Errorf("quota: bad limit %q: time unit %q is not sec, min, hour or day", s, per)
	}
	i := 0
	for i < len(amountUnit) && amountUnit[i] >= '0' && amountUnit[i] <= '9' {
		i++
	}
	if i == 0 {
		return Limit{}, fmt.Errorf("quota: bad limit %q: it must start with a number; want %s", s, LimitSyntax)
	}
	n, err := strconv.ParseInt(amountUnit[:i], 10, 64)
	if err != nil || n <= 0 {
		return Limit{}, fmt.Errorf("quota: bad limit %q: the amount must be a positive integer", s)
	}
	unit := amountUnit[i:]
	if strings.EqualFold(unit, "req") {
		return Limit{Amount: n, Unit: Requests, Per: d}, nil
	}
	mult, ok := sizeUnits[strings.ToUpper(unit)]
	if !ok {
		return Limit{}, fmt.Errorf("quota: bad limit %q: unit %q is not req or a size unit (B, K, M, G, T, P)", s, unit)
	}
	if n > math.MaxInt64/mult {
		return Limit{}, fmt.Errorf("quota: bad limit %q: too large", s)
	}
	return Limit{Amount: n * mult, Unit: Bytes, Per: d}, nil
}

// String writes the limit back in shell syntax.
func (l Limit) String() string {
	per := "sec"
	for name, d := range timeUnits {
		if d == l.Per {
			per = name
		}
	}
	if l.Unit == Requests {
		return fmt.Sprintf("%dreq/%s", l.Amount, per)
	}
	for _, u := range []string{"P", "T", "G", "M", "K"} {
		if m := sizeUnits[u]; l.Amount%m == 0 {
			return fmt.Sprintf("%d%s/%s", l.Amount/m, u, per)
		}
	}
	return fmt.Sprintf("%dB/%s", l.Amount, per)
}

// ThrottleType combines the shell's THROTTLE_TYPE (READ, WRITE or empty for both) with the unit of
// the limit, as HBase does: '100req/sec' with READ is READ_NUMBER.
func ThrottleType(throttleType string, l Limit) (pb.ThrottleType, error) {
	num := l.Unit == Requests
	switch strings.ToUpper(throttleType) {
	case "", "REQUEST":
		if num {
			return pb.ThrottleType_THROTTLE_TYPE_REQUEST_NUMBER, nil
		}
		return pb.ThrottleType_THROTTLE_TYPE_REQUEST_SIZE, nil
	case "READ":
		if num {
			return pb.ThrottleType_THROTTLE_TYPE_READ_NUMBER, nil
		}
		return pb.ThrottleType_THROTTLE_TYPE_READ_SIZE, nil
	case "WRITE":
		if num {
			return pb.ThrottleType_THROTTLE_TYPE_WRITE_NUMBER, nil
		}
		return pb.ThrottleType_THROTTLE_TYPE_WRITE_SIZE, nil
	}
	return 0, fmt.Errorf("quota: THROTTLE_TYPE %q is not READ or WRITE", throttleType)
}

// ToProto makes the catalog's form of a quota.
func ToProto(l Limit, tt pb.ThrottleType) *pb.Quota {
	return &pb.Quota{Type: tt, Limit: l.Amount, TimeUnitSeconds: int64(l.Per / time.Second)}
}

// FromProto reads a catalog quota's limit.
func FromProto(q *pb.Quota) (Limit, error) {
	if q.GetLimit() <= 0 || q.GetTimeUnitSeconds() <= 0 {
		return Limit{}, fmt.Errorf("quota: stored quota has limit %d per %d s", q.GetLimit(), q.GetTimeUnitSeconds())
	}
	unit := Bytes
	switch q.GetType() {
	case pb.ThrottleType_THROTTLE_TYPE_REQUEST_NUMBER, pb.ThrottleType_THROTTLE_TYPE_READ_NUMBER, pb.ThrottleType_THROTTLE_TYPE_WRITE_NUMBER:
		unit = Requests
	}
	return Limit{Amount: q.GetLimit(), Unit: unit, Per: time.Duration(q.GetTimeUnitSeconds()) * time.Second}, nil
}
