package offheap

import (
	"path/filepath"
	"strings"
	"testing"
)

func sample(name string) string { return filepath.Join("testdata", "cgroup", name) }

func TestReadCgroupMemory(t *testing.T) {
	const gi = int64(1) << 30
	for _, tc := range []struct {
		tree      string
		version   int
		limit     int64
		limitFile string
		hugetlb   bool
	}{
		{"v2-nested", 2, 4 * gi, "/sys/fs/cgroup/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod1234.slice/memory.max", false},
		{"v2-namespace", 2, 2 * gi, "/sys/fs/cgroup/memory.max", false},
		{"v2-unlimited", 2, Unlimited, "", false},
		{"v2-hugetlb-accounting", 2, 8 * gi, "/sys/fs/cgroup/pod/memory.max", true},
		{"v1", 1, 3 * gi, "/sys/fs/cgroup/memory/kubepods/burstable/pod5678/memory.limit_in_bytes", false},
		{"v1-docker", 1, gi, "/sys/fs/cgroup/memory/memory.limit_in_bytes", false},
		{"hybrid", 1, 6 * gi, "/sys/fs/cgroup/memory/process_api/233b5d/memory.limit_in_bytes", false},
		{"none", 0, Unlimited, "", false},
	} {
		t.Run(tc.tree, func(t *testing.T) {
			cg, err := ReadCgroupMemory(sample(tc.tree))
			if err != nil {
				t.Fatal(err)
			}
			if cg.Version != tc.version || cg.Limit != tc.limit || cg.LimitFile != tc.limitFile || cg.HugetlbAccounting != tc.hugetlb {
				t.Fatalf("got %+v", cg)
			}
			if cg.Limited() != (tc.limit >= 0) {
				t.Fatalf("Limited() = %v", cg.Limited())
			}
			if s := cg.String(); s == "" {
				t.Fatal("empty String()")
			}
		})
	}
}

func TestReadCgroupMemoryErrors(t *testing.T) {
	_, err := ReadCgroupMemory(sample("malformed"))
	if err == nil || !strings.Contains(err.Error(), `cannot parse "lots"`) || !strings.Contains(err.Error(), "memory.max") {
		t.Fatalf("malformed memory.max: %v", err)
	}
}

// The real machine: whatever it is, reading must work.
func TestReadCgroupMemoryHost(t *testing.T) {
	cg, err := ReadCgroupMemory("")
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("host: %v", cg)
}

func TestReadCgroupHugetlb(t *testing.T) {
	for _, tc := range []struct {
		tree    string
		avail   int64
		limited bool
	}{
		{"v2-nested", 768 << 20, true}, // pod: 1Gi limit, 256Mi used
		{"v1", 1536 << 20, true},       // pod: 2Gi limit, 512Mi used
		{"v2-unlimited", 0, false},
		{"none", 0, false},
	} {
		avail, limited, err := ReadCgroupHugetlb(sample(tc.tree), 2<<20)
		if err != nil || limited != tc.limited || limited && avail != tc.avail {
			t.Errorf("%s: avail %d limited %v err %v; want %d %v", tc.tree, avail, limited, err, tc.avail, tc.limited)
		}
	}
}

func TestReadHugepagePool(t *testing.T) {
	p, err := ReadHugepagePool(sample("v2-nested"), 2<<20)
	if err != nil || p.Total != 2048 || p.Free != 2048 || p.Available() != 2048 {
		t.Fatalf("sysfs pool: %+v %v", p, err)
	}
	// No sysfs: /proc/meminfo for the default size.
	p, err = ReadHugepagePool(sample("v1-docker"), 2<<20)
	if err != nil || p.Total != 0 || !strings.HasSuffix(p.Source, "meminfo") {
		t.Fatalf("meminfo pool: %+v %v", p, err)
	}
	if _, err := ReadHugepagePool(sample("v1-docker"), 1<<30); err == nil || !strings.Contains(err.Error(), "no 1Gi hugepage pool") {
		t.Fatalf("missing 1Gi pool: %v", err)
	}
}

func TestUnescapeMount(t *testing.T) {
	for in, want := range map[string]string{`/a\040b`: "/a b", `/plain`: "/plain", `/x\011y\134`: "/x\ty\\", `/bad\9`: `/bad\9`, `\`: `\`} {
		if got := unescapeMount(in); got != want {
			t.Errorf("unescapeMount(%q) = %q, want %q", in, got, want)
		}
	}
}
