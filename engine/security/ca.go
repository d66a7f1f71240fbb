package security

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"
)

// CA is a certificate authority that signs a cluster's server and client certificates: the
// operator keeps one per StoreCluster in a Secret, `cellstore certs` makes one for a cluster run by
// hand, and tests make their own.
type CA struct {
	Cert    *x509.Certificate
	Key     crypto.Signer
	CertPEM []byte
}

// Issued is a certificate and its private key, PEM-encoded.
type Issued struct {
	CertPEM, KeyPEM []byte
	Cert            *x509.Certificate
}

// NewCA makes a self-signed CA valid for validity from a minute ago (clocks differ).
func NewCA(commonName string, validity time.Duration) (*CA, *Issued, error) {
	return NewCAFrom(commonName, time.Now().Add(-time.Minute), validity)
}

// NewCAFrom makes a self-signed CA valid for validity from notBefore.
func NewCAFrom(commonName string, notBefore time.Time, validity time.Duration) (*CA, *Issued, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	now := notBefore
	tmpl := &x509.Certificate{
		SerialNumber:          serial(),
		Subject:               pkix.Name{CommonName: commonName},
		NotBefore:             now,
		NotAfter:              now.Add(validity),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLenZero:        true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		return nil, nil, err
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, nil, err
	}
	keyPEM, err := encodeKey(key)
	if err != nil {
		return nil, nil, err
	}
	certPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
	return &CA{Cert: cert, Key: key, CertPEM: certPEM}, &Issued{CertPEM: certPEM, KeyPEM: keyPEM, Cert: cert}, nil
}

// ParseCA reads a CA from its PEM certificate and key.
func ParseCA(certPEM, keyPEM []byte) (*CA, error) {
	b, _ := pem.Decode(certPEM)
	if b == nil || b.Type != "CERTIFICATE" {
		return nil, errors.New("CA certificate: no PEM CERTIFICATE block")
	}
	cert, err := x509.ParseCertificate(b.Bytes)
	if err != nil {
		return nil, fmt.Errorf("CA certificate: %w", err)
	}
	if !cert.IsCA {
		return nil, errors.New("CA certificate: not a CA (basic constraints)")
	}
	kb, _ := pem.Decode(keyPEM)
	if kb == nil {
		return nil, errors.New("CA key: no PEM block")
	}
	k, err := x509.ParsePKCS8PrivateKey(kb.Bytes)
	if err != nil {
		return nil, fmt.Errorf("CA key: %w", err)
	}
	signer, ok := k.(crypto.Signer)
	if !ok {
		return nil, errors.New("CA key: not a signing key")
	}
	return &CA{Cert: cert, Key: signer, CertPEM: certPEM}, nil
}

// Request says what certificate to issue.
type Request struct {
	// CommonName is the subject's CN: for a client certificate, the user.
	CommonName string
	// Organizations are the subject's O: for a client certificate, the user's groups.
	Organizations []string
	// DNSNames and IPs are the names a server certificate is valid for (wildcards allowed).
	DNSNames []string
	IPs      []net.IP
	// Server and Client say what the certificate may be used for (both for a server that also
	// calls other servers: mutual TLS).
	Server, Client bool
	// NotBefore defaults to a minute ago; Validity is counted from it.
	NotBefore time.Time
	Validity  time.Duration
}

// Issue signs a new key's certificate as req says.
func (ca *CA) Issue(req Request) (*Issued, error) {
	if !req.Server && !req.Client {
		return nil, errors.New("issue: say whether the certificate is for a server, a client or both")
	}
	if req.Validity <= 0 {
		return nil, errors.New("issue: a validity above zero is needed")
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	nb := req.NotBefore
	if nb.IsZero() {
		nb = time.Now().Add(-time.Minute)
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial(),
		Subject:      pkix.Name{CommonName: req.CommonName, Organization: req.Organizations},
		NotBefore:    nb,
		NotAfter:     nb.Add(req.Validity),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		DNSNames:     req.DNSNames,
		IPAddresses:  req.IPs,
	}
	if tmpl.NotAfter.After(ca.Cert.NotAfter) {
		tmpl.NotAfter = ca.Cert.NotAfter
	}
	if req.Server {
		tmpl.ExtKeyUsage = append(tmpl.ExtKeyUsage, x509.ExtKeyUsageServerAuth)
	}
	if req.Client {
		tmpl.ExtKeyUsage = append(tmpl.ExtKeyUsage, x509.ExtKeyUsageClientAuth)
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, key.Public(), ca.Key)
	if err != nil {
		return nil, err
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	keyPEM, err := encodeKey(key)
	if err != nil {
		return nil, err
	}
	return &Issued{CertPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), KeyPEM: keyPEM, Cert: cert}, nil
}

// WriteFiles writes the certificate, key and CA as dir/tls.crt, dir/tls.key and dir/ca.crt (the
// key names of a Kubernetes TLS Secret with its CA) and returns their Files. Each file is replaced
// by a rename, so a reader never sees half of one.
func (i *Issued) WriteFiles(dir string, caPEM []byte) (Files, error) {
	f := Files{Cert: filepath.Join(dir, "tls.crt"), Key: filepath.Join(dir, "tls.key"), CA: filepath.Join(dir, "ca.crt")}
	for _, w := range []struct {
		path string
		data []byte
		mode os.FileMode
	}{{f.Cert, i.CertPEM, 0o644}, {f.Key, i.KeyPEM, 0o600}, {f.CA, caPEM, 0o644}} {
		tmp := w.path + ".tmp"
		if err := os.WriteFile(tmp, w.data, w.mode); err != nil {
			return Files{}, err
		}
		if err := os.Rename(tmp, w.path); err != nil {
			return Files{}, err
		}
	}
	return f, nil
}

func encodeKey(k *ecdsa.PrivateKey) ([]byte, error) {
	der, err := x509.MarshalPKCS8PrivateKey(k)
	if err != nil {
		return nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), nil
}

func serial() *big.Int {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		panic(err) // crypto/rand does not fail
	}
	return n
}
