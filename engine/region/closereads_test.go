package region

import (
	"errors"
	"testing"
	"time"

	"github.com/cellstore/cellstore/engine/cell"
	"github.com/cellstore/cellstore/engine/storage/faultfs"
)

// A closing region serves reads until its last flush is done and refuses writes from the start
// of the close: a region moving to another server is unreadable only while the destination
// opens it. Once closed, reads are refused too.
func TestCloseServesReadsUntilItsFlushIsDone(t *testing.T) {
	e := newEnv(t, fam("f"))
	ffs := faultfs.New(e.fs)
	e.cfg.FS = ffs
	e.reopen()
	put := func(row string) error {
		return e.r.Put(NewMutation([]byte(row)).Put([]byte("f"), []byte("q"), cell.LatestTimestamp, []byte("v-"+row)))
	}
	if err := put("a"); err != nil {
		t.Fatal(err)
	}
	flushing, release := make(chan struct{}), make(chan struct{})
	ffs.AddRule(faultfs.Rule{Ops: faultfs.OpCreate, Nth: 1, Action: faultfs.Call, Fn: func() {
		close(flushing)
		<-release
	}})
	closed := make(chan error, 1)
	go func() { closed <- e.r.Close() }()
	select {
	case <-flushing:
	case err := <-closed:
		t.Fatalf("the close returned (%v) without writing a store file", err)
	case <-time.After(30 * time.Second):
		close(release)
		t.Fatal("the close's flush never created its store file")
	}
	// The flush is writing: reads are served (the cell is in the memstore's snapshot), writes
	// are refused.
	res, err := e.r.Get(&Get{Row: []byte("a")})
	if err != nil || len(res.Cells) != 1 || string(res.Cells[0].Value) != "v-a" {
		close(release)
		t.Fatalf("a get during the close's flush: %v, %v; want the cell", res, err)
	}
	sc, err := e.r.Scanner(&Scan{})
	if err != nil {
		close(release)
		t.Fatalf("a scan opened during the close's flush: %v", err)
	}
	if b, err := sc.Next(); err != nil || len(b.Results) != 1 {
		close(release)
		t.Fatalf("a scan during the close's flush read %v, %v; want one row", b.Results, err)
	}
	sc.Close()
	if !e.r.Readable() {
		close(release)
		t.Fatal("a region whose close is flushing says it serves no reads")
	}
	if err := put("b"); !errors.Is(err, ErrClosed) {
		close(release)
		t.Fatalf("a write during the close answered %v; want ErrClosed", err)
	}
	close(release)
	if err := <-closed; err != nil {
		t.Fatal(err)
	}
	if _, err := e.r.Get(&Get{Row: []byte("a")}); !errors.Is(err, ErrClosed) {
		t.Fatalf("a get after the close answered %v; want ErrClosed", err)
	}
	if e.r.Readable() {
		t.Fatal("a closed region says it serves reads")
	}
	e.r = nil
}

// An abort does not wait for a flush or compaction under way: one that finishes after it commits
// nothing. (It committed a manifest made from the empty file set the abort left, naming only its
// own new file: the region reopened without every older file, its cells gone.)
func TestAbortDuringAFlushOrCompactionKeepsTheFiles(t *testing.T) {
	for _, compact := range []bool{false, true} {
		t.Run(map[bool]string{false: "flush", true: "compaction"}[compact], func(t *testing.T) {
			e := newEnv(t, fam("f"))
			ffs := faultfs.New(e.fs)
			e.cfg.FS = ffs
			e.reopen()
			for _, row := range []string{"a", "b"} {
				if err := e.r.Put(NewMutation([]byte(row)).Put([]byte("f"), []byte("q"), cell.LatestTimestamp, []byte("v-"+row))); err != nil {
					t.Fatal(err)
				}
				if _, err := e.r.Flush(); err != nil {
					t.Fatal(err)
				}
			}
			if err := e.r.Put(NewMutation([]byte("c")).Put([]byte("f"), []byte("q"), cell.LatestTimestamp, []byte("v-c"))); err != nil {
				t.Fatal(err)
			}
			writing, release := make(chan struct{}), make(chan struct{})
			ffs.AddRule(faultfs.Rule{Ops: faultfs.OpCreate, Nth: 1, Action: faultfs.Call, Fn: func() {
				close(writing)
				<-release
			}})
			done := make(chan error, 1)
			go func() {
				var err error
				if compact {
					_, err = e.r.Compact(true)
				} else {
					_, err = e.r.Flush()
				}
				done <- err
			}()
			select {
			case <-writing:
			case err := <-done:
				t.Fatalf("finished (%v) without writing a file", err)
			case <-time.After(30 * time.Second):
				close(release)
				t.Fatal("never wrote its file")
			}
			e.r.Abort()
			close(release)
			if err := <-done; !errors.Is(err, ErrClosed) {
				t.Errorf("after the abort it answered %v; want ErrClosed", err)
			}
			ffs.ClearRules()
			e.open()
			for _, row := range []string{"a", "b", "c"} {
				res, err := e.r.Get(&Get{Row: []byte(row)})
				if err != nil || len(res.Cells) != 1 || string(res.Cells[0].Value) != "v-"+row {
					t.Errorf("row %s after the abort and reopen: %v, %v", row, res, err)
				}
			}
		})
	}
}
