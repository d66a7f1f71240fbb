// Package aggregate is the arithmetic of the aggregation endpoint (HBase's
// AggregateImplementation): how a cell's value reads as a number, the fold a
// region server runs over one region's values, and how a client merges the
// regions' answers, including the exact median, which it narrows down over
// a few passes of per-region histograms.
//
// Values compare by their order key (Key): the value's order as an unsigned
// integer, for longs and doubles alike, so one histogram serves both types.
package aggregate

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"slices"

	pb "github.com/cellstore/cellstore/engine/api/cellstore/v1"
)

// Limits of a histogram request (a server refuses more).
const (
	MaxBuckets   = 4096
	MaxKeyValues = 1 << 16
)

// Key is the order key of an 8-byte value of type t; ok is false for a value
// of another length (HBase's interpreters read it as null and skip it), and
// for a double that is NaN (it has no place in the order).
func Key(v []byte, t pb.ValueType) (uint64, bool) {
	if len(v) != 8 {
		return 0, false
	}
	u := binary.BigEndian.Uint64(v)
	if t == pb.ValueType_VALUE_TYPE_DOUBLE {
		f := math.Float64frombits(u)
		if math.IsNaN(f) {
			return 0, false
		}
		if f == 0 {
			u = 0 // -0 orders as 0
		}
		if u&(1<<63) != 0 {
			return ^u, true
		}
		return u | 1<<63, true
	}
	return u ^ 1<<63, true
}

// Number is a value of an aggregation: an int64 for LONG, a float64 for DOUBLE.
type Number struct {
	Type   pb.ValueType
	Long   int64
	Double float64
}

// FromKey is the value whose order key is k.
func FromKey(k uint64, t pb.ValueType) Number {
	if t == pb.ValueType_VALUE_TYPE_DOUBLE {
		if k&(1<<63) != 0 {
			return Number{Type: t, Double: math.Float64frombits(k &^ (1 << 63))}
		}
		return Number{Type: t, Double: math.Float64frombits(^k)}
	}
	return Number{Type: t, Long: int64(k ^ 1<<63)}
}

// Float is n as a float64.
func (n Number) Float() float64 {
	if n.Type == pb.ValueType_VALUE_TYPE_DOUBLE {
		return n.Double
	}
	return float64(n.Long)
}

func (n Number) String() string {
	if n.Type == pb.ValueType_VALUE_TYPE_DOUBLE {
		return fmt.Sprint(n.Double)
	}
	return fmt.Sprint(n.Long)
}

// CheckType refuses a value type this package does not know.
func CheckType(t pb.ValueType) error {
	if t != pb.ValueType_VALUE_TYPE_LONG && t != pb.ValueType_VALUE_TYPE_DOUBLE {
		return fmt.Errorf("aggregate: unknown value type %v (LONG or DOUBLE)", t)
	}
	return nil
}

// Fold is a region server's fold of one region's values: feed it each
// row's cells, then take its Response.
type Fold struct {
	t     pb.ValueType
	h     *pb.Histogram
	width uint64
	resp  pb.AggregateResponse
	keys  []uint64
	min   uint64
	max   uint64
}

// NewFold starts a fold of values of type t, with a histogram when h is
// not nil (checked against the limits).
func NewFold(t pb.ValueType, h *pb.Histogram) (*Fold, error) {
	if err := CheckType(t); err != nil {
		return nil, err
	}
	f := &Fold{t: t, h: h}
	if h != nil {
		if h.GetBuckets() < 1 || h.GetBuckets() > MaxBuckets {
			return nil, fmt.Errorf("aggregate: histogram of %d buckets (1 to %d)", h.GetBuckets(), MaxBuckets)
		}
		if h.GetMaxValues() < 0 || h.GetMaxValues() > MaxKeyValues {
			return nil, fmt.Errorf("aggregate: histogram returning up to %d values (0 to %d)", h.GetMaxValues(), MaxKeyValues)
		}
		if h.GetLo() > h.GetHi() {
			return nil, fmt.Errorf("aggregate: histogram range [%d, %d] is empty", h.GetLo(), h.GetHi())
		}
		f.width = bucketWidth(h.GetLo(), h.GetHi(), h.GetBuckets())
		f.resp.Buckets = make([]int64, h.GetBuckets())
		f.resp.KeysComplete = true
	}
	return f, nil
}

