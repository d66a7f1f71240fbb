package offheap

import (
	"fmt"
	"os"
	"strings"
)

// basePageSize is the kernel's base page size.
var basePageSize = int64(os.Getpagesize())

// HugepageMode is what the configuration asks for (--hugepages).
type HugepageMode uint8

const (
	// HugepagesAuto tries hugetlbfs pages of the default size (MAP_HUGETLB),
	// then transparent hugepages (madvise MADV_HUGEPAGE), then plain pages.
	HugepagesAuto HugepageMode = iota
	// HugepagesOff uses plain pages and opts out of transparent hugepages
	// (MADV_NOHUGEPAGE), so the result does not depend on the THP setting.
	HugepagesOff
	// Hugepages2Mi requires 2 MiB hugetlbfs pages (MAP_HUGETLB|MAP_HUGE_2MB).
	Hugepages2Mi
	// Hugepages1Gi requires 1 GiB hugetlbfs pages (MAP_HUGETLB|MAP_HUGE_1GB).
	Hugepages1Gi
)

// ParseHugepageMode parses off, auto, 2Mi or 1Gi (case-insensitive; 2M,
// 2MiB, 1G and 1GiB are accepted too).
func ParseHugepageMode(s string) (HugepageMode, error) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "off", "none", "false", "no":
		return HugepagesOff, nil
	case "auto", "":
		return HugepagesAuto, nil
	case "2mi", "2m", "2mib":
		return Hugepages2Mi, nil
	case "1gi", "1g", "1gib":
		return Hugepages1Gi, nil
	}
	return HugepagesAuto, fmt.Errorf("invalid hugepages mode %q: want off, auto, 2Mi or 1Gi", s)
}

func (m HugepageMode) String() string {
	switch m {
	case HugepagesAuto:
		return "auto"
	case HugepagesOff:
		return "off"
	case Hugepages2Mi:
		return "2Mi"
	case Hugepages1Gi:
		return "1Gi"
	}
	return fmt.Sprintf("HugepageMode(%d)", uint8(m))
}

// PageSize returns the hugetlb page size an explicit mode requires, or 0 for
// auto and off.
func (m HugepageMode) PageSize() int64 {
	switch m {
	case Hugepages2Mi:
		return 2 << 20
	case Hugepages1Gi:
		return 1 << 30
	}
	return 0
}

// Set implements pflag.Value.
func (m *HugepageMode) Set(s string) error {
	v, err := ParseHugepageMode(s)
	if err != nil {
		return err
	}
	*m = v
	return nil
}

// Type implements pflag.Value.
func (m *HugepageMode) Type() string { return "off|auto|2Mi|1Gi" }

// Backing is the kind of pages an arena actually obtained.
type Backing uint8

const (
	// BackingPlain is ordinary base pages (4 KiB on x86-64).
	BackingPlain Backing = iota
	// BackingTHP is an anonymous mapping advised with MADV_HUGEPAGE and
	// aligned to 2 MiB, with transparent hugepages enabled in the kernel
	// ("always" or "madvise"). The kernel may still back parts of it with base
	// pages (see AnonHugePages in /proc/self/smaps).
	BackingTHP
	// BackingHugeTLB2Mi is hugetlbfs 2 MiB pages (MAP_HUGETLB).
	BackingHugeTLB2Mi
	// BackingHugeTLB1Gi is hugetlbfs 1 GiB pages (MAP_HUGETLB|MAP_HUGE_1GB).
	BackingHugeTLB1Gi

	numBackings
)

// Backings lists every Backing, in metric order.
var Backings = [...]Backing{BackingPlain, BackingTHP, BackingHugeTLB2Mi, BackingHugeTLB1Gi}

// String returns the label used in logs and the cellstore_offheap_hugepage_mode
// metric: none, thp, hugetlb-2Mi or hugetlb-1Gi.
func (b Backing) String() string {
	switch b {
	case BackingPlain:
		return "none"
	case BackingTHP:
		return "thp"
	case BackingHugeTLB2Mi:
		return "hugetlb-2Mi"
	case BackingHugeTLB1Gi:
		return "hugetlb-1Gi"
	}
	return fmt.Sprintf("Backing(%d)", uint8(b))
}

// HugeTLB reports whether b is hugetlbfs memory, which the kernel reserves
// up front and does not charge to the memory cgroup (unless cgroup v2 is
// mounted with memory_hugetlb_accounting).
func (b Backing) HugeTLB() bool { return b == BackingHugeTLB2Mi || b == BackingHugeTLB1Gi }

// PageSize returns the page size of the backing (THP counts as 2 MiB for
// alignment purposes).
func (b Backing) PageSize() int64 {
	switch b {
	case BackingTHP, BackingHugeTLB2Mi:
		return 2 << 20
	case BackingHugeTLB1Gi:
		return 1 << 30
	}
	return basePageSize
}
