package buckettest

import (
	"context"
	"sync/atomic"

	"github.com/cellstore/cellstore/engine/storage"
)

// FailingPuts is a bucket whose next Failures Puts answer Err without writing (a store that
// throttles or refuses them); later ones pass on. The one fake the tests of the storage's users
// need: a real store cannot be made to fail a given number of PUTs.
type FailingPuts struct {
	storage.Bucket
	Failures atomic.Int64
	Err      error
	// Landed: the failing Puts write first, then answer Err (the store wrote; its answer was
	// lost).
	Landed bool
}

// Put implements storage.Bucket.
func (f *FailingPuts) Put(ctx context.Context, key string, body []byte, c storage.Condition) (string, error) {
	if f.Failures.Add(-1) >= 0 {
		if f.Landed {
			if _, err := f.Bucket.Put(ctx, key, body, c); err != nil {
				return "", err
			}
		}
		return "", f.Err
	}
	return f.Bucket.Put(ctx, key, body, c)
}