// bucketWidth makes n buckets of equal width cover [lo, hi] (one bucket over the whole key space
// is as wide as a uint64 goes: its last key is counted in it by Add's bound).
func bucketWidth(lo, hi uint64, n int32) uint64 {
	w := (hi - lo) / uint64(n)
	if w == math.MaxUint64 {
		return w
	}
	return w + 1
}

// Row counts a row the scan returned cells of.
func (f *Fold) Row() { f.resp.Rows++ }

// Add folds one cell value in.
func (f *Fold) Add(v []byte) {
	k, ok := Key(v, f.t)
	if !ok {
		f.resp.Skipped++
		return
	}
	if f.resp.Values == 0 || k < f.min {
		f.min = k
	}
	if f.resp.Values == 0 || k > f.max {
		f.max = k
	}
	f.resp.Values++
	n := FromKey(k, f.t)
	if f.t == pb.ValueType_VALUE_TYPE_DOUBLE {
		f.resp.SumDouble += n.Double
		f.resp.SumSquares += n.Double * n.Double
	} else {
		f.resp.SumLong += n.Long // wraps, as Java's long
		f.resp.SumSquaresLong += n.Long * n.Long
		f.resp.SumSquares += float64(n.Long) * float64(n.Long)
	}
	if f.h == nil {
		return
	}
	switch {
	case k < f.h.GetLo():
		f.resp.Below++
	case k <= f.h.GetHi():
		f.resp.Buckets[min((k-f.h.GetLo())/f.width, uint64(len(f.resp.Buckets)-1))]++
		if f.resp.KeysComplete {
			if len(f.keys) < int(f.h.GetMaxValues()) {
				f.keys = append(f.keys, k)
			} else {
				f.resp.KeysComplete, f.keys = false, nil
			}
		}
	}
}

// Response is the fold's answer so far.
func (f *Fold) Response() *pb.AggregateResponse {
	r := &f.resp
	r.MinKey, r.MaxKey = f.min, f.max
	if r.KeysComplete {
		r.Keys = f.keys
	}
	return r
}

// Totals merges the regions' answers.
type Totals struct {
	Type pb.ValueType
	// Rows the scan returned cells of; Values read as numbers; Skipped cells that were not
	// numbers of the type (another length).
	Rows, Values, Skipped int64
	sumLong, sqLong       int64
	sumDouble, sumSquares float64
	min, max              uint64
}

// Merge adds one region's answer.
func (t *Totals) Merge(r *pb.AggregateResponse) {
	if r.GetValues() > 0 {
		if t.Values == 0 || r.GetMinKey() < t.min {
			t.min = r.GetMinKey()
		}
		if t.Values == 0 || r.GetMaxKey() > t.max {
			t.max = r.GetMaxKey()
		}
	}
	t.Rows += r.GetRows()
	t.Values += r.GetValues()
	t.Skipped += r.GetSkipped()
	t.sumLong += r.GetSumLong()
	t.sqLong += r.GetSumSquaresLong()
	t.sumDouble += r.GetSumDouble()
	t.sumSquares += r.GetSumSquares()
}

// SumSquares is the sum of the values' squares: a wrapping int64 for LONG (HBase's long
// interpreter's promoted type), a float64 for DOUBLE.
func (t *Totals) SumSquares() Number {
	return Number{Type: t.Type, Long: t.sqLong, Double: t.sumSquares}
}

// Sum of the values (an int64 that wraps as Java's long, for LONG).
func (t *Totals) Sum() Number {
	return Number{Type: t.Type, Long: t.sumLong, Double: t.sumDouble}
}

// Min and Max are the smallest and largest value; ok is false when there were none.
func (t *Totals) Min() (Number, bool) { return FromKey(t.min, t.Type), t.Values > 0 }
func (t *Totals) Max() (Number, bool) { return FromKey(t.max, t.Type), t.Values > 0 }

