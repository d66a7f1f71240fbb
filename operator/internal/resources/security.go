package resources

import (
	"crypto/x509"
	"encoding/pem"
	"net"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"

	"github.com/cellstore/cellstore/engine/security"
	"github.com/cellstore/cellstore/operator/api/v1alpha1"
)

// Security objects (spec.security, docs/security.md): a CA per cluster, the servers' certificate
// and an administrator's client certificate, each in a Secret the operator renews.

const (
	// TLSMountPath is where the engine containers find the server certificate Secret.
	TLSMountPath = ConfigMountPath + "/tls"
	volumeTLS    = "tls"
	// TokensMountPath is where the servers find the StoreUsers' token lines (--token-file).
	TokensMountPath = ConfigMountPath + "/tokens"
	volumeTokens    = "tokens"
	// GroupServers and GroupAdmins are the groups (certificate organizations) of the servers'
	// and the admin certificate: both are always superusers.
	GroupServers = "cellstore:servers"
	GroupAdmins  = "cellstore:admins"
	// ReservedGroupPrefix begins every group of the cluster's own identities (GroupServers,
	// GroupAdmins): a StoreUser may be in none of them.
	ReservedGroupPrefix = "cellstore:"
	// Validity of what the operator issues; each is renewed once a third of its life is left.
	CAValidity   = 10 * 365 * 24 * time.Hour
	CertValidity = 90 * 24 * time.Hour
	// Secret keys, those of a kubernetes.io/tls Secret plus the CA.
	KeyCACert = "ca.crt"
	KeyCAKey  = "ca.key"
	// The CA Secret's keys of a renewal: the next CA, trusted before it issues, and the
	// previous one, trusted while certificates it issued may be in use.
	KeyNextCACert     = "next-ca.crt"
	KeyNextCAKey      = "next-ca.key"
	KeyPreviousCACert = "previous-ca.crt"
	// CAOverlap is how long a renewed CA is trusted beside the current one before it issues: time
	// for every pod's Secret volume, the CA bundle's readers and the StoreUsers' Secrets to get it.
	CAOverlap = 24 * time.Hour
)

// TrustBundle is the PEM of the CAs a cluster's generated certificates are checked against: the
// issuing CA of the CA Secret's data, the next one and the previous one, those not expired (the
// issuing one always).
func TrustBundle(data map[string][]byte, now time.Time) []byte {
	out := append([]byte(nil), data[KeyCACert]...)
	for _, k := range []string{KeyNextCACert, KeyPreviousCACert} {
		if !CAValid(data[k], now) {
			continue
		}
		if len(out) > 0 && out[len(out)-1] != '\n' {
			out = append(out, '\n')
		}
		out = append(out, data[k]...)
	}
	return out
}

// CAValid says whether certPEM holds a certificate not expired at now.
func CAValid(certPEM []byte, now time.Time) bool {
	b, _ := pem.Decode(certPEM)
	if b == nil {
		return false
	}
	cert, err := x509.ParseCertificate(b.Bytes)
	return err == nil && !now.After(cert.NotAfter)
}

// CASecretName holds the cluster's CA (ca.crt, ca.key).
func CASecretName(c *v1alpha1.StoreCluster) string { return c.Name + "-ca" }

// ServerTLSSecretName holds the servers' certificate (tls.crt, tls.key, ca.crt).
func ServerTLSSecretName(c *v1alpha1.StoreCluster) string { return c.Name + "-server-tls" }

// MountedServerSecretName is the Secret of the servers' certificate the pods mount: NAME-server-tls,
// or with tls Provided the user's spec.security.certificates.serverSecretName. Only its name is in
// the pod template, so a renewed certificate in it changes no template (no restart).
func MountedServerSecretName(c *v1alpha1.StoreCluster) string {
	if c.Spec.TLSProvided() && c.Spec.Security.Certificates != nil {
		return c.Spec.Security.Certificates.ServerSecretName
	}
	return ServerTLSSecretName(c)
}

// AdminTLSSecretName holds an administrator's client certificate (CN admin, a superuser).
func AdminTLSSecretName(c *v1alpha1.StoreCluster) string { return c.Name + "-admin-tls" }

// TokensSecretName holds one key per StoreUser with a token: its token-file line (the hash).
func TokensSecretName(c *v1alpha1.StoreCluster) string { return c.Name + "-tokens" }

// OperatorSecretNames are the Secrets the operator makes for the cluster (some only when first
// needed: the tokens Secret with the first token StoreUser). A StoreUser's Secret has the
// StoreUser's name, so a StoreUser may take none of these names.
func OperatorSecretNames(c *v1alpha1.StoreCluster) []string {
	return []string{CASecretName(c), ServerTLSSecretName(c), AdminTLSSecretName(c), TokensSecretName(c)}
}

// CABundleName is the ConfigMap holding the CA certificate alone (ca.crt), for clients and
// Prometheus: the trust anchor, with no key.
func CABundleName(c *v1alpha1.StoreCluster) string { return c.Name + "-ca-bundle" }

// CABundle is the ConfigMap of the CA certificate.
func CABundle(c *v1alpha1.StoreCluster, caPEM []byte, operatorVersion string) *corev1.ConfigMap {
	cm := &corev1.ConfigMap{ObjectMeta: objectMeta(c, CABundleName(c), "", operatorVersion), Data: map[string]string{KeyCACert: string(caPEM)}}
	cm.APIVersion, cm.Kind = "v1", "ConfigMap"
	return cm
}

