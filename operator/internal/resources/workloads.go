package resources

import (
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"

	"github.com/cellstore/cellstore/engine/settings"
	"github.com/cellstore/cellstore/operator/api/v1alpha1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
)

// WorkloadInputs is what a StatefulSet needs beyond the StoreCluster.
type WorkloadInputs struct {
	// ConfigHash is the hash of the engine configuration file (ConfigMap).
	ConfigHash string // of the group's configuration file
	// Replicas of the group (for region servers, what the scale-in protocol allows).
	Replicas int32
	// Hibernated: both groups are rendered with no pods (cellstore.io/hibernation).
	Hibernated bool
	// OperatorVersion labels the StatefulSet (never its pod template).
	OperatorVersion string
	// Memory is the region servers' memory plan.
	Memory MemoryPlan
	// CredentialsHash is a hash of the S3 keys the pods are given from Secrets (as environment
	// variables, read only when a container starts): new keys in a Secret restart the pods, drain
	// first, rather than leave them on keys that may have been revoked.
	CredentialsHash string
}

// MasterStatefulSet is the masters' StatefulSet.
func MasterStatefulSet(c *v1alpha1.StoreCluster, in WorkloadInputs) *appsv1.StatefulSet {
	spec := &c.Spec
	res := spec.MasterResources()
	args := append([]string{"master"}, storageArgs(c)...)
	args = append(args,
		"--config="+ConfigMountPath+"/"+ConfigFileName(GroupMaster),
		fmt.Sprintf("--http-addr=:%d", MasterHTTPPort),
		fmt.Sprintf("--grpc-addr=:%d", MasterGRPCPort),
		fmt.Sprintf("--advertise-host=$(POD_NAME).%s.%s.svc", StatefulSetName(c, GroupMaster), c.Namespace),
		// The Lease election with one master too: the template does not change with the number
		// of masters, so a master added to a single one is a standby, never a second active
		// master beside one that elects itself (--election=none).
		"--election=kubernetes", "--lease-name="+LeaseName(c), "--lease-namespace=$(POD_NAMESPACE)",
	)
	args = append(args, "--hedge-delay="+spec.HedgeDelayDuration().String())
	args = append(args, backupArgs(c)...)
	if w := walArchive(c); w != nil {
		args = append(args, "--wal-archive", "--wal-archive-retention="+w.WALArchiveRetention().String())
	}
	env := append(append(downwardEnv(), storageEnv(c)...), backupEnv(c)...)
	if lim, ok := res.Limits[corev1.ResourceMemory]; ok {
		if h := MasterHeapLimit(lim.Value()); h > 0 {
			env = append(env, corev1.EnvVar{Name: "GOMEMLIMIT", Value: fmt.Sprint(h)})
		}
	}
	ctr := engineContainer(c, args, env, res, []corev1.ContainerPort{
		{Name: portNameGRPC, ContainerPort: MasterGRPCPort, Protocol: corev1.ProtocolTCP},
		{Name: portNameHTTP, ContainerPort: MasterHTTPPort, Protocol: corev1.ProtocolTCP},
	}, MasterHTTPPort, (masterGracePeriod - 10))
	backupVols, backupMounts := backupVolumes(c)
	ctr.VolumeMounts = append(ctr.VolumeMounts, backupMounts...)
	tpl := podTemplate(c, GroupMaster, ctr, backupVols, spec.Master.Scheduling, masterGracePeriod, in.ConfigHash, in.CredentialsHash)
	tpl.Spec.ServiceAccountName = MasterAccountName(c)
	setTemplateHash(&tpl)
	replicas := spec.MasterReplicas()
	if in.Hibernated {
		replicas = 0
	}
	return statefulSet(c, GroupMaster, replicas, tpl, in.OperatorVersion)
}

