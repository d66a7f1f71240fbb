// Package s3 is the storage.Bucket of an S3-compatible object store (AWS S3, GCS's S3
// interoperability, MinIO, ...), on the AWS SDK for Go v2.
//
// Conditional writes are S3's If-None-Match: * (create only) and If-Match: <etag> (replace only
// that version). A store without them cannot fence a writer: Open's caller checks with
// CheckConditionalWrites once at start and refuses to run on such a bucket.
package s3

import (
	"bytes"
	"context"
	"crypto/md5"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/ratelimit"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	awsconfig "github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/credentials"
	awss3 "github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"
	"github.com/aws/smithy-go"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/cellstore/cellstore/engine/storage"
)

// Config locates a bucket and says how to reach it.
type Config struct {
	// Endpoint is the store's URL ("http://127.0.0.1:9000"); empty: AWS's endpoint for Region.
	Endpoint string
	// Bucket must exist.
	Bucket string
	// Prefix, if set, is put before every key ("clusters/prod" → "clusters/prod/<key>").
	Prefix string
	// Region defaults to us-east-1.
	Region string
	// PathStyle addresses the bucket in the path (MinIO and most self-hosted stores) instead of
	// the host name.
	PathStyle bool
	// AccessKeyID and SecretAccessKey are static credentials; empty: the SDK's ambient chain
	// (environment, web identity — IRSA, workload identity —, instance profile).
	AccessKeyID, SecretAccessKey, SessionToken string
	// CABundle holds PEM certificates trusted for the endpoint, besides the system's.
	CABundle []byte
	// Timeout bounds one request, retries included (default 30 s).
	Timeout time.Duration
	// MaxAttempts bounds a request's attempts: throttling (503 SlowDown) and server errors are
	// retried with exponential backoff and jitter (default 5).
	MaxAttempts int
	// MaxBackoff caps the wait between attempts (default 5 s; the waits grow exponentially from
	// 100 ms, with jitter).
	MaxBackoff time.Duration
	// Registerer, if set, receives the request metrics (cellstore_s3_*).
	Registerer prometheus.Registerer
}

// Bucket is a storage.Bucket on S3.
type Bucket struct {
	cfg     Config
	client  *awss3.Client
	metrics *metrics
	// oneByOne: the store refused a DeleteObjects (an S3-compatible store without it, or one that
	// wants the Content-MD5 the SDK no longer sends): DeleteBatch deletes one key at a time.
	oneByOne atomic.Bool
}

var _ storage.Bucket = (*Bucket)(nil)

