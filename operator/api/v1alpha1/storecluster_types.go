package v1alpha1

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// StoreCluster is one Cellstore store: masters, region servers and the shared storage that holds the
// data. The operator makes and keeps the Kubernetes objects that run it, restarts its pods one at a
// time after draining them through the master, and reports what it observes in the status.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:subresource:scale:specpath=.spec.regionServers.replicas,statuspath=.status.regionServers.replicas,selectorpath=.status.regionServers.selector
// +kubebuilder:resource:shortName=cstore,categories=cellstore
// +kubebuilder:printcolumn:name="Phase",type=string,JSONPath=`.status.phase`,description="Provisioning, Running, Updating, Degraded or Hibernated"
// +kubebuilder:printcolumn:name="Degraded",type=string,JSONPath=`.status.conditions[?(@.type=="Degraded")].reason`,description="why a person is needed (AsExpected: nothing)"
// +kubebuilder:printcolumn:name="Masters",type=integer,JSONPath=`.status.masters.ready`,description="master pods Ready"
// +kubebuilder:printcolumn:name="RegionServers",type=integer,JSONPath=`.status.regionServers.ready`,description="region server pods Ready"
// +kubebuilder:printcolumn:name="Regions",type=integer,JSONPath=`.status.regions.total`,description="regions in the catalog"
// +kubebuilder:printcolumn:name="Version",type=string,JSONPath=`.status.version`,priority=1,description="the engine version(s) the processes report"
// +kubebuilder:printcolumn:name="Active",type=string,JSONPath=`.status.masters.active`,priority=1,description="the active master's pod"
// +kubebuilder:printcolumn:name="InTransition",type=integer,JSONPath=`.status.regions.inTransition`,priority=1,description="regions in transition"
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
// +kubebuilder:validation:XValidation:rule="size(self.metadata.name) <= 40",message="metadata.name must be at most 40 characters: pod names such as NAME-regionserver-123 must fit the 63-character limit of labels and DNS names"
// +kubebuilder:validation:XValidation:rule="!self.metadata.name.contains('.') && !(self.metadata.name.substring(0, 1) in ['0', '1', '2', '3', '4', '5', '6', '7', '8', '9'])",message="metadata.name must start with a letter and must not contain '.': it names Services (DNS labels)"
type StoreCluster struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   StoreClusterSpec   `json:"spec"`
	Status StoreClusterStatus `json:"status,omitempty"`
}

// StoreClusterList is a list of StoreClusters.
//
// +kubebuilder:object:root=true
type StoreClusterList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []StoreCluster `json:"items"`
}

func init() {
	SchemeBuilder.Register(&StoreCluster{}, &StoreClusterList{})
}

// StoreClusterSpec is the desired store.
//
// +kubebuilder:validation:XValidation:rule="!has(self.defaultRegionReplication) || !has(self.regionServers.replicas) || self.defaultRegionReplication <= self.regionServers.replicas",messageExpression="'defaultRegionReplication (%d) needs at least as many region servers, but regionServers.replicas is %d: replicas of a region never share a server'.format([self.defaultRegionReplication, self.regionServers.replicas])"
// +kubebuilder:validation:XValidation:rule="!has(self.version) || self.image.contains('@') || !self.image.matches(':[^/]+$') || self.image.endsWith(':' + self.version)",messageExpression="'spec.image has the tag of another version than spec.version (' + self.version + '): give the image without a tag (spec.version becomes its tag), or the same version in both'"
// +kubebuilder:validation:XValidation:rule="has(self.bootstrap) == has(oldSelf.bootstrap) && (!has(self.bootstrap) || self.bootstrap == oldSelf.bootstrap)",message="bootstrap cannot be set, changed or removed: it applies only when the cluster is made"
type StoreClusterSpec struct {
	// Image is the engine image (it holds the `cellstore` binary), e.g.
	// docker.io/cellstore/engine:v0.1.0, or a repository without a tag
	// (docker.io/cellstore/engine) with spec.version as its tag. Changing it restarts every pod, one
	// at a time.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=512
	Image string `json:"image"`

	// Version is the engine's release version, vMAJOR.MINOR.PATCH with an optional -suffix (e.g.
	// v1.4.0, v1.5.0-rc.1; no +build part: an image tag cannot hold a '+'). With an image
	// that has no tag it is the tag; with a digest (repository@sha256:...) it says which version
	// the digest is. Upgrades are checked against it (the same major version, the same or the next
	// minor). Without it the image's tag is the version, checked when it is one.
	// +kubebuilder:validation:MaxLength=64
	// +kubebuilder:validation:Pattern=`^v?(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)(-[0-9A-Za-z.-]+)?$`
	// +optional
	Version string `json:"version,omitempty"`

	// ImagePullPolicy of the engine image.
	// +kubebuilder:default=IfNotPresent
	// +kubebuilder:validation:Enum=Always;IfNotPresent;Never
	// +optional
	ImagePullPolicy corev1.PullPolicy `json:"imagePullPolicy,omitempty"`

	// ImagePullSecrets for the engine image.
	// +kubebuilder:validation:MaxItems=16
	// +optional
	ImagePullSecrets []corev1.LocalObjectReference `json:"imagePullSecrets,omitempty"`

	// Storage is where the data lives: a shared ReadWriteMany volume that every pod mounts, or
	// (later) an S3 bucket. Exactly one kind.
	Storage StorageSpec `json:"storage"`

	// Master is the group of master pods (one active, the others standby).
	// +kubebuilder:default={}
	// +optional
	Master MasterSpec `json:"master,omitempty"`

	// RegionServers is the group of region server pods that serve the regions.
	// +kubebuilder:default={resources: {requests: {cpu: "1"}}, memory: {limit: "2Gi"}}
	// +optional
	RegionServers RegionServersSpec `json:"regionServers,omitempty"`

	// DefaultRegionReplication is the REGION_REPLICATION of tables that do not set one: 1 primary
	// plus N-1 read-only timeline-consistent replicas on other servers. Applied through the master,
	// without a restart.
	// +kubebuilder:default=1
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=10
	// +optional
	DefaultRegionReplication int32 `json:"defaultRegionReplication,omitempty"`

	// HedgeDelay is how long a TIMELINE read waits for the primary before it also asks the
	// secondary replicas (the master hands it to clients).
	// +kubebuilder:default="10ms"
	// +kubebuilder:validation:XValidation:rule="duration(self) >= duration('0s') && duration(self) <= duration('10s')",message="hedgeDelay must be between 0s and 10s, e.g. 10ms"
	// +optional
	HedgeDelay *metav1.Duration `json:"hedgeDelay,omitempty"`

	// Quotas are request throttles, as HBase's set_quota TYPE => THROTTLE. The operator applies
	// them through the master (no restart) and removes the ones it applied that are no longer
	// listed; quotas set by other means are left alone.
	// +kubebuilder:validation:MaxItems=100
	// +optional
	Quotas []QuotaSpec `json:"quotas,omitempty"`

	// Rollout says how pods are restarted.
	// +kubebuilder:default={}
	// +optional
	Rollout RolloutSpec `json:"rollout,omitempty"`

	// Security: TLS on every port, users proven by certificate or token, HBase's access control
	// (docs/security.md). On unless tls is Disabled.
	// +kubebuilder:default={}
	// +optional
	Security SecuritySpec `json:"security,omitempty"`

	// Monitoring asks for a ServiceMonitor and a PrometheusRule; they are made only when
	// prometheus-operator's CRDs are installed in the cluster.
	// +kubebuilder:default={}
	// +optional
	Monitoring MonitoringSpec `json:"monitoring,omitempty"`

	// Config sets engine flags of both masters and region servers (flag name without the
	// leading "--" to value); a flag only one of them knows goes in master.config or
	// regionServers.config instead (the engine refuses settings it does not know). They go into
	// the engine's configuration files; the flags the operator manages itself (addresses,
	// storage, memory budgets, election) cannot be set here. A change restarts the pods, each with
	// the changed flags as the recorded reason.
	// +optional
	Config EngineConfig `json:"config,omitempty"`

	// Backup is where StoreBackups put the cluster's snapshots (HBase's ExportSnapshot target):
	// a bucket or prefix of an S3-compatible store, with its own credentials. The masters copy
	// the files there. Changing it restarts the masters only.
	// +optional
	Backup *BackupSpec `json:"backup,omitempty"`

	// Bootstrap makes a new cluster from a backup instead of empty (as CloudNativePG's
	// bootstrap.recovery). It is read once, when the cluster is first made.
	// +optional
	Bootstrap *BootstrapSpec `json:"bootstrap,omitempty"`

	// PodTemplate adds labels and annotations to every pod and sets scheduling for both groups
	// (a group's own scheduling field, when set, replaces the one here).
	// +optional
	PodTemplate *PodTemplateOverrides `json:"podTemplate,omitempty"`

	// ExternalAccess exposes every master and region server to clients outside the Kubernetes
	// cluster (a laptop, another cluster): a Service per pod, whose address the masters publish
	// so that a client started with any master's external address (`cellstore shell --external`)
	// reaches each server there. Absent: reachable inside the cluster only.
	// +optional
	ExternalAccess *ExternalAccessSpec `json:"externalAccess,omitempty"`
}

