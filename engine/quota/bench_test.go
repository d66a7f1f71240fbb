package quota

import (
	"testing"
	"time"

	pb "github.com/cellstore/cellstore/engine/api/cellstore/v1"
)

// BenchmarkCheck is the cost quotas add to each request of an unthrottled user: with no quotas,
// and while another user and a namespace are throttled (the issue's "an unthrottled user's
// throughput is not reduced by more than 10%": compare with a request's cost, ~20-40 µs).
func BenchmarkCheck(b *testing.B) {
	for _, tc := range []struct {
		name   string
		quotas []*pb.Quota
	}{
		{"no-quotas", nil},
		{"others-throttled", []*pb.Quota{userQuota("alice", "100req/sec", ""), userQuota("carol", "1M/sec", "WRITE")}},
	} {
		b.Run(tc.name, func(b *testing.B) {
			l := NewLimiters(time.Now)
			if err := l.Update(1, true, tc.quotas, nil); err != nil {
				b.Fatal(err)
			}
			r := Request{User: "bob", Table: "default:t", Namespace: "default", Size: 100}
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					if l.Check(r) != nil {
						b.Fatal("bob throttled")
					}
				}
			})
		})
	}
}
