//go:build envtest

package plugin

import (
	"bytes"
	"context"
	"io"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/cellstore/cellstore/operator/api/v1alpha1"
	"github.com/cellstore/cellstore/operator/internal/resources"
	"github.com/cellstore/cellstore/operator/internal/testenv"
)

// execCall is one command the plugin ran in a pod.
type execCall struct {
	ns, pod, container string
	cmd                []string
}

// The plugin's commands against a real kube-apiserver: what they read (status), what they change
// (annotations the operator acts on, StoreBackups) and what they run in which pod. What the shell
// does with it, and exec and logs through a kubelet, the e2e suite runs on the local cluster.
func TestPlugin(t *testing.T) {
	te, err := testenv.Start(testenv.Options{CRDDirs: []string{filepath.Join("..", "..", "..", "config", "crd", "bases")}})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = te.Stop() }()
	ctx := context.Background()
	now := time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC)
	var out, errOut bytes.Buffer
	var calls []execCall
	env, err := NewEnv(te.Config, "db", strings.NewReader(""), &out, &errOut)
	if err != nil {
		t.Fatal(err)
	}
	env.Now = func() time.Time { return now }
	env.Exec = func(_ context.Context, ns, pod, container string, cmd []string, _ io.Reader, out, _ io.Writer) error {
		calls = append(calls, execCall{ns, pod, container, cmd})
		_, err := io.WriteString(out, "shell output\n")
		return err
	}
	run := func(args ...string) (string, error) {
		out.Reset()
		cmd := NewCommand(func(ConnectOptions) (*Env, error) { return env, nil })
		cmd.SetArgs(args)
		cmd.SetOut(&out)
		err := cmd.ExecuteContext(ctx)
		return out.String(), err
	}
	cl := env.Client
	if err := cl.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "db"}}); err != nil {
		t.Fatal(err)
	}
	c := &v1alpha1.StoreCluster{ObjectMeta: metav1.ObjectMeta{Namespace: "db", Name: "prod"},
		Spec: v1alpha1.StoreClusterSpec{Image: "cellstore/engine:test", Storage: v1alpha1.StorageSpec{
			ExistingClaim: &v1alpha1.ExistingClaimStorage{ClaimName: "data"}}}}
	if err := cl.Create(ctx, c); err != nil {
		t.Fatal(err)
	}
	c.Status = v1alpha1.StoreClusterStatus{Phase: v1alpha1.PhaseRunning, Version: "v1.4.0",
		Masters:       v1alpha1.MastersStatus{Replicas: 2, Ready: 2, Updated: 2, Active: "prod-master-1.prod-master.db.svc:16000"},
		RegionServers: v1alpha1.RegionServersStatus{Replicas: 2, Ready: 2, Updated: 2},
		Regions: v1alpha1.RegionsStatus{Total: 12, PerServer: []v1alpha1.ServerRegions{
			{Server: "prod-regionserver-0.prod-regionserver.db.svc:16020", Pod: "prod-regionserver-0", Regions: 7, State: "live"},
			{Server: "prod-regionserver-1.prod-regionserver.db.svc:16020", Pod: "prod-regionserver-1", Regions: 5, State: "live", Draining: true}}},
		Conditions: []metav1.Condition{{Type: v1alpha1.ConditionDegraded, Status: metav1.ConditionFalse, Reason: "AsExpected",
			Message: "nothing needs attention", LastTransitionTime: metav1.NewTime(now.Add(-90 * time.Second))}}}
	if err := cl.Status().Update(ctx, c); err != nil {
		t.Fatal(err)
	}
	pod := func(name string, g resources.Group, ready bool) {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "db", Name: name, Labels: resources.SelectorLabels(c, g)},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: resources.EngineContainer, Image: "x"}}}}
		if err := cl.Create(ctx, p); err != nil {
			t.Fatal(err)
		}
		st := corev1.ConditionFalse
		if ready {
			st = corev1.ConditionTrue
		}
		p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: st}}
		if err := cl.Status().Update(ctx, p); err != nil {
			t.Fatal(err)
		}
	}
	pod("prod-master-0", resources.GroupMaster, false)
	pod("prod-master-1", resources.GroupMaster, true)
	pod("prod-regionserver-0", resources.GroupRegionServer, true)
	pod("prod-regionserver-1", resources.GroupRegionServer, true)
	if err := cl.Create(ctx, &corev1.Event{ObjectMeta: metav1.ObjectMeta{Namespace: "db", Name: "prod.restart1"},
		InvolvedObject: corev1.ObjectReference{Kind: "StoreCluster", Name: "prod", Namespace: "db"}, Reason: "RollingRestart",
		Message:       "draining region server pod prod-regionserver-0 before restarting it (1 of 2 to restart): spec.image",
		LastTimestamp: metav1.NewTime(now.Add(-5 * time.Minute)), Type: corev1.EventTypeNormal}); err != nil {
		t.Fatal(err)
	}

	// status: the cluster, its conditions, pods with their roles, regions and states, the last restarts.
	got, err := run("status", "prod")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"Phase:", "Running", "Version:         v1.4.0", "2/2 ready", "12, 0 in transition", "Degraded", "AsExpected", "1m30s",
		"prod-master-1", "active", "standby", "prod-regionserver-1", "live (draining)", "Last restarts:", "5m0s",
		"before restarting it (1 of 2 to restart): spec.image"} {
		if !strings.Contains(got, want) {
			t.Errorf("status lacks %q:\n%s", want, got)
		}
	}
	if _, err := run("status", "nope"); err == nil || !strings.Contains(err.Error(), "not found in namespace db") {
		t.Errorf("status of a missing cluster: %v", err)
	}
	if len(calls) != 0 {
		t.Fatalf("status ran %v in a pod", calls)
	}
	if got, err = run("status", "prod", "--master"); err != nil || !strings.Contains(got, "shell output") {
		t.Fatalf("status --master: %v\n%s", err, got)
	}

	// Region and server operations: cellstore shell in the ready master's engine container.
	calls = nil
	for _, tc := range []struct {
		args   []string
		script string
	}{
		{[]string{"drain", "prod", "prod-regionserver-1"}, "drain 'prod-regionserver-1.prod-regionserver.db.svc:16020'"},
		{[]string{"undrain", "prod", "prod-regionserver-1.prod-regionserver.db.svc:16020"}, "undrain 'prod-regionserver-1.prod-regionserver.db.svc:16020'"},
		{[]string{"balance", "prod"}, "balancer"},
		{[]string{"split", "prod", "orders"}, "split 'orders'"},
		{[]string{"split", "prod", "0000018f00000001", "row'5"}, `split '0000018f00000001', 'row\'5'`},
		{[]string{"move", "prod", "0000018f00000001", "prod-regionserver-0"}, "move '0000018f00000001', 'prod-regionserver-0.prod-regionserver.db.svc:16020'"},
		{[]string{"move", "prod", "0000018f00000001"}, "move '0000018f00000001'"},
		{[]string{"shell", "prod", "-e", "list"}, "list"},
	} {
		calls = nil
		if _, err := run(tc.args...); err != nil {
			t.Fatalf("%v: %v", tc.args, err)
		}
		want := []string{"cellstore", "shell", "--masters", "prod-master.db.svc:16000", "-e", tc.script}
		if len(calls) != 1 || calls[0].pod != "prod-master-1" || calls[0].container != "engine" || calls[0].ns != "db" ||
			strings.Join(calls[0].cmd, "\x00") != strings.Join(want, "\x00") {
			t.Errorf("%v ran %+v, want %q in prod-master-1", tc.args, calls, want)
		}
	}
	if _, err := run("drain", "prod", "other-regionserver-0"); err == nil || !strings.Contains(err.Error(), "not a region server of StoreCluster prod") {
		t.Errorf("drain of another cluster's pod: %v", err)
	}

	// Changes through the operator: annotations.
	if _, err := run("restart", "prod"); err != nil {
		t.Fatal(err)
	}
	if _, err := run("hibernate", "prod", "on"); err != nil {
		t.Fatal(err)
	}
	cur := &v1alpha1.StoreCluster{}
	if err := cl.Get(ctx, client.ObjectKeyFromObject(c), cur); err != nil {
		t.Fatal(err)
	}
	if cur.Annotations[v1alpha1.AnnotationRestartedAt] != "2026-11-27T12:00:00Z" || cur.Annotations[v1alpha1.AnnotationHibernation] != "on" {
		t.Fatalf("annotations %v", cur.Annotations)
	}
	if _, err := run("hibernate", "prod", "maybe"); err == nil {
		t.Error("hibernate maybe was taken")
	}
	if _, err := run("hibernate", "prod", "off"); err != nil {
		t.Fatal(err)
	}
	if err := cl.Get(ctx, client.ObjectKeyFromObject(c), cur); err != nil {
		t.Fatal(err)
	}
	if _, ok := cur.Annotations[v1alpha1.AnnotationHibernation]; ok {
		t.Fatalf("hibernate off left %v", cur.Annotations)
	}

	// backup: refused without a backup location, else a StoreBackup.
	if _, err := run("backup", "prod"); err == nil || !strings.Contains(err.Error(), "no backup location") {
		t.Errorf("backup without spec.backup: %v", err)
	}
	cur.Spec.Backup = &v1alpha1.BackupSpec{S3: v1alpha1.S3Location{Endpoint: "http://s3:9000", Bucket: "backups",
		CredentialsSecret: &corev1.LocalObjectReference{Name: "keys"}}}
	if err := cl.Update(ctx, cur); err != nil {
		t.Fatal(err)
	}
	if _, err := run("backup", "prod", "--tables", "default:orders,sales:items"); err != nil {
		t.Fatal(err)
	}
	b := &v1alpha1.StoreBackup{}
	if err := cl.Get(ctx, client.ObjectKey{Namespace: "db", Name: "prod-20261127120000"}, b); err != nil {
		t.Fatal(err)
	}
	if b.Spec.Cluster != "prod" || strings.Join(b.Spec.Tables, ",") != "default:orders,sales:items" {
		t.Fatalf("backup %+v", b.Spec)
	}
	if _, err := run("logs", "prod", "--role", "zookeeper"); err == nil || !strings.Contains(err.Error(), "master or regionserver") {
		t.Errorf("logs of a bad role: %v", err)
	}

	// Completion: NAME with the namespace's StoreClusters, SERVER with the cluster's region server
	// pods, POD with its pods (of --role); -n with the namespaces. As `kubectl-cellstore __complete`
	// and as kubectl runs it for `kubectl cellstore <TAB>`: kubectl_complete-cellstore with the words.
	for _, o := range []struct{ ns, name string }{{"db", "staging"}, {"other", "elsewhere"}} {
		if o.ns == "other" {
			if err := cl.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "other"}}); err != nil {
				t.Fatal(err)
			}
		}
		if err := cl.Create(ctx, &v1alpha1.StoreCluster{ObjectMeta: metav1.ObjectMeta{Namespace: o.ns, Name: o.name},
			Spec: *c.Spec.DeepCopy()}); err != nil {
			t.Fatal(err)
		}
	}
	// A hibernated cluster says so, with what it will enable on waking.
	staging := &v1alpha1.StoreCluster{}
	if err := cl.Get(ctx, client.ObjectKey{Namespace: "db", Name: "staging"}, staging); err != nil {
		t.Fatal(err)
	}
	staging.Status = v1alpha1.StoreClusterStatus{Phase: v1alpha1.PhaseHibernated, Hibernation: &v1alpha1.HibernationStatus{
		State: v1alpha1.HibernationHibernated, Since: metav1.NewTime(now.Add(-2 * time.Hour)), Tables: []string{"default:a", "default:b"}}}
	if err := cl.Status().Update(ctx, staging); err != nil {
		t.Fatal(err)
	}
	if got, err := run("status", "staging"); err != nil || !strings.Contains(got, "Phase:           Hibernated") ||
		!strings.Contains(got, "Hibernation:     Hibernated since 2h0m (2 tables to enable on waking)") {
		t.Errorf("status of a hibernated cluster (%v):\n%s", err, got)
	}
	connect := func(ConnectOptions) (*Env, error) { return env, nil }
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"status", ""}, "prod\nstaging\n:4\n"},
		{[]string{"-n", "db", "restart", "st"}, "staging\n:4\n"},
		{[]string{"hibernate", "p"}, "prod\n:4\n"},
		{[]string{"drain", "prod", ""}, "prod-regionserver-0\nprod-regionserver-1\n:4\n"},
		{[]string{"undrain", "prod", "prod-regionserver-1"}, "prod-regionserver-1\n:4\n"},
		{[]string{"move", "prod", "0000018f00000001", ""}, "prod-regionserver-0\nprod-regionserver-1\n:4\n"},
		{[]string{"move", "prod", ""}, ":4\n"},
		{[]string{"logs", "prod", ""}, "prod-master-0\nprod-master-1\nprod-regionserver-0\nprod-regionserver-1\n:4\n"},
		{[]string{"logs", "--role", "master", "prod", ""}, "prod-master-0\nprod-master-1\n:4\n"},
		{[]string{"drain", "nope", ""}, ":5\n"},
		{[]string{"status", "prod", ""}, ":4\n"},
	} {
		var comp, helper, stderr bytes.Buffer
		if err := Main(ctx, append([]string{"kubectl-cellstore", "__complete"}, tc.args...), connect, &comp, &stderr); err != nil {
			t.Fatalf("__complete %q: %v", tc.args, err)
		}
		if comp.String() != tc.want {
			t.Errorf("__complete %q: %q, want %q", tc.args, comp.String(), tc.want)
		}
		if err := Main(ctx, append([]string{"/home/me/bin/kubectl_complete-cellstore"}, tc.args...), connect, &helper, &stderr); err != nil {
			t.Fatalf("kubectl_complete-cellstore %q: %v", tc.args, err)
		}
		if helper.String() != comp.String() {
			t.Errorf("kubectl_complete-cellstore %q: %q, __complete %q", tc.args, helper.String(), comp.String())
		}
	}
	var comp bytes.Buffer
	if err := Main(ctx, []string{CompletionHelper, "-n", ""}, connect, &comp, io.Discard); err != nil {
		t.Fatal(err)
	}
	for _, ns := range []string{"db", "default", "other"} {
		if !strings.Contains(comp.String(), "\n"+ns+"\n") && !strings.HasPrefix(comp.String(), ns+"\n") {
			t.Errorf("-n completion lacks namespace %s: %q", ns, comp.String())
		}
	}
}