// RegionServerStatefulSet is the region servers' StatefulSet.
func RegionServerStatefulSet(c *v1alpha1.StoreCluster, in WorkloadInputs) *appsv1.StatefulSet {
	spec := &c.Spec
	m := in.Memory
	args := append([]string{"regionserver"}, storageArgs(c)...)
	args = append(args,
		"--config="+ConfigMountPath+"/"+ConfigFileName(GroupRegionServer),
		fmt.Sprintf("--http-addr=:%d", RegionServerHTTPPort),
		fmt.Sprintf("--data-addr=:%d", RegionServerDataPort),
		fmt.Sprintf("--admin-addr=:%d", RegionServerAdmin),
		fmt.Sprintf("--advertise-host=$(POD_NAME).%s.%s.svc", StatefulSetName(c, GroupRegionServer), c.Namespace),
		"--masters="+MasterAddress(c),
		"--heap-limit="+FormatBytes(m.Heap),
		"--memstore-offheap-size="+FormatBytes(m.MemstoreOffHeap),
		"--blockcache-offheap-size="+FormatBytes(m.BlockCacheOffHeap),
		"--blockcache-onheap-size="+FormatBytes(m.BlockCacheOnHeap),
		"--memory-overhead="+FormatBytes(m.Overhead),
		"--hugepages="+m.HugepagesFlag(),
	)
	res := spec.RegionServerResources()
	if res.Requests == nil {
		res.Requests = corev1.ResourceList{}
	}
	if res.Limits == nil {
		res.Limits = corev1.ResourceList{}
	}
	mem := *resource.NewQuantity(m.Limit, resource.BinarySI)
	res.Requests[corev1.ResourceMemory], res.Limits[corev1.ResourceMemory] = mem, mem
	var extra []corev1.Volume
	if m.HugePageSize > 0 {
		name := corev1.ResourceName(corev1.ResourceHugePagesPrefix + m.HugePageName)
		hp := *resource.NewQuantity(m.HugePages, resource.BinarySI)
		res.Requests[name], res.Limits[name] = hp, hp
		extra = append(extra, corev1.Volume{Name: volumeHugePages, VolumeSource: corev1.VolumeSource{
			EmptyDir: &corev1.EmptyDirVolumeSource{Medium: corev1.StorageMedium(string(corev1.StorageMediumHugePagesPrefix) + m.HugePageName)},
		}})
	}
	env := append(downwardEnv(), storageEnv(c)...)
	if w := walArchive(c); w != nil {
		// The region servers archive their WALs at the backup location themselves.
		args = append(args, backupArgs(c)...)
		args = append(args, "--wal-archive", "--wal-archive-interval="+w.WALArchiveInterval().String())
		env = append(env, backupEnv(c)...)
		vols, _ := backupVolumes(c)
		extra = append(extra, vols...)
	}
	drain := spec.DrainTimeoutDuration()
	ctr := engineContainer(c, args, env, res, []corev1.ContainerPort{
		{Name: portNameData, ContainerPort: RegionServerDataPort, Protocol: corev1.ProtocolTCP},
		{Name: portNameAdmin, ContainerPort: RegionServerAdmin, Protocol: corev1.ProtocolTCP},
		{Name: portNameHTTP, ContainerPort: RegionServerHTTPPort, Protocol: corev1.ProtocolTCP},
	}, RegionServerHTTPPort, int64(drain.Seconds()))
	if m.HugePageSize > 0 {
		ctr.VolumeMounts = append(ctr.VolumeMounts, corev1.VolumeMount{Name: volumeHugePages, MountPath: HugePagesPath})
	}
	if walArchive(c) != nil {
		_, mounts := backupVolumes(c)
		ctr.VolumeMounts = append(ctr.VolumeMounts, mounts...)
	}
	if n := FileCacheBytes(c); n > 0 {
		// The entries' headers and checksums take a little more than the bytes cached.
		limit := resource.NewQuantity(n+n/16, resource.BinarySI)
		extra = append(extra, corev1.Volume{Name: volumeFileCache, VolumeSource: corev1.VolumeSource{
			EmptyDir: &corev1.EmptyDirVolumeSource{SizeLimit: limit}}})
		ctr.VolumeMounts = append(ctr.VolumeMounts, corev1.VolumeMount{Name: volumeFileCache, MountPath: FileCachePath})
		ctr.Args = append(ctr.Args, "--file-cache-dir="+FileCachePath, "--file-cache-size="+FormatBytes(n))
	}
	tpl := podTemplate(c, GroupRegionServer, ctr, extra, spec.RegionServers.Scheduling, RegionServerGracePeriod(c), in.ConfigHash, in.CredentialsHash)
	// Region servers do not call the Kubernetes API.
	tpl.Spec.AutomountServiceAccountToken = ptr.To(false)
	setTemplateHash(&tpl)
	return statefulSet(c, GroupRegionServer, in.Replicas, tpl, in.OperatorVersion)
}

