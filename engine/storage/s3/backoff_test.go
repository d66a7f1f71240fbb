package s3

import (
	"testing"
	"time"

	"github.com/cellstore/cellstore/engine/storage"
)

// The waits between a request's attempts start at 100 ms and double, each jittered down by up to
// half, and never pass the cap (the SDK's default waits up to 1 s before the second attempt on
// throttling, then 2, 4, 5 s).
func TestBackoff(t *testing.T) {
	b := backoff{storage.Backoff{First: firstBackoff, Max: time.Second}}
	for attempt, top := range map[int]time.Duration{1: 100 * time.Millisecond, 2: 200 * time.Millisecond,
		3: 400 * time.Millisecond, 4: 800 * time.Millisecond, 5: time.Second, 40: time.Second} {
		for range 200 {
			d, err := b.BackoffDelay(attempt, nil)
			if err != nil || d < top/2 || d > top {
				t.Fatalf("attempt %d: waits %v (%v), want within [%v, %v]", attempt, d, err, top/2, top)
			}
		}
	}
}
