package resources

import (
	"errors"
	"strings"
	"testing"

	"github.com/cellstore/cellstore/operator/api/v1alpha1"
	"k8s.io/utils/ptr"
)

func size(s string) *v1alpha1.ByteSize { b := v1alpha1.ByteSize(s); return &b }

func TestPlanRegionServerMemory(t *testing.T) {
	const overhead4Gi = 4 * gi / 10 // 409.6Mi, more than 256Mi
	tests := []struct {
		name    string
		mem     v1alpha1.RegionServerMemory
		want    MemoryPlan
		wantErr string // substring; "" = no error
		budget  bool   // the error is a *MemoryError
	}{
		{
			name: "defaults: 2Gi, a quarter each off-heap, the heap gets the rest",
			mem:  v1alpha1.RegionServerMemory{},
			want: MemoryPlan{Limit: 2 * gi, Heap: 768 * mi, HeapSource: "derived", MemstoreOffHeap: 512 * mi, BlockCacheOffHeap: 512 * mi,
				BlockCacheOnHeap: 76 * mi, Overhead: 256 * mi, InMemoryOffHeap: gi},
		},
		{
			name: "explicit budgets, derived heap",
			mem:  v1alpha1.RegionServerMemory{Limit: size("8Gi"), MemstoreOffHeapSize: size("2Gi"), BlockCacheOffHeapSize: size("3Gi"), BlockCacheOnHeapSize: size("256Mi")},
			want: MemoryPlan{Limit: 8 * gi, Heap: 3*gi - 8*gi/10, HeapSource: "derived", MemstoreOffHeap: 2 * gi, BlockCacheOffHeap: 3 * gi,
				BlockCacheOnHeap: 256 * mi, Overhead: 8 * gi / 10, InMemoryOffHeap: 5 * gi},
		},
		{
			name: "heapPercent: unset off-heap budgets share what is left",
			mem:  v1alpha1.RegionServerMemory{Limit: size("4Gi"), HeapPercent: ptr.To(int32(50))},
			want: MemoryPlan{Limit: 4 * gi, Heap: 2 * gi, HeapSource: "memory.heapPercent", MemstoreOffHeap: 819 * mi, BlockCacheOffHeap: 819 * mi,
				BlockCacheOnHeap: 204 * mi, Overhead: overhead4Gi, InMemoryOffHeap: 1638 * mi},
		},
		{
			name: "hugepages: off-heap in hugepages, half each, heap is the limit less the overhead",
			mem:  v1alpha1.RegionServerMemory{HugePages: &v1alpha1.HugePagesSpec{PageSize: "2Mi", Amount: "1Gi"}},
			want: MemoryPlan{Limit: 2 * gi, Heap: 1792 * mi, HeapSource: "derived", MemstoreOffHeap: 512 * mi, BlockCacheOffHeap: 512 * mi,
				BlockCacheOnHeap: 179 * mi, Overhead: 256 * mi, HugePageSize: 2 * mi, HugePageName: "2Mi", HugePages: gi},
		},
		{
			name: "hugepages 1Gi with one budget set: the other takes the rest",
			mem: v1alpha1.RegionServerMemory{Limit: size("16Gi"), HeapLimit: size("8Gi"), MemstoreOffHeapSize: size("1Gi"),
				HugePages: &v1alpha1.HugePagesSpec{PageSize: "1Gi", Amount: "4Gi"}},
			want: MemoryPlan{Limit: 16 * gi, Heap: 8 * gi, HeapSource: "memory.heapLimit", MemstoreOffHeap: gi, BlockCacheOffHeap: 3 * gi,
				BlockCacheOnHeap: 819 * mi, Overhead: 16 * gi / 10, HugePageSize: gi, HugePageName: "1Gi", HugePages: 4 * gi},
		},
		{
			name:    "budgets over the limit",
			mem:     v1alpha1.RegionServerMemory{Limit: size("4Gi"), HeapLimit: size("3Gi"), MemstoreOffHeapSize: size("1Gi")},
			wantErr: "region server memory budgets exceed the memory limit: heap 3Gi (memory.heapLimit",
			budget:  true,
		},
		{
			name:    "the numbers are in the message",
			mem:     v1alpha1.RegionServerMemory{Limit: size("4Gi"), HeapLimit: size("3Gi"), MemstoreOffHeapSize: size("1Gi")},
			wantErr: "+ off-heap memstore 1Gi + off-heap block cache 0 + overhead 429496729 = 4724464025; spec.regionServers.memory.limit is 4Gi (429496729 over)",
			budget:  true,
		},
		{
			name:    "off-heap leaves no heap",
			mem:     v1alpha1.RegionServerMemory{Limit: size("2Gi"), MemstoreOffHeapSize: size("1Gi"), BlockCacheOffHeapSize: size("768Mi")},
			wantErr: "the heap 0 leaves less than 64Mi beyond the on-heap block cache 0",
			budget:  true,
		},
		{
			name:    "on-heap cache over 80% of the heap",
			mem:     v1alpha1.RegionServerMemory{Limit: size("4Gi"), HeapLimit: size("1Gi"), BlockCacheOnHeapSize: size("900Mi")},
			wantErr: "the on-heap block cache 900Mi is more than 80% of the heap 1Gi",
			budget:  true,
		},
		{
			name: "hugepages rounding: each budget takes whole pages",
			mem: v1alpha1.RegionServerMemory{MemstoreOffHeapSize: size("3Mi"), BlockCacheOffHeapSize: size("3Mi"),
				HugePages: &v1alpha1.HugePagesSpec{PageSize: "2Mi", Amount: "6Mi"}},
			wantErr: "each rounded up to whole 2Mi pages, need 8Mi but memory.hugePages.amount is 6Mi",
			budget:  true,
		},
		{
			name:    "hugepage amount not a multiple of the page",
			mem:     v1alpha1.RegionServerMemory{HugePages: &v1alpha1.HugePagesSpec{PageSize: "1Gi", Amount: "1536Mi"}},
			wantErr: "must be a positive multiple of the page size 1Gi",
		},
		{
			name:    "limit below the minimum",
			mem:     v1alpha1.RegionServerMemory{Limit: size("512Mi")},
			wantErr: "memory.limit 512Mi is below the minimum 1Gi",
			budget:  true,
		},
		{
			name:    "heapLimit and heapPercent",
			mem:     v1alpha1.RegionServerMemory{HeapLimit: size("1Gi"), HeapPercent: ptr.To(int32(40))},
			wantErr: "heapLimit and spec.regionServers.memory.heapPercent are both set",
		},
		{
			name:    "not a quantity",
			mem:     v1alpha1.RegionServerMemory{Limit: size("lots")},
			wantErr: `spec.regionServers.memory.limit: "lots" is not a size`,
		},
		{
			name:    "fractional bytes",
			mem:     v1alpha1.RegionServerMemory{HeapLimit: size("0.5")},
			wantErr: "is not a whole, non-negative number of bytes",
		},
		{
			name:    "negative",
			mem:     v1alpha1.RegionServerMemory{MemstoreOffHeapSize: size("-1Gi")},
			wantErr: "is not a whole, non-negative number of bytes",
		},
		{
			name:    "unknown page size",
			mem:     v1alpha1.RegionServerMemory{HugePages: &v1alpha1.HugePagesSpec{PageSize: "4Ki", Amount: "1Gi"}},
			wantErr: `hugePages.pageSize "4Ki" is not 2Mi or 1Gi`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := PlanRegionServerMemory(tt.mem)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("error = %v, want it to contain %q", err, tt.wantErr)
				}
				var me *MemoryError
				if errors.As(err, &me) != tt.budget {
					t.Errorf("error %v: *MemoryError = %v, want %v", err, !tt.budget, tt.budget)
				}
				return
			}
			if err != nil {
				t.Fatalf("unexpected error: %v", err)
			}
			if got != tt.want {
				t.Errorf("plan\n got %+v\nwant %+v", got, tt.want)
			}
			if got.Total() > got.Limit {
				t.Errorf("accepted plan does not fit: total %d > limit %d", got.Total(), got.Limit)
			}
		})
	}
}

func TestOverheadAndMasterHeap(t *testing.T) {
	for _, tt := range []struct{ limit, overhead, masterHeap int64 }{
		{gi, 256 * mi, 768 * mi},
		{2560 * mi, 256 * mi, 2304 * mi},
		{10 * gi, gi, 9 * gi},
		{300 * mi, 256 * mi, 0}, // not enough left: no GOMEMLIMIT
		{0, 256 * mi, 0},
	} {
		if got := Overhead(tt.limit); got != tt.overhead {
			t.Errorf("Overhead(%s) = %s, want %s", FormatBytes(tt.limit), FormatBytes(got), FormatBytes(tt.overhead))
		}
		if got := MasterHeapLimit(tt.limit); got != tt.masterHeap {
			t.Errorf("MasterHeapLimit(%s) = %s, want %s", FormatBytes(tt.limit), FormatBytes(got), FormatBytes(tt.masterHeap))
		}
	}
}
