//go:build envtest

package controller_test

import (
	"bytes"
	"crypto/x509"
	"encoding/pem"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/cellstore/cellstore/engine/security"
	"github.com/cellstore/cellstore/operator/api/v1alpha1"
	"github.com/cellstore/cellstore/operator/internal/controller"
	"github.com/cellstore/cellstore/operator/internal/resources"
)

func certIn(sec *corev1.Secret) *x509.Certificate {
	GinkgoHelper()
	b, _ := pem.Decode(sec.Data[corev1.TLSCertKey])
	Expect(b).NotTo(BeNil())
	c, err := x509.ParseCertificate(b.Bytes)
	Expect(err).NotTo(HaveOccurred())
	return c
}

var _ = Describe("StoreCluster controller: certificates", func() {
	It("keeps a CA, the servers' and the admin certificate in Secrets, and issues a lost one again", func() {
		ns := newNamespace()
		c := create(newCluster(ns))
		waitRunning(c)

		secret := func(name string) *corev1.Secret {
			GinkgoHelper()
			s := &corev1.Secret{}
			Expect(k8s.Get(suiteCtx, client.ObjectKey{Namespace: ns, Name: name}, s)).To(Succeed(), name)
			Expect(s.GetOwnerReferences()).To(ContainElement(HaveField("Name", c.Name)), name)
			return s
		}
		caSec := secret(resources.CASecretName(c))
		bundle := &corev1.ConfigMap{}
		Expect(k8s.Get(suiteCtx, client.ObjectKey{Namespace: ns, Name: resources.CABundleName(c)}, bundle)).To(Succeed())
		Expect(bundle.Data[resources.KeyCACert]).To(Equal(string(caSec.Data[resources.KeyCACert])))
		Expect(bundle.Data).NotTo(HaveKey(resources.KeyCAKey))
		roots := x509.NewCertPool()
		Expect(roots.AppendCertsFromPEM(caSec.Data[resources.KeyCACert])).To(BeTrue())

		server := secret(resources.ServerTLSSecretName(c))
		Expect(server.Type).To(Equal(corev1.SecretTypeTLS))
		sc := certIn(server)
		Expect(sc.Subject.Organization).To(Equal([]string{resources.GroupServers}))
		for _, host := range []string{"store", "store." + ns + ".svc", "store-master-0.store-master." + ns + ".svc", "store-regionserver-2.store-regionserver." + ns + ".svc", "localhost"} {
			_, err := sc.Verify(x509.VerifyOptions{Roots: roots, DNSName: host, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}})
			Expect(err).NotTo(HaveOccurred(), host)
		}
		admin := certIn(secret(resources.AdminTLSSecretName(c)))
		Expect(admin.Subject.CommonName).To(Equal("admin"))
		_, err := admin.Verify(x509.VerifyOptions{Roots: roots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}})
		Expect(err).NotTo(HaveOccurred())

		// The pods mount the server certificate and run with security on.
		tpl := statefulSet(c, resources.GroupRegionServer).Spec.Template
		Expect(tpl.Spec.Containers[0].Args).To(ContainElement("--security=on"))
		Expect(tpl.Spec.Volumes).To(ContainElement(HaveField("Secret.SecretName", resources.ServerTLSSecretName(c))))

		// A lost certificate is issued again (a new one), by the same CA.
		Expect(k8s.Delete(suiteCtx, server)).To(Succeed())
		Eventually(func() string {
			s := &corev1.Secret{}
			if err := k8s.Get(suiteCtx, client.ObjectKey{Namespace: ns, Name: server.Name}, s); err != nil {
				return ""
			}
			return certIn(s).SerialNumber.String()
		}, timeout, poll).ShouldNot(Or(BeEmpty(), Equal(sc.SerialNumber.String())))
		Expect(secret(resources.CASecretName(c)).Data).To(Equal(caSec.Data), "the CA is kept")
	})

	It("renews the CA with an overlap: the next CA is trusted before it issues, the previous one after", func() {
		ns := newNamespace()
		cl := newCluster(ns)
		// A cluster made seven years ago: its CA (valid ten) has less than a third of its life left.
		oldCA, oldIs, err := security.NewCAFrom("old", time.Now().Add(-7*365*24*time.Hour), resources.CAValidity)
		Expect(err).NotTo(HaveOccurred())
		caName := resources.CASecretName(cl)
		Expect(k8s.Create(suiteCtx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: caName},
			Data: map[string][]byte{resources.KeyCACert: oldIs.CertPEM, resources.KeyCAKey: oldIs.KeyPEM}})).To(Succeed())
		// A client certificate of the old CA, handed out before the renewal.
		oldClient, err := oldCA.Issue(security.Request{CommonName: "alice", Client: true, Validity: time.Hour})
		Expect(err).NotTo(HaveOccurred())
		c := create(cl)
		waitRunning(c)

		secret := func(name string) *corev1.Secret {
			GinkgoHelper()
			s := &corev1.Secret{}
			Expect(k8s.Get(suiteCtx, client.ObjectKey{Namespace: ns, Name: name}, s)).To(Succeed(), name)
			return s
		}
		verifies := func(cert *x509.Certificate, bundle []byte, usage x509.ExtKeyUsage) error {
			roots := x509.NewCertPool()
			Expect(roots.AppendCertsFromPEM(bundle)).To(BeTrue())
			_, err := cert.Verify(x509.VerifyOptions{Roots: roots, KeyUsages: []x509.ExtKeyUsage{usage}})
			return err
		}
		// 1. A next CA is trusted beside the old one, which still issues.
		Eventually(func() []byte { return secret(caName).Data[resources.KeyNextCACert] }, timeout, poll).ShouldNot(BeEmpty())
		ca := secret(caName)
		Expect(ca.Data[resources.KeyCACert]).To(Equal(oldIs.CertPEM), "the old CA still issues")
		nextPEM := ca.Data[resources.KeyNextCACert]
		Eventually(func() []byte { return secret(resources.ServerTLSSecretName(c)).Data[resources.KeyCACert] }, timeout, poll).
			Should(And(ContainSubstring(string(oldIs.CertPEM)), ContainSubstring(string(nextPEM))))
		server := secret(resources.ServerTLSSecretName(c))
		Expect(certIn(server).CheckSignatureFrom(oldCA.Cert)).To(Succeed(), "the servers' certificate is still the old CA's")
		Expect(verifies(oldClient.Cert, server.Data[resources.KeyCACert], x509.ExtKeyUsageClientAuth)).To(Succeed())
		bundle := &corev1.ConfigMap{}
		Eventually(func() string {
			_ = k8s.Get(suiteCtx, client.ObjectKey{Namespace: ns, Name: resources.CABundleName(c)}, bundle)
			return bundle.Data[resources.KeyCACert]
		}, timeout, poll).Should(ContainSubstring(string(nextPEM)))
		Eventually(eventsOf(c, "CARenewalStarted"), timeout, poll).ShouldNot(BeEmpty())

		// 2. A day later (a next CA made 25 hours ago stands in): it issues, the old one stays trusted.
		_, dayOld, err := security.NewCAFrom("next", time.Now().Add(-25*time.Hour), resources.CAValidity)
		Expect(err).NotTo(HaveOccurred())
		ca = secret(caName)
		ca.Data[resources.KeyNextCACert], ca.Data[resources.KeyNextCAKey] = dayOld.CertPEM, dayOld.KeyPEM
		Expect(k8s.Update(suiteCtx, ca)).To(Succeed())
		Eventually(func() []byte { return secret(caName).Data[resources.KeyCACert] }, timeout, poll).Should(Equal(dayOld.CertPEM))
		ca = secret(caName)
		Expect(ca.Data).NotTo(HaveKey(resources.KeyNextCACert))
		Expect(ca.Data[resources.KeyPreviousCACert]).To(Equal(oldIs.CertPEM))
		Eventually(func() error { return certIn(secret(resources.ServerTLSSecretName(c))).CheckSignatureFrom(dayOld.Cert) }, timeout, poll).
			Should(Succeed(), "the servers' certificate is issued again by the new CA")
		server = secret(resources.ServerTLSSecretName(c))
		Expect(verifies(oldClient.Cert, server.Data[resources.KeyCACert], x509.ExtKeyUsageClientAuth)).To(Succeed(),
			"a certificate of the previous CA is still accepted")
		Expect(verifies(certIn(server), oldIs.CertPEM, x509.ExtKeyUsageServerAuth)).NotTo(Succeed(), "the new certificate is the new CA's")
		Eventually(eventsOf(c, "CARenewed"), timeout, poll).ShouldNot(BeEmpty())
		waitRunning(c)
	})

	It("makes no certificate with tls Disabled", func() {
		ns := newNamespace()
		cl := newCluster(ns)
		cl.Spec.Security.TLS = v1alpha1.TLSDisabled
		c := create(cl)
		waitRunning(c)
		Expect(k8s.Get(suiteCtx, client.ObjectKey{Namespace: ns, Name: resources.CASecretName(c)}, &corev1.Secret{})).NotTo(Succeed())
		Expect(statefulSet(c, resources.GroupMaster).Spec.Template.Spec.Containers[0].Args).NotTo(ContainElement("--security=on"))
	})
})

