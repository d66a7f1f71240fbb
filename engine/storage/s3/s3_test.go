package s3_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/cellstore/cellstore/engine/storage"
	"github.com/cellstore/cellstore/engine/storage/buckettest"
	s3 "github.com/cellstore/cellstore/engine/storage/s3"
	"github.com/cellstore/cellstore/engine/storage/s3/s3test"
)

// The conformance suite against a real S3 server, with and without a key prefix.
func TestConformance(t *testing.T) {
	srv := s3test.Start(t)
	var n atomic.Int32
	for _, prefix := range []string{"", "clusters/c1"} {
		t.Run("prefix="+prefix, func(t *testing.T) {
			buckettest.Run(t, func(t *testing.T) storage.Bucket {
				name := fmt.Sprintf("conformance-%d", n.Add(1))
				srv.CreateBucket(t, name)
				cfg := srv.Config(name)
				cfg.Prefix = prefix
				b, err := s3.Open(context.Background(), cfg)
				if err != nil {
					t.Fatal(err)
				}
				return b
			})
		})
	}
}

func TestCheckConditionalWrites(t *testing.T) {
	srv := s3test.Start(t)
	srv.CreateBucket(t, "checked")
	reg := prometheus.NewRegistry()
	cfg := srv.Config("checked")
	cfg.Registerer = reg
	b, err := s3.Open(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := b.CheckConditionalWrites(context.Background()); err != nil {
		t.Fatal(err)
	}
	left, err := b.List(context.Background(), "", "", 0)
	if err != nil || len(left) != 0 {
		t.Fatalf("the check left objects behind: %v %v", left, err)
	}
	// The requests were counted, the refused conditional ones as such (not failures).
	results := requestResults(t, reg)
	if results["put/ok"] < 1 || results["put/precondition"] < 1 || results["put/PreconditionFailed"] != 0 {
		t.Errorf("request metrics %v: want put/ok and put/precondition", results)
	}
}

// requestResults gathers cellstore_s3_requests_total into "op/result" → count.
func requestResults(t *testing.T, reg *prometheus.Registry) map[string]float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	results := map[string]float64{}
	for _, mf := range mfs {
		if mf.GetName() != "cellstore_s3_requests_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			var op, result string
			for _, l := range m.GetLabel() {
				switch l.GetName() {
				case "op":
					op = l.GetValue()
				case "result":
					result = l.GetValue()
				}
			}
			results[op+"/"+result] += m.GetCounter().GetValue()
		}
	}
	return results
}

// The answers a caller asks for are counted as what they are, not as failures of the store
// (CellstoreStorageErrors): a HEAD or GET of a missing key (a standby master probes for the
// catalog's snapshot every second), a conditional put that lost its race (fencing), a ranged read
// past the end and a request its caller canceled. A missing bucket still counts under its code.
func TestRequestResults(t *testing.T) {
	srv := s3test.Start(t)
	srv.CreateBucket(t, "results")
	ctx := context.Background()
	open := func(bucket string) (*s3.Bucket, *prometheus.Registry) {
		t.Helper()
		reg := prometheus.NewRegistry()
		cfg := srv.Config(bucket)
		cfg.Registerer = reg
		b, err := s3.Open(ctx, cfg)
		if err != nil {
			t.Fatal(err)
		}
		return b, reg
	}
	b, reg := open("results")
	if _, err := b.Stat(ctx, "missing"); !errors.Is(err, storage.ErrNoObject) {
		t.Fatalf("stat of a missing key: %v", err)
	}
	if _, _, err := b.Get(ctx, "missing"); !errors.Is(err, storage.ErrNoObject) {
		t.Fatalf("get of a missing key: %v", err)
	}
	if _, err := b.Put(ctx, "k", []byte("first"), storage.Condition{IfNoneMatch: true}); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Put(ctx, "k", []byte("second"), storage.Condition{IfNoneMatch: true}); !errors.Is(err, storage.ErrPrecondition) {
		t.Fatalf("a create of an existing key: %v", err)
	}
	if got, err := b.GetRange(ctx, "k", 100, 10); err != nil || len(got) != 0 {
		t.Fatalf("a read past the end: %q %v", got, err)
	}
	canceled, cancel := context.WithCancel(ctx)
	cancel()
	if _, _, err := b.Get(canceled, "k"); !errors.Is(err, context.Canceled) {
		t.Fatalf("a get whose context was canceled: %v", err)
	}
	got := requestResults(t, reg)
	for op, want := range map[string]float64{
		"head/not_found": 1, "get/not_found": 1, "put/ok": 1, "put/precondition": 1, "get/out_of_range": 1, "get/canceled": 1,
	} {
		if got[op] < want {
			t.Errorf("%s = %v, want %v (all: %v)", op, got[op], want, got)
		}
	}
	for op := range got {
		if r := op[strings.Index(op, "/")+1:]; r != "ok" && r != "not_found" && r != "precondition" && r != "out_of_range" && r != "canceled" {
			t.Errorf("%s = %v: counted as a failure (all: %v)", op, got[op], got)
		}
	}

	// (A HEAD's answer has no body to name the bucket missing: it reads as a missing key.)
	nb, nreg := open("no-such-bucket")
	if _, _, err := nb.Get(ctx, "k"); err == nil {
		t.Fatal("a get in a missing bucket worked")
	}
	if got := requestResults(t, nreg); got["get/NoSuchBucket"] != 1 || len(got) != 1 {
		t.Errorf("a GET in a missing bucket counted as %v, want get/NoSuchBucket", got)
	}
}

