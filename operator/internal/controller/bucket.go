package controller

import (
	"context"
	"fmt"
	"net"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/cellstore/cellstore/engine/storage/s3"
	"github.com/cellstore/cellstore/operator/api/v1alpha1"
	"github.com/cellstore/cellstore/operator/internal/resources"
)

// Reasons of StorageReady for spec.storage.s3 and spec.backup.s3.
const (
	ReasonStorageCredentialsMissing = "StorageCredentialsMissing"
	ReasonStorageUnreachable        = "StorageUnreachable"
	ReasonBackupCredentialsMissing  = "BackupCredentialsMissing"
)

// checkBackupSecrets checks that the Secrets spec.backup.s3 names exist with their keys: the pods
// get them as environment variables and files, and one missing would keep a restarted master (or a
// region server archiving its WAL) from starting. (The bucket itself is not probed here: the
// masters' start check and the backups report it.)
func (r *StoreClusterReconciler) checkBackupSecrets(ctx context.Context, c *v1alpha1.StoreCluster) Result {
	if c.Spec.Backup == nil {
		return Done()
	}
	loc := &c.Spec.Backup.S3
	need := func(field, name string, keys ...string) Result {
		sec := &corev1.Secret{}
		if err := r.APIReader.Get(ctx, client.ObjectKey{Namespace: c.Namespace, Name: name}, sec); err != nil {
			if apierrors.IsNotFound(err) {
				return r.failedPolling(ReasonBackupCredentialsMissing,
					"Secret %s (%s) does not exist in namespace %s: create it with keys %s; the pods stay as they are meanwhile",
					name, field, c.Namespace, strings.Join(keys, " and "))
			}
			return Errored(ReasonApplyFailed, fmt.Errorf("read Secret %s: %w", name, err))
		}
		for _, k := range keys {
			if len(sec.Data[k]) == 0 {
				return r.failedPolling(ReasonBackupCredentialsMissing,
					"Secret %s (%s) has no key %s: it needs %s; the pods stay as they are meanwhile", name, field, k, strings.Join(keys, " and "))
			}
		}
		return Done()
	}
	if ref := loc.CredentialsSecret; ref != nil {
		if res := need("spec.backup.s3.credentialsSecret", ref.Name, resources.S3AccessKeyIDKey, resources.S3SecretAccessKeyKey); res.Outcome != Complete {
			return res
		}
	}
	if ref := loc.EndpointCA; ref != nil {
		if res := need("spec.backup.s3.endpointCA", ref.Name, ref.Key); res.Outcome != Complete {
			return res
		}
	}
	return Done()
}

// bucketProbes remembers the last check of each cluster's bucket, so that a reconcile (many are
// triggered by pod events) does not send requests to the store each time.
type bucketProbes struct {
	mu   sync.Mutex
	last map[string]bucketProbe // by namespace/name
}

type bucketProbe struct {
	key string // what was checked: the bucket's settings and the Secret's version
	at  time.Time
	err error
}