// Open makes the client. It sends no request: CheckConditionalWrites does.
func Open(ctx context.Context, cfg Config) (*Bucket, error) {
	if cfg.Bucket == "" {
		return nil, errors.New("s3: no bucket given")
	}
	if cfg.Region == "" {
		cfg.Region = "us-east-1"
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = 30 * time.Second
	}
	if cfg.MaxAttempts <= 0 {
		cfg.MaxAttempts = 5
	}
	if cfg.MaxBackoff <= 0 {
		cfg.MaxBackoff = 5 * time.Second
	}
	cfg.Prefix = strings.Trim(cfg.Prefix, "/")
	httpClient := awshttp.NewBuildableClient()
	if len(cfg.CABundle) > 0 {
		pool, err := x509.SystemCertPool()
		if err != nil || pool == nil {
			pool = x509.NewCertPool()
		}
		if !pool.AppendCertsFromPEM(cfg.CABundle) {
			return nil, errors.New("s3: the CA bundle holds no PEM certificate")
		}
		httpClient = httpClient.WithTransportOptions(func(tr *http.Transport) {
			if tr.TLSClientConfig == nil {
				tr.TLSClientConfig = &tls.Config{MinVersion: tls.VersionTLS12}
			}
			tr.TLSClientConfig.RootCAs = pool
		})
	}
	opts := []func(*awsconfig.LoadOptions) error{
		awsconfig.WithRegion(cfg.Region),
		awsconfig.WithHTTPClient(httpClient),
		awsconfig.WithRetryer(func() aws.Retryer {
			return retry.NewStandard(func(o *retry.StandardOptions) {
				o.MaxAttempts = cfg.MaxAttempts
				o.MaxBackoff = cfg.MaxBackoff
				o.Backoff = backoff{storage.Backoff{First: firstBackoff, Max: cfg.MaxBackoff}}
				// The SDK's default spends a shared budget of retries that a burst of throttling
				// empties, after which every request fails at its first error ("retry quota
				// exceeded") until enough succeed: a store whose writes wait for their PUTs
				// retries each request by its own attempts and backoff instead.
				o.RateLimiter = ratelimit.None
			})
		}),
	}
	if cfg.AccessKeyID != "" || cfg.SecretAccessKey != "" {
		if cfg.AccessKeyID == "" || cfg.SecretAccessKey == "" {
			return nil, errors.New("s3: give both an access key id and a secret access key, or neither (the ambient credentials)")
		}
		opts = append(opts, awsconfig.WithCredentialsProvider(credentials.NewStaticCredentialsProvider(cfg.AccessKeyID, cfg.SecretAccessKey, cfg.SessionToken)))
	}
	awsCfg, err := awsconfig.LoadDefaultConfig(ctx, opts...)
	if err != nil {
		return nil, fmt.Errorf("s3: %w", err)
	}
	client := awss3.NewFromConfig(awsCfg, func(o *awss3.Options) {
		o.UsePathStyle = cfg.PathStyle
		// A ranged GET (every block read) has no checksum to validate, on AWS as on MinIO, and
		// the SDK would log a line for each on stderr; the store files and the WAL carry checksums
		// of their own.
		o.DisableLogOutputChecksumValidationSkipped = true
		if cfg.Endpoint != "" {
			o.BaseEndpoint = aws.String(cfg.Endpoint)
		}
	})
	return &Bucket{cfg: cfg, client: client, metrics: newMetrics(cfg.Registerer)}, nil
}

// Describe implements storage.Bucket.
func (b *Bucket) Describe() string {
	d := "s3://" + b.cfg.Bucket
	if b.cfg.Prefix != "" {
		d += "/" + b.cfg.Prefix
	}
	if b.cfg.Endpoint != "" {
		d += " at " + b.cfg.Endpoint
	}
	return d
}

func (b *Bucket) key(k string) string {
	if b.cfg.Prefix == "" {
		return k
	}
	return b.cfg.Prefix + "/" + k
}

// call runs one request under the timeout, counts it and names the bucket and key in its error.
func (b *Bucket) call(ctx context.Context, op, key string, fn func(ctx context.Context) error) error {
	ctx, cancel := context.WithTimeout(ctx, b.cfg.Timeout)
	defer cancel()
	start := time.Now()
	err := fn(ctx)
	b.metrics.observe(op, err, time.Since(start))
	if err == nil {
		return nil
	}
	return b.explain(op, key, err)
}

