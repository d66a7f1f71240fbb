package function_test

import (
	"context"
	"fmt"
	"testing"

	pb "github.com/cellstore/cellstore/engine/api/cellstore/v1"
	"github.com/cellstore/cellstore/engine/compute/function"
)

// The cost of running a function, per call and per cell handed to it: rows of 1, 10 and 100
// cells of 100-byte values through the read hook (the test guest looks at every value), a put of
// one cell through the pre-mutate hook, and a row of 10 cells through an endpoint that only
// decodes them (the handing over itself).
//
//	go test -run '^$' -bench . -benchtime 2s ./engine/compute/function/
func BenchmarkFilterRead(b *testing.B) {
	for _, n := range []int{1, 10, 100} {
		b.Run(fmt.Sprintf("cells=%d", n), func(b *testing.B) {
			_, set := open(b, &pb.TableFunction{Name: "tg"})
			vals := make([]string, n)
			for i := range vals {
				vals[i] = fmt.Sprintf("%0100d", i)
			}
			row := kvs("row", vals...)
			b.ReportAllocs()
			b.ResetTimer()
			for range b.N {
				if keep, _, err := set.FilterRead([]byte("row"), row, false); !keep || err != nil {
					b.Fatal(keep, err)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/cell")
		})
	}
}

func BenchmarkPreMutate(b *testing.B) {
	_, set := open(b, &pb.TableFunction{Name: "tg"})
	b.ReportAllocs()
	for range b.N {
		if err := set.PreMutate(put("row", "value")); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkEndpointRow(b *testing.B) {
	_, set := open(b, &pb.TableFunction{Name: "tg"})
	row := kvs("row", "a", "b", "c", "d", "e", "f", "g", "h", "i", "j")
	b.ReportAllocs()
	_, err := set.RunEndpoint(context.Background(), "tg", "noop", nil, func(e *function.Endpoint) error {
		for range b.N {
			if _, err := e.Row([]byte("row"), row); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*10), "ns/cell")
}

// What the time limit costs: the same rows through the same module, loaded with and without the
// compiled deadline checks.
func BenchmarkTimeLimitChecks(b *testing.B) {
	for _, on := range []bool{true, false} {
		b.Run(fmt.Sprintf("checks=%v", on), func(b *testing.B) {
			function.SetTimeLimits(on)
			defer function.SetTimeLimits(true)
			_, set := openOn(b, function.NewPrivateRuntime(quiet), &pb.TableFunction{Name: "tg"})
			vals := make([]string, 10)
			for i := range vals {
				vals[i] = fmt.Sprintf("%0100d", i)
			}
			row := kvs("row", vals...)
			b.ResetTimer()
			for range b.N {
				if keep, _, err := set.FilterRead([]byte("row"), row, false); !keep || err != nil {
					b.Fatal(keep, err)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*10), "ns/cell")
		})
	}
}
