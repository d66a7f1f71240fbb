//go:build envtest

package v1alpha1_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/cellstore/cellstore/engine/quota"
	"github.com/cellstore/cellstore/operator/internal/testenv"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/discovery"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"
)

// The CRD's schema (types, defaults, CEL rules) runs in a real kube-apiserver: every bad spec must
// be refused with a message a person understands.

var (
	env *testenv.Env
	ctx = context.Background()
	seq int
)

func TestValidation(t *testing.T) {
	RegisterFailHandler(Fail)
	RunSpecs(t, "StoreCluster validation (envtest)")
}

var _ = BeforeSuite(func() {
	var err error
	env, err = testenv.Start(testenv.Options{CRDDirs: []string{filepath.Join("..", "..", "..", "config", "crd", "bases")}})
	Expect(err).NotTo(HaveOccurred())
})

var _ = AfterSuite(func() {
	if env != nil {
		Expect(env.Stop()).To(Succeed())
	}
})

// cluster is a valid StoreCluster as unstructured YAML, changed by the given edits.
func cluster(edits ...func(spec map[string]any)) *unstructured.Unstructured {
	seq++
	u := &unstructured.Unstructured{}
	Expect(yaml.Unmarshal([]byte(fmt.Sprintf(`
apiVersion: cellstore.io/v1alpha1
kind: StoreCluster
metadata: {name: c%d, namespace: default}
spec:
  image: docker.io/cellstore/engine:v0.1.0
  storage: {existingClaim: {claimName: data}}
`, seq)), &u.Object)).To(Succeed())
	spec := u.Object["spec"].(map[string]any)
	for _, e := range edits {
		e(spec)
	}
	return u
}

// set puts a YAML value at a dotted path of the spec.
func set(path, value string) func(map[string]any) {
	return func(spec map[string]any) {
		var v any
		Expect(yaml.Unmarshal([]byte(value), &v)).To(Succeed())
		parts := strings.Split(path, ".")
		m := spec
		for _, p := range parts[:len(parts)-1] {
			next, ok := m[p].(map[string]any)
			if !ok {
				next = map[string]any{}
				m[p] = next
			}
			m = next
		}
		m[parts[len(parts)-1]] = v
	}
}

func del(key string) func(map[string]any) {
	return func(spec map[string]any) { delete(spec, key) }
}

