//go:build envtest

package controller_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/cellstore/cellstore/engine/version"
	"github.com/cellstore/cellstore/operator/api/v1alpha1"
	"github.com/cellstore/cellstore/operator/internal/controller"
	"github.com/cellstore/cellstore/operator/internal/master/masterfake"
	"github.com/cellstore/cellstore/operator/internal/resources"
	"github.com/cellstore/cellstore/operator/internal/testenv"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
)

// The suite runs the operator's controllers in a manager against a real kube-apiserver and etcd
// (envtest). There is no kubelet and no StatefulSet controller: the test's simulator plays both (it
// creates the StatefulSets' pods, marks them Ready, finishes deletions, reports revisions) and
// registers region servers with the fake master, which stands in for the engine.

var (
	env      *testenv.Env
	k8s      client.Client
	masters  *masterfake.Registry
	kubelet  *simulator
	operator *operatorProcess
	suiteCtx context.Context
	cancel   context.CancelFunc
)

const (
	timeout = 30 * time.Second
	poll    = 50 * time.Millisecond
)

// suiteT is the suite's testing.T, for helpers that need one (the S3 server: stopped when the
// suite ends).
var suiteT *testing.T

func TestControllers(t *testing.T) {
	suiteT = t
	RegisterFailHandler(Fail)
	RunSpecs(t, "controller (envtest)")
}

var scheme = func() *runtime.Scheme {
	s := runtime.NewScheme()
	utilruntime.Must(clientgoscheme.AddToScheme(s))
	utilruntime.Must(v1alpha1.AddToScheme(s))
	return s
}()

var _ = BeforeSuite(func() {
	ctrl.SetLogger(zap.New(zap.WriteTo(GinkgoWriter), zap.UseDevMode(true)))
	var err error
	env, err = testenv.Start(testenv.Options{CRDDirs: []string{filepath.Join("..", "..", "..", "config", "crd", "bases")}})
	Expect(err).NotTo(HaveOccurred())
	k8s, err = client.New(env.Config, client.Options{Scheme: scheme})
	Expect(err).NotTo(HaveOccurred())
	suiteCtx, cancel = context.WithCancel(context.Background())
	masters = masterfake.NewRegistry()
	kubelet = newSimulator(k8s, masters)
	go kubelet.run(suiteCtx)
	operator = startOperator("v1")
})

var _ = AfterSuite(func() {
	if operator != nil {
		operator.stop()
	}
	if cancel != nil {
		cancel()
	}
	if env != nil {
		Expect(env.Stop()).To(Succeed())
	}
})

// operatorProcess is one running manager with both controllers.
type operatorProcess struct {
	cancel context.CancelFunc
	done   chan error
}

func startOperator(version string) *operatorProcess {
	mgr, err := ctrl.NewManager(env.Config, ctrl.Options{
		Scheme:                 scheme,
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
		Cache:                  controller.CacheOptions(nil),
	})
	Expect(err).NotTo(HaveOccurred())
	Expect(controller.Setup(mgr, controller.Options{
		Masters:            masters.Factory,
		OperatorVersion:    version,
		PollInterval:       100 * time.Millisecond,
		ResyncInterval:     time.Second,
		MasterTimeout:      2 * time.Second,
		SkipNameValidation: true,
	})).To(Succeed())
	ctx, cancel := context.WithCancel(suiteCtx)
	p := &operatorProcess{cancel: cancel, done: make(chan error, 1)}
	go func() { p.done <- mgr.Start(ctx) }()
	return p
}

func (p *operatorProcess) stop() {
	p.cancel()
	Eventually(p.done, timeout).Should(Receive(BeNil()))
}

// restartOperator stops the running operator and starts another (an upgrade, or a crash).
func restartOperator(version string) {
	operator.stop()
	operator = startOperator(version)
}

// --- the simulator: kubelet and StatefulSet controller ---

type simulator struct {
	c     client.Client
	fakes *masterfake.Registry
	mu    sync.Mutex
	// notReady holds pods the simulator must not mark Ready (namespace/name).
	notReady map[string]bool
	nodes    []string
}

func newSimulator(c client.Client, fakes *masterfake.Registry) *simulator {
	return &simulator{c: c, fakes: fakes, notReady: map[string]bool{}}
}

