//go:build linux

package offheap

import (
	"bytes"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"unsafe"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sys/unix"
)

// testLogger returns a logger writing into buf.
func testLogger(buf *bytes.Buffer) *slog.Logger {
	return slog.New(slog.NewTextHandler(buf, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

func TestArenaBasics(t *testing.T) {
	budget, _ := NewBudget("test", 64<<20, nil)
	var log bytes.Buffer
	a, err := NewArena(ArenaOptions{Name: "t", Size: 3<<20 + 1, Hugepages: HugepagesOff, Budget: budget, Logger: testLogger(&log)})
	if err != nil {
		t.Fatal(err)
	}
	if a.Size() != 3<<20+basePageSize || a.Backing() != BackingPlain || a.Requested() != HugepagesOff {
		t.Fatalf("size %d backing %v", a.Size(), a.Backing())
	}
	if budget.Used() != a.Size() {
		t.Fatalf("budget used %d, arena %d", budget.Used(), a.Size())
	}
	if !strings.Contains(log.String(), "backing=none") || !strings.Contains(log.String(), "hugepages=off") {
		t.Fatalf("log does not say which backing was obtained: %s", log.String())
	}
	all, err := a.Bytes()
	if err != nil {
		t.Fatal(err)
	}
	for i := range all { // touch it all: it must be writable
		all[i] = byte(i)
	}
	v, err := a.Slice(10, 5)
	if err != nil || len(v) != 5 || cap(v) != 5 || v[0] != 10 {
		t.Fatalf("Slice: %v len %d cap %d", err, len(v), cap(v))
	}
	for _, r := range [][2]int64{{-1, 1}, {0, -1}, {a.Size(), 1}, {a.Size() - 1, 2}, {1 << 62, 1 << 62}} {
		if _, err := a.Slice(r[0], r[1]); err == nil {
			t.Errorf("Slice(%d, %d) out of range accepted", r[0], r[1])
		}
	}
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	if budget.Used() != 0 {
		t.Fatalf("budget not returned: %d", budget.Used())
	}
	if _, err := a.Slice(0, 1); !errors.Is(err, ErrClosed) {
		t.Fatalf("Slice after Close: %v", err)
	}
	if err := a.Close(); !errors.Is(err, ErrClosed) {
		t.Fatalf("second Close: %v", err)
	}
}

func TestArenaBudgetRefused(t *testing.T) {
	budget, _ := NewBudget("small", 4<<20, nil)
	a, err := NewArena(ArenaOptions{Name: "ok", Size: 2 << 20, Hugepages: HugepagesAuto, Budget: budget, Logger: testLogger(new(bytes.Buffer))})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	_, err = NewArena(ArenaOptions{Name: "too-big", Size: 4 << 20, Hugepages: HugepagesOff, Budget: budget})
	if !errors.Is(err, ErrBudgetExceeded) {
		t.Fatalf("got %v, want ErrBudgetExceeded", err)
	}
	if budget.Used() != 2<<20 {
		t.Fatalf("refused arena leaked budget: %d", budget.Used())
	}
	for _, bad := range []ArenaOptions{{Size: 0}, {Size: -5}, {Size: 1, Hugepages: HugepageMode(9)}} {
		if _, err := NewArena(bad); err == nil {
			t.Errorf("NewArena(%+v) accepted", bad)
		}
	}
}

// failHugeTLB makes every MAP_HUGETLB mmap fail as it does without free
// hugepages.
func failHugeTLB(t *testing.T) {
	orig := sysMmap
	sysMmap = func(fd int, off int64, addr unsafe.Pointer, length uintptr, prot, flags int) (unsafe.Pointer, error) {
		if flags&unix.MAP_HUGETLB != 0 {
			return nil, unix.ENOMEM
		}
		return orig(fd, off, addr, length, prot, flags)
	}
	t.Cleanup(func() { sysMmap = orig })
}

func setTHP(t *testing.T, policy string) {
	orig := thpEnabledFile
	f := filepath.Join(t.TempDir(), "enabled")
	if err := os.WriteFile(f, []byte(policy+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	thpEnabledFile = f
	t.Cleanup(func() { thpEnabledFile = orig })
}

// In auto mode a refused MAP_HUGETLB falls back to THP via madvise, and says
// so in the log and the metric.
func TestAutoFallsBackToTHP(t *testing.T) {
	failHugeTLB(t)
	setTHP(t, "always [madvise] never")
	var advised []int
	origAdvise := sysMadvise
	sysMadvise = func(addr unsafe.Pointer, length uintptr, advice int) error {
		advised = append(advised, advice)
		if uintptr(addr)%thpSize != 0 {
			t.Errorf("THP region not 2 MiB aligned: %#x", addr)
		}
		return origAdvise(addr, length, advice)
	}
	t.Cleanup(func() { sysMadvise = origAdvise })

	var log bytes.Buffer
	a, err := NewArena(ArenaOptions{Name: "auto", Size: 6 << 20, Hugepages: HugepagesAuto, Logger: testLogger(&log)})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	if a.Backing() != BackingTHP {
		t.Fatalf("backing %v, want thp", a.Backing())
	}
	if len(advised) != 1 || advised[0] != unix.MADV_HUGEPAGE {
		t.Fatalf("madvise calls %v, want one MADV_HUGEPAGE", advised)
	}
	out := log.String()
	for _, want := range []string{"level=WARN", "backing=thp", "MAP_HUGETLB 2Mi failed", "hugepages=auto"} {
		if !strings.Contains(out, want) {
			t.Errorf("log %q lacks %q", out, want)
		}
	}
	b, _ := a.Bytes()
	b[0], b[len(b)-1] = 1, 2 // mapped and writable end to end

	if v := gaugeValue(t, "cellstore_offheap_hugepage_mode", "mode", "thp"); v != 1 {
		t.Fatalf("hugepage_mode{mode=thp} = %v, want 1", v)
	}
	if v := gaugeValue(t, "cellstore_offheap_arena_bytes", "mode", "thp"); v < 6<<20 {
		t.Fatalf("arena_bytes{mode=thp} = %v", v)
	}
}

func TestAutoFallsBackToPlain(t *testing.T) {
	failHugeTLB(t)
	setTHP(t, "always madvise [never]")
	var log bytes.Buffer
	a, err := NewArena(ArenaOptions{Name: "auto", Size: 2 << 20, Hugepages: HugepagesAuto, Logger: testLogger(&log)})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	if a.Backing() != BackingPlain {
		t.Fatalf("backing %v, want none", a.Backing())
	}
	if !strings.Contains(log.String(), "transparent hugepages disabled") {
		t.Fatalf("log does not give the reason: %s", log.String())
	}
	// madvise refused: plain pages too.
	setTHP(t, "[always] madvise never")
	origAdvise := sysMadvise
	sysMadvise = func(unsafe.Pointer, uintptr, int) error { return unix.EINVAL }
	t.Cleanup(func() { sysMadvise = origAdvise })
	log.Reset()
	b, err := NewArena(ArenaOptions{Name: "auto2", Size: 2 << 20, Hugepages: HugepagesAuto, Logger: testLogger(&log)})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if b.Backing() != BackingPlain || !strings.Contains(log.String(), "madvise(MADV_HUGEPAGE) failed") {
		t.Fatalf("backing %v log %s", b.Backing(), log.String())
	}
}

// An explicit hugepage size is required, not silently replaced.
func TestExplicitHugepagesRefused(t *testing.T) {
	failHugeTLB(t)
	budget, _ := NewBudget("b", 1<<32, nil)
	for _, mode := range []HugepageMode{Hugepages2Mi, Hugepages1Gi} {
		_, err := NewArena(ArenaOptions{Name: "x", Size: 2 << 20, Hugepages: mode, Budget: budget, Logger: testLogger(new(bytes.Buffer))})
		if !errors.Is(err, ErrHugepagesUnavailable) || !strings.Contains(err.Error(), "nr_hugepages") {
			t.Fatalf("%v: got %v", mode, err)
		}
		if budget.Used() != 0 {
			t.Fatalf("budget leaked %d", budget.Used())
		}
	}
}

func TestHugepageModeParse(t *testing.T) {
	for in, want := range map[string]HugepageMode{"off": HugepagesOff, "auto": HugepagesAuto, "2Mi": Hugepages2Mi,
		"2mi": Hugepages2Mi, "1Gi": Hugepages1Gi, "1GiB": Hugepages1Gi, "": HugepagesAuto} {
		got, err := ParseHugepageMode(in)
		if err != nil || got != want {
			t.Errorf("ParseHugepageMode(%q) = %v, %v", in, got, err)
		}
		if in != "" && in != "2mi" && in != "1GiB" && got.String() != in {
			t.Errorf("String() = %q, want %q", got.String(), in)
		}
	}
	if _, err := ParseHugepageMode("4Mi"); err == nil || !strings.Contains(err.Error(), "off, auto, 2Mi or 1Gi") {
		t.Fatalf("bad mode: %v", err)
	}
}

// gaugeValue gathers the package collector and returns one sample.
func gaugeValue(t *testing.T, name, label, value string) float64 {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(NewCollector(nil))
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, lp := range m.GetLabel() {
				if lp.GetName() == label && lp.GetValue() == value {
					if m.GetGauge() != nil {
						return m.GetGauge().GetValue()
					}
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	t.Fatalf("metric %s{%s=%q} not found", name, label, value)
	return 0
}
