//go:build envtest

package controller_test

import (
	"crypto/x509"
	"strings"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/cellstore/cellstore/engine/security"
	"github.com/cellstore/cellstore/operator/api/v1alpha1"
	"github.com/cellstore/cellstore/operator/internal/controller"
	"github.com/cellstore/cellstore/operator/internal/resources"
)

func newUser(ns, name, cluster string, mutate func(*v1alpha1.StoreUser)) *v1alpha1.StoreUser {
	u := &v1alpha1.StoreUser{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Spec: v1alpha1.StoreUserSpec{Cluster: cluster}}
	if mutate != nil {
		mutate(u)
	}
	Expect(k8s.Create(suiteCtx, u)).To(Succeed())
	return u
}

func userReady(u *v1alpha1.StoreUser) func() *metav1.Condition {
	return func() *metav1.Condition {
		cur := &v1alpha1.StoreUser{}
		if err := k8s.Get(suiteCtx, client.ObjectKeyFromObject(u), cur); err != nil {
			return nil
		}
		return meta.FindStatusCondition(cur.Status.Conditions, controller.ConditionReady)
	}
}

var _ = Describe("StoreUser controller", func() {
	It("makes a user's certificate, grants its ACLs and quota, follows changes and takes everything back when deleted", func() {
		ns := newNamespace()
		c := create(newCluster(ns))
		waitRunning(c)
		fake := fakeOf(c)

		alice := newUser(ns, "alice", c.Name, func(u *v1alpha1.StoreUser) {
			u.Spec.Groups = []string{"analysts"}
			u.Spec.ACLs = []v1alpha1.UserACL{{Table: "orders", Actions: "RW"}, {Namespace: "sales", Actions: "C"}}
			u.Spec.Quotas = []v1alpha1.UserQuota{{ThrottleType: v1alpha1.ThrottleWrite, Limit: "100req/sec"}}
		})
		Eventually(userReady(alice), timeout, poll).Should(haveCondition(metav1.ConditionTrue, controller.ReasonApplied))
		Expect(fake.Grants()).To(Equal([]string{"alice namespace=sales: C", "alice table=default:orders: RW"}))
		Expect(fake.Quotas()).To(HaveLen(1))

		sec := &corev1.Secret{}
		Expect(k8s.Get(suiteCtx, client.ObjectKey{Namespace: ns, Name: "alice"}, sec)).To(Succeed())
		Expect(sec.Type).To(Equal(corev1.SecretTypeTLS))
		cert := certIn(sec)
		Expect(cert.Subject.CommonName).To(Equal("alice"))
		Expect(cert.Subject.Organization).To(Equal([]string{"analysts"}))
		roots := x509.NewCertPool()
		Expect(roots.AppendCertsFromPEM(sec.Data["ca.crt"])).To(BeTrue())
		_, err := cert.Verify(x509.VerifyOptions{Roots: roots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}})
		Expect(err).NotTo(HaveOccurred())

		// Fewer ACLs and another action: the dropped scope is revoked, the changed one granted anew.
		Eventually(func() error {
			cur := &v1alpha1.StoreUser{}
			if err := k8s.Get(suiteCtx, client.ObjectKeyFromObject(alice), cur); err != nil {
				return err
			}
			cur.Spec.ACLs = []v1alpha1.UserACL{{Table: "orders", Actions: "R"}}
			cur.Spec.Quotas = nil
			return k8s.Update(suiteCtx, cur)
		}, timeout, poll).Should(Succeed())
		Eventually(fake.Grants, timeout, poll).Should(Equal([]string{"alice table=default:orders: R"}))
		Eventually(fake.Quotas, timeout, poll).Should(BeEmpty())

		// A token user: its token in its Secret, the token's hash in the cluster's tokens Secret.
		bob := newUser(ns, "bob", c.Name, func(u *v1alpha1.StoreUser) { u.Spec.Authentication.Type = "token" })
		Eventually(userReady(bob), timeout, poll).Should(haveCondition(metav1.ConditionTrue, controller.ReasonApplied))
		Expect(k8s.Get(suiteCtx, client.ObjectKey{Namespace: ns, Name: "bob"}, sec)).To(Succeed())
		token := string(sec.Data["token"])
		Expect(token).To(HavePrefix(security.TokenPrefix))
		tokens := &corev1.Secret{}
		Expect(k8s.Get(suiteCtx, client.ObjectKey{Namespace: ns, Name: resources.TokensSecretName(c)}, tokens)).To(Succeed())
		Expect(strings.TrimSpace(string(tokens.Data["bob"]))).To(Equal(security.TokenLine(token, "bob", nil)))
		Expect(string(tokens.Data["bob"])).NotTo(ContainSubstring(token), "the servers get the hash, never the token")

		// A user switching from tls to token gets a token Secret in place of its certificate.
		Eventually(func() error {
			cur := &v1alpha1.StoreUser{}
			if err := k8s.Get(suiteCtx, client.ObjectKeyFromObject(alice), cur); err != nil {
				return err
			}
			cur.Spec.Authentication.Type = "token"
			return k8s.Update(suiteCtx, cur)
		}, timeout, poll).Should(Succeed())
		Eventually(func() string {
			s := &corev1.Secret{}
			if err := k8s.Get(suiteCtx, client.ObjectKey{Namespace: ns, Name: "alice"}, s); err != nil {
				return ""
			}
			return string(s.Data["token"])
		}, timeout, poll).Should(HavePrefix(security.TokenPrefix))

		// Deleted: grants and the token go, then the StoreUser.
		Expect(k8s.Delete(suiteCtx, alice)).To(Succeed())
		Expect(k8s.Delete(suiteCtx, bob)).To(Succeed())
		Eventually(func() bool {
			return apierrors.IsNotFound(k8s.Get(suiteCtx, client.ObjectKeyFromObject(alice), &v1alpha1.StoreUser{})) &&
				apierrors.IsNotFound(k8s.Get(suiteCtx, client.ObjectKeyFromObject(bob), &v1alpha1.StoreUser{}))
		}, timeout, poll).Should(BeTrue())
		Expect(fake.Grants()).To(BeEmpty())
		Expect(k8s.Get(suiteCtx, client.ObjectKey{Namespace: ns, Name: resources.TokensSecretName(c)}, tokens)).To(Succeed())
		Expect(tokens.Data).NotTo(HaveKey("bob"))
	})

	It("takes back a user deleted while its cluster's security is off", func() {
		ns := newNamespace()
		c := create(newCluster(ns))
		waitRunning(c)
		fake := fakeOf(c)
		bob := newUser(ns, "bob", c.Name, func(u *v1alpha1.StoreUser) {
			u.Spec.Authentication.Type = "token"
			u.Spec.ACLs = []v1alpha1.UserACL{{Table: "orders", Actions: "R"}}
		})
		Eventually(userReady(bob), timeout, poll).Should(haveCondition(metav1.ConditionTrue, controller.ReasonApplied))
		Expect(fake.Grants()).To(Equal([]string{"bob table=default:orders: R"}))
		Eventually(func() error {
			cur := get(c)
			cur.Spec.Security.TLS = v1alpha1.TLSDisabled
			return k8s.Update(suiteCtx, cur)
		}, timeout, poll).Should(Succeed())
		// (Deleted at once: the user's own reconcile may not have seen security off yet; its
		// deletion reads the cluster as it is.)
		Expect(k8s.Delete(suiteCtx, bob)).To(Succeed())
		Eventually(func() bool {
			return apierrors.IsNotFound(k8s.Get(suiteCtx, client.ObjectKeyFromObject(bob), &v1alpha1.StoreUser{}))
		}, timeout, poll).Should(BeTrue())
		// Security on again would not bring bob back: no grant, no token line.
		Expect(fake.Grants()).To(BeEmpty())
		tokens := &corev1.Secret{}
		if err := k8s.Get(suiteCtx, client.ObjectKey{Namespace: ns, Name: resources.TokensSecretName(c)}, tokens); err == nil {
			Expect(tokens.Data).NotTo(HaveKey("bob"))
		}
	})

	It("says when its cluster does not exist, and refuses two ACLs at one scope", func() {
		ns := newNamespace()
		lost := newUser(ns, "lost", "nowhere", nil)
		Eventually(userReady(lost), timeout, poll).Should(haveCondition(metav1.ConditionFalse, controller.ReasonClusterNotFound))
		c := create(newCluster(ns))
		waitRunning(c)
		twice := newUser(ns, "twice", c.Name, func(u *v1alpha1.StoreUser) {
			u.Spec.ACLs = []v1alpha1.UserACL{{Table: "t", Actions: "R"}, {Table: "default:t", Actions: "W"}}
		})
		Eventually(userReady(twice), timeout, poll).Should(haveCondition(metav1.ConditionFalse, controller.ReasonInvalidACL, "both at table=default:t"))
		Expect(fakeOf(c).Grants()).To(BeEmpty())
	})

	It("refuses bad specs with CEL messages", func() {
		ns := newNamespace()
		bad := &v1alpha1.StoreUser{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "x"}, Spec: v1alpha1.StoreUserSpec{Cluster: "c",
			ACLs: []v1alpha1.UserACL{{Namespace: "ns", Table: "t", Actions: "R"}}}}
		Expect(k8s.Create(suiteCtx, bad)).To(MatchError(ContainSubstring("give a namespace or a table")))
		bad.Spec.ACLs = []v1alpha1.UserACL{{Family: "f", Actions: "R"}}
		Expect(k8s.Create(suiteCtx, bad)).To(MatchError(ContainSubstring("a family needs its table")))
		bad.Spec.ACLs = []v1alpha1.UserACL{{Table: "t", Actions: "RZ"}}
		Expect(k8s.Create(suiteCtx, bad)).To(MatchError(ContainSubstring("actions")))
		// The cluster's own groups are superusers; its own Secrets' names are taken.
		bad.Spec.ACLs = nil
		bad.Spec.Groups = []string{"analysts", "cellstore:admins"}
		Expect(k8s.Create(suiteCtx, bad)).To(MatchError(ContainSubstring("groups beginning 'cellstore:' are the cluster's own")))
		bad.Spec.Groups = []string{"cellstore:servers"}
		Expect(k8s.Create(suiteCtx, bad)).To(MatchError(ContainSubstring("groups beginning 'cellstore:' are the cluster's own")))
		bad.Spec.Groups = nil
		for _, name := range []string{"c-tokens", "c-ca", "c-server-tls", "c-admin-tls"} {
			bad.Name = name
			Expect(k8s.Create(suiteCtx, bad)).To(MatchError(ContainSubstring("are the cluster's own Secrets")), name)
		}
		// Names of another cluster's Secrets, and other groups, are fine.
		ok := bad.DeepCopy()
		ok.Name, ok.Spec.Groups = "other-tokens", []string{"analysts", "cellstore"}
		Expect(k8s.Create(suiteCtx, ok)).To(Succeed())
	})
})