// explain maps the store's answer to the storage errors and says what to do.
func (b *Bucket) explain(op, key string, err error) error {
	code, status := answer(err)
	where := fmt.Sprintf("%s %s (bucket %s", op, key, b.cfg.Bucket)
	if b.cfg.Endpoint != "" {
		where += " at " + b.cfg.Endpoint
	}
	where += ")"
	switch {
	case code == "PreconditionFailed" || status == http.StatusPreconditionFailed:
		return fmt.Errorf("%w: %s", storage.ErrPrecondition, where)
	case code == "ConditionalRequestConflict" || status == http.StatusConflict && op == "put":
		// A concurrent conditional write to the key is under way: it may win; this one lost.
		return fmt.Errorf("%w: %w: %s: %v", storage.ErrPrecondition, storage.ErrConflict, where, err)
	case code == "NoSuchBucket":
		return fmt.Errorf("s3: %s: the bucket does not exist: create it, or fix the bucket name", where)
	case code == "NoSuchKey" || code == "NotFound" || status == http.StatusNotFound:
		return fmt.Errorf("%w: %s", storage.ErrNoObject, where)
	case code == "AccessDenied" || code == "InvalidAccessKeyId" || code == "SignatureDoesNotMatch" || status == http.StatusForbidden:
		who := "the ambient credentials (environment, web identity, instance profile)"
		if b.cfg.AccessKeyID != "" {
			who = "access key id " + b.cfg.AccessKeyID
		}
		return fmt.Errorf("s3: %s: access denied for %s (%s): check the credentials and the bucket's policy", where, who, code)
	case unavailable(err):
		return fmt.Errorf("%w: s3: %s: %w", storage.ErrUnavailable, where, err)
	}
	return fmt.Errorf("s3: %s: %w", where, err)
}

// firstBackoff is the wait before a request's second attempt; each later wait doubles, up to
// Config.MaxBackoff.
const firstBackoff = 100 * time.Millisecond

// backoff is the SDK's wait before attempt+1: firstBackoff·2^(attempt-1), capped, jittered down
// by up to half. The SDK's default waits on throttling up to 1, 2, 4 and 5 s (about 6 s on
// average for four; 50 ms doubling for other errors) — on the write path of a store whose every
// write waits for a PUT, and with the master's catalog write (under its lock) among them.
type backoff struct{ storage.Backoff }

func (b backoff) BackoffDelay(attempt int, _ error) (time.Duration, error) {
	return b.Jittered(attempt), nil
}

// unavailable says whether err — after the SDK's own attempts — is one the SDK retries: throttling
// (503 SlowDown and the like), a server error (500, 502, 503, 504), a request timeout or a
// connection that failed or broke, or no answer within the call's timeout. A caller whose
// context was canceled gets no such verdict.
func unavailable(err error) bool {
	if errors.Is(err, context.Canceled) {
		return false
	}
	return errors.Is(err, context.DeadlineExceeded) ||
		retry.IsErrorRetryables(retry.DefaultRetryables).IsErrorRetryable(err) == aws.TrueTernary
}

// Put implements storage.Bucket.
func (b *Bucket) Put(ctx context.Context, key string, body []byte, cond storage.Condition) (string, error) {
	if err := storage.CheckKey(key); err != nil {
		return "", err
	}
	in := &awss3.PutObjectInput{Bucket: &b.cfg.Bucket, Key: aws.String(b.key(key)), Body: bytes.NewReader(body),
		ContentLength: aws.Int64(int64(len(body)))}
	if cond.IfNoneMatch {
		in.IfNoneMatch = aws.String("*")
	}
	if cond.IfMatch != "" {
		in.IfMatch = aws.String(cond.IfMatch)
	}
	var etag string
	err := b.call(ctx, "put", key, func(ctx context.Context) error {
		out, err := b.client.PutObject(ctx, in)
		if err == nil {
			etag = aws.ToString(out.ETag)
		}
		return err
	})
	if errors.Is(err, storage.ErrNoObject) && cond.IfMatch != "" {
		// AWS answers 404 to If-Match on a missing key: the condition failed.
		return "", fmt.Errorf("%w: put %s if it has ETag %s: the object does not exist", storage.ErrPrecondition, key, cond.IfMatch)
	}
	if errors.Is(err, storage.ErrPrecondition) {
		// The SDK retries a PUT whose answer was lost; if the first attempt took effect, the retry
		// fails its own condition. The object being this body means the write happened.
		etag, ok, herr := b.holds(ctx, key, body)
		if ok {
			return etag, nil
		}
		if herr != nil {
			// Whether an earlier attempt took effect is not known: not a failed condition.
			return "", fmt.Errorf("%w: put %s: the condition failed, and reading the key back to see whether this put's earlier attempt took effect failed: %w",
				storage.ErrUnavailable, key, herr)
		}
	}
	if err != nil {
		return "", err
	}
	b.metrics.bytesOut.Add(float64(len(body)))
	return etag, nil
}