// TLSMode says where a cluster's certificates come from.
// +kubebuilder:validation:Enum=Generated;Provided;Disabled
type TLSMode string

const (
	// TLSGenerated: the operator keeps a CA (Secret NAME-ca) and issues the servers' certificate
	// (NAME-server-tls) and an administrator's client certificate (NAME-admin-tls), renewing
	// each when a third of its life is left; the servers read renewed files without a restart.
	TLSGenerated TLSMode = "Generated"
	// TLSProvided: you bring the certificates, in the Secrets spec.security.certificates names
	// (e.g. written by cert-manager Certificates); the operator makes no CA and no certificate,
	// checks the Secrets and mounts the servers' one. The servers read renewed files without a
	// restart. StoreUsers can only use tokens: the operator holds no CA key to issue certificates.
	TLSProvided TLSMode = "Provided"
	// TLSDisabled: plaintext and no authentication (anyone who reaches the pods may do
	// anything): for development only.
	TLSDisabled TLSMode = "Disabled"
)

// SecuritySpec is a cluster's transport security, authentication and access control.
//
// +kubebuilder:validation:XValidation:rule="!has(self.tls) || self.tls != 'Provided' || (has(self.certificates) && has(self.certificates.serverSecretName) && has(self.certificates.clientSecretName))",message="security.tls Provided needs security.certificates.serverSecretName (the Secret of the servers' certificate: tls.crt, tls.key, ca.crt) and security.certificates.clientSecretName (the Secret of the operator's client certificate: tls.crt, tls.key)"
// +kubebuilder:validation:XValidation:rule="!has(self.certificates) || (has(self.tls) && self.tls == 'Provided')",message="security.certificates names your own certificate Secrets and is used only with security.tls Provided: set tls: Provided, or remove certificates (Generated makes its own, Disabled uses none)"
type SecuritySpec struct {
	// TLS is Generated (the default: the operator keeps a CA and the certificates; TLS 1.3
	// everywhere, every caller authenticated, permissions checked), Provided (the same, with the
	// certificates in Secrets you make, named by certificates) or Disabled.
	// +kubebuilder:default=Generated
	// +optional
	TLS TLSMode `json:"tls,omitempty"`

	// Certificates names the Secrets of your own certificates; set with tls Provided only
	// (docs/operator.md, "Provided certificates").
	// +optional
	Certificates *ProvidedCertificates `json:"certificates,omitempty"`

	// Superusers may do anything, whatever is granted: user names (a certificate's CN, a
	// token's user) and "@group"s. The servers (@cellstore:servers) and holders of the admin
	// certificate (@cellstore:admins) always are.
	// +kubebuilder:validation:MaxItems=32
	// +kubebuilder:validation:items:MinLength=1
	// +kubebuilder:validation:items:MaxLength=128
	// +kubebuilder:validation:items:Pattern=`^@?[^\s,#@]+$`
	// +optional
	Superusers []string `json:"superusers,omitempty"`

	// NetworkPolicy: a NetworkPolicy lets only the cluster's own pods reach the region servers'
	// Admin port (clients keep the data port, everyone the HTTP port; the operator talks to the
	// masters only). It takes effect where the network plugin enforces NetworkPolicies. Default
	// true.
	// +kubebuilder:default=true
	// +optional
	NetworkPolicy *bool `json:"networkPolicy,omitempty"`
}

// ExternalAccessSpec says how masters and region servers are reached from outside.
// +kubebuilder:validation:XValidation:rule="!has(self.host) || self.type == 'NodePort'",message="spec.externalAccess.host is for NodePort Services: a LoadBalancer's address is the one its cloud gives it"
type ExternalAccessSpec struct {
	// Type of the per-pod Services: NodePort (each server at a port of every node) or
	// LoadBalancer (each server at its own load balancer address).
	// +kubebuilder:validation:Enum=NodePort;LoadBalancer
	Type corev1.ServiceType `json:"type"`
	// Host is, for NodePort, the host name or address clients reach the nodes at (a node's
	// public address, or a DNS name over them): every server is then published as host:nodePort.
	// Default: the address of the node each pod runs on (its status.hostIP).
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[A-Za-z0-9]([-A-Za-z0-9.:]*[A-Za-z0-9])?$`
	// +optional
	Host string `json:"host,omitempty"`
	// Annotations of the Services (a cloud's load balancer settings: internal or public, ...).
	// +optional
	Annotations map[string]string `json:"annotations,omitempty"`
}

// ProvidedCertificates names Secrets in the StoreCluster's namespace, each with the keys of a
// kubernetes.io/tls Secret (cert-manager's Certificates write them). The operator reads them,
// reports in the StoreCluster's conditions what is missing or wrong, and never writes them.
type ProvidedCertificates struct {
	// ServerSecretName is the Secret of the servers' certificate, mounted by every master and
	// region server: keys tls.crt, tls.key and ca.crt (the CA that signed it, which is also the
	// CA the servers trust for client certificates). The certificate must be usable for server and
	// client authentication (servers call each other), have a subject that is a superuser
	// (organization cellstore:servers), and name the cluster's Services and pods (the names the
	// Generated certificate holds: docs/operator.md lists them).
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$`
	// +optional
	ServerSecretName string `json:"serverSecretName,omitempty"`
	// ClientSecretName is the Secret of the client certificate the operator talks to the master
	// with: keys tls.crt and tls.key, signed by the CA in the server Secret's ca.crt, usable for
	// client authentication, with a subject that is a superuser (e.g. CN cellstore-operator,
	// organization cellstore:admins). Administrators may use it too.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$`
	// +optional
	ClientSecretName string `json:"clientSecretName,omitempty"`
}

