package memstore

import (
	"math"
	"testing"
)

// Node heights follow P(h > k) = e^-k: the share of draws above each of the first levels is within
// a few standard deviations of e^-k, and no draw leaves [1, maxHeight].
func TestRandomHeightDistribution(t *testing.T) {
	const draws = 1_000_000
	var above [maxHeight + 1]int // above[k]: draws with a height > k
	for range draws {
		h := randomHeight()
		if h < 1 || h > maxHeight {
			t.Fatalf("height %d outside [1, %d]", h, maxHeight)
		}
		for k := 0; k < h; k++ {
			above[k]++
		}
	}
	for k := 1; k <= 5; k++ {
		p := math.Exp(-float64(k))
		got := float64(above[k]) / draws
		sd := math.Sqrt(p * (1 - p) / draws)
		if math.Abs(got-p) > 6*sd {
			t.Errorf("P(height > %d) = %.5f, want %.5f ± %.5f", k, got, p, 6*sd)
		}
	}
}
