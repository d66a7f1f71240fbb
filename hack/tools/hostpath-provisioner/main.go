// Command hostpath-provisioner is the dynamic volume provisioner of the local single-node cluster
// (hack/local-cluster.sh). It serves the default StorageClass: for each claim of that class it makes a
// world-writable directory under --dir and a "local" PersistentVolume pinned to the node, pre-bound to
// the claim; when a released volume's reclaim policy is Delete it removes the directory and the volume.
// Volumes are writable by non-root pods. A class lists the access modes it provides in its parameter
// "accessModes" (comma-separated; default ReadWriteOnce, like kind's local-path class): a claim that
// asks for another gets a ProvisioningFailed warning and stays Pending, as on kind, EKS, GKE and AKS.
// The local cluster's default class "standard" is ReadWriteOnce only; "shared" adds ReadWriteMany
// (one node, so a directory can be shared).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/tools/record"
)

const (
	annProvisionedBy   = "pv.kubernetes.io/provisioned-by"
	annStorageProvider = "volume.kubernetes.io/storage-provisioner"
	annSelectedNode    = "volume.kubernetes.io/selected-node"
)

type provisioner struct {
	client kubernetes.Interface
	name   string
	dir    string
	node   string
	log    *slog.Logger
	events record.EventRecorder
	warned map[string]bool // claims (by UID) already told why they stay Pending
}

