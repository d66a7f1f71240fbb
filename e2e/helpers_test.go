//go:build e2e

package e2e

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	"github.com/cellstore/cellstore/operator/api/v1alpha1"
)

// repoRoot is the repository's root (the suite runs in e2e/).
func repoRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Dir(filepath.Dir(file))
}

// run runs a command of the test machine (kubectl, helm) and returns its combined output.
func run(ctx context.Context, name string, args ...string) (string, error) {
	return runInput(ctx, nil, name, args...)
}

// runInput is run with in as the command's standard input (nil: none).
func runInput(ctx context.Context, in io.Reader, name string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Env = append(os.Environ(), "KUBECONFIG="+os.Getenv("KUBECONFIG"))
	cmd.Stdin = in
	out, err := cmd.CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("%s %s: %w\n%s", name, strings.Join(args, " "), err, out)
	}
	return string(out), nil
}

// buildPlugin builds kubectl-cellstore into a directory put first on PATH, so that `kubectl
// cellstore` finds it as kubectl finds any plugin.
func buildPlugin(ctx context.Context) {
	dir := GinkgoT().TempDir()
	out, err := run(ctx, "go", "build", "-o", filepath.Join(dir, "kubectl-cellstore"), filepath.Join(repoRoot(), "operator", "cmd", "kubectl-cellstore"))
	Expect(err).NotTo(HaveOccurred(), out)
	Expect(os.Setenv("PATH", dir+string(os.PathListSeparator)+os.Getenv("PATH"))).To(Succeed())
}

// kubectlCellstore runs `kubectl cellstore ARGS` (the plugin) and returns its output.
func kubectlCellstore(ctx context.Context, args ...string) string {
	out, err := kubectl(ctx, append([]string{"cellstore"}, args...)...)
	Expect(err).NotTo(HaveOccurred())
	return out
}

// kubectlCellstoreInput runs `kubectl cellstore ARGS` with input as its standard input.
func kubectlCellstoreInput(ctx context.Context, input string, args ...string) string {
	out, err := runInput(ctx, strings.NewReader(input), envOr("KUBECTL", "kubectl"), append([]string{"cellstore"}, args...)...)
	Expect(err).NotTo(HaveOccurred())
	return out
}

func kubectl(ctx context.Context, args ...string) (string, error) {
	return run(ctx, envOr("KUBECTL", "kubectl"), args...)
}

func helm(ctx context.Context, args ...string) (string, error) {
	return run(ctx, envOr("HELM", "helm"), args...)
}

// sampleCluster reads a StoreCluster sample of config/samples with the engine image under test.
func sampleCluster(file, ns, name string) *v1alpha1.StoreCluster {
	b, err := os.ReadFile(filepath.Join(repoRoot(), "config", "samples", file))
	Expect(err).NotTo(HaveOccurred())
	c := &v1alpha1.StoreCluster{}
	Expect(yaml.UnmarshalStrict(b, c)).To(Succeed())
	c.Namespace, c.Name = ns, name
	c.Spec.Image = engineImage
	return c
}

func getCluster(ctx context.Context, ns, name string) *v1alpha1.StoreCluster {
	c := &v1alpha1.StoreCluster{}
	Expect(crc.Get(ctx, types.NamespacedName{Namespace: ns, Name: name}, c)).To(Succeed())
	return c
}

// updateCluster changes a StoreCluster, retrying on conflicts with the operator's writes.
func updateCluster(ctx context.Context, ns, name string, change func(*v1alpha1.StoreCluster)) {
	Eventually(func() error {
		c := getCluster(ctx, ns, name)
		change(c)
		return crc.Update(ctx, c)
	}).WithContext(ctx).WithTimeout(30 * time.Second).WithPolling(200 * time.Millisecond).Should(Succeed())
}

// settled: the operator observed the current generation, the cluster is Available and nothing is
// in progress.
func settled(c *v1alpha1.StoreCluster) error {
	cond := func(t string) *metav1.Condition { return apimeta.FindStatusCondition(c.Status.Conditions, t) }
	switch {
	case c.Status.ObservedGeneration != c.Generation:
		return fmt.Errorf("generation %d not observed yet (%d)", c.Generation, c.Status.ObservedGeneration)
	case cond(v1alpha1.ConditionAvailable) == nil || cond(v1alpha1.ConditionAvailable).Status != metav1.ConditionTrue:
		return fmt.Errorf("not Available: %+v", cond(v1alpha1.ConditionAvailable))
	case cond(v1alpha1.ConditionProgressing) == nil || cond(v1alpha1.ConditionProgressing).Status != metav1.ConditionFalse:
		return fmt.Errorf("still progressing: %+v", cond(v1alpha1.ConditionProgressing))
	case c.Status.Regions.InTransition != 0:
		return fmt.Errorf("%d regions in transition", c.Status.Regions.InTransition)
	}
	return nil
}

