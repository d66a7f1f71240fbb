package resources

import (
	"encoding/json"
	"flag"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cellstore/cellstore/operator/api/v1alpha1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

var update = flag.Bool("update", false, "rewrite the golden files of rendered pod templates")

func container(t *testing.T, sts *appsv1.StatefulSet) corev1.Container {
	t.Helper()
	if n := len(sts.Spec.Template.Spec.Containers); n != 1 {
		t.Fatalf("%d containers, want 1", n)
	}
	return sts.Spec.Template.Spec.Containers[0]
}

func hasArg(args []string, want string) bool { return slices.Contains(args, want) }

func TestRegionServerStatefulSet(t *testing.T) {
	c := productionCluster()
	sts := RegionServerStatefulSet(c, inputs(c, GroupRegionServer))
	if sts.Name != "prod-regionserver" || sts.Spec.ServiceName != "prod-regionserver" || *sts.Spec.Replicas != 3 {
		t.Errorf("name %s, service %s, replicas %d", sts.Name, sts.Spec.ServiceName, *sts.Spec.Replicas)
	}
	if sts.Spec.UpdateStrategy.Type != appsv1.OnDeleteStatefulSetStrategyType || sts.Spec.PodManagementPolicy != appsv1.ParallelPodManagement {
		t.Errorf("update strategy %s, pod management %s: want OnDelete, Parallel", sts.Spec.UpdateStrategy.Type, sts.Spec.PodManagementPolicy)
	}
	if ref := sts.OwnerReferences; len(ref) != 1 || ref[0].Kind != "StoreCluster" || !*ref[0].Controller {
		t.Errorf("owner references %+v", ref)
	}
	if sts.Labels[LabelOperatorVersion] != "v1" {
		t.Errorf("labels %v: want the operator version on the StatefulSet", sts.Labels)
	}
	tpl := sts.Spec.Template
	if _, ok := tpl.Labels[LabelOperatorVersion]; ok {
		t.Error("the operator version must not be in the pod template (an upgrade would restart every pod)")
	}
	for k, v := range SelectorLabels(c, GroupRegionServer) {
		if tpl.Labels[k] != v || sts.Spec.Selector.MatchLabels[k] != v {
			t.Errorf("selector label %s=%s missing", k, v)
		}
	}
	if tpl.Labels["team"] != "storage" || tpl.Annotations["example.com/owner"] != "storage" {
		t.Errorf("podTemplate labels/annotations not applied: %v %v", tpl.Labels, tpl.Annotations)
	}
	if tpl.Annotations[AnnotationTemplateHash] != TemplateHash(&tpl) || tpl.Annotations[AnnotationConfigHash] == "" {
		t.Errorf("annotations %v: want the template and config hashes", tpl.Annotations)
	}
	ctr := container(t, sts)
	for _, a := range []string{
		"regionserver",
		"--storage-dir=/var/lib/cellstore/shared",
		"--config=/etc/cellstore/regionserver.conf",
		"--http-addr=:16030", "--data-addr=:16020", "--admin-addr=:16021",
		"--advertise-host=$(POD_NAME).prod-regionserver.db.svc",
		"--masters=prod-master.db.svc:16000",
		"--heap-limit=6Gi", "--memstore-offheap-size=4Gi", "--blockcache-offheap-size=4Gi", "--blockcache-onheap-size=512Mi",
		"--memory-overhead=" + FormatBytes(16*gi/10), "--hugepages=2Mi",
	} {
		if !hasArg(ctr.Args, a) {
			t.Errorf("args %q: missing %q", ctr.Args, a)
		}
	}
	mem := resource.MustParse("16Gi")
	hp := resource.MustParse("8Gi")
	for _, rl := range []corev1.ResourceList{ctr.Resources.Requests, ctr.Resources.Limits} {
		if q := rl[corev1.ResourceMemory]; q.Cmp(mem) != 0 {
			t.Errorf("memory %s, want 16Gi in requests and limits", q.String())
		}
		if q := rl["hugepages-2Mi"]; q.Cmp(hp) != 0 {
			t.Errorf("hugepages-2Mi %s, want 8Gi in requests and limits", q.String())
		}
	}
	var hugeVol *corev1.Volume
	for i := range tpl.Spec.Volumes {
		if tpl.Spec.Volumes[i].Name == "hugepages" {
			hugeVol = &tpl.Spec.Volumes[i]
		}
	}
	if hugeVol == nil || hugeVol.EmptyDir == nil || hugeVol.EmptyDir.Medium != "HugePages-2Mi" {
		t.Errorf("hugepage volume %+v, want an emptyDir of medium HugePages-2Mi", hugeVol)
	}
	if !slices.ContainsFunc(ctr.VolumeMounts, func(m corev1.VolumeMount) bool { return m.Name == "hugepages" && m.MountPath == HugePagesPath }) {
		t.Errorf("mounts %+v: want the hugepage volume at %s", ctr.VolumeMounts, HugePagesPath)
	}
	if p := ctr.ReadinessProbe; p == nil || p.HTTPGet == nil || p.HTTPGet.Path != "/readyz" {
		t.Errorf("readiness probe %+v, want GET /readyz", p)
	}
	if p := ctr.LivenessProbe; p == nil || p.HTTPGet == nil || p.HTTPGet.Path != "/healthz" {
		t.Errorf("liveness probe %+v, want GET /healthz", p)
	}
	if l := ctr.Lifecycle; l == nil || l.PreStop == nil || l.PreStop.Exec == nil || !slices.Contains(l.PreStop.Exec.Command, "--timeout=600s") {
		t.Errorf("preStop %+v, want cellstore prestop with the drain timeout", l)
	}
	if g := *tpl.Spec.TerminationGracePeriodSeconds; g != 630 {
		t.Errorf("terminationGracePeriodSeconds %d, want drain timeout 600s + 30s", g)
	}
	sc := ctr.SecurityContext
	if !*sc.ReadOnlyRootFilesystem || *sc.AllowPrivilegeEscalation || !*tpl.Spec.SecurityContext.RunAsNonRoot || *tpl.Spec.SecurityContext.RunAsUser != EngineUID {
		t.Errorf("security context %+v / %+v", sc, tpl.Spec.SecurityContext)
	}
	if tpl.Spec.AutomountServiceAccountToken == nil || *tpl.Spec.AutomountServiceAccountToken {
		t.Error("region servers must not mount a service account token")
	}
	// Group tolerations replace the cluster-wide ones; the priority class comes from the cluster.
	if len(tpl.Spec.Tolerations) != 1 || tpl.Spec.Tolerations[0].Key != "dedicated" || tpl.Spec.PriorityClassName != "cellstore-high" {
		t.Errorf("tolerations %+v, priority %q", tpl.Spec.Tolerations, tpl.Spec.PriorityClassName)
	}
	if a := tpl.Spec.Affinity; a == nil || a.PodAntiAffinity == nil || len(a.PodAntiAffinity.PreferredDuringSchedulingIgnoredDuringExecution) != 1 {
		t.Errorf("affinity %+v, want the default anti-affinity", a)
	}
	names := []string{}
	for _, e := range ctr.Env {
		names = append(names, e.Name)
	}
	if !slices.Equal(names, []string{"POD_NAME", "POD_NAMESPACE", "POD_IP", "NODE_NAME", "CELLSTORE_TLS_CA_FILE", "CELLSTORE_TLS_CERT_FILE", "CELLSTORE_TLS_KEY_FILE"}) {
		t.Errorf("env %v", names)
	}
}

func TestRegionServerWithoutHugepages(t *testing.T) {
	c := defaultedCluster()
	sts := RegionServerStatefulSet(c, inputs(c, GroupRegionServer))
	ctr := container(t, sts)
	if !hasArg(ctr.Args, "--hugepages=off") || !hasArg(ctr.Args, "--heap-limit=768Mi") {
		t.Errorf("args %q", ctr.Args)
	}
	for name := range ctr.Resources.Limits {
		if strings.HasPrefix(string(name), "hugepages-") {
			t.Errorf("unexpected %s limit", name)
		}
	}
	if cpu := ctr.Resources.Requests[corev1.ResourceCPU]; cpu.String() != "1" {
		t.Errorf("cpu request %s, want the default 1", cpu.String())
	}
}

func TestMasterStatefulSet(t *testing.T) {
	c := defaultedCluster()
	sts := MasterStatefulSet(c, inputs(c, GroupMaster))
	ctr := container(t, sts)
	for _, a := range []string{"master", "--config=/etc/cellstore/master.conf", "--grpc-addr=:16000", "--http-addr=:16010",
		"--advertise-host=$(POD_NAME).prod-master.db.svc", "--election=kubernetes", "--lease-name=prod-master",
		"--lease-namespace=$(POD_NAMESPACE)", "--hedge-delay=10ms"} {
		if !hasArg(ctr.Args, a) {
			t.Errorf("args %q: missing %q", ctr.Args, a)
		}
	}
	if sts.Spec.Template.Spec.ServiceAccountName != "prod-master" {
		t.Errorf("service account %q", sts.Spec.Template.Spec.ServiceAccountName)
	}
	if !slices.ContainsFunc(ctr.Env, func(e corev1.EnvVar) bool { return e.Name == "GOMEMLIMIT" && e.Value == "805306368" }) {
		t.Errorf("env %+v: want GOMEMLIMIT = 1Gi - 256Mi", ctr.Env)
	}
	// One master elects itself through the Lease too: going from one master to several (or back)
	// changes no pod template, so a new master is a standby, never a second active one beside a
	// master that ran with --election=none.
	several := sts.Spec.Template
	c.Spec.Master.Replicas = 1
	one := MasterStatefulSet(c, inputs(c, GroupMaster))
	if !equality.Semantic.DeepEqual(one.Spec.Template, several) {
		t.Errorf("one master's pod template differs from several's: args %q", container(t, one).Args)
	}
}

func TestRestartedAtGoesIntoTheTemplate(t *testing.T) {
	c := defaultedCluster()
	before := RegionServerStatefulSet(c, inputs(c, GroupRegionServer))
	c.Annotations = map[string]string{v1alpha1.AnnotationRestartedAt: "2026-01-02T03:04:05Z"}
	after := RegionServerStatefulSet(c, inputs(c, GroupRegionServer))
	if after.Spec.Template.Annotations[v1alpha1.AnnotationRestartedAt] != "2026-01-02T03:04:05Z" {
		t.Fatalf("annotations %v", after.Spec.Template.Annotations)
	}
	got := DiffTemplates(&before.Spec.Template, &after.Spec.Template)
	if !slices.Equal(got, []string{"spec.template.metadata.annotations[cellstore.io/restartedAt]"}) {
		t.Errorf("diff %q", got)
	}
}

// Changing the number of masters changes the masters' pods only: the region servers reach the
// masters through their headless Service, whatever their number.
func TestMasterCountRestartsOnlyMasters(t *testing.T) {
	c := defaultedCluster()
	c.Spec.Master.Replicas = 1
	rs1, m1 := RegionServerStatefulSet(c, inputs(c, GroupRegionServer)), MasterStatefulSet(c, inputs(c, GroupMaster))
	c.Spec.Master.Replicas = 3
	rs3, m3 := RegionServerStatefulSet(c, inputs(c, GroupRegionServer)), MasterStatefulSet(c, inputs(c, GroupMaster))
	if d := DiffTemplates(&rs1.Spec.Template, &rs3.Spec.Template); len(d) > 0 {
		t.Errorf("1 → 3 masters changes the region servers' pod template: %q", d)
	}
	if *m1.Spec.Replicas != 1 || *m3.Spec.Replicas != 3 {
		t.Errorf("master replicas %d, %d", *m1.Spec.Replicas, *m3.Spec.Replicas)
	}
}

// An operator upgrade restarts nothing when the rendered templates do not change. An object stored
// before a field existed has it unset; the API server's schema defaults fill it in when it is read
// with the new CRD. Both must render the same pod template, so the defaults the operator applies
// itself must equal the schema's.
func TestOldAndNewDefaultsRenderTheSameTemplates(t *testing.T) {
	old, cur := minimalCluster(), defaultedCluster()
	for _, g := range []Group{GroupMaster, GroupRegionServer} {
		var a, b *appsv1.StatefulSet
		if g == GroupMaster {
			a, b = MasterStatefulSet(old, inputs(old, g)), MasterStatefulSet(cur, inputs(cur, g))
		} else {
			a, b = RegionServerStatefulSet(old, inputs(old, g)), RegionServerStatefulSet(cur, inputs(cur, g))
		}
		if d := DiffTemplates(&a.Spec.Template, &b.Spec.Template); len(d) > 0 {
			t.Errorf("%s: templates differ in %q", g, d)
		}
		if TemplateHash(&a.Spec.Template) != TemplateHash(&b.Spec.Template) {
			t.Errorf("%s: template hashes differ", g)
		}
	}
	// The operator version is on the objects only.
	a, b := inputs(cur, GroupRegionServer), inputs(cur, GroupRegionServer)
	b.OperatorVersion = "v2"
	if TemplateHash(&RegionServerStatefulSet(cur, a).Spec.Template) != TemplateHash(&RegionServerStatefulSet(cur, b).Spec.Template) {
		t.Error("a new operator version changed the pod template")
	}
}

// The golden files hold the pod templates this operator renders. If a change to the builders alters
// them, every running cluster restarts after the upgrade: look at the diff, and if that is intended
// (say so in the release notes), run go test ./operator/internal/resources -update.
func TestGoldenTemplates(t *testing.T) {
	for name, c := range map[string]*v1alpha1.StoreCluster{"minimal": defaultedCluster(), "production": productionCluster()} {
		for _, g := range []Group{GroupMaster, GroupRegionServer} {
			var sts *appsv1.StatefulSet
			if g == GroupMaster {
				sts = MasterStatefulSet(c, inputs(c, g))
			} else {
				sts = RegionServerStatefulSet(c, inputs(c, g))
			}
			got, err := json.MarshalIndent(sts.Spec.Template, "", "  ")
			if err != nil {
				t.Fatal(err)
			}
			got = append(got, '\n')
			path := filepath.Join("testdata", name+"-"+string(g)+".golden.json")
			if *update {
				if err := os.MkdirAll("testdata", 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(path, got, 0o644); err != nil {
					t.Fatal(err)
				}
				continue
			}
			want, err := os.ReadFile(path)
			if err != nil {
				t.Fatalf("%v (run with -update to create it)", err)
			}
			if string(want) != string(got) {
				var old corev1.PodTemplateSpec
				if err := json.Unmarshal(want, &old); err != nil {
					t.Fatal(err)
				}
				t.Errorf("%s: the rendered pod template changed (every cluster would restart after an upgrade): %q; "+
					"if intended, run with -update", path, DiffTemplates(&old, &sts.Spec.Template))
			}
		}
	}
}

func TestServicesAndBudgets(t *testing.T) {
	c := defaultedCluster()
	hm := HeadlessService(c, GroupMaster, "v1")
	if hm.Spec.ClusterIP != corev1.ClusterIPNone || !hm.Spec.PublishNotReadyAddresses || hm.Labels[LabelMetrics] != "true" {
		t.Errorf("master headless service %+v", hm.Spec)
	}
	hr := HeadlessService(c, GroupRegionServer, "v1")
	ports := map[string]int32{}
	for _, p := range hr.Spec.Ports {
		ports[p.Name] = p.Port
	}
	if ports["data"] != 16020 || ports["admin"] != 16021 || ports["http"] != 16030 {
		t.Errorf("region server ports %v", ports)
	}
	cs := ClientService(c, "v1")
	if cs.Name != "prod" || cs.Spec.ClusterIP != "" || len(cs.Spec.Ports) != 1 || cs.Spec.Ports[0].Port != 16000 || cs.Spec.Selector[LabelComponent] != "master" {
		t.Errorf("client service %+v", cs.Spec)
	}
	for _, g := range []Group{GroupMaster, GroupRegionServer} {
		pdb := PodDisruptionBudget(c, g, "v1")
		if pdb.Spec.MaxUnavailable == nil || pdb.Spec.MaxUnavailable.IntValue() != 1 || pdb.Spec.Selector.MatchLabels[LabelComponent] != string(g) {
			t.Errorf("%s PDB %+v", g, pdb.Spec)
		}
	}
}

func TestMasterLeaseRBAC(t *testing.T) {
	c := defaultedCluster()
	role := MasterLeaseRole(c, "v1")
	if len(role.Rules) != 2 || !slices.Equal(role.Rules[0].Verbs, []string{"create"}) ||
		!slices.Equal(role.Rules[1].ResourceNames, []string{"prod-master"}) || !slices.Equal(role.Rules[1].Verbs, []string{"get", "update", "list", "watch"}) {
		t.Errorf("rules %+v: want create leases, and get/update of the lease prod-master only", role.Rules)
	}
	rb := MasterLeaseRoleBinding(c, "v1")
	if rb.RoleRef.Name != role.Name || rb.Subjects[0].Name != MasterServiceAccount(c, "v1").Name || rb.Subjects[0].Namespace != "db" {
		t.Errorf("binding %+v", rb)
	}
}

func TestSharedClaim(t *testing.T) {
	c := defaultedCluster()
	if SharedClaim(c, resource.MustParse("1Gi"), "v1") != nil {
		t.Error("an existing claim needs no new claim")
	}
	c.Spec.Storage = v1alpha1.StorageSpec{Volume: &v1alpha1.VolumeStorage{Size: "100Gi", StorageClassName: ptr.To("nfs")}}
	pvc := SharedClaim(c, resource.MustParse("100Gi"), "v1")
	if pvc.Name != "prod-shared" || pvc.Spec.AccessModes[0] != corev1.ReadWriteMany || *pvc.Spec.StorageClassName != "nfs" {
		t.Errorf("claim %+v", pvc)
	}
	if len(pvc.OwnerReferences) != 0 {
		t.Error("reclaimPolicy Retain (default): the claim must outlive the StoreCluster")
	}
	c.Spec.Storage.Volume.ReclaimPolicy = v1alpha1.VolumeDelete
	if pvc = SharedClaim(c, resource.MustParse("100Gi"), "v1"); len(pvc.OwnerReferences) != 1 {
		t.Error("reclaimPolicy Delete: the claim is owned by the StoreCluster")
	}
	if SharedClaimName(c) != "prod-shared" {
		t.Errorf("claim name %q", SharedClaimName(c))
	}
}

// Values from the spec reach the engine as written: the kubelet would expand $(NAME) in args from
// the container's environment, which holds the S3 secret key.
func TestArgsFromTheSpecAreLiteral(t *testing.T) {
	c := defaultedCluster()
	c.Spec.Storage = v1alpha1.StorageSpec{S3: &v1alpha1.S3Storage{S3Location: v1alpha1.S3Location{Endpoint: "https://s3.internal:9000", Bucket: "$(CELLSTORE_S3_SECRET_ACCESS_KEY)",
		Prefix: "a$$b", Region: "$(POD_NAME)", CredentialsSecret: &corev1.LocalObjectReference{Name: "keys"}}}}
	c.Spec.Backup = &v1alpha1.BackupSpec{S3: v1alpha1.S3Location{Endpoint: "https://s3.internal:9000", Bucket: "b", Prefix: "$(CELLSTORE_BACKUP_S3_SECRET_ACCESS_KEY)"}}
	c.Spec.Security.Superusers = []string{"$(CELLSTORE_S3_SECRET_ACCESS_KEY)"}
	for _, sts := range []*appsv1.StatefulSet{MasterStatefulSet(c, inputs(c, GroupMaster)), RegionServerStatefulSet(c, inputs(c, GroupRegionServer))} {
		ctr := container(t, sts)
		for _, want := range []string{"--s3-bucket=$$(CELLSTORE_S3_SECRET_ACCESS_KEY)", "--s3-prefix=a$$$$b", "--s3-region=$$(POD_NAME)"} {
			if !hasArg(ctr.Args, want) {
				t.Errorf("%s: args %v: want %s", sts.Name, ctr.Args, want)
			}
		}
		if sts.Name == StatefulSetName(c, GroupMaster) && !hasArg(ctr.Args, "--backup-s3-prefix=$$(CELLSTORE_BACKUP_S3_SECRET_ACCESS_KEY)") {
			t.Errorf("%s: args %v: want the backup prefix escaped", sts.Name, ctr.Args)
		}
		if c.Spec.TLSEnabled() && !hasArg(ctr.Args, "--superusers=@cellstore:servers,@cellstore:admins,$$(CELLSTORE_S3_SECRET_ACCESS_KEY)") {
			t.Errorf("%s: args %v: want the superusers escaped", sts.Name, ctr.Args)
		}
	}
}

func TestS3Storage(t *testing.T) {
	c := defaultedCluster()
	c.Spec.Storage = v1alpha1.StorageSpec{S3: &v1alpha1.S3Storage{S3Location: v1alpha1.S3Location{Endpoint: "https://s3.internal:9000", Bucket: "data",
		CredentialsSecret: &corev1.LocalObjectReference{Name: "keys"},
		EndpointCA:        &corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "s3-ca"}, Key: "bundle.pem"}}}}
	for _, sts := range []*appsv1.StatefulSet{MasterStatefulSet(c, inputs(c, GroupMaster)), RegionServerStatefulSet(c, inputs(c, GroupRegionServer))} {
		ctr := container(t, sts)
		if !hasArg(ctr.Args, "--s3-ca-file=/etc/cellstore/s3-ca/ca.crt") || !hasArg(ctr.Args, "--s3-bucket=data") {
			t.Errorf("%s: args %v: want the bucket and the CA file", sts.Name, ctr.Args)
		}
		if !slices.ContainsFunc(ctr.VolumeMounts, func(m corev1.VolumeMount) bool {
			return m.Name == S3CAVolumeName && m.MountPath == S3CAMountPath && m.ReadOnly
		}) {
			t.Errorf("%s: mounts %+v: want the CA read-only at %s", sts.Name, ctr.VolumeMounts, S3CAMountPath)
		}
		i := slices.IndexFunc(sts.Spec.Template.Spec.Volumes, func(v corev1.Volume) bool { return v.Name == S3CAVolumeName })
		if i < 0 {
			t.Fatalf("%s: no CA volume", sts.Name)
		}
		v := sts.Spec.Template.Spec.Volumes[i].Secret
		if v == nil || v.SecretName != "s3-ca" || len(v.Items) != 1 || v.Items[0].Key != "bundle.pem" || v.Items[0].Path != S3CAFileName {
			t.Errorf("%s: CA volume %+v", sts.Name, sts.Spec.Template.Spec.Volumes[i])
		}
		if !slices.ContainsFunc(ctr.Env, func(e corev1.EnvVar) bool { return e.Name == "CELLSTORE_S3_ACCESS_KEY_ID" }) {
			t.Errorf("%s: env %+v: want the keys from the Secret", sts.Name, ctr.Env)
		}
		if slices.ContainsFunc(sts.Spec.Template.Spec.Volumes, func(v corev1.Volume) bool { return v.Name == volumeShared }) {
			t.Errorf("%s: a StoreCluster on S3 mounts no shared volume", sts.Name)
		}
	}
	// The region servers' file cache: an emptyDir with room for the entries' headers, and the flags.
	c.Spec.Storage.S3.FileCacheSize = "2Gi"
	rs := RegionServerStatefulSet(c, inputs(c, GroupRegionServer))
	if ctr := container(t, rs); !hasArg(ctr.Args, "--file-cache-dir="+FileCachePath) || !hasArg(ctr.Args, "--file-cache-size=2Gi") {
		t.Errorf("region server args %v: want the file cache flags", ctr.Args)
	}
	i := slices.IndexFunc(rs.Spec.Template.Spec.Volumes, func(v corev1.Volume) bool { return v.Name == volumeFileCache })
	if i < 0 || rs.Spec.Template.Spec.Volumes[i].EmptyDir == nil || rs.Spec.Template.Spec.Volumes[i].EmptyDir.SizeLimit.Value() != 2<<30+2<<30/16 {
		t.Errorf("region server volumes %+v: want an emptyDir of 2Gi and a sixteenth", rs.Spec.Template.Spec.Volumes)
	}
	if ctr := container(t, MasterStatefulSet(c, inputs(c, GroupMaster))); slices.ContainsFunc(ctr.Args, func(a string) bool { return strings.HasPrefix(a, "--file-cache") }) {
		t.Errorf("master args %v: the master reads no store files", ctr.Args)
	}
	c.Spec.Storage.S3.FileCacheSize = "0"
	if ctr := container(t, RegionServerStatefulSet(c, inputs(c, GroupRegionServer))); slices.ContainsFunc(ctr.Args, func(a string) bool { return strings.HasPrefix(a, "--file-cache") }) {
		t.Errorf("fileCacheSize 0: args %v", ctr.Args)
	}

	// No Secret: the AWS SDK's ambient chain; no key variables at all (an empty one would win).
	c.Spec.Storage.S3.CredentialsSecret = nil
	c.Spec.Storage.S3.EndpointCA = nil
	ctr := container(t, RegionServerStatefulSet(c, inputs(c, GroupRegionServer)))
	if slices.ContainsFunc(ctr.Env, func(e corev1.EnvVar) bool { return strings.HasPrefix(e.Name, "CELLSTORE_S3_") }) {
		t.Errorf("env %+v: no S3 key variables without a credentials Secret", ctr.Env)
	}
	if slices.ContainsFunc(ctr.Args, func(a string) bool { return strings.HasPrefix(a, "--s3-ca-file") }) {
		t.Errorf("args %v: no CA file without endpointCA", ctr.Args)
	}
}