// ByteSize is an amount of bytes in Kubernetes quantity syntax: 512Mi, 8Gi, 1G or 1073741824.
// +kubebuilder:validation:MinLength=1
// +kubebuilder:validation:MaxLength=32
// +kubebuilder:validation:XValidation:rule="isQuantity(self) && quantity(self).isInteger() && !quantity(self).isLessThan(quantity('0'))",message="must be an amount of bytes such as 512Mi, 8Gi or 1073741824"
type ByteSize string

// EngineConfig maps engine flag names (without "--") to values.
// +kubebuilder:validation:MaxProperties=64
// +kubebuilder:validation:XValidation:rule="self.all(k, k.matches('^[a-z][a-z0-9-]{0,62}$'))",message="config keys are engine flag names without the leading '--': lowercase letters, digits and '-', e.g. flush-size"
// +kubebuilder:validation:XValidation:rule="self.all(k, !(k in ['storage-dir', 'config', 'http-addr', 'grpc-addr', 'data-addr', 'admin-addr', 'advertise-host', 'masters', 'election', 'lease-name', 'lease-namespace', 'heap-limit', 'memstore-offheap-size', 'blockcache-offheap-size', 'blockcache-onheap-size', 'memory-overhead', 'hugepages', 'hedge-delay', 'default-region-replication', 'file-cache-dir', 'file-cache-size', 'security', 'tls-cert-file', 'tls-key-file', 'tls-ca-file', 'superusers', 'token-file', 'bucket-dir'] || k.startsWith('s3-') || k.startsWith('backup-') || k.startsWith('wal-archive')))",message="config must not set flags the operator manages (storage-dir, bucket-dir, config, http-addr, grpc-addr, data-addr, admin-addr, advertise-host, masters, election, lease-name, lease-namespace, heap-limit, memstore-offheap-size, blockcache-offheap-size, blockcache-onheap-size, memory-overhead, hugepages, hedge-delay, default-region-replication, file-cache-dir, file-cache-size, security, tls-cert-file, tls-key-file, tls-ca-file, superusers, token-file, s3-*, backup-*, wal-archive*): use the matching spec fields instead (storage.s3, backup.s3, backup.walArchive, security)"
type EngineConfig map[string]ConfigValue

// ConfigValue is the value of one engine flag.
// +kubebuilder:validation:MaxLength=1024
// +kubebuilder:validation:XValidation:rule="!self.contains('\\n')",message="config values must be on one line"
type ConfigValue string

// StorageSpec is the shared storage. Exactly one of its fields is set.
//
// +kubebuilder:validation:XValidation:rule="[has(self.existingClaim), has(self.volume), has(self.s3)].filter(x, x).size() == 1",message="storage: set exactly one of existingClaim, volume or s3"
// +kubebuilder:validation:XValidation:rule="has(self.existingClaim) == has(oldSelf.existingClaim) && has(self.volume) == has(oldSelf.volume) && has(self.s3) == has(oldSelf.s3)",message="the kind of storage cannot change: the data lives there; make a new StoreCluster to use other storage"
type StorageSpec struct {
	// ExistingClaim uses a PersistentVolumeClaim you made, with access mode ReadWriteMany.
	// +optional
	ExistingClaim *ExistingClaimStorage `json:"existingClaim,omitempty"`
	// Volume makes a ReadWriteMany PersistentVolumeClaim named NAME-shared.
	// +optional
	Volume *VolumeStorage `json:"volume,omitempty"`
	// S3 keeps all the data — store files, write-ahead logs, the catalog — in an S3-compatible
	// bucket (AWS S3, GCS's S3 interoperability, MinIO, Ceph RGW...) that supports conditional
	// writes; pods need no shared volume.
	// +optional
	S3 *S3Storage `json:"s3,omitempty"`
}

// ExistingClaimStorage names a ReadWriteMany PersistentVolumeClaim in the StoreCluster's namespace.
//
// +kubebuilder:validation:XValidation:rule="self.claimName == oldSelf.claimName",message="storage.existingClaim.claimName cannot change: the data lives there"
type ExistingClaimStorage struct {
	// ClaimName is the PersistentVolumeClaim's name.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	ClaimName string `json:"claimName"`
}

// VolumeStorage is a ReadWriteMany PersistentVolumeClaim the operator makes.
//
// +kubebuilder:validation:XValidation:rule="has(self.storageClassName) == has(oldSelf.storageClassName) && (!has(self.storageClassName) || self.storageClassName == oldSelf.storageClassName)",message="storage.volume.storageClassName cannot change"
// +kubebuilder:validation:XValidation:rule="quantity(self.size).compareTo(quantity(oldSelf.size)) >= 0",message="storage.volume.size can only grow (when the storage class allows volume expansion)"
type VolumeStorage struct {
	// StorageClassName of the claim; the cluster's default class when unset. It must provide
	// ReadWriteMany volumes.
	// +kubebuilder:validation:MaxLength=253
	// +optional
	StorageClassName *string `json:"storageClassName,omitempty"`
	// Size of the claim.
	// +kubebuilder:validation:XValidation:rule="quantity(self).isGreaterThan(quantity('0'))",message="storage.volume.size must be positive, e.g. 100Gi"
	Size ByteSize `json:"size"`
	// ReclaimPolicy says what happens to the claim when the StoreCluster is deleted: Retain keeps
	// it (and the data), Delete deletes it with the StoreCluster.
	// +kubebuilder:default=Retain
	// +kubebuilder:validation:Enum=Retain;Delete
	// +optional
	ReclaimPolicy VolumeReclaimPolicy `json:"reclaimPolicy,omitempty"`
}

// VolumeReclaimPolicy is Retain or Delete.
type VolumeReclaimPolicy string

// Volume reclaim policies.
const (
	VolumeRetain VolumeReclaimPolicy = "Retain"
	VolumeDelete VolumeReclaimPolicy = "Delete"
)

