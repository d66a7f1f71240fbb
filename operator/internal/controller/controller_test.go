package controller

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/cellstore/cellstore/operator/api/v1alpha1"
	"github.com/cellstore/cellstore/operator/internal/resources"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

type trace struct{ ran []string }

func TestRunTasksStopsAtTheFirstBlockedTask(t *testing.T) {
	step := func(name string, res Result) Task[*trace] {
		return Task[*trace]{Name: name, Run: func(_ context.Context, s *trace) Result { s.ran = append(s.ran, name); return res }}
	}
	s := &trace{}
	rep := RunTasks(context.Background(), s, []Task[*trace]{
		step("a", Done()), step("b", Waiting("Pods", "waiting for %d pods", 2)), step("c", Done()),
	})
	if rep.Complete() || rep.Blocked != "b" || rep.Result.Outcome != Wait || rep.Result.Message != "waiting for 2 pods" {
		t.Errorf("report %+v", rep)
	}
	if strings.Join(s.ran, ",") != "a,b" {
		t.Errorf("ran %v", s.ran)
	}
	s = &trace{}
	if rep := RunTasks(context.Background(), s, []Task[*trace]{step("a", Done()), step("b", Done())}); !rep.Complete() {
		t.Errorf("report %+v", rep)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if rep := RunTasks(ctx, &trace{}, []Task[*trace]{step("a", Done())}); rep.Blocked != "a" || rep.Result.Err == nil {
		t.Errorf("cancelled: %+v", rep)
	}
}

func TestCheckSpec(t *testing.T) {
	base := func() *v1alpha1.StoreCluster {
		return &v1alpha1.StoreCluster{Spec: v1alpha1.StoreClusterSpec{Image: "x",
			Storage: v1alpha1.StorageSpec{ExistingClaim: &v1alpha1.ExistingClaimStorage{ClaimName: "d"}}}}
	}
	if _, p := checkSpec(base()); p != nil {
		t.Fatalf("valid spec refused: %+v", p)
	}
	c := base()
	c.Spec.Storage = v1alpha1.StorageSpec{S3: &v1alpha1.S3Storage{S3Location: v1alpha1.S3Location{Endpoint: "https://x", Bucket: "b"}}}
	if _, p := checkSpec(c); p != nil {
		t.Errorf("S3 refused: %+v", p)
	}
	c.Spec.Storage = v1alpha1.StorageSpec{}
	if _, p := checkSpec(c); p == nil || p.Reason != ReasonInvalidSpec {
		t.Errorf("no storage: %+v", p)
	}
	c = base()
	big := v1alpha1.ByteSize("3Gi")
	c.Spec.RegionServers.Memory.HeapLimit = &big
	if _, p := checkSpec(c); p == nil || p.Reason != ReasonMemoryBudgetExceeded || !strings.Contains(p.Message, "exceed") {
		t.Errorf("memory: %+v", p)
	}
	c = base()
	c.Spec.Quotas = []v1alpha1.QuotaSpec{{User: "a", Limit: "1req/sec"}, {User: "a", Limit: "2req/sec"}}
	if _, p := checkSpec(c); p == nil || p.Reason != ReasonInvalidSpec {
		t.Errorf("duplicate quotas: %+v", p)
	}
}

func TestRestartReason(t *testing.T) {
	hist, _ := json.Marshal([]templateChange{
		{From: "h1", To: "h2", Changed: []string{"spec.template.spec.containers[engine].image"}},
		{From: "h2", To: "h3", Changed: []string{"spec.template.spec.containers[engine].args[--heap-limit]", "spec.template.spec.containers[engine].image"}},
	})
	sts := &appsv1.StatefulSet{
		ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{resources.AnnotationRestartHistory: string(hist)}},
		Spec: appsv1.StatefulSetSpec{Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{
			Annotations: map[string]string{resources.AnnotationTemplateHash: "h3"}}}},
	}
	for hash, want := range map[string]string{
		"h1": "pod template changed: spec.template.spec.containers[engine].image, spec.template.spec.containers[engine].args[--heap-limit]",
		"h2": "pod template changed: spec.template.spec.containers[engine].args[--heap-limit], spec.template.spec.containers[engine].image",
		"h0": "pod template changed since revision h0 (the changed fields were not recorded)",
		"":   "pod template changed (the pod carries no template hash)",
	} {
		if got := restartReason(sts, hash); got != want {
			t.Errorf("restartReason(%q) = %q, want %q", hash, got, want)
		}
	}
}

func TestRolloutStateAndPods(t *testing.T) {
	if parseRollout(&appsv1.StatefulSet{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{resources.AnnotationRollout: "{bad"}}}) != nil {
		t.Error("a broken annotation must read as no rollout")
	}
	for name, want := range map[string]int{"c-regionserver-12": 12, "c-regionserver-x": -1, "nodash": -1} {
		if got := podOrdinal(name); got != want {
			t.Errorf("podOrdinal(%q) = %d, want %d", name, got, want)
		}
	}
	sts := &appsv1.StatefulSet{ObjectMeta: metav1.ObjectMeta{Generation: 3}, Status: appsv1.StatefulSetStatus{ObservedGeneration: 2, UpdateRevision: "r"}}
	if revisionKnown(sts) {
		t.Error("a revision of an older generation is not known")
	}
	sts.Status.ObservedGeneration = 3
	if !revisionKnown(sts) {
		t.Error("revision of the observed generation")
	}
}