func TestConfigMap(t *testing.T) {
	c := productionCluster()
	cm, hashes := ConfigMap(c, "v1")
	if got := cm.Data["master.conf"]; !strings.Contains(got, "\nflush-size = 256Mi\n") || strings.Contains(got, "compaction-threads") {
		t.Errorf("master.conf:\n%s", got)
	}
	if got := cm.Data["regionserver.conf"]; !strings.Contains(got, "\ncompaction-threads = 2\nflush-size = 256Mi\n") {
		t.Errorf("regionserver.conf (sorted, both maps):\n%s", got)
	}
	c.Spec.RegionServers.Config["compaction-threads"] = "4"
	cm2, hashes2 := ConfigMap(c, "v1")
	if hashes2[GroupMaster] != hashes[GroupMaster] || hashes2[GroupRegionServer] == hashes[GroupRegionServer] {
		t.Errorf("a region-server flag must change only the region servers' hash: %v -> %v", hashes, hashes2)
	}
	if got := ConfigKeysChanged(cm.Data["regionserver.conf"], cm2.Data["regionserver.conf"]); !slices.Equal(got, []string{"compaction-threads"}) {
		t.Errorf("changed keys %q", got)
	}
	// Settings the engine applies without a restart change the file, not the hash: the pods
	// re-read the file and nothing restarts. The same flag of the other group's is no exception.
	c.Spec.RegionServers.Config["max-scanners"] = "500"
	c.Spec.Master.Config = v1alpha1.EngineConfig{"balancer-period": "1m", "max-scanners": "9"}
	cm3, hashes3 := ConfigMap(c, "v1")
	if hashes3[GroupRegionServer] != hashes2[GroupRegionServer] || !strings.Contains(cm3.Data["regionserver.conf"], "max-scanners = 500") {
		t.Errorf("an online region-server setting changed the hash (%v -> %v) or is not in the file", hashes2, hashes3)
	}
	if hashes3[GroupMaster] == hashes2[GroupMaster] {
		t.Errorf("max-scanners is not a master setting that changes online: the masters' hash must change")
	}
	online, restart := SplitOnline(GroupMaster, []string{"balancer-period", "max-scanners"})
	if !slices.Equal(online, []string{"balancer-period"}) || !slices.Equal(restart, []string{"max-scanners"}) {
		t.Errorf("SplitOnline(master) = %q, %q", online, restart)
	}
	delete(c.Spec.Master.Config, "max-scanners")
	if _, h := ConfigMap(c, "v1"); h[GroupMaster] != hashes2[GroupMaster] {
		t.Errorf("only balancer-period (online) differs from before: the masters' hash must be the same")
	}
	// Group values win over spec.config.
	c.Spec.Master.Config = v1alpha1.EngineConfig{"flush-size": "64Mi"}
	if got := ConfigFile(c, GroupMaster); !strings.Contains(got, "flush-size = 64Mi") {
		t.Errorf("master.conf:\n%s", got)
	}
}

