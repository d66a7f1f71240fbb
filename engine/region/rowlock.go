package region

import (
	"fmt"
	"hash/maphash"
	"sync"
	"time"
	"unsafe"
)

// rowLocks are exclusive per-row locks (HBase's row locks), taken by every
// mutation and by read-modify-write operations for the duration of the
// read, the WAL append and the memstore insert.
type rowLocks struct {
	seed   maphash.Seed
	shards [64]rowLockShard
}

type rowLockShard struct {
	mu sync.Mutex
	m  map[string]*rowLock
}

type rowLock struct {
	row  string        // the map key: a view of key, which the entry owns
	key  []byte        // kept with the entry through the pool, so locking allocates nothing
	ch   chan struct{} // holds a token while locked
	refs int           // holders and waiters (under the shard lock)
}

// rowLockPool recycles lock entries (and their channels): a lock entry
// lives only while its row is locked or awaited.
var rowLockPool = sync.Pool{New: func() any { return &rowLock{ch: make(chan struct{}, 1)} }}

// newRowLocks makes the locks; a shard's map is made on its first lock, so a region that is
// never written costs no maps (a server may hold thousands of idle regions).
func newRowLocks() *rowLocks {
	return &rowLocks{seed: maphash.MakeSeed()}
}

func (l *rowLocks) shard(row []byte) *rowLockShard {
	return &l.shards[maphash.Bytes(l.seed, row)%uint64(len(l.shards))]
}

// lock takes the lock of row, waiting at most timeout.
func (l *rowLocks) lock(row []byte, timeout time.Duration) (*rowLock, error) {
	s := l.shard(row)
	s.mu.Lock()
	if s.m == nil {
		s.m = map[string]*rowLock{}
	}
	rl := s.m[string(row)]
	if rl == nil {
		rl = rowLockPool.Get().(*rowLock)
		rl.key = append(rl.key[:0], row...)
		if len(rl.key) > 0 {
			// The entry's own copy, unchanged until the entry leaves the map (drop).
			rl.row = unsafe.String(&rl.key[0], len(rl.key))
		}
		s.m[rl.row] = rl
	}
	rl.refs++
	s.mu.Unlock()
	select {
	case rl.ch <- struct{}{}:
		return rl, nil
	default:
	}
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case rl.ch <- struct{}{}:
		return rl, nil
	case <-t.C:
		l.drop(rl)
		return nil, fmt.Errorf("%w: row %q", ErrRowLockTimeout, row)
	}
}

func (l *rowLocks) drop(rl *rowLock) {
	s := l.shard(rl.key)
	s.mu.Lock()
	rl.refs--
	free := rl.refs == 0
	if free {
		delete(s.m, rl.row)
	}
	s.mu.Unlock()
	if free {
		rl.row = ""
		if cap(rl.key) > 4<<10 {
			rl.key = nil // a huge row's copy does not stay in the pool
		}
		rowLockPool.Put(rl)
	}
}

func (l *rowLocks) unlock(rl *rowLock) {
	<-rl.ch
	l.drop(rl)
}
