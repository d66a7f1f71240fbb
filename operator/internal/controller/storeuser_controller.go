package controller

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/record"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	"github.com/cellstore/cellstore/engine/security"
	"github.com/cellstore/cellstore/operator/api/v1alpha1"
	"github.com/cellstore/cellstore/operator/internal/master"
	"github.com/cellstore/cellstore/operator/internal/resources"
)

// StoreUserFinalizer keeps a StoreUser until its grants, quotas and token are taken back.
const StoreUserFinalizer = "cellstore.io/storeuser"

// StoreUser conditions and reasons.
const (
	ConditionReady         = "Ready"
	ReasonClusterNotFound  = "ClusterNotFound"
	ReasonSecurityDisabled = "SecurityDisabled"
	ReasonCANotReady       = "CANotReady"
	// ReasonCannotIssueCertificate: a StoreUser of type tls for a cluster with security.tls
	// Provided, whose CA key the operator does not hold.
	ReasonCannotIssueCertificate = "CannotIssueCertificate"
	ReasonInvalidACL             = "InvalidACL"
	// ReasonReservedIdentity: a StoreUser in one of the cluster's own groups, or named as one of
	// its own Secrets (made before the CRD refused them).
	ReasonReservedIdentity  = "ReservedIdentity"
	ReasonApplied           = "Applied"
	userResync              = 10 * time.Minute
	tokenSecretKey          = "token"
	storeUserFieldOwnerBase = "cellstore-operator/storeuser-"
)

// StoreUserReconciler makes a StoreUser's credential, grants its ACLs and sets its quotas through
// the master, and takes them back when it is deleted (docs/operator.md, "StoreUser").
type StoreUserReconciler struct {
	Client    client.Client
	APIReader client.Reader
	Recorder  record.EventRecorder
	Options   Options
}

// SetupWithManager registers the controller.
func (r *StoreUserReconciler) SetupWithManager(mgr ctrl.Manager) error {
	r.Options = r.Options.withDefaults()
	return ctrl.NewControllerManagedBy(mgr).
		Named("storeuser").
		WithOptions(controllerOptions(r.Options, 1)).
		For(&v1alpha1.StoreUser{}).
		Complete(r)
}