func TestMonitoringObjects(t *testing.T) {
	c := defaultedCluster()
	c.Spec.Monitoring.Labels = map[string]string{"release": "prometheus"}
	sm := ServiceMonitor(c, "v1")
	if sm.GetKind() != "ServiceMonitor" || sm.GetAPIVersion() != "monitoring.coreos.com/v1" || sm.GetLabels()["release"] != "prometheus" {
		t.Errorf("ServiceMonitor %v", sm.Object)
	}
	sel, _, _ := unstructuredString(sm.Object, "spec", "selector", "matchLabels", LabelMetrics)
	if sel != "true" {
		t.Errorf("ServiceMonitor selector %v", sm.Object["spec"])
	}
	ep := sm.Object["spec"].(map[string]any)["endpoints"].([]any)[0].(map[string]any)
	if ep["scheme"] != "https" || ep["tlsConfig"].(map[string]any)["ca"].(map[string]any)["configMap"].(map[string]any)["name"] != CABundleName(c) {
		t.Errorf("ServiceMonitor endpoint %v: want HTTPS checked against the CA bundle", ep)
	}
	pr := PrometheusRule(c, "v1")
	groups := pr.Object["spec"].(map[string]any)["groups"].([]any)
	var alerts []string
	for _, r := range groups[0].(map[string]any)["rules"].([]any) {
		alerts = append(alerts, r.(map[string]any)["alert"].(string))
	}
	want := []string{"CellstoreServerDown", "CellstoreRegionsInTransitionTooLong", "CellstoreRegionsFailedOpen", "CellstoreMemstoreNearLimit",
		"CellstoreWritesBlocked", "CellstoreWALSyncSlow", "CellstoreWALFailures", "CellstoreStorageErrors", "CellstoreCompactionQueue",
		"CellstoreOffheapBudgetNearLimit", "CellstoreRequestsThrottled", "CellstoreReplicaLag", "CellstoreCertificateExpiring"}
	if !slices.Equal(alerts, want) {
		t.Errorf("alerts %q, want %q", alerts, want)
	}
	if len(pr.GetOwnerReferences()) != 1 {
		t.Error("PrometheusRule has no owner")
	}
}