// waitSettled waits for settled, printing the phase and the condition messages as they change.
func waitSettled(ctx context.Context, ns, name string, timeout time.Duration) *v1alpha1.StoreCluster {
	var last string
	var c *v1alpha1.StoreCluster
	Eventually(func() error {
		c = getCluster(ctx, ns, name)
		err := settled(c)
		msg := fmt.Sprintf("phase %s", c.Status.Phase)
		if err != nil {
			msg += ": " + err.Error()
		}
		if msg != last {
			GinkgoWriter.Printf("%s StoreCluster %s/%s %s\n", time.Now().Format(time.TimeOnly), ns, name, msg)
			last = msg
		}
		return err
	}).WithContext(ctx).WithTimeout(timeout).WithPolling(time.Second).Should(Succeed())
	return c
}

// shell runs `cellstore shell -e SCRIPT` in the first master pod.
func shell(ctx context.Context, ns, cluster, script string) string {
	out, err := kubectl(ctx, "-n", ns, "exec", cluster+"-master-0", "-c", "engine", "--",
		"cellstore", "shell", "--masters", cluster+":16000", "-e", script)
	Expect(err).NotTo(HaveOccurred())
	return out
}

// clientTLSDir is where e2e client pods mount their TLS Secret (withClientSecret).
const clientTLSDir = "/etc/cellstore/client"

// adminSecret is the StoreCluster's admin client certificate Secret (a superuser).
func adminSecret(cluster string) string { return cluster + "-admin-tls" }

// withClientSecret mounts the TLS Secret secret into the pod's first container and has loadcheck
// connect with it (--tls-dir).
func withClientSecret(spec *corev1.PodSpec, secret string) {
	mountClientSecret(spec, secret)
	spec.Containers[0].Args = append(spec.Containers[0].Args, "--tls-dir="+clientTLSDir)
}

// mountClientSecret mounts the TLS Secret secret into the pod's first container at clientTLSDir.
func mountClientSecret(spec *corev1.PodSpec, secret string) {
	spec.Volumes = append(spec.Volumes, corev1.Volume{Name: "client-tls", VolumeSource: corev1.VolumeSource{
		Secret: &corev1.SecretVolumeSource{SecretName: secret, DefaultMode: ptr.To(int32(0o444))}}})
	ctr := &spec.Containers[0]
	ctr.VolumeMounts = append(ctr.VolumeMounts, corev1.VolumeMount{Name: "client-tls", MountPath: clientTLSDir, ReadOnly: true})
}

// loadcheckPod runs `loadcheck run` against cluster as the user of the TLS Secret secret.
func loadcheckPod(name, cluster, secret string, args ...string) *corev1.Pod {
	p := loadcheckPodPlain(name, cluster, args...)
	withClientSecret(&p.Spec, secret)
	return p
}

func loadcheckPodPlain(name, cluster string, args ...string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"app": "loadcheck"}},
		Spec: corev1.PodSpec{
			RestartPolicy: corev1.RestartPolicyNever,
			Containers: []corev1.Container{{
				Name: "loadcheck", Image: loadcheckImage, ImagePullPolicy: corev1.PullIfNotPresent,
				Args:            append([]string{"run", "--masters", cluster + ":16000"}, args...),
				Ports:           []corev1.ContainerPort{{Name: "http", ContainerPort: 8080}},
				ReadinessProbe:  &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/healthz", Port: intstr.FromInt32(8080)}}, PeriodSeconds: 1},
				SecurityContext: restricted(),
			}},
		},
	}
}

// withCPURequest gives a client pod that measures the store's latency a CPU request: what it uses
// through the rolling restart (the e2e reports it). A pod without one is BestEffort: on a busy node
// (a rolling restart keeps some task waiting for a CPU 85-90 % of the time) the kernel gives it the
// smallest share of all, so the times it measured were partly its own waits for a CPU; one that
// requests less than it uses is held back the same way when it needs more (the Java client, using
// 0.20-0.24 cores on a request of 0.10, stood still 100-170 ms at a time in the middle of its
// slowest requests). Clients of a real store run on machines of their own.
func withCPURequest(p *corev1.Pod, cpu string) *corev1.Pod {
	for i := range p.Spec.Containers {
		c := &p.Spec.Containers[i]
		if c.Resources.Requests == nil {
			c.Resources.Requests = corev1.ResourceList{}
		}
		c.Resources.Requests[corev1.ResourceCPU] = resource.MustParse(cpu)
	}
	return p
}

