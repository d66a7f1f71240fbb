package storage

import (
	"math/rand/v2"
	"time"
)

// Backoff is the pause before asking an unavailable store again (ErrUnavailable): First before
// the second try, doubling with each try after it, never more than Max.
type Backoff struct{ First, Max time.Duration }

// Pause is the pause after try number attempt (1 for the first try).
func (b Backoff) Pause(attempt int) time.Duration {
	if attempt >= 1 && attempt < 32 && b.First<<(attempt-1) < b.Max {
		return b.First << (attempt - 1)
	}
	return b.Max
}

// Jittered is Pause shortened at random by up to half, so that writers that failed together do
// not all ask again at once.
func (b Backoff) Jittered(attempt int) time.Duration {
	d := b.Pause(attempt)
	return d/2 + rand.N(d/2+1)
}
