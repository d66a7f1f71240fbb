//go:build !linux

package offheap

import "unsafe"

type region struct {
	addr    unsafe.Pointer
	size    uintptr
	backing Backing
}

func mapRegion(size int64, mode HugepageMode) (region, []string, error) {
	return region{}, nil, ErrUnsupported
}

func (r region) unmap() error { return nil }