// S3Storage is an S3-compatible bucket.
//
// +kubebuilder:validation:XValidation:rule="self.bucket == oldSelf.bucket",message="storage.s3.bucket cannot change: the data lives there; copy it and make a new StoreCluster to use another bucket"
// +kubebuilder:validation:XValidation:rule="has(self.prefix) == has(oldSelf.prefix) && (!has(self.prefix) || self.prefix == oldSelf.prefix)",message="storage.s3.prefix cannot change: the data lives there; copy it and make a new StoreCluster to use another prefix"
type S3Storage struct {
	S3Location `json:",inline"`
	// FileCacheSize is each region server's local file cache: ranges of store files read from
	// the bucket kept on an emptyDir volume (the node's disk), so that reads that miss the block
	// caches in memory do not each cost a GET. "0" turns it off.
	// +kubebuilder:default="1Gi"
	// +optional
	FileCacheSize ByteSize `json:"fileCacheSize,omitempty"`
}

// S3Location is a bucket (or a prefix of one) of an S3-compatible object store.
type S3Location struct {
	// Endpoint URL, e.g. https://s3.eu-west-1.amazonaws.com or http://minio.minio:9000.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=512
	// +kubebuilder:validation:XValidation:rule="isURL(self) && url(self).getScheme() in ['http', 'https']",message="the S3 endpoint must be an http or https URL"
	Endpoint string `json:"endpoint"`
	// Bucket name.
	// +kubebuilder:validation:MinLength=3
	// +kubebuilder:validation:MaxLength=63
	Bucket string `json:"bucket"`
	// Prefix of every key, e.g. "cellstore/prod".
	// +kubebuilder:validation:MaxLength=512
	// +optional
	Prefix string `json:"prefix,omitempty"`
	// Region of the bucket, when the endpoint needs one.
	// +kubebuilder:validation:MaxLength=64
	// +optional
	Region string `json:"region,omitempty"`
	// PathStyle addresses the bucket in the URL path (MinIO and most self-hosted stores) instead
	// of the host name.
	// +optional
	PathStyle bool `json:"pathStyle,omitempty"`
	// CredentialsSecret is a Secret in the same namespace with keys AWS_ACCESS_KEY_ID and
	// AWS_SECRET_ACCESS_KEY. Without it the pods use the ambient credentials of the AWS SDK's
	// default chain: the node's instance role, or a web identity token the cluster injects (IRSA,
	// EKS Pod Identity) for the pods' ServiceAccounts (NAME-master for masters, the namespace's
	// default for region servers).
	// +optional
	CredentialsSecret *corev1.LocalObjectReference `json:"credentialsSecret,omitempty"`
	// EndpointCA is a Secret key holding PEM certificates to trust for the endpoint besides the
	// system's (a private CA of a self-hosted store). Mounted into the pods read-only.
	// +optional
	EndpointCA *corev1.SecretKeySelector `json:"endpointCA,omitempty"`
}

// BackupSpec is a StoreCluster's backup location.
type BackupSpec struct {
	// S3 is the bucket (and prefix) backups go to. CredentialsSecret holds the keys as for
	// spec.storage.s3 (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY).
	S3 S3Location `json:"s3"`
	// WALArchive keeps the cluster's write-ahead log at the backup location too, so that a
	// cluster recovered from its backups can be taken to any point in time after one
	// (spec.bootstrap.recovery.targetTime). The region servers then also reach the backup
	// location.
	// +optional
	WALArchive *WALArchiveSpec `json:"walArchive,omitempty"`
}

// WALArchiveSpec is WAL archiving for point-in-time recovery.
type WALArchiveSpec struct {
	// Interval is how often each region server archives its WAL: the most a point-in-time
	// recovery can miss of what was written before its target time.
	// +kubebuilder:default="1m"
	// +kubebuilder:validation:XValidation:rule="duration(self) >= duration('1s') && duration(self) <= duration('1h')",message="walArchive.interval must be between 1s and 1h, e.g. 1m"
	// +optional
	Interval *metav1.Duration `json:"interval,omitempty"`
	// Retention: archived WAL older than this is deleted. A point-in-time recovery needs the
	// WAL from its backup on: keep it at least as long as the backups you may recover from.
	// +kubebuilder:default="168h"
	// +kubebuilder:validation:XValidation:rule="duration(self) >= duration('1h')",message="walArchive.retention must be at least 1h, e.g. 168h"
	// +optional
	Retention *metav1.Duration `json:"retention,omitempty"`
}

// BootstrapSpec says how a new cluster starts.
type BootstrapSpec struct {
	// Recovery restores the tables of a completed StoreBackup (of this or another cluster, in
	// this namespace) once the cluster is up. Its snapshots are read from this cluster's
	// spec.backup location, which must be the one the backup was written to.
	Recovery *RecoverySpec `json:"recovery,omitempty"`
}

// RecoverySpec names the backup a new cluster starts from.
type RecoverySpec struct {
	// Backup is a StoreBackup in the cluster's namespace.
	Backup corev1.LocalObjectReference `json:"backup"`
	// TargetTime recovers to this point in time (RFC 3339, e.g. "2026-11-27T01:30:00Z") rather
	// than to the backup: the backup's tables plus the edits of the archived WAL made up to it
	// (point-in-time recovery). It must be after the backup was taken, and the backed-up
	// cluster must have archived its WAL (spec.backup.walArchive) to this cluster's
	// spec.backup location, up to the target.
	// +optional
	TargetTime *metav1.Time `json:"targetTime,omitempty"`
}

// MasterSpec is the master group.
type MasterSpec struct {
	// Replicas of the master: one is active, the others wait as standbys (Kubernetes Lease
	// election). Changing the count changes the region servers' --masters list, which restarts
	// them one at a time.
	// +kubebuilder:default=2
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=5
	// +optional
	Replicas int32 `json:"replicas,omitempty"`
	// Resources of the master container. Default: requests cpu 250m and memory 1Gi, limit
	// memory 1Gi. The Go heap limit (GOMEMLIMIT) is the memory limit minus the overhead.
	// +kubebuilder:default={requests: {cpu: "250m", memory: "1Gi"}, limits: {memory: "1Gi"}}
	// +optional
	Resources corev1.ResourceRequirements `json:"resources,omitempty"`
	// Scheduling of the master pods.
	// +optional
	Scheduling Scheduling `json:"scheduling,omitempty"`
	// Config sets engine flags of the masters only (they win over spec.config).
	// +optional
	Config EngineConfig `json:"config,omitempty"`
}