// holdNotReady keeps a pod (by name, in any incarnation) from becoming Ready, or releases it.
func (s *simulator) holdNotReady(ns, pod string, hold bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.notReady[ns+"/"+pod] = hold
}

// setNodes makes the simulator place pods on these nodes, round robin by ordinal.
func (s *simulator) setNodes(nodes []string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.nodes = nodes
}

func (s *simulator) run(ctx context.Context) {
	t := time.NewTicker(20 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			_ = s.step(ctx)
		}
	}
}

func revisionOf(sts *appsv1.StatefulSet) string {
	return sts.Name + "-" + sts.Spec.Template.Annotations[resources.AnnotationTemplateHash]
}

func (s *simulator) step(ctx context.Context) error {
	list := &appsv1.StatefulSetList{}
	if err := s.c.List(ctx, list, client.MatchingLabels{resources.LabelName: resources.AppName}); err != nil {
		return err
	}
	for i := range list.Items {
		if err := s.reconcile(ctx, &list.Items[i]); err != nil {
			continue
		}
	}
	return nil
}

func (s *simulator) reconcile(ctx context.Context, sts *appsv1.StatefulSet) error {
	cluster := sts.Labels[resources.LabelInstance]
	fake := s.fakes.For(types.NamespacedName{Namespace: sts.Namespace, Name: cluster})
	c := &v1alpha1.StoreCluster{ObjectMeta: metav1.ObjectMeta{Namespace: sts.Namespace, Name: cluster}}
	group := resources.Group(sts.Labels[resources.LabelComponent])
	rev := revisionOf(sts)
	replicas := int(ptr.Deref(sts.Spec.Replicas, 1))

	pods := &corev1.PodList{}
	if err := s.c.List(ctx, pods, client.InNamespace(sts.Namespace), client.MatchingLabels(sts.Spec.Selector.MatchLabels)); err != nil {
		return err
	}
	have := map[string]*corev1.Pod{}
	ready, updated := 0, 0
	for i := range pods.Items {
		p := &pods.Items[i]
		ord := podOrdinal(p.Name)
		switch {
		case p.DeletionTimestamp != nil:
			// The kubelet stops the container: the server leaves the master.
			s.podGone(ctx, fake, c, group, p)
			continue
		case ord >= replicas:
			// The StatefulSet controller removes pods beyond the replicas.
			if err := s.c.Delete(ctx, p); err != nil && !apierrors.IsNotFound(err) {
				return err
			}
			continue
		}
		have[p.Name] = p
		if podReady(p) {
			ready++
		} else if !s.held(p) {
			if err := s.markReady(ctx, fake, c, group, p); err != nil {
				return err
			}
		}
		if podRevision(p) == rev {
			updated++
		}
	}
	for ord := range replicas {
		name := fmt.Sprintf("%s-%d", sts.Name, ord)
		if _, ok := have[name]; ok {
			continue
		}
		if err := s.c.Create(ctx, s.newPod(sts, name, ord, rev)); err != nil && !apierrors.IsAlreadyExists(err) {
			return err
		}
	}
	st := appsv1.StatefulSetStatus{
		ObservedGeneration: sts.Generation, Replicas: int32(len(have)), ReadyReplicas: int32(ready), AvailableReplicas: int32(ready),
		UpdatedReplicas: int32(updated), CurrentReplicas: int32(updated), UpdateRevision: rev, CurrentRevision: rev,
	}
	if !equality.Semantic.DeepEqual(sts.Status, st) {
		sts.Status = st
		return s.c.Status().Update(ctx, sts)
	}
	return nil
}

func (s *simulator) held(p *corev1.Pod) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.notReady[p.Namespace+"/"+p.Name]
}

func (s *simulator) newPod(sts *appsv1.StatefulSet, name string, ord int, rev string) *corev1.Pod {
	tpl := sts.Spec.Template.DeepCopy()
	labels := tpl.Labels
	labels[appsv1.ControllerRevisionHashLabelKey] = rev
	labels[appsv1.StatefulSetPodNameLabel] = name
	spec := tpl.Spec
	s.mu.Lock()
	if len(s.nodes) > 0 {
		spec.NodeName = s.nodes[ord%len(s.nodes)]
	} else {
		spec.NodeName = "node-0"
	}
	s.mu.Unlock()
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name: name, Namespace: sts.Namespace, Labels: labels, Annotations: tpl.Annotations,
			OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(sts, appsv1.SchemeGroupVersion.WithKind("StatefulSet"))},
		},
		Spec: spec,
	}
}

