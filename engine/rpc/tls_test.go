package rpc

import (
	"bufio"
	"context"
	"crypto/tls"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	pb "github.com/cellstore/cellstore/engine/api/cellstore/v1"
	"github.com/cellstore/cellstore/engine/security"
)

// pki is a CA with files for a server and clients, in a test's temporary directory.
type pki struct {
	t   testing.TB
	ca  *security.CA
	dir string
}

func newPKI(t testing.TB) *pki {
	t.Helper()
	ca, _, err := security.NewCA("rpc-test-ca", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	return &pki{t: t, ca: ca, dir: t.TempDir()}
}

// certs issues req into its own directory and loads it.
func (p *pki) certs(name string, req security.Request) (*security.Certs, security.Files) {
	p.t.Helper()
	if req.Validity == 0 {
		req.Validity = time.Hour
	}
	is, err := p.ca.Issue(req)
	if err != nil {
		p.t.Fatal(err)
	}
	dir := filepath.Join(p.dir, name)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		p.t.Fatal(err)
	}
	files, err := is.WriteFiles(dir, p.ca.CertPEM)
	if err != nil {
		p.t.Fatal(err)
	}
	c, err := security.LoadCerts(files)
	if err != nil {
		p.t.Fatal(err)
	}
	return c, files
}

func (p *pki) caOnly() *security.Certs {
	p.t.Helper()
	path := filepath.Join(p.dir, "ca.crt")
	if err := os.WriteFile(path, p.ca.CertPEM, 0o644); err != nil {
		p.t.Fatal(err)
	}
	c, err := security.LoadCerts(security.Files{CA: path})
	if err != nil {
		p.t.Fatal(err)
	}
	return c
}

var localhost = security.Request{CommonName: "server", DNSNames: []string{"localhost"}, IPs: []net.IP{net.IPv4(127, 0, 0, 1)}, Server: true, Client: true}

// ping calls PING on a new connection and returns the user the server saw.
func ping(addr string, opts ClientOptions) (*Conn, string, error) {
	opts.User = "declared"
	c, err := Dial(context.Background(), addr, opts)
	if err != nil {
		return nil, "", err
	}
	user, err := pingOn(c)
	return c, user, err
}

func pingOn(c *Conn) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var resp pb.PingResponse
	if _, err := c.Call(ctx, pb.Method_METHOD_PING, &pb.PingRequest{}, nil, &resp, nil); err != nil {
		return "", err
	}
	return string(resp.Payload), nil
}

