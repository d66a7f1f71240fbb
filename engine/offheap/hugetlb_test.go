//go:build linux

package offheap

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// reserveHugepages raises the kernel's pool of pageSize hugepages by n and
// restores the old size when the test ends (even if it fails). It skips the
// test, saying why, when reservation is impossible here.
func reserveHugepages(t *testing.T, pageSize, n int64) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("skipping: reserving hugepages needs root (writing nr_hugepages)")
	}
	file := filepath.Join("/sys/kernel/mm/hugepages", fmt.Sprintf("hugepages-%dkB", pageSize>>10), "nr_hugepages")
	if mi, err := ReadMeminfo("/"); err == nil && mi["Hugepagesize"] == pageSize {
		file = "/proc/sys/vm/nr_hugepages" // the default size, as an operator would reserve it
	}
	raw, err := os.ReadFile(file)
	if err != nil {
		t.Skipf("skipping: this kernel has no %s hugepage pool (%v)", FormatQuantity(pageSize), err)
	}
	old, err := strconv.ParseInt(strings.TrimSpace(string(raw)), 10, 64)
	if err != nil {
		t.Fatalf("%s: %v", file, err)
	}
	t.Cleanup(func() {
		if err := os.WriteFile(file, []byte(strconv.FormatInt(old, 10)), 0o644); err != nil {
			t.Errorf("restoring %s to %d: %v", file, old, err)
		}
	})
	if err := os.WriteFile(file, []byte(strconv.FormatInt(old+n, 10)), 0o644); err != nil {
		t.Skipf("skipping: cannot reserve hugepages: writing %s: %v", file, err)
	}
	pool, err := ReadHugepagePool("/", pageSize)
	if err != nil {
		t.Fatal(err)
	}
	if pool.Available() < n {
		t.Skipf("skipping: asked the kernel for %d more %s hugepages, %d are available (memory too fragmented): %v",
			n, FormatQuantity(pageSize), pool.Available(), pool)
	}
}

func mustPool(t *testing.T, pageSize int64) HugepagePool {
	t.Helper()
	p, err := ReadHugepagePool("/", pageSize)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func TestHugeTLBArena(t *testing.T) {
	for _, tc := range []struct {
		mode    HugepageMode
		backing Backing
		pages   int64
	}{
		{Hugepages2Mi, BackingHugeTLB2Mi, 4},
		{Hugepages1Gi, BackingHugeTLB1Gi, 1},
	} {
		t.Run(tc.mode.String(), func(t *testing.T) {
			ps := tc.mode.PageSize()
			reserveHugepages(t, ps, tc.pages)
			before := mustPool(t, ps)

			var log bytes.Buffer
			a, err := NewArena(ArenaOptions{Name: "huge", Size: tc.pages * ps, Hugepages: tc.mode, Logger: testLogger(&log)})
			if err != nil {
				t.Fatalf("mapping %d reserved %s pages: %v", tc.pages, tc.mode, err)
			}
			defer a.Close()
			if a.Backing() != tc.backing || !strings.Contains(log.String(), "backing="+tc.backing.String()) {
				t.Fatalf("backing %v, log %s", a.Backing(), log.String())
			}
			if v := gaugeValue(t, "cellstore_offheap_hugepage_mode", "mode", tc.backing.String()); v != 1 {
				t.Fatalf("hugepage_mode{mode=%s} = %v", tc.backing, v)
			}
			// MAP_HUGETLB reserves the pages at mmap time...
			mapped := mustPool(t, ps)
			if mapped.Reserved != before.Reserved+tc.pages || mapped.Free != before.Free {
				t.Fatalf("after mmap: %v; before: %v", mapped, before)
			}
			// ...and touching them takes them from the free pool.
			b, _ := a.Bytes()
			for i := int64(0); i < tc.pages; i++ {
				b[i*ps] = 1
				b[(i+1)*ps-1] = 2
			}
			touched := mustPool(t, ps)
			if touched.Free != before.Free-tc.pages || touched.Reserved != before.Reserved {
				t.Fatalf("after touching: %v; before: %v", touched, before)
			}
			if ps == 2<<20 {
				mi, err := ReadMeminfo("/")
				if err != nil {
					t.Fatal(err)
				}
				if mi["Hugepagesize"] == ps && mi["HugePages_Free"] != touched.Free {
					t.Fatalf("/proc/meminfo HugePages_Free %d, sysfs %d", mi["HugePages_Free"], touched.Free)
				}
			}
			if err := a.Close(); err != nil {
				t.Fatal(err)
			}
			after := mustPool(t, ps)
			if after.Free != before.Free || after.Reserved != before.Reserved {
				t.Fatalf("after unmap: %v; before: %v", after, before)
			}

			if tc.mode == Hugepages2Mi {
				// With pages reserved, auto takes hugetlb pages too.
				auto, err := NewArena(ArenaOptions{Name: "auto", Size: 2 * ps, Hugepages: HugepagesAuto, Logger: testLogger(&log)})
				if err != nil {
					t.Fatal(err)
				}
				defer auto.Close()
				if auto.Backing() != BackingHugeTLB2Mi {
					t.Fatalf("auto with free hugepages got %v", auto.Backing())
				}
			}
		})
	}
}

// More hugepages than the pool has: an explicit mode fails with the reason,
// auto falls back.
func TestHugeTLBShortage(t *testing.T) {
	ps := int64(2 << 20)
	reserveHugepages(t, ps, 2)
	avail := mustPool(t, ps).Available()
	_, err := NewArena(ArenaOptions{Name: "short", Size: (avail + 1) * ps, Hugepages: Hugepages2Mi, Logger: testLogger(new(bytes.Buffer))})
	if err == nil || !strings.Contains(err.Error(), "hugepages unavailable") {
		t.Fatalf("mapping more hugepages than available: %v", err)
	}
	var log bytes.Buffer
	a, err := NewArena(ArenaOptions{Name: "short-auto", Size: (avail + 1) * ps, Hugepages: HugepagesAuto, Logger: testLogger(&log)})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	if a.Backing().HugeTLB() || !strings.Contains(log.String(), "MAP_HUGETLB 2Mi failed") {
		t.Fatalf("auto over the pool: backing %v, log %s", a.Backing(), log.String())
	}
}