var _ = Describe("StoreCluster validation", func() {
	It("accepts a minimal StoreCluster and fills in the defaults", func() {
		u := cluster()
		Expect(env.Client.Create(ctx, u)).To(Succeed())
		spec := u.Object["spec"].(map[string]any)
		Expect(spec).To(HaveKeyWithValue("defaultRegionReplication", BeNumerically("==", 1)))
		Expect(spec).To(HaveKeyWithValue("hedgeDelay", "10ms"))
		Expect(spec["master"]).To(HaveKeyWithValue("replicas", BeNumerically("==", 2)))
		Expect(spec["regionServers"]).To(And(HaveKeyWithValue("replicas", BeNumerically("==", 3)),
			HaveKeyWithValue("memory", HaveKeyWithValue("limit", "2Gi"))))
		Expect(spec["rollout"]).To(Equal(map[string]any{"drainTimeout": "10m", "onDrainTimeout": "Wait"}))
		Expect(spec["monitoring"]).To(Equal(map[string]any{"serviceMonitor": true, "prometheusRule": true}))
	})

	It("accepts the samples in config/samples", func() {
		files, err := filepath.Glob(filepath.Join("..", "..", "..", "config", "samples", "cellstore_*.yaml"))
		Expect(err).NotTo(HaveOccurred())
		Expect(files).To(HaveLen(3))
		for _, f := range files {
			b, err := os.ReadFile(f)
			Expect(err).NotTo(HaveOccurred())
			u := &unstructured.Unstructured{}
			Expect(yaml.Unmarshal(b, &u.Object)).To(Succeed())
			u.SetNamespace("default")
			Expect(env.Client.Create(ctx, u)).To(Succeed(), f)
		}
	})

	It("accepts spec.version with an image without a tag, with the same tag or by digest", func() {
		for _, image := range []string{"docker.io/cellstore/engine", "registry.example:5000/cellstore/engine", "registry.example:5000/cellstore/engine:v1.4.0",
			"docker.io/cellstore/engine@sha256:" + strings.Repeat("ab", 32)} {
			Expect(env.Client.Create(ctx, cluster(set("image", "'"+image+"'"), set("version", "v1.4.0")))).To(Succeed(), image)
		}
	})

	It("accepts exactly the quota limits the engine's parser accepts", func() {
		// NONE means "no quota" to the engine's shell: in spec.quotas a quota without a limit is
		// one removed from the list, so the schema refuses it.
		for _, limit := range []string{"100req/sec", "10M/sec", "10m/sec", "1g/HOUR", "5K/Min", "100REQ/day", "007req/sec",
			"1P/day", "0req/sec", "100 req/sec", "10M/week", "-1req/sec", "1x/sec", "100req", "req/sec", "10MB/sec", "NONE"} {
			_, perr := quota.ParseLimit(limit)
			err := env.Client.Create(ctx, cluster(set("quotas", fmt.Sprintf("[{user: alice, limit: '%s'}]", limit))))
			if perr == nil && limit != "NONE" {
				Expect(err).NotTo(HaveOccurred(), "the engine parses %q, the schema refuses it", limit)
			} else {
				Expect(err).To(MatchError(ContainSubstring("quota limit "+limit+" is not valid")), "the engine refuses %q (%v), the schema accepts it", limit, perr)
			}
		}
	})

	DescribeTable("refuses a bad spec with a clear message",
		func(message string, edits ...func(map[string]any)) {
			err := env.Client.Create(ctx, cluster(edits...))
			Expect(err).To(HaveOccurred(), "the spec was accepted")
			Expect(err.Error()).To(ContainSubstring(message))
		},
		Entry("no storage", "storage: set exactly one of existingClaim, volume or s3", set("storage", "{}")),
		Entry("two storage kinds", "storage: set exactly one of existingClaim, volume or s3",
			set("storage.volume", "{size: 1Gi}")),
		Entry("S3 endpoint not a URL", "the S3 endpoint must be an http or https URL",
			set("storage", "{s3: {endpoint: 'ftp://x', bucket: bkt, credentialsSecret: {name: s}}}")),
		Entry("volume size zero", "storage.volume.size must be positive",
			set("storage", "{volume: {size: '0'}}")),
		Entry("a size that is not a size", "must be an amount of bytes such as 512Mi, 8Gi or 1073741824",
			set("regionServers.memory.limit", "lots")),
		Entry("heap limit and percent", "set memory.heapLimit or memory.heapPercent, not both",
			set("regionServers.memory", "{limit: 4Gi, heapLimit: 1Gi, heapPercent: 30}")),
		Entry("memory limit below 1Gi", "memory.limit must be at least 1Gi",
			set("regionServers.memory", "{limit: 512Mi}")),
		Entry("budgets over the limit, with the numbers",
			"region server memory budgets exceed memory.limit (4096Mi): heap 3072Mi + off-heap memstore and block cache outside hugepages 1024Mi + overhead 409Mi (the larger of 256Mi and 10% of the limit) = 4505Mi",
			set("regionServers.memory", "{limit: 4Gi, heapLimit: 3Gi, memstoreOffHeapSize: 1Gi}")),
		Entry("heap percent over the limit", "heap 3686Mi + off-heap memstore and block cache outside hugepages 512Mi",
			set("regionServers.memory", "{limit: 4Gi, heapPercent: 90, blockCacheOffHeapSize: 512Mi}")),
		Entry("no room left for the heap",
			"region server memory budgets leave no room for the Go heap in memory.limit (2048Mi): off-heap memstore and block cache outside hugepages 1792Mi + on-heap block cache 0Mi + 64Mi minimum heap + overhead 256Mi",
			set("regionServers.memory", "{limit: 2Gi, memstoreOffHeapSize: 1Gi, blockCacheOffHeapSize: 768Mi}")),
		Entry("on-heap cache too big for the heap",
			"memory.blockCacheOnHeapSize (900Mi) is part of the Go heap (1024Mi): it may use at most 80% of it and must leave at least 64Mi for requests",
			set("regionServers.memory", "{limit: 4Gi, heapLimit: 1Gi, blockCacheOnHeapSize: 900Mi}")),
		Entry("hugepages too small for the off-heap budgets",
			"memory.hugePages.amount (1Gi) must hold the off-heap memstore and block cache, 1536Mi together",
			set("regionServers.memory", "{limit: 4Gi, memstoreOffHeapSize: 1Gi, blockCacheOffHeapSize: 512Mi, hugePages: {pageSize: 2Mi, amount: 1Gi}}")),
		Entry("hugepage amount not a multiple of the page", "memory.hugePages.amount (1536Mi) must be a positive multiple of the page size 1Gi",
			set("regionServers.memory.hugePages", "{pageSize: 1Gi, amount: 1536Mi}")),
		Entry("hugepage size not 2Mi or 1Gi", `Unsupported value: "4Ki": supported values: "2Mi", "1Gi"`,
			set("regionServers.memory.hugePages", "{pageSize: 4Ki, amount: 1Gi}")),
		Entry("memory in resources", "set the region servers' memory with regionServers.memory.limit and hugepages with regionServers.memory.hugePages, not in resources.limits",
			set("regionServers.resources", "{limits: {memory: 8Gi}}")),
		Entry("hugepages in resources", "not in resources.requests",
			set("regionServers.resources", "{requests: {hugepages-2Mi: 1Gi}}")),
		Entry("no masters", "spec.master.replicas: Invalid value: 0: spec.master.replicas in body should be greater than or equal to 1",
			set("master.replicas", "0")),
		Entry("too many region servers", "spec.regionServers.replicas in body should be less than or equal to 500",
			set("regionServers.replicas", "501")),
		Entry("replication beyond the servers", "defaultRegionReplication (3) needs at least as many region servers, but regionServers.replicas is 2",
			set("regionServers.replicas", "2"), set("defaultRegionReplication", "3")),
		Entry("hedge delay too long", "hedgeDelay must be between 0s and 10s", set("hedgeDelay", "1m")),
		Entry("WAL archive interval too long", "walArchive.interval must be between 1s and 1h",
			set("backup", "{s3: {endpoint: 'http://s3:9000', bucket: b, credentialsSecret: {name: s}}, walArchive: {interval: 2h}}")),
		Entry("WAL archive retention too short", "walArchive.retention must be at least 1h",
			set("backup", "{s3: {endpoint: 'http://s3:9000', bucket: b, credentialsSecret: {name: s}}, walArchive: {retention: 10m}}")),
		Entry("drain timeout zero", "rollout.drainTimeout must be between 1s and 24h", set("rollout.drainTimeout", "0s")),
		Entry("unknown drain timeout action", `Unsupported value: "Later"`, set("rollout.onDrainTimeout", "Later")),
		Entry("quota limit syntax",
			"quota limit 100 req/sec is not valid: write a positive number, then req (requests) or a size unit B, K, M, G, T or P (bytes), then /sec, /min, /hour or /day, e.g. 100req/sec or 10M/sec",
			set("quotas", "[{user: alice, limit: 100 req/sec}]")),
		Entry("quota time unit", "quota limit 10M/week is not valid", set("quotas", "[{user: alice, limit: 10M/week}]")),
		Entry("quota of nobody", "a quota names exactly one of user, table or namespace", set("quotas", "[{limit: 1req/sec}]")),
		Entry("quota of two subjects", "a quota names exactly one of user, table or namespace",
			set("quotas", "[{user: alice, table: t, limit: 1req/sec}]")),
		Entry("quota table name", "quota table must be 'namespace:table' or 'table'", set("quotas", "[{table: 'a:b:c', limit: 1req/sec}]")),
		Entry("quota throttle type", `Unsupported value: "SCAN"`, set("quotas", "[{user: a, throttleType: SCAN, limit: 1req/sec}]")),
		Entry("config of a managed flag", "config must not set flags the operator manages",
			set("config", "{heap-limit: 1Gi}")),
		Entry("config of a managed flag, per group", "config must not set flags the operator manages",
			set("regionServers.config", "{masters: x}")),
		Entry("config of the bucket's flags", "config must not set flags the operator manages",
			set("config", "{s3-prefix: other}")),
		Entry("config of the backup location's flags", "config must not set flags the operator manages",
			set("master.config", "{backup-s3-bucket: b}")),
		Entry("config of the WAL archive's flags", "config must not set flags the operator manages",
			set("regionServers.config", "{wal-archive-interval: 1s}")),
		// The engine took --bucket-dir over the operator's --storage-dir: an empty place.
		Entry("config of a bucket directory", "config must not set flags the operator manages",
			set("config", "{bucket-dir: /tmp/b}")),
		Entry("config of a backup directory", "config must not set flags the operator manages",
			set("config", "{backup-dir: /x}")),
		Entry("config of the token file", "config must not set flags the operator manages",
			set("config", "{token-file: /tmp/t}")),
		Entry("config key syntax", "config keys are engine flag names without the leading '--'", set("config", "{'--flush-size': '1'}")),
		Entry("config value on two lines", "config values must be on one line", set("config", "{flush-size: \"1\\n2\"}")),
		Entry("the operator's labels", "podTemplate.labels must not set app.kubernetes.io/name, instance, component or managed-by",
			set("podTemplate.labels", "{app.kubernetes.io/instance: other}")),
		Entry("the operator's annotations", "podTemplate.annotations must not set cellstore.io/ annotations",
			set("podTemplate.annotations", "{cellstore.io/template-hash: x}")),
		Entry("no image", "spec.image: Required value", del("image")),
		Entry("a version that is not one", `spec.version in body should match`, set("version", "latest")),
		Entry("a version with build metadata, which no image tag can hold", `spec.version in body should match`, set("version", "v1.4.0+abc")),
		Entry("an image tag of another version", "spec.image has the tag of another version than spec.version (v1.4.0): give the image without a tag",
			set("image", "registry.example:5000/cellstore/engine:v1.3.2"), set("version", "v1.4.0")),
		Entry("tls Provided without certificates", "security.tls Provided needs security.certificates.serverSecretName",
			set("security", "{tls: Provided}")),
		Entry("tls Provided without the client Secret", "security.tls Provided needs security.certificates.serverSecretName (the Secret of the servers' certificate: tls.crt, tls.key, ca.crt) and security.certificates.clientSecretName",
			set("security", "{tls: Provided, certificates: {serverSecretName: server-tls}}")),
		Entry("tls Provided without the server Secret", "security.tls Provided needs security.certificates.serverSecretName",
			set("security", "{tls: Provided, certificates: {clientSecretName: operator-tls}}")),
		Entry("certificates with tls defaulted to Generated", "security.certificates names your own certificate Secrets and is used only with security.tls Provided",
			set("security", "{certificates: {serverSecretName: server-tls, clientSecretName: operator-tls}}")),
		Entry("certificates with tls Disabled", "security.certificates names your own certificate Secrets and is used only with security.tls Provided",
			set("security", "{tls: Disabled, certificates: {serverSecretName: server-tls, clientSecretName: operator-tls}}")),
		Entry("a Secret name that is not a name", "spec.security.certificates.serverSecretName in body should match",
			set("security", "{tls: Provided, certificates: {serverSecretName: Server_TLS, clientSecretName: operator-tls}}")),
		Entry("an unknown tls mode", `Unsupported value: "Custom": supported values: "Generated", "Provided", "Disabled"`,
			set("security", "{tls: Custom}")),
		Entry("external access through a ClusterIP", `Unsupported value: "ClusterIP": supported values: "NodePort", "LoadBalancer"`,
			set("externalAccess", "{type: ClusterIP}")),
		Entry("a host for load balancers", "spec.externalAccess.host is for NodePort Services",
			set("externalAccess", "{type: LoadBalancer, host: db.example.com}")),
		Entry("a host that is not a host", "spec.externalAccess.host in body should match",
			set("externalAccess", "{type: NodePort, host: 'http://x/'}")),
	)

	DescribeTable("refuses a bad name",
		func(name, message string) {
			u := cluster()
			u.SetName(name)
			err := env.Client.Create(ctx, u)
			Expect(err).To(HaveOccurred())
			Expect(err.Error()).To(ContainSubstring(message))
		},
		Entry("too long", strings.Repeat("a", 41), "metadata.name must be at most 40 characters"),
		Entry("a dot", "a.b", "metadata.name must start with a letter and must not contain '.'"),
		Entry("a digit first", "1abc", "metadata.name must start with a letter and must not contain '.'"),
	)

	DescribeTable("refuses storage changes that would lose the data",
		func(initial, change, message string) {
			u := cluster(set("storage", initial))
			Expect(env.Client.Create(ctx, u)).To(Succeed())
			set("storage", change)(u.Object["spec"].(map[string]any))
			err := env.Client.Update(ctx, u)
			Expect(err).To(HaveOccurred())
			Expect(err.Error()).To(ContainSubstring(message))
		},
		Entry("kind", "{existingClaim: {claimName: a}}", "{volume: {size: 1Gi}}", "the kind of storage cannot change"),
		Entry("claim", "{existingClaim: {claimName: a}}", "{existingClaim: {claimName: b}}", "storage.existingClaim.claimName cannot change"),
		Entry("shrink", "{volume: {size: 2Gi}}", "{volume: {size: 1Gi}}", "storage.volume.size can only grow"),
		Entry("class", "{volume: {size: 1Gi, storageClassName: a}}", "{volume: {size: 1Gi, storageClassName: b}}", "storage.volume.storageClassName cannot change"),
		// A master elected on another bucket or prefix finds no catalog: every table gone.
		Entry("bucket", "{s3: {endpoint: 'https://s3.example.com', bucket: abc}}", "{s3: {endpoint: 'https://s3.example.com', bucket: abd}}",
			"storage.s3.bucket cannot change"),
		Entry("prefix", "{s3: {endpoint: 'https://s3.example.com', bucket: abc}}", "{s3: {endpoint: 'https://s3.example.com', bucket: abc, prefix: p1}}",
			"storage.s3.prefix cannot change"),
		Entry("prefix changed", "{s3: {endpoint: 'https://s3.example.com', bucket: abc, prefix: p1}}", "{s3: {endpoint: 'https://s3.example.com', bucket: abc, prefix: p2}}",
			"storage.s3.prefix cannot change"),
	)

	It("lets the rest of an S3 location change: its endpoint, region, credentials", func() {
		u := cluster(set("storage", "{s3: {endpoint: 'https://s3.example.com', bucket: abc, prefix: p}}"))
		Expect(env.Client.Create(ctx, u)).To(Succeed())
		set("storage", "{s3: {endpoint: 'https://s3.eu-west-1.amazonaws.com', region: eu-west-1, bucket: abc, prefix: p, credentialsSecret: {name: k}}}")(u.Object["spec"].(map[string]any))
		Expect(env.Client.Update(ctx, u)).To(Succeed())
	})

	It("installs: config/default renders and the API server accepts every object", func() {
		root, err := testenv.RepoRoot()
		Expect(err).NotTo(HaveOccurred())
		assets, err := testenv.AssetsDir(root)
		Expect(err).NotTo(HaveOccurred())
		out, err := exec.Command(filepath.Join(assets, "kubectl"), "kustomize", filepath.Join(root, "config", "default")).Output()
		Expect(err).NotTo(HaveOccurred(), "kubectl kustomize config/default")
		var kinds []string
		for _, doc := range strings.Split(string(out), "\n---\n") {
			u := &unstructured.Unstructured{}
			Expect(yaml.Unmarshal([]byte(doc), &u.Object)).To(Succeed())
			kinds = append(kinds, u.GetKind())
			switch u.GetKind() {
			case "Namespace":
				Expect(env.Client.Create(ctx, u)).To(Succeed())
			case "CustomResourceDefinition":
				// Installed by the suite already: the rendered one must be the same file.
				Expect(u.GetName()).To(BeElementOf("storeclusters.cellstore.io", "storeusers.cellstore.io"))
			default:
				Expect(env.Client.Create(ctx, u, client.DryRunAll)).To(Succeed(), "%s %s", u.GetKind(), u.GetName())
			}
		}
		Expect(kinds).To(ContainElements("Namespace", "CustomResourceDefinition", "ServiceAccount", "ClusterRole", "ClusterRoleBinding",
			"Role", "RoleBinding", "Service", "Deployment"))
	})

	It("lets a volume grow", func() {
		u := cluster(set("storage", "{volume: {size: 1Gi}}"))
		Expect(env.Client.Create(ctx, u)).To(Succeed())
		set("storage.volume.size", "2Gi")(u.Object["spec"].(map[string]any))
		Expect(env.Client.Update(ctx, u)).To(Succeed())
	})

	It("accepts tls Provided with both Secret names, and switching back to Generated once they are removed", func() {
		u := cluster(set("security", "{tls: Provided, certificates: {serverSecretName: server-tls, clientSecretName: operator-tls}}"))
		Expect(env.Client.Create(ctx, u)).To(Succeed())
		sec := u.Object["spec"].(map[string]any)["security"].(map[string]any)
		Expect(sec).To(HaveKeyWithValue("certificates", Equal(map[string]any{"serverSecretName": "server-tls", "clientSecretName": "operator-tls"})))

		sec["tls"] = "Generated"
		err := env.Client.Update(ctx, u)
		Expect(err).To(HaveOccurred(), "certificates kept with tls Generated")
		Expect(err.Error()).To(ContainSubstring("is used only with security.tls Provided"))
		delete(sec, "certificates")
		Expect(env.Client.Update(ctx, u)).To(Succeed())
	})

	It("accepts S3 storage", func() {
		Expect(env.Client.Create(ctx, cluster(set("storage", "{s3: {endpoint: 'https://s3.example.com', bucket: bkt, credentialsSecret: {name: s}}}")))).To(Succeed())
	})

	It("has the short name cstore and the printer columns", func() {
		dc, err := discovery.NewDiscoveryClientForConfig(env.Config)
		Expect(err).NotTo(HaveOccurred())
		res, err := dc.ServerResourcesForGroupVersion("cellstore.io/v1alpha1")
		Expect(err).NotTo(HaveOccurred())
		Expect(res.APIResources).To(ContainElement(And(
			HaveField("Name", "storeclusters"), HaveField("ShortNames", ConsistOf("cstore")), HaveField("Namespaced", true))))
		crd := &unstructured.Unstructured{}
		crd.SetAPIVersion("apiextensions.k8s.io/v1")
		crd.SetKind("CustomResourceDefinition")
		Expect(env.Client.Get(ctx, client.ObjectKey{Name: "storeclusters.cellstore.io"}, crd)).To(Succeed())
		versions, _, _ := unstructured.NestedSlice(crd.Object, "spec", "versions")
		var columns []string
		for _, c := range versions[0].(map[string]any)["additionalPrinterColumns"].([]any) {
			columns = append(columns, c.(map[string]any)["name"].(string))
		}
		Expect(columns).To(Equal([]string{"Phase", "Degraded", "Masters", "RegionServers", "Regions", "Version", "Active", "InTransition", "Age"}))
	})
})