func TestTLSAuthenticatesTheDataPath(t *testing.T) {
	p := newPKI(t)
	serverCerts, _ := p.certs("server", localhost)
	tok, line, err := security.NewToken("tess", nil)
	if err != nil {
		t.Fatal(err)
	}
	_, tokens := writeTokens(t, p.dir, line+"\n")
	srv, addr := startWith(t, map[uint32]Handler{uint32(pb.Method_METHOD_PING): echo},
		ServerOptions{TLS: serverCerts, Auth: &security.Authenticator{Required: true, Tokens: tokens}})
	carl, _ := p.certs("carl", security.Request{CommonName: "carl", Client: true})
	caOnly := p.caOnly()

	// The user is what the certificate or the token proves, never what the client names.
	for name, opts := range map[string]ClientOptions{
		"carl": {TLS: carl},
		"tess": {TLS: caOnly, Token: tok},
	} {
		c, user, err := ping(addr, opts)
		if err != nil || user != name {
			t.Fatalf("%s: user %q, %v", name, user, err)
		}
		c.Close()
	}

	// Over TLS with nothing to prove: the first call is answered UNAUTHENTICATED.
	c, _, err := ping(addr, ClientOptions{TLS: caOnly})
	if d, ok := pb.DetailOf(err); !ok || d.GetCode() != pb.ErrorCode_ERROR_CODE_UNAUTHENTICATED {
		t.Fatalf("no credentials: %v, want UNAUTHENTICATED", err)
	}
	c.Close()
	// An unknown token likewise.
	c, _, err = ping(addr, ClientOptions{TLS: caOnly, Token: "cst_unknown"})
	if d, ok := pb.DetailOf(err); !ok || d.GetCode() != pb.ErrorCode_ERROR_CODE_UNAUTHENTICATED {
		t.Fatalf("unknown token: %v, want UNAUTHENTICATED", err)
	}
	c.Close()
	// Plaintext to a TLS port: refused.
	if c, _, err = ping(addr, ClientOptions{}); err == nil {
		t.Fatal("a plaintext client was served")
	}
	if c != nil {
		c.Close()
	}
	// A token is never sent in plaintext.
	if _, err := Dial(context.Background(), addr, ClientOptions{Token: tok}); err == nil {
		t.Fatal("dialled with a token and no TLS")
	}
	// A certificate from another CA: the server refuses the handshake.
	stranger := newPKI(t)
	strangerCert, strangerFiles := stranger.certs("x", security.Request{CommonName: "carl", Client: true})
	_ = strangerCert
	mixed, err := security.LoadCerts(security.Files{Cert: strangerFiles.Cert, Key: strangerFiles.Key, CA: filepath.Join(p.dir, "ca.crt")})
	if err != nil {
		t.Fatal(err)
	}
	c, _, err = ping(addr, ClientOptions{TLS: mixed})
	if err == nil || !security.IsAuthFailure(err) {
		t.Fatalf("certificate of another CA: %v, want a TLS refusal", err)
	}
	if c != nil {
		c.Close()
	}
	// A server certificate from another CA: the client refuses to talk.
	if _, err := Dial(context.Background(), addr, ClientOptions{TLS: strangerCert}); err == nil || !security.IsAuthFailure(err) {
		t.Fatalf("server of another CA: %v, want a verification failure", err)
	}
	// Counted: no credentials, unknown token, certificate of another CA (the last one as the
	// server's handshake ends, which may be just after the client heard of it).
	deadline := time.Now().Add(5 * time.Second)
	for srv.Stats().Unauthenticated != 3 {
		if time.Now().After(deadline) {
			t.Fatalf("unauthenticated connections counted %d, want 3", srv.Stats().Unauthenticated)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestTLSSecurityOffTrustsTheDeclaredUser(t *testing.T) {
	p := newPKI(t)
	serverCerts, _ := p.certs("server", localhost)
	_, addr := startWith(t, map[uint32]Handler{uint32(pb.Method_METHOD_PING): echo}, ServerOptions{TLS: serverCerts})
	c, user, err := ping(addr, ClientOptions{TLS: p.caOnly()})
	if err != nil || user != "declared" {
		t.Fatalf("user %q, %v; want the declared one", user, err)
	}
	c.Close()
}

// TestTLSExpiredClientCertificate: a connection made while the client's certificate was valid
// keeps working after it expires; the next handshake is refused.
func TestTLSExpiredClientCertificate(t *testing.T) {
	p := newPKI(t)
	serverCerts, _ := p.certs("server", localhost)
	_, addr := startWith(t, map[uint32]Handler{uint32(pb.Method_METHOD_PING): echo},
		ServerOptions{TLS: serverCerts, Auth: &security.Authenticator{Required: true}})
	start := time.Now().Add(-time.Minute)
	short, files := p.certs("short", security.Request{CommonName: "sam", Client: true, NotBefore: start, Validity: time.Minute + 2*time.Second})
	notAfter := short.Leaf().NotAfter
	c, user, err := ping(addr, ClientOptions{TLS: short})
	if err != nil || user != "sam" {
		t.Fatalf("while valid: %q, %v", user, err)
	}
	defer c.Close()
	// Wait (polling, bounded) until the certificate has expired.
	deadline := time.Now().Add(30 * time.Second)
	for !time.Now().After(notAfter.Add(time.Second)) {
		if time.Now().After(deadline) {
			t.Fatal("the certificate never expired")
		}
		time.Sleep(100 * time.Millisecond)
	}
	if _, err := pingOn(c); err != nil {
		t.Fatalf("the open connection broke when the certificate expired: %v", err)
	}
	reloaded, err := security.LoadCerts(files)
	if err != nil {
		t.Fatal(err)
	}
	c2, _, err := ping(addr, ClientOptions{TLS: reloaded})
	if err == nil || !security.IsAuthFailure(err) {
		t.Fatalf("a new connection with the expired certificate: %v, want a refusal", err)
	}
	if c2 != nil {
		c2.Close()
	}
}

// TestTLSServerCertificateRotation: a new certificate written over the server's files is used by
// the next connections within seconds; connections already open keep working.
func TestTLSServerCertificateRotation(t *testing.T) {
	p := newPKI(t)
	serverCerts, _ := p.certs("server", localhost)
	_, addr := startWith(t, map[uint32]Handler{uint32(pb.Method_METHOD_PING): echo}, ServerOptions{TLS: serverCerts})
	caOnly := p.caOnly()
	c, _, err := ping(addr, ClientOptions{TLS: caOnly})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	served := func() string {
		conn, err := tls.Dial("tcp", addr, caOnly.ClientConfig("127.0.0.1"))
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		return conn.ConnectionState().PeerCertificates[0].Subject.CommonName
	}
	if got := served(); got != "server" {
		t.Fatalf("serves %q", got)
	}
	next := localhost
	next.CommonName = "server-2"
	is, err := p.ca.Issue(security.Request{CommonName: next.CommonName, DNSNames: next.DNSNames, IPs: next.IPs, Server: true, Validity: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := is.WriteFiles(filepath.Join(p.dir, "server"), p.ca.CertPEM); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for served() != "server-2" {
		if time.Now().After(deadline) {
			t.Fatal("the rotated certificate was not served within 10 s")
		}
		time.Sleep(100 * time.Millisecond)
	}
	if _, err := pingOn(c); err != nil {
		t.Fatalf("a connection made before the rotation: %v", err)
	}
}

// writeTokens writes a token file of content in dir and loads it.
func writeTokens(t *testing.T, dir, content string) (string, *security.Tokens) {
	t.Helper()
	path := filepath.Join(dir, "tokens")
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	tokens, err := security.LoadTokens(path)
	if err != nil {
		t.Fatal(err)
	}
	return path, tokens
}

// rewriteTokens replaces the token file, its modification time a second ahead so that the server's
// look at it (at most once a second, by size and time) sees the change.
func rewriteTokens(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	later := time.Now().Add(time.Second)
	if err := os.Chtimes(path, later, later); err != nil {
		t.Fatal(err)
	}
}

// TestTLSRevokedTokenClosesItsConnections: removing a token from the file ends the connections it
// opened within seconds, and new ones are refused.
func TestTLSRevokedTokenClosesItsConnections(t *testing.T) {
	p := newPKI(t)
	serverCerts, _ := p.certs("server", localhost)
	keep, keepLine, _ := security.NewToken("keep", nil)
	drop, dropLine, _ := security.NewToken("drop", nil)
	path, tokens := writeTokens(t, p.dir, keepLine+"\n"+dropLine+"\n")
	_, addr := startWith(t, map[uint32]Handler{uint32(pb.Method_METHOD_PING): echo},
		ServerOptions{TLS: serverCerts, Auth: &security.Authenticator{Required: true, Tokens: tokens}})
	caOnly := p.caOnly()
	kept, _, err := ping(addr, ClientOptions{TLS: caOnly, Token: keep})
	if err != nil {
		t.Fatal(err)
	}
	defer kept.Close()
	dropped, _, err := ping(addr, ClientOptions{TLS: caOnly, Token: drop})
	if err != nil {
		t.Fatal(err)
	}
	defer dropped.Close()

	rewriteTokens(t, path, keepLine+"\n")
	deadline := time.Now().Add(10 * time.Second)
	for {
		if _, err := pingOn(dropped); err != nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the revoked token's connection still works after 10 s")
		}
		time.Sleep(50 * time.Millisecond)
	}
	if _, err := pingOn(kept); err != nil {
		t.Fatalf("the other token's connection: %v", err)
	}
	c, _, err := ping(addr, ClientOptions{TLS: caOnly, Token: drop})
	if d, ok := pb.DetailOf(err); !ok || d.GetCode() != pb.ErrorCode_ERROR_CODE_UNAUTHENTICATED {
		t.Fatalf("the revoked token: %v, want UNAUTHENTICATED", err)
	}
	c.Close()
}

// TestTLSWithoutCA: a server with a certificate and no CA (TLS, security off) serves TLS clients
// and asks for no client certificate.
func TestTLSWithoutCA(t *testing.T) {
	p := newPKI(t)
	_, files := p.certs("server", localhost)
	noCA, err := security.LoadCerts(security.Files{Cert: files.Cert, Key: files.Key})
	if err != nil {
		t.Fatal(err)
	}
	_, addr := startWith(t, map[uint32]Handler{uint32(pb.Method_METHOD_PING): echo}, ServerOptions{TLS: noCA})
	c, user, err := ping(addr, ClientOptions{TLS: p.caOnly()})
	if err != nil || user != "declared" {
		t.Fatalf("user %q, %v", user, err)
	}
	c.Close()
}

// pendingBytes sees a TLS connection's socket through the wrapper of its peeked first bytes, so
// that a large request over TLS grows its buffer by what arrived (admission), as in plaintext.
func TestPendingBytesSeesThroughTLS(t *testing.T) {
	p := newPKI(t)
	certs, _ := p.certs("server", localhost)
	cfg, err := certs.ServerConfig(tls.NoClientCert)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	const sent = 32 << 10
	clientErr := make(chan error, 1)
	go func() {
		c, err := tls.Dial("tcp", ln.Addr().String(), p.caOnly().ClientConfig("localhost"))
		if err != nil {
			clientErr <- err
			return
		}
		defer c.Close()
		if _, err := c.Write(make([]byte, sent)); err != nil {
			clientErr <- err
			return
		}
		clientErr <- nil
		var b [1]byte
		_, _ = c.Read(b[:]) // until the server closes
	}()
	nc, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	_ = nc.SetDeadline(time.Now().Add(10 * time.Second))
	tc := tls.Server(&peekedConn{Conn: nc, r: bufio.NewReaderSize(nc, len(Preamble))}, cfg)
	if err := tc.Handshake(); err != nil {
		t.Fatal(err)
	}
	if err := <-clientErr; err != nil {
		t.Fatal(err)
	}
	// (The handshake's reads may have taken the first records already.)
	deadline := time.Now().Add(10 * time.Second)
	for pendingBytes(tc) < sent/2 {
		if time.Now().After(deadline) {
			t.Fatalf("pendingBytes of the TLS connection is %d after the client sent %d bytes", pendingBytes(tc), sent)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestTLSTokenGroupChangeClosesItsConnections: a token whose user's groups change in the file
// closes the connections opened with the old groups (they kept the groups, and the grants to them,
// while active); the client connects again with the new ones.
func TestTLSTokenGroupChangeClosesItsConnections(t *testing.T) {
	p := newPKI(t)
	serverCerts, _ := p.certs("server", localhost)
	tok, line, _ := security.NewToken("bob", []string{"analysts"})
	path, tokens := writeTokens(t, p.dir, line+"\n")
	groups := func(_ context.Context, c *Call) {
		c.Reply(&pb.PingResponse{Payload: []byte(strings.Join(c.Groups, ","))})
	}
	_, addr := startWith(t, map[uint32]Handler{uint32(pb.Method_METHOD_PING): groups},
		ServerOptions{TLS: serverCerts, Auth: &security.Authenticator{Required: true, Tokens: tokens}})
	caOnly := p.caOnly()
	c, got, err := ping(addr, ClientOptions{TLS: caOnly, Token: tok})
	if err != nil || got != "analysts" {
		t.Fatalf("first call: groups %q, %v", got, err)
	}
	defer c.Close()

	rewriteTokens(t, path, security.TokenLine(tok, "bob", nil)+"\n")
	deadline := time.Now().Add(10 * time.Second)
	for {
		got, err := pingOn(c)
		if err != nil {
			break // closed: the client connects again
		}
		if got != "analysts" {
			t.Fatalf("the open connection answers groups %q", got)
		}
		if time.Now().After(deadline) {
			t.Fatal("the connection still has the removed group after 10 s")
		}
		time.Sleep(50 * time.Millisecond)
	}
	c2, got, err := ping(addr, ClientOptions{TLS: caOnly, Token: tok})
	if err != nil || got != "" {
		t.Fatalf("a new connection: groups %q, %v; want none", got, err)
	}
	c2.Close()
}
