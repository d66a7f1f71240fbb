package security

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pb "github.com/cellstore/cellstore/engine/api/cellstore/v1"
)

// whoami answers ListTables with one table named after the caller.
type whoami struct{ pb.UnimplementedMasterServer }

func (whoami) ListTables(ctx context.Context, _ *pb.ListTablesRequest) (*pb.ListTablesResponse, error) {
	id, _ := FromContext(ctx)
	return &pb.ListTablesResponse{Tables: []*pb.TableSummary{{Table: &pb.TableDescriptor{Name: &pb.TableName{Name: id.User + "/" + id.Method}}}}}, nil
}

func serveGRPC(t *testing.T, certs *Certs, auth *Authenticator) string {
	t.Helper()
	return serveGRPCOn(t, "tcp", "127.0.0.1:0", certs, auth)
}

// serveGRPCOn serves whoami on a listener of network at addr until the test ends; it returns the
// listener's address.
func serveGRPCOn(t *testing.T, network, addr string, certs *Certs, auth *Authenticator) string {
	t.Helper()
	return serveMasterOn(t, network, addr, whoami{}, certs, auth)
}

// serveMasterOn serves m on a listener of network at addr until the test ends; it returns the
// listener's address.
func serveMasterOn(t *testing.T, network, addr string, m pb.MasterServer, certs *Certs, auth *Authenticator) string {
	t.Helper()
	lis, err := net.Listen(network, addr)
	if err != nil {
		t.Fatal(err)
	}
	s := grpc.NewServer(GRPCServerOptions(certs, auth)...)
	pb.RegisterMasterServer(s, m)
	go func() { _ = s.Serve(lis) }()
	t.Cleanup(s.Stop)
	return lis.Addr().String()
}

func callWhoami(addr string, creds *Credentials) (string, error) {
	return callWhoamiCtx(context.Background(), addr, creds)
}

func callWhoamiCtx(ctx context.Context, addr string, creds *Credentials) (string, error) {
	cc, err := Dial(addr, creds)
	if err != nil {
		return "", err
	}
	defer cc.Close()
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	resp, err := pb.NewMasterClient(cc).ListTables(ctx, &pb.ListTablesRequest{})
	if err != nil {
		return "", err
	}
	return resp.Tables[0].Table.Name.Name, nil
}

