//go:build linux

package offheap

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Syscall seams; tests replace them to simulate failures (for example
// MAP_HUGETLB refused in auto mode).
var (
	sysMmap    = unix.MmapPtr
	sysMunmap  = unix.MunmapPtr
	sysMadvise = func(addr unsafe.Pointer, length uintptr, advice int) error {
		return unix.Madvise(unsafe.Slice((*byte)(addr), length), advice)
	}
	// thpEnabledFile is the kernel's transparent hugepage policy.
	thpEnabledFile = "/sys/kernel/mm/transparent_hugepage/enabled"
)

const thpSize = 2 << 20

// region is one anonymous private mapping.
type region struct {
	addr    unsafe.Pointer
	size    uintptr
	backing Backing
}

// mapRegion maps size bytes (already rounded by the caller for the mode) and
// returns what it obtained together with human-readable notes on every
// fallback taken, for the log line.
func mapRegion(size int64, mode HugepageMode) (region, []string, error) {
	var notes []string
	switch mode {
	case Hugepages2Mi, Hugepages1Gi:
		r, err := mapHugeTLB(size, mode.PageSize())
		if err != nil {
			return region{}, nil, fmt.Errorf("%w: mmap(MAP_HUGETLB) of %s in %s pages: %v "+
				"(reserve hugepages with vm.nr_hugepages or request hugepages-%s in the pod, or use --hugepages=auto)",
				ErrHugepagesUnavailable, FormatQuantity(size), mode, err, mode)
		}
		return r, nil, nil
	case HugepagesAuto:
		r, err := mapHugeTLB(size, thpSize)
		if err == nil {
			return r, nil, nil
		}
		notes = append(notes, fmt.Sprintf("MAP_HUGETLB 2Mi failed: %v", err))
		r, note, err := mapTHP(size)
		if err == nil {
			return r, notes, nil
		}
		notes = append(notes, note)
		r, err = mapPlain(size, false)
		return r, notes, err
	case HugepagesOff:
		r, err := mapPlain(size, true)
		return r, nil, err
	}
	return region{}, nil, fmt.Errorf("offheap: unknown hugepage mode %v", mode)
}

func mapHugeTLB(size, pageSize int64) (region, error) {
	if size%pageSize != 0 {
		return region{}, fmt.Errorf("size %d is not a multiple of the hugepage size %d", size, pageSize)
	}
	flags := unix.MAP_PRIVATE | unix.MAP_ANONYMOUS | unix.MAP_HUGETLB
	backing := BackingHugeTLB2Mi
	switch pageSize {
	case 2 << 20:
		flags |= unix.MAP_HUGE_2MB
	case 1 << 30:
		flags |= unix.MAP_HUGE_1GB
		backing = BackingHugeTLB1Gi
	default:
		return region{}, fmt.Errorf("unsupported hugepage size %d", pageSize)
	}
	p, err := sysMmap(-1, 0, nil, uintptr(size), unix.PROT_READ|unix.PROT_WRITE, flags)
	if err != nil {
		return region{}, err
	}
	return region{addr: p, size: uintptr(size), backing: backing}, nil
}

// thpAvailable reports whether madvise(MADV_HUGEPAGE) can have an effect.
func thpAvailable() (bool, string) {
	b, err := os.ReadFile(thpEnabledFile)
	if err != nil {
		return false, fmt.Sprintf("transparent hugepages unavailable (%v)", err)
	}
	if bytes.Contains(b, []byte("[never]")) {
		return false, "transparent hugepages disabled (" + thpEnabledFile + " is never)"
	}
	return true, ""
}

// mapTHP maps size bytes aligned to 2 MiB (over-mapping and trimming, so the
// kernel can use whole huge pages) and advises MADV_HUGEPAGE.
func mapTHP(size int64) (region, string, error) {
	if ok, why := thpAvailable(); !ok {
		return region{}, why, errors.New(why)
	}
	total := uintptr(size) + thpSize
	p, err := sysMmap(-1, 0, nil, total, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS|unix.MAP_NORESERVE)
	if err != nil {
		return region{}, fmt.Sprintf("mmap for THP failed: %v", err), err
	}
	start := uintptr(p)
	aligned := (start + thpSize - 1) &^ (thpSize - 1)
	if head := aligned - start; head > 0 {
		if err := sysMunmap(p, head); err != nil {
			_ = sysMunmap(p, total)
			return region{}, fmt.Sprintf("munmap of THP alignment head failed: %v", err), err
		}
	}
	alignedPtr := unsafe.Add(p, aligned-start)
	if tail := start + total - (aligned + uintptr(size)); tail > 0 {
		if err := sysMunmap(unsafe.Add(alignedPtr, size), tail); err != nil {
			_ = sysMunmap(alignedPtr, uintptr(size))
			return region{}, fmt.Sprintf("munmap of THP alignment tail failed: %v", err), err
		}
	}
	if err := sysMadvise(alignedPtr, uintptr(size), unix.MADV_HUGEPAGE); err != nil {
		_ = sysMunmap(alignedPtr, uintptr(size))
		return region{}, fmt.Sprintf("madvise(MADV_HUGEPAGE) failed: %v", err), err
	}
	return region{addr: alignedPtr, size: uintptr(size), backing: BackingTHP}, "", nil
}

func mapPlain(size int64, noHuge bool) (region, error) {
	p, err := sysMmap(-1, 0, nil, uintptr(size), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS|unix.MAP_NORESERVE)
	if err != nil {
		return region{}, fmt.Errorf("mmap of %s failed: %w", FormatQuantity(size), err)
	}
	if noHuge {
		// Best effort: keeps "off" meaning base pages even with THP=always.
		_ = sysMadvise(p, uintptr(size), unix.MADV_NOHUGEPAGE)
	}
	return region{addr: p, size: uintptr(size), backing: BackingPlain}, nil
}

func (r region) unmap() error {
	if r.addr == nil {
		return nil
	}
	return sysMunmap(r.addr, r.size)
}