// RegionServerGracePeriod is the region servers' terminationGracePeriodSeconds: the drain timeout
// (the preStop hook drains the server when something other than the operator deletes the pod) plus
// 30s to close.
func RegionServerGracePeriod(c *v1alpha1.StoreCluster) int64 {
	return int64(c.Spec.DrainTimeoutDuration().Seconds()) + shutdownMargin
}

func statefulSet(c *v1alpha1.StoreCluster, g Group, replicas int32, tpl corev1.PodTemplateSpec, operatorVersion string) *appsv1.StatefulSet {
	return &appsv1.StatefulSet{
		TypeMeta:   metav1.TypeMeta{APIVersion: "apps/v1", Kind: "StatefulSet"},
		ObjectMeta: objectMeta(c, StatefulSetName(c, g), g, operatorVersion),
		Spec: appsv1.StatefulSetSpec{
			Replicas:            ptr.To(replicas),
			Selector:            &metav1.LabelSelector{MatchLabels: SelectorLabels(c, g)},
			ServiceName:         StatefulSetName(c, g),
			Template:            tpl,
			PodManagementPolicy: appsv1.ParallelPodManagement,
			// The operator decides when each pod restarts (after draining it).
			UpdateStrategy: appsv1.StatefulSetUpdateStrategy{Type: appsv1.OnDeleteStatefulSetStrategyType},
		},
	}
}

func setTemplateHash(t *corev1.PodTemplateSpec) {
	h := TemplateHash(t)
	if t.Annotations == nil {
		t.Annotations = map[string]string{}
	}
	t.Annotations[AnnotationTemplateHash] = h
}

func downwardEnv() []corev1.EnvVar {
	field := func(name, path string) corev1.EnvVar {
		return corev1.EnvVar{Name: name, ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{APIVersion: "v1", FieldPath: path}}}
	}
	return []corev1.EnvVar{
		field("POD_NAME", "metadata.name"),
		field("POD_NAMESPACE", "metadata.namespace"),
		field("POD_IP", "status.podIP"),
		field("NODE_NAME", "spec.nodeName"),
	}
}