// hbaseBootstrap is the bootstrap servers HBase clients in the cluster give: the region servers'
// headless Service.
func hbaseBootstrap(ns, cluster string) string { return cluster + "-regionserver." + ns + ".svc:16020" }

// hbasePodSpec is a pod of the hbaseload image (the stock HBase Java client, its
// PerformanceEvaluation and shell: engine/hbase/testdata) running command (nil: the image's
// HBaseLoad) with args, over TLS as the user of the TLS Secret secret.
func hbasePodSpec(secret string, command, args []string) corev1.PodSpec {
	spec := corev1.PodSpec{
		RestartPolicy: corev1.RestartPolicyNever,
		Containers: []corev1.Container{{
			Name: "hbase", Image: hbaseloadImage, ImagePullPolicy: corev1.PullIfNotPresent, Command: command, Args: args,
			Env: []corev1.EnvVar{{Name: "HBASE_COMPAT_TLS_CA", Value: clientTLSDir + "/ca.crt"},
				{Name: "HBASE_COMPAT_TLS_CERT", Value: clientTLSDir + "/tls.crt"}, {Name: "HBASE_COMPAT_TLS_KEY", Value: clientTLSDir + "/tls.key"}},
			VolumeMounts:    []corev1.VolumeMount{{Name: "tmp", MountPath: "/tmp"}},
			SecurityContext: restricted(),
		}},
		// The JVM, the client's PEM key store and the shell write to /tmp; the root file system is
		// read-only.
		Volumes: []corev1.Volume{{Name: "tmp", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}},
	}
	mountClientSecret(&spec, secret)
	return spec
}

// hbaseLoadPod runs the stock HBase Java client's load (HBaseLoad: writers and readers through
// the region servers' HBase protocol, loadcheck's HTTP API on :8080) against cluster in ns.
func hbaseLoadPod(name, ns, cluster, secret, table string, writers, readers, readRate int) *corev1.Pod {
	spec := hbasePodSpec(secret, nil, []string{hbaseBootstrap(ns, cluster), table, strconv.Itoa(writers), strconv.Itoa(readers), strconv.Itoa(readRate)})
	ctr := &spec.Containers[0]
	ctr.Ports = []corev1.ContainerPort{{Name: "http", ContainerPort: 8080}}
	ctr.ReadinessProbe = &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/healthz", Port: intstr.FromInt32(8080)}}, PeriodSeconds: 1}
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"app": "hbase-load"}}, Spec: spec}
}

// hbaseTool runs HBase's PerformanceEvaluation ("pe", its options) or shell ("shell", one line per
// argument) from the hbaseload image as the Job name against cluster, and returns its output.
func hbaseTool(ctx context.Context, ns, name, cluster, secret string, args ...string) string {
	command := []string{"/opt/java/bin/java", "-XX:-UsePerfData", "-Xmx512m", "-Djava.io.tmpdir=/tmp", "-Duser.home=/tmp", "-Dsun.net.inetaddr.ttl=1",
		"--add-opens", "java.base/java.nio=ALL-UNNAMED", "--add-opens", "java.base/sun.nio.ch=ALL-UNNAMED", "--add-opens", "java.base/java.io=ALL-UNNAMED",
		// JRuby first (the client's older jcodings and joni must not win), the shell's Ruby
		// without its "trace" line before the shell's jar.
		"-cp", "/opt/hbase/shell/patch:/opt/hbase/shell/jruby-complete.jar:/opt/hbase/shell/hbase-shell.jar:/opt/hbase/shell/jackson-core-asl.jar:" +
			"/opt/hbase/shell/jackson-mapper-asl.jar:/opt/hbase/pe/*:/opt/hbase/classes", "HBaseTool", hbaseBootstrap(ns, cluster)}
	return runJobSpec(ctx, ns, name, hbasePodSpec(secret, command, args))
}

func restricted() *corev1.SecurityContext {
	return &corev1.SecurityContext{
		RunAsNonRoot: ptr.To(true), RunAsUser: ptr.To(int64(65532)), AllowPrivilegeEscalation: ptr.To(false),
		ReadOnlyRootFilesystem: ptr.To(true), Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
	}
}