// Reconcile applies one StoreUser.
func (r *StoreUserReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	u := &v1alpha1.StoreUser{}
	if err := r.Client.Get(ctx, req.NamespacedName, u); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	cluster := &v1alpha1.StoreCluster{}
	cerr := r.APIReader.Get(ctx, client.ObjectKey{Namespace: u.Namespace, Name: u.Spec.Cluster}, cluster)
	if cerr != nil && !apierrors.IsNotFound(cerr) {
		return ctrl.Result{}, cerr
	}
	clusterFound := cerr == nil && cluster.DeletionTimestamp.IsZero()

	if !u.DeletionTimestamp.IsZero() {
		if !controllerutil.ContainsFinalizer(u, StoreUserFinalizer) {
			return ctrl.Result{}, nil
		}
		// Whatever the cluster's security now: a user deleted while it is off keeps no token and
		// no grant for when it is on again.
		if clusterFound {
			if err := r.takeBack(ctx, u, cluster); err != nil {
				r.Recorder.Eventf(u, corev1.EventTypeWarning, "RevokeFailed", "cannot take back the user's grants and quotas yet: %v", err)
				return ctrl.Result{RequeueAfter: r.Options.PollInterval}, nil
			}
		}
		controllerutil.RemoveFinalizer(u, StoreUserFinalizer)
		return ctrl.Result{}, r.Client.Update(ctx, u)
	}
	if !controllerutil.ContainsFinalizer(u, StoreUserFinalizer) {
		controllerutil.AddFinalizer(u, StoreUserFinalizer)
		if err := r.Client.Update(ctx, u); err != nil {
			return ctrl.Result{}, err
		}
	}

	ready := func(status metav1.ConditionStatus, reason, format string, args ...any) (ctrl.Result, error) {
		msg := fmt.Sprintf(format, args...)
		u.Status.ObservedGeneration = u.Generation
		meta.SetStatusCondition(&u.Status.Conditions, metav1.Condition{Type: ConditionReady, Status: status, Reason: reason, Message: msg,
			ObservedGeneration: u.Generation})
		if err := r.Client.Status().Update(ctx, u); err != nil {
			return ctrl.Result{}, client.IgnoreNotFound(err)
		}
		if status == metav1.ConditionTrue {
			return ctrl.Result{RequeueAfter: userResync}, nil
		}
		return ctrl.Result{RequeueAfter: r.Options.PollInterval}, nil
	}
	switch {
	case !clusterFound:
		return ready(metav1.ConditionFalse, ReasonClusterNotFound, "StoreCluster %s/%s does not exist", u.Namespace, u.Spec.Cluster)
	case !cluster.Spec.TLSEnabled():
		return ready(metav1.ConditionFalse, ReasonSecurityDisabled, "StoreCluster %s runs with security.tls Disabled: it has no users (every caller may do anything)", cluster.Name)
	case cluster.Spec.TLSProvided() && u.Spec.Authentication.Type != "token":
		return ready(metav1.ConditionFalse, ReasonCannotIssueCertificate,
			"StoreCluster %s runs with security.tls Provided: the operator holds no CA key and cannot issue a client certificate; "+
				"set authentication.type token, or issue the user a certificate with CN %s from your own CA (e.g. a cert-manager Certificate): "+
				"grants are by user name, so those of a token StoreUser named %s apply to it too", cluster.Name, u.Name, u.Name)
	}
	if msg := reservedIdentity(u, cluster); msg != "" {
		if res := r.withdrawCredential(ctx, u, cluster); res != "" {
			return ready(metav1.ConditionFalse, ReasonReservedIdentity, "%s; withdrawing its credential: %s", msg, res)
		}
		return ready(metav1.ConditionFalse, ReasonReservedIdentity, "%s", msg)
	}
	perms, err := master.PermissionsFromSpec(u.Name, u.Spec.ACLs)
	if err != nil {
		return ready(metav1.ConditionFalse, ReasonInvalidACL, "%v", err)
	}
	if res := r.credential(ctx, u, cluster); res != "" {
		return ready(metav1.ConditionFalse, ReasonCANotReady, "%s", res)
	}
	u.Status.Username, u.Status.Secret = u.Name, u.Name
	if err := r.apply(ctx, u, cluster, perms); err != nil {
		return ready(metav1.ConditionFalse, ReasonMasterUnreachable, "%v", err)
	}
	return ready(metav1.ConditionTrue, ReasonApplied, "credential in Secret %s; %d ACLs granted, %d quotas set", u.Name, len(u.Spec.ACLs), len(u.Spec.Quotas))
}

// reservedIdentity says why the user may not have a credential, if it may not: it is in one of
// the cluster's own groups (whose members are superusers), or its name is one of the cluster's
// own Secrets' (its Secret would be taken for that one: a user named CLUSTER-tokens made every
// server read its certificate as the token file, and fail to start). The CRD refuses both; this
// catches StoreUsers made before it did.
func reservedIdentity(u *v1alpha1.StoreUser, cluster *v1alpha1.StoreCluster) string {
	for _, g := range u.Spec.Groups {
		if strings.HasPrefix(g, resources.ReservedGroupPrefix) {
			return fmt.Sprintf("group %s is the cluster's own (groups beginning %q are its servers' and administrators', superusers): "+
				"remove it from spec.groups and grant the user what it needs in spec.acls", g, resources.ReservedGroupPrefix)
		}
	}
	if slices.Contains(resources.OperatorSecretNames(cluster), u.Name) {
		return fmt.Sprintf("Secret %s is the cluster's own, and a StoreUser's Secret takes the StoreUser's name: make the user under another name", u.Name)
	}
	return ""
}

// withdrawCredential drops the user's token line and the user's own Secret, if it has them; a
// certificate already handed out stays valid until it expires (renew the cluster's CA to end it
// sooner). A non-empty answer says what failed.
func (r *StoreUserReconciler) withdrawCredential(ctx context.Context, u *v1alpha1.StoreUser, cluster *v1alpha1.StoreCluster) string {
	if res := r.tokenLine(ctx, u, cluster, ""); res != "" {
		return res
	}
	existing := &corev1.Secret{}
	err := r.APIReader.Get(ctx, client.ObjectKey{Namespace: u.Namespace, Name: u.Name}, existing)
	if err != nil {
		if apierrors.IsNotFound(err) {
			return ""
		}
		return err.Error()
	}
	if !metav1.IsControlledBy(existing, u) {
		return "" // the cluster's own (or another's): not the user's to remove
	}
	if err := r.Client.Delete(ctx, existing); err != nil && !apierrors.IsNotFound(err) {
		return err.Error()
	}
	r.Recorder.Eventf(u, corev1.EventTypeWarning, "CredentialWithdrawn", "Secret %s removed: %s", u.Name, reservedIdentity(u, cluster))
	return ""
}