func engineContainer(c *v1alpha1.StoreCluster, args []string, env []corev1.EnvVar, res corev1.ResourceRequirements, ports []corev1.ContainerPort, httpPort int32, prestopSeconds int64) corev1.Container {
	httpGet := func(path string) corev1.ProbeHandler {
		return corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: path, Port: intstr.FromString(portNameHTTP), Scheme: httpScheme(c)}}
	}
	mounts := []corev1.VolumeMount{
		{Name: volumeConfig, MountPath: ConfigMountPath, ReadOnly: true},
		{Name: volumeTmp, MountPath: TmpPath},
	}
	if SharedClaimName(c) != "" {
		mounts = append([]corev1.VolumeMount{{Name: volumeShared, MountPath: SharedMountPath}}, mounts...)
	}
	_, caMounts := storageVolumes(c)
	mounts = append(mounts, caMounts...)
	_, tlsMounts := securityVolumes(c)
	mounts = append(mounts, tlsMounts...)
	args = append(args, securityArgs(c)...)
	env = append(env, securityEnv(c)...)
	prestop := append([]string{EngineBinary, "prestop", fmt.Sprintf("--http-addr=127.0.0.1:%d", httpPort), fmt.Sprintf("--timeout=%ds", prestopSeconds)},
		prestopArgs(c)...)
	return corev1.Container{
		Name:            EngineContainer,
		Image:           EngineImageOf(c),
		ImagePullPolicy: c.Spec.PullPolicy(),
		Command:         []string{EngineBinary},
		Args:            args,
		Ports:           ports,
		Env:             env,
		Resources:       res,
		VolumeMounts:    mounts,
		// Started: the process answers; it may replay WALs for a while first.
		StartupProbe:  &corev1.Probe{ProbeHandler: httpGet(livenessPath), PeriodSeconds: 5, TimeoutSeconds: 3, FailureThreshold: 120},
		LivenessProbe: &corev1.Probe{ProbeHandler: httpGet(livenessPath), PeriodSeconds: 10, TimeoutSeconds: 5, FailureThreshold: 3},
		// Ready: registered with the master and serving (the engine's /readyz).
		ReadinessProbe:           &corev1.Probe{ProbeHandler: httpGet(readinessPath), PeriodSeconds: 5, TimeoutSeconds: 3, FailureThreshold: 2, SuccessThreshold: 1},
		Lifecycle:                &corev1.Lifecycle{PreStop: &corev1.LifecycleHandler{Exec: &corev1.ExecAction{Command: prestop}}},
		TerminationMessagePolicy: corev1.TerminationMessageFallbackToLogsOnError,
		SecurityContext: &corev1.SecurityContext{
			RunAsNonRoot:             ptr.To(true),
			AllowPrivilegeEscalation: ptr.To(false),
			ReadOnlyRootFilesystem:   ptr.To(true),
			Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
		},
	}
}

func podTemplate(c *v1alpha1.StoreCluster, g Group, ctr corev1.Container, extraVolumes []corev1.Volume, sched v1alpha1.Scheduling, grace int64, configHash, credentialsHash string) corev1.PodTemplateSpec {
	spec := &c.Spec
	overrides := v1alpha1.PodTemplateOverrides{}
	if spec.PodTemplate != nil {
		overrides = *spec.PodTemplate
	}
	labels := map[string]string{}
	maps.Copy(labels, overrides.Labels)
	maps.Copy(labels, SelectorLabels(c, g))
	labels[LabelManagedBy] = ManagedBy
	annotations := map[string]string{}
	maps.Copy(annotations, overrides.Annotations)
	annotations["kubectl.kubernetes.io/default-container"] = EngineContainer
	if configHash != "" {
		annotations[AnnotationConfigHash] = configHash
	}
	if credentialsHash != "" {
		annotations[AnnotationCredentialsHash] = credentialsHash
	}
	if v := c.Annotations[v1alpha1.AnnotationRestartedAt]; v != "" {
		annotations[v1alpha1.AnnotationRestartedAt] = v
	}

	volumes := []corev1.Volume{
		{Name: volumeConfig, VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
			LocalObjectReference: corev1.LocalObjectReference{Name: ConfigMapName(c)},
		}}},
		{Name: volumeTmp, VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
	}
	if claim := SharedClaimName(c); claim != "" {
		volumes = append([]corev1.Volume{{Name: volumeShared, VolumeSource: corev1.VolumeSource{
			PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: claim},
		}}}, volumes...)
	}
	caVolumes, _ := storageVolumes(c)
	volumes = append(volumes, caVolumes...)
	tlsVolumes, _ := securityVolumes(c)
	volumes = append(volumes, tlsVolumes...)
	volumes = append(volumes, extraVolumes...)

	affinity := sched.Affinity
	if affinity == nil {
		affinity = overrides.Affinity
	}
	if affinity == nil {
		affinity = &corev1.Affinity{PodAntiAffinity: &corev1.PodAntiAffinity{
			PreferredDuringSchedulingIgnoredDuringExecution: []corev1.WeightedPodAffinityTerm{{
				Weight: 100,
				PodAffinityTerm: corev1.PodAffinityTerm{
					LabelSelector: &metav1.LabelSelector{MatchLabels: SelectorLabels(c, g)},
					TopologyKey:   corev1.LabelHostname,
				},
			}},
		}}
	}
	tolerations := sched.Tolerations
	if len(tolerations) == 0 {
		tolerations = overrides.Tolerations
	}
	spread := sched.TopologySpreadConstraints
	if len(spread) == 0 {
		spread = overrides.TopologySpreadConstraints
	}
	priority := sched.PriorityClassName
	if priority == "" {
		priority = overrides.PriorityClassName
	}

	return corev1.PodTemplateSpec{
		ObjectMeta: metav1.ObjectMeta{Labels: labels, Annotations: annotations},
		Spec: corev1.PodSpec{
			Containers:                    []corev1.Container{ctr},
			Volumes:                       volumes,
			TerminationGracePeriodSeconds: ptr.To(grace),
			ImagePullSecrets:              spec.ImagePullSecrets,
			NodeSelector:                  sched.NodeSelector,
			Affinity:                      affinity,
			Tolerations:                   tolerations,
			TopologySpreadConstraints:     spread,
			PriorityClassName:             priority,
			EnableServiceLinks:            ptr.To(false),
			SecurityContext: &corev1.PodSecurityContext{
				RunAsNonRoot:        ptr.To(true),
				RunAsUser:           ptr.To(int64(EngineUID)),
				RunAsGroup:          ptr.To(int64(EngineUID)),
				FSGroup:             ptr.To(int64(EngineUID)),
				FSGroupChangePolicy: ptr.To(corev1.FSGroupChangeOnRootMismatch),
				SeccompProfile:      &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
			},
		},
	}
}

