package resources

import (
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/cellstore/cellstore/engine/security"
	"github.com/cellstore/cellstore/operator/api/v1alpha1"
)

func providedCluster() *v1alpha1.StoreCluster {
	c := defaultedCluster()
	c.Spec.Security.TLS = v1alpha1.TLSProvided
	c.Spec.Security.Certificates = &v1alpha1.ProvidedCertificates{ServerSecretName: "prod-server-cert", ClientSecretName: "prod-operator-cert"}
	return c
}

func newTestCA(t *testing.T, name string) *security.CA {
	t.Helper()
	ca, _, err := security.NewCA(name, 24*time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	return ca
}

func tlsSecret(t *testing.T, name string, ca *security.CA, req security.Request) *corev1.Secret {
	t.Helper()
	if req.Validity == 0 {
		req.Validity = time.Hour
	}
	is, err := ca.Issue(req)
	if err != nil {
		t.Fatal(err)
	}
	return &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "db"}, Type: corev1.SecretTypeTLS,
		Data: map[string][]byte{corev1.TLSCertKey: is.CertPEM, corev1.TLSPrivateKeyKey: is.KeyPEM, KeyCACert: ca.CertPEM}}
}

// The operator's checks of a provided server Secret accept what it would issue itself and name
// the Secret, the key and the fix for each way a Secret can be unusable.
func TestCheckServerSecret(t *testing.T) {
	c := providedCluster()
	ca := newTestCA(t, "user CA")
	good := func() *corev1.Secret { return tlsSecret(t, "prod-server-cert", ca, ServerCertRequest(c)) }
	now := time.Now()
	if p := CheckServerSecret(c, good(), now); p != nil {
		t.Fatalf("the certificate the operator would issue is refused: %v", p)
	}

	dns, _ := ServerHosts(c)
	for name, tc := range map[string]struct {
		sec     func() *corev1.Secret
		now     time.Time
		missing bool
		want    []string
	}{
		"no ca.crt": {sec: func() *corev1.Secret { s := good(); delete(s.Data, KeyCACert); return s }, missing: true,
			want: []string{"Secret prod-server-cert (spec.security.certificates.serverSecretName) has no key ca.crt", "tls.crt, tls.key, ca.crt"}},
		"empty tls.key": {sec: func() *corev1.Secret { s := good(); s.Data[corev1.TLSPrivateKeyKey] = nil; return s }, missing: true,
			want: []string{"has no key tls.key"}},
		"tls.crt not PEM": {sec: func() *corev1.Secret { s := good(); s.Data[corev1.TLSCertKey] = []byte("hello"); return s },
			want: []string{"key tls.crt holds no PEM certificate"}},
		"the key of another certificate": {sec: func() *corev1.Secret {
			s := good()
			s.Data[corev1.TLSPrivateKeyKey] = good().Data[corev1.TLSPrivateKeyKey]
			return s
		}, want: []string{"key tls.key is not the private key of the certificate in tls.crt"}},
		"expired":       {sec: good, now: now.Add(CertValidity + time.Hour), want: []string{"the certificate in tls.crt expired at", "renew it"}},
		"not yet valid": {sec: good, now: now.Add(-time.Hour), want: []string{"is valid only from"}},
		"ca.crt not PEM": {sec: func() *corev1.Secret { s := good(); s.Data[KeyCACert] = []byte("x"); return s },
			want: []string{"key ca.crt holds no PEM certificate"}},
		"signed by another CA": {sec: func() *corev1.Secret {
			s := good()
			s.Data[KeyCACert] = newTestCA(t, "other").CertPEM
			return s
		}, want: []string{"does not verify against the CA in ca.crt for server authentication"}},
		"server auth only": {sec: func() *corev1.Secret {
			req := ServerCertRequest(c)
			req.Client = false
			return tlsSecret(t, "prod-server-cert", ca, req)
		}, want: []string{"for client authentication", "usages server auth and client auth"}},
		"names missing": {sec: func() *corev1.Secret {
			req := ServerCertRequest(c)
			req.DNSNames, req.IPs = dns[:4], nil
			return tlsSecret(t, "prod-server-cert", ca, req)
		}, want: []string{"does not name prod-master.db.svc, *.prod-master.db.svc,", "*.prod-regionserver.db.svc", "localhost, 127.0.0.1, ::1", "spec.dnsNames"}},
		"not a superuser": {sec: func() *corev1.Secret {
			req := ServerCertRequest(c)
			req.Organizations = []string{"web"}
			return tlsSecret(t, "prod-server-cert", ca, req)
		}, want: []string{"subject (CN prod-server, O [web]) is not a superuser (@cellstore:servers,@cellstore:admins)", "give it organization cellstore:servers"}},
		"no CN": {sec: func() *corev1.Secret {
			req := ServerCertRequest(c)
			req.CommonName = ""
			return tlsSecret(t, "prod-server-cert", ca, req)
		}, want: []string{"has no common name (CN)"}},
	} {
		at := now
		if !tc.now.IsZero() {
			at = tc.now
		}
		p := CheckServerSecret(c, tc.sec(), at)
		if p == nil {
			t.Errorf("%s: accepted", name)
			continue
		}
		if p.Missing != tc.missing {
			t.Errorf("%s: missing %v, want %v (%s)", name, p.Missing, tc.missing, p.Message)
		}
		for _, w := range tc.want {
			if !strings.Contains(p.Message, w) {
				t.Errorf("%s: %q does not say %q", name, p.Message, w)
			}
		}
	}

	// A CN named in spec.security.superusers is a superuser too.
	req := ServerCertRequest(c)
	req.Organizations = nil
	c.Spec.Security.Superusers = []string{req.CommonName}
	if p := CheckServerSecret(c, tlsSecret(t, "prod-server-cert", ca, req), now); p != nil {
		t.Errorf("a CN in spec.security.superusers: %v", p)
	}
}