// loadStats is what `loadcheck run` reports.
type loadStats struct {
	Writes, Reads, FailedWrites, FailedReads, Mismatches int64
	StaleReads, StaleBehind                              int64
	MaxLatencyMs                                         float64
	MaxLatencyAt                                         time.Time
	Errors                                               []string
	Acknowledged, Lost, VerifyFailed                     int64
	// Slowest are the slowest requests, slowest first, with the client's retries.
	Slowest []struct {
		Start   time.Time
		Op, Row string
		Ms      float64
		Retries []string
	}
	// Stalls are the client process's longest stalls, longest first (the HBase Java client's
	// load only): a thread sleeping 10 ms woke this late — a garbage collection's pause or the
	// pod waiting for a CPU, during which its requests were slow in the client.
	Stalls []struct {
		Start time.Time
		Ms    float64
	}
}

func (s loadStats) String() string {
	var slow strings.Builder
	for i, r := range s.Slowest {
		if i == 3 {
			break
		}
		fmt.Fprintf(&slow, "\n  %s %s %s: %.0f ms", r.Start.Format("15:04:05.000"), r.Op, r.Row, r.Ms)
		for _, step := range r.Retries {
			slow.WriteString("\n    " + step)
		}
	}
	if len(s.Stalls) > 0 {
		stalls := make([]string, len(s.Stalls))
		for i, st := range s.Stalls {
			stalls[i] = fmt.Sprintf("%s %.0f ms", st.Start.Format("15:04:05.000"), st.Ms)
		}
		slow.WriteString("\n  the client process's longest stalls (a thread sleeping 10 ms woke this late): " + strings.Join(stalls, ", "))
	}
	return fmt.Sprintf("%d writes (%d failed), %d reads (%d failed, %d wrong, %d stale of which %d behind), slowest request %.0f ms; %d acknowledged writes checked: %d lost, %d unreadable; errors: %v; slowest requests:%s",
		s.Writes, s.FailedWrites, s.Reads, s.FailedReads, s.Mismatches, s.StaleReads, s.StaleBehind, s.MaxLatencyMs, s.Acknowledged, s.Lost, s.VerifyFailed, s.Errors, slow.String())
}

// logWatch keeps the lines of pods' logs that hold one of its words, across restarts of the
// pods (a pod deleted by a rolling restart takes its log with it): each pod's log is followed
// until the watch stops, and followed again from the new pod of the same name.
type logWatch struct {
	mu     sync.Mutex
	lines  []string
	cancel context.CancelFunc
	done   sync.WaitGroup
}

func watchLogs(ctx context.Context, ns string, pods []string, words ...string) *logWatch {
	ctx, cancel := context.WithCancel(ctx)
	w := &logWatch{cancel: cancel}
	since := metav1.Now()
	for _, pod := range pods {
		w.done.Add(1)
		go func() {
			defer w.done.Done()
			seen := map[string]bool{}
			for ctx.Err() == nil {
				r, err := kube.CoreV1().Pods(ns).GetLogs(pod, &corev1.PodLogOptions{Follow: true, SinceTime: &since}).Stream(ctx)
				if err == nil {
					sc := bufio.NewScanner(r)
					sc.Buffer(make([]byte, 64<<10), 1<<20)
					for sc.Scan() {
						l := sc.Text()
						if seen[l] {
							continue // read again after a reconnection
						}
						for _, word := range words {
							if strings.Contains(l, word) {
								seen[l] = true
								w.mu.Lock()
								if len(w.lines) < 200 {
									w.lines = append(w.lines, pod+": "+l)
								}
								w.mu.Unlock()
								break
							}
						}
					}
					r.Close()
				}
				select {
				case <-ctx.Done():
				case <-time.After(500 * time.Millisecond):
				}
			}
		}()
	}
	return w
}

// stop ends the watch and returns the lines kept.
func (w *logWatch) stop() []string {
	w.cancel()
	w.done.Wait()
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Clone(w.lines)
}

// withHBaseClientRetries fills the slowest requests of the hbaseload pod's stats with the retries
// its client logged for them: lines of the request's thread (named in its Op) from its start to
// its end, read from the pod's log since since.
func withHBaseClientRetries(ctx context.Context, ns, pod string, since time.Time, s loadStats) loadStats {
	r, err := kube.CoreV1().Pods(ns).GetLogs(pod, &corev1.PodLogOptions{SinceTime: &metav1.Time{Time: since}}).Stream(ctx)
	if err != nil {
		s.Errors = append(s.Errors, "reading the client's log: "+err.Error())
		return s
	}
	defer r.Close()
	var b bytes.Buffer
	_, _ = io.Copy(&b, io.LimitReader(r, 16<<20))
	lines := strings.Split(b.String(), "\n")
	for i := range s.Slowest {
		req := &s.Slowest[i]
		open, closing := strings.LastIndex(req.Op, "("), strings.LastIndex(req.Op, ")")
		if open < 0 || closing < open {
			continue
		}
		thread := "[" + req.Op[open+1:closing] + "]"
		end := req.Start.Add(time.Duration(req.Ms*float64(time.Millisecond)) + 10*time.Millisecond)
		for _, l := range lines {
			at, rest, ok := strings.Cut(l, " ")
			if !ok || !strings.HasPrefix(rest, thread) {
				continue
			}
			t, err := time.Parse("2006-01-02T15:04:05.000Z", at)
			if err != nil || t.Before(req.Start.Add(-10*time.Millisecond)) || t.After(end) {
				continue
			}
			req.Retries = append(req.Retries, fmt.Sprintf("+%dms %s", t.Sub(req.Start).Milliseconds(), strings.TrimPrefix(rest, thread+" ")))
			if len(req.Retries) == 20 {
				break
			}
		}
	}
	return s
}