// ConfigFileName is a group's engine configuration file in the ConfigMap.
func ConfigFileName(g Group) string { return string(g) + ".conf" }

// ConfigMap holds the engine configuration files of both groups; it returns the hash of each
// file, which goes into that group's pod template (so a change restarts only that group). The
// hash leaves out the settings that change without a restart (engine/settings): a change to
// those alone updates the file, which the running pods re-read (within about a minute: the
// kubelet refreshes the volume), and restarts nothing.
func ConfigMap(c *v1alpha1.StoreCluster, operatorVersion string) (*corev1.ConfigMap, map[Group]string) {
	cm := &corev1.ConfigMap{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMap"},
		ObjectMeta: objectMeta(c, ConfigMapName(c), "", operatorVersion),
		Data:       map[string]string{},
	}
	hashes := map[Group]string{}
	for _, g := range []Group{GroupMaster, GroupRegionServer} {
		content := ConfigFile(c, g)
		cm.Data[ConfigFileName(g)] = content
		// (Without online settings the hash is the file's, as before they existed: an upgrade of
		// the operator restarts nothing.)
		lines := slices.DeleteFunc(strings.Split(content, "\n"), func(line string) bool {
			k, _, ok := strings.Cut(line, " = ")
			return ok && settings.IsOnline(groupRole(g), k)
		})
		hashes[g] = shortHash([]byte(strings.Join(lines, "\n")))
	}
	return cm, hashes
}

// groupRole is the engine role of a group's pods.
func groupRole(g Group) settings.Role {
	if g == GroupMaster {
		return settings.Master
	}
	return settings.RegionServer
}

// SplitOnline divides changed configuration flags of group g into those its pods apply without a
// restart and those that need one.
func SplitOnline(g Group, keys []string) (online, restart []string) {
	for _, k := range keys {
		if settings.IsOnline(groupRole(g), k) {
			online = append(online, k)
		} else {
			restart = append(restart, k)
		}
	}
	return online, restart
}