func TestCheckClientSecret(t *testing.T) {
	c := providedCluster()
	ca := newTestCA(t, "user CA")
	op := security.Request{CommonName: "cellstore-operator", Organizations: []string{GroupAdmins}, Client: true}
	now := time.Now()
	if p := CheckClientSecret(c, tlsSecret(t, "prod-operator-cert", ca, op), "prod-server-cert", ca.CertPEM, now); p != nil {
		t.Fatalf("refused: %v", p)
	}
	noCA := tlsSecret(t, "prod-operator-cert", ca, op)
	delete(noCA.Data, KeyCACert)
	if p := CheckClientSecret(c, noCA, "prod-server-cert", ca.CertPEM, now); p != nil {
		t.Errorf("a client Secret needs no ca.crt: %v", p)
	}

	other := newTestCA(t, "other")
	p := CheckClientSecret(c, tlsSecret(t, "prod-operator-cert", other, op), "prod-server-cert", ca.CertPEM, now)
	if p == nil || p.Missing || !strings.Contains(p.Message, "Secret prod-operator-cert (spec.security.certificates.clientSecretName): the certificate in tls.crt is not one the servers accept") ||
		!strings.Contains(p.Message, "from the CA in ca.crt of Secret prod-server-cert") {
		t.Errorf("another CA: %v", p)
	}
	serverOnly := op
	serverOnly.Client, serverOnly.Server = false, true
	if p := CheckClientSecret(c, tlsSecret(t, "prod-operator-cert", ca, serverOnly), "prod-server-cert", ca.CertPEM, now); p == nil || !strings.Contains(p.Message, "with usage client auth") {
		t.Errorf("no client auth: %v", p)
	}
	nobody := op
	nobody.Organizations = []string{"ops"}
	if p := CheckClientSecret(c, tlsSecret(t, "prod-operator-cert", ca, nobody), "prod-server-cert", ca.CertPEM, now); p == nil || !strings.Contains(p.Message, "give it organization cellstore:admins") {
		t.Errorf("not a superuser: %v", p)
	}
	noKey := tlsSecret(t, "prod-operator-cert", ca, op)
	delete(noKey.Data, corev1.TLSPrivateKeyKey)
	if p := CheckClientSecret(c, noKey, "prod-server-cert", ca.CertPEM, now); p == nil || !p.Missing || !strings.Contains(p.Message, "has no key tls.key: it needs keys tls.crt, tls.key") {
		t.Errorf("no tls.key: %v", p)
	}
}

// With tls Provided the pods mount the user's Secret where they mount NAME-server-tls otherwise,
// and nothing else in the template differs: the template holds the Secret's name, never its
// content, so a renewed certificate restarts no pod.
func TestProvidedCertificatesInPodTemplates(t *testing.T) {
	gen, prov := defaultedCluster(), providedCluster()
	for _, g := range []Group{GroupMaster, GroupRegionServer} {
		var a, b *corev1.PodTemplateSpec
		if g == GroupMaster {
			a, b = &MasterStatefulSet(gen, inputs(gen, g)).Spec.Template, &MasterStatefulSet(prov, inputs(prov, g)).Spec.Template
		} else {
			a, b = &RegionServerStatefulSet(gen, inputs(gen, g)).Spec.Template, &RegionServerStatefulSet(prov, inputs(prov, g)).Spec.Template
		}
		if d := DiffTemplates(a, b); len(d) != 1 || d[0] != "spec.template.spec.volumes[tls].secret.secretName" {
			t.Errorf("%s: Generated and Provided templates differ in %q, want the tls volume's Secret only", g, d)
		}
		for _, v := range b.Spec.Volumes {
			if v.Name == volumeTLS && v.Secret.SecretName != "prod-server-cert" {
				t.Errorf("%s: the tls volume mounts %s", g, v.Secret.SecretName)
			}
		}
	}
}
