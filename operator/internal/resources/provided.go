package resources

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/cellstore/cellstore/operator/api/v1alpha1"
)

// Checks of the Secrets a user provides with spec.security.tls Provided (docs/operator.md,
// "Provided certificates"). They say which Secret, which key and what to do; the operator reports
// them as the certificates task's condition.

// Where the provided Secrets are named in the spec (for messages).
const (
	ServerSecretField = "spec.security.certificates.serverSecretName"
	ClientSecretField = "spec.security.certificates.clientSecretName"
)

// SecretProblem is what is wrong with a provided certificate Secret.
type SecretProblem struct {
	// Missing: the Secret or one of its keys is not there; otherwise a key holds something
	// unusable (does not parse, expired, wrong names, not a superuser, another CA).
	Missing bool
	Message string
}

func (p *SecretProblem) Error() string { return p.Message }

func missing(format string, args ...any) *SecretProblem {
	return &SecretProblem{Missing: true, Message: fmt.Sprintf(format, args...)}
}

func invalid(format string, args ...any) *SecretProblem {
	return &SecretProblem{Message: fmt.Sprintf(format, args...)}
}

// ProvidedServerKeys and ProvidedClientKeys are the keys each provided Secret needs.
var (
	ProvidedServerKeys = []string{corev1.TLSCertKey, corev1.TLSPrivateKeyKey, KeyCACert}
	ProvidedClientKeys = []string{corev1.TLSCertKey, corev1.TLSPrivateKeyKey}
)

// SecretRef names a provided Secret and the spec field that names it, for messages.
func SecretRef(name, field string) string { return fmt.Sprintf("Secret %s (%s)", name, field) }