func (s *simulator) markReady(ctx context.Context, fake *masterfake.Fake, c *v1alpha1.StoreCluster, g resources.Group, p *corev1.Pod) error {
	if g == resources.GroupRegionServer && s.refused(ctx, fake, c, p) {
		// As the engine: the active master refuses a region server of a newer minor version,
		// which then never becomes Ready.
		return nil
	}
	p.Status.Phase = corev1.PodRunning
	p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: metav1.Now()}}
	if err := s.c.Status().Update(ctx, p); err != nil {
		return err
	}
	if g == resources.GroupRegionServer {
		fake.RegisterServer(resources.ServerName(c, p.Name))
	} else if fake.ActiveMaster() == "" {
		fake.SetActiveMaster(resources.MasterServerName(c, p.Name))
	}
	return nil
}

// refused says whether the active master (by its pod's image tag) refuses region server pod p's
// version (engine/version.CheckServer).
func (s *simulator) refused(ctx context.Context, fake *masterfake.Fake, c *v1alpha1.StoreCluster, p *corev1.Pod) bool {
	active := fake.ActiveMaster()
	pods := &corev1.PodList{}
	if active == "" || s.c.List(ctx, pods, client.InNamespace(p.Namespace), client.MatchingLabels(resources.SelectorLabels(c, resources.GroupMaster))) != nil {
		return false
	}
	for i := range pods.Items {
		m := &pods.Items[i]
		if resources.MasterServerName(c, m.Name) == active {
			return version.CheckServer(resources.ImageTag(resources.EngineImage(&m.Spec)), resources.ImageTag(resources.EngineImage(&p.Spec))) != nil
		}
	}
	return false
}

// podGone finishes a pod's deletion as the kubelet would, and tells the fake master.
func (s *simulator) podGone(ctx context.Context, fake *masterfake.Fake, c *v1alpha1.StoreCluster, g resources.Group, p *corev1.Pod) {
	if err := s.c.Delete(ctx, p, client.GracePeriodSeconds(0), client.Preconditions{UID: &p.UID}); err != nil {
		return
	}
	if g == resources.GroupRegionServer {
		server := resources.ServerName(c, p.Name)
		fake.Note("stopped %s regions=%d", p.Name, fake.Regions(server))
		fake.ServerGone(server)
		return
	}
	fake.Note("stopped %s", p.Name)
	if fake.ActiveMaster() == resources.MasterServerName(c, p.Name) {
		// A standby takes over.
		pods := &corev1.PodList{}
		_ = s.c.List(ctx, pods, client.InNamespace(p.Namespace), client.MatchingLabels(resources.SelectorLabels(c, g)))
		next := ""
		for i := range pods.Items {
			q := &pods.Items[i]
			if q.Name != p.Name && podReady(q) {
				next = resources.MasterServerName(c, q.Name)
			}
		}
		fake.SetActiveMaster(next)
	}
}

// --- helpers for specs ---

// newNamespace makes a namespace for one spec. When the spec ends, what it made there goes:
// envtest runs no namespace or garbage collector controller, so without this every cluster of the
// specs before stays and the operator keeps reconciling it (a cluster left Degraded, every poll
// interval) and the simulator keeps stepping its StatefulSets — late specs then waited behind
// them, and on a loaded 2-core machine timed out waiting for their first pods.
func newNamespace() string {
	name := fmt.Sprintf("t-%d", rand.Uint32())
	Expect(k8s.Create(suiteCtx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}})).To(Succeed())
	DeferCleanup(clearNamespace, name)
	return name
}

