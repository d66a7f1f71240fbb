//go:build envtest

package controller

import (
	"context"
	"time"

	"k8s.io/client-go/tools/record"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/cellstore/cellstore/operator/api/v1alpha1"
	"github.com/cellstore/cellstore/operator/internal/resources"
)

// LabelScheduledBackup is the label naming the StoreScheduledBackup a StoreBackup belongs to.
const LabelScheduledBackup = labelScheduledBackup

// ApplyRegionServersAs runs the StoreCluster controller's apply of the region servers'
// StatefulSet with c as a reconcile read it (from a cache that may lag), and returns the step's
// outcome and reason.
func ApplyRegionServersAs(ctx context.Context, cl client.Client, c *v1alpha1.StoreCluster) (string, string) {
	r := &StoreClusterReconciler{Client: cl, APIReader: cl, Recorder: record.NewFakeRecorder(100), Options: Options{PollInterval: 100 * time.Millisecond}}
	plan, _ := checkSpec(c)
	s := &clusterState{r: r, c: c, memory: plan}
	in := resources.WorkloadInputs{Memory: plan, Replicas: c.Spec.RegionServerReplicas()}
	res := r.applyStatefulSet(ctx, s, resources.GroupRegionServer, resources.RegionServerStatefulSet(c, in))
	return res.Outcome.String(), res.Reason
}

// CredentialsHashOf is the hash of the S3 keys c's pods get from Secrets, as the StoreCluster
// controller puts it on their template.
func CredentialsHashOf(ctx context.Context, cl client.Client, c *v1alpha1.StoreCluster) (string, error) {
	r := &StoreClusterReconciler{Client: cl, APIReader: cl}
	return r.credentialsHash(ctx, c, true)
}