var _ = Describe("StoreCluster controller: network policy", func() {
	It("lets only the cluster's own pods reach the region servers' Admin port, and removes the policy when turned off", func() {
		ns := newNamespace()
		c := create(newCluster(ns))
		waitRunning(c)
		np := &networkingv1.NetworkPolicy{}
		key := client.ObjectKey{Namespace: ns, Name: c.Name + "-regionserver"}
		Eventually(func() error { return k8s.Get(suiteCtx, key, np) }, timeout, poll).Should(Succeed())
		Expect(np.GetOwnerReferences()).To(ContainElement(HaveField("Name", c.Name)))
		var admin *networkingv1.NetworkPolicyIngressRule
		for i, r := range np.Spec.Ingress {
			if r.Ports[0].Port.IntValue() == int(resources.RegionServerAdmin) {
				admin = &np.Spec.Ingress[i]
			} else {
				Expect(r.From).To(BeEmpty(), "port %s is open to clients", r.Ports[0].Port)
			}
		}
		Expect(admin).NotTo(BeNil())
		Expect(admin.From).To(HaveLen(1), "only the cluster's pods: the operator dials the masters, never a region server")
		Expect(admin.From[0].NamespaceSelector).To(BeNil())
		update(c, func(cl *v1alpha1.StoreCluster) { cl.Spec.Security.NetworkPolicy = ptr.To(false) })
		Eventually(func() bool { return apierrors.IsNotFound(k8s.Get(suiteCtx, key, &networkingv1.NetworkPolicy{})) }, timeout, poll).Should(BeTrue())
	})
})

