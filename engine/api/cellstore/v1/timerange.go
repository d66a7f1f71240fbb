package cellstorev1

import "math"

// EmptyTimeRange is a time range no timestamp falls in (HBase's [t, t)). A To of 0 means
// unbounded, so [0, 0) cannot say it: it is [MaxInt64, MaxInt64).
func EmptyTimeRange() *TimeRange { return &TimeRange{From: math.MaxInt64, To: math.MaxInt64} }
