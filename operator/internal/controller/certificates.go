package controller

import (
	"bytes"
	"context"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/cellstore/cellstore/engine/security"
	"github.com/cellstore/cellstore/operator/api/v1alpha1"
	"github.com/cellstore/cellstore/operator/internal/resources"
)

// Reasons of the certificates task.
const (
	// ReasonCertificatesFailed: the CA Secret cannot be used (someone changed it by hand).
	ReasonCertificatesFailed = "CertificatesFailed"
	// ReasonTLSSecretMissing: with tls Provided, a Secret of spec.security.certificates, or one of
	// its keys, does not exist.
	ReasonTLSSecretMissing = "TLSSecretMissing"
	// ReasonTLSSecretInvalid: with tls Provided, a Secret holds a certificate that cannot be used:
	// it does not parse or match its key, has expired, is not signed by the CA, lacks a name the
	// servers need, or its subject is not a superuser.
	ReasonTLSSecretInvalid = "TLSSecretInvalid"
)

// taskCertificates keeps the cluster's CA and the certificates it signs (spec.security.tls
// Generated): created when missing, issued again when a third of their life is left, when the
// CA changed, or when the servers' names changed. The pods read renewed files from their Secret
// volume without a restart (the engine re-reads its certificate when the files change).
func (r *StoreClusterReconciler) taskCertificates(ctx context.Context, s *clusterState) Result {
	c := s.c
	switch {
	case !c.Spec.TLSEnabled():
		return Done()
	case c.Spec.TLSProvided():
		return r.checkProvided(ctx, c)
	}
	ca, caPEM, res := r.ensureCA(ctx, c)
	if res.Outcome != Complete {
		return res
	}
	if res := r.applyAll(ctx, c, resources.CABundle(c, caPEM, r.Options.OperatorVersion)); res.Outcome != Complete {
		return res
	}
	for _, want := range []struct {
		name string
		req  security.Request
	}{
		{resources.ServerTLSSecretName(c), resources.ServerCertRequest(c)},
		{resources.AdminTLSSecretName(c), resources.AdminCertRequest(c)},
	} {
		if res := r.ensureCert(ctx, c, ca, caPEM, want.name, want.req); res.Outcome != Complete {
			return res
		}
	}
	return Done()
}

