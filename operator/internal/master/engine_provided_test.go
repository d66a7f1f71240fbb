package master

import (
	"crypto/x509"
	"encoding/pem"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/cellstore/cellstore/engine/security"
	"github.com/cellstore/cellstore/operator/api/v1alpha1"
	"github.com/cellstore/cellstore/operator/internal/resources"
)

// With tls Provided the operator talks to the master with the user's client Secret and trusts the
// CA of the server Secret; it issues nothing (there is no CA Secret to issue from).
func TestProvidedOperatorCertificate(t *testing.T) {
	ca, _, err := security.NewCA("user CA", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	cluster := &v1alpha1.StoreCluster{ObjectMeta: metav1.ObjectMeta{Namespace: "db", Name: "prod"}}
	cluster.Spec.Security.TLS = v1alpha1.TLSProvided
	cluster.Spec.Security.Certificates = &v1alpha1.ProvidedCertificates{ServerSecretName: "server-cert", ClientSecretName: "operator-cert"}
	secret := func(name string, req security.Request) *corev1.Secret {
		is, err := ca.Issue(req)
		if err != nil {
			t.Fatal(err)
		}
		return &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "db", Name: name},
			Data: map[string][]byte{corev1.TLSCertKey: is.CertPEM, corev1.TLSPrivateKeyKey: is.KeyPEM, resources.KeyCACert: ca.CertPEM}}
	}
	server := secret("server-cert", resources.ServerCertRequest(cluster))
	op := secret("operator-cert", security.Request{CommonName: "ops-robot", Organizations: []string{resources.GroupAdmins}, Client: true, Validity: time.Hour})

	e := &engineFactory{reader: fake.NewClientBuilder().WithObjects(server).Build(), creds: map[string]*operatorCreds{}}
	if _, err := e.certsFor(cluster); err == nil || !strings.Contains(err.Error(), "Secret operator-cert (spec.security.certificates.clientSecretName)") {
		t.Fatalf("no client Secret: %v", err)
	}

	e.reader = fake.NewClientBuilder().WithObjects(server, op).Build()
	certs, err := e.certsFor(cluster)
	if err != nil {
		t.Fatal(err)
	}
	if l := certs.Leaf(); l == nil || l.Subject.CommonName != "ops-robot" {
		t.Fatalf("the operator's certificate is %+v, want the client Secret's", l)
	}
	cfg := certs.ClientConfig("prod-master.db.svc")
	if len(cfg.Certificates) != 1 || cfg.RootCAs == nil {
		t.Fatalf("client config: %d certificates, roots %v", len(cfg.Certificates), cfg.RootCAs)
	}
	// The roots are the server Secret's CA: the servers' certificate verifies against them.
	b, _ := pem.Decode(server.Data[corev1.TLSCertKey])
	srv, err := x509.ParseCertificate(b.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := srv.Verify(x509.VerifyOptions{Roots: cfg.RootCAs, DNSName: "prod-master.db.svc"}); err != nil {
		t.Errorf("the operator does not trust the servers' certificate: %v", err)
	}
	if len(e.creds) != 0 {
		t.Error("the operator issued itself a certificate with tls Provided")
	}

	noKey := op.DeepCopy()
	delete(noKey.Data, corev1.TLSPrivateKeyKey)
	e.reader = fake.NewClientBuilder().WithObjects(server, noKey).Build()
	if _, err := e.certsFor(cluster); err == nil || !strings.Contains(err.Error(), "no key tls.key in Secret operator-cert") {
		t.Fatalf("no tls.key: %v", err)
	}
}