// credential makes or renews the user's Secret; a non-empty answer says what it waits for.
func (r *StoreUserReconciler) credential(ctx context.Context, u *v1alpha1.StoreUser, cluster *v1alpha1.StoreCluster) string {
	ca, caPEM, msg := r.clusterCA(ctx, cluster)
	if msg != "" {
		return msg
	}
	existing := &corev1.Secret{}
	err := r.APIReader.Get(ctx, client.ObjectKey{Namespace: u.Namespace, Name: u.Name}, existing)
	if err != nil && !apierrors.IsNotFound(err) {
		return err.Error()
	}
	found := err == nil
	if found && !metav1.IsControlledBy(existing, u) {
		return fmt.Sprintf("Secret %s exists and is not this StoreUser's: rename or remove it", u.Name)
	}
	owner := *metav1.NewControllerRef(u, v1alpha1.GroupVersion.WithKind("StoreUser"))
	sec := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: u.Name, Namespace: u.Namespace, OwnerReferences: []metav1.OwnerReference{owner},
		Labels: map[string]string{resources.LabelManagedBy: resources.ManagedBy, resources.LabelInstance: cluster.Name}}}
	sec.APIVersion, sec.Kind = "v1", "Secret"
	if u.Spec.Authentication.Type == "token" {
		tok := string(existing.Data[tokenSecretKey])
		if tok == "" {
			if tok, _, err = security.NewToken(u.Name, u.Spec.Groups); err != nil {
				return err.Error()
			}
		}
		sec.Type = corev1.SecretTypeOpaque
		sec.Data = map[string][]byte{tokenSecretKey: []byte(tok), resources.KeyCACert: caPEM}
		if found && existing.Type != corev1.SecretTypeOpaque {
			// A user that switched from tls: a Secret's type cannot change, replace it.
			if err := r.Client.Delete(ctx, existing); err != nil && !apierrors.IsNotFound(err) {
				return err.Error()
			}
		}
		if err := r.putSecret(ctx, sec); err != nil {
			return err.Error()
		}
		return r.tokenLine(ctx, u, cluster, security.TokenLine(tok, u.Name, u.Spec.Groups))
	}
	if ca == nil {
		return "the operator holds no CA key for this cluster: it cannot issue a client certificate"
	}
	req := security.Request{CommonName: u.Name, Organizations: u.Spec.Groups, Client: true, Validity: resources.CertValidity}
	if !found || existing.Type != corev1.SecretTypeTLS || certStale(existing, ca, caPEM, req, r.Options.Now()) != "" {
		is, err := ca.Issue(req)
		if err != nil {
			return err.Error()
		}
		sec.Type = corev1.SecretTypeTLS
		sec.Data = map[string][]byte{corev1.TLSCertKey: is.CertPEM, corev1.TLSPrivateKeyKey: is.KeyPEM, resources.KeyCACert: caPEM}
		if found && existing.Type != corev1.SecretTypeTLS {
			// A Secret's type cannot change: replace it.
			if err := r.Client.Delete(ctx, existing); err != nil && !apierrors.IsNotFound(err) {
				return err.Error()
			}
		}
		if err := r.putSecret(ctx, sec); err != nil {
			return err.Error()
		}
		r.Recorder.Eventf(u, corev1.EventTypeNormal, "CredentialIssued", "client certificate for %s written to Secret %s (valid until %s)", u.Name, u.Name, is.Cert.NotAfter.Format(time.RFC3339))
	}
	return r.tokenLine(ctx, u, cluster, "") // a user that switched from token to tls loses its token
}