// loadcheck calls the load pod's HTTP API through the API server's pod proxy (any cluster).
func loadcheck(ctx context.Context, ns, pod, method, path string) loadStats {
	req := kube.CoreV1().RESTClient().Verb(method).Namespace(ns).Resource("pods").Name(pod + ":8080").SubResource("proxy").Suffix(path)
	var b []byte
	Eventually(func() error {
		var err error
		b, err = req.DoRaw(ctx)
		return err
	}).WithContext(ctx).WithTimeout(6 * time.Minute).WithPolling(time.Second).Should(Succeed())
	var s loadStats
	Expect(json.Unmarshal(b, &s)).To(Succeed(), "loadcheck answered %s", b)
	return s
}

// runJob runs loadcheck as a Job to completion, as the user of the TLS Secret secret, and returns
// its output.
func runJob(ctx context.Context, ns, name, secret string, args ...string) string {
	spec := corev1.PodSpec{
		RestartPolicy: corev1.RestartPolicyNever,
		Containers: []corev1.Container{{Name: "loadcheck", Image: loadcheckImage, ImagePullPolicy: corev1.PullIfNotPresent,
			Args: args, SecurityContext: restricted()}},
	}
	withClientSecret(&spec, secret)
	return runJobSpec(ctx, ns, name, spec)
}

// runJobSpec runs a Job of one pod to completion and returns its first container's output.
func runJobSpec(ctx context.Context, ns, name string, spec corev1.PodSpec) string {
	job := &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec:       batchv1.JobSpec{BackoffLimit: ptr.To(int32(0)), Template: corev1.PodTemplateSpec{Spec: spec}},
	}
	_, err := kube.BatchV1().Jobs(ns).Create(ctx, job, metav1.CreateOptions{})
	Expect(err).NotTo(HaveOccurred())
	var done *batchv1.Job
	Eventually(func(g Gomega) {
		j, err := kube.BatchV1().Jobs(ns).Get(ctx, name, metav1.GetOptions{})
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(j.Status.Succeeded+j.Status.Failed).To(BeNumerically(">", 0), "job %s has not finished", name)
		done = j
	}).WithContext(ctx).WithTimeout(5 * time.Minute).WithPolling(time.Second).Should(Succeed())
	pods, err := kube.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "job-name=" + name})
	Expect(err).NotTo(HaveOccurred())
	Expect(pods.Items).NotTo(BeEmpty())
	out, _ := podLogs(ctx, ns, pods.Items[0].Name, spec.Containers[0].Name)
	Expect(done.Status.Succeeded).To(BeEquivalentTo(1), "job %s failed: %s", name, out)
	return out
}

// podUIDs maps the pods of a StoreCluster (by name) to their UIDs.
func podUIDs(ctx context.Context, ns, cluster string) map[string]types.UID {
	pods, err := kube.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/instance=" + cluster})
	Expect(err).NotTo(HaveOccurred())
	out := map[string]types.UID{}
	for _, p := range pods.Items {
		out[p.Name] = p.UID
	}
	return out
}

// events of a StoreCluster in the order they were last seen.
func clusterEvents(ctx context.Context, ns, name string) []corev1.Event {
	list, err := kube.CoreV1().Events(ns).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.kind=StoreCluster,involvedObject.name=" + name})
	Expect(err).NotTo(HaveOccurred())
	evs := list.Items
	slices.SortStableFunc(evs, func(a, b corev1.Event) int { return eventTime(a).Compare(eventTime(b)) })
	return evs
}

func eventTime(e corev1.Event) time.Time {
	switch {
	case !e.LastTimestamp.IsZero():
		return e.LastTimestamp.Time
	case !e.EventTime.IsZero():
		return e.EventTime.Time
	}
	return e.CreationTimestamp.Time
}

