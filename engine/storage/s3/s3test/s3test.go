// Package s3test starts a real S3 server (MinIO, built by hack/s3-server.sh) for tests, by PID,
// and stops it when the test ends.
package s3test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awss3 "github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/cellstore/cellstore/engine/processtest"
	s3 "github.com/cellstore/cellstore/engine/storage/s3"
)

// Credentials of the test server.
const (
	AccessKey = "cellstore-test"
	SecretKey = "cellstore-test-secret"
)

// Server is a running S3 server.
type Server struct {
	Endpoint string // http://127.0.0.1:port
	Dir      string
	cmd      *exec.Cmd
	exited   chan struct{}
}

// Binary finds the MinIO binary. hack/test.sh (make test, CI) builds it and names it in
// $CELLSTORE_S3_SERVER: then a missing binary fails the test. A plain `go test` looks where
// hack/s3-server.sh puts it and skips, saying how to get it, when it is not there.
func Binary(t testing.TB) string {
	t.Helper()
	if p := os.Getenv("CELLSTORE_S3_SERVER"); p != "" {
		if _, err := os.Stat(p); err != nil {
			t.Fatalf("CELLSTORE_S3_SERVER=%s: %v", p, err)
		}
		return p
	}
	_, file, _, _ := runtime.Caller(0)
	root := filepath.Join(filepath.Dir(file), "..", "..", "..", "..")
	out, err := exec.Command(filepath.Join(root, "hack", "s3-server.sh"), "--print-path").Output()
	if err != nil {
		t.Fatalf("hack/s3-server.sh --print-path: %v", err)
	}
	p := strings.TrimSpace(string(out))
	if _, err := os.Stat(p); err != nil {
		t.Skipf("no S3 server at %s: run hack/s3-server.sh (about 4 minutes the first time)", p)
	}
	return p
}

// Start runs a server on a fresh directory and free ports and waits until it is ready.
func Start(t testing.TB) *Server {
	t.Helper()
	bin := Binary(t)
	dir := t.TempDir()
	addr, console := "127.0.0.1:"+processtest.FreePort(t), "127.0.0.1:"+processtest.FreePort(t)
	cmd := exec.Command(bin, "server", dir, "--address", addr, "--console-address", console, "--quiet")
	cmd.Env = append(os.Environ(), "MINIO_ROOT_USER="+AccessKey, "MINIO_ROOT_PASSWORD="+SecretKey,
		"MINIO_BROWSER=off", "MINIO_UPDATE=off")
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", bin, err)
	}
	s := &Server{Endpoint: "http://" + addr, Dir: dir, cmd: cmd, exited: make(chan struct{})}
	go func() { _ = cmd.Wait(); close(s.exited) }()
	t.Cleanup(s.Stop)
	deadline := time.Now().Add(60 * time.Second)
	for {
		resp, err := http.Get(s.Endpoint + "/minio/health/ready")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return s
			}
		}
		select {
		case <-s.exited:
			t.Fatalf("the S3 server exited before it was ready: %v", cmd.ProcessState)
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("the S3 server at %s was not ready within 60 s", s.Endpoint)
		}
	}
}

// Stop kills the server (by PID) and waits for it.
func (s *Server) Stop() {
	_ = s.cmd.Process.Signal(syscall.SIGKILL)
	<-s.exited
}

// Config is a client configuration for bucket on this server.
func (s *Server) Config(bucket string) s3.Config {
	return s3.Config{Endpoint: s.Endpoint, Bucket: bucket, PathStyle: true, AccessKeyID: AccessKey, SecretAccessKey: SecretKey,
		Timeout: 30 * time.Second}
}

// CreateBucket creates a bucket (names: 3 to 63 lower-case letters, digits, '-').
func (s *Server) CreateBucket(t testing.TB, name string) {
	t.Helper()
	b, err := s3.Open(context.Background(), s.Config(name))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.Client().CreateBucket(context.Background(), &awss3.CreateBucketInput{Bucket: aws.String(name)}); err != nil {
		t.Fatalf("create bucket %s: %v", name, err)
	}
}

// Proxy sits between a client and the server and injects the failures a real store and network
// produce but cannot be made to produce on demand: error answers (503 SlowDown), slow answers,
// and answers lost after the server acted on the request (the connection dropped). Rules apply to
// the next matching requests, in order.
type Proxy struct {
	Endpoint string // what clients use instead of the server's
	srv      *httptest.Server
	stop     chan struct{}

	mu    sync.Mutex
	rules []*proxyRule
	// Requests counts the requests that reached the proxy, by method.
	requests map[string]int
}

// Fault is what a rule does.
type Fault int

const (
	// SlowDown answers 503 SlowDown without forwarding (S3's throttling answer).
	SlowDown Fault = iota
	// LoseAnswer forwards the request, lets the server act on it, then drops the connection
	// without an answer.
	LoseAnswer
	// Delay forwards the request after the rule's delay.
	Delay
	// MissingContentMD5 answers 400 MissingContentMD5 without forwarding: what MinIO releases
	// before 2025 answered a DeleteObjects that carried a CRC32 checksum instead of Content-MD5.
	MissingContentMD5
	// WholeObject answers a GET 200 with the rule's body and no Content-Range without forwarding:
	// what a store (or proxy) that ignores Range answers a ranged GET (AnswerWholeObject).
	WholeObject
	// OpaqueETag forwards the request and answers with an ETag of 32 hex digits that is not the
	// MD5 of the object, as a bucket with SSE-KMS or SSE-C encryption does.
	OpaqueETag
	// NoSuchUploadAfter forwards the request, lets the server act on it, and answers 404
	// NoSuchUpload: what a store answers a retried multipart Complete whose first attempt
	// completed the upload.
	NoSuchUploadAfter
	// TruncatedBody forwards the request and answers with the whole answer's length but half its
	// body, then closes the connection.
	TruncatedBody
)

