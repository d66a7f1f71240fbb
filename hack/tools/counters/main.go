// Command counters compares three ways of counting with many writers on a few hot counters, the
// seed's "increment vs read-modify-write" experiment: the server's atomic Increment, a client
// read then write (Get, add, Put: updates race and get lost), and a client read then
// check-and-put retried until its condition holds (optimistic: correct, paid for in retries).
// Each method runs its threads against fresh counters; it prints, per method, the updates asked
// for, the counters' total at the end (what survived), the updates lost, the operations per second
// and the retries per update, as a markdown table.
//
//	go run ./hack/tools/counters -masters 127.0.0.1:16000 [-threads 8] [-counters 4] [-updates 500]
//
// (hack/seed-counters.sh starts a standalone store and runs it.)
package main

import (
	"context"
	"encoding/binary"
	"errors"
	"flag"
	"fmt"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	pb "github.com/cellstore/cellstore/engine/api/cellstore/v1"
	"github.com/cellstore/cellstore/engine/cell"
	"github.com/cellstore/cellstore/engine/client"
)

func main() {
	masters := flag.String("masters", "127.0.0.1:16000", "masters' addresses")
	threads := flag.Int("threads", 8, "writers")
	counters := flag.Int("counters", 4, "hot counters (rows) the writers share")
	updates := flag.Int("updates", 500, "updates per writer")
	table := flag.String("table", "counters", "table (created with family f)")
	flag.Parse()
	c, err := client.New(client.Config{Masters: strings.Split(*masters, ",")})
	if err != nil {
		fail(err)
	}
	defer c.Close()
	ctx := context.Background()
	td := &pb.TableDescriptor{Name: client.ParseTableName(*table), Families: []*pb.ColumnFamilyDescriptor{{Name: []byte("f")}}}
	if _, err := c.CreateTable(ctx, td, nil); err != nil {
		if d, ok := pb.DetailOf(err); !ok || d.GetCode() != pb.ErrorCode_ERROR_CODE_TABLE_EXISTS {
			fail(err)
		}
	}
	t := c.Table(*table)
	fmt.Printf("%d writers, %d counters, %d updates each (%d in all), one row per counter, SYNC_WAL.\n\n", *threads, *counters, *updates, *threads**updates)
	fmt.Println("| method | updates asked | counters' total | lost | ops/s | retries per update |")
	fmt.Println("|---|---|---|---|---|---|")
	for _, m := range []string{"increment", "get+put", "get+checkAndPut"} {
		var retries atomic.Int64
		var wg sync.WaitGroup
		errs := make(chan error, *threads)
		start := time.Now()
		for w := range *threads {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := range *updates {
					row := fmt.Appendf(nil, "%s-%d", m, (w+i)%*counters)
					var err error
					switch m {
					case "increment":
						_, err = t.Mutate(ctx, client.NewIncrement(row).AddAmount("f", "n", 1))
					case "get+put":
						var n int64
						if n, err = read(ctx, t, row); err == nil {
							err = t.Put(ctx, client.NewPut(row).Add("f", "n", cell.LatestTimestamp, encode(n+1)))
						}
					default:
						err = checkAndPut(ctx, t, row, &retries)
					}
					if err != nil {
						errs <- err
						return
					}
				}
			}()
		}
		wg.Wait()
		took := time.Since(start)
		close(errs)
		if err := <-errs; err != nil {
			fail(fmt.Errorf("%s: %w", m, err))
		}
		var total int64
		for k := range *counters {
			n, err := read(ctx, t, fmt.Appendf(nil, "%s-%d", m, k))
			if err != nil {
				fail(err)
			}
			total += n
		}
		asked := int64(*threads * *updates)
		fmt.Printf("| %s | %d | %d | %d (%.1f%%) | %.0f | %.2f |\n", m, asked, total, asked-total, 100*float64(asked-total)/float64(asked),
			float64(asked)/took.Seconds(), float64(retries.Load())/float64(asked))
	}
}

// read returns a counter's value (0 when it has none).
func read(ctx context.Context, t *client.Table, row []byte) (int64, error) {
	res, err := t.Get(ctx, &pb.Get{Row: row})
	if err != nil {
		return 0, err
	}
	v := res.Value("f", "n")
	if v == nil {
		return 0, nil
	}
	if len(v) != 8 {
		return 0, errors.New("a counter that is not an 8-byte number")
	}
	return int64(binary.BigEndian.Uint64(v)), nil
}

// checkAndPut adds one by a read and a put conditional on the value read, again until it holds.
func checkAndPut(ctx context.Context, t *client.Table, row []byte, retries *atomic.Int64) error {
	for {
		res, err := t.Get(ctx, &pb.Get{Row: row})
		if err != nil {
			return err
		}
		cur := res.Value("f", "n")
		cond := &pb.Condition{Row: row, Family: []byte("f"), Qualifier: []byte("n"), Op: pb.CompareOp_COMPARE_OP_EQUAL,
			Comparator: &pb.Comparator{Kind: &pb.Comparator_Binary{Binary: cur}}}
		var n int64
		if cur == nil {
			cond.Comparator = &pb.Comparator{Kind: &pb.Comparator_Null{Null: true}}
		} else {
			n = int64(binary.BigEndian.Uint64(cur))
		}
		ok, err := t.CheckAndMutate(ctx, cond, client.NewPut(row).Add("f", "n", cell.LatestTimestamp, encode(n+1)))
		if err != nil || ok {
			return err
		}
		retries.Add(1)
	}
}

func encode(n int64) []byte { return binary.BigEndian.AppendUint64(nil, uint64(n)) }

func fail(err error) {
	fmt.Fprintln(os.Stderr, "counters:", err)
	os.Exit(1)
}