// serverRegions is the number of regions the master assigns to a region server pod.
func serverRegions(c *v1alpha1.StoreCluster, pod string) (int32, bool) {
	for _, s := range c.Status.Regions.PerServer {
		if s.Pod == pod {
			return s.Regions, true
		}
	}
	return 0, false
}

// metricsOf fetches a pod's /metrics through the API server's pod proxy.
func metricsOf(ctx context.Context, ns, pod string, port int) string {
	b, err := kube.CoreV1().Pods(ns).ProxyGet("https", pod, fmt.Sprint(port), "/metrics", nil).DoRaw(ctx)
	Expect(err).NotTo(HaveOccurred())
	return string(b)
}

// verifyRows runs `loadcheck verify` as the Job job: every one of rows rows of table must be
// there with its value, and no other. It returns the Job's output.
func verifyRows(ctx context.Context, ns, job, cluster, table string, rows int) string {
	out := runJob(ctx, ns, job, adminSecret(cluster), "verify", "--masters", cluster+":16000", "--table", table, "--rows", fmt.Sprint(rows))
	var v struct{ Rows, Missing, Wrong, Extra int }
	Expect(json.Unmarshal([]byte(strings.TrimSpace(out)), &v)).To(Succeed())
	Expect(v.Rows).To(Equal(rows))
	Expect(v.Missing + v.Wrong + v.Extra).To(BeZero())
	return out
}

// forceDelete deletes a pod of the cluster with no grace period and waits until its replacement
// is Ready and the cluster has settled. It returns when the pod was deleted.
func forceDelete(ctx context.Context, ns, cluster, pod string) time.Time {
	old, err := kube.CoreV1().Pods(ns).Get(ctx, pod, metav1.GetOptions{})
	Expect(err).NotTo(HaveOccurred())
	deleted := time.Now()
	Expect(kube.CoreV1().Pods(ns).Delete(ctx, pod, metav1.DeleteOptions{GracePeriodSeconds: ptr.To(int64(0))})).To(Succeed())
	Eventually(func(g Gomega) {
		p, err := kube.CoreV1().Pods(ns).Get(ctx, pod, metav1.GetOptions{})
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(p.UID).NotTo(Equal(old.UID))
		g.Expect(podReady(p)).To(BeTrue())
		g.Expect(settled(getCluster(ctx, ns, cluster))).To(Succeed())
	}).WithContext(ctx).WithTimeout(5 * time.Minute).WithPolling(time.Second).Should(Succeed())
	return deleted
}

// conditionOf is the StoreCluster's condition of type t, or nil.
func conditionOf(c *v1alpha1.StoreCluster, t string) *metav1.Condition {
	for i := range c.Status.Conditions {
		if c.Status.Conditions[i].Type == t {
			return &c.Status.Conditions[i]
		}
	}
	return nil
}

// deployDevS3 applies config/samples/dev-s3-server.yaml in ns — the development S3 server
// "dev-s3" (MinIO built from its Go module), its keys in the Secret "dev-s3-keys" and the Job that
// makes the bucket "cellstore" — with the images under test, and waits for the bucket.
func deployDevS3(ctx context.Context, ns string) {
	Expect(minioImage).NotTo(BeEmpty(), "set E2E_MINIO_IMAGE: hack/test.sh e2e builds, loads and sets it")
	b, err := os.ReadFile(filepath.Join(repoRoot(), "config", "samples", "dev-s3-server.yaml"))
	Expect(err).NotTo(HaveOccurred())
	manifest := strings.NewReplacer("image: docker.io/cellstore/minio:dev", "image: "+minioImage,
		"image: docker.io/cellstore/engine:v0.1.0", "image: "+engineImage).Replace(string(b))
	Expect(manifest).To(ContainSubstring(minioImage))
	Expect(manifest).To(ContainSubstring(engineImage))
	file := filepath.Join(GinkgoT().TempDir(), "dev-s3-server.yaml")
	Expect(os.WriteFile(file, []byte(manifest), 0o644)).To(Succeed())
	_, err = kubectl(ctx, "-n", ns, "apply", "-f", file)
	Expect(err).NotTo(HaveOccurred())
	Eventually(func(g Gomega) {
		j, err := kube.BatchV1().Jobs(ns).Get(ctx, "dev-s3-bucket", metav1.GetOptions{})
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(j.Status.Succeeded).To(BeEquivalentTo(1), "the bucket Job has not succeeded (failed pods: %d)", j.Status.Failed)
	}).WithContext(ctx).WithTimeout(4 * time.Minute).WithPolling(time.Second).Should(Succeed())
}