// The operator reaches a Service named by its short name in the StoreCluster's namespace, as the
// pods do; other endpoints are used as given.
func TestEndpointFrom(t *testing.T) {
	for in, want := range map[string]string{
		"http://minio:9000":                   "http://minio.data.svc:9000",
		"http://minio":                        "http://minio.data.svc",
		"https://s3.eu-west-1.amazonaws.com":  "https://s3.eu-west-1.amazonaws.com",
		"http://minio.other:9000":             "http://minio.other:9000",
		"http://10.0.0.7:9000":                "http://10.0.0.7:9000",
		"http://localhost:9000":               "http://localhost:9000",
		"https://storage.googleapis.com/path": "https://storage.googleapis.com/path",
	} {
		if got := endpointFrom(in, "data"); got != want {
			t.Errorf("endpointFrom(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestHumanBytes(t *testing.T) {
	for n, want := range map[int64]string{0: "0 B", 1023: "1023 B", 1024: "1.0 KiB", 991956: "968.7 KiB", 5 << 30: "5.0 GiB", 3 << 50: "3.0 PiB"} {
		if got := humanBytes(n); got != want {
			t.Errorf("humanBytes(%d) = %q, want %q", n, got, want)
		}
	}
}

// StoreUsers made before the CRD refused them: in a group of the cluster's own, or named as one of
// its Secrets.
func TestReservedIdentity(t *testing.T) {
	c := &v1alpha1.StoreCluster{ObjectMeta: metav1.ObjectMeta{Name: "prod"}}
	for _, tc := range []struct {
		name   string
		groups []string
		want   string
	}{
		{"alice", []string{"analysts"}, ""},
		{"alice", []string{"analysts", "cellstore:admins"}, "group cellstore:admins is the cluster's own"},
		{"alice", []string{"cellstore:servers"}, "group cellstore:servers"},
		{"prod-tokens", nil, "Secret prod-tokens is the cluster's own"},
		{"prod-ca", nil, "Secret prod-ca"},
		{"other-tokens", nil, ""},
	} {
		u := &v1alpha1.StoreUser{ObjectMeta: metav1.ObjectMeta{Name: tc.name}, Spec: v1alpha1.StoreUserSpec{Cluster: "prod", Groups: tc.groups}}
		got := reservedIdentity(u, c)
		if (tc.want == "") != (got == "") || !strings.Contains(got, tc.want) {
			t.Errorf("%s in %v: %q, want %q", tc.name, tc.groups, got, tc.want)
		}
	}
}

// A pod that cannot start or keeps crashing, also while it runs between two crashes; not one
// that crashed long ago, nor a single refused pull.
func TestFailingPod(t *testing.T) {
	now := time.Date(2026, 12, 7, 12, 0, 0, 0, time.UTC)
	pod := func(cs corev1.ContainerStatus) map[resources.Group][]*corev1.Pod {
		cs.Name = "engine"
		return map[resources.Group][]*corev1.Pod{resources.GroupRegionServer: {{ObjectMeta: metav1.ObjectMeta{Name: "rs-0"},
			Status: corev1.PodStatus{ContainerStatuses: []corev1.ContainerStatus{cs}}}}}
	}
	crashed := func(restarts int32, ago time.Duration) corev1.ContainerStatus {
		return corev1.ContainerStatus{RestartCount: restarts, State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}},
			LastTerminationState: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 2, Reason: "Error", FinishedAt: metav1.NewTime(now.Add(-ago))}}}
	}
	waiting := func(reason string) corev1.ContainerStatus {
		return corev1.ContainerStatus{State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: reason, Message: "m"}}}
	}
	for _, tc := range []struct {
		name string
		cs   corev1.ContainerStatus
		want string
	}{
		{"image", waiting("ImagePullBackOff"), "pod rs-0: container engine is waiting: ImagePullBackOff: m"},
		{"one refused pull", waiting("ErrImagePull"), ""},
		{"starting", waiting("ContainerCreating"), ""},
		{"crash loop, waiting", waiting("CrashLoopBackOff"), "CrashLoopBackOff"},
		{"crash loop, running between crashes", crashed(5, time.Minute), "restarted 5 times"},
		{"crashed long ago", crashed(5, time.Hour), ""},
		{"restarted twice", crashed(2, time.Minute), ""},
	} {
		if got := failingPod(pod(tc.cs), now); (tc.want == "") != (got == "") || !strings.Contains(got, tc.want) {
			t.Errorf("%s: %q, want %q", tc.name, got, tc.want)
		}
	}
}
