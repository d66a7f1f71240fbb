package snapshot

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"strings"
	"sync"
	"time"

	"github.com/cellstore/cellstore/engine/region"
)

// Copies to a location and prunes of it exclude each other through intent objects under
// in-progress/ at that location: a copy's files are written before its manifest, and a file it
// finds there already is not copied again, so a prune that ran meanwhile could delete a file the
// new manifest names. Each writes its own intent first and then lists the other kind's. Listings
// are strongly consistent (S3, MinIO, a directory tree), so of a copy and a prune that overlap at
// least one sees the other's intent: the prune then deletes nothing (the files stay for the next
// prune) and the copy waits until the prune has ended. This holds across processes — a deposed
// master still copying, the CLI, another cluster backing up to the same place — where the
// master's own lock does not reach. An owner rewrites its intent every IntentRefresh; one not
// rewritten for IntentExpiry (its owner died) counts for nothing and the next reader removes it.

// IntentDir is where the intents of copies and prunes are, at a cluster root or backup location.
const IntentDir = "in-progress"

var (
	// IntentRefresh is how often a running copy or prune rewrites its intent.
	IntentRefresh = time.Minute
	// IntentExpiry is how long an intent counts after it was last written (generous: it also
	// absorbs clock skew between the writers' machines).
	IntentExpiry = 10 * time.Minute
	// intentPoll is how often a copy looks again whether the prune it waits for has ended.
	intentPoll = 500 * time.Millisecond
)

// ErrCopyUnderway: a prune found a copy to the same location under way and deleted nothing.
var ErrCopyUnderway = errors.New("snapshot: a copy to this location is under way")

const (
	intentCopy  = "copy"
	intentPrune = "prune"
)

// intent is a copy's or prune's intent object while it runs.
type intent struct {
	st   region.Storage
	key  string
	what string
	stop chan struct{}
	done sync.WaitGroup

	mu     sync.Mutex
	lastOK time.Time // when the last write that succeeded was issued (monotonic)
	lost   error     // set for good once the intent may have expired for others
}

// beginIntent writes an intent of kind (intentCopy, intentPrune) and keeps rewriting it until end.
func beginIntent(st region.Storage, kind, what string) (*intent, error) {
	var id [8]byte
	_, _ = rand.Read(id[:])
	in := &intent{st: st, key: path.Join(IntentDir, kind+"-"+hex.EncodeToString(id[:])), what: what, stop: make(chan struct{})}
	issued := time.Now()
	if err := in.write(); err != nil {
		return nil, fmt.Errorf("writing the intent %s: %w", in.key, err)
	}
	in.lastOK = issued
	in.done.Add(1)
	every := IntentRefresh
	go func() {
		defer in.done.Done()
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-in.stop:
				return
			case <-t.C:
				in.refresh()
			}
		}
	}()
	return in, nil
}

func (in *intent) write() error {
	return in.st.WriteObject(in.key, []byte(time.Now().UTC().Format(time.RFC3339Nano)+" "+in.what+"\n"), false)
}

// refresh rewrites the intent unless it may have expired for others meanwhile: then it is lost
// for good, and never written again (a reader may have removed it and acted on that).
func (in *intent) refresh() {
	// Taken first: a write that lands after a stall anywhere below counts from before the stall,
	// so the intent is then lost although the write put it back.
	issued := time.Now()
	if in.confirm() != nil {
		return // lost (for good), or unreadable now: the next tick tries again
	}
	if err := in.write(); err != nil {
		return // retried at the next tick; it is lost only once it may have expired
	}
	in.mu.Lock()
	in.lastOK = issued
	in.mu.Unlock()
}

func (in *intent) lose(err error) {
	in.mu.Lock()
	defer in.mu.Unlock()
	if in.lost == nil {
		in.lost = err
	}
}

// held fails once the intent may have expired for another process: it was not rewritten for half
// of IntentExpiry (the other half absorbs clock skew) by this process's monotonic clock or by its
// wall clock (the monotonic one stands still while the machine is suspended), or it was found
// removed. Once failed it stays failed.
func (in *intent) held() error {
	in.mu.Lock()
	defer in.mu.Unlock()
	if gap := max(time.Since(in.lastOK), time.Now().Round(0).Sub(in.lastOK.Round(0))); in.lost == nil && gap > IntentExpiry/2 {
		in.lost = fmt.Errorf("the intent %s was last rewritten %s ago (this process stalled or lost the location)",
			in.key, gap.Round(time.Second))
	}
	if in.lost != nil {
		return fmt.Errorf("%w: a copy or prune by another process may have run meanwhile; run this again", in.lost)
	}
	return nil
}

