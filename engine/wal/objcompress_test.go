package wal

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"

	"github.com/cellstore/cellstore/engine/cell"
	"github.com/cellstore/cellstore/engine/storage"
)

// randomEdit is an edit whose value is random bytes: its records do not compress.
func randomEdit(region string, i int, rng *rand.Rand) *Edit {
	val := make([]byte, 300)
	for j := range val {
		val[j] = byte(rng.Uint32())
	}
	kv := cell.AppendKeyValue(nil, []byte(fmt.Sprintf("row%08d", i)), []byte("f"), []byte("q"), int64(i), cell.Put, val)
	return &Edit{Region: []byte(region), Cells: []cell.KeyValue{kv}}
}

// objectKinds counts the kinds of the objects under a log's prefix.
func objectKinds(t testing.TB, b storage.Bucket, prefix string) map[byte]int {
	t.Helper()
	objs, err := b.List(context.Background(), prefix+"/", "", 0)
	if err != nil {
		t.Fatal(err)
	}
	kinds := map[byte]int{}
	for _, o := range objs {
		data, _, err := b.Get(context.Background(), o.Key)
		if err != nil {
			t.Fatal(err)
		}
		kind, _, err := checkHeader(data)
		if err != nil {
			t.Fatalf("%s: %v", o.Key, err)
		}
		kinds[kind]++
	}
	return kinds
}

// A log with Compress, on a directory and on a real S3 server: objects whose records compress are
// written compressed, those that do not (random values) plainly; every acknowledged edit reads
// back whole and in order — by recovery (ReadObjectLog, as a split reads it), from the archive the
// server wrote, and from the archive the master writes for a dead server; the stats count the
// bytes before and after.
func TestObjectLogCompression(t *testing.T) {
	for _, backend := range []string{"dir", "s3"} {
		t.Run(backend, func(t *testing.T) {
			ctx := context.Background()
			var b, dst storage.Bucket
			if backend == "dir" {
				b, dst = dirBucket(t), dirBucket(t)
			} else {
				b, _ = minioBucket(t, "compress")
				dst = dirBucket(t)
			}
			l, err := OpenObjectLog(ctx, ObjectLogOptions{Bucket: b, Prefix: "wal/rs1_1", Writer: "test", MaxInFlight: 2,
				Compress: true, Archive: &ArchiveTarget{Bucket: dst, Log: "rs1_1"}})
			if err != nil {
				t.Fatal(err)
			}
			defer l.Close()
			var mu sync.Mutex
			acked := map[uint64]Edit{}
			// Phase 1: concurrent appenders of compressible edits; phase 2: one appender of random
			// ones (each object then holds one edit of random bytes); phase 3: compressible again.
			appendAll := func(writers, each, from int, random bool) {
				var wg sync.WaitGroup
				for w := range writers {
					wg.Add(1)
					go func() {
						defer wg.Done()
						rng := rand.New(rand.NewPCG(uint64(w), uint64(from)))
						for i := range each {
							e := testEdit(fmt.Sprintf("region-%d", w), from+i)
							if random {
								e = randomEdit(fmt.Sprintf("region-%d", w), from+i, rng)
							}
							seq, err := l.Append(e)
							if err != nil {
								t.Errorf("append: %v", err)
								return
							}
							c := cloneEdit(e)
							c.Seq = seq
							mu.Lock()
							acked[seq] = c
							mu.Unlock()
						}
					}()
				}
				wg.Wait()
			}
			appendAll(8, 60, 0, false)
			appendAll(1, 10, 1000, true)
			appendAll(4, 30, 2000, false)
			if t.Failed() {
				return
			}
			if n, err := l.Archive(ctx); err != nil || n == 0 {
				t.Fatalf("Archive = %d, %v", n, err)
			}
			if err := l.Close(); err != nil {
				t.Fatal(err)
			}
			kinds := objectKinds(t, b, "wal/rs1_1")
			if kinds[kindObjectS2] == 0 || kinds[kindObject] < 10 {
				t.Fatalf("object kinds %v: want compressed objects and at least the 10 of random values plain", kinds)
			}
			st := l.Stats()
			if 2*st.PlainBytes < 3*st.PutBytes {
				t.Fatalf("objects of %d bytes written in %d: compression should have saved a third at least", st.PlainBytes, st.PutBytes)
			}
			t.Logf("%d objects (%v) of %d bytes, written %d", st.Puts, kinds, st.PlainBytes, st.PutBytes)

			check := func(what string, got []Edit) {
				t.Helper()
				if len(got) != len(acked) {
					t.Fatalf("%s: %d edits, acknowledged %d", what, len(got), len(acked))
				}
				for i := range got {
					if i > 0 && got[i].Seq <= got[i-1].Seq {
						t.Fatalf("%s: sequence ids out of order at %d", what, i)
					}
					if want, ok := acked[got[i].Seq]; !ok || !sameEdit(&got[i], &want) {
						t.Fatalf("%s: edit %d (seq %d) differs from what was appended", what, i, got[i].Seq)
					}
				}
			}
			check("recovery", readLog(t, b, "wal/rs1_1"))
			check("archive", readArchive(t, dst))
			dead := dirBucket(t)
			if _, err := ArchiveDeadObjectLog(ctx, b, "wal/rs1_1", ArchiveTarget{Bucket: dead, Log: "rs1_1"}, nil); err != nil {
				t.Fatal(err)
			}
			check("dead server's archive", readArchive(t, dead))
		})
	}
}