// ServerHosts are the names the servers' certificate is valid for: the client Service (short and
// qualified), the pods of both headless Services, and the loopback for in-pod tools.
func ServerHosts(c *v1alpha1.StoreCluster) (dns []string, ips []net.IP) {
	svc := ClientServiceName(c)
	dns = []string{svc, svc + "." + c.Namespace, svc + "." + c.Namespace + ".svc", svc + "." + c.Namespace + ".svc.cluster.local"}
	for _, g := range []Group{GroupMaster, GroupRegionServer} {
		h := StatefulSetName(c, g) + "." + c.Namespace + ".svc"
		dns = append(dns, h, "*."+h, "*."+h+".cluster.local")
	}
	dns = append(dns, "localhost")
	return dns, []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback}
}

// ServerCertRequest is the servers' certificate: usable as server and client (servers call each
// other), in the servers' group.
func ServerCertRequest(c *v1alpha1.StoreCluster) security.Request {
	dns, ips := ServerHosts(c)
	return security.Request{CommonName: c.Name + "-server", Organizations: []string{GroupServers}, DNSNames: dns, IPs: ips,
		Server: true, Client: true, Validity: CertValidity}
}

// AdminCertRequest is the administrator's client certificate.
func AdminCertRequest(_ *v1alpha1.StoreCluster) security.Request {
	return security.Request{CommonName: "admin", Organizations: []string{GroupAdmins}, Client: true, Validity: CertValidity}
}

// Superusers is the engine's --superusers: the servers, the admins and spec.security.superusers.
func Superusers(c *v1alpha1.StoreCluster) []string {
	return append([]string{"@" + GroupServers, "@" + GroupAdmins}, c.Spec.Security.Superusers...)
}

// NeedsRenewal says whether a certificate should be issued again at now: a third of its life left
// (or less), or not yet valid.
func NeedsRenewal(notBefore, notAfter, now time.Time) bool {
	life := notAfter.Sub(notBefore)
	return now.Before(notBefore) || notAfter.Sub(now) < life/3
}

// CASecret is the Secret of a CA.
func CASecret(c *v1alpha1.StoreCluster, is *security.Issued, operatorVersion string) *corev1.Secret {
	s := &corev1.Secret{ObjectMeta: objectMeta(c, CASecretName(c), "", operatorVersion), Type: corev1.SecretTypeOpaque,
		Data: map[string][]byte{KeyCACert: is.CertPEM, KeyCAKey: is.KeyPEM}}
	s.APIVersion, s.Kind = "v1", "Secret"
	return s
}

// TLSSecret is the Secret of an issued certificate with its CA.
func TLSSecret(c *v1alpha1.StoreCluster, name string, is *security.Issued, caPEM []byte, operatorVersion string) *corev1.Secret {
	s := &corev1.Secret{ObjectMeta: objectMeta(c, name, "", operatorVersion), Type: corev1.SecretTypeTLS,
		Data: map[string][]byte{corev1.TLSCertKey: is.CertPEM, corev1.TLSPrivateKeyKey: is.KeyPEM, KeyCACert: caPEM}}
	s.APIVersion, s.Kind = "v1", "Secret"
	return s
}

// securityArgs are the engine flags of spec.security.
func securityArgs(c *v1alpha1.StoreCluster) []string {
	if !c.Spec.TLSEnabled() {
		return nil
	}
	return []string{"--security=on",
		"--tls-cert-file=" + TLSMountPath + "/" + corev1.TLSCertKey,
		"--tls-key-file=" + TLSMountPath + "/" + corev1.TLSPrivateKeyKey,
		"--tls-ca-file=" + TLSMountPath + "/" + KeyCACert,
		"--superusers=" + literalArg(strings.Join(Superusers(c), ",")),
		"--token-file=" + TokensMountPath,
	}
}

// securityEnv points the engine's client commands (shell, pe) at the server certificate, so that
// `kubectl exec ... cellstore shell` works as a superuser.
func securityEnv(c *v1alpha1.StoreCluster) []corev1.EnvVar {
	if !c.Spec.TLSEnabled() {
		return nil
	}
	return []corev1.EnvVar{
		{Name: "CELLSTORE_TLS_CA_FILE", Value: TLSMountPath + "/" + KeyCACert},
		{Name: "CELLSTORE_TLS_CERT_FILE", Value: TLSMountPath + "/" + corev1.TLSCertKey},
		{Name: "CELLSTORE_TLS_KEY_FILE", Value: TLSMountPath + "/" + corev1.TLSPrivateKeyKey},
	}
}

// securityVolumes are the server certificate's volume and mount.
func securityVolumes(c *v1alpha1.StoreCluster) ([]corev1.Volume, []corev1.VolumeMount) {
	if !c.Spec.TLSEnabled() {
		return nil, nil
	}
	return []corev1.Volume{
			{Name: volumeTLS, VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{
				SecretName: MountedServerSecretName(c), DefaultMode: ptr.To(int32(0o440))}}},
			// Optional: there is none until a StoreUser with a token exists; the servers read
			// the directory again when the kubelet updates it.
			{Name: volumeTokens, VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{
				SecretName: TokensSecretName(c), DefaultMode: ptr.To(int32(0o440)), Optional: ptr.To(true)}}},
		},
		[]corev1.VolumeMount{{Name: volumeTLS, MountPath: TLSMountPath, ReadOnly: true}, {Name: volumeTokens, MountPath: TokensMountPath, ReadOnly: true}}
}

// httpScheme is the scheme of the engine's HTTP endpoints.
func httpScheme(c *v1alpha1.StoreCluster) corev1.URIScheme {
	if c.Spec.TLSEnabled() {
		return corev1.URISchemeHTTPS
	}
	return corev1.URISchemeHTTP
}

// prestopArgs are the preStop hook's extra flags.
func prestopArgs(c *v1alpha1.StoreCluster) []string {
	if c.Spec.TLSEnabled() {
		return []string{"--https"}
	}
	return nil
}
