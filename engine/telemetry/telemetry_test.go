package telemetry

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

func get(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func TestEndpoints(t *testing.T) {
	s := New()
	var ready atomic.Bool
	s.Ready("master", func() error {
		if !ready.Load() {
			return errors.New("not registered with the master yet")
		}
		return nil
	})
	s.Live("loop", func() error { return nil })
	if err := s.Start("127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	defer s.Stop(context.Background())
	base := "http://" + s.Addr()
	if code, body := get(t, base+"/readyz"); code != 503 || !strings.Contains(body, "not registered") {
		t.Errorf("/readyz before ready: %d %q", code, body)
	}
	ready.Store(true)
	if code, _ := get(t, base+"/readyz"); code != 200 {
		t.Errorf("/readyz when ready: %d", code)
	}
	if code, _ := get(t, base+"/healthz"); code != 200 {
		t.Errorf("/healthz: %d", code)
	}
	code, body := get(t, base+"/metrics")
	if code != 200 || !strings.Contains(body, "go_gc_") || !strings.Contains(body, "cellstore_process_resident_memory_bytes") {
		t.Errorf("/metrics: %d, missing runtime or process metrics", code)
	}
}

func TestLocalOnly(t *testing.T) {
	h := LocalOnly(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusNoContent) }))
	for addr, want := range map[string]int{
		"127.0.0.1:5000": http.StatusNoContent, "[::1]:5000": http.StatusNoContent,
		"10.1.2.3:5000": http.StatusForbidden, "[fd00::1]:5000": http.StatusForbidden, "garbage": http.StatusForbidden,
	} {
		r := httptest.NewRequest(http.MethodPost, "/prestop", nil)
		r.RemoteAddr = addr
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		if w.Code != want {
			t.Errorf("caller %s: status %d, want %d (%s)", addr, w.Code, want, w.Body.String())
		}
		if want == http.StatusForbidden && !strings.Contains(w.Body.String(), "use the shell's drain and undrain") {
			t.Errorf("refusal does not say what to do: %s", w.Body.String())
		}
	}
}

// An endpoint whose listener fails says so on Failed (it used to discard the error: probes and
// metrics gone, nobody told).
func TestFailedReportsAnEndpointThatStopsServing(t *testing.T) {
	s := New()
	if err := s.Start("127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	s.mu.Lock()
	lis := s.lis
	s.mu.Unlock()
	_ = lis.Close() // the listener dies under the server, as on a fatal accept error
	select {
	case err := <-s.Failed():
		if !strings.Contains(err.Error(), "stopped serving") {
			t.Errorf("error %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no failure reported within 10 s")
	}
	_ = s.Stop(context.Background())

}

// A client that reads an answer and then stays silent on its kept-alive connection is closed
// after IdleTimeout, and the default is set.
func TestIdleConnectionsAreClosed(t *testing.T) {
	s := New()
	s.IdleTimeout = 300 * time.Millisecond
	if err := s.Start("127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	defer s.Stop(context.Background())
	nc, err := net.Dial("tcp", s.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	if _, err := nc.Write([]byte("GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")); err != nil {
		t.Fatal(err)
	}
	r := bufio.NewReader(nc)
	resp, err := http.ReadResponse(r, nil)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("/healthz: %v %v", resp, err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	// The server closes the silent connection: the read ends (EOF) well before its deadline.
	_ = nc.SetReadDeadline(time.Now().Add(20 * time.Second))
	if _, err := r.ReadByte(); !errors.Is(err, io.EOF) {
		t.Fatalf("reading the idle connection: %v, want EOF (the server closed it)", err)
	}
	if s.srv.IdleTimeout != 300*time.Millisecond || s.srv.ReadTimeout <= 0 {
		t.Fatalf("server timeouts: idle %v, read %v", s.srv.IdleTimeout, s.srv.ReadTimeout)
	}
	d := New()
	if err := d.Start("127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	defer d.Stop(context.Background())
	if d.srv.IdleTimeout != DefaultIdleTimeout {
		t.Fatalf("default idle timeout %v", d.srv.IdleTimeout)
	}
}

// A profile or trace asked for longer than MaxProfileSeconds is refused at once; net/http/pprof
// alone would run it (and hold the profiler) for as long as asked.
func TestProfilesAreBounded(t *testing.T) {
	s := New()
	if err := s.Start("127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	defer s.Stop(context.Background())
	base := "http://" + s.Addr()
	client := &http.Client{Timeout: 20 * time.Second}
	for _, path := range []string{"/debug/pprof/profile?seconds=100000000", "/debug/pprof/trace?seconds=1e9",
		"/debug/pprof/heap?seconds=86400", "/debug/pprof/trace?seconds=NaN"} {
		resp, err := client.Get(base + path)
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusBadRequest || !strings.Contains(string(body), "up to 300") {
			t.Errorf("%s: %d %q, want 400 saying the bound", path, resp.StatusCode, body)
		}
	}
	// A short one still works.
	resp, err := client.Get(base + "/debug/pprof/trace?seconds=0.05")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || len(body) == 0 {
		t.Errorf("a 50 ms trace: %d, %d bytes", resp.StatusCode, len(body))
	}
}
