package security

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// testCA makes a CA for a test.
func testCA(t *testing.T) *CA {
	t.Helper()
	ca, _, err := NewCA("test-ca", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	return ca
}

func issue(t *testing.T, ca *CA, req Request) *Issued {
	t.Helper()
	if req.Validity == 0 {
		req.Validity = time.Hour
	}
	is, err := ca.Issue(req)
	if err != nil {
		t.Fatal(err)
	}
	return is
}

// touchLater gives path a modification time after every earlier write (file systems with coarse
// time stamps would otherwise show no change).
func touchLater(t *testing.T, path string, d time.Duration) {
	t.Helper()
	at := time.Now().Add(d)
	if err := os.Chtimes(path, at, at); err != nil {
		t.Fatal(err)
	}
}

func TestCertsReloadWhenFilesChange(t *testing.T) {
	ca := testCA(t)
	dir := t.TempDir()
	a := issue(t, ca, Request{CommonName: "a", DNSNames: []string{"localhost"}, Server: true})
	files, err := a.WriteFiles(dir, ca.CertPEM)
	if err != nil {
		t.Fatal(err)
	}
	c, err := LoadCerts(files)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	c.now = func() time.Time { return now }
	if got := c.Leaf().Subject.CommonName; got != "a" {
		t.Fatalf("leaf %q, want a", got)
	}

	// A new certificate is used once a second has passed since the last look.
	b := issue(t, ca, Request{CommonName: "b", DNSNames: []string{"localhost"}, Server: true})
	if _, err := b.WriteFiles(dir, ca.CertPEM); err != nil {
		t.Fatal(err)
	}
	touchLater(t, files.Cert, time.Second)
	if got := c.Leaf().Subject.CommonName; got != "a" {
		t.Fatalf("looked again within a second: leaf %q", got)
	}
	now = now.Add(2 * time.Second)
	if got := c.Leaf().Subject.CommonName; got != "b" {
		t.Fatalf("after the change leaf %q, want b", got)
	}
	cfg, err := c.ServerConfig(tls.NoClientCert)
	if err != nil || cfg.Certificates[0].Leaf.Subject.CommonName != "b" {
		t.Fatalf("server config after reload: %v", err)
	}

	// A key that does not match keeps b in use, and says why; fixing it is picked up.
	other := issue(t, ca, Request{CommonName: "c", Server: true})
	if err := os.WriteFile(files.Key, other.KeyPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	touchLater(t, files.Key, 2*time.Second)
	now = now.Add(2 * time.Second)
	if got := c.Leaf().Subject.CommonName; got != "b" || c.Err() == nil {
		t.Fatalf("mismatched key: leaf %q err %v, want b and an error", got, c.Err())
	}
	if err := os.WriteFile(files.Cert, other.CertPEM, 0o644); err != nil {
		t.Fatal(err)
	}
	touchLater(t, files.Cert, 3*time.Second)
	now = now.Add(2 * time.Second)
	if got := c.Leaf().Subject.CommonName; got != "c" || c.Err() != nil {
		t.Fatalf("fixed: leaf %q err %v, want c and no error", got, c.Err())
	}
	if c.reloads != 2 || c.failures != 1 {
		t.Fatalf("reloads %d failures %d, want 2 and 1", c.reloads, c.failures)
	}
}

func TestLoadCertsRefusesBadFiles(t *testing.T) {
	ca := testCA(t)
	dir := t.TempDir()
	a := issue(t, ca, Request{CommonName: "a", Server: true})
	files, err := a.WriteFiles(dir, ca.CertPEM)
	if err != nil {
		t.Fatal(err)
	}
	junk := filepath.Join(dir, "junk")
	if err := os.WriteFile(junk, []byte("not pem"), 0o644); err != nil {
		t.Fatal(err)
	}
	for name, f := range map[string]Files{
		"cert without key": {Cert: files.Cert},
		"missing file":     {Cert: files.Cert, Key: filepath.Join(dir, "nope")},
		"CA not PEM":       {CA: junk},
		"cert not PEM":     {Cert: junk, Key: files.Key},
	} {
		if _, err := LoadCerts(f); err == nil {
			t.Errorf("%s: loaded", name)
		}
	}
	c, err := LoadCerts(Files{CA: files.CA})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.ServerConfig(tls.NoClientCert); err == nil {
		t.Error("a CA alone made a server configuration")
	}
}

func TestTokens(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "tokens")
	alice, aliceLine, err := NewToken("alice", []string{"dev", "ops"})
	if err != nil {
		t.Fatal(err)
	}
	bob, bobLine, err := NewToken("bob", nil)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(alice, TokenPrefix) || strings.Contains(aliceLine, alice) {
		t.Fatalf("token %q line %q: the line must hold the hash, not the token", alice, aliceLine)
	}
	if err := os.WriteFile(path, []byte("# users\n"+aliceLine+"\n\n"+bobLine+" # bob\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	tk, err := LoadTokens(path)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	tk.now = func() time.Time { return now }
	if id, ok := tk.Lookup(alice); !ok || id.User != "alice" || !id.InGroup("ops") || id.Method != MethodToken {
		t.Fatalf("alice: %+v %v", id, ok)
	}
	if id, ok := tk.Lookup(bob); !ok || id.User != "bob" || len(id.Groups) != 0 {
		t.Fatalf("bob: %+v %v", id, ok)
	}
	if _, ok := tk.Lookup(alice + "x"); ok {
		t.Fatal("a wrong token was accepted")
	}

	// bob removed: refused once the file is looked at again.
	if err := os.WriteFile(path, []byte(aliceLine+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	touchLater(t, path, time.Second)
	now = now.Add(2 * time.Second)
	if _, ok := tk.Lookup(bob); ok {
		t.Fatal("a removed token is still accepted")
	}
	// A file that no longer parses keeps the tokens in use.
	if err := os.WriteFile(path, []byte(alice+" alice\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	touchLater(t, path, 2*time.Second)
	now = now.Add(2 * time.Second)
	if _, ok := tk.Lookup(alice); !ok || tk.Err() == nil {
		t.Fatalf("bad file: alice accepted %v, err %v; want accepted and an error", ok, tk.Err())
	}

	for _, bad := range []string{"sha256:abc alice", "alice sha256:" + strings.Repeat("0", 64), "sha256:" + strings.Repeat("0", 64)} {
		if _, err := parseTokens([]byte(bad)); err == nil {
			t.Errorf("%q parsed", bad)
		}
	}
	if _, _, err := NewToken("al ice", nil); err == nil {
		t.Error("a user name with a space was accepted")
	}
}

func TestAuthenticate(t *testing.T) {
	ca := testCA(t)
	dir := t.TempDir()
	tok, line, _ := NewToken("tess", []string{"g"})
	path := filepath.Join(dir, "tokens")
	if err := os.WriteFile(path, []byte(line+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	tokens, err := LoadTokens(path)
	if err != nil {
		t.Fatal(err)
	}
	client := issue(t, ca, Request{CommonName: "carl", Organizations: []string{"analysts"}, Client: true})
	verified := &tls.ConnectionState{PeerCertificates: [](*x509.Certificate){client.Cert}}
	verified.VerifiedChains = [][]*x509.Certificate{{client.Cert, ca.Cert}}
	unverified := &tls.ConnectionState{}

	on := &Authenticator{Required: true, Tokens: tokens}
	var off *Authenticator
	cases := []struct {
		name     string
		a        *Authenticator
		cs       *tls.ConnectionState
		token    string
		declared string
		want     string // user, or "" for a refusal
	}{
		{"on: certificate", on, verified, "", "mallory", "carl"},
		{"on: token", on, unverified, tok, "mallory", "tess"},
		{"on: token wins over certificate", on, verified, tok, "", "tess"},
		{"on: nothing", on, unverified, "", "mallory", ""},
		{"on: plaintext", on, nil, "", "mallory", ""},
		{"on: unknown token", on, unverified, "cst_nope", "", ""},
		{"on: token in plaintext", on, nil, tok, "", ""},
		{"off: declared", off, nil, "", "dora", "dora"},
		{"off: certificate still proves", &Authenticator{}, verified, "", "dora", "carl"},
		{"off: a token with no token file", off, unverified, tok, "", ""},
	}
	for _, c := range cases {
		id, err := c.a.Authenticate(c.cs, c.token, c.declared)
		switch {
		case c.want == "" && (err == nil || !errors.Is(err, ErrUnauthenticated) || !IsAuthFailure(err)):
			t.Errorf("%s: got %+v, %v; want a refusal", c.name, id, err)
		case c.want != "" && (err != nil || id.User != c.want):
			t.Errorf("%s: got %+v, %v; want %s", c.name, id, err, c.want)
		}
	}
	id, _ := on.Authenticate(verified, "", "")
	if !id.InGroup("analysts") || !id.Authenticated() {
		t.Errorf("certificate identity %+v: want group analysts, authenticated", id)
	}
}

// TestIssuedCertificatesVerify checks what the CA issues against crypto/tls itself: a server
// certificate for its names only, a client certificate for clients only.
func TestIssuedCertificatesVerify(t *testing.T) {
	ca := testCA(t)
	dir := t.TempDir()
	srv := issue(t, ca, Request{CommonName: "server", DNSNames: []string{"*.rs.ns.svc", "localhost"}, IPs: []net.IP{net.IPv4(127, 0, 0, 1)}, Server: true, Client: true})
	sf, err := srv.WriteFiles(filepath.Join(dir), ca.CertPEM)
	if err != nil {
		t.Fatal(err)
	}
	sc, err := LoadCerts(sf)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := sc.ServerConfig(tls.RequireAndVerifyClientCert)
	if err != nil {
		t.Fatal(err)
	}
	lis, err := tls.Listen("tcp", "127.0.0.1:0", cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer lis.Close()
	go func() {
		for {
			c, err := lis.Accept()
			if err != nil {
				return
			}
			go func() { _ = c.(*tls.Conn).Handshake(); c.Close() }()
		}
	}()
	clientDir := filepath.Join(dir, "client")
	if err := os.Mkdir(clientDir, 0o755); err != nil {
		t.Fatal(err)
	}
	cl := issue(t, ca, Request{CommonName: "u", Client: true})
	cf, err := cl.WriteFiles(clientDir, ca.CertPEM)
	if err != nil {
		t.Fatal(err)
	}
	cc, err := LoadCerts(cf)
	if err != nil {
		t.Fatal(err)
	}
	try := func(name string, c *Certs) error {
		conn, err := tls.Dial("tcp", lis.Addr().String(), c.ClientConfig(name))
		if err != nil {
			return err
		}
		defer conn.Close()
		// TLS 1.3: the server's verdict on the client certificate arrives after the
		// client's side of the handshake.
		_ = conn.SetReadDeadline(time.Now().Add(5 * time.Second))
		_, err = conn.Read(make([]byte, 1))
		if errors.Is(err, io.EOF) {
			return nil // the server accepted the handshake and closed
		}
		return err
	}
	if err := try("127.0.0.1", cc); err != nil {
		t.Errorf("by IP: %v", err)
	}
	if err := try("rs-0.rs.ns.svc", cc); err != nil {
		t.Errorf("by wildcard name: %v", err)
	}
	if err := try("other.example", cc); err == nil || !IsAuthFailure(err) {
		t.Errorf("a name the certificate lacks: %v, want a verification failure", err)
	}
	noClientCert, err := LoadCerts(Files{CA: sf.CA})
	if err != nil {
		t.Fatal(err)
	}
	if err := try("localhost", noClientCert); err == nil || !IsAuthFailure(err) {
		t.Errorf("no client certificate where one is required: %v, want a refusal", err)
	}
}

// TestTokensDirectory: a directory of token files (a Secret with one key per user) is read whole,
// the kubelet's dot-entries skipped; a file removed revokes its tokens.
func TestTokensDirectory(t *testing.T) {
	dir := t.TempDir()
	a, aLine, _ := NewToken("ann", nil)
	b, bLine, _ := NewToken("ben", []string{"g"})
	for name, data := range map[string]string{"ann": aLine, "ben": bLine + "\n", ".hidden": "not a token line"} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(data), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	tk, err := LoadTokens(dir)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	tk.now = func() time.Time { return now }
	if id, ok := tk.Lookup(a); !ok || id.User != "ann" {
		t.Fatalf("ann: %+v %v", id, ok)
	}
	if id, ok := tk.Lookup(b); !ok || !id.InGroup("g") {
		t.Fatalf("ben: %+v %v", id, ok)
	}
	if err := os.Remove(filepath.Join(dir, "ben")); err != nil {
		t.Fatal(err)
	}
	now = now.Add(2 * time.Second)
	if _, ok := tk.Lookup(b); ok {
		t.Fatal("ben's token works after its file was removed")
	}
	if _, ok := tk.Lookup(a); !ok {
		t.Fatal("ann's token stopped working")
	}
}

// TestHTTPRequest: the HTTP endpoint asks for a client certificate without checking it; the
// request's identity comes from a certificate the CA signed, or a bearer token.
func TestHTTPRequest(t *testing.T) {
	ca := testCA(t)
	other := testCA(t)
	dir := t.TempDir()
	srv := issue(t, ca, Request{CommonName: "server", Server: true})
	files, err := srv.WriteFiles(dir, ca.CertPEM)
	if err != nil {
		t.Fatal(err)
	}
	certs, err := LoadCerts(files)
	if err != nil {
		t.Fatal(err)
	}
	tok, line, _ := NewToken("tess", nil)
	if err := os.WriteFile(filepath.Join(dir, "tokens"), []byte(line), 0o600); err != nil {
		t.Fatal(err)
	}
	tokens, err := LoadTokens(filepath.Join(dir, "tokens"))
	if err != nil {
		t.Fatal(err)
	}
	a := &Authenticator{Required: true, Tokens: tokens}
	req := func(peer *x509.Certificate, header string) *http.Request {
		r := httptest.NewRequest(http.MethodGet, "https://x/debug/pprof/", nil)
		r.TLS = &tls.ConnectionState{}
		if peer != nil {
			r.TLS.PeerCertificates = []*x509.Certificate{peer}
		}
		if header != "" {
			r.Header.Set("Authorization", header)
		}
		return r
	}
	good := issue(t, ca, Request{CommonName: "gus", Client: true}).Cert
	stranger := issue(t, other, Request{CommonName: "gus", Client: true}).Cert
	if id, err := a.HTTPRequest(req(good, ""), certs); err != nil || id.User != "gus" {
		t.Errorf("certificate of the CA: %+v, %v", id, err)
	}
	if _, err := a.HTTPRequest(req(stranger, ""), certs); err == nil {
		t.Error("a certificate of another CA was accepted")
	}
	if id, err := a.HTTPRequest(req(nil, "Bearer "+tok), certs); err != nil || id.User != "tess" {
		t.Errorf("token: %+v, %v", id, err)
	}
	if _, err := a.HTTPRequest(req(nil, "Basic abc"), certs); err == nil {
		t.Error("a non-bearer authorization was accepted")
	}
	if _, err := a.HTTPRequest(req(nil, ""), certs); err == nil {
		t.Error("nothing proven was accepted")
	}
}