// A log without Compress writes only plain objects (what an older reader understands).
func TestObjectLogCompressionOff(t *testing.T) {
	b := dirBucket(t)
	l := openLog(t, b, "wal/rs1_1", 1)
	for i := range 20 {
		if _, err := l.Append(testEdit("r", i)); err != nil {
			t.Fatal(err)
		}
	}
	l.Close()
	if kinds := objectKinds(t, b, "wal/rs1_1"); len(kinds) != 1 || kinds[kindObject] != 20 {
		t.Fatalf("object kinds %v, want 20 plain objects", kinds)
	}
	if st := l.Stats(); st.PlainBytes != st.PutBytes || st.Puts != 20 {
		t.Fatalf("%d objects of %d bytes, written %d: without compression they are the same", st.Puts, st.PlainBytes, st.PutBytes)
	}
}

// Damage to a compressed object is corruption in that object, for recovery (which, as for a plain
// object, may have applied the records before the damaged one) and for the dead server's archive
// (which archives nothing of it): a flipped byte in the compressed data (the decoder or a
// record's checksum catches it), a cut, and a decoded length beyond what a log object holds
// (refused before any allocation of that size).
func TestObjectLogCompressedCorruption(t *testing.T) {
	ctx := context.Background()
	records := bytes.Repeat(appendRecord(nil, testEdit("r", 1), 1, 99, payloadSize(testEdit("r", 1))), 50)
	plain := append(appendHeader(nil, kindObject, 1), records...)
	good := compressObject(plain, 1)
	if kind, _, _ := checkHeader(good); kind != kindObjectS2 || len(good) >= len(plain)/2 {
		t.Fatalf("compressObject gave kind %d, %d bytes of %d", kind, len(good), len(plain))
	}
	flipped := bytes.Clone(good)
	flipped[len(flipped)/2] ^= 0x40
	_, lenBytes := binary.Uvarint(good[headerSize:])
	huge := appendHeader(nil, kindObjectS2, 1)
	huge = binary.AppendUvarint(huge, 1<<30)
	huge = append(huge, good[headerSize+lenBytes:]...)
	for _, tc := range []struct {
		name string
		data []byte
		want string
	}{
		{"flipped", flipped, ""},
		{"cut", good[:len(good)-5], ""},
		{"empty", good[:headerSize], "compressed records"},
		{"huge length", huge, "more than the"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := dirBucket(t)
			key := objectKey("wal/c_1", 1)
			if _, err := b.Put(ctx, key, tc.data, storage.Condition{}); err != nil {
				t.Fatal(err)
			}
			applied := 0
			_, err := ReadObjectLog(ctx, b, "wal/c_1", func(*Edit) error { applied++; return nil })
			var ce *CorruptionError
			if !errors.As(err, &ce) || ce.File != key || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("want corruption in %s (%q), got %v", key, tc.want, err)
			}
			archive := dirBucket(t)
			if _, err := ArchiveDeadObjectLog(ctx, b, "wal/c_1", ArchiveTarget{Bucket: archive, Log: "c_1"}, nil); !errors.As(err, &ce) {
				t.Fatalf("archiving the damaged log: want corruption, got %v", err)
			}
			if n := countKeys(t, archive, ""); n != 0 {
				t.Fatalf("%d archive objects written from a damaged log", n)
			}
			t.Logf("%d edits applied before: %v", applied, err)
		})
	}
	// The undamaged object decodes to exactly the records.
	got, err := objectRecords(good, kindObjectS2)
	if err != nil || !bytes.Equal(got[headerSize:], records) || !bytes.Equal(got[:headerSize], good[:headerSize]) {
		t.Fatalf("objectRecords of a good object: %d bytes, %v", len(got), err)
	}
	// Records that do not compress stay a plain object.
	rng := rand.New(rand.NewPCG(1, 2))
	e := randomEdit("r", 1, rng)
	random := append(appendHeader(nil, kindObject, 2), appendRecord(nil, e, 1, 99, payloadSize(e))...)
	if out := compressObject(random, 2); !bytes.Equal(out, random) {
		t.Fatalf("random records were compressed (%d of %d bytes)", len(out), len(random))
	}
}