// clearNamespace deletes a spec's custom resources (finalizers dropped: the operator's cleanup at
// deletion is tested by the specs that ask for it), then the StatefulSets and pods that outlive
// their StoreCluster without a garbage collector.
func clearNamespace(ns string) {
	in := client.InNamespace(ns)
	for _, list := range []client.ObjectList{&v1alpha1.StoreUserList{}, &v1alpha1.StoreScheduledBackupList{}, &v1alpha1.StoreBackupList{}, &v1alpha1.StoreClusterList{}} {
		Expect(k8s.List(suiteCtx, list, in)).To(Succeed())
		items, err := apimeta.ExtractList(list)
		Expect(err).NotTo(HaveOccurred())
		for _, item := range items {
			obj := item.(client.Object)
			if len(obj.GetFinalizers()) > 0 {
				patch := client.MergeFrom(obj.DeepCopyObject().(client.Object))
				obj.SetFinalizers(nil)
				Expect(client.IgnoreNotFound(k8s.Patch(suiteCtx, obj, patch))).To(Succeed())
			}
			Expect(client.IgnoreNotFound(k8s.Delete(suiteCtx, obj))).To(Succeed())
		}
	}
	// A reconcile under way when its StoreCluster went may still make a StatefulSet: delete until
	// none is left.
	Eventually(func(g Gomega) {
		g.Expect(k8s.DeleteAllOf(suiteCtx, &appsv1.StatefulSet{}, in)).To(Succeed())
		g.Expect(k8s.DeleteAllOf(suiteCtx, &corev1.Pod{}, in, client.GracePeriodSeconds(0))).To(Succeed())
		sets := &appsv1.StatefulSetList{}
		g.Expect(k8s.List(suiteCtx, sets, in)).To(Succeed())
		g.Expect(sets.Items).To(BeEmpty())
		pods := &corev1.PodList{}
		g.Expect(k8s.List(suiteCtx, pods, in)).To(Succeed())
		g.Expect(pods.Items).To(BeEmpty())
	}, timeout, poll).Should(Succeed())
}

func sharedClaim(ns, name string) {
	Expect(k8s.Create(suiteCtx, &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteMany},
			Resources:   corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}},
		},
	})).To(Succeed())
}

// newCluster is a small StoreCluster on an existing claim (which it makes).
func newCluster(ns string, mutate ...func(*v1alpha1.StoreCluster)) *v1alpha1.StoreCluster {
	sharedClaim(ns, "data")
	c := &v1alpha1.StoreCluster{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "store"},
		Spec: v1alpha1.StoreClusterSpec{
			Image:   "docker.io/cellstore/engine:v0.1.0",
			Storage: v1alpha1.StorageSpec{ExistingClaim: &v1alpha1.ExistingClaimStorage{ClaimName: "data"}},
		},
	}
	for _, m := range mutate {
		m(c)
	}
	return c
}

func create(c *v1alpha1.StoreCluster) *v1alpha1.StoreCluster {
	Expect(k8s.Create(suiteCtx, c)).To(Succeed())
	return c
}

func fakeOf(c *v1alpha1.StoreCluster) *masterfake.Fake {
	return masters.For(types.NamespacedName{Namespace: c.Namespace, Name: c.Name})
}

func get(c *v1alpha1.StoreCluster) *v1alpha1.StoreCluster {
	out := &v1alpha1.StoreCluster{}
	Expect(k8s.Get(suiteCtx, client.ObjectKeyFromObject(c), out)).To(Succeed())
	return out
}

// update changes a StoreCluster's spec or metadata, retrying on conflicts.
func update(c *v1alpha1.StoreCluster, change func(*v1alpha1.StoreCluster)) {
	Eventually(func() error {
		cur := &v1alpha1.StoreCluster{}
		if err := k8s.Get(suiteCtx, client.ObjectKeyFromObject(c), cur); err != nil {
			return err
		}
		change(cur)
		return k8s.Update(suiteCtx, cur)
	}, timeout, poll).Should(Succeed())
}

func statefulSet(c *v1alpha1.StoreCluster, g resources.Group) *appsv1.StatefulSet {
	sts := &appsv1.StatefulSet{}
	Expect(k8s.Get(suiteCtx, client.ObjectKey{Namespace: c.Namespace, Name: resources.StatefulSetName(c, g)}, sts)).To(Succeed())
	return sts
}

func condition(c *v1alpha1.StoreCluster, typ string) func() *metav1.Condition {
	return func() *metav1.Condition {
		cur := &v1alpha1.StoreCluster{}
		if err := k8s.Get(suiteCtx, client.ObjectKeyFromObject(c), cur); err != nil {
			return nil
		}
		return apimeta.FindStatusCondition(cur.Status.Conditions, typ)
	}
}