// storeUser applies a StoreUser of cluster and waits until it is Ready; its credential is the
// Secret of its name.
func storeUser(ctx context.Context, ns, cluster, name, auth string, acls ...v1alpha1.UserACL) string {
	u := &v1alpha1.StoreUser{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: v1alpha1.StoreUserSpec{Cluster: cluster, Authentication: v1alpha1.UserAuthentication{Type: auth}, ACLs: acls}}
	Eventually(func() error {
		cur := &v1alpha1.StoreUser{}
		if err := crc.Get(ctx, types.NamespacedName{Namespace: ns, Name: name}, cur); err != nil {
			return crc.Create(ctx, u)
		}
		cur.Spec = u.Spec
		return crc.Update(ctx, cur)
	}).WithContext(ctx).WithTimeout(time.Minute).WithPolling(time.Second).Should(Succeed())
	Eventually(func() string {
		cur := &v1alpha1.StoreUser{}
		if err := crc.Get(ctx, types.NamespacedName{Namespace: ns, Name: name}, cur); err != nil {
			return err.Error()
		}
		c := apimeta.FindStatusCondition(cur.Status.Conditions, "Ready")
		if c == nil || c.ObservedGeneration != cur.Generation {
			return "not yet looked at"
		}
		return string(c.Status) + " " + c.Reason + ": " + c.Message
	}).WithContext(ctx).WithTimeout(2 * time.Minute).WithPolling(time.Second).Should(HavePrefix("True"))
	return name
}

// shellAs runs `cellstore shell -e SCRIPT` in a pod of its own as the user of the StoreUser
// Secret secret (auth tls or token; secret "": with the cluster's CA bundle only, no credential),
// and returns its output and whether it succeeded.
func shellAs(ctx context.Context, ns, cluster, secret, auth, script string) (string, bool) {
	args := []string{"shell", "--masters", cluster + ":16000", "-e", script, "--tls-ca-file", clientTLSDir + "/ca.crt"}
	vol := corev1.Volume{Name: "client-tls"}
	switch {
	case secret == "":
		vol.VolumeSource = corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: cluster + "-ca-bundle"}}}
	case auth == "token":
		vol.VolumeSource = corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: secret, DefaultMode: ptr.To(int32(0o444))}}
		args = append(args, "--token-file", clientTLSDir+"/token")
	default:
		vol.VolumeSource = corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: secret, DefaultMode: ptr.To(int32(0o444))}}
		args = append(args, "--tls-cert-file", clientTLSDir+"/tls.crt", "--tls-key-file", clientTLSDir+"/tls.key")
	}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{GenerateName: "shell-"},
		Spec: corev1.PodSpec{
			RestartPolicy: corev1.RestartPolicyNever,
			Volumes:       []corev1.Volume{vol},
			Containers: []corev1.Container{{Name: "shell", Image: engineImage, ImagePullPolicy: corev1.PullIfNotPresent,
				Command: []string{"cellstore"}, Args: args, SecurityContext: restricted(),
				VolumeMounts: []corev1.VolumeMount{{Name: "client-tls", MountPath: clientTLSDir, ReadOnly: true}}}},
		},
	}
	return runPod(ctx, ns, pod)
}

// runPod runs a pod that ends on its own (RestartPolicy Never), waits until it has, deletes it,
// and returns its first container's output and whether it succeeded.
func runPod(ctx context.Context, ns string, pod *corev1.Pod) (string, bool) {
	created, err := kube.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{})
	Expect(err).NotTo(HaveOccurred())
	defer func() {
		_ = kube.CoreV1().Pods(ns).Delete(context.Background(), created.Name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)})
	}()
	var phase corev1.PodPhase
	Eventually(func(g Gomega) {
		p, err := kube.CoreV1().Pods(ns).Get(ctx, created.Name, metav1.GetOptions{})
		g.Expect(err).NotTo(HaveOccurred())
		phase = p.Status.Phase
		g.Expect(phase).To(BeElementOf(corev1.PodSucceeded, corev1.PodFailed))
	}).WithContext(ctx).WithTimeout(2 * time.Minute).WithPolling(500 * time.Millisecond).Should(Succeed())
	out, err := podLogs(ctx, ns, created.Name, pod.Spec.Containers[0].Name)
	Expect(err).NotTo(HaveOccurred())
	return out, phase == corev1.PodSucceeded
}

// podCPUSample is a pod's CPU time (nanos, over all its containers) as its kubelet measured it at.
type podCPUSample struct {
	uid   string
	at    time.Time
	nanos uint64
}