// holds says whether the object at key is body, and its ETag. A single-part PUT's ETag is the
// body's MD5 (AWS without SSE-KMS, MinIO); an ETag that is not is checked by reading — also one
// of 32 hex digits, which SSE-KMS and SSE-C give without being an MD5 of the data (taken for the
// MD5 of other bytes, this process's own landed write was called someone else's). A missing key
// does not hold it; an error says the key could not be read (nothing is known).
func (b *Bucket) holds(ctx context.Context, key string, body []byte) (string, bool, error) {
	info, err := b.Stat(ctx, key)
	if errors.Is(err, storage.ErrNoObject) {
		return "", false, nil
	}
	if err != nil {
		return "", false, err
	}
	if info.Size != int64(len(body)) {
		return "", false, nil
	}
	sum := md5.Sum(body)
	if strings.Trim(info.ETag, `"`) == hex.EncodeToString(sum[:]) {
		return info.ETag, true, nil
	}
	data, got, err := b.Get(ctx, key)
	if errors.Is(err, storage.ErrNoObject) {
		return "", false, nil
	}
	if err != nil {
		return "", false, err
	}
	if !bytes.Equal(data, body) {
		return "", false, nil
	}
	return got.ETag, true, nil
}

// Get implements storage.Bucket.
func (b *Bucket) Get(ctx context.Context, key string) ([]byte, storage.ObjectInfo, error) {
	if err := storage.CheckKey(key); err != nil {
		return nil, storage.ObjectInfo{}, err
	}
	var data []byte
	var info storage.ObjectInfo
	err := b.getWithRetries(ctx, key, func(ctx context.Context) error {
		out, err := b.client.GetObject(ctx, &awss3.GetObjectInput{Bucket: &b.cfg.Bucket, Key: aws.String(b.key(key))})
		if err != nil {
			return err
		}
		defer out.Body.Close()
		data, err = io.ReadAll(out.Body)
		info = storage.ObjectInfo{Key: key, Size: int64(len(data)), ETag: aws.ToString(out.ETag), ModTime: aws.ToTime(out.LastModified)}
		return bodyErr(err)
	})
	if err != nil {
		return nil, storage.ObjectInfo{}, err
	}
	b.metrics.bytesIn.Add(float64(len(data)))
	return data, info, nil
}

// GetRange implements storage.Bucket.
func (b *Bucket) GetRange(ctx context.Context, key string, off, n int64) ([]byte, error) {
	if err := storage.CheckKey(key); err != nil {
		return nil, err
	}
	if off < 0 || n < 0 {
		return nil, fmt.Errorf("s3: get %s: bad range %d+%d", key, off, n)
	}
	if n == 0 {
		_, err := b.Stat(ctx, key)
		return []byte{}, err
	}
	var data []byte
	err := b.getWithRetries(ctx, key, func(ctx context.Context) error {
		out, err := b.client.GetObject(ctx, &awss3.GetObjectInput{Bucket: &b.cfg.Bucket, Key: aws.String(b.key(key)),
			Range: aws.String(fmt.Sprintf("bytes=%d-%d", off, off+n-1))})
		if err != nil {
			return err
		}
		defer out.Body.Close()
		if err := checkContentRange(aws.ToString(out.ContentRange), off); err != nil {
			return fmt.Errorf("%w (answering %s of %s)", err, fmt.Sprintf("bytes=%d-%d", off, off+n-1), b.Describe())
		}
		data, err = io.ReadAll(io.LimitReader(out.Body, n))
		return bodyErr(err)
	})
	var ae smithy.APIError
	if err != nil && errors.As(err, &ae) && ae.ErrorCode() == "InvalidRange" {
		return []byte{}, nil // at or past the end
	}
	if err != nil {
		return nil, err
	}
	b.metrics.bytesIn.Add(float64(len(data)))
	return data, nil
}