// clusterCA is the cluster's CA certificate (the ca.crt handed to users) and, with tls Generated,
// the CA that issues users' certificates (nil with tls Provided: the CA certificate is the server
// Secret's ca.crt, and its key is not the operator's); a non-empty message says what is missing.
func (r *StoreUserReconciler) clusterCA(ctx context.Context, cluster *v1alpha1.StoreCluster) (*security.CA, []byte, string) {
	if cluster.Spec.TLSProvided() {
		name := ""
		if p := cluster.Spec.Security.Certificates; p != nil {
			name = p.ServerSecretName
		}
		sec := &corev1.Secret{}
		if err := r.APIReader.Get(ctx, client.ObjectKey{Namespace: cluster.Namespace, Name: name}, sec); err != nil {
			return nil, nil, fmt.Sprintf("the cluster's CA certificate (key %s of %s) is not there yet: %v",
				resources.KeyCACert, resources.SecretRef(name, resources.ServerSecretField), err)
		}
		if len(sec.Data[resources.KeyCACert]) == 0 {
			return nil, nil, fmt.Sprintf("the cluster's CA certificate is not there yet: %s has no key %s", resources.SecretRef(name, resources.ServerSecretField), resources.KeyCACert)
		}
		return nil, sec.Data[resources.KeyCACert], ""
	}
	caSec := &corev1.Secret{}
	if err := r.APIReader.Get(ctx, client.ObjectKey{Namespace: cluster.Namespace, Name: resources.CASecretName(cluster)}, caSec); err != nil {
		return nil, nil, fmt.Sprintf("the cluster's CA (Secret %s) is not there yet: %v", resources.CASecretName(cluster), err)
	}
	ca, err := security.ParseCA(caSec.Data[resources.KeyCACert], caSec.Data[resources.KeyCAKey])
	if err != nil {
		return nil, nil, fmt.Sprintf("the cluster's CA (Secret %s) is not usable: %v", caSec.Name, err)
	}
	// The CAs the servers' certificates are checked against (during a renewal, two).
	return ca, resources.TrustBundle(caSec.Data, r.Options.Now()), ""
}

func (r *StoreUserReconciler) putSecret(ctx context.Context, sec *corev1.Secret) error {
	_, err := applyObject(ctx, r.Client, sec, "")
	return err
}

// tokenLine puts the user's line into the cluster's tokens Secret (CLUSTER-tokens, one key per
// user, mounted by the servers as their --token-file directory), or removes it when line is "".
// Each StoreUser owns its own key (server-side apply field manager per user).
func (r *StoreUserReconciler) tokenLine(ctx context.Context, u *v1alpha1.StoreUser, cluster *v1alpha1.StoreCluster, line string) string {
	name := resources.TokensSecretName(cluster)
	if line == "" {
		cur := &corev1.Secret{}
		if err := r.APIReader.Get(ctx, client.ObjectKey{Namespace: u.Namespace, Name: name}, cur); err != nil {
			return "" // no tokens Secret: nothing to remove
		}
		if _, ok := cur.Data[u.Name]; !ok {
			return ""
		}
	}
	sec := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: u.Namespace,
		OwnerReferences: []metav1.OwnerReference{resources.OwnerReference(cluster)}}, Type: corev1.SecretTypeOpaque}
	sec.APIVersion, sec.Kind = "v1", "Secret"
	if line != "" {
		sec.Data = map[string][]byte{u.Name: []byte(line + "\n")}
	}
	obj, err := toApplyObject(sec)
	if err != nil {
		return err.Error()
	}
	if err := r.Client.Apply(ctx, client.ApplyConfigurationFromUnstructured(obj), client.FieldOwner(storeUserFieldOwnerBase+u.Name), client.ForceOwnership); err != nil {
		return fmt.Sprintf("tokens Secret %s: %v", name, err)
	}
	return ""
}