// checkBucket checks spec.storage.s3: the credentials Secret exists with both keys, and the bucket
// answers to them and does conditional writes (engine/storage/s3's start check: it writes and
// deletes a probe object). Problems are reported with what to do; the chain stops, so nothing
// else changes while the bucket cannot be used.
func (r *StoreClusterReconciler) checkBucket(ctx context.Context, c *v1alpha1.StoreCluster) Result {
	spec := c.Spec.Storage.S3
	var sec *corev1.Secret
	version := ""
	if spec.CredentialsSecret != nil {
		name := spec.CredentialsSecret.Name
		sec = &corev1.Secret{}
		if err := r.APIReader.Get(ctx, client.ObjectKey{Namespace: c.Namespace, Name: name}, sec); err != nil {
			if apierrors.IsNotFound(err) {
				return r.failedPolling(ReasonStorageCredentialsMissing,
					"Secret %s (spec.storage.s3.credentialsSecret) does not exist in namespace %s: create it with keys %s and %s",
					name, c.Namespace, resources.S3AccessKeyIDKey, resources.S3SecretAccessKeyKey)
			}
			return Errored(ReasonApplyFailed, fmt.Errorf("read Secret %s: %w", name, err))
		}
		for _, k := range []string{resources.S3AccessKeyIDKey, resources.S3SecretAccessKeyKey} {
			if len(sec.Data[k]) == 0 {
				return r.failedPolling(ReasonStorageCredentialsMissing,
					"Secret %s (spec.storage.s3.credentialsSecret) has no key %s: it needs %s and %s",
					name, k, resources.S3AccessKeyIDKey, resources.S3SecretAccessKeyKey)
			}
		}
		version = sec.ResourceVersion
	}
	var ca []byte
	if ref := spec.EndpointCA; ref != nil {
		caSec := &corev1.Secret{}
		if err := r.APIReader.Get(ctx, client.ObjectKey{Namespace: c.Namespace, Name: ref.Name}, caSec); err != nil {
			if apierrors.IsNotFound(err) {
				return r.failedPolling(ReasonStorageCredentialsMissing,
					"Secret %s (spec.storage.s3.endpointCA) does not exist in namespace %s: create it with the endpoint's CA certificates (PEM) in key %s",
					ref.Name, c.Namespace, ref.Key)
			}
			return Errored(ReasonApplyFailed, fmt.Errorf("read Secret %s: %w", ref.Name, err))
		}
		if ca = caSec.Data[ref.Key]; len(ca) == 0 {
			return r.failedPolling(ReasonStorageCredentialsMissing,
				"Secret %s (spec.storage.s3.endpointCA) has no key %s: put the endpoint's CA certificates (PEM) there", ref.Name, ref.Key)
		}
		version += "|" + caSec.ResourceVersion
	}
	if sec == nil {
		// Ambient credentials are the pods' (IRSA, Pod Identity, the node's role), not the
		// operator's: the engine's own start check reports a bucket they cannot use.
		return Done()
	}
	key := spec.Endpoint + "|" + spec.Bucket + "|" + spec.Prefix + "|" + spec.Region + "|" +
		strconv.FormatBool(spec.PathStyle) + "|" + version
	id := c.Namespace + "/" + c.Name
	now := r.Options.Now()
	r.probes.mu.Lock()
	last, ok := r.probes.last[id]
	r.probes.mu.Unlock()
	fresh := ok && last.key == key &&
		((last.err == nil && now.Sub(last.at) < r.Options.ResyncInterval) || (last.err != nil && now.Sub(last.at) < r.Options.PollInterval))
	if !fresh {
		last = bucketProbe{key: key, at: now, err: probeBucket(ctx, spec, sec, ca, c.Namespace)}
		r.probes.mu.Lock()
		if r.probes.last == nil {
			r.probes.last = map[string]bucketProbe{}
		}
		r.probes.last[id] = last
		r.probes.mu.Unlock()
	}
	if last.err != nil {
		return r.failedPolling(ReasonStorageUnreachable, "spec.storage.s3: %v", last.err)
	}
	return Done()
}

// probeBucket opens the bucket with the Secret's keys and runs the engine's start check.
func probeBucket(ctx context.Context, spec *v1alpha1.S3Storage, sec *corev1.Secret, ca []byte, namespace string) error {
	ctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	cfg := s3.Config{Endpoint: endpointFrom(spec.Endpoint, namespace), Bucket: spec.Bucket, Prefix: spec.Prefix, Region: spec.Region,
		PathStyle: spec.PathStyle, CABundle: ca, Timeout: 10 * time.Second, MaxAttempts: 2}
	cfg.AccessKeyID = string(sec.Data[resources.S3AccessKeyIDKey])
	cfg.SecretAccessKey = string(sec.Data[resources.S3SecretAccessKeyKey])
	b, err := s3.Open(ctx, cfg)
	if err != nil {
		return err
	}
	return b.CheckConditionalWrites(ctx)
}

// forget drops a deleted cluster's probe.
func (p *bucketProbes) forget(id string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.last, id)
}

// endpointFrom is the endpoint as the cluster's pods reach it, from the operator's pod: a host
// without a dot ("http://minio:9000") is a Service in the StoreCluster's namespace, which the
// pods' DNS search path finds and the operator's (in its own namespace) would not.
func endpointFrom(endpoint, namespace string) string {
	u, err := url.Parse(endpoint)
	if err != nil || u.Hostname() == "" || strings.Contains(u.Hostname(), ".") || u.Hostname() == "localhost" ||
		net.ParseIP(u.Hostname()) != nil {
		return endpoint
	}
	host := u.Hostname() + "." + namespace + ".svc"
	if p := u.Port(); p != "" {
		host = net.JoinHostPort(host, p)
	}
	u.Host = host
	return u.String()
}