// A missing bucket and wrong credentials are errors that name the bucket and say what to do.
func TestErrorsSayWhatToDo(t *testing.T) {
	srv := s3test.Start(t)
	ctx := context.Background()
	b, err := s3.Open(ctx, srv.Config("no-such-bucket"))
	if err != nil {
		t.Fatal(err)
	}
	err = b.CheckConditionalWrites(ctx)
	if err == nil || !strings.Contains(err.Error(), "no-such-bucket") || !strings.Contains(err.Error(), "create it") {
		t.Errorf("missing bucket: %v", err)
	}
	srv.CreateBucket(t, "guarded")
	cfg := srv.Config("guarded")
	cfg.SecretAccessKey = "wrong-secret"
	b, err = s3.Open(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	_, err = b.Put(ctx, "k", []byte("v"), storage.Condition{})
	if err == nil || !strings.Contains(err.Error(), "access denied") || !strings.Contains(err.Error(), s3test.AccessKey) {
		t.Errorf("wrong credentials: %v", err)
	}
	if errors.Is(err, storage.ErrPrecondition) || errors.Is(err, storage.ErrUnavailable) {
		t.Errorf("an authorisation failure taken for a failed condition or a store unavailable for now: %v", err)
	}
}

func openVia(t *testing.T, srv *s3test.Server, endpoint, bucket string, tune func(*s3.Config)) *s3.Bucket {
	t.Helper()
	cfg := srv.Config(bucket)
	cfg.Endpoint = endpoint
	if tune != nil {
		tune(&cfg)
	}
	b, err := s3.Open(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// bucketViaProxy starts a server with a new bucket and opens it through a fault-injecting proxy.
func bucketViaProxy(t *testing.T, bucket string) (*s3.Bucket, *s3test.Proxy) {
	t.Helper()
	srv := s3test.Start(t)
	srv.CreateBucket(t, bucket)
	proxy := srv.StartProxy(t)
	return openVia(t, srv, proxy.Endpoint, bucket, nil), proxy
}

// Throttling answers (503 SlowDown) are retried with backoff: the write lands once.
func TestRetriesThroughSlowDown(t *testing.T) {
	srv := s3test.Start(t)
	srv.CreateBucket(t, "throttled")
	proxy := srv.StartProxy(t)
	b := openVia(t, srv, proxy.Endpoint, "throttled", func(c *s3.Config) { c.MaxBackoff = 50 * time.Millisecond })
	ctx := context.Background()
	proxy.Inject(s3test.SlowDown, "PUT", 3, 0)
	if _, err := b.Put(ctx, "k", []byte("v"), storage.Condition{IfNoneMatch: true}); err != nil {
		t.Fatalf("put through three SlowDown answers: %v", err)
	}
	if n := proxy.Requests("PUT"); n != 4 {
		t.Errorf("%d PUTs reached the proxy, want 4 (3 throttled, 1 through)", n)
	}
	// More throttling than attempts: a clear error, not a hang.
	proxy.Inject(s3test.SlowDown, "GET", 10, 0)
	if _, _, err := b.Get(ctx, "k"); err == nil || !strings.Contains(err.Error(), "SlowDown") || !errors.Is(err, storage.ErrUnavailable) {
		t.Errorf("get through ten SlowDown answers: %v, want the store's SlowDown as storage.ErrUnavailable", err)
	}
}

// Throttling does not use up a budget of retries shared by later requests (the SDK's default
// does, after about 30 such requests: "retry quota exceeded"): each request still makes all its
// attempts.
func TestThrottlingSpendsNoSharedRetryBudget(t *testing.T) {
	srv := s3test.Start(t)
	srv.CreateBucket(t, "budget")
	proxy := srv.StartProxy(t)
	b := openVia(t, srv, proxy.Endpoint, "budget", func(c *s3.Config) { c.MaxBackoff = time.Millisecond })
	ctx := context.Background()
	for i := range 60 {
		proxy.Inject(s3test.SlowDown, "PUT", 4, 0)
		before := proxy.Requests("PUT")
		if _, err := b.Put(ctx, fmt.Sprintf("q/%d", i), []byte("v"), storage.Condition{IfNoneMatch: true}); err != nil {
			t.Fatalf("put %d through four SlowDown answers: %v", i, err)
		}
		if n := proxy.Requests("PUT") - before; n != 5 {
			t.Fatalf("put %d: %d attempts reached the proxy, want 5 (4 throttled, 1 through)", i, n)
		}
	}
}

// With the default backoff, a request that meets four throttling answers in a row waits 1.5 s at
// most (about 0.1, 0.2, 0.4 and 0.8 s, each jittered down by up to half); the SDK's own waits for
// throttling average 6 s there (up to 1, 2, 4 and 5 s). Three such puts in a row: 4.5 s at most
// here, 18 s on average with the SDK's.
func TestThrottlingCostsLittleTime(t *testing.T) {
	b, proxy := bucketViaProxy(t, "briefly-throttled")
	start := time.Now()
	for i := range 3 {
		proxy.Inject(s3test.SlowDown, "PUT", 4, 0)
		if _, err := b.Put(context.Background(), fmt.Sprintf("k%d", i), []byte("v"), storage.Condition{IfNoneMatch: true}); err != nil {
			t.Fatal(err)
		}
	}
	if took := time.Since(start); took > 8*time.Second {
		t.Errorf("three puts through four SlowDown answers each took %v", took)
	}
}

// A conditional create whose answer was lost, retried, fails its condition; when the key cannot be
// read back to see whether the first attempt took effect, the outcome is unknown: ErrUnavailable
// (ask again), never a failed condition — a WAL would take that for a fence.
func TestAnUnknownOutcomeIsNotAFailedCondition(t *testing.T) {
	b, proxy := bucketViaProxy(t, "unknown")
	ctx := context.Background()
	proxy.Inject(s3test.LoseAnswer, "PUT", 1, 0)
	proxy.Inject(s3test.SlowDown, "HEAD", 5, 0)
	_, err := b.Put(ctx, "k", []byte("v"), storage.Condition{IfNoneMatch: true})
	if !errors.Is(err, storage.ErrUnavailable) || errors.Is(err, storage.ErrPrecondition) {
		t.Fatalf("put whose outcome could not be read back: %v, want storage.ErrUnavailable", err)
	}
	if _, err := b.Put(ctx, "k", []byte("v"), storage.Condition{IfNoneMatch: true}); err != nil {
		t.Fatalf("the same put asked again: %v (its first attempt took effect)", err)
	}
	if _, err := b.Put(ctx, "k", []byte("other"), storage.Condition{IfNoneMatch: true}); !errors.Is(err, storage.ErrPrecondition) {
		t.Fatalf("another writer's create of the key: %v, want storage.ErrPrecondition", err)
	}
}

// On a bucket whose ETags are not the objects' MD5 yet are 32 hex digits (SSE-KMS, SSE-C), a
// conditional create whose answer was lost is still known for this writer's by reading it back
// (it was taken for another writer's: a WAL object's own write fenced its server).
func TestLostAnswerOnAnEncryptedBucket(t *testing.T) {
	b, proxy := bucketViaProxy(t, "kms")
	ctx := context.Background()
	proxy.Inject(s3test.LoseAnswer, "PUT", 1, 0)
	proxy.Inject(s3test.OpaqueETag, "HEAD", 5, 0)
	if _, err := b.Put(ctx, "wal/0001", []byte("edits"), storage.Condition{IfNoneMatch: true}); err != nil {
		t.Fatalf("the create took effect but Put says %v", err)
	}
	proxy.Clear()
	proxy.Inject(s3test.OpaqueETag, "HEAD", 5, 0)
	if _, err := b.Put(ctx, "wal/0001", []byte("other"), storage.Condition{IfNoneMatch: true}); !errors.Is(err, storage.ErrPrecondition) {
		t.Fatalf("another writer's create: %v, want ErrPrecondition", err)
	}
}

// A conditional create whose answer is lost after the store took it is retried by the SDK; the
// retry fails its own condition, and Put must still report the write as done — the writer won.
// Another writer's create of the key still fails.
func TestConditionalCreateWhoseAnswerWasLost(t *testing.T) {
	b, proxy := bucketViaProxy(t, "lossy")
	ctx := context.Background()
	proxy.Inject(s3test.LoseAnswer, "PUT", 1, 0)
	etag, err := b.Put(ctx, "fence/0007", []byte("server rs-1 epoch 7"), storage.Condition{IfNoneMatch: true})
	if err != nil {
		t.Fatalf("the create took effect but Put says %v", err)
	}
	if n := proxy.Requests("PUT"); n < 2 {
		t.Fatalf("%d PUTs: the lost answer was not retried", n)
	}
	info, err := b.Stat(ctx, "fence/0007")
	if err != nil || info.ETag != etag {
		t.Fatalf("stat %+v %v, want ETag %s", info, err, etag)
	}
	if _, err := b.Put(ctx, "fence/0007", []byte("server rs-2 epoch 8"), storage.Condition{IfNoneMatch: true}); !errors.Is(err, storage.ErrPrecondition) {
		t.Fatalf("another writer's create: %v, want ErrPrecondition", err)
	}
	// The same for a conditional replace.
	proxy.Inject(s3test.LoseAnswer, "PUT", 1, 0)
	if _, err := b.Put(ctx, "fence/0007", []byte("server rs-1 epoch 9"), storage.Condition{IfMatch: etag}); err != nil {
		t.Fatalf("the replace took effect but Put says %v", err)
	}
}

// A GET whose answer breaks off (a body shorter than its length) is made again; one that keeps
// breaking off is unavailable, not some other error (it failed the read of a store file at once).
func TestGetWhoseBodyBreaksOff(t *testing.T) {
	b, proxy := bucketViaProxy(t, "shortbody")
	ctx := context.Background()
	body := bytes.Repeat([]byte("0123456789"), 1000)
	if _, err := b.Put(ctx, "k", body, storage.Condition{}); err != nil {
		t.Fatal(err)
	}
	proxy.Inject(s3test.TruncatedBody, "GET", 1, 0)
	if got, _, err := b.Get(ctx, "k"); err != nil || !bytes.Equal(got, body) {
		t.Fatalf("a get whose first answer broke off: %d bytes, %v", len(got), err)
	}
	proxy.Inject(s3test.TruncatedBody, "GET", 1, 0)
	if got, err := b.GetRange(ctx, "k", 100, 5000); err != nil || !bytes.Equal(got, body[100:5100]) {
		t.Fatalf("a ranged get whose first answer broke off: %d bytes, %v", len(got), err)
	}
	proxy.Inject(s3test.TruncatedBody, "GET", 10, 0)
	if _, _, err := b.Get(ctx, "k"); !errors.Is(err, storage.ErrUnavailable) {
		t.Fatalf("a get whose answers keep breaking off: %v, want ErrUnavailable", err)
	}
	proxy.Clear()
}

// A store that answers a Complete that took effect with NoSuchUpload (a retried one, whose first
// attempt completed the upload) gets the upload's own object recognised: the check ran on the
// explained error, which had lost the store's code, and the upload was aborted as failed.
func TestMultipartCompleteAnsweredNoSuchUpload(t *testing.T) {
	b, proxy := bucketViaProxy(t, "nosuchupload")
	ctx := context.Background()
	up, err := b.StartUpload(ctx, "data/f2")
	if err != nil {
		t.Fatal(err)
	}
	if err := up.WritePart(ctx, []byte("the only part")); err != nil {
		t.Fatal(err)
	}
	proxy.Inject(s3test.NoSuchUploadAfter, "POST", 1, 0)
	etag, err := up.Complete(ctx)
	if err != nil {
		t.Fatalf("the upload completed but Complete says %v", err)
	}
	if info, err := b.Stat(ctx, "data/f2"); err != nil || info.ETag != etag {
		t.Fatalf("stat %+v %v, want ETag %s", info, err, etag)
	}
}

// A multipart Complete whose answer was lost is retried, finds its own object at the key and
// succeeds with that object's ETag: the one S3 computes from the parts' MD5s, which the upload
// takes from the parts' answers.
func TestMultipartCompleteWhoseAnswerWasLost(t *testing.T) {
	b, proxy := bucketViaProxy(t, "lossy-parts")
	ctx := context.Background()
	up, err := b.StartUpload(ctx, "data/f1")
	if err != nil {
		t.Fatal(err)
	}
	first := make([]byte, storage.MinPartSize)
	for i := range first {
		first[i] = byte(i % 251)
	}
	for _, part := range [][]byte{first, []byte("the last part")} {
		if err := up.WritePart(ctx, part); err != nil {
			t.Fatal(err)
		}
	}
	posts := proxy.Requests("POST")
	proxy.Inject(s3test.LoseAnswer, "POST", 1, 0)
	etag, err := up.Complete(ctx)
	if err != nil {
		t.Fatalf("the upload completed but Complete says %v", err)
	}
	if n := proxy.Requests("POST") - posts; n < 2 {
		t.Fatalf("%d Complete requests: the lost answer was not retried", n)
	}
	info, err := b.Stat(ctx, "data/f1")
	if err != nil || info.ETag != etag || info.Size != int64(len(first))+13 {
		t.Fatalf("stat %+v %v, want ETag %s and %d bytes", info, err, etag, len(first)+13)
	}
	// Another upload to the taken key is refused, its answer not mistaken for its own.
	up2, err := b.StartUpload(ctx, "data/f1")
	if err != nil {
		t.Fatal(err)
	}
	if err := up2.WritePart(ctx, []byte("another object")); err != nil {
		t.Fatal(err)
	}
	if _, err := up2.Complete(ctx); !errors.Is(err, storage.ErrPrecondition) {
		t.Fatalf("a second upload to a taken key: %v, want ErrPrecondition", err)
	}
}

// A store that answers too slowly fails the request within the timeout, naming the bucket.
func TestSlowAnswersTimeOut(t *testing.T) {
	srv := s3test.Start(t)
	srv.CreateBucket(t, "slow")
	proxy := srv.StartProxy(t)
	b := openVia(t, srv, proxy.Endpoint, "slow", func(c *s3.Config) { c.Timeout = 500 * time.Millisecond; c.MaxAttempts = 2 })
	proxy.Inject(s3test.Delay, "", 10, 60*time.Second)
	start := time.Now()
	_, err := b.Put(context.Background(), "k", []byte("v"), storage.Condition{})
	if err == nil || !strings.Contains(err.Error(), "slow") || !errors.Is(err, storage.ErrUnavailable) {
		t.Fatalf("put against a stalled store: %v, want storage.ErrUnavailable", err)
	}
	if d := time.Since(start); d > 20*time.Second { // without the timeout: a minute per attempt
		t.Fatalf("the timeout of 500 ms took %v", d)
	}
}

// A store that refuses DeleteObjects the way the SDK sends it (MinIO before 2025 wanted
// Content-MD5): DeleteAll still deletes every key, one DELETE each, and the bucket stops trying
// batches.
func TestDeleteAllOnAStoreWithoutBatchDeletes(t *testing.T) {
	b, proxy := bucketViaProxy(t, "nobatch")
	ctx := context.Background()
	put := func(keys ...string) {
		for _, k := range keys {
			if _, err := b.Put(ctx, k, []byte("x"), storage.Condition{}); err != nil {
				t.Fatal(err)
			}
		}
	}
	gone := func(keys ...string) {
		for _, k := range keys {
			if _, err := b.Stat(ctx, k); !errors.Is(err, storage.ErrNoObject) {
				t.Fatalf("%s after DeleteAll: %v", k, err)
			}
		}
	}
	put("a", "b", "c")
	proxy.Inject(s3test.MissingContentMD5, "POST", 1, 0)
	posts, deletes := proxy.Requests("POST"), proxy.Requests("DELETE")
	if _, err := storage.DeleteAll(ctx, b, []string{"a", "b", "c"}); err != nil {
		t.Fatal(err)
	}
	gone("a", "b", "c")
	if p, d := proxy.Requests("POST")-posts, proxy.Requests("DELETE")-deletes; p != 1 || d != 3 {
		t.Fatalf("%d batch and %d single deletes, want 1 refused batch and 3 single deletes", p, d)
	}
	put("d", "e")
	posts, deletes = proxy.Requests("POST"), proxy.Requests("DELETE")
	if _, err := storage.DeleteAll(ctx, b, []string{"d", "e"}); err != nil {
		t.Fatal(err)
	}
	gone("d", "e")
	if p, d := proxy.Requests("POST")-posts, proxy.Requests("DELETE")-deletes; p != 0 || d != 2 {
		t.Fatalf("%d batch and %d single deletes after a refusal, want 0 and 2", p, d)
	}
}

// A ranged GET answered with the whole object (a store or proxy that ignores Range) is an error,
// never the object's first bytes taken for those asked for: a block cache or the file cache would
// keep them (with checksums of their own) across restarts.
func TestARangeIgnoredIsAnError(t *testing.T) {
	b, proxy := bucketViaProxy(t, "ranges")
	ctx := context.Background()
	body := []byte("0123456789abcdefghij")
	if _, err := b.Put(ctx, "k", body, storage.Condition{}); err != nil {
		t.Fatal(err)
	}
	if got, err := b.GetRange(ctx, "k", 10, 5); err != nil || string(got) != "abcde" {
		t.Fatalf("GetRange(10, 5): %q, %v", got, err)
	}
	proxy.AnswerWholeObject(body)
	if got, err := b.GetRange(ctx, "k", 10, 5); err == nil || !strings.Contains(err.Error(), "ignores Range") {
		t.Fatalf("GetRange(10, 5) answered with the whole object: %q, %v", got, err)
	}
	proxy.AnswerWholeObject(body)
	if got, err := b.GetRange(ctx, "k", 0, 5); err != nil || string(got) != "01234" {
		t.Fatalf("GetRange(0, 5) answered with the whole object: %q, %v", got, err)
	}
}

// Reads write nothing on stderr: the SDK logs a line for every response without a checksum to
// validate (a ranged GET: each block read) unless told not to.
func TestReadsLogNothing(t *testing.T) {
	srv := s3test.Start(t)
	srv.CreateBucket(t, "quiet")
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	saved := os.Stderr
	os.Stderr = w // the SDK's logger takes stderr when the client is made
	b, err := s3.Open(context.Background(), srv.Config("quiet"))
	os.Stderr = saved
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, err := b.Put(ctx, "k", []byte("some bytes"), storage.Condition{}); err != nil {
		t.Fatal(err)
	}
	if _, _, err := b.Get(ctx, "k"); err != nil {
		t.Fatal(err)
	}
	if _, err := b.GetRange(ctx, "k", 2, 4); err != nil {
		t.Fatal(err)
	}
	w.Close()
	out, err := io.ReadAll(r)
	if err != nil {
		t.Fatal(err)
	}
	if len(out) > 0 {
		t.Errorf("reads logged on stderr:\n%s", out)
	}
}