// ensureCA returns the cluster's issuing CA and the PEM of the CAs its certificates are checked
// against (resources.TrustBundle). A renewal overlaps: when a third of the CA's life is left a
// next CA is made and trusted beside it (every ca.crt and the CA bundle carry both) while the
// current one still issues; resources.CAOverlap later the next one issues (every certificate is
// issued again) and the previous one stays trusted until it expires — no connection breaks at
// either step, whatever order the pods see the new files in. A missing CA Secret (deleted to
// revoke every certificate) or an expired CA is replaced at once.
func (r *StoreClusterReconciler) ensureCA(ctx context.Context, c *v1alpha1.StoreCluster) (*security.CA, []byte, Result) {
	now := r.Options.Now()
	sec := &corev1.Secret{}
	err := r.APIReader.Get(ctx, client.ObjectKey{Namespace: c.Namespace, Name: resources.CASecretName(c)}, sec)
	switch {
	case err == nil:
		ca, perr := security.ParseCA(sec.Data[resources.KeyCACert], sec.Data[resources.KeyCAKey])
		if perr != nil {
			return nil, nil, Failed(ReasonCertificatesFailed, "Secret %s does not hold a usable CA (%v): restore it, or delete it to have a new CA made (every certificate is then issued again)",
				sec.Name, perr)
		}
		if now.After(ca.Cert.NotAfter) {
			r.event(c, corev1.EventTypeWarning, "CARenewed", "the CA in Secret %s expired %s: a new CA is made and every certificate issued again", sec.Name, ca.Cert.NotAfter.Format("2006-01-02"))
			break
		}
		data := maps.Clone(sec.Data)
		changed := false
		var next *security.CA
		if len(data[resources.KeyNextCACert]) > 0 {
			if next, perr = security.ParseCA(data[resources.KeyNextCACert], data[resources.KeyNextCAKey]); perr != nil {
				return nil, nil, Failed(ReasonCertificatesFailed, "Secret %s holds an unusable next CA (%v): remove its keys %s and %s to have another made",
					sec.Name, perr, resources.KeyNextCACert, resources.KeyNextCAKey)
			}
		}
		switch {
		case next != nil && !now.Before(next.Cert.NotBefore.Add(resources.CAOverlap)):
			// The next CA has been trusted for the overlap: it issues from now on.
			data[resources.KeyPreviousCACert] = data[resources.KeyCACert]
			data[resources.KeyCACert], data[resources.KeyCAKey] = data[resources.KeyNextCACert], data[resources.KeyNextCAKey]
			delete(data, resources.KeyNextCACert)
			delete(data, resources.KeyNextCAKey)
			ca, changed = next, true
			r.event(c, corev1.EventTypeNormal, "CARenewed", "the CA made %s issues from now on (every certificate is issued again); the previous one stays trusted until it expires %s",
				next.Cert.NotBefore.Format("2006-01-02 15:04"), ca.Cert.NotAfter.Format("2006-01-02"))
		case next == nil && resources.NeedsRenewal(ca.Cert.NotBefore, ca.Cert.NotAfter, now):
			_, is, err := security.NewCA(c.Namespace+"/"+c.Name+" cellstore CA", resources.CAValidity)
			if err != nil {
				return nil, nil, Errored(ReasonCertificatesFailed, err)
			}
			data[resources.KeyNextCACert], data[resources.KeyNextCAKey] = is.CertPEM, is.KeyPEM
			changed = true
			r.event(c, corev1.EventTypeNormal, "CARenewalStarted", "the CA in Secret %s expires %s: a new CA is trusted beside it from now on, and issues from %s",
				sec.Name, ca.Cert.NotAfter.Format("2006-01-02"), now.Add(resources.CAOverlap).Format("2006-01-02 15:04"))
		}
		if _, ok := data[resources.KeyPreviousCACert]; ok && !resources.CAValid(data[resources.KeyPreviousCACert], now) {
			delete(data, resources.KeyPreviousCACert) // expired: nothing it issued is valid
			changed = true
		}
		if changed {
			// The whole data replaced by a merge patch under the version read (keys left out are
			// removed; an apply would keep keys another manager wrote, such as a next CA put
			// there by hand, and promote it again and again; the operator may not update Secrets).
			patch := client.MergeFromWithOptions(sec.DeepCopy(), client.MergeFromWithOptimisticLock{})
			sec.Data = data
			if err := r.Client.Patch(ctx, sec, patch, client.FieldOwner(FieldOwner)); err != nil {
				if apierrors.IsConflict(err) {
					return nil, nil, conflict(sec, r.Options.PollInterval)
				}
				return nil, nil, Errored(ReasonApplyFailed, fmt.Errorf("patch Secret %s: %w", sec.Name, err))
			}
		}
		return ca, resources.TrustBundle(data, now), Done()
	case !apierrors.IsNotFound(err):
		return nil, nil, Errored(ReasonApplyFailed, fmt.Errorf("read Secret %s: %w", resources.CASecretName(c), err))
	}
	ca, is, err := security.NewCA(c.Namespace+"/"+c.Name+" cellstore CA", resources.CAValidity)
	if err != nil {
		return nil, nil, Errored(ReasonCertificatesFailed, err)
	}
	if res := r.applyAll(ctx, c, resources.CASecret(c, is, r.Options.OperatorVersion)); res.Outcome != Complete {
		return nil, nil, res
	}
	return ca, is.CertPEM, Done()
}

// ensureCert issues req into Secret name unless the certificate there is still good: signed by
// this CA, for the same names, with more than a third of its life left.
func (r *StoreClusterReconciler) ensureCert(ctx context.Context, c *v1alpha1.StoreCluster, ca *security.CA, caPEM []byte, name string, req security.Request) Result {
	sec := &corev1.Secret{}
	err := r.APIReader.Get(ctx, client.ObjectKey{Namespace: c.Namespace, Name: name}, sec)
	switch {
	case err == nil:
		why := certStale(sec, ca, caPEM, req, r.Options.Now())
		if why == "" {
			return Done()
		}
		r.event(c, corev1.EventTypeNormal, "CertificateRenewed", "issuing the certificate in Secret %s again: %s", name, why)
	case !apierrors.IsNotFound(err):
		return Errored(ReasonApplyFailed, fmt.Errorf("read Secret %s: %w", name, err))
	}
	is, err := ca.Issue(req)
	if err != nil {
		return Errored(ReasonCertificatesFailed, err)
	}
	return r.applyAll(ctx, c, resources.TLSSecret(c, name, is, caPEM, r.Options.OperatorVersion))
}