// providedSecret is a kubernetes.io/tls Secret as cert-manager writes it, issued by ca (ca.crt
// holds caBundle when given, else ca's certificate).
func providedSecret(ns, name string, ca *security.CA, req security.Request, caBundle ...[]byte) *corev1.Secret {
	GinkgoHelper()
	if req.Validity == 0 {
		req.Validity = time.Hour
	}
	is, err := ca.Issue(req)
	Expect(err).NotTo(HaveOccurred())
	caPEM := ca.CertPEM
	if len(caBundle) > 0 {
		caPEM = bytes.Join(caBundle, nil)
	}
	return &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Type: corev1.SecretTypeTLS,
		Data: map[string][]byte{corev1.TLSCertKey: is.CertPEM, corev1.TLSPrivateKeyKey: is.KeyPEM, resources.KeyCACert: caPEM}}
}

func newTestCA(name string) *security.CA {
	GinkgoHelper()
	ca, _, err := security.NewCA(name, 24*time.Hour)
	Expect(err).NotTo(HaveOccurred())
	return ca
}

// providedCluster is a StoreCluster with tls Provided, naming Secrets store-server-cert and
// store-operator-cert.
func providedCluster(ns string) *v1alpha1.StoreCluster {
	return newCluster(ns, func(c *v1alpha1.StoreCluster) {
		c.Spec.Security.TLS = v1alpha1.TLSProvided
		c.Spec.Security.Certificates = &v1alpha1.ProvidedCertificates{ServerSecretName: "store-server-cert", ClientSecretName: "store-operator-cert"}
	})
}

var operatorCertRequest = security.Request{CommonName: "cellstore-operator", Organizations: []string{resources.GroupAdmins}, Client: true}

func putSecret(s *corev1.Secret) {
	GinkgoHelper()
	cur := &corev1.Secret{}
	err := k8s.Get(suiteCtx, client.ObjectKeyFromObject(s), cur)
	if apierrors.IsNotFound(err) {
		Expect(k8s.Create(suiteCtx, s.DeepCopy())).To(Succeed())
		return
	}
	Expect(err).NotTo(HaveOccurred())
	cur.Data = s.Data
	Expect(k8s.Update(suiteCtx, cur)).To(Succeed())
}