// Avg is the mean of the values (NaN without any).
func (t *Totals) Avg() float64 {
	if t.Values == 0 {
		return math.NaN()
	}
	return t.Sum().Float() / float64(t.Values)
}

// Std is the population standard deviation of the values (as HBase's std; NaN without any).
func (t *Totals) Std() float64 {
	if t.Values == 0 {
		return math.NaN()
	}
	avg := t.Avg()
	v := t.sumSquares/float64(t.Values) - avg*avg
	if v < 0 {
		v = 0 // rounding
	}
	return math.Sqrt(v)
}

// ErrChanged says the values changed while a median was searched for.
var ErrChanged = errors.New("aggregate: the values changed during the median search (writes or deletes in the range): ask again")

// Search finds the value of a given rank (0 = the smallest) among the values, in
// passes: each pass the client sends Histogram to every region, merges their
// answers with Add and calls Next, until Next says it is done.
type Search struct {
	rank   int64
	lo, hi uint64
	// merged answers of the current pass
	below    int64
	buckets  []int64
	keys     []uint64
	complete bool
	passes   int
}

// Buckets and values per pass: 1024 buckets narrow a 64-bit range in at most 7 passes; a range
// of at most 4096 values per region comes back whole.
const (
	searchBuckets = 1024
	searchValues  = 4096
)

// NewSearch starts a search of the value of rank among values whose order keys lie in
// [minKey, maxKey] (from a first pass's Totals).
func NewSearch(rank int64, t *Totals) (*Search, error) {
	if rank < 0 || rank >= t.Values {
		return nil, fmt.Errorf("aggregate: rank %d of %d values", rank, t.Values)
	}
	s := &Search{rank: rank, lo: t.min, hi: t.max}
	s.reset()
	return s, nil
}

func (s *Search) reset() {
	s.below, s.buckets, s.keys, s.complete = 0, make([]int64, searchBuckets), nil, true
}

// Histogram is what this pass asks every region for.
func (s *Search) Histogram() *pb.Histogram {
	return &pb.Histogram{Lo: s.lo, Hi: s.hi, Buckets: searchBuckets, MaxValues: searchValues}
}

// Add merges one region's answer to this pass.
func (s *Search) Add(r *pb.AggregateResponse) error {
	if len(r.GetBuckets()) != searchBuckets {
		return fmt.Errorf("aggregate: a region answered %d histogram buckets, %d asked", len(r.GetBuckets()), searchBuckets)
	}
	s.below += r.GetBelow()
	for i, n := range r.GetBuckets() {
		s.buckets[i] += n
	}
	if s.complete && r.GetKeysComplete() {
		s.keys = append(s.keys, r.GetKeys()...)
	} else {
		s.complete, s.keys = false, nil
	}
	return nil
}

// Next ends a pass: done with the order key of the value of the rank, or not
// done and the next pass's Histogram narrowed.
func (s *Search) Next() (key uint64, done bool, err error) {
	s.passes++
	if s.passes > 64 {
		return 0, false, errors.New("aggregate: the median search does not converge")
	}
	defer s.reset()
	want := s.rank - s.below
	if want < 0 {
		return 0, false, ErrChanged
	}
	if s.complete {
		if want < 0 || want >= int64(len(s.keys)) {
			return 0, false, ErrChanged
		}
		slices.Sort(s.keys)
		return s.keys[want], true, nil
	}
	width := bucketWidth(s.lo, s.hi, searchBuckets)
	for i, n := range s.buckets {
		if want < n {
			lo := s.lo + uint64(i)*width
			if width == 1 {
				return lo, true, nil
			}
			hi := lo + (width - 1)
			if hi < lo || hi > s.hi {
				hi = s.hi
			}
			s.lo, s.hi = lo, hi
			return 0, false, nil
		}
		want -= n
	}
	return 0, false, ErrChanged
}

// Passes is how many passes the search took so far.
func (s *Search) Passes() int { return s.passes }
