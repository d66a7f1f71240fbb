package charts

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"
)

const (
	chart = "cellstore-operator"
	// kubeVersion is what templates render for (helm built with go install reports v1.20 otherwise).
	kubeVersion = "v1.34.4"
)

// helm finds the helm binary: $HELM, else the one the Makefile installs into bin/.
func helm(t *testing.T) string {
	t.Helper()
	if h := os.Getenv("HELM"); h != "" {
		return h
	}
	matches, _ := filepath.Glob("../bin/helm-*")
	if len(matches) == 0 {
		t.Fatal("helm not found: run the tests with make (it installs helm into bin/), or set HELM")
	}
	return matches[len(matches)-1]
}

func run(t *testing.T, args ...string) (string, error) {
	t.Helper()
	cmd := exec.Command(helm(t), args...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	if err != nil {
		return out.String() + errb.String(), errors.New(errb.String())
	}
	return out.String(), nil
}

// render runs helm template (release "ops" in cellstore-system) with --set values and returns the
// objects by kind/name.
func render(t *testing.T, sets ...string) map[string]*unstructured.Unstructured {
	t.Helper()
	return renderRelease(t, "ops", "cellstore-system", sets...)
}

// renderRelease renders the chart as release name in namespace ns, CRDs included.
func renderRelease(t *testing.T, name, ns string, sets ...string) map[string]*unstructured.Unstructured {
	t.Helper()
	return renderChart(t, chart, name, ns, nil, sets...)
}

// renderChart renders the chart in dir as release name in namespace ns, CRDs included, with extra
// helm flags.
func renderChart(t *testing.T, dir, name, ns string, flags []string, sets ...string) map[string]*unstructured.Unstructured {
	t.Helper()
	args := append([]string{"template", name, dir, "--namespace", ns, "--include-crds", "--kube-version", kubeVersion}, flags...)
	for _, s := range sets {
		args = append(args, "--set", s)
	}
	out, err := run(t, args...)
	if err != nil {
		t.Fatalf("helm template %v: %v", sets, err)
	}
	objs := map[string]*unstructured.Unstructured{}
	dec := utilyaml.NewYAMLOrJSONDecoder(strings.NewReader(out), 4096)
	for {
		var m map[string]any
		if err := dec.Decode(&m); err != nil {
			if errors.Is(err, io.EOF) {
				break
			}
			t.Fatalf("rendered YAML does not parse: %v", err)
		}
		if m == nil {
			continue
		}
		u := &unstructured.Unstructured{Object: m}
		key := u.GetKind() + "/" + u.GetName()
		if u.GetNamespace() != "" && u.GetNamespace() != ns {
			key = u.GetKind() + "/" + u.GetNamespace() + "/" + u.GetName() // outside the release namespace
		}
		objs[key] = u
	}
	return objs
}

func get(t *testing.T, objs map[string]*unstructured.Unstructured, key string) *unstructured.Unstructured {
	t.Helper()
	o, ok := objs[key]
	if !ok {
		keys := make([]string, 0, len(objs))
		for k := range objs {
			keys = append(keys, k)
		}
		t.Fatalf("%s not rendered; rendered: %v", key, keys)
	}
	return o
}

func TestLint(t *testing.T) {
	for _, sets := range [][]string{nil, {"metrics.serviceMonitor.enabled=true", "dashboards.enabled=true", "watchNamespaces={a,b}", "replicaCount=1"}} {
		args := []string{"lint", chart, "--strict"}
		for _, s := range sets {
			args = append(args, "--set", s)
		}
		if out, err := run(t, args...); err != nil {
			t.Errorf("helm lint %v:\n%s", sets, out)
		}
	}
}

func TestDefaults(t *testing.T) {
	objs := render(t)
	d := get(t, objs, "Deployment/ops-cellstore-operator")
	containers, _, _ := unstructured.NestedSlice(d.Object, "spec", "template", "spec", "containers")
	c := containers[0].(map[string]any)
	if img := c["image"]; img != "docker.io/cellstore/operator:v0.1.0" {
		t.Errorf("image %v", img)
	}
	sc := c["securityContext"].(map[string]any)
	if sc["readOnlyRootFilesystem"] != true || sc["allowPrivilegeEscalation"] != false {
		t.Errorf("container security context %v", sc)
	}
	if nonRoot, _, _ := unstructured.NestedBool(d.Object, "spec", "template", "spec", "securityContext", "runAsNonRoot"); !nonRoot {
		t.Error("pod does not run as non-root")
	}
	args := strings.Join(toStrings(c["args"]), " ")
	for _, want := range []string{"--leader-elect=true", "--leader-election-namespace=cellstore-system"} {
		if !strings.Contains(args, want) {
			t.Errorf("args %q lack %s", args, want)
		}
	}
	if strings.Contains(args, "--watch-namespaces") {
		t.Error("watches namespaces by default")
	}
	if c["livenessProbe"] == nil || c["readinessProbe"] == nil {
		t.Error("probes missing")
	}
	// RBAC is controller-gen's, unchanged.
	role := get(t, objs, "ClusterRole/ops-cellstore-operator-cellstore-system")
	want := readYAML(t, "../config/rbac/role.yaml")
	if !reflect.DeepEqual(role.Object["rules"], want["rules"]) {
		t.Error("the chart's ClusterRole rules differ from config/rbac/role.yaml: run make manifests")
	}
	get(t, objs, "Role/ops-cellstore-operator-leader-election")
	get(t, objs, "Service/ops-cellstore-operator-metrics")
	get(t, objs, "CustomResourceDefinition/storeclusters.cellstore.io")
	for k := range objs {
		if strings.HasPrefix(k, "ServiceMonitor/") || strings.HasPrefix(k, "ConfigMap/") {
			t.Errorf("%s rendered although not enabled", k)
		}
	}
}

// Two releases of one name in different namespaces (the quickstart's and the e2e suite's) render
// no cluster-scoped object of the same name, and each binding names its own role and account.
func TestClusterScopedNamesPerRelease(t *testing.T) {
	names := map[string]string{}
	for _, ns := range []string{"cellstore-system", "cellstore-e2e-operator"} {
		for key, u := range renderRelease(t, "cellstore-operator", ns) {
			// CRDs are shared by every release by design (Helm installs crds/ once).
			if u.GetNamespace() != "" || u.GetKind() == "CustomResourceDefinition" {
				continue
			}
			if other, ok := names[key]; ok && other != ns {
				t.Errorf("%s is rendered by the releases in %s and %s", key, other, ns)
			}
			names[key] = ns
			if u.GetKind() == "ClusterRoleBinding" {
				role, _, _ := unstructured.NestedString(u.Object, "roleRef", "name")
				subjects, _, _ := unstructured.NestedSlice(u.Object, "subjects")
				if role != u.GetName() || subjects[0].(map[string]any)["namespace"] != ns {
					t.Errorf("binding %s: role %s, subjects %v", u.GetName(), role, subjects)
				}
			}
		}
	}
	if len(names) < 4 {
		t.Errorf("cluster-scoped objects rendered: %v", names)
	}
}

func TestNonDefaults(t *testing.T) {
	objs := render(t, "metrics.serviceMonitor.enabled=true", "metrics.serviceMonitor.labels.release=prom",
		"dashboards.enabled=true", "watchNamespaces={team-a,team-b}", "image.tag=v9.9.9", "serviceAccount.name=opsa")
	d := get(t, objs, "Deployment/ops-cellstore-operator")
	containers, _, _ := unstructured.NestedSlice(d.Object, "spec", "template", "spec", "containers")
	c := containers[0].(map[string]any)
	if c["image"] != "docker.io/cellstore/operator:v9.9.9" {
		t.Errorf("image %v", c["image"])
	}
	if args := strings.Join(toStrings(c["args"]), " "); !strings.Contains(args, "--watch-namespaces=team-a,team-b") {
		t.Errorf("args %q", args)
	}
	if sa, _, _ := unstructured.NestedString(d.Object, "spec", "template", "spec", "serviceAccountName"); sa != "opsa" {
		t.Errorf("service account %q", sa)
	}
	get(t, objs, "ServiceAccount/opsa")
	sm := get(t, objs, "ServiceMonitor/ops-cellstore-operator")
	svc := get(t, objs, "Service/ops-cellstore-operator-metrics")
	sel, _, _ := unstructured.NestedStringMap(sm.Object, "spec", "selector", "matchLabels")
	for k, v := range sel {
		if svc.GetLabels()[k] != v {
			t.Errorf("ServiceMonitor selects %s=%s, the metrics Service has %q", k, v, svc.GetLabels()[k])
		}
	}
	if sm.GetLabels()["release"] != "prom" {
		t.Error("ServiceMonitor labels not applied")
	}
	cm := get(t, objs, "ConfigMap/ops-cellstore-operator-dashboards")
	data, _, _ := unstructured.NestedString(cm.Object, "data", "cellstore.json")
	var dash map[string]any
	if err := json.Unmarshal([]byte(data), &dash); err != nil || len(dash["panels"].([]any)) < 10 {
		t.Errorf("dashboard JSON: %v", err)
	}
}

// With watchNamespaces the operator gets a Role in each watched namespace and nothing cluster-wide;
// rbac.clusterReads adds only the cluster-scoped reads. Together they grant exactly controller-gen's
// rules.
func TestNamespacedRBAC(t *testing.T) {
	want := readYAML(t, "../config/rbac/role.yaml")["rules"].([]any)
	grants := func(rules []any) map[string]bool {
		out := map[string]bool{}
		for _, r := range rules {
			r := r.(map[string]any)
			for _, g := range toStrings(r["apiGroups"]) {
				for _, res := range toStrings(r["resources"]) {
					for _, v := range toStrings(r["verbs"]) {
						out[g+"/"+res+":"+v] = true
					}
				}
			}
		}
		return out
	}
	for _, clusterReads := range []bool{false, true} {
		objs := render(t, "watchNamespaces={team-a,team-b}", fmt.Sprintf("rbac.clusterReads=%t", clusterReads))
		got := map[string]bool{}
		for _, ns := range []string{"team-a", "team-b"} {
			name := "ops-cellstore-operator-cellstore-system"
			role := get(t, objs, "Role/"+ns+"/"+name)
			rules, _, _ := unstructured.NestedSlice(role.Object, "rules")
			g := grants(rules)
			for k := range g {
				if strings.Contains(k, "/nodes:") || strings.Contains(k, "/storageclasses:") {
					t.Errorf("the Role in %s grants the cluster-scoped %s", ns, k)
				}
				got[k] = true
			}
			if len(g) == 0 {
				t.Errorf("the Role in %s grants nothing", ns)
			}
			b := get(t, objs, "RoleBinding/"+ns+"/"+name)
			subjects, _, _ := unstructured.NestedSlice(b.Object, "subjects")
			if ref, _, _ := unstructured.NestedString(b.Object, "roleRef", "name"); ref != name || len(subjects) != 1 ||
				subjects[0].(map[string]any)["namespace"] != "cellstore-system" || subjects[0].(map[string]any)["name"] != "ops-cellstore-operator" {
				t.Errorf("RoleBinding in %s: roleRef %s, subjects %v", ns, ref, subjects)
			}
		}
		cr, hasCR := objs["ClusterRole/ops-cellstore-operator-cellstore-system"]
		_, hasCRB := objs["ClusterRoleBinding/ops-cellstore-operator-cellstore-system"]
		if hasCR != clusterReads || hasCRB != clusterReads {
			t.Errorf("clusterReads=%t: ClusterRole rendered %t, ClusterRoleBinding %t", clusterReads, hasCR, hasCRB)
		}
		if hasCR {
			rules, _, _ := unstructured.NestedSlice(cr.Object, "rules")
			for k := range grants(rules) {
				if !strings.HasSuffix(k, "/nodes:get") && !strings.Contains(k, "/storageclasses:") {
					t.Errorf("the cluster-wide reads grant %s", k)
				}
				got[k] = true
			}
		}
		all := grants(want)
		for k := range all {
			if !got[k] && (clusterReads || !(strings.Contains(k, "/nodes:") || strings.Contains(k, "/storageclasses:"))) {
				t.Errorf("clusterReads=%t: %s is not granted", clusterReads, k)
			}
		}
		for k := range got {
			if !all[k] {
				t.Errorf("%s is granted beyond config/rbac/role.yaml", k)
			}
		}
	}
}

// Before every install and upgrade a hook Job applies the CRDs with the operator's image, under a
// transient account allowed only that; crds.upgrade=false renders none of it.
func TestCRDUpgradeHook(t *testing.T) {
	objs := render(t, "image.tag=v9.9.9")
	job := get(t, objs, "Job/ops-cellstore-operator-crds")
	hookOf := func(u *unstructured.Unstructured) (string, string) {
		a := u.GetAnnotations()
		if a["helm.sh/hook-delete-policy"] != "before-hook-creation,hook-succeeded" {
			t.Errorf("%s/%s: delete policy %q", u.GetKind(), u.GetName(), a["helm.sh/hook-delete-policy"])
		}
		return a["helm.sh/hook"], a["helm.sh/hook-weight"]
	}
	weights := map[string]int{}
	for _, key := range []string{"ServiceAccount/ops-cellstore-operator-crds", "ClusterRole/ops-cellstore-operator-cellstore-system-crds",
		"ClusterRoleBinding/ops-cellstore-operator-cellstore-system-crds", "Job/ops-cellstore-operator-crds"} {
		hook, w := hookOf(get(t, objs, key))
		if hook != "pre-install,pre-upgrade" {
			t.Errorf("%s: hook %q", key, hook)
		}
		n, err := strconv.Atoi(w)
		if err != nil {
			t.Errorf("%s: weight %q", key, w)
		}
		weights[key] = n
	}
	if !(weights["ServiceAccount/ops-cellstore-operator-crds"] < weights["Job/ops-cellstore-operator-crds"] &&
		weights["ClusterRoleBinding/ops-cellstore-operator-cellstore-system-crds"] < weights["Job/ops-cellstore-operator-crds"]) {
		t.Errorf("the Job must come after its account and role: weights %v", weights)
	}
	rules, _, _ := unstructured.NestedSlice(get(t, objs, "ClusterRole/ops-cellstore-operator-cellstore-system-crds").Object, "rules")
	// create on any CRD (RBAC cannot limit it by name), get and patch only on the chart's own.
	var shipped []string
	files, _ := filepath.Glob(filepath.Join(chart, "crds", "*.yaml"))
	for _, f := range files {
		name, _, _ := unstructured.NestedString(readYAML(t, f), "metadata", "name")
		shipped = append(shipped, name)
	}
	slices.Sort(shipped)
	granted := map[string][]string{} // verb -> resourceNames ("*": any)
	for _, r := range rules {
		r := r.(map[string]any)
		if !reflect.DeepEqual(toStrings(r["apiGroups"]), []string{"apiextensions.k8s.io"}) ||
			!reflect.DeepEqual(toStrings(r["resources"]), []string{"customresourcedefinitions"}) {
			t.Errorf("the hook's role grants %v", r)
			continue
		}
		names := []string{"*"}
		if r["resourceNames"] != nil {
			names = slices.Sorted(slices.Values(toStrings(r["resourceNames"])))
		}
		for _, v := range toStrings(r["verbs"]) {
			if _, dup := granted[v]; dup {
				t.Errorf("verb %s granted twice: %v", v, rules)
			}
			granted[v] = names
		}
	}
	want := map[string][]string{"create": {"*"}, "get": shipped, "patch": shipped}
	if len(shipped) < 4 || !reflect.DeepEqual(granted, want) {
		t.Errorf("the hook's role grants %v, want %v", granted, want)
	}
	containers, _, _ := unstructured.NestedSlice(job.Object, "spec", "template", "spec", "containers")
	c := containers[0].(map[string]any)
	if c["image"] != "docker.io/cellstore/operator:v9.9.9" || !strings.Contains(strings.Join(toStrings(c["args"]), " "), "--apply-crds") {
		t.Errorf("hook container: image %v, args %v", c["image"], c["args"])
	}
	if sa, _, _ := unstructured.NestedString(job.Object, "spec", "template", "spec", "serviceAccountName"); sa != "ops-cellstore-operator-crds" {
		t.Errorf("hook account %q", sa)
	}
	for k := range render(t, "crds.upgrade=false") {
		if strings.HasSuffix(k, "-crds") {
			t.Errorf("%s rendered with crds.upgrade=false", k)
		}
	}
}

func TestSchemaRejectsBadValues(t *testing.T) {
	for _, set := range []string{"image.tag=latest", "replicaCount=0", "logLevel=chatty", "nosuch=1", "watchNamespaces={Bad_NS}", "rbac.clusterReads=maybe", "rbac.nosuch=1", "crds.upgrade=1",
		// Without leader election every replica is an active manager.
		"leaderElection=false", "leaderElection=false,replicaCount=3",
		// Typos under metrics and dashboards.
		"metrics.service.enable=false", "metrics.serviceMonitor.intervall=1m", "dashboards.label.a=b",
		// A ServiceMonitor without the Service it selects.
		"metrics.serviceMonitor.enabled=true,metrics.service.enabled=false",
		// A pod label replacing a selector label.
		`podLabels.app\.kubernetes\.io/instance=other`, `podLabels.app\.kubernetes\.io/component=x`} {
		out, err := run(t, "template", "ops", chart, "--kube-version", kubeVersion, "--set", set)
		if err == nil || !strings.Contains(out, "don't meet the specifications of the schema") {
			t.Errorf("--set %s: want a schema error, got:\n%.300s", set, out)
		}
	}
}

// What the rules of TestSchemaRejectsBadValues refuse only together is accepted apart.
func TestSchemaAcceptsRelatedValues(t *testing.T) {
	for _, set := range []string{"leaderElection=false,replicaCount=1", "metrics.service.enabled=false",
		"metrics.serviceMonitor.enabled=true,metrics.service.enabled=true", "podLabels.team=db"} {
		if out, err := run(t, "template", "ops", chart, "--kube-version", kubeVersion, "--set", set); err != nil {
			t.Errorf("--set %s: %.300s", set, out)
		}
	}
}

// GOMEMLIMIT is 90% of the manager's memory limit (resourceFieldRef can only give all of it), and
// absent without a limit.
func TestGoMemLimit(t *testing.T) {
	env := func(sets ...string) []any {
		d := get(t, render(t, sets...), "Deployment/ops-cellstore-operator")
		containers, _, _ := unstructured.NestedSlice(d.Object, "spec", "template", "spec", "containers")
		e, _, _ := unstructured.NestedSlice(containers[0].(map[string]any), "env")
		return e
	}
	for limit, want := range map[string]string{
		"":                                   "483183820", // the default 512Mi
		"resources.limits.memory=1Gi":        "966367641",
		"resources.limits.memory=1.5Gi":      "1449551462",
		"resources.limits.memory=500M":       "450000000",
		"resources.limits.memory=1000000000": "900000000",
	} {
		var sets []string
		if limit != "" {
			sets = append(sets, limit)
		}
		e := env(sets...)
		want := []any{map[string]any{"name": "GOMEMLIMIT", "value": want}}
		if !reflect.DeepEqual(e, want) {
			t.Errorf("%q: env %v, want %v", limit, e, want)
		}
	}
	if e := env("resources.limits=null"); len(e) != 0 {
		t.Errorf("without a memory limit: env %v", e)
	}
	if out, err := run(t, "template", "ops", chart, "--kube-version", kubeVersion, "--set", "resources.limits.memory=lots"); err == nil ||
		!strings.Contains(out, "resources.limits.memory") {
		t.Errorf("an unreadable memory limit renders:\n%.300s", out)
	}
}

// podLabels add to the pod's labels but never replace the selector's, even past the schema (which
// refuses them): a template the selector does not match is refused by the API server.
func TestPodLabelsKeepSelector(t *testing.T) {
	for _, flags := range [][]string{nil, {"--skip-schema-validation"}} {
		sets := []string{"podLabels.team=db"}
		if flags != nil {
			sets = append(sets, `podLabels.app\.kubernetes\.io/instance=other`, `podLabels.app\.kubernetes\.io/name=x`)
		}
		d := get(t, renderChart(t, chart, "ops", "cellstore-system", flags, sets...), "Deployment/ops-cellstore-operator")
		sel, _, _ := unstructured.NestedStringMap(d.Object, "spec", "selector", "matchLabels")
		labels, _, _ := unstructured.NestedStringMap(d.Object, "spec", "template", "metadata", "labels")
		if len(sel) != 3 {
			t.Fatalf("selector %v", sel)
		}
		for k, v := range sel {
			if labels[k] != v {
				t.Errorf("%v: pod label %s=%q, the selector wants %q", sets, k, labels[k], v)
			}
		}
		if labels["team"] != "db" {
			t.Errorf("%v: podLabels not applied: %v", sets, labels)
		}
	}
}

// The notes' example commands name the namespace they act in: a watched one in a namespaced install
// (a StoreCluster elsewhere is left alone). helm template does not print NOTES.txt, so a copy of
// the chart renders it into a ConfigMap.
func TestNotesNamespace(t *testing.T) {
	dir := filepath.Join(t.TempDir(), chart)
	if err := os.CopyFS(dir, os.DirFS(chart)); err != nil {
		t.Fatal(err)
	}
	notes := "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: notes}\ndata:\n  notes: {{ include (print $.Template.BasePath \"/NOTES.txt\") . | toJson }}\n"
	if err := os.WriteFile(filepath.Join(dir, "templates", "zz-notes.yaml"), []byte(notes), 0o644); err != nil {
		t.Fatal(err)
	}
	for watch, ns := range map[string]string{"": "default", "watchNamespaces={team-a,team-b}": "team-a"} {
		var sets []string
		if watch != "" {
			sets = append(sets, watch)
		}
		text, _, _ := unstructured.NestedString(get(t, renderChart(t, dir, "ops", "cellstore-system", nil, sets...), "ConfigMap/notes").Object, "data", "notes")
		var cmds int
		for _, line := range strings.Split(text, "\n") {
			line = strings.TrimSpace(line)
			if !strings.HasPrefix(line, "kubectl ") {
				continue
			}
			cmds++
			want := "kubectl -n " + ns + " "
			if strings.Contains(line, " get deploy ") {
				want = "kubectl -n cellstore-system "
			}
			if !strings.HasPrefix(line, want) {
				t.Errorf("%q: %q does not start with %q", watch, line, want)
			}
		}
		if cmds != 4 {
			t.Errorf("%q: %d kubectl commands in the notes:\n%s", watch, cmds, text)
		}
	}
}

func TestCRDsMatchConfig(t *testing.T) {
	gen, _ := filepath.Glob("../config/crd/bases/*.yaml")
	if len(gen) == 0 {
		t.Fatal("no generated CRDs in config/crd/bases")
	}
	for _, g := range gen {
		a, _ := os.ReadFile(g)
		b, err := os.ReadFile(filepath.Join(chart, "crds", filepath.Base(g)))
		if err != nil || !bytes.Equal(a, b) {
			t.Errorf("%s differs from the chart's copy: run make manifests", g)
		}
	}
}

func readYAML(t *testing.T, path string) map[string]any {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := yaml.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	return m
}

func toStrings(v any) []string {
	var out []string
	for _, x := range v.([]any) {
		out = append(out, x.(string))
	}
	return out
}