// Decoding a compressed object never panics and never decodes to more than the bound, whatever
// follows its header.
func FuzzObjectRecords(f *testing.F) {
	records := bytes.Repeat(appendRecord(nil, testEdit("r", 1), 1, 99, payloadSize(testEdit("r", 1))), 20)
	good := compressObject(append(appendHeader(nil, kindObject, 1), records...), 1)
	f.Add(good[headerSize:])
	f.Add(good[headerSize : len(good)-3])
	f.Add([]byte{0xff, 0xff, 0xff, 0xff, 0x0f})
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, tail []byte) {
		data := append(appendHeader(nil, kindObjectS2, 1), tail...)
		out, err := objectRecords(data, kindObjectS2)
		if err != nil {
			return
		}
		if len(out)-headerSize > maxCompressedRecords {
			t.Fatalf("decoded %d bytes", len(out)-headerSize)
		}
		_ = decodeRecords(out, "k", func(*Edit) error { return nil })
	})
}

// BenchmarkCompressObject: the writer's cost of compressing a log object of about 1 MiB (MB/s of
// records) and the ratio: values as HBase's PE makes them (random capital letters in runs of
// eight, 100 bytes) and 300 random bytes (only the keys and names around them compress).
func BenchmarkCompressObject(b *testing.B) {
	rng := rand.New(rand.NewPCG(3, 4))
	for _, values := range []string{"pe", "random"} {
		body := appendHeader(nil, kindObject, 1)
		for i := 0; len(body) < 1<<20; i++ {
			e := randomEdit("region-1", i, rng)
			if values == "pe" {
				v := make([]byte, 100)
				for j := 0; j < len(v); j += 8 {
					c := byte('A' + rng.IntN(26))
					for k := j; k < min(j+8, len(v)); k++ {
						v[k] = c
					}
				}
				kv := cell.AppendKeyValue(nil, []byte(fmt.Sprintf("%026d", i)), []byte("info"), []byte("0"), int64(i), cell.Put, v)
				e = &Edit{Region: []byte("TestTable,00000000000000000000000000,1733480000000.0123456789abcdef0123456789abcdef."), Cells: []cell.KeyValue{kv}}
			}
			body = appendRecord(body, e, uint64(i+1), 99, payloadSize(e))
		}
		b.Run("values="+values, func(b *testing.B) {
			b.SetBytes(int64(len(body) - headerSize))
			var out []byte
			for range b.N {
				out = compressObject(body, 1)
			}
			b.ReportMetric(float64(len(body))/float64(len(out)), "ratio")
		})
	}
}