// confirm is held, and that the intent is still at the location.
func (in *intent) confirm() error {
	if err := in.held(); err != nil {
		return err
	}
	if _, err := in.st.ReadObject(in.key); errors.Is(err, fs.ErrNotExist) {
		in.lose(fmt.Errorf("the intent %s was removed by another process, which took it for expired", in.key))
		return in.held()
	} else if err != nil {
		return fmt.Errorf("reading the intent %s: %w", in.key, err)
	}
	return nil
}

// end stops rewriting the intent and removes it.
func (in *intent) end() {
	close(in.stop)
	in.done.Wait()
	_ = in.st.DeleteObject(in.key) // left behind, it expires
}

// liveIntent returns the key and description of a live intent of kind at st ("" when there is
// none), removing expired ones on the way.
func liveIntent(st region.Storage, kind string) (key, what string, err error) {
	err = st.WalkFiles(IntentDir, func(p string) error {
		if !isIntentName(path.Base(p), kind) || key != "" {
			return nil // (a directory tree's temporary file of an intent being written, too)
		}
		body, err := st.ReadObject(p)
		if errors.Is(err, fs.ErrNotExist) {
			return nil // ended since the listing
		}
		if err != nil {
			return err
		}
		at, desc, _ := strings.Cut(strings.TrimSpace(string(body)), " ")
		t, perr := time.Parse(time.RFC3339Nano, at)
		if perr != nil || time.Since(t) > IntentExpiry {
			// Its owner died (or it is not an intent): it counts for nothing.
			return st.DeleteObject(p)
		}
		key, what = p, fmt.Sprintf("%s, last written %s", desc, t.Format(time.RFC3339))
		return nil
	})
	if err != nil {
		return "", "", fmt.Errorf("reading the intents under %s/: %w", IntentDir, err)
	}
	return key, what, nil
}

// Exclusion is a prune's hold on a location against copies to it (Prune's, and the master's
// archive cleaner's at a cluster root, where imports copy to). Take it before listing the
// manifests whose files are kept: a copy that ends before that is listed, one that starts after
// it waits.
type Exclusion struct {
	in        *intent
	confirmed time.Time
}

// ExcludeCopies writes a prune intent at st, then fails with ErrCopyUnderway (naming the copy)
// when a copy to st is under way.
func ExcludeCopies(st region.Storage, what string) (*Exclusion, error) {
	in, err := beginIntent(st, intentPrune, what)
	if err != nil {
		return nil, err
	}
	if key, desc, err := liveIntent(st, intentCopy); err != nil || key != "" {
		in.end()
		if err == nil {
			err = fmt.Errorf("%w (%s: %s)", ErrCopyUnderway, key, desc)
		}
		return nil, err
	}
	return &Exclusion{in: in, confirmed: time.Now()}, nil
}

// Check fails once the hold may have lapsed (intent.held; its intent is read back about every
// IntentRefresh too): call it before each delete, and stop deleting when it fails.
func (e *Exclusion) Check() error {
	if time.Since(e.confirmed) > IntentRefresh {
		e.confirmed = time.Now()
		return e.in.confirm()
	}
	return e.in.held()
}

// End releases the hold.
func (e *Exclusion) End() { e.in.end() }

// isIntentName says whether name is an intent of kind: kind-<16 hex digits>.
func isIntentName(name, kind string) bool {
	id, ok := strings.CutPrefix(name, kind+"-")
	if !ok || len(id) != 16 {
		return false
	}
	_, err := hex.DecodeString(id)
	return err == nil
}

// waitNoPrune waits until no live prune intent is at st: a copy that wrote its own intent may then
// write files.
func waitNoPrune(ctx context.Context, st region.Storage) error {
	for {
		key, what, err := liveIntent(st, intentPrune)
		if err != nil {
			return err
		}
		if key == "" {
			return nil
		}
		t := time.NewTimer(intentPoll)
		select {
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("waiting for the prune of the destination to end (%s: %s): %w; retry when it is done (an intent whose owner died expires %s after it was last written)",
				key, what, ctx.Err(), IntentExpiry)
		case <-t.C:
		}
	}
}
