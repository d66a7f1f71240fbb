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
}

// beginIntent writes an intent of kind (intentCopy, intentPrune) and keeps rewriting it until end.
func beginIntent(st region.Storage, kind, what string) (*intent, error) {
	var id [8]byte
	_, _ = rand.Read(id[:])
	in := &intent{st: st, key: path.Join(IntentDir, kind+"-"+hex.EncodeToString(id[:])), what: what, stop: make(chan struct{})}
	if err := in.write(); err != nil {
		return nil, fmt.Errorf("writing the intent %s: %w", in.key, err)
	}
	in.done.Add(1)
	go func() {
		defer in.done.Done()
		t := time.NewTicker(IntentRefresh)
		defer t.Stop()
		for {
			select {
			case <-in.stop:
				return
			case <-t.C:
				_ = in.write() // a failed rewrite is retried at the next tick; expiry is far off
			}
		}
	}()
	return in, nil
}

func (in *intent) write() error {
	return in.st.WriteObject(in.key, []byte(time.Now().UTC().Format(time.RFC3339Nano)+" "+in.what+"\n"), false)
}

// held fails when the intent is gone: a reader removed it as expired (its owner was paused or cut
// off for longer than IntentExpiry), so a prune may have run meanwhile.
func (in *intent) held() error {
	if _, err := in.st.ReadObject(in.key); err != nil {
		return fmt.Errorf("the intent %s is gone (this process stalled for longer than %s, or lost the location), so a prune may have run: %w; run it again", in.key, IntentExpiry, err)
	}
	return nil
}

// end stops rewriting the intent and removes it.
func (in *intent) end() {
	close(in.stop)
	in.done.Wait()
	_ = in.st.DeleteObject(in.key) // left behind, it expires
}

// liveIntent returns the key and description of a live intent of kind at st other than own ("" when
// there is none), removing expired ones on the way.
func liveIntent(st region.Storage, kind, own string) (key, what string, err error) {
	err = st.WalkFiles(IntentDir, func(p string) error {
		if p == own || !strings.HasPrefix(path.Base(p), kind+"-") || key != "" {
			return nil
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
	return key, what, err
}

// waitNoPrune waits until no live prune intent is at st: a copy that wrote its own intent may then
// write files.
func waitNoPrune(ctx context.Context, st region.Storage) error {
	for {
		key, what, err := liveIntent(st, intentPrune, "")
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
			return fmt.Errorf("waiting for the prune of the destination to end (%s: %s): %w; retry when it is done, or delete that object if its owner is gone",
				key, what, ctx.Err())
		case <-t.C:
		}
	}
}