func TestGRPCAuthentication(t *testing.T) {
	ca := testCA(t)
	dir := t.TempDir()
	write := func(name string, req Request) *Certs { return writeCerts(t, ca, dir, name, req) }
	server := write("server", Request{CommonName: "server", IPs: []net.IP{net.IPv4(127, 0, 0, 1)}, Server: true, Client: true})
	carl := write("carl", Request{CommonName: "carl", Client: true})
	caOnly, err := LoadCerts(Files{CA: filepath.Join(dir, "server", "ca.crt")})
	if err != nil {
		t.Fatal(err)
	}
	tok, line, _ := NewToken("tess", nil)
	if err := os.WriteFile(filepath.Join(dir, "tokens"), []byte(line+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	tokens, err := LoadTokens(filepath.Join(dir, "tokens"))
	if err != nil {
		t.Fatal(err)
	}

	on := serveGRPC(t, server, &Authenticator{Required: true, Tokens: tokens})
	for want, creds := range map[string]*Credentials{
		"carl/certificate":   {Certs: carl, User: "mallory"},
		"tess/token":         {Certs: caOnly, Token: tok},
		"server/certificate": {Certs: server},
	} {
		if got, err := callWhoami(on, creds); err != nil || got != want {
			t.Errorf("security on: %q, %v; want %s", got, err, want)
		}
	}
	for name, creds := range map[string]*Credentials{
		"nothing":       {Certs: caOnly, User: "mallory"},
		"unknown token": {Certs: caOnly, Token: "cst_nope"},
	} {
		_, err := callWhoami(on, creds)
		if status.Code(err) != codes.Unauthenticated || !IsAuthFailure(err) {
			t.Errorf("security on, %s: %v, want Unauthenticated", name, err)
		}
	}
	// (gRPC reports a plaintext client of a TLS server as unavailable: the server hangs up.)
	if _, err := callWhoami(on, nil); status.Code(err) != codes.Unavailable {
		t.Errorf("plaintext to a TLS server: %v, want unavailable", err)
	}
	if _, err := Dial(on, &Credentials{Token: tok}); err == nil {
		t.Error("dialled with a token and no TLS")
	}

	off := serveGRPC(t, nil, nil)
	if got, err := callWhoami(off, &Credentials{User: "dora"}); err != nil || got != "dora/declared" {
		t.Errorf("security off: %q, %v; want dora/declared", got, err)
	}
}

// A call made on behalf of another user (a region server forwarding an HBase client's master
// call) acts as that user only when the caller may proxy (Authenticator.Proxy: the superusers);
// anyone else is refused, a proxied identity cannot proxy again, and with security off the named
// user is taken as declared.
func TestGRPCOnBehalfOf(t *testing.T) {
	ca := testCA(t)
	dir := t.TempDir()
	write := func(name string, req Request) *Certs { return writeCerts(t, ca, dir, name, req) }
	server := write("server", Request{CommonName: "server", Organizations: []string{"cellstore:servers"}, IPs: []net.IP{net.IPv4(127, 0, 0, 1)}, Server: true, Client: true})
	carl := write("carl", Request{CommonName: "carl", Client: true})
	proxy := func(id Identity) bool { return id.InGroup("cellstore:servers") }
	on := serveGRPC(t, server, &Authenticator{Required: true, Proxy: proxy})
	alice := OnBehalfOf(context.Background(), Identity{User: "alice", Groups: []string{"readers", "a,b"}})
	if got, err := callWhoamiCtx(alice, on, &Credentials{Certs: server}); err != nil || got != "alice/proxied" {
		t.Errorf("a server on behalf of alice: %q, %v; want alice/proxied", got, err)
	}
	_, err := callWhoamiCtx(alice, on, &Credentials{Certs: carl})
	if d, ok := pb.DetailOf(err); !ok || d.GetCode() != pb.ErrorCode_ERROR_CODE_ACCESS_DENIED {
		t.Errorf("carl on behalf of alice: %v, want ACCESS_DENIED", err)
	}
	if _, err := callWhoamiCtx(OnBehalfOf(context.Background(), Identity{User: "bad user"}), on, &Credentials{Certs: server}); err == nil {
		t.Error("a proxied user name with a space was accepted")
	}
	off := serveGRPC(t, nil, nil)
	if got, err := callWhoamiCtx(alice, off, &Credentials{User: "dora"}); err != nil || got != "alice/declared" {
		t.Errorf("security off, on behalf of alice: %q, %v; want alice/declared", got, err)
	}
	// TLS with security off: a caller's certificate proves who it is, but nothing is checked.
	tlsOff := serveGRPC(t, server, &Authenticator{})
	if got, err := callWhoamiCtx(alice, tlsOff, &Credentials{Certs: carl}); err != nil || got != "alice/declared" {
		t.Errorf("TLS, security off, carl on behalf of alice: %q, %v; want alice/declared", got, err)
	}
	// The groups travel as they are (one may hold a comma); a proxied identity may not proxy.
	a := &Authenticator{Required: true, Proxy: func(Identity) bool { return true }}
	id, err := a.proxied(Identity{User: "server", Method: MethodCertificate}, "alice", []string{"readers", "a,b"})
	if err != nil || id.Via != "server" || len(id.Groups) != 2 || id.Groups[1] != "a,b" || !id.Authenticated() {
		t.Errorf("proxied: %+v, %v", id, err)
	}
	if _, err := a.proxied(id, "eve", nil); err == nil {
		t.Error("a proxied identity proxied again")
	}
}

// writeCerts issues a certificate for req into dir/name and loads it.
func writeCerts(t *testing.T, ca *CA, dir, name string, req Request) *Certs {
	t.Helper()
	is := issue(t, ca, req)
	d := filepath.Join(dir, name)
	if err := os.MkdirAll(d, 0o755); err != nil {
		t.Fatal(err)
	}
	f, err := is.WriteFiles(d, ca.CertPEM)
	if err != nil {
		t.Fatal(err)
	}
	c, err := LoadCerts(f)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// A unix socket address reaches its server (gRPC's own resolver and dialer: the dialer for host
// names knows only TCP). Not tested here: that no proxy is used (Go reads the proxy environment
// once per process, and gRPC sends only TCP addresses through one).
func TestDialUnixSocket(t *testing.T) {
	path := filepath.Join(t.TempDir(), "s.sock")
	serveGRPCOn(t, "unix", path, nil, nil)
	abstract := fmt.Sprintf("cellstore-test-%d", os.Getpid())
	serveGRPCOn(t, "unix", "@"+abstract, nil, nil) // Go's name for an abstract socket
	for _, addr := range []string{"unix:" + path, "unix://" + path, "unix-abstract:" + abstract} {
		if got, err := callWhoami(addr, &Credentials{User: "u"}); err != nil || !strings.HasPrefix(got, "u/") {
			t.Errorf("%s: %q, %v", addr, got, err)
		}
	}
}

// bigAnswer answers ListTables with a table name of 5 MiB: more than gRPC's default 4 MiB.
type bigAnswer struct{ pb.UnimplementedMasterServer }

func (bigAnswer) ListTables(context.Context, *pb.ListTablesRequest) (*pb.ListTablesResponse, error) {
	return &pb.ListTablesResponse{Tables: []*pb.TableSummary{{Table: &pb.TableDescriptor{Name: &pb.TableName{Name: strings.Repeat("t", 5<<20)}}}}}, nil
}

// A connection made by Dial reads answers larger than gRPC's default limit (a master's list of
// many tables or permissions).
func TestDialReadsLargeAnswers(t *testing.T) {
	cc, err := Dial(serveMasterOn(t, "tcp", "127.0.0.1:0", bigAnswer{}, nil, nil), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := pb.NewMasterClient(cc).ListTables(ctx, &pb.ListTablesRequest{})
	if err != nil || len(resp.GetTables()) != 1 || len(resp.GetTables()[0].GetTable().GetName().GetName()) != 5<<20 {
		t.Fatalf("an answer of 5 MiB: %v", err)
	}
}