func unstructuredString(m map[string]any, path ...string) (string, bool, error) {
	var cur any = m
	for _, p := range path {
		mm, ok := cur.(map[string]any)
		if !ok {
			return "", false, nil
		}
		cur = mm[p]
	}
	s, ok := cur.(string)
	return s, ok, nil
}

func TestNames(t *testing.T) {
	c := defaultedCluster()
	if got := ServerName(c, "prod-regionserver-2"); got != "prod-regionserver-2.prod-regionserver.db.svc:16020" {
		t.Errorf("ServerName %q", got)
	}
	for server, pod := range map[string]string{
		"prod-regionserver-2.prod-regionserver.db.svc:16020": "prod-regionserver-2",
		"prod-master-1.prod-master.db.svc:16000":             "",
		"garbage":                                            "",
		"":                                                   "",
	} {
		if got := PodOfServer(c, GroupRegionServer, server); got != pod {
			t.Errorf("PodOfServer(%q) = %q, want %q", server, got, pod)
		}
	}
	if MasterAddress(c) != "prod-master.db.svc:16000" {
		t.Errorf("MasterAddress %q", MasterAddress(c))
	}
}

// TestSecurityInPodTemplates: by default the engine serves TLS with the server certificate Secret,
// authenticates and authorizes (superusers: servers, admins, spec.security.superusers), probes
// speak HTTPS and the preStop hook too; tls: Disabled leaves all of it out.
func TestSecurityInPodTemplates(t *testing.T) {
	c := minimalCluster()
	c.Spec.Security.Superusers = []string{"alice", "@ops"}
	for _, sts := range []*appsv1.StatefulSet{MasterStatefulSet(c, inputs(c, GroupMaster)), RegionServerStatefulSet(c, inputs(c, GroupRegionServer))} {
		ctr := sts.Spec.Template.Spec.Containers[0]
		for _, a := range []string{"--security=on", "--tls-cert-file=/etc/cellstore/tls/tls.crt", "--tls-key-file=/etc/cellstore/tls/tls.key",
			"--tls-ca-file=/etc/cellstore/tls/ca.crt", "--superusers=@cellstore:servers,@cellstore:admins,alice,@ops"} {
			if !hasArg(ctr.Args, a) {
				t.Errorf("%s: no %s in %v", sts.Name, a, ctr.Args)
			}
		}
		if ctr.ReadinessProbe.HTTPGet.Scheme != corev1.URISchemeHTTPS || !slices.Contains(ctr.Lifecycle.PreStop.Exec.Command, "--https") {
			t.Errorf("%s: probes and preStop must speak HTTPS", sts.Name)
		}
		var vol *corev1.Volume
		for i := range sts.Spec.Template.Spec.Volumes {
			if v := &sts.Spec.Template.Spec.Volumes[i]; v.Secret != nil && v.Secret.SecretName == ServerTLSSecretName(c) {
				vol = v
			}
		}
		if vol == nil {
			t.Errorf("%s: the server certificate Secret is not mounted", sts.Name)
		}
	}
	c.Spec.Security.TLS = v1alpha1.TLSDisabled
	ctr := MasterStatefulSet(c, inputs(c, GroupMaster)).Spec.Template.Spec.Containers[0]
	if slices.ContainsFunc(ctr.Args, func(a string) bool { return strings.HasPrefix(a, "--security") || strings.HasPrefix(a, "--tls") }) ||
		ctr.ReadinessProbe.HTTPGet.Scheme != corev1.URISchemeHTTP {
		t.Errorf("tls Disabled: %v", ctr.Args)
	}
}

