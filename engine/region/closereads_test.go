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