type proxyRule struct {
	fault  Fault
	method string // "" any
	left   int
	delay  time.Duration
	body   []byte // WholeObject's
}

// StartProxy starts a proxy in front of s, stopped when the test ends.
func (s *Server) StartProxy(t testing.TB) *Proxy {
	t.Helper()
	target, err := url.Parse(s.Endpoint)
	if err != nil {
		t.Fatal(err)
	}
	rp := httputil.NewSingleHostReverseProxy(target)
	p := &Proxy{requests: map[string]int{}, stop: make(chan struct{})}
	p.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p.mu.Lock()
		p.requests[r.Method]++
		var rule *proxyRule
		for i, ru := range p.rules {
			if ru.method == "" || ru.method == r.Method {
				rule = ru
				ru.left--
				if ru.left <= 0 {
					p.rules = append(p.rules[:i], p.rules[i+1:]...)
				}
				break
			}
		}
		p.mu.Unlock()
		switch {
		case rule == nil:
			rp.ServeHTTP(w, r)
		case rule.fault == SlowDown:
			w.Header().Set("Content-Type", "application/xml")
			w.WriteHeader(http.StatusServiceUnavailable)
			fmt.Fprint(w, `<?xml version="1.0" encoding="UTF-8"?><Error><Code>SlowDown</Code><Message>Please reduce your request rate.</Message></Error>`)
		case rule.fault == MissingContentMD5:
			w.Header().Set("Content-Type", "application/xml")
			w.WriteHeader(http.StatusBadRequest)
			fmt.Fprint(w, `<?xml version="1.0" encoding="UTF-8"?><Error><Code>MissingContentMD5</Code><Message>Missing required header for this request: Content-Md5.</Message></Error>`)
		case rule.fault == TruncatedBody:
			rec := httptest.NewRecorder()
			rp.ServeHTTP(rec, r)
			body := rec.Body.Bytes()
			hj, ok := w.(http.Hijacker)
			if !ok {
				panic("s3test: the proxy's ResponseWriter cannot be hijacked")
			}
			conn, buf, err := hj.Hijack()
			if err != nil {
				return
			}
			fmt.Fprintf(buf, "HTTP/1.1 %d %s\r\n", rec.Code, http.StatusText(rec.Code))
			for k, vs := range rec.Header() {
				if k == "Content-Length" {
					continue
				}
				for _, v := range vs {
					fmt.Fprintf(buf, "%s: %s\r\n", k, v)
				}
			}
			fmt.Fprintf(buf, "Content-Length: %d\r\n\r\n", len(body))
			_, _ = buf.Write(body[:len(body)/2])
			_ = buf.Flush()
			conn.Close()
		case rule.fault == NoSuchUploadAfter:
			rp.ServeHTTP(httptest.NewRecorder(), r) // the server acts on it
			w.Header().Set("Content-Type", "application/xml")
			w.WriteHeader(http.StatusNotFound)
			fmt.Fprint(w, `<?xml version="1.0" encoding="UTF-8"?><Error><Code>NoSuchUpload</Code><Message>The specified multipart upload does not exist.</Message></Error>`)
		case rule.fault == OpaqueETag:
			rec := httptest.NewRecorder()
			rp.ServeHTTP(rec, r)
			for k, v := range rec.Header() {
				w.Header()[k] = v
			}
			if w.Header().Get("ETag") != "" {
				w.Header().Set("ETag", `"0123456789abcdef0123456789abcdef"`)
			}
			w.WriteHeader(rec.Code)
			_, _ = w.Write(rec.Body.Bytes())
		case rule.fault == WholeObject:
			w.Header().Set("Content-Length", fmt.Sprint(len(rule.body)))
			w.WriteHeader(http.StatusOK)
			_, _ = w.Write(rule.body)
		case rule.fault == Delay:
			// Read the body first: the server notices a client that gave up (its request's
			// context ends) only once the body is consumed.
			body, err := io.ReadAll(r.Body)
			if err != nil {
				return
			}
			r.Body = io.NopCloser(bytes.NewReader(body))
			select {
			case <-time.After(rule.delay):
				rp.ServeHTTP(w, r)
			case <-r.Context().Done():
			case <-p.stop:
			}
		case rule.fault == LoseAnswer:
			rec := httptest.NewRecorder()
			rp.ServeHTTP(rec, r) // the server acts on it
			hj, ok := w.(http.Hijacker)
			if !ok {
				panic("s3test: the proxy's ResponseWriter cannot be hijacked")
			}
			conn, _, err := hj.Hijack()
			if err == nil {
				conn.Close()
			}
		}
	}))
	t.Cleanup(func() { close(p.stop); p.srv.Close() })
	p.Endpoint = p.srv.URL
	return p
}

// AnswerWholeObject answers the next GET with body, whole (WholeObject).
func (p *Proxy) AnswerWholeObject(body []byte) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.rules = append(p.rules, &proxyRule{fault: WholeObject, method: "GET", left: 1, body: body})
}

// Inject makes the next n requests with method ("" any) fail with fault.
func (p *Proxy) Inject(fault Fault, method string, n int, delay time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.rules = append(p.rules, &proxyRule{fault: fault, method: method, left: n, delay: delay})
}

// Clear drops the faults not yet used: the store is well again.
func (p *Proxy) Clear() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.rules = nil
}

// Requests returns how many requests with method reached the proxy.
func (p *Proxy) Requests(method string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.requests[method]
}