// getAttempts bounds the GETs a read makes when the answer's body breaks off: the SDK retries a
// request that fails, not the reading of a body it handed over.
const getAttempts = 3

// getWithRetries runs a GET (call's "get") again, after a backoff, while its answer's body breaks
// off (bodyErr); a failed request was retried by the SDK already.
func (b *Bucket) getWithRetries(ctx context.Context, key string, fn func(ctx context.Context) error) error {
	bo := storage.Backoff{First: firstBackoff, Max: b.cfg.MaxBackoff}
	for attempt := 1; ; attempt++ {
		err := b.call(ctx, "get", key, fn)
		if err == nil || attempt >= getAttempts || !errors.Is(err, errBodyBroken) {
			return err
		}
		t := time.NewTimer(bo.Jittered(attempt))
		select {
		case <-ctx.Done():
			t.Stop()
			return err
		case <-t.C:
		}
	}
}

// bodyErr is a failure to read an answer's body: the store was reached, the answer broke off (a
// reset, a body shorter than its length) — unavailable for now, as a failed request is.
func bodyErr(err error) error {
	if err == nil || errors.Is(err, context.Canceled) {
		return err
	}
	if errors.Is(err, context.DeadlineExceeded) {
		// The call's time ran out while the body came (a slow store, a large object): not a
		// break to try again at the same timeout.
		return fmt.Errorf("%w: reading the answer: %w", storage.ErrUnavailable, err)
	}
	return fmt.Errorf("%w: %w: %w", storage.ErrUnavailable, errBodyBroken, err)
}

var errBodyBroken = errors.New("the answer's body broke off")

// checkContentRange checks that the answer to a ranged GET starts at off: a store (or a proxy)
// that ignores Range answers the whole object, whose first bytes would be taken for those at off.
func checkContentRange(cr string, off int64) error {
	if cr == "" {
		if off == 0 {
			return nil // the whole object from its start (a store may answer a range so)
		}
		return errors.New("s3: the store answered a ranged GET without a Content-Range: it ignores Range requests")
	}
	spec, ok := strings.CutPrefix(cr, "bytes ")
	first, _, dash := strings.Cut(spec, "-")
	start, err := strconv.ParseInt(first, 10, 64)
	if !ok || !dash || err != nil || start != off {
		return fmt.Errorf("s3: the store answered a ranged GET from %d with Content-Range %q", off, cr)
	}
	return nil
}

// Stat implements storage.Bucket.
func (b *Bucket) Stat(ctx context.Context, key string) (storage.ObjectInfo, error) {
	if err := storage.CheckKey(key); err != nil {
		return storage.ObjectInfo{}, err
	}
	var info storage.ObjectInfo
	err := b.call(ctx, "head", key, func(ctx context.Context) error {
		out, err := b.client.HeadObject(ctx, &awss3.HeadObjectInput{Bucket: &b.cfg.Bucket, Key: aws.String(b.key(key))})
		if err == nil {
			info = storage.ObjectInfo{Key: key, Size: aws.ToInt64(out.ContentLength), ETag: aws.ToString(out.ETag), ModTime: aws.ToTime(out.LastModified)}
		}
		return err
	})
	return info, err
}