// RegionServersSpec is the region server group.
type RegionServersSpec struct {
	// Replicas of the region server. Scaling in drains the highest ordinals first. Also set
	// through the scale subresource (kubectl scale storecluster/NAME --replicas=N, or a
	// HorizontalPodAutoscaler), which takes the same path.
	// +kubebuilder:default=3
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=500
	// +optional
	Replicas int32 `json:"replicas,omitempty"`
	// Resources of the region server container other than memory (cpu, ephemeral storage).
	// Memory is set with memory.limit (the container's memory request and limit) and hugepages
	// with memory.hugePages, because the operator derives the budgets from them.
	// Default: requests cpu 1.
	// +kubebuilder:default={requests: {cpu: "1"}}
	// +kubebuilder:validation:XValidation:rule="!has(self.limits) || !('memory' in self.limits) && !('hugepages-2Mi' in self.limits) && !('hugepages-1Gi' in self.limits)",message="set the region servers' memory with regionServers.memory.limit and hugepages with regionServers.memory.hugePages, not in resources.limits: the operator derives the heap and off-heap budgets from them"
	// +kubebuilder:validation:XValidation:rule="!has(self.requests) || !('memory' in self.requests) && !('hugepages-2Mi' in self.requests) && !('hugepages-1Gi' in self.requests)",message="set the region servers' memory with regionServers.memory.limit and hugepages with regionServers.memory.hugePages, not in resources.requests: the operator derives the heap and off-heap budgets from them"
	// +optional
	Resources corev1.ResourceRequirements `json:"resources,omitempty"`
	// Scheduling of the region server pods.
	// +optional
	Scheduling Scheduling `json:"scheduling,omitempty"`
	// Config sets engine flags of the region servers only (they win over spec.config).
	// +optional
	Config EngineConfig `json:"config,omitempty"`
	// Memory of the region server: the container's limit and the process's budgets.
	// +kubebuilder:default={limit: "2Gi"}
	// +optional
	Memory RegionServerMemory `json:"memory,omitempty"`
}

// RegionServerMemory holds a region server's memory: the container limit and the budgets within
// it. The limit must hold the Go heap, the off-heap memstore and block cache (unless they are in
// hugepages) and an overhead of max(256Mi, 10% of the limit); docs/operator.md shows the
// computation. The operator checks the budgets again with the defaults filled in and refuses a spec
// that does not fit (condition Degraded, reason MemoryBudgetExceeded) without changing any object.
//
// +kubebuilder:validation:XValidation:rule="!(has(self.heapLimit) && has(self.heapPercent))",message="set memory.heapLimit or memory.heapPercent, not both"
// +kubebuilder:validation:XValidation:rule="quantity(self.limit).compareTo(quantity('1Gi')) >= 0",message="memory.limit must be at least 1Gi"
// +kubebuilder:validation:XValidation:rule="!(has(self.heapLimit) || has(self.heapPercent)) || (has(self.heapLimit) ? quantity(self.heapLimit).asInteger() : quantity(self.limit).asInteger() * self.heapPercent / 100) + (has(self.hugePages) ? 0 : (has(self.memstoreOffHeapSize) ? quantity(self.memstoreOffHeapSize).asInteger() : 0) + (has(self.blockCacheOffHeapSize) ? quantity(self.blockCacheOffHeapSize).asInteger() : 0)) + (quantity(self.limit).asInteger() / 10 > 268435456 ? quantity(self.limit).asInteger() / 10 : 268435456) <= quantity(self.limit).asInteger()",messageExpression="'region server memory budgets exceed memory.limit (%dMi): heap %dMi + off-heap memstore and block cache outside hugepages %dMi + overhead %dMi (the larger of 256Mi and 10%% of the limit) = %dMi; lower the heap or the off-heap sizes, or raise memory.limit'.format([(quantity(self.limit).asInteger()) / 1048576, ((has(self.heapLimit) ? quantity(self.heapLimit).asInteger() : quantity(self.limit).asInteger() * self.heapPercent / 100)) / 1048576, ((has(self.hugePages) ? 0 : (has(self.memstoreOffHeapSize) ? quantity(self.memstoreOffHeapSize).asInteger() : 0) + (has(self.blockCacheOffHeapSize) ? quantity(self.blockCacheOffHeapSize).asInteger() : 0))) / 1048576, ((quantity(self.limit).asInteger() / 10 > 268435456 ? quantity(self.limit).asInteger() / 10 : 268435456)) / 1048576, ((has(self.heapLimit) ? quantity(self.heapLimit).asInteger() : quantity(self.limit).asInteger() * self.heapPercent / 100) + (has(self.hugePages) ? 0 : (has(self.memstoreOffHeapSize) ? quantity(self.memstoreOffHeapSize).asInteger() : 0) + (has(self.blockCacheOffHeapSize) ? quantity(self.blockCacheOffHeapSize).asInteger() : 0)) + (quantity(self.limit).asInteger() / 10 > 268435456 ? quantity(self.limit).asInteger() / 10 : 268435456)) / 1048576])"
// +kubebuilder:validation:XValidation:rule="(has(self.heapLimit) || has(self.heapPercent)) || (has(self.hugePages) ? 0 : (has(self.memstoreOffHeapSize) ? quantity(self.memstoreOffHeapSize).asInteger() : 0) + (has(self.blockCacheOffHeapSize) ? quantity(self.blockCacheOffHeapSize).asInteger() : 0)) + (has(self.blockCacheOnHeapSize) ? quantity(self.blockCacheOnHeapSize).asInteger() : 0) + 67108864 + (quantity(self.limit).asInteger() / 10 > 268435456 ? quantity(self.limit).asInteger() / 10 : 268435456) <= quantity(self.limit).asInteger()",messageExpression="'region server memory budgets leave no room for the Go heap in memory.limit (%dMi): off-heap memstore and block cache outside hugepages %dMi + on-heap block cache %dMi + 64Mi minimum heap + overhead %dMi (the larger of 256Mi and 10%% of the limit) = %dMi; lower the sizes or raise memory.limit'.format([(quantity(self.limit).asInteger()) / 1048576, ((has(self.hugePages) ? 0 : (has(self.memstoreOffHeapSize) ? quantity(self.memstoreOffHeapSize).asInteger() : 0) + (has(self.blockCacheOffHeapSize) ? quantity(self.blockCacheOffHeapSize).asInteger() : 0))) / 1048576, ((has(self.blockCacheOnHeapSize) ? quantity(self.blockCacheOnHeapSize).asInteger() : 0)) / 1048576, ((quantity(self.limit).asInteger() / 10 > 268435456 ? quantity(self.limit).asInteger() / 10 : 268435456)) / 1048576, ((has(self.hugePages) ? 0 : (has(self.memstoreOffHeapSize) ? quantity(self.memstoreOffHeapSize).asInteger() : 0) + (has(self.blockCacheOffHeapSize) ? quantity(self.blockCacheOffHeapSize).asInteger() : 0)) + (has(self.blockCacheOnHeapSize) ? quantity(self.blockCacheOnHeapSize).asInteger() : 0) + 67108864 + (quantity(self.limit).asInteger() / 10 > 268435456 ? quantity(self.limit).asInteger() / 10 : 268435456)) / 1048576])"
// +kubebuilder:validation:XValidation:rule="!(has(self.heapLimit) || has(self.heapPercent)) || !has(self.blockCacheOnHeapSize) || (has(self.blockCacheOnHeapSize) ? quantity(self.blockCacheOnHeapSize).asInteger() : 0) + 67108864 <= (has(self.heapLimit) ? quantity(self.heapLimit).asInteger() : quantity(self.limit).asInteger() * self.heapPercent / 100) && (has(self.blockCacheOnHeapSize) ? quantity(self.blockCacheOnHeapSize).asInteger() : 0) * 5 <= (has(self.heapLimit) ? quantity(self.heapLimit).asInteger() : quantity(self.limit).asInteger() * self.heapPercent / 100) * 4",messageExpression="'memory.blockCacheOnHeapSize (%dMi) is part of the Go heap (%dMi): it may use at most 80%% of it and must leave at least 64Mi for requests'.format([((has(self.blockCacheOnHeapSize) ? quantity(self.blockCacheOnHeapSize).asInteger() : 0)) / 1048576, ((has(self.heapLimit) ? quantity(self.heapLimit).asInteger() : quantity(self.limit).asInteger() * self.heapPercent / 100)) / 1048576])"
// +kubebuilder:validation:XValidation:rule="!has(self.hugePages) || (has(self.memstoreOffHeapSize) ? quantity(self.memstoreOffHeapSize).asInteger() : 0) + (has(self.blockCacheOffHeapSize) ? quantity(self.blockCacheOffHeapSize).asInteger() : 0) <= quantity(self.hugePages.amount).asInteger()",messageExpression="'memory.hugePages.amount (%s) must hold the off-heap memstore and block cache, %dMi together'.format([self.hugePages.amount, ((has(self.memstoreOffHeapSize) ? quantity(self.memstoreOffHeapSize).asInteger() : 0) + (has(self.blockCacheOffHeapSize) ? quantity(self.blockCacheOffHeapSize).asInteger() : 0)) / 1048576])"
type RegionServerMemory struct {
	// Limit is the container's memory request and limit.
	// +kubebuilder:default="2Gi"
	// +optional
	Limit *ByteSize `json:"limit,omitempty"`
	// HeapLimit is the Go heap limit (GOMEMLIMIT, --heap-limit). It includes the on-heap block
	// cache. Default: what the limit leaves after the off-heap budgets and the overhead.
	// +kubebuilder:validation:XValidation:rule="quantity(self).isGreaterThan(quantity('0'))",message="memory.heapLimit must be positive, e.g. 2Gi"
	// +optional
	HeapLimit *ByteSize `json:"heapLimit,omitempty"`
	// HeapPercent sets the heap limit as a percentage of the memory limit instead.
	// +kubebuilder:validation:Minimum=10
	// +kubebuilder:validation:Maximum=90
	// +optional
	HeapPercent *int32 `json:"heapPercent,omitempty"`
	// MemstoreOffHeapSize is the off-heap memory of the memstores (--memstore-offheap-size).
	// Default: a quarter of the limit; with heapLimit or heapPercent set, an equal share of what
	// the limit leaves; with hugePages, half of the hugepages.
	// +optional
	MemstoreOffHeapSize *ByteSize `json:"memstoreOffHeapSize,omitempty"`
	// BlockCacheOffHeapSize is the off-heap L2 bucket cache of data blocks
	// (--blockcache-offheap-size). Default: as memstoreOffHeapSize.
	// +optional
	BlockCacheOffHeapSize *ByteSize `json:"blockCacheOffHeapSize,omitempty"`
	// BlockCacheOnHeapSize is the on-heap L1 cache of index and bloom blocks
	// (--blockcache-onheap-size); it is part of the heap. Default: a tenth of the heap.
	// +optional
	BlockCacheOnHeapSize *ByteSize `json:"blockCacheOnHeapSize,omitempty"`
	// HugePages puts the off-heap memstore and block cache in hugepages: the pods request
	// hugepages-<pageSize> (requests = limits) and mount a hugepage volume, and the engine runs
	// with --hugepages=<pageSize>. The nodes must have the hugepages reserved. Without it the
	// engine runs with --hugepages=off.
	// +optional
	HugePages *HugePagesSpec `json:"hugePages,omitempty"`
}

