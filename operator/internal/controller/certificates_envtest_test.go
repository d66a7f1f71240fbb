//go:build envtest

package controller_test

import (
	"crypto/x509"
	"encoding/pem"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/cellstore/cellstore/operator/api/v1alpha1"
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
	It("lets only the cluster's pods and the operator reach the region servers' Admin port, and removes the policy when turned off", func() {
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
		Expect(admin.From).To(HaveLen(2))
		update(c, func(cl *v1alpha1.StoreCluster) { cl.Spec.Security.NetworkPolicy = ptr.To(false) })
		Eventually(func() bool { return apierrors.IsNotFound(k8s.Get(suiteCtx, key, &networkingv1.NetworkPolicy{})) }, timeout, poll).Should(BeTrue())
	})
})