// List implements storage.Bucket.
func (b *Bucket) List(ctx context.Context, prefix, startAfter string, limit int) ([]storage.ObjectInfo, error) {
	var out []storage.ObjectInfo
	in := &awss3.ListObjectsV2Input{Bucket: &b.cfg.Bucket, Prefix: aws.String(b.key(prefix))}
	if b.cfg.Prefix == "" && prefix == "" {
		in.Prefix = nil
	}
	if startAfter != "" {
		in.StartAfter = aws.String(b.key(startAfter))
	}
	strip := 0
	if b.cfg.Prefix != "" {
		strip = len(b.cfg.Prefix) + 1
	}
	for {
		if limit > 0 {
			in.MaxKeys = aws.Int32(int32(min(limit-len(out), 1000)))
		}
		var page *awss3.ListObjectsV2Output
		err := b.call(ctx, "list", prefix, func(ctx context.Context) error {
			var err error
			page, err = b.client.ListObjectsV2(ctx, in)
			return err
		})
		if err != nil {
			return nil, err
		}
		for _, o := range page.Contents {
			k := aws.ToString(o.Key)
			if len(k) < strip {
				continue
			}
			out = append(out, storage.ObjectInfo{Key: k[strip:], Size: aws.ToInt64(o.Size), ETag: aws.ToString(o.ETag), ModTime: aws.ToTime(o.LastModified)})
		}
		if !aws.ToBool(page.IsTruncated) || limit > 0 && len(out) >= limit {
			break
		}
		// Truncated: every page is filled but the last (storage.Walk stops at a short one). A
		// store that gives no continuation token is asked again after the last key it listed.
		switch {
		case page.NextContinuationToken != nil:
			in.ContinuationToken = page.NextContinuationToken
		case len(page.Contents) > 0:
			in.ContinuationToken, in.StartAfter = nil, page.Contents[len(page.Contents)-1].Key
		default:
			return nil, fmt.Errorf("s3: list %s in %s: the store said its answer was truncated, yet listed nothing and gave no continuation token",
				prefix, b.Describe())
		}
	}
	if limit > 0 && len(out) > limit {
		out = out[:limit]
	}
	return out, nil
}

// Delete implements storage.Bucket.
func (b *Bucket) Delete(ctx context.Context, key string) error {
	if err := storage.CheckKey(key); err != nil {
		return err
	}
	err := b.call(ctx, "delete", key, func(ctx context.Context) error {
		_, err := b.client.DeleteObject(ctx, &awss3.DeleteObjectInput{Bucket: &b.cfg.Bucket, Key: aws.String(b.key(key))})
		return err
	})
	if errors.Is(err, storage.ErrNoObject) {
		return nil
	}
	return err
}

// DeleteBatch implements storage.BatchDeleter with DeleteObjects (quiet: the answer lists only the
// keys it could not delete).
func (b *Bucket) DeleteBatch(ctx context.Context, keys []string) error {
	if len(keys) == 0 {
		return nil
	}
	if len(keys) > storage.MaxDeleteBatch {
		return fmt.Errorf("s3: DeleteBatch of %d keys: at most %d", len(keys), storage.MaxDeleteBatch)
	}
	ids := make([]types.ObjectIdentifier, len(keys))
	for i, k := range keys {
		if err := storage.CheckKey(k); err != nil {
			return err
		}
		ids[i] = types.ObjectIdentifier{Key: aws.String(b.key(k))}
	}
	if b.oneByOne.Load() {
		_, err := storage.DeleteEach(ctx, b, keys)
		return err
	}
	var out *awss3.DeleteObjectsOutput
	var refused bool
	err := b.call(ctx, "deletebatch", fmt.Sprintf("%s and %d more", keys[0], len(keys)-1), func(ctx context.Context) error {
		var err error
		out, err = b.client.DeleteObjects(ctx, &awss3.DeleteObjectsInput{Bucket: &b.cfg.Bucket,
			Delete: &types.Delete{Objects: ids, Quiet: aws.Bool(true)}})
		refused = batchDeleteRefused(err)
		return err
	})
	if refused {
		b.oneByOne.Store(true)
		_, err := storage.DeleteEach(ctx, b, keys)
		return err
	}
	if err != nil {
		return err
	}
	for _, e := range out.Errors {
		// (The key in the answer carries the bucket's prefix.)
		return fmt.Errorf("s3: delete %s (bucket %s): %s: %s (%d keys of %d not deleted)", aws.ToString(e.Key), b.cfg.Bucket,
			aws.ToString(e.Code), aws.ToString(e.Message), len(out.Errors), len(keys))
	}
	return nil
}