// podCPU is every pod's CPU time in ns so far, by name, from the kubelets' summary API (each
// node's /stats/summary through the API server): two samples give the cores each pod used
// between them, on kind or any cluster as on the local one. A pod the sample has no CPU figure
// for is left out; a node that does not answer is skipped.
func podCPU(ctx context.Context, ns string) map[string]podCPUSample {
	nodes, err := kube.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	Expect(err).NotTo(HaveOccurred())
	out := map[string]podCPUSample{}
	for _, n := range nodes.Items {
		raw, err := kube.CoreV1().RESTClient().Get().AbsPath("/api/v1/nodes", n.Name, "proxy", "stats", "summary").DoRaw(ctx)
		if err != nil {
			GinkgoWriter.Printf("node %s's stats summary: %v\n", n.Name, err)
			continue
		}
		var summary struct {
			Pods []struct {
				PodRef struct {
					Name      string `json:"name"`
					Namespace string `json:"namespace"`
					UID       string `json:"uid"`
				} `json:"podRef"`
				CPU *struct {
					Time                 time.Time `json:"time"`
					UsageCoreNanoSeconds *uint64   `json:"usageCoreNanoSeconds"`
				} `json:"cpu"`
			} `json:"pods"`
		}
		Expect(json.Unmarshal(raw, &summary)).To(Succeed(), "node %s's stats summary", n.Name)
		for _, p := range summary.Pods {
			if p.PodRef.Namespace != ns || p.CPU == nil || p.CPU.UsageCoreNanoSeconds == nil {
				continue
			}
			out[p.PodRef.Name] = podCPUSample{uid: p.PodRef.UID, at: p.CPU.Time, nanos: *p.CPU.UsageCoreNanoSeconds}
		}
	}
	return out
}

// podCPUBetween says how many cores each pod that lived through both samples (same UID) used
// between them, the busiest first, with its CPU request: "dev-s3-0 0.52 (requests 0.35), ...".
func podCPUBetween(ctx context.Context, ns string, before, after map[string]podCPUSample) string {
	type use struct {
		name  string
		cores float64
	}
	var uses []use
	for name, a := range after {
		b, ok := before[name]
		if !ok || b.uid != a.uid || !a.at.After(b.at) || a.nanos < b.nanos {
			continue
		}
		uses = append(uses, use{name, float64(a.nanos-b.nanos) / float64(a.at.Sub(b.at).Nanoseconds())})
	}
	if len(uses) == 0 {
		return "unknown (no pod of the namespace in both samples)"
	}
	slices.SortFunc(uses, func(x, y use) int { // busiest first
		return cmp.Or(cmp.Compare(y.cores, x.cores), strings.Compare(x.name, y.name))
	})
	parts := make([]string, 0, len(uses))
	for _, u := range uses {
		req := "none"
		if pod, err := kube.CoreV1().Pods(ns).Get(ctx, u.name, metav1.GetOptions{}); err == nil {
			var m int64
			for _, c := range pod.Spec.Containers {
				if q, ok := c.Resources.Requests[corev1.ResourceCPU]; ok {
					m += q.MilliValue()
				}
			}
			if m > 0 {
				req = fmt.Sprintf("%.2f", float64(m)/1000)
			}
		}
		parts = append(parts, fmt.Sprintf("%s %.2f (requests %s)", u.name, u.cores, req))
	}
	return strings.Join(parts, ", ")
}

// pressure is this machine's count of microseconds during which some task waited for resource
// ("cpu": a runnable task for a CPU; "io": a task for the disk) — PSI, /proc/pressure/RESOURCE
// "some total"; false where the kernel has none. The local cluster's node is this machine, so over
// an interval it says how starved that cluster was (on another $KUBECONFIG it says nothing about
// the cluster).
func pressure(resource string) (float64, bool) {
	b, err := os.ReadFile("/proc/pressure/" + resource)
	if err != nil {
		return 0, false
	}
	for _, line := range strings.Split(string(b), "\n") {
		if !strings.HasPrefix(line, "some ") {
			continue
		}
		for _, f := range strings.Fields(line) {
			if v, ok := strings.CutPrefix(f, "total="); ok {
				n, err := strconv.ParseFloat(v, 64)
				return n, err == nil
			}
		}
	}
	return 0, false
}

// pressureSince is the share of the time since start during which some task waited for resource,
// from p0 = pressure(resource) at start: "85%", or "unknown".
func pressureSince(resource string, p0 float64, had bool, start time.Time) string {
	p1, ok := pressure(resource)
	if !ok || !had {
		return "unknown"
	}
	return fmt.Sprintf("%.0f%%", (p1-p0)/float64(time.Since(start).Microseconds())*100)
}