// CheckServerSecret checks the servers' Secret of tls Provided at now: keys tls.crt, tls.key and
// ca.crt; a certificate and its key that parse and match, valid now, signed by ca.crt for server
// and client authentication, naming every host of ServerHosts, with a subject that is a superuser.
func CheckServerSecret(c *v1alpha1.StoreCluster, sec *corev1.Secret, now time.Time) *SecretProblem {
	ref := SecretRef(sec.Name, ServerSecretField)
	leaf, inter, p := checkPair(ref, sec, ProvidedServerKeys, now)
	if p != nil {
		return p
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(sec.Data[KeyCACert]) {
		return invalid("%s: key %s holds no PEM certificate: put the CA that signed %s there", ref, KeyCACert, corev1.TLSCertKey)
	}
	for _, u := range []struct {
		usage x509.ExtKeyUsage
		what  string
	}{{x509.ExtKeyUsageServerAuth, "server"}, {x509.ExtKeyUsageClientAuth, "client"}} {
		if _, err := leaf.Verify(x509.VerifyOptions{Roots: roots, Intermediates: inter, CurrentTime: now, KeyUsages: []x509.ExtKeyUsage{u.usage}}); err != nil {
			return invalid("%s: the certificate in %s does not verify against the CA in %s for %s authentication (%v): issue it from that CA, "+
				"with usages server auth and client auth (the servers call each other)", ref, corev1.TLSCertKey, KeyCACert, u.what, err)
		}
	}
	dns, ips := ServerHosts(c)
	var absent []string
	for _, h := range dns {
		if leaf.VerifyHostname(h) != nil {
			absent = append(absent, h)
		}
	}
	for _, ip := range ips {
		if leaf.VerifyHostname(ip.String()) != nil {
			absent = append(absent, ip.String())
		}
	}
	if len(absent) > 0 {
		return invalid("%s: the certificate in %s does not name %s: add them to its DNS names and IP addresses (cert-manager: spec.dnsNames, spec.ipAddresses; docs/operator.md lists every name)",
			ref, corev1.TLSCertKey, strings.Join(absent, ", "))
	}
	return checkSuperuser(c, ref, leaf, GroupServers, "the servers call each other's server-only methods")
}

// CheckClientSecret checks the operator's client Secret of tls Provided at now: keys tls.crt and
// tls.key that parse and match, valid now, signed by a CA of caPEM (the servers' ca.crt) for client
// authentication, with a subject that is a superuser.
func CheckClientSecret(c *v1alpha1.StoreCluster, sec *corev1.Secret, serverSecret string, caPEM []byte, now time.Time) *SecretProblem {
	ref := SecretRef(sec.Name, ClientSecretField)
	leaf, inter, p := checkPair(ref, sec, ProvidedClientKeys, now)
	if p != nil {
		return p
	}
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(caPEM)
	if _, err := leaf.Verify(x509.VerifyOptions{Roots: roots, Intermediates: inter, CurrentTime: now, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
		return invalid("%s: the certificate in %s is not one the servers accept (%v): issue it, with usage client auth, from the CA in %s of Secret %s (the CA the servers trust)",
			ref, corev1.TLSCertKey, err, KeyCACert, serverSecret)
	}
	return checkSuperuser(c, ref, leaf, GroupAdmins, "the operator drains servers, grants permissions and sets quotas through the master")
}

// checkPair checks that sec has keys and that tls.crt and tls.key are a certificate valid at now and
// its key; it returns the certificate and the intermediates that follow it in tls.crt.
func checkPair(ref string, sec *corev1.Secret, keys []string, now time.Time) (*x509.Certificate, *x509.CertPool, *SecretProblem) {
	for _, k := range keys {
		if len(sec.Data[k]) == 0 {
			return nil, nil, missing("%s has no key %s: it needs keys %s (those of a kubernetes.io/tls Secret, as a cert-manager Certificate writes them)",
				ref, k, strings.Join(keys, ", "))
		}
	}
	var certs []*x509.Certificate
	rest := sec.Data[corev1.TLSCertKey]
	for {
		var b *pem.Block
		b, rest = pem.Decode(rest)
		if b == nil {
			break
		}
		if b.Type != "CERTIFICATE" {
			continue
		}
		cert, err := x509.ParseCertificate(b.Bytes)
		if err != nil {
			return nil, nil, invalid("%s: the certificate in key %s does not parse (%v): replace it", ref, corev1.TLSCertKey, err)
		}
		certs = append(certs, cert)
	}
	if len(certs) == 0 {
		return nil, nil, invalid("%s: key %s holds no PEM certificate: put the certificate there (PEM, then any intermediate CAs)", ref, corev1.TLSCertKey)
	}
	if _, err := tls.X509KeyPair(sec.Data[corev1.TLSCertKey], sec.Data[corev1.TLSPrivateKeyKey]); err != nil {
		return nil, nil, invalid("%s: key %s is not the private key of the certificate in %s (%v): put the matching PEM key there",
			ref, corev1.TLSPrivateKeyKey, corev1.TLSCertKey, err)
	}
	leaf := certs[0]
	switch {
	case now.After(leaf.NotAfter):
		return nil, nil, invalid("%s: the certificate in %s expired at %s: renew it (with cert-manager, `kubectl describe certificate` says why it was not renewed)",
			ref, corev1.TLSCertKey, leaf.NotAfter.UTC().Format(time.RFC3339))
	case now.Before(leaf.NotBefore):
		return nil, nil, invalid("%s: the certificate in %s is valid only from %s: check the issuer's clock, or issue it again",
			ref, corev1.TLSCertKey, leaf.NotBefore.UTC().Format(time.RFC3339))
	}
	inter := x509.NewCertPool()
	for _, ic := range certs[1:] {
		inter.AddCert(ic)
	}
	return leaf, inter, nil
}

// checkSuperuser checks that the certificate's subject is one of the cluster's superusers: its CN,
// or one of its organizations as a group.
func checkSuperuser(c *v1alpha1.StoreCluster, ref string, cert *x509.Certificate, group, why string) *SecretProblem {
	if cert.Subject.CommonName == "" {
		return invalid("%s: the certificate's subject has no common name (CN), which names the user: give it one (cert-manager: spec.commonName) and organization %s",
			ref, group)
	}
	su := Superusers(c)
	if slices.Contains(su, cert.Subject.CommonName) || slices.ContainsFunc(cert.Subject.Organization, func(o string) bool { return slices.Contains(su, "@"+o) }) {
		return nil
	}
	return invalid("%s: the certificate's subject (CN %s, O [%s]) is not a superuser (%s), which it must be: %s; give it organization %s "+
		"(cert-manager: spec.subject.organizations), or add its CN to spec.security.superusers",
		ref, cert.Subject.CommonName, strings.Join(cert.Subject.Organization, ", "), strings.Join(su, ","), why, group)
}