// ConfigFile renders a group's engine configuration file: spec.config overlaid with the group's
// config, as sorted "flag-name = value" lines.
func ConfigFile(c *v1alpha1.StoreCluster, g Group) string {
	merged := map[string]v1alpha1.ConfigValue{}
	maps.Copy(merged, c.Spec.Config)
	if g == GroupMaster {
		maps.Copy(merged, c.Spec.Master.Config)
	} else {
		maps.Copy(merged, c.Spec.RegionServers.Config)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "# Cellstore %s configuration of StoreCluster %s/%s, written by the operator from spec.config and spec.%s.config.\n",
		g, c.Namespace, c.Name, map[Group]string{GroupMaster: "master", GroupRegionServer: "regionServers"}[g])
	b.WriteString("# One \"flag-name = value\" per line; flags on the command line win.\n")
	for _, k := range slices.Sorted(maps.Keys(merged)) {
		fmt.Fprintf(&b, "%s = %s\n", k, strings.ReplaceAll(string(merged[k]), "\n", " "))
	}
	return b.String()
}

// ConfigKeysChanged lists the flags whose lines differ between two configuration files.
func ConfigKeysChanged(old, cur string) []string {
	parse := func(s string) map[string]string {
		m := map[string]string{}
		for _, line := range strings.Split(s, "\n") {
			if line == "" || strings.HasPrefix(line, "#") {
				continue
			}
			k, v, _ := strings.Cut(line, " = ")
			m[k] = v
		}
		return m
	}
	a, b := parse(old), parse(cur)
	var out []string
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			out = append(out, k)
		}
	}
	for k := range b {
		if _, ok := a[k]; !ok {
			out = append(out, k)
		}
	}
	sort.Strings(out)
	return out
}

// S3 credentials: the Secret's keys, passed as the engine's own variables.
const (
	S3AccessKeyIDKey     = "AWS_ACCESS_KEY_ID"
	S3SecretAccessKeyKey = "AWS_SECRET_ACCESS_KEY"
)

// storageArgs are the engine flags that say where the data is: the shared volume's mount, or the
// bucket of spec.storage.s3.
func storageArgs(c *v1alpha1.StoreCluster) []string {
	s3 := c.Spec.Storage.S3
	if s3 == nil {
		return []string{"--storage-dir=" + SharedMountPath}
	}
	return s3Args("--s3-", &s3.S3Location, S3CAMountPath+"/"+S3CAFileName)
}

// literalArg keeps a value from the spec as it is in a container's args, where the kubelet
// expands $(NAME) from the container's environment and reads $$ as $: a bucket named
// "$(CELLSTORE_S3_SECRET_ACCESS_KEY)" made the engine name the S3 secret key as its bucket in
// every error it logged (and in the pod's termination message).
func literalArg(v string) string { return strings.ReplaceAll(v, "$", "$$") }

// s3Args are the flags (--s3-... or --backup-s3-...) naming a bucket.
func s3Args(flag string, s3 *v1alpha1.S3Location, caFile string) []string {
	args := []string{flag + "endpoint=" + literalArg(s3.Endpoint), flag + "bucket=" + literalArg(s3.Bucket)}
	if s3.Prefix != "" {
		args = append(args, flag+"prefix="+literalArg(s3.Prefix))
	}
	if s3.Region != "" {
		args = append(args, flag+"region="+literalArg(s3.Region))
	}
	if s3.PathStyle {
		args = append(args, flag+"path-style")
	}
	if s3.EndpointCA != nil {
		args = append(args, flag+"ca-file="+caFile)
	}
	return args
}

// The backup location (spec.backup.s3): the masters copy snapshots there; with WAL archiving
// (spec.backup.walArchive) the region servers archive their WALs there too.
const (
	BackupCAVolumeName = "backup-s3-ca"
	BackupCAMountPath  = "/etc/cellstore/backup-s3-ca"
)

// backupArgs, backupEnv and backupVolumes give the masters spec.backup.
func backupArgs(c *v1alpha1.StoreCluster) []string {
	if c.Spec.Backup == nil {
		return nil
	}
	return s3Args("--backup-s3-", &c.Spec.Backup.S3, BackupCAMountPath+"/"+S3CAFileName)
}

// walArchive is spec.backup.walArchive, nil when off.
func walArchive(c *v1alpha1.StoreCluster) *v1alpha1.WALArchiveSpec {
	if c.Spec.Backup == nil {
		return nil
	}
	return c.Spec.Backup.WALArchive
}

