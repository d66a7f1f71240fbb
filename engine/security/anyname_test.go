package security

import (
	"crypto/tls"
	"net"
	"strings"
	"testing"
	"time"
)

// ClientConfigAnyName accepts a server certificate of the CA whatever names it holds, and
// refuses one of another CA and a certificate of the CA that is not a server's.
func TestClientConfigAnyName(t *testing.T) {
	ca, caIss, err := NewCA("cluster", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	other, _, err := NewCA("other", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	issue := func(c *CA, req Request) tls.Certificate {
		t.Helper()
		req.Validity = time.Hour
		is, err := c.Issue(req)
		if err != nil {
			t.Fatal(err)
		}
		pair, err := tls.X509KeyPair(is.CertPEM, is.KeyPEM)
		if err != nil {
			t.Fatal(err)
		}
		return pair
	}
	client, err := CertsFromPEM(nil, nil, caIss.CertPEM)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		cert tls.Certificate
		want string // "" accepted, else part of the error
	}{
		{"a server of the CA named elsewhere", issue(ca, Request{CommonName: "server", DNSNames: []string{"rs-0.internal"}, Server: true}), ""},
		{"a server of another CA", issue(other, Request{CommonName: "server", DNSNames: []string{"127.0.0.1"}, Server: true}), "not a server certificate of the cluster's CA"},
		{"a client of the CA", issue(ca, Request{CommonName: "eve", Client: true}), "not a server certificate of the cluster's CA"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ln, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{Certificates: []tls.Certificate{tc.cert}, MinVersion: tls.VersionTLS13})
			if err != nil {
				t.Fatal(err)
			}
			defer ln.Close()
			go func() {
				c, err := ln.Accept()
				if err == nil {
					_ = c.(*tls.Conn).Handshake()
					c.Close()
				}
			}()
			cfg, err := client.ClientConfigAnyName()
			if err != nil {
				t.Fatal(err)
			}
			conn, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", ln.Addr().String(), cfg)
			if err == nil {
				conn.Close()
			}
			if tc.want == "" && err != nil {
				t.Fatalf("refused: %v", err)
			}
			if tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)) {
				t.Fatalf("%v, want an error with %q", err, tc.want)
			}
		})
	}
	// Against the system's roots it is refused outright.
	system, err := CertsFromPEM(nil, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := system.ClientConfigAnyName(); err == nil {
		t.Error("no CA: want an error")
	}
}