func TestServerCertificateNames(t *testing.T) {
	c := minimalCluster()
	dns, _ := ServerHosts(c)
	for _, want := range []string{c.Name, c.Name + "." + c.Namespace + ".svc", "*." + c.Name + "-master." + c.Namespace + ".svc",
		"*." + c.Name + "-regionserver." + c.Namespace + ".svc", c.Name + "-master." + c.Namespace + ".svc", "localhost"} {
		if !slices.Contains(dns, want) {
			t.Errorf("the server certificate lacks %s: %v", want, dns)
		}
	}
	now := time.Now()
	if NeedsRenewal(now.Add(-time.Hour), now.Add(90*24*time.Hour), now) || !NeedsRenewal(now.Add(-61*24*time.Hour), now.Add(29*24*time.Hour), now) {
		t.Error("renewal must come when a third of the life is left")
	}
}

func TestRegionServerNetworkPolicy(t *testing.T) {
	c := minimalCluster()
	np := RegionServerNetworkPolicy(c, "v1")
	if !slices.Equal(np.Spec.PolicyTypes, []networkingv1.PolicyType{networkingv1.PolicyTypeIngress}) || np.Spec.PodSelector.MatchLabels[LabelComponent] != string(GroupRegionServer) {
		t.Fatalf("policy %+v", np.Spec)
	}
	open := map[int]bool{}
	for _, r := range np.Spec.Ingress {
		p := r.Ports[0].Port.IntValue()
		open[p] = len(r.From) == 0
		if p != int(RegionServerAdmin) {
			continue
		}
		// Only the cluster's own pods, in its namespace: the operator dials the masters, never a
		// region server, so no peer outside the namespace (nor the operator's pods) is admitted.
		if len(r.From) != 1 || r.From[0].NamespaceSelector != nil || r.From[0].IPBlock != nil || r.From[0].PodSelector == nil ||
			!maps.Equal(r.From[0].PodSelector.MatchLabels, map[string]string{LabelName: AppName, LabelInstance: c.Name}) {
			t.Errorf("admin port admits %+v, want only the cluster's pods", r.From)
		}
		for _, peer := range r.From {
			if peer.PodSelector != nil && peer.PodSelector.MatchLabels[LabelName] == "cellstore-operator" {
				t.Errorf("admin port admits the operator's pods: %+v", peer)
			}
		}
	}
	if !open[int(RegionServerDataPort)] || !open[int(RegionServerHTTPPort)] || open[int(RegionServerAdmin)] {
		t.Errorf("open ports %v: want data and HTTP open, admin restricted", open)
	}
}

