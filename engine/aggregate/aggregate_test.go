package aggregate

import (
	"encoding/binary"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	pb "github.com/cellstore/cellstore/engine/api/cellstore/v1"
)

func longBytes(v int64) []byte { return binary.BigEndian.AppendUint64(nil, uint64(v)) }
func doubleBytes(v float64) []byte {
	return binary.BigEndian.AppendUint64(nil, math.Float64bits(v))
}

func TestKeyOrdersAsNumbers(t *testing.T) {
	longs := []int64{math.MinInt64, math.MinInt64 + 1, -1 << 40, -2, -1, 0, 1, 2, 1 << 40, math.MaxInt64 - 1, math.MaxInt64}
	for i := 1; i < len(longs); i++ {
		a, _ := Key(longBytes(longs[i-1]), pb.ValueType_VALUE_TYPE_LONG)
		b, _ := Key(longBytes(longs[i]), pb.ValueType_VALUE_TYPE_LONG)
		if a >= b {
			t.Fatalf("key(%d)=%d >= key(%d)=%d", longs[i-1], a, longs[i], b)
		}
		if got := FromKey(b, pb.ValueType_VALUE_TYPE_LONG).Long; got != longs[i] {
			t.Fatalf("FromKey(Key(%d)) = %d", longs[i], got)
		}
	}
	doubles := []float64{math.Inf(-1), -math.MaxFloat64, -1e10, -1.5, -math.SmallestNonzeroFloat64, 0, math.SmallestNonzeroFloat64, 0.25, 3, math.MaxFloat64, math.Inf(1)}
	for i := 1; i < len(doubles); i++ {
		a, _ := Key(doubleBytes(doubles[i-1]), pb.ValueType_VALUE_TYPE_DOUBLE)
		b, _ := Key(doubleBytes(doubles[i]), pb.ValueType_VALUE_TYPE_DOUBLE)
		if a >= b {
			t.Fatalf("key(%v) >= key(%v)", doubles[i-1], doubles[i])
		}
		if got := FromKey(b, pb.ValueType_VALUE_TYPE_DOUBLE).Double; got != doubles[i] {
			t.Fatalf("FromKey(Key(%v)) = %v", doubles[i], got)
		}
	}
	if a, _ := Key(doubleBytes(math.Copysign(0, -1)), pb.ValueType_VALUE_TYPE_DOUBLE); a != 1<<63 {
		t.Fatalf("-0 has key %x, 0 has %x", a, uint64(1<<63))
	}
	for _, bad := range [][]byte{nil, {1, 2, 3}, make([]byte, 9)} {
		if _, ok := Key(bad, pb.ValueType_VALUE_TYPE_LONG); ok {
			t.Fatalf("a %d-byte value read as a long", len(bad))
		}
	}
	if _, ok := Key(doubleBytes(math.NaN()), pb.ValueType_VALUE_TYPE_DOUBLE); ok {
		t.Fatal("NaN has an order key")
	}
}

// regions splits values into n folds (as n regions would answer) and returns their answers.
func fold(t *testing.T, typ pb.ValueType, regions [][][]byte, h *pb.Histogram) []*pb.AggregateResponse {
	t.Helper()
	var out []*pb.AggregateResponse
	for _, vs := range regions {
		f, err := NewFold(typ, h)
		if err != nil {
			t.Fatal(err)
		}
		for _, v := range vs {
			f.Row()
			f.Add(v)
		}
		out = append(out, f.Response())
	}
	return out
}

func split(rng *rand.Rand, vs [][]byte, n int) [][][]byte {
	out := make([][][]byte, n)
	for _, v := range vs {
		i := rng.IntN(n)
		out[i] = append(out[i], v)
	}
	return out
}

// median finds the value of rank as a client does, pass by pass.
func median(t *testing.T, typ pb.ValueType, regions [][][]byte, rank int64) (Number, int) {
	t.Helper()
	tot := Totals{Type: typ}
	for _, r := range fold(t, typ, regions, nil) {
		tot.Merge(r)
	}
	s, err := NewSearch(rank, &tot)
	if err != nil {
		t.Fatal(err)
	}
	for {
		for _, r := range fold(t, typ, regions, s.Histogram()) {
			if err := s.Add(r); err != nil {
				t.Fatal(err)
			}
		}
		k, done, err := s.Next()
		if err != nil {
			t.Fatal(err)
		}
		if done {
			return FromKey(k, typ), s.Passes()
		}
	}
}