// batchDeleteRefused says whether a DeleteObjects failed because the store does not take it the
// way the SDK sends it: no multi-object delete at all, or a demand for Content-MD5 (MinIO before
// 2025, some other S3-compatible stores).
func batchDeleteRefused(err error) bool {
	var ae smithy.APIError
	if errors.As(err, &ae) {
		switch ae.ErrorCode() {
		case "MissingContentMD5", "NotImplemented", "XNotImplemented", "MethodNotAllowed":
			return true
		}
	}
	var re *awshttp.ResponseError
	if errors.As(err, &re) {
		switch re.HTTPStatusCode() {
		case http.StatusNotImplemented, http.StatusMethodNotAllowed:
			return true
		}
	}
	return false
}

// CheckConditionalWrites proves, once at start, that the store honours conditional writes the
// way fencing needs: a second create-only PUT of a key fails, and a replace-only PUT of a missing
// key fails (some MinIO releases let it create the key). It also proves the bucket is reachable
// and writable with these credentials. It leaves nothing behind.
func (b *Bucket) CheckConditionalWrites(ctx context.Context) error {
	var rnd [8]byte
	_, _ = rand.Read(rnd[:])
	probe := ".cellstore-probe/" + hex.EncodeToString(rnd[:])
	defer b.Delete(context.WithoutCancel(ctx), probe) //nolint:errcheck // best effort
	etag, err := b.Put(ctx, probe, []byte("probe"), storage.Condition{IfNoneMatch: true})
	if err != nil {
		return fmt.Errorf("s3: %s cannot be written: %w", b.Describe(), err)
	}
	if _, err := b.Put(ctx, probe, []byte("again"), storage.Condition{IfNoneMatch: true}); !errors.Is(err, storage.ErrPrecondition) {
		return fmt.Errorf("s3: %s does not honour If-None-Match (a second create-only PUT answered %v): "+
			"Cellstore needs conditional writes to fence writers; use a store that supports them", b.Describe(), err)
	}
	missing := probe + "-missing"
	if _, err := b.Put(ctx, missing, []byte("x"), storage.Condition{IfMatch: etag}); !errors.Is(err, storage.ErrPrecondition) {
		_ = b.Delete(context.WithoutCancel(ctx), missing)
		return fmt.Errorf("s3: %s does not honour If-Match (a replace-only PUT of a missing key answered %v): "+
			"Cellstore needs conditional writes to fence writers; use a store that supports them", b.Describe(), err)
	}
	return nil
}

// Client is the SDK client, for administration the Bucket does not cover (creating buckets in
// tests).
func (b *Bucket) Client() *awss3.Client { return b.client }

// Collectors are the bucket's request metrics (cellstore_s3_*), for a registry chosen after Open
// (Config.Registerer registers them at Open).
func (b *Bucket) Collectors() []prometheus.Collector {
	return []prometheus.Collector{b.metrics.requests, b.metrics.latency, b.metrics.bytesIn, b.metrics.bytesOut}
}

// CreateIfMissing creates the bucket when it does not exist (development stores: a production
// bucket is made, with its policies, by whoever owns the account).
func (b *Bucket) CreateIfMissing(ctx context.Context) error {
	_, err := b.client.HeadBucket(ctx, &awss3.HeadBucketInput{Bucket: aws.String(b.cfg.Bucket)})
	if err == nil {
		return nil
	}
	if _, cerr := b.client.CreateBucket(ctx, &awss3.CreateBucketInput{Bucket: aws.String(b.cfg.Bucket)}); cerr != nil {
		var owned *types.BucketAlreadyOwnedByYou
		if errors.As(cerr, &owned) {
			return nil
		}
		return b.explain("create bucket", "", cerr)
	}
	return nil
}