// apply grants the ACLs and sets the quotas. What was applied is recorded in the status before it
// is applied (the union with what was applied before), so an interrupted reconcile never leaves a
// grant it would not take back.
func (r *StoreUserReconciler) apply(ctx context.Context, u *v1alpha1.StoreUser, cluster *v1alpha1.StoreCluster, perms []master.Permission) error {
	mc, err := r.Options.Masters(cluster)
	if err != nil {
		return err
	}
	defer func() { _ = mc.Close() }()
	call := func() (context.Context, context.CancelFunc) { return context.WithTimeout(ctx, r.Options.MasterTimeout) }

	want := map[string]bool{}
	scopes := map[string]bool{}
	union := slices.Clone(u.Status.AppliedACLs)
	for _, p := range perms {
		want[p.String()], scopes[p.Scope()] = true, true
		if !slices.Contains(union, p.String()) {
			union = append(union, p.String())
		}
	}
	quotas, err := master.QuotasFromSpec(userQuotaSpecs(u))
	if err != nil {
		return err
	}
	qunion := slices.Clone(u.Status.AppliedQuotas)
	for _, q := range quotas {
		if !slices.Contains(qunion, string(q.Type)) {
			qunion = append(qunion, string(q.Type))
		}
	}
	if !slices.Equal(union, u.Status.AppliedACLs) || !slices.Equal(qunion, u.Status.AppliedQuotas) {
		u.Status.AppliedACLs, u.Status.AppliedQuotas = union, qunion
		if err := r.Client.Status().Update(ctx, u); err != nil {
			return err
		}
	}
	for _, p := range perms {
		cctx, cancel := call()
		err := mc.Grant(cctx, p)
		cancel()
		if err != nil {
			return fmt.Errorf("grant %s: %w", p, err)
		}
	}
	var kept []string
	for _, s := range union {
		if want[s] {
			kept = append(kept, s)
			continue
		}
		p, err := master.ParsePermission(u.Name, s)
		if err != nil || scopes[p.Scope()] {
			continue // the same scope is granted with other actions: the grant replaced it
		}
		if err := r.revoke(ctx, mc, p); err != nil {
			return err
		}
		r.Recorder.Eventf(u, corev1.EventTypeNormal, "Revoked", "revoked %s from %s (no longer in spec.acls)", p, u.Name)
	}
	var keptQ []string
	for _, t := range qunion {
		if slices.ContainsFunc(quotas, func(q master.Quota) bool { return string(q.Type) == t }) {
			keptQ = append(keptQ, t)
			continue
		}
		if err := r.removeQuota(ctx, mc, u.Name, t); err != nil {
			return err
		}
	}
	for _, q := range quotas {
		cctx, cancel := call()
		err := mc.SetQuota(cctx, q)
		cancel()
		if err != nil {
			return fmt.Errorf("set quota %s: %w", q.Key(), err)
		}
	}
	u.Status.AppliedACLs, u.Status.AppliedQuotas = kept, keptQ
	return nil
}

func userQuotaSpecs(u *v1alpha1.StoreUser) []v1alpha1.QuotaSpec {
	out := make([]v1alpha1.QuotaSpec, 0, len(u.Spec.Quotas))
	for _, q := range u.Spec.Quotas {
		out = append(out, v1alpha1.QuotaSpec{User: u.Name, ThrottleType: q.ThrottleType, Limit: q.Limit})
	}
	return out
}

// takeBack revokes what the StoreUser was granted, removes its quotas and its token.
func (r *StoreUserReconciler) takeBack(ctx context.Context, u *v1alpha1.StoreUser, cluster *v1alpha1.StoreCluster) error {
	if msg := r.tokenLine(ctx, u, cluster, ""); msg != "" {
		return fmt.Errorf("%s", msg)
	}
	if len(u.Status.AppliedACLs) == 0 && len(u.Status.AppliedQuotas) == 0 {
		return nil
	}
	mc, err := r.Options.Masters(cluster)
	if err != nil {
		return err
	}
	defer func() { _ = mc.Close() }()
	for _, s := range u.Status.AppliedACLs {
		p, err := master.ParsePermission(u.Name, s)
		if err != nil {
			continue
		}
		if err := r.revoke(ctx, mc, p); err != nil {
			return err
		}
	}
	for _, t := range u.Status.AppliedQuotas {
		if err := r.removeQuota(ctx, mc, u.Name, t); err != nil {
			return err
		}
	}
	r.Recorder.Eventf(u, corev1.EventTypeNormal, "TakenBack", "revoked %d grants and removed %d quotas of %s", len(u.Status.AppliedACLs), len(u.Status.AppliedQuotas), u.Name)
	return nil
}

// revoke takes p back through the master, within the master timeout.
func (r *StoreUserReconciler) revoke(ctx context.Context, mc master.Client, p master.Permission) error {
	cctx, cancel := context.WithTimeout(ctx, r.Options.MasterTimeout)
	defer cancel()
	if err := mc.Revoke(cctx, p); err != nil {
		return fmt.Errorf("revoke %s: %w", p, err)
	}
	return nil
}

// removeQuota removes user's throttle of type t through the master, within the master timeout.
func (r *StoreUserReconciler) removeQuota(ctx context.Context, mc master.Client, user, t string) error {
	cctx, cancel := context.WithTimeout(ctx, r.Options.MasterTimeout)
	defer cancel()
	if err := mc.RemoveQuota(cctx, master.QuotaKey{Subject: master.Subject{User: user}, Type: master.ThrottleType(t)}); err != nil {
		return fmt.Errorf("remove quota %s of %s: %w", t, user, err)
	}
	return nil
}