func TestTotalsAndSearchAgainstSorting(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	gens := map[string]func() int64{
		"small":      func() int64 { return rng.Int64N(100) - 50 },
		"wide":       func() int64 { return int64(rng.Uint64()) },
		"duplicates": func() int64 { return []int64{7, 7, 7, -3}[rng.IntN(4)] },
	}
	for name, gen := range gens {
		for _, n := range []int{1, 2, 5, 4097, 30000} {
			var vals []int64
			var raw [][]byte
			for range n {
				v := gen()
				vals = append(vals, v)
				raw = append(raw, longBytes(v))
			}
			raw = append(raw, []byte("not a number"))
			regions := split(rng, raw, 3)
			tot := Totals{Type: pb.ValueType_VALUE_TYPE_LONG}
			for _, r := range fold(t, pb.ValueType_VALUE_TYPE_LONG, regions, nil) {
				tot.Merge(r)
			}
			sorted := slices.Sorted(slices.Values(vals))
			var sum int64
			for _, v := range vals {
				sum += v
			}
			if tot.Values != int64(n) || tot.Skipped != 1 || tot.Rows != int64(n+1) || tot.Sum().Long != sum {
				t.Fatalf("%s/%d: totals %+v, want %d values, 1 skipped, sum %d", name, n, tot, n, sum)
			}
			if mn, _ := tot.Min(); mn.Long != sorted[0] {
				t.Fatalf("%s/%d: min %d, want %d", name, n, mn.Long, sorted[0])
			}
			if mx, _ := tot.Max(); mx.Long != sorted[n-1] {
				t.Fatalf("%s/%d: max %d, want %d", name, n, mx.Long, sorted[n-1])
			}
			for _, rank := range []int64{0, int64(n-1) / 2, int64(n - 1)} {
				got, passes := median(t, pb.ValueType_VALUE_TYPE_LONG, regions, rank)
				if got.Long != sorted[rank] {
					t.Fatalf("%s/%d: rank %d is %d, want %d", name, n, rank, got.Long, sorted[rank])
				}
				if passes > 8 {
					t.Fatalf("%s/%d: %d passes", name, n, passes)
				}
			}
		}
	}
	// Doubles, and std against the definition.
	var raw [][]byte
	var vals []float64
	for range 20000 {
		v := rng.NormFloat64()*1e3 + 5
		vals = append(vals, v)
		raw = append(raw, doubleBytes(v))
	}
	regions := split(rng, raw, 4)
	tot := Totals{Type: pb.ValueType_VALUE_TYPE_DOUBLE}
	for _, r := range fold(t, pb.ValueType_VALUE_TYPE_DOUBLE, regions, nil) {
		tot.Merge(r)
	}
	var mean, ss float64
	for _, v := range vals {
		mean += v / float64(len(vals))
	}
	for _, v := range vals {
		ss += (v - mean) * (v - mean)
	}
	if std := math.Sqrt(ss / float64(len(vals))); math.Abs(tot.Std()-std) > 1e-6*std || math.Abs(tot.Avg()-mean) > 1e-9*math.Abs(mean)+1e-9 {
		t.Fatalf("avg %v std %v, want %v %v", tot.Avg(), tot.Std(), mean, std)
	}
	sorted := slices.Sorted(slices.Values(vals))
	if got, _ := median(t, pb.ValueType_VALUE_TYPE_DOUBLE, regions, 9999); got.Double != sorted[9999] {
		t.Fatalf("double rank 9999 is %v, want %v", got.Double, sorted[9999])
	}
}

func TestFoldRefusesBadHistograms(t *testing.T) {
	for _, h := range []*pb.Histogram{
		{Lo: 5, Hi: 4, Buckets: 1},
		{Hi: 10, Buckets: 0},
		{Hi: 10, Buckets: MaxBuckets + 1},
		{Hi: 10, Buckets: 4, MaxValues: -1},
		{Hi: 10, Buckets: 4, MaxValues: MaxKeyValues + 1},
	} {
		if _, err := NewFold(pb.ValueType_VALUE_TYPE_LONG, h); err == nil {
			t.Fatalf("histogram %v accepted", h)
		}
	}
	if _, err := NewFold(pb.ValueType(7), nil); err == nil {
		t.Fatal("value type 7 accepted")
	}
}

func TestSearchSaysWhenValuesChanged(t *testing.T) {
	regions := [][][]byte{{longBytes(1), longBytes(2), longBytes(3)}}
	tot := Totals{Type: pb.ValueType_VALUE_TYPE_LONG}
	for _, r := range fold(t, pb.ValueType_VALUE_TYPE_LONG, regions, nil) {
		tot.Merge(r)
	}
	s, err := NewSearch(2, &tot)
	if err != nil {
		t.Fatal(err)
	}
	// The largest value was deleted before the pass.
	for _, r := range fold(t, pb.ValueType_VALUE_TYPE_LONG, [][][]byte{{longBytes(1), longBytes(2)}}, s.Histogram()) {
		_ = s.Add(r)
	}
	if _, _, err := s.Next(); err != ErrChanged {
		t.Fatalf("Next = %v, want ErrChanged", err)
	}
}

// Histograms over the whole key space count its first and last keys (one bucket's width is the
// largest a uint64 holds; it used to wrap to 0 and divide by it).
func TestHistogramOverTheWholeKeySpace(t *testing.T) {
	for _, buckets := range []int32{1, 2, 3} {
		f, err := NewFold(pb.ValueType_VALUE_TYPE_LONG, &pb.Histogram{Lo: 0, Hi: math.MaxUint64, Buckets: buckets})
		if err != nil {
			t.Fatal(err)
		}
		for _, v := range []int64{math.MinInt64, -1, 0, math.MaxInt64} {
			f.Add(longBytes(v))
		}
		var n int64
		for _, c := range f.Response().GetBuckets() {
			n += c
		}
		if n != 4 || f.Response().GetBuckets()[0] == 0 || f.Response().GetBuckets()[buckets-1] == 0 {
			t.Fatalf("%d buckets over the whole key space: %v", buckets, f.Response().GetBuckets())
		}
	}
}