var _ = Describe("StoreCluster controller: provided certificates", func() {
	It("mounts the user's Secrets, makes no CA, follows a renewed certificate without a restart, and refuses tls StoreUsers", func() {
		ns := newNamespace()
		cl := providedCluster(ns)
		ca := newTestCA("user CA")
		putSecret(providedSecret(ns, "store-server-cert", ca, resources.ServerCertRequest(cl)))
		putSecret(providedSecret(ns, "store-operator-cert", ca, operatorCertRequest))
		c := create(cl)
		waitRunning(c)

		// The pods mount the user's server Secret and run with security on.
		for _, g := range []resources.Group{resources.GroupMaster, resources.GroupRegionServer} {
			tpl := statefulSet(c, g).Spec.Template
			Expect(tpl.Spec.Containers[0].Args).To(ContainElements("--security=on", "--tls-cert-file=/etc/cellstore/tls/tls.crt"))
			Expect(tpl.Spec.Volumes).To(ContainElement(And(HaveField("Name", "tls"), HaveField("Secret.SecretName", "store-server-cert"))), string(g))
		}
		// The operator made no CA and issued nothing; the CA bundle is the user's CA.
		for _, name := range []string{resources.CASecretName(c), resources.ServerTLSSecretName(c), resources.AdminTLSSecretName(c)} {
			Expect(apierrors.IsNotFound(k8s.Get(suiteCtx, client.ObjectKey{Namespace: ns, Name: name}, &corev1.Secret{}))).To(BeTrue(), name)
		}
		bundle := func() string {
			cm := &corev1.ConfigMap{}
			if err := k8s.Get(suiteCtx, client.ObjectKey{Namespace: ns, Name: resources.CABundleName(c)}, cm); err != nil {
				return ""
			}
			return cm.Data[resources.KeyCACert]
		}
		Expect(bundle()).To(Equal(string(ca.CertPEM)))

		// cert-manager renews the servers' certificate, here from a new CA the Secret's ca.crt
		// adds to the old one: the bundle follows, and no pod template changes (no restart).
		stsBefore := map[resources.Group]*appsv1.StatefulSet{}
		for _, g := range []resources.Group{resources.GroupMaster, resources.GroupRegionServer} {
			stsBefore[g] = statefulSet(c, g)
		}
		podsBefore := pods(c, resources.GroupRegionServer)
		ca2 := newTestCA("user CA 2")
		putSecret(providedSecret(ns, "store-server-cert", ca2, resources.ServerCertRequest(cl), ca.CertPEM, ca2.CertPEM))
		Eventually(bundle, timeout, poll).Should(Equal(string(ca.CertPEM) + string(ca2.CertPEM)))
		reconcilesPass(c, 2)
		for g, before := range stsBefore {
			after := statefulSet(c, g)
			Expect(after.Generation).To(Equal(before.Generation), string(g))
			Expect(after.Spec.Template).To(Equal(before.Spec.Template), string(g))
		}
		Expect(pods(c, resources.GroupRegionServer)).To(Equal(podsBefore))
		Expect(condition(c, v1alpha1.ConditionDegraded)()).To(haveCondition(metav1.ConditionFalse, controller.ReasonAsExpected))

		// A tls StoreUser needs a CA key the operator does not hold: refused. A token user works,
		// and gets the servers' CA.
		alice := newUser(ns, "alice", c.Name, func(u *v1alpha1.StoreUser) {
			u.Spec.ACLs = []v1alpha1.UserACL{{Table: "orders", Actions: "R"}}
		})
		Eventually(userReady(alice), timeout, poll).Should(haveCondition(metav1.ConditionFalse, controller.ReasonCannotIssueCertificate,
			"StoreCluster store runs with security.tls Provided: the operator holds no CA key", "set authentication.type token"))
		Expect(apierrors.IsNotFound(k8s.Get(suiteCtx, client.ObjectKey{Namespace: ns, Name: "alice"}, &corev1.Secret{}))).To(BeTrue())
		bob := newUser(ns, "bob", c.Name, func(u *v1alpha1.StoreUser) {
			u.Spec.Authentication.Type = "token"
			u.Spec.ACLs = []v1alpha1.UserACL{{Table: "orders", Actions: "RW"}}
		})
		Eventually(userReady(bob), timeout, poll).Should(haveCondition(metav1.ConditionTrue, controller.ReasonApplied))
		tok := &corev1.Secret{}
		Expect(k8s.Get(suiteCtx, client.ObjectKey{Namespace: ns, Name: "bob"}, tok)).To(Succeed())
		Expect(tok.Data["token"]).To(HavePrefix(security.TokenPrefix))
		Expect(string(tok.Data[resources.KeyCACert])).To(Equal(string(ca.CertPEM) + string(ca2.CertPEM)))
		Expect(fakeOf(c).Grants()).To(Equal([]string{"bob table=default:orders: RW"}))
		Expect(userReady(alice)()).To(HaveField("Reason", controller.ReasonCannotIssueCertificate))
	})

	It("says which Secret or key is missing or unusable, makes no pods until they are fixed, then runs", func() {
		ns := newNamespace()
		c := create(providedCluster(ns))
		degraded := condition(c, v1alpha1.ConditionDegraded)
		Eventually(degraded, timeout, poll).Should(haveCondition(metav1.ConditionTrue, controller.ReasonTLSSecretMissing,
			"task certificates: Secret store-server-cert (spec.security.certificates.serverSecretName) does not exist in namespace "+ns,
			"create it with keys tls.crt, tls.key, ca.crt"))
		for _, g := range []resources.Group{resources.GroupMaster, resources.GroupRegionServer} {
			err := k8s.Get(suiteCtx, client.ObjectKey{Namespace: ns, Name: resources.StatefulSetName(c, g)}, &appsv1.StatefulSet{})
			Expect(apierrors.IsNotFound(err)).To(BeTrue(), "StatefulSet of %s made before its certificate exists", g)
		}

		ca := newTestCA("user CA")
		server := providedSecret(ns, "store-server-cert", ca, resources.ServerCertRequest(c))
		noCA := server.DeepCopy()
		delete(noCA.Data, resources.KeyCACert)
		putSecret(noCA)
		Eventually(degraded, timeout, poll).Should(haveCondition(metav1.ConditionTrue, controller.ReasonTLSSecretMissing,
			"Secret store-server-cert (spec.security.certificates.serverSecretName) has no key ca.crt"))

		// A certificate without the servers' pod names.
		short := resources.ServerCertRequest(c)
		short.DNSNames = []string{"store." + ns + ".svc"}
		putSecret(providedSecret(ns, "store-server-cert", ca, short))
		Eventually(degraded, timeout, poll).Should(haveCondition(metav1.ConditionTrue, controller.ReasonTLSSecretInvalid,
			"the certificate in tls.crt does not name store,", "*.store-regionserver."+ns+".svc"))

		putSecret(server)
		Eventually(degraded, timeout, poll).Should(haveCondition(metav1.ConditionTrue, controller.ReasonTLSSecretMissing,
			"Secret store-operator-cert (spec.security.certificates.clientSecretName) does not exist"))

		// An expired client certificate.
		expired := operatorCertRequest
		expired.NotBefore, expired.Validity = time.Now().Add(-2*time.Hour), time.Hour
		putSecret(providedSecret(ns, "store-operator-cert", ca, expired))
		Eventually(degraded, timeout, poll).Should(haveCondition(metav1.ConditionTrue, controller.ReasonTLSSecretInvalid,
			"Secret store-operator-cert (spec.security.certificates.clientSecretName): the certificate in tls.crt expired at"))

		// A client certificate of someone who is not a superuser.
		nobody := operatorCertRequest
		nobody.Organizations = []string{"ops"}
		putSecret(providedSecret(ns, "store-operator-cert", ca, nobody))
		Eventually(degraded, timeout, poll).Should(haveCondition(metav1.ConditionTrue, controller.ReasonTLSSecretInvalid,
			"is not a superuser", "give it organization cellstore:admins"))

		putSecret(providedSecret(ns, "store-operator-cert", ca, operatorCertRequest))
		waitRunning(c)
		Expect(degraded()).To(haveCondition(metav1.ConditionFalse, controller.ReasonAsExpected))
		Expect(events(c, controller.ReasonTLSSecretInvalid)).NotTo(BeEmpty())
	})
})