// HugePagesSpec is a hugepage size and the amount of it.
//
// +kubebuilder:validation:XValidation:rule="quantity(self.amount).isInteger() && quantity(self.amount).asInteger() > 0 && quantity(self.amount).asInteger() % (self.pageSize == '2Mi' ? 2097152 : 1073741824) == 0",messageExpression="'memory.hugePages.amount (%s) must be a positive multiple of the page size %s'.format([self.amount, self.pageSize])"
type HugePagesSpec struct {
	// PageSize is 2Mi or 1Gi.
	// +kubebuilder:validation:Enum="2Mi";"1Gi"
	// +kubebuilder:validation:MaxLength=3
	PageSize string `json:"pageSize"`
	// Amount of hugepage memory per region server, a multiple of pageSize.
	Amount ByteSize `json:"amount"`
}

// Scheduling says where a group's pods run. The pods prefer different nodes by default.
type Scheduling struct {
	// NodeSelector of the pods.
	// +optional
	NodeSelector map[string]string `json:"nodeSelector,omitempty"`
	// Tolerations of the pods (replace spec.podTemplate.tolerations when set).
	// +optional
	Tolerations []corev1.Toleration `json:"tolerations,omitempty"`
	// Affinity of the pods (replaces spec.podTemplate.affinity and the default anti-affinity).
	// +optional
	Affinity *corev1.Affinity `json:"affinity,omitempty"`
	// TopologySpreadConstraints of the pods (replace spec.podTemplate.topologySpreadConstraints
	// when set).
	// +optional
	TopologySpreadConstraints []corev1.TopologySpreadConstraint `json:"topologySpreadConstraints,omitempty"`
	// PriorityClassName of the pods (replaces spec.podTemplate.priorityClassName when set).
	// +kubebuilder:validation:MaxLength=253
	// +optional
	PriorityClassName string `json:"priorityClassName,omitempty"`
}

// PodTemplateOverrides are added to the pods of both groups.
type PodTemplateOverrides struct {
	// Labels added to every pod. The operator's own labels cannot be overridden.
	// +kubebuilder:validation:MaxProperties=64
	// +kubebuilder:validation:XValidation:rule="self.all(k, !(k in ['app.kubernetes.io/name', 'app.kubernetes.io/instance', 'app.kubernetes.io/component', 'app.kubernetes.io/managed-by']) && !k.startsWith('cellstore.io/'))",message="podTemplate.labels must not set app.kubernetes.io/name, instance, component or managed-by, nor cellstore.io/ labels: the operator selects its pods by them"
	// +optional
	Labels map[string]string `json:"labels,omitempty"`
	// Annotations added to every pod. cellstore.io/ annotations are the operator's.
	// +kubebuilder:validation:MaxProperties=64
	// +kubebuilder:validation:XValidation:rule="self.all(k, !k.startsWith('cellstore.io/'))",message="podTemplate.annotations must not set cellstore.io/ annotations: the operator records restart reasons with them"
	// +optional
	Annotations map[string]string `json:"annotations,omitempty"`
	// Tolerations of all pods.
	// +optional
	Tolerations []corev1.Toleration `json:"tolerations,omitempty"`
	// Affinity of all pods (replaces the default anti-affinity).
	// +optional
	Affinity *corev1.Affinity `json:"affinity,omitempty"`
	// TopologySpreadConstraints of all pods.
	// +optional
	TopologySpreadConstraints []corev1.TopologySpreadConstraint `json:"topologySpreadConstraints,omitempty"`
	// PriorityClassName of all pods.
	// +kubebuilder:validation:MaxLength=253
	// +optional
	PriorityClassName string `json:"priorityClassName,omitempty"`
}

