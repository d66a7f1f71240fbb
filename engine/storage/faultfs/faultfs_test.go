package faultfs

import (
	"errors"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cellstore/cellstore/engine/storage"
)

func TestCountsAndNth(t *testing.T) {
	f := New(storage.NewMem())
	f.AddRule(Rule{Ops: OpSync, Nth: 2, Err: syscall.EIO})
	f.MkdirAll("d")
	w, err := f.Create("d/a")
	if err != nil {
		t.Fatal(err)
	}
	w.Write([]byte("x"))
	if err := w.Sync(); err != nil {
		t.Fatalf("first sync: %v", err)
	}
	err = w.Sync()
	if !errors.Is(err, syscall.EIO) || !strings.Contains(err.Error(), "d/a") {
		t.Fatalf("second sync: %v", err)
	}
	if err := w.Sync(); err != nil {
		t.Fatalf("third sync: %v", err)
	}
	if got := f.Count(OpSync); got != 3 {
		t.Fatalf("sync count %d", got)
	}
	if got := f.Count(OpsMutating); got != 1+1+1+3 { // mkdir, create, write, 3 syncs
		t.Fatalf("mutating count %d", got)
	}
}

func TestPathPattern(t *testing.T) {
	f := New(storage.NewMem())
	f.MkdirAll("wal/rs1")
	f.AddRule(Rule{Ops: OpCreate | OpRename, Path: "wal/rs1/*.tmp"})
	if _, err := f.Create("wal/rs1/x.log"); err != nil {
		t.Fatal(err)
	}
	if _, err := f.Create("/wal/rs1/x.tmp"); !errors.Is(err, ErrInjected) {
		t.Fatalf("pattern create: %v", err)
	}
	if err := f.Rename("wal/rs1/x.log", "wal/rs1/y.tmp"); !errors.Is(err, ErrInjected) {
		t.Fatalf("pattern rename (new name): %v", err)
	}
	if err := f.Rename("wal/rs1/x.log", "wal/rs1/y.log"); err != nil {
		t.Fatal(err)
	}
}

func TestShortWrite(t *testing.T) {
	mem := storage.NewMem()
	f := New(mem)
	f.AddRule(Rule{Ops: OpWrite, Nth: 2, Action: ShortWrite, Err: syscall.ENOSPC})
	w, _ := f.Create("f")
	if _, err := w.Write([]byte("1234")); err != nil {
		t.Fatal(err)
	}
	n, err := w.Write([]byte("abcdef"))
	if n != 3 || !storage.IsNoSpace(err) {
		t.Fatalf("short write = %d, %v", n, err)
	}
	if data, _ := storage.ReadFile(mem, "f"); string(data) != "1234abc" {
		t.Fatalf("content %q", data)
	}
}

func TestCrash(t *testing.T) {
	mem := storage.NewMem()
	f := New(mem)
	f.MkdirAll("d")
	w, _ := f.Create("d/a")
	w.Write([]byte("synced"))
	w.Sync()
	f.SyncDir("d")
	w.Write([]byte("+lost"))
	f.AddRule(Rule{Ops: OpSync, Nth: 1, Action: Crash})
	if err := w.Sync(); !errors.Is(err, ErrCrashed) {
		t.Fatalf("crashing sync: %v", err)
	}
	// Everything fails after the crash, even reads and new files.
	if _, err := w.Write([]byte("x")); !errors.Is(err, ErrCrashed) {
		t.Fatalf("write after crash: %v", err)
	}
	if _, err := f.Create("d/b"); !errors.Is(err, ErrCrashed) {
		t.Fatalf("create after crash: %v", err)
	}
	if _, err := f.List("d"); !errors.Is(err, ErrCrashed) {
		t.Fatalf("list after crash: %v", err)
	}
	after, err := f.CrashClone(storage.CrashOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if data, _ := storage.ReadFile(after, "d/a"); string(data) != "synced" {
		t.Fatalf("after crash: %q", data)
	}
	if _, err := New(storage.NewMem()).Inner().(*storage.Mem); !err {
		t.Fatal("Inner")
	}
	if _, err := New(&storage.Local{}).CrashClone(storage.CrashOptions{}); err == nil {
		t.Fatal("CrashClone over a non-Mem FS succeeded")
	}
}

func TestDelay(t *testing.T) {
	f := New(storage.NewMem())
	f.AddRule(Rule{Ops: OpMkdirAll, Action: Delay, Delay: 20 * time.Millisecond})
	start := time.Now()
	if err := f.MkdirAll("x"); err != nil {
		t.Fatal(err)
	}
	if time.Since(start) < 20*time.Millisecond {
		t.Fatal("no delay")
	}
	if ok, _ := storage.Exists(f, "x"); !ok {
		t.Fatal("delayed op not performed")
	}
}

func TestOpString(t *testing.T) {
	if s := (OpSync | OpRename).String(); s != "sync|rename" {
		t.Fatal(s)
	}
	if OpsAll.String() == "none" || Op(0).String() != "none" {
		t.Fatal("OpsAll")
	}
}

func TestCall(t *testing.T) {
	f := New(storage.NewMem())
	called := 0
	f.AddRule(Rule{Ops: OpMkdirAll, Action: Call, Fn: func() { called++ }})
	f.MkdirAll("a")
	f.MkdirAll("b")
	if called != 2 {
		t.Fatalf("called %d", called)
	}
}