func main() {
	kubeconfig := flag.String("kubeconfig", "", "kubeconfig of the cluster")
	name := flag.String("provisioner", "cellstore.io/local-hostpath", "provisioner name of the StorageClass served")
	dir := flag.String("dir", "", "directory that holds the volumes (required)")
	node := flag.String("node", "", "node name the volumes are pinned to (required)")
	interval := flag.Duration("interval", time.Second, "how often claims and volumes are checked")
	flag.Parse()
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	if *dir == "" || *node == "" {
		log.Error("--dir and --node are required")
		os.Exit(2)
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", *kubeconfig)
	if err != nil {
		log.Error("load kubeconfig", "err", err)
		os.Exit(1)
	}
	client := kubernetes.NewForConfigOrDie(cfg)
	broadcaster := record.NewBroadcaster()
	broadcaster.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: client.CoreV1().Events("")})
	defer broadcaster.Shutdown()
	p := &provisioner{client: client, name: *name, dir: *dir, node: *node, log: log, warned: map[string]bool{},
		events: broadcaster.NewRecorder(scheme.Scheme, corev1.EventSource{Component: *name})}
	if err := os.MkdirAll(p.dir, 0o755); err != nil {
		log.Error("create volume directory", "err", err)
		os.Exit(1)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	log.Info("serving", "provisioner", p.name, "dir", p.dir, "node", p.node)
	t := time.NewTicker(*interval)
	defer t.Stop()
	for {
		if err := p.sync(ctx); err != nil && ctx.Err() == nil {
			log.Warn("sync", "err", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

func (p *provisioner) sync(ctx context.Context) error {
	classes, err := p.client.StorageV1().StorageClasses().List(ctx, metav1.ListOptions{})
	if err != nil {
		return err
	}
	ours := map[string]*storagev1.StorageClass{}
	for i := range classes.Items {
		if classes.Items[i].Provisioner == p.name {
			ours[classes.Items[i].Name] = &classes.Items[i]
		}
	}
	claims, err := p.client.CoreV1().PersistentVolumeClaims("").List(ctx, metav1.ListOptions{})
	if err != nil {
		return err
	}
	var errs []error
	refused := map[string]bool{} // claims refused this pass: the others are forgotten
	for i := range claims.Items {
		c := &claims.Items[i]
		if c.Status.Phase != corev1.ClaimPending || c.Spec.VolumeName != "" || c.Spec.StorageClassName == nil ||
			c.DeletionTimestamp != nil || c.Annotations[annStorageProvider] != p.name {
			continue
		}
		sc := ours[*c.Spec.StorageClassName]
		if sc == nil {
			continue
		}
		waitFirst := sc.VolumeBindingMode != nil && *sc.VolumeBindingMode == storagev1.VolumeBindingWaitForFirstConsumer
		if waitFirst && c.Annotations[annSelectedNode] == "" {
			continue // the scheduler has not picked a node yet
		}
		if bad := unsupportedModes(c, sc); len(bad) > 0 {
			refused[string(c.UID)] = true
			if !p.warned[string(c.UID)] {
				p.warned[string(c.UID)] = true
				p.events.Eventf(c, corev1.EventTypeWarning, "ProvisioningFailed",
					"failed to provision volume with StorageClass %q: Only support %s access mode (asked for %s)",
					sc.Name, strings.Join(classModes(sc), ", "), strings.Join(bad, ", "))
				p.log.Info("refused", "claim", c.Namespace+"/"+c.Name, "class", sc.Name, "modes", bad)
			}
			continue
		}
		if err := p.provision(ctx, c, sc); err != nil {
			errs = append(errs, fmt.Errorf("provision %s/%s: %w", c.Namespace, c.Name, err))
		}
	}
	for uid := range p.warned {
		if !refused[uid] {
			delete(p.warned, uid) // the claim is gone or changed
		}
	}
	vols, err := p.client.CoreV1().PersistentVolumes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return err
	}
	for i := range vols.Items {
		v := &vols.Items[i]
		if v.Annotations[annProvisionedBy] != p.name || v.Status.Phase != corev1.VolumeReleased ||
			v.Spec.PersistentVolumeReclaimPolicy != corev1.PersistentVolumeReclaimDelete || v.Spec.Local == nil {
			continue
		}
		if err := p.remove(ctx, v); err != nil {
			errs = append(errs, fmt.Errorf("delete %s: %w", v.Name, err))
		}
	}
	return errors.Join(errs...)
}

// classModes are the access modes a class's volumes provide (parameter "accessModes").
func classModes(sc *storagev1.StorageClass) []string {
	var modes []string
	for _, m := range strings.Split(sc.Parameters["accessModes"], ",") {
		if m = strings.TrimSpace(m); m != "" {
			modes = append(modes, m)
		}
	}
	if len(modes) == 0 {
		return []string{string(corev1.ReadWriteOnce)}
	}
	return modes
}

// unsupportedModes are the claim's access modes its class does not provide.
func unsupportedModes(c *corev1.PersistentVolumeClaim, sc *storagev1.StorageClass) []string {
	var bad []string
	for _, m := range c.Spec.AccessModes {
		if !slices.Contains(classModes(sc), string(m)) {
			bad = append(bad, string(m))
		}
	}
	return bad
}

func (p *provisioner) provision(ctx context.Context, c *corev1.PersistentVolumeClaim, sc *storagev1.StorageClass) error {
	name := "pvc-" + string(c.UID)
	path := filepath.Join(p.dir, name)
	if err := os.MkdirAll(path, 0o777); err != nil {
		return err
	}
	if err := os.Chmod(path, 0o777); err != nil { // not masked by the umask: writable by any pod user
		return err
	}
	reclaim := corev1.PersistentVolumeReclaimDelete
	if sc.ReclaimPolicy != nil {
		reclaim = *sc.ReclaimPolicy
	}
	size := c.Spec.Resources.Requests[corev1.ResourceStorage]
	pv := &corev1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: map[string]string{annProvisionedBy: p.name}},
		Spec: corev1.PersistentVolumeSpec{
			Capacity:                      corev1.ResourceList{corev1.ResourceStorage: size},
			AccessModes:                   c.Spec.AccessModes,
			PersistentVolumeReclaimPolicy: reclaim,
			StorageClassName:              sc.Name,
			VolumeMode:                    c.Spec.VolumeMode,
			ClaimRef: &corev1.ObjectReference{Kind: "PersistentVolumeClaim", APIVersion: "v1",
				Namespace: c.Namespace, Name: c.Name, UID: c.UID},
			PersistentVolumeSource: corev1.PersistentVolumeSource{Local: &corev1.LocalVolumeSource{Path: path}},
			NodeAffinity: &corev1.VolumeNodeAffinity{Required: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{
				MatchExpressions: []corev1.NodeSelectorRequirement{{Key: corev1.LabelHostname, Operator: corev1.NodeSelectorOpIn, Values: []string{p.node}}},
			}}}},
		},
	}
	_, err := p.client.CoreV1().PersistentVolumes().Create(ctx, pv, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		return nil
	}
	if err == nil {
		p.log.Info("provisioned", "claim", c.Namespace+"/"+c.Name, "volume", name, "path", path)
	}
	return err
}

func (p *provisioner) remove(ctx context.Context, v *corev1.PersistentVolume) error {
	path := v.Spec.Local.Path
	if filepath.Dir(path) != filepath.Clean(p.dir) {
		return fmt.Errorf("volume path %s is outside %s; not deleting it", path, p.dir)
	}
	if err := os.RemoveAll(path); err != nil {
		return err
	}
	err := p.client.CoreV1().PersistentVolumes().Delete(ctx, v.Name, metav1.DeleteOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err == nil {
		p.log.Info("deleted", "volume", v.Name, "path", path)
	}
	return err
}