// QuotaSpec is one throttle, as HBase's
// set_quota TYPE => THROTTLE, USER => 'alice', THROTTLE_TYPE => WRITE, LIMIT => '10M/sec'.
// It names exactly one of a user, a table or a namespace.
//
// +kubebuilder:validation:XValidation:rule="(has(self.user) ? 1 : 0) + (has(self.table) ? 1 : 0) + (has(self.namespace) ? 1 : 0) == 1",message="a quota names exactly one of user, table or namespace"
// +kubebuilder:validation:XValidation:rule="self.limit.matches('^(?i)0*[1-9][0-9]{0,17}(req|b|k|m|g|t|p)/(sec|min|hour|day)$')",messageExpression="'quota limit ' + self.limit + ' is not valid: write a positive number, then req (requests) or a size unit B, K, M, G, T or P (bytes), then /sec, /min, /hour or /day, e.g. 100req/sec or 10M/sec'"
type QuotaSpec struct {
	// User the throttle applies to.
	// +kubebuilder:validation:MaxLength=128
	// +kubebuilder:validation:Pattern=`^[^\s:'",]+$`
	// +optional
	User string `json:"user,omitempty"`
	// Table the throttle applies to, "namespace:table" or "table" (namespace default).
	// +kubebuilder:validation:MaxLength=256
	// +kubebuilder:validation:XValidation:rule="self.matches('^([a-zA-Z0-9_][a-zA-Z0-9_.-]*:)?[a-zA-Z0-9_][a-zA-Z0-9_.-]*$')",message="quota table must be 'namespace:table' or 'table' (letters, digits, '_', '-', '.')"
	// +optional
	Table string `json:"table,omitempty"`
	// Namespace (the store's table namespace, not a Kubernetes namespace) the throttle applies to.
	// +kubebuilder:validation:MaxLength=128
	// +kubebuilder:validation:XValidation:rule="self.matches('^[a-zA-Z0-9_][a-zA-Z0-9_.-]*$')",message="quota namespace must be letters, digits, '_', '-' or '.'"
	// +optional
	Namespace string `json:"namespace,omitempty"`
	// ThrottleType is REQUEST (all requests), READ or WRITE.
	// +kubebuilder:default=REQUEST
	// +kubebuilder:validation:Enum=REQUEST;READ;WRITE
	// +optional
	ThrottleType ThrottleKind `json:"throttleType,omitempty"`
	// Limit in HBase syntax: a number, a unit (req, or a size B/K/M/G/T/P) and a time unit,
	// e.g. 100req/sec, 10M/sec, 1G/hour.
	// +kubebuilder:validation:MaxLength=32
	Limit string `json:"limit"`
}

// ThrottleKind is what a quota counts: all requests, reads or writes.
type ThrottleKind string

// Throttle kinds.
const (
	ThrottleRequest ThrottleKind = "REQUEST"
	ThrottleRead    ThrottleKind = "READ"
	ThrottleWrite   ThrottleKind = "WRITE"
)

// RolloutSpec says how pods are restarted.
type RolloutSpec struct {
	// DrainTimeout bounds how long the operator waits for a region server to hand its regions
	// over before it restarts or removes it. The pods' terminationGracePeriodSeconds is derived
	// from it.
	// +kubebuilder:default="10m"
	// +kubebuilder:validation:XValidation:rule="duration(self) >= duration('1s') && duration(self) <= duration('24h')",message="rollout.drainTimeout must be between 1s and 24h, e.g. 10m"
	// +optional
	DrainTimeout *metav1.Duration `json:"drainTimeout,omitempty"`
	// OnDrainTimeout is what happens when a drain for a restart times out: Wait reports it
	// (Degraded, reason DrainTimedOut) and keeps waiting; Proceed restarts the pod anyway (the
	// master reassigns what is left, as after a crash). Scale-in always waits: it never strands a
	// region. Annotating the StoreCluster with cellstore.io/force-restart=<pod> restarts that pod
	// without waiting.
	// +kubebuilder:default=Wait
	// +kubebuilder:validation:Enum=Wait;Proceed
	// +optional
	OnDrainTimeout DrainTimeoutAction `json:"onDrainTimeout,omitempty"`
}

// DrainTimeoutAction is Wait or Proceed.
type DrainTimeoutAction string

// Drain timeout actions.
const (
	DrainTimeoutWait    DrainTimeoutAction = "Wait"
	DrainTimeoutProceed DrainTimeoutAction = "Proceed"
)

// MonitoringSpec asks for prometheus-operator objects.
type MonitoringSpec struct {
	// ServiceMonitor scraping every pod's /metrics.
	// +kubebuilder:default=true
	// +optional
	ServiceMonitor *bool `json:"serviceMonitor,omitempty"`
	// PrometheusRule with the store's alerts (docs/alerts.md): server down, regions in transition
	// too long, regions that failed to open, memstore near its limit, writes blocked, WAL syncs slow
	// or failing, compaction queue, off-heap budget near its limit, requests throttled, replica lag,
	// storage errors, certificates near expiry.
	// +kubebuilder:default=true
	// +optional
	PrometheusRule *bool `json:"prometheusRule,omitempty"`
	// Labels added to the ServiceMonitor and the PrometheusRule, so that a Prometheus selecting
	// them by label picks them up.
	// +kubebuilder:validation:MaxProperties=32
	// +optional
	Labels map[string]string `json:"labels,omitempty"`
}

// StoreClusterStatus is what the operator observes.
type StoreClusterStatus struct {
	// ObservedGeneration is the generation of the spec the status describes.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// Phase summarises the conditions: Provisioning, Running, Updating or Degraded.
	// +optional
	Phase ClusterPhase `json:"phase,omitempty"`
	// Conditions: Available, Progressing, Degraded. Their messages name the reconcile task that
	// set them.
	// +listType=map
	// +listMapKey=type
	// +optional
	Conditions []metav1.Condition `json:"conditions,omitempty"`
	// Version is the engine version the cluster's processes report (the master's view of every
	// master and live region server): one version, or the versions running during an upgrade,
	// comma-separated, oldest first.
	// +optional
	Version string `json:"version,omitempty"`
	// Masters as observed.
	// +optional
	Masters MastersStatus `json:"masters,omitempty"`
	// RegionServers as observed.
	// +optional
	RegionServers RegionServersStatus `json:"regionServers,omitempty"`
	// Regions as the master reports them.
	// +optional
	Regions RegionsStatus `json:"regions,omitempty"`
	// Rollout is the current step of a rolling restart or scale-in, if one is under way.
	// +optional
	Rollout *RolloutStatus `json:"rollout,omitempty"`
	// Monitoring says which prometheus-operator objects exist, or why there are none.
	// +optional
	Monitoring string `json:"monitoring,omitempty"`
	// Hibernation is present while the cluster hibernates or wakes (cellstore.io/hibernation).
	// +optional
	Hibernation *HibernationStatus `json:"hibernation,omitempty"`
	// Recovery is the progress of spec.bootstrap.recovery: where the cluster came from.
	// +optional
	Recovery *RecoveryStatus `json:"recovery,omitempty"`
	// ExternalAccess is where clients outside the cluster start (spec.externalAccess).
	// +optional
	ExternalAccess *ExternalAccessStatus `json:"externalAccess,omitempty"`
}

