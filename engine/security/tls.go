package security

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"sync"
	"time"
)

// Files names the PEM files of a TLS identity. A server needs Cert and Key (its certificate chain
// and private key) and, to check client certificates, CA. A client needs CA to check servers (empty:
// the system's roots) and Cert and Key only to present a client certificate (mutual TLS).
type Files struct {
	Cert, Key, CA string
}

// Empty says whether no file is named.
func (f Files) Empty() bool { return f.Cert == "" && f.Key == "" && f.CA == "" }

// checkEvery is how often the files are looked at for a change, at most: a handshake after that
// stats them (three stat calls) and reloads what changed.
const checkEvery = time.Second

// Certs is a TLS identity read from Files and read again when they change, so that a certificate
// rotated on disk (a Kubernetes Secret volume updated in place, cert-manager renewing) is used by
// the next handshake with no restart. Connections already open keep the certificate they were made
// with; TLS checks a peer's certificate (and its expiry) only at the handshake.
//
// A reload that fails (a half-written file, a key that does not match its certificate) keeps the
// previous identity and is reported by Err and the metrics; the next change is tried again.
type Certs struct {
	files Files
	now   func() time.Time

	mu                sync.Mutex
	checked           time.Time
	stamps            [3]fileStamp
	cur               *loaded
	lastErr           error
	reloads, failures int64
}

// loaded is one generation of a Certs' material and the configurations built from it (kept, so
// that servers resume TLS sessions across connections).
type loaded struct {
	cert   *tls.Certificate // nil when Files names no certificate
	leaf   *x509.Certificate
	pool   *x509.CertPool // nil: the system's roots
	server map[tls.ClientAuthType]*tls.Config
}

type fileStamp struct {
	mod  time.Time
	size int64
}

// LoadCerts reads files; they must be valid now (later reloads may fail and keep the old ones).
func LoadCerts(files Files) (*Certs, error) {
	if (files.Cert == "") != (files.Key == "") {
		return nil, errors.New("tls: a certificate needs its key and a key its certificate: give both files or neither")
	}
	c := &Certs{files: files, now: time.Now}
	st := c.stat()
	l, err := c.load()
	if err != nil {
		return nil, err
	}
	c.cur, c.stamps, c.checked = l, st, c.now()
	return c, nil
}

func (c *Certs) stat() [3]fileStamp {
	var st [3]fileStamp
	for i, p := range []string{c.files.Cert, c.files.Key, c.files.CA} {
		if p == "" {
			continue
		}
		if fi, err := os.Stat(p); err == nil {
			st[i] = fileStamp{fi.ModTime(), fi.Size()}
		}
	}
	return st
}

func (c *Certs) load() (*loaded, error) {
	var certPEM, keyPEM, caPEM []byte
	var err error
	if c.files.Cert != "" {
		if certPEM, err = os.ReadFile(c.files.Cert); err != nil {
			return nil, fmt.Errorf("tls: certificate: %w", err)
		}
		if keyPEM, err = os.ReadFile(c.files.Key); err != nil {
			return nil, fmt.Errorf("tls: key: %w", err)
		}
	}
	if c.files.CA != "" {
		if caPEM, err = os.ReadFile(c.files.CA); err != nil {
			return nil, fmt.Errorf("tls: CA: %w", err)
		}
	}
	return parseMaterial(certPEM, keyPEM, caPEM, c.files.Cert+" and "+c.files.Key, c.files.CA)
}

// parseMaterial makes a generation of material from PEM bytes (a certificate and its key, both
// empty for none; a CA, empty for the system's roots); pairName and caName say where they came
// from in errors.
func parseMaterial(certPEM, keyPEM, caPEM []byte, pairName, caName string) (*loaded, error) {
	l := &loaded{server: map[tls.ClientAuthType]*tls.Config{}}
	if len(certPEM) > 0 || len(keyPEM) > 0 {
		cert, err := tls.X509KeyPair(certPEM, keyPEM)
		if err != nil {
			return nil, fmt.Errorf("tls: %s: %w", pairName, err)
		}
		l.cert, l.leaf = &cert, cert.Leaf
	}
	if len(caPEM) > 0 {
		l.pool = x509.NewCertPool()
		if !l.pool.AppendCertsFromPEM(caPEM) {
			return nil, fmt.Errorf("tls: %s holds no PEM certificate", caName)
		}
	}
	return l, nil
}

// current returns the material in use, reloading it first when a file changed.
func (c *Certs) current() *loaded {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := c.now()
	if now.Sub(c.checked) < checkEvery {
		return c.cur
	}
	c.checked = now
	st := c.stat()
	if st == c.stamps {
		return c.cur
	}
	l, err := c.load()
	if err != nil {
		c.lastErr = err
		c.failures++
		return c.cur // the files are tried again when they change again
	}
	if !bytes.Equal(certBytes(l), certBytes(c.cur)) || !poolEqual(l.pool, c.cur.pool) {
		c.reloads++
	}
	c.cur, c.stamps, c.lastErr = l, st, nil
	return l
}

func certBytes(l *loaded) []byte {
	if l.leaf == nil {
		return nil
	}
	return l.leaf.Raw
}