// certStale says why the certificate in sec must be issued again ("" when it is good).
func certStale(sec *corev1.Secret, ca *security.CA, caPEM []byte, req security.Request, now time.Time) string {
	b, _ := pem.Decode(sec.Data[corev1.TLSCertKey])
	if b == nil {
		return "it holds no certificate"
	}
	cert, err := x509.ParseCertificate(b.Bytes)
	if err != nil {
		return "its certificate does not parse"
	}
	if cert.CheckSignatureFrom(ca.Cert) != nil {
		return "the CA changed"
	}
	if !bytes.Equal(sec.Data[resources.KeyCACert], caPEM) {
		return "the trusted CAs changed"
	}
	if !slices.Equal(cert.DNSNames, req.DNSNames) || cert.Subject.CommonName != req.CommonName || !slices.Equal(cert.Subject.Organization, req.Organizations) {
		return "the names it must hold changed"
	}
	if resources.NeedsRenewal(cert.NotBefore, cert.NotAfter, now) {
		return fmt.Sprintf("it expires %s", cert.NotAfter.Format("2006-01-02 15:04"))
	}
	return ""
}

// checkProvided checks the Secrets of spec.security.tls Provided (the user's, e.g. cert-manager's)
// and publishes the servers' CA in NAME-ca-bundle; it makes no CA and issues nothing. A problem
// stops the chain (Degraded, naming the Secret, the key and what to do) and is looked at again
// every PollInterval: Secrets are not watched. The pod template holds only the Secret's name, so a
// renewed certificate restarts nothing: the kubelet updates the files and the engine reloads them.
func (r *StoreClusterReconciler) checkProvided(ctx context.Context, c *v1alpha1.StoreCluster) Result {
	p := c.Spec.Security.Certificates
	if p == nil || p.ServerSecretName == "" || p.ClientSecretName == "" {
		return Failed(ReasonInvalidSpec, "security.tls Provided needs security.certificates.serverSecretName and clientSecretName; the operator changed no object")
	}
	now := r.Options.Now()
	server, res := r.providedSecret(ctx, c, p.ServerSecretName, resources.ServerSecretField, resources.ProvidedServerKeys)
	if res.Outcome != Complete {
		return res
	}
	if prob := resources.CheckServerSecret(c, server, now); prob != nil {
		return r.secretProblem(prob)
	}
	caPEM := server.Data[resources.KeyCACert]
	cl, res := r.providedSecret(ctx, c, p.ClientSecretName, resources.ClientSecretField, resources.ProvidedClientKeys)
	if res.Outcome != Complete {
		return res
	}
	if prob := resources.CheckClientSecret(c, cl, server.Name, caPEM, now); prob != nil {
		return r.secretProblem(prob)
	}
	return r.applyAll(ctx, c, resources.CABundle(c, caPEM, r.Options.OperatorVersion))
}

// providedSecret reads a Secret the user provides.
func (r *StoreClusterReconciler) providedSecret(ctx context.Context, c *v1alpha1.StoreCluster, name, field string, keys []string) (*corev1.Secret, Result) {
	sec := &corev1.Secret{}
	err := r.APIReader.Get(ctx, client.ObjectKey{Namespace: c.Namespace, Name: name}, sec)
	switch {
	case apierrors.IsNotFound(err):
		return nil, r.failedPolling(ReasonTLSSecretMissing,
			"%s does not exist in namespace %s: create it with keys %s (e.g. a cert-manager Certificate with secretName %s; docs/operator.md, \"Provided certificates\")",
			resources.SecretRef(name, field), c.Namespace, strings.Join(keys, ", "), name)
	case err != nil:
		return nil, Errored(ReasonApplyFailed, fmt.Errorf("read Secret %s: %w", name, err))
	}
	return sec, Done()
}

func (r *StoreClusterReconciler) secretProblem(p *resources.SecretProblem) Result {
	if p.Missing {
		return r.failedPolling(ReasonTLSSecretMissing, "%s", p.Message)
	}
	return r.failedPolling(ReasonTLSSecretInvalid, "%s", p.Message)
}