// ExternalAccessStatus reports the external addresses.
type ExternalAccessStatus struct {
	// Masters are the masters' external addresses: what a client outside is started with
	// (`cellstore shell --external --masters ADDR,...`).
	// +optional
	Masters []string `json:"masters,omitempty"`
	// Published is how many servers (masters and region servers) have an external address.
	Published int32 `json:"published"`
	// Pending is how many do not have one yet (a load balancer being made, a pod not scheduled).
	// +optional
	Pending int32 `json:"pending,omitempty"`
}

// HibernationState is a step of hibernating or waking.
type HibernationState string

// Hibernation states.
const (
	// HibernationRecording: the enabled tables are being recorded (they are enabled again on wake).
	HibernationRecording HibernationState = "Recording"
	// HibernationDisabling: the recorded tables are being disabled (their regions flush and close).
	HibernationDisabling HibernationState = "Disabling"
	// HibernationHibernated: the pods are stopped (or stopping).
	HibernationHibernated HibernationState = "Hibernated"
	// HibernationWaking: the pods start again; the recorded tables are enabled once the master answers.
	HibernationWaking HibernationState = "Waking"
)

// HibernationStatus says how far hibernating or waking is.
type HibernationStatus struct {
	State HibernationState `json:"state"`
	// Since is when the state began.
	Since metav1.Time `json:"since"`
	// Tables are the tables that were enabled when the cluster hibernated ("namespace:table").
	// +optional
	Tables []string `json:"tables,omitempty"`
}

// RecoveryStatus is how far a cluster's bootstrap from a backup is.
type RecoveryStatus struct {
	// Backup is the StoreBackup the cluster came from, and Cluster the cluster it backed up.
	Backup  string `json:"backup"`
	Cluster string `json:"cluster,omitempty"`
	// TargetTime is the point in time the tables were recovered to (spec.bootstrap.recovery's);
	// none: the backup's own state.
	// +optional
	TargetTime *metav1.Time `json:"targetTime,omitempty"`
	// Restored lists the snapshots already restored (one per table).
	// +optional
	Restored []string `json:"restored,omitempty"`
	// Restoring is the snapshot whose import and restore began (recorded before they begin): its
	// table, once it exists, is this recovery's; another table of a backed-up name found in the
	// cluster was made by someone else, and the recovery stops at it.
	// +optional
	Restoring string `json:"restoring,omitempty"`
	// CompletedAt is when every table was restored.
	// +optional
	CompletedAt *metav1.Time `json:"completedAt,omitempty"`
}

// ClusterPhase summarises the state.
type ClusterPhase string

// Phases.
const (
	PhaseProvisioning ClusterPhase = "Provisioning"
	PhaseRunning      ClusterPhase = "Running"
	PhaseUpdating     ClusterPhase = "Updating"
	PhaseDegraded     ClusterPhase = "Degraded"
	// PhaseHibernated: every pod is stopped on purpose (cellstore.io/hibernation=on).
	PhaseHibernated ClusterPhase = "Hibernated"
)

// Condition types.
const (
	// ConditionAvailable: an active master and at least one region server serving.
	ConditionAvailable = "Available"
	// ConditionProgressing: objects are being made, pods restarted or the cluster scaled.
	ConditionProgressing = "Progressing"
	// ConditionDegraded: something needs a person: a refused spec, a stuck drain, an unreachable
	// master, pods that do not become Ready.
	ConditionDegraded = "Degraded"
	// ConditionStorageReady: the shared storage can be used: the claim exists, is ReadWriteMany
	// and was not refused by its provisioner. False says why (also Degraded); Unknown until checked.
	ConditionStorageReady = "StorageReady"
)

// MastersStatus is the master group as observed.
type MastersStatus struct {
	// Replicas is the number of master pods.
	Replicas int32 `json:"replicas"`
	// Ready is the number of master pods that are Ready.
	Ready int32 `json:"ready"`
	// Updated is the number of master pods running the current pod template.
	Updated int32 `json:"updated"`
	// Active is the pod of the active master, as the master reports it.
	// +optional
	Active string `json:"active,omitempty"`
}

// RegionServersStatus is the region server group as observed.
type RegionServersStatus struct {
	// Replicas is the number of region server pods.
	Replicas int32 `json:"replicas"`
	// Ready is the number of region server pods that are Ready (registered with the master and
	// serving).
	Ready int32 `json:"ready"`
	// Updated is the number of region server pods running the current pod template.
	Updated int32 `json:"updated"`
	// Draining is the number of region servers the master reports as draining.
	Draining int32 `json:"draining"`
	// Selector selects the region server pods (label selector syntax): the scale subresource's
	// selector, which a HorizontalPodAutoscaler uses to find their metrics.
	// +optional
	Selector string `json:"selector,omitempty"`
}

// RegionsStatus is the regions as the master reports them.
type RegionsStatus struct {
	// Total regions (all replicas) in the catalog.
	Total int32 `json:"total"`
	// InTransition is the number of regions opening, closing or moving.
	InTransition int32 `json:"inTransition"`
	// PerServer lists each region server the master knows.
	// +listType=map
	// +listMapKey=server
	// +optional
	PerServer []ServerRegions `json:"perServer,omitempty"`
}

// ServerRegions is one region server as the master reports it.
type ServerRegions struct {
	// Server is the server's identity (host:port).
	Server string `json:"server"`
	// Pod is the server's pod.
	// +optional
	Pod string `json:"pod,omitempty"`
	// State as the master reports it.
	// +optional
	State string `json:"state,omitempty"`
	// Regions the server holds.
	Regions int32 `json:"regions"`
	// Draining is true while the master moves regions away from the server.
	// +optional
	Draining bool `json:"draining,omitempty"`
	// Zone the master places the server in.
	// +optional
	Zone string `json:"zone,omitempty"`
}

// RolloutStatus is one step of a rolling restart or scale-in.
type RolloutStatus struct {
	// Group is master or regionserver.
	Group string `json:"group"`
	// Pod being restarted or removed.
	Pod string `json:"pod"`
	// Action is Restart or ScaleIn.
	Action string `json:"action"`
	// Step is Draining, Restarting, WaitingReady or Removing.
	Step string `json:"step"`
	// Reason says why the pod is restarted or removed (for a restart: which fields of the pod
	// template changed).
	Reason string `json:"reason"`
	// Since is when the step began.
	// +optional
	Since *metav1.Time `json:"since,omitempty"`
	// Blocked says why the step does not advance, when it does not.
	// +optional
	Blocked string `json:"blocked,omitempty"`
}