// haveCondition matches a condition's status and reason, and (when given) a message substring.
func haveCondition(status metav1.ConditionStatus, reason string, message ...string) OmegaMatcher {
	m := []OmegaMatcher{Not(BeNil()), HaveField("Status", status), HaveField("Reason", reason)}
	for _, s := range message {
		m = append(m, HaveField("Message", ContainSubstring(s)))
	}
	return And(m...)
}

// waitRunning waits until every pod is up and the status says Running.
func waitRunning(c *v1alpha1.StoreCluster) {
	Eventually(func(g Gomega) {
		cur := get(c)
		g.Expect(cur.Status.Phase).To(Equal(v1alpha1.PhaseRunning), "conditions: %+v", cur.Status.Conditions)
		g.Expect(cur.Status.ObservedGeneration).To(Equal(cur.Generation))
		// The first balance after all region servers serve has happened.
		sts := &appsv1.StatefulSet{}
		g.Expect(k8s.Get(suiteCtx, client.ObjectKey{Namespace: c.Namespace, Name: resources.StatefulSetName(c, resources.GroupRegionServer)}, sts)).To(Succeed())
		g.Expect(sts.Annotations).To(HaveKeyWithValue(resources.AnnotationBalancedReplicas, strconv.Itoa(int(cur.Spec.RegionServerReplicas()))))
	}, timeout, poll).Should(Succeed())
}

// events returns the messages of the StoreCluster's events with the reason.
func events(c *v1alpha1.StoreCluster, reason string) []string {
	list := &corev1.EventList{}
	Expect(k8s.List(suiteCtx, list, client.InNamespace(c.Namespace))).To(Succeed())
	sort.Slice(list.Items, func(i, j int) bool { return list.Items[i].CreationTimestamp.Before(&list.Items[j].CreationTimestamp) })
	var out []string
	for _, e := range list.Items {
		if e.InvolvedObject.Name == c.Name && e.InvolvedObject.Kind == "StoreCluster" && e.Reason == reason {
			out = append(out, e.Type+": "+e.Message)
		}
	}
	return out
}

func eventsOf(c *v1alpha1.StoreCluster, reason string) func() []string {
	return func() []string { return events(c, reason) }
}

func pods(c *v1alpha1.StoreCluster, g resources.Group) map[string]types.UID {
	list := &corev1.PodList{}
	Expect(k8s.List(suiteCtx, list, client.InNamespace(c.Namespace), client.MatchingLabels(resources.SelectorLabels(c, g)))).To(Succeed())
	out := map[string]types.UID{}
	for _, p := range list.Items {
		out[p.Name] = p.UID
	}
	return out
}

// seedRegions gives every region server n regions.
func seedRegions(c *v1alpha1.StoreCluster, n int32) {
	f := fakeOf(c)
	for i := range int(c.Spec.RegionServerReplicas()) {
		f.SetRegions(resources.ServerName(c, resources.PodName(c, resources.GroupRegionServer, i)), n)
	}
}

// journalFrom returns the fake master's journal entries after the first n, filtered to those with
// one of the prefixes.
func journalFrom(f *masterfake.Fake, n int, prefixes ...string) []string {
	var out []string
	for _, e := range f.Journal()[n:] {
		for _, p := range prefixes {
			if strings.HasPrefix(e, p) {
				out = append(out, e)
				break
			}
		}
	}
	return out
}

// reconcilesPass waits until the operator has asked the master for its status n more times: a
// way to let the controllers run without sleeping.
func reconcilesPass(c *v1alpha1.StoreCluster, n int) {
	f := fakeOf(c)
	start := f.StatusCalls()
	Eventually(f.StatusCalls, timeout, poll).Should(BeNumerically(">=", start+n))
}

func cond(c *v1alpha1.StoreCluster, typ string) *metav1.Condition {
	return apimeta.FindStatusCondition(c.Status.Conditions, typ)
}

func podOrdinal(name string) int {
	i := strings.LastIndexByte(name, '-')
	n, err := strconv.Atoi(name[i+1:])
	if i < 0 || err != nil {
		return -1
	}
	return n
}

func podReady(p *corev1.Pod) bool {
	if p.DeletionTimestamp != nil {
		return false
	}
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

func podRevision(p *corev1.Pod) string { return p.Labels[appsv1.ControllerRevisionHashLabelKey] }