func poolEqual(a, b *x509.CertPool) bool {
	if a == nil || b == nil {
		return a == b
	}
	return a.Equal(b)
}

// Err is the error of the last reload that failed, nil once a reload succeeds.
func (c *Certs) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.lastErr
}

// Leaf is the certificate in use (nil when there is none).
func (c *Certs) Leaf() *x509.Certificate { return c.current().leaf }

// ServerConfig returns the TLS configuration of a server with the certificate in use: TLS 1.3,
// and client certificates checked against the CA as clientAuth says. Call it for each connection
// (it is cheap: the configuration is built once per reload).
func (c *Certs) ServerConfig(clientAuth tls.ClientAuthType, nextProtos ...string) (*tls.Config, error) {
	l := c.current()
	if l.cert == nil {
		return nil, errors.New("tls: a server needs a certificate and its key")
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if cfg := l.server[clientAuth]; cfg != nil && len(nextProtos) == 0 {
		return cfg, nil
	}
	auth := clientAuth
	if l.pool == nil {
		switch clientAuth {
		case tls.VerifyClientCertIfGiven:
			auth = tls.NoClientCert // no CA to check one against: none is asked for
		case tls.RequireAndVerifyClientCert:
			return nil, errors.New("tls: checking client certificates needs the CA that signs them (the CA file)")
		}
	}
	cfg := &tls.Config{
		MinVersion:   tls.VersionTLS13,
		Certificates: []tls.Certificate{*l.cert},
		ClientCAs:    l.pool,
		ClientAuth:   auth,
		NextProtos:   nextProtos,
	}
	if len(nextProtos) == 0 {
		l.server[clientAuth] = cfg
	}
	return cfg, nil
}

// ClientConfig returns the TLS configuration of a connection to serverName (a host name or IP
// address the server's certificate must name): TLS 1.3, the server checked against the CA in use,
// and the client certificate in use presented when there is one.
func (c *Certs) ClientConfig(serverName string) *tls.Config {
	l := c.current()
	cfg := &tls.Config{MinVersion: tls.VersionTLS13, ServerName: serverName, RootCAs: l.pool}
	if l.cert != nil {
		cfg.Certificates = []tls.Certificate{*l.cert}
	}
	return cfg
}

// ClientConfigAnyName returns the TLS configuration of a connection to a server reached at an
// address its certificate does not name (an external address: a NodePort, a load balancer): the
// certificate must chain to the CA in use and be a server certificate (server auth usage), whatever
// names it holds. Only with a CA of one's own: against the system's roots any public server would
// pass.
func (c *Certs) ClientConfigAnyName() (*tls.Config, error) {
	l := c.current()
	if l.pool == nil {
		return nil, errors.New("tls: a server reached at an address its certificate does not name is checked against the cluster's own CA: give it (--tls-ca-file), or the name the certificate holds (--tls-server-name)")
	}
	cfg := &tls.Config{MinVersion: tls.VersionTLS13, RootCAs: l.pool,
		// The chain is checked below, without the host name; nothing else is skipped.
		InsecureSkipVerify: true,
		VerifyConnection: func(cs tls.ConnectionState) error {
			if len(cs.PeerCertificates) == 0 {
				return errors.New("tls: the server presented no certificate")
			}
			inter := x509.NewCertPool()
			for _, ic := range cs.PeerCertificates[1:] {
				inter.AddCert(ic)
			}
			_, err := cs.PeerCertificates[0].Verify(x509.VerifyOptions{Roots: l.pool, Intermediates: inter,
				KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}})
			if err != nil {
				return fmt.Errorf("tls: the server's certificate is not a server certificate of the cluster's CA: %w", err)
			}
			return nil
		}}
	if l.cert != nil {
		cfg.Certificates = []tls.Certificate{*l.cert}
	}
	return cfg, nil
}

// CertsFromPEM is a TLS identity held in memory (never reloaded): a certificate and key (both
// empty for none) and a CA (empty: the system's roots). The operator uses it for the client
// certificate it issues itself.
func CertsFromPEM(certPEM, keyPEM, caPEM []byte) (*Certs, error) {
	l, err := parseMaterial(certPEM, keyPEM, caPEM, "the certificate and key", "the CA")
	if err != nil {
		return nil, err
	}
	return &Certs{now: time.Now, cur: l, checked: time.Now()}, nil
}

// VerifyClient checks the client certificate of a connection that asked for one without
// checking it (tls.RequestClientCert) against the CA in use, and returns the state with the
// verified chains set as tls.VerifyClientCertIfGiven would have (none when it does not verify).
func (c *Certs) VerifyClient(cs *tls.ConnectionState) *tls.ConnectionState {
	if cs == nil {
		return nil
	}
	out := *cs
	out.VerifiedChains = nil
	l := c.current()
	if len(cs.PeerCertificates) == 0 || l.pool == nil {
		return &out
	}
	inter := x509.NewCertPool()
	for _, ic := range cs.PeerCertificates[1:] {
		inter.AddCert(ic)
	}
	chains, err := cs.PeerCertificates[0].Verify(x509.VerifyOptions{Roots: l.pool, Intermediates: inter,
		KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}})
	if err == nil {
		out.VerifiedChains = chains
	}
	return &out
}
