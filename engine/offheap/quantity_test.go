package offheap

import (
	"math"
	"strings"
	"testing"
)

func TestParseQuantity(t *testing.T) {
	good := []struct {
		in   string
		want int64
	}{
		{"0", 0},
		{"1024", 1024},
		{"512Mi", 512 << 20},
		{"2Gi", 2 << 30},
		{"8GiB", 8 << 30},
		{"1.5Gi", 3 << 29},
		{"64Ki", 64 << 10},
		{"1Ti", 1 << 40},
		{"1Ei", 1 << 60},
		{"500M", 500_000_000},
		{"500MB", 500_000_000},
		{"1k", 1000},
		{"1e9", 1_000_000_000},
		{"1E3", 1000},
		{"1e-3", 1}, // rounded up to whole bytes, as Kubernetes does
		{"1.1Ki", 1127},
		{" 3Gi ", 3 << 30},
		{"+5", 5},
		{"100B", 100},
		{"2E", 2_000_000_000_000_000_000},
		{"7Ei", 7 << 60},
		{"9223372036854775807", math.MaxInt64},
		{".5Ki", 512},
	}
	for _, tc := range good {
		got, err := ParseQuantity(tc.in)
		if err != nil || got != tc.want {
			t.Errorf("ParseQuantity(%q) = %d, %v; want %d", tc.in, got, err, tc.want)
		}
	}
	bad := []struct{ in, wantErr string }{
		{"", "empty"},
		{"   ", "empty"},
		{"-1Gi", "negative"},
		{"Gi", "must start with a number"},
		{"abc", "must start with a number"},
		{"12Xi", `unknown suffix "Xi"`},
		{"1K", `"k" is 1000, "Ki" is 1024`},
		{"1gi", "case-sensitive"},
		{"1m", "case-sensitive"},
		{"8Ei", "larger than"},
		{"9223372036854775808", "larger than"},
		{"1e31", "out of range"},
		{"1e", "unknown suffix"},
		{"1e+", "not an integer"},
		{"1e3B", "unknown suffix"},
		{"1BB", "unknown suffix"},
		{"1.2.3", "unknown suffix"},
		{"1 Gi", "unknown suffix"},
		{".", "must start with a number"},
		{strings.Repeat("9", 100), "longer than"},
		{"0x10", "unknown suffix"},
	}
	for _, tc := range bad {
		got, err := ParseQuantity(tc.in)
		if err == nil {
			t.Errorf("ParseQuantity(%q) = %d, want error", tc.in, got)
			continue
		}
		if !strings.Contains(err.Error(), tc.wantErr) || !strings.Contains(err.Error(), "invalid size") {
			t.Errorf("ParseQuantity(%q) error %q, want it to mention %q", tc.in, err, tc.wantErr)
		}
	}
}

func TestFormatQuantity(t *testing.T) {
	for n, want := range map[int64]string{0: "0", 1: "1", 1024: "1Ki", 3 << 29: "1536Mi", 2 << 30: "2Gi",
		1000: "1000", -2048: "-2Ki", math.MinInt64: "-9223372036854775808", 5 << 60: "5Ei"} {
		if got := FormatQuantity(n); got != want {
			t.Errorf("FormatQuantity(%d) = %q, want %q", n, got, want)
		}
	}
}

func FuzzParseQuantity(f *testing.F) {
	for _, s := range []string{"0", "512Mi", "1.5Gi", "1e9", "8GiB", "-1", "1e-30", "9Ei", "Ki", "1.", "..", "1e+5"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		n, err := ParseQuantity(s) // must not panic
		if err != nil {
			if !strings.HasPrefix(err.Error(), "invalid size ") {
				t.Fatalf("error without context: %v", err)
			}
			return
		}
		if n < 0 {
			t.Fatalf("ParseQuantity(%q) = %d < 0", s, n)
		}
		// Formatting and parsing again is lossless.
		back, err := ParseQuantity(FormatQuantity(n))
		if err != nil || back != n {
			t.Fatalf("round trip of %d via %q: %d, %v", n, FormatQuantity(n), back, err)
		}
	})
}