// spec.backup goes to the masters only; with walArchive the region servers also get the backup
// location (flags, keys, CA) and archive their WALs there, and the masters archive dead ones.
func TestBackupLocationAndWALArchive(t *testing.T) {
	c := defaultedCluster()
	c.Spec.Backup = &v1alpha1.BackupSpec{S3: v1alpha1.S3Location{Endpoint: "https://s3.internal:9000", Bucket: "backups",
		CredentialsSecret: &corev1.LocalObjectReference{Name: "backup-keys"},
		EndpointCA:        &corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "backup-ca"}, Key: "ca.pem"}}}
	hasBackup := func(sts *appsv1.StatefulSet) bool {
		ctr := container(t, sts)
		return hasArg(ctr.Args, "--backup-s3-bucket=backups") &&
			slices.ContainsFunc(ctr.Env, func(e corev1.EnvVar) bool { return e.Name == "CELLSTORE_BACKUP_S3_ACCESS_KEY_ID" }) &&
			slices.ContainsFunc(ctr.VolumeMounts, func(m corev1.VolumeMount) bool { return m.Name == BackupCAVolumeName }) &&
			slices.ContainsFunc(sts.Spec.Template.Spec.Volumes, func(v corev1.Volume) bool { return v.Name == BackupCAVolumeName })
	}
	walArgs := func(sts *appsv1.StatefulSet) []string {
		return slices.DeleteFunc(slices.Clone(container(t, sts).Args), func(a string) bool { return !strings.HasPrefix(a, "--wal-archive") })
	}
	m, rs := MasterStatefulSet(c, inputs(c, GroupMaster)), RegionServerStatefulSet(c, inputs(c, GroupRegionServer))
	if !hasBackup(m) || hasBackup(rs) || len(walArgs(m)) != 0 || len(walArgs(rs)) != 0 {
		t.Fatalf("without walArchive: the master gets the backup location (%v), region servers nothing (%v)", container(t, m).Args, container(t, rs).Args)
	}
	c.Spec.Backup.WALArchive = &v1alpha1.WALArchiveSpec{Interval: &metav1.Duration{Duration: 30 * time.Second}}
	m, rs = MasterStatefulSet(c, inputs(c, GroupMaster)), RegionServerStatefulSet(c, inputs(c, GroupRegionServer))
	if !hasBackup(m) || !hasBackup(rs) {
		t.Fatalf("with walArchive both reach the backup location: master %v, region server %v", container(t, m).Args, container(t, rs).Args)
	}
	if got := walArgs(m); !slices.Equal(got, []string{"--wal-archive", "--wal-archive-retention=168h0m0s"}) {
		t.Errorf("master WAL archive args %v", got)
	}
	if got := walArgs(rs); !slices.Equal(got, []string{"--wal-archive", "--wal-archive-interval=30s"}) {
		t.Errorf("region server WAL archive args %v", got)
	}
}