func backupEnv(c *v1alpha1.StoreCluster) []corev1.EnvVar {
	if c.Spec.Backup == nil {
		return nil
	}
	return s3Env(&c.Spec.Backup.S3, "CELLSTORE_BACKUP_S3_ACCESS_KEY_ID", "CELLSTORE_BACKUP_S3_SECRET_ACCESS_KEY")
}

func backupVolumes(c *v1alpha1.StoreCluster) ([]corev1.Volume, []corev1.VolumeMount) {
	if c.Spec.Backup == nil {
		return nil, nil
	}
	return s3CAVolume(&c.Spec.Backup.S3, BackupCAVolumeName, BackupCAMountPath)
}

// The region servers' local file cache of a StoreCluster on S3 (spec.storage.s3.fileCacheSize).
const (
	volumeFileCache = "file-cache"
	FileCachePath   = "/var/cache/cellstore/files"
)

// FileCacheBytes is the size of each region server's local file cache (0: none, or not on S3).
// The CRD's rule keeps the size parseable; one that is not gives no cache.
func FileCacheBytes(c *v1alpha1.StoreCluster) int64 {
	s3 := c.Spec.Storage.S3
	if s3 == nil || s3.FileCacheSize == "" {
		return 0
	}
	n, err := ParseBytes("spec.storage.s3.fileCacheSize", s3.FileCacheSize)
	if err != nil {
		return 0
	}
	return n
}

// The endpoint's CA bundle (spec.storage.s3.endpointCA), mounted read-only.
const (
	S3CAVolumeName = "s3-ca"
	S3CAMountPath  = "/etc/cellstore/s3-ca"
	S3CAFileName   = "ca.crt"
)

// storageVolumes are the volumes and mounts storage needs besides the shared volume: the S3
// endpoint's CA bundle, when one is named.
func storageVolumes(c *v1alpha1.StoreCluster) ([]corev1.Volume, []corev1.VolumeMount) {
	if c.Spec.Storage.S3 == nil {
		return nil, nil
	}
	return s3CAVolume(&c.Spec.Storage.S3.S3Location, S3CAVolumeName, S3CAMountPath)
}

// s3CAVolume mounts a bucket's endpoint CA bundle read-only, when one is named.
func s3CAVolume(s3 *v1alpha1.S3Location, name, mountPath string) ([]corev1.Volume, []corev1.VolumeMount) {
	if s3.EndpointCA == nil {
		return nil, nil
	}
	vol := corev1.Volume{Name: name, VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{
		SecretName: s3.EndpointCA.Name, DefaultMode: ptr.To(int32(0o444)),
		Items: []corev1.KeyToPath{{Key: s3.EndpointCA.Key, Path: S3CAFileName}}}}}
	return []corev1.Volume{vol}, []corev1.VolumeMount{{Name: name, MountPath: mountPath, ReadOnly: true}}
}

// storageEnv passes the S3 credentials from their Secret (the values never enter the pod spec).
func storageEnv(c *v1alpha1.StoreCluster) []corev1.EnvVar {
	if c.Spec.Storage.S3 == nil {
		return nil
	}
	return s3Env(&c.Spec.Storage.S3.S3Location, "CELLSTORE_S3_ACCESS_KEY_ID", "CELLSTORE_S3_SECRET_ACCESS_KEY")
}

// s3Env passes a bucket's keys from its credentials Secret as the engine's variables; none
// without a Secret (the AWS SDK's ambient chain).
func s3Env(s3 *v1alpha1.S3Location, accessEnv, secretEnv string) []corev1.EnvVar {
	if s3.CredentialsSecret == nil {
		return nil
	}
	ref := func(env, key string) corev1.EnvVar {
		return corev1.EnvVar{Name: env, ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{
			LocalObjectReference: *s3.CredentialsSecret, Key: key}}}
	}
	return []corev1.EnvVar{ref(accessEnv, S3AccessKeyIDKey), ref(secretEnv, S3SecretAccessKeyKey)}
}
