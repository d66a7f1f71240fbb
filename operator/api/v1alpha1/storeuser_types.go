package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// StoreUser is a user of a StoreCluster, as Strimzi's KafkaUser is of a Kafka cluster: the
// operator makes the user's credential in a Secret of the same name (a client certificate signed
// by the cluster's CA, or a bearer token), grants its ACLs and sets its quotas through the master,
// and takes them all back when the StoreUser is deleted. The user's name in the store is the
// StoreUser's name.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=cuser,categories=cellstore
// +kubebuilder:printcolumn:name="Cluster",type=string,JSONPath=`.spec.cluster`
// +kubebuilder:printcolumn:name="Authentication",type=string,JSONPath=`.spec.authentication.type`
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Reason",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].reason`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
// +kubebuilder:validation:XValidation:rule="self.metadata.name.size() <= 63 && self.metadata.name.matches('^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$')",message="a StoreUser's name is the user's name in the store and its Secret's: lowercase letters, digits, '-' and '.'"
// +kubebuilder:validation:XValidation:rule="oldSelf.hasValue() || !has(self.spec) || !(self.metadata.name in [self.spec.cluster + '-ca', self.spec.cluster + '-server-tls', self.spec.cluster + '-admin-tls', self.spec.cluster + '-tokens'])",message="a StoreUser's Secret takes its name, and CLUSTER-ca, CLUSTER-server-tls, CLUSTER-admin-tls and CLUSTER-tokens are the cluster's own Secrets: choose another name",optionalOldSelf=true
type StoreUser struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   StoreUserSpec   `json:"spec,omitempty"`
	Status StoreUserStatus `json:"status,omitempty"`
}

// StoreUserList is a list of StoreUsers.
//
// +kubebuilder:object:root=true
type StoreUserList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []StoreUser `json:"items"`
}

func init() {
	SchemeBuilder.Register(&StoreUser{}, &StoreUserList{})
}

// StoreUserSpec is the user's cluster, credential, groups, permissions and quotas.
type StoreUserSpec struct {
	// Cluster is the StoreCluster (in the StoreUser's namespace) the user belongs to; it must
	// run with security (spec.security.tls Generated).
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="cluster cannot change: delete the StoreUser and make one for the other cluster"
	Cluster string `json:"cluster"`

	// Authentication is how the user proves who it is.
	// +kubebuilder:default={type: tls}
	// +optional
	Authentication UserAuthentication `json:"authentication,omitempty"`

	// Groups the user is in ("@group" grants apply to it).
	// +kubebuilder:validation:MaxItems=16
	// +kubebuilder:validation:items:MinLength=1
	// +kubebuilder:validation:items:MaxLength=128
	// +kubebuilder:validation:items:Pattern=`^[^\s,#@]+$`
	// +kubebuilder:validation:XValidation:rule="self.all(g, !g.startsWith('cellstore:'))",message="groups beginning 'cellstore:' are the cluster's own (its servers', its administrators'), whose members are superusers: grant the user what it needs in acls, or name it in the StoreCluster's spec.security.superusers"
	// +optional
	Groups []string `json:"groups,omitempty"`

	// ACLs are the user's permissions (HBase's grant); the operator grants them and revokes
	// those removed from the list.
	// +kubebuilder:validation:MaxItems=64
	// +optional
	ACLs []UserACL `json:"acls,omitempty"`

	// Quotas throttle the user (HBase's set_quota USER => name).
	// +kubebuilder:validation:MaxItems=3
	// +optional
	Quotas []UserQuota `json:"quotas,omitempty"`
}

// UserAuthentication is a user's credential type.
type UserAuthentication struct {
	// Type is tls (a client certificate: Secret keys tls.crt, tls.key, ca.crt; renewed when a
	// third of its life is left) or token (a bearer token: keys token and ca.crt; the servers
	// keep only its hash).
	// +kubebuilder:default=tls
	// +kubebuilder:validation:Enum=tls;token
	// +optional
	Type string `json:"type,omitempty"`
}

// UserACL grants actions at a scope: the whole store (no namespace, no table), a namespace, a
// table, a family of it, or one qualifier.
//
// +kubebuilder:validation:XValidation:rule="!(has(self.__namespace__) && has(self.table))",message="give a namespace or a table ('namespace:table'), not both"
// +kubebuilder:validation:XValidation:rule="!has(self.family) || has(self.table)",message="a family needs its table"
// +kubebuilder:validation:XValidation:rule="!has(self.qualifier) || has(self.family)",message="a qualifier needs its family"
type UserACL struct {
	// Namespace (the store's) the grant covers.
	// +kubebuilder:validation:MaxLength=128
	// +kubebuilder:validation:Pattern=`^[a-zA-Z0-9_][a-zA-Z0-9_.-]*$`
	// +optional
	Namespace string `json:"namespace,omitempty"`
	// Table, "namespace:table" or "table" (namespace default).
	// +kubebuilder:validation:MaxLength=256
	// +kubebuilder:validation:Pattern=`^([a-zA-Z0-9_][a-zA-Z0-9_.-]*:)?[a-zA-Z0-9_][a-zA-Z0-9_.-]*$`
	// +optional
	Table string `json:"table,omitempty"`
	// Family of the table.
	// +kubebuilder:validation:MaxLength=256
	// +optional
	Family string `json:"family,omitempty"`
	// Qualifier of the family.
	// +kubebuilder:validation:MaxLength=1024
	// +optional
	Qualifier string `json:"qualifier,omitempty"`
	// Actions in HBase's letters: R (read), W (write), X (exec), C (create), A (admin).
	// +kubebuilder:validation:Pattern=`^[RWXCA]{1,5}$`
	Actions string `json:"actions"`
}

// UserQuota throttles the user.
type UserQuota struct {
	// ThrottleType is REQUEST (all requests), READ or WRITE.
	// +kubebuilder:default=REQUEST
	// +kubebuilder:validation:Enum=REQUEST;READ;WRITE
	// +optional
	ThrottleType ThrottleKind `json:"throttleType,omitempty"`
	// Limit in HBase syntax, e.g. 100req/sec, 10M/sec.
	// +kubebuilder:validation:MaxLength=32
	Limit string `json:"limit"`
}

// StoreUserStatus is what the operator applied.
type StoreUserStatus struct {
	// ObservedGeneration is the generation the status describes.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// Username is the user's name in the store.
	// +optional
	Username string `json:"username,omitempty"`
	// Secret holds the credential (the StoreUser's name).
	// +optional
	Secret string `json:"secret,omitempty"`
	// AppliedACLs are the grants the operator made for this StoreUser ("scope: actions"), so
	// that it revokes exactly those it made.
	// +optional
	AppliedACLs []string `json:"appliedACLs,omitempty"`
	// AppliedQuotas are the throttle types the operator set for the user.
	// +optional
	AppliedQuotas []string `json:"appliedQuotas,omitempty"`
	// Conditions: Ready says whether the credential exists and every ACL and quota is applied.
	// +listType=map
	// +listMapKey=type
	// +optional
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}
