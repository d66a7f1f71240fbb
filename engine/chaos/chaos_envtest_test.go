//go:build envtest

package chaos

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	pb "github.com/cellstore/cellstore/engine/api/cellstore/v1"
	"github.com/cellstore/cellstore/engine/client"
	"github.com/cellstore/cellstore/engine/processtest"
	"github.com/cellstore/cellstore/engine/storage/s3/s3test"
)

// dumpFailingKeys checks each key's history alone and writes those that are not linearizable to
// files, one operation a line in call order, for a person to read.
func dumpFailingKeys(t *testing.T, history []porcupine.Operation) {
	byKey := map[string][]porcupine.Operation{}
	for _, op := range history {
		k := op.Input.(regOp).key
		byKey[k] = append(byKey[k], op)
	}
	single := registerModel
	single.Partition = nil
	for k, ops := range byKey {
		if porcupine.CheckOperations(single, ops) {
			continue
		}
		slices.SortFunc(ops, func(a, b porcupine.Operation) int { return cmp.Compare(a.Call, b.Call) })
		f, err := os.CreateTemp("", "chaos-failure-"+k+"-*.txt")
		if err != nil {
			t.Error(err)
			return
		}
		for _, op := range ops {
			ret := "never"
			if op.Return != math.MaxInt64 {
				ret = time.Duration(op.Return).String()
			}
			fmt.Fprintf(f, "client %2d  call %-14s return %-14s %s\n", op.ClientId, time.Duration(op.Call), ret, single.DescribeOperation(op.Input, op.Output))
		}
		f.Close()
		t.Logf("chaos: key %s is not linearizable: its %d operations are in %s", k, len(ops), f.Name())
	}
}

// mountTmpfs mounts a tmpfs of size bytes on dir (unmounted when the test ends, after the
// processes it started are gone); false when it cannot (not root).
func mountTmpfs(t *testing.T, dir string, size int64) bool {
	t.Helper()
	if os.Geteuid() != 0 {
		return false
	}
	if err := syscall.Mount("tmpfs", dir, "tmpfs", 0, fmt.Sprintf("size=%d", size)); err != nil {
		t.Logf("chaos: mount tmpfs: %v", err)
		return false
	}
	t.Cleanup(func() {
		if err := syscall.Unmount(dir, 0); err != nil {
			t.Errorf("unmount %s: %v", dir, err)
		}
	})
	return true
}

// fillDisk writes a file until the filesystem is full (ENOSPC) and returns its size.
func fillDisk(path string) (int64, error) {
	f, err := os.Create(path)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	chunk := make([]byte, 4<<20)
	var n int64
	for {
		w, err := f.Write(chunk)
		n += int64(w)
		if errors.Is(err, syscall.ENOSPC) {
			return n, nil
		}
		if err != nil {
			return n, err
		}
	}
}

// buildCellstore builds the cellstore binary into the test's temporary directory.
func buildCellstore(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "cellstore")
	// With fault injection: a region server's storage answers EIO while its control file says so.
	if out, err := exec.Command("go", "build", "-tags", "faultinject", "-o", bin, "../cmd/cellstore").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

// The chaos run: a real multi-process cluster — two masters electing through a Lease on a real
// kube-apiserver (envtest), three region servers, shared storage on disk — under a load of checked
// writes and reads while a seeded nemesis kills (-9) and pauses (SIGSTOP) region servers and the
// active master, moves and splits regions. Afterwards the cluster heals, every key is read again,
// and the whole history is checked linearizable per key with porcupine: no acknowledged write is
// lost, none appears from nowhere, no read is stale.
//
// `make test` runs a short run (CHAOS_SECONDS=40). `make chaos` runs the long one: CHAOS_SECONDS,
// CHAOS_FAULTS (stop after this many faults), CHAOS_SEED (reproduce a run) and CHAOS_REPORT (a
// JSON report file) tune it. docs/chaos.md has the results.

// regOp is one operation on a register row: a put of a unique value or a get.
type regOp struct {
	key     string
	put     bool
	value   string
	unknown bool // a put that failed: it may or may not have taken effect
}

// registerModel: independent registers (one per row) for porcupine. A failed put returns at
// "never", so it may linearize anywhere after its call, including after every read.
var registerModel = porcupine.Model{
	Partition: func(history []porcupine.Operation) [][]porcupine.Operation {
		byKey := map[string][]porcupine.Operation{}
		var keys []string
		for _, op := range history {
			k := op.Input.(regOp).key
			if _, ok := byKey[k]; !ok {
				keys = append(keys, k)
			}
			byKey[k] = append(byKey[k], op)
		}
		out := make([][]porcupine.Operation, 0, len(keys))
		for _, k := range keys {
			out = append(out, byKey[k])
		}
		return out
	},
	Init: func() any { return "" },
	Step: func(state, input, output any) (bool, any) {
		in, out := input.(regOp), output.(regOp)
		if in.put {
			return true, in.value
		}
		return out.value == state.(string), state
	},
	DescribeOperation: func(input, output any) string {
		in, out := input.(regOp), output.(regOp)
		switch {
		case in.put && out.unknown:
			return fmt.Sprintf("put(%s, %s) -> ?", in.key, in.value)
		case in.put:
			return fmt.Sprintf("put(%s, %s)", in.key, in.value)
		}
		return fmt.Sprintf("get(%s) -> %q", in.key, out.value)
	},
}

type chaosReport struct {
	Storage     string         `json:"storage"` // dir or s3
	Seed        uint64         `json:"seed"`
	Seconds     float64        `json:"seconds"`
	Faults      map[string]int `json:"faults"`
	FaultsTotal int            `json:"faults_total"`
	Restarts    int            `json:"processes_restarted_after_exiting"`
	Puts        int            `json:"puts_acknowledged"`
	PutsFailed  int            `json:"puts_failed"`
	Gets        int            `json:"gets"`
	GetsFailed  int            `json:"gets_failed"`
	// Failures: the first failed requests, when each ended and what it answered.
	Failures []string `json:"failures,omitempty"`
	// Timeline: each fault as it began (seconds since the load started), to read failures against.
	Timeline     []string `json:"timeline,omitempty"`
	Keys         int      `json:"keys"`
	Lost         int      `json:"acknowledged_writes_lost"`
	Linearizable bool     `json:"linearizable"`
}

func envInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}

// kubeconfigFor writes a kubeconfig for envtest's admin user.
func kubeconfigFor(t *testing.T, env *envtest.Environment) string {
	t.Helper()
	cfg := env.Config
	kc := clientcmdapi.NewConfig()
	kc.Clusters["envtest"] = &clientcmdapi.Cluster{Server: cfg.Host, CertificateAuthorityData: cfg.CAData}
	kc.AuthInfos["admin"] = &clientcmdapi.AuthInfo{ClientCertificateData: cfg.CertData, ClientKeyData: cfg.KeyData, Token: cfg.BearerToken}
	kc.Contexts["envtest"] = &clientcmdapi.Context{Cluster: "envtest", AuthInfo: "admin"}
	kc.CurrentContext = "envtest"
	path := filepath.Join(t.TempDir(), "kubeconfig")
	if err := clientcmd.WriteToFile(*kc, path); err != nil {
		t.Fatal(err)
	}
	return path
}

// chaosNode is a process slot: its command line is kept so a killed one restarts on the same ports.
type chaosNode struct {
	name   string
	args   []string
	env    []string
	faults string // a region server's fault-injection control file
	http   string
	addr   string // master gRPC or region server data address
	mu     sync.Mutex
	p      *processtest.Proc
	paused bool
}

func (n *chaosNode) start(t *testing.T, bin string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.p = processtest.StartEnv(t, bin, n.env, n.args...)
	n.p.HTTP = n.http
	n.paused = false
}

// restartIfExited starts the process again if it ended on its own (a paused master that lost its
// Lease exits, as it should), as Kubernetes would restart its container.
func (n *chaosNode) restartIfExited(t *testing.T, bin string) bool {
	n.mu.Lock()
	p := n.p
	n.mu.Unlock()
	if p == nil {
		return false
	}
	select {
	case <-p.Exited:
		n.start(t, bin)
		return true
	default:
		return false
	}
}

func (n *chaosNode) signal(sig syscall.Signal) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.p != nil {
		_ = n.p.Cmd.Process.Signal(sig)
		n.paused = sig == syscall.SIGSTOP
	}
}

func (n *chaosNode) kill() {
	n.mu.Lock()
	p := n.p
	n.p = nil
	n.mu.Unlock()
	if p != nil {
		_ = p.Cmd.Process.Signal(syscall.SIGCONT)
		_ = p.Cmd.Process.Kill()
		<-p.Exited
	}
}

// TestChaos runs the chaos run on each storage of CHAOS_STORAGE (comma-separated; default
// "dir,s3"): a directory on disk (the shared-volume mode), and a real S3 server (MinIO, by PID,
// through a fault-injecting proxy: CELLSTORE_S3_SERVER names it; make test builds it).
func TestChaos(t *testing.T) {
	modes := strings.Split(os.Getenv("CHAOS_STORAGE"), ",")
	if os.Getenv("CHAOS_STORAGE") == "" {
		modes = []string{"dir", "s3"}
	}
	for _, mode := range modes {
		switch mode {
		case "dir", "s3":
		default:
			t.Fatalf("CHAOS_STORAGE: %q is not dir or s3", mode)
		}
		t.Run(mode, func(t *testing.T) { runChaos(t, mode) })
	}
}

func runChaos(t *testing.T, storageMode string) {
	seconds := envInt("CHAOS_SECONDS", 40)
	maxFaults := envInt("CHAOS_FAULTS", 1<<30)
	seed := uint64(time.Now().UnixNano())
	if v, err := strconv.ParseUint(os.Getenv("CHAOS_SEED"), 10, 64); err == nil {
		seed = v
	}
	t.Logf("chaos: seed %d (CHAOS_SEED=%d reproduces the nemesis' choices), %d s, at most %d faults", seed, seed, seconds, maxFaults)
	rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))

	assets := os.Getenv("KUBEBUILDER_ASSETS")
	if assets == "" {
		out, err := exec.Command("../../hack/k8s-binaries.sh", "--print-dir").Output()
		if err != nil {
			t.Fatalf("hack/k8s-binaries.sh --print-dir: %v", err)
		}
		assets = strings.TrimSpace(string(out))
	}
	env := &envtest.Environment{BinaryAssetsDirectory: assets}
	if _, err := env.Start(); err != nil {
		t.Fatalf("start kube-apiserver and etcd from %s: %v", assets, err)
	}
	t.Cleanup(func() { _ = env.Stop() })
	kubeconfig := kubeconfigFor(t, env)
	bin := buildCellstore(t)
	dir := t.TempDir()
	storage := []string{"--storage-dir", dir}
	var storageEnv []string
	var proxy *s3test.Proxy
	canFill := false
	if storageMode == "s3" {
		// Everything in a bucket of a real S3 server, reached through a proxy that injects the
		// object store's faults (503 SlowDown, slow answers, answers lost after the store acted).
		if os.Getenv("CELLSTORE_S3_SERVER") == "" {
			t.Fatal("the chaos run on S3 needs an S3 server: set CELLSTORE_S3_SERVER=$(hack/s3-server.sh) (make test and make chaos do), or CHAOS_STORAGE=dir")
		}
		srv := s3test.Start(t)
		srv.CreateBucket(t, "chaos")
		proxy = srv.StartProxy(t)
		cfg := srv.Config("chaos")
		storage = []string{"--s3-endpoint", proxy.Endpoint, "--s3-bucket", "chaos", "--s3-path-style"}
		storageEnv = []string{"CELLSTORE_S3_ACCESS_KEY_ID=" + cfg.AccessKeyID, "CELLSTORE_S3_SECRET_ACCESS_KEY=" + cfg.SecretAccessKey}
	} else {
		// The shared storage on a tmpfs of its own, so the nemesis can fill the disk (mounting
		// needs root, which CI has; elsewhere that fault is left out, and said so).
		if canFill = mountTmpfs(t, dir, 768<<20); !canFill {
			t.Logf("chaos: not root, or no tmpfs: the fill-disk fault is left out")
		}
	}

	var masters, servers []*chaosNode
	var masterAddrs []string
	// CHAOS_LOG_LEVEL shows more of what the processes log (default: errors only).
	logLevel := cmp.Or(os.Getenv("CHAOS_LOG_LEVEL"), "error")
	for i := range 2 {
		addr, httpAddr := "127.0.0.1:"+processtest.FreePort(t), "127.0.0.1:"+processtest.FreePort(t)
		masterAddrs = append(masterAddrs, addr)
		masters = append(masters, &chaosNode{name: fmt.Sprintf("master-%d", i), addr: addr, http: httpAddr, env: storageEnv, args: []string{
			"master", storage[0], storage[1], "--grpc-addr", addr, "--http-addr", httpAddr, "--advertise-host", "127.0.0.1",
			"--election", "kubernetes", "--kubeconfig", kubeconfig, "--lease-name", "chaos-master", "--lease-namespace", "default",
			"--lease-duration", "3s", "--renew-deadline", "2s", "--retry-period", "300ms",
			"--server-lease", "2s", "--heartbeat-interval", "400ms", "--self-fence-margin", "600ms", "--dead-margin", "500ms",
			"--balancer-period", "-1s", "--log-level", logLevel}})
		masters[i].args = append(masters[i].args, storage[2:]...)
	}
	for i := range 3 {
		data, httpAddr := "127.0.0.1:"+processtest.FreePort(t), "127.0.0.1:"+processtest.FreePort(t)
		faults := filepath.Join(t.TempDir(), "faults")
		servers = append(servers, &chaosNode{name: fmt.Sprintf("regionserver-%d", i), addr: data, http: httpAddr,
			faults: faults, env: append([]string{"CELLSTORE_FAULT_FILE=" + faults}, storageEnv...), args: []string{
				"regionserver", storage[0], storage[1], "--masters", strings.Join(masterAddrs, ","), "--data-addr", data,
				"--admin-addr", "127.0.0.1:" + processtest.FreePort(t), "--http-addr", httpAddr, "--advertise-host", "127.0.0.1",
				"--memstore-offheap-size", "64Mi", "--blockcache-offheap-size", "16Mi", "--blockcache-onheap-size", "16Mi",
				"--log-level", logLevel}})
		servers[i].args = append(servers[i].args, storage[2:]...)
	}
	for _, n := range append(append([]*chaosNode{}, masters...), servers...) {
		n.start(t, bin)
	}
	for _, n := range servers {
		n.p.WaitReady(t, 90*time.Second)
	}

	ctx := context.Background()
	cl, err := client.New(client.Config{Masters: masterAddrs, OperationTimeout: 30 * time.Second,
		RPCTimeout: 3 * time.Second, Pause: 20 * time.Millisecond, MaxPause: 500 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	td := &pb.TableDescriptor{Name: &pb.TableName{Namespace: "default", Name: "chaos"}, Families: []*pb.ColumnFamilyDescriptor{{Name: []byte("f")}}}
	if _, err := cl.CreateTable(ctx, td, [][]byte{[]byte("k16"), []byte("k32"), []byte("k48")}); err != nil {
		t.Fatal(err)
	}
	tbl := cl.Table("chaos")
	const keys = 64
	key := func(i int) string { return fmt.Sprintf("k%02d", i) }

	// The load: four workers, each op recorded with its call and return times.
	var hmu sync.Mutex
	var history []porcupine.Operation
	var rep chaosReport
	rep.Storage, rep.Seed, rep.Keys, rep.Faults = storageMode, seed, keys, map[string]int{}
	start := time.Now()
	const keptFailures = 20
	failed := func(what string, err error) { // with hmu held
		if len(rep.Failures) < keptFailures {
			rep.Failures = append(rep.Failures, fmt.Sprintf("%s at %.1fs: %v", what, time.Since(start).Seconds(), err))
		}
	}
	record := func(client int, in, out regOp, call, ret int64, err error) {
		hmu.Lock()
		defer hmu.Unlock()
		if err != nil {
			failed("put "+in.key, err)
		}
		history = append(history, porcupine.Operation{ClientId: client, Input: in, Output: out, Call: call, Return: ret})
		switch {
		case in.put && out.unknown:
			rep.PutsFailed++
		case in.put:
			rep.Puts++
		case out.unknown:
			rep.GetsFailed++
		default:
			rep.Gets++
		}
	}
	now := func() int64 { return time.Since(start).Nanoseconds() }
	get := func(ctx context.Context, k string) (string, error) {
		r, err := tbl.Get(ctx, &pb.Get{Row: []byte(k)})
		if err != nil {
			return "", err
		}
		if len(r.Cells) == 0 {
			return "", nil
		}
		return string(r.Cells[0].Value), nil
	}
	var tsMu sync.Mutex
	var lastTs int64
	nextTs := func() int64 { // strictly increasing milliseconds shared by the workers
		tsMu.Lock()
		defer tsMu.Unlock()
		lastTs = max(lastTs+1, time.Now().UnixMilli())
		return lastTs
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			wr := rand.New(rand.NewPCG(seed+uint64(w)+1, uint64(w)))
			pace := time.NewTicker(5 * time.Millisecond) // bounds the history porcupine checks, not a wait for anything
			defer pace.Stop()
			for n := 0; ; n++ {
				select {
				case <-stop:
					return
				case <-pace.C:
				}
				k := key(wr.IntN(keys))
				octx, cancel := context.WithTimeout(ctx, 20*time.Second)
				call := now()
				if wr.IntN(2) == 0 {
					v := fmt.Sprintf("w%d-%d", w, n)
					// The timestamp comes from the test's clock at the call, as a client that
					// wants idempotent puts sets it: a put retried after a lost answer rewrites
					// the same cell. With the server's timestamp a retry could be applied twice,
					// around another client's put (HBase's semantics too).
					err := tbl.Put(octx, client.NewPut([]byte(k)).Add("f", "q", nextTs(), []byte(v)))
					ret := now()
					if err != nil {
						ret = math.MaxInt64
					}
					record(w, regOp{key: k, put: true, value: v}, regOp{unknown: err != nil}, call, ret, err)
				} else {
					v, err := get(octx, k)
					if err == nil { // a failed read says nothing
						record(w, regOp{key: k}, regOp{value: v}, call, now(), nil)
					} else {
						hmu.Lock()
						rep.GetsFailed++
						failed("get "+k, err)
						hmu.Unlock()
					}
				}
				cancel()
			}
		}()
	}

	// The nemesis.
	clusterStatus := func() (*pb.ClusterStatusResponse, error) {
		var st *pb.ClusterStatusResponse
		err := cl.Master(ctx, func(ctx context.Context, m pb.MasterClient) error {
			var err error
			st, err = m.ClusterStatus(ctx, &pb.ClusterStatusRequest{})
			return err
		})
		return st, err
	}
	activeMaster := func() *chaosNode {
		st, err := clusterStatus()
		if err != nil {
			return nil
		}
		for _, m := range masters {
			if m.addr == st.GetActiveMaster() {
				return m
			}
		}
		return nil
	}
	regions := func() []*pb.RegionLocation { return processtest.TableLocations(ctx, cl, "chaos") }
	splits := 0
	deadline := start.Add(time.Duration(seconds) * time.Second)
	for time.Now().Before(deadline) && rep.FaultsTotal < maxFaults {
		time.Sleep(time.Duration(1000+rng.IntN(2000)) * time.Millisecond) // pacing the nemesis, not synchronisation
		for _, n := range append(append([]*chaosNode{}, masters...), servers...) {
			if n.restartIfExited(t, bin) {
				rep.Restarts++
			}
		}
		kinds := []string{"kill-regionserver", "pause-regionserver", "kill-master", "pause-master", "move-region", "split-region", "fill-disk",
			"storage-errors", "slow-disk"}
		kind := kinds[rng.IntN(len(kinds))]
		fault := true
		began := time.Since(start).Seconds()
		switch kind {
		case "kill-regionserver":
			n := servers[rng.IntN(len(servers))]
			n.kill()
			time.Sleep(time.Duration(500+rng.IntN(1500)) * time.Millisecond)
			n.start(t, bin)
		case "pause-regionserver":
			n := servers[rng.IntN(len(servers))]
			n.signal(syscall.SIGSTOP)
			time.Sleep(time.Duration(1000+rng.IntN(3000)) * time.Millisecond) // past its 2 s lease: fenced
			n.signal(syscall.SIGCONT)
		case "kill-master", "pause-master":
			m := activeMaster()
			if m == nil {
				fault = false
				break
			}
			if kind == "kill-master" {
				m.kill()
				time.Sleep(time.Duration(500+rng.IntN(1500)) * time.Millisecond)
				m.start(t, bin)
			} else {
				m.signal(syscall.SIGSTOP)
				time.Sleep(time.Duration(1000+rng.IntN(3000)) * time.Millisecond)
				m.signal(syscall.SIGCONT)
			}
		case "fill-disk":
			if !canFill {
				fault = false
				break
			}
			n, err := fillDisk(filepath.Join(dir, "chaos-filler"))
			if err != nil {
				t.Fatalf("filling the disk: %v", err)
			}
			time.Sleep(time.Duration(1000+rng.IntN(2000)) * time.Millisecond) // the disk stays full a while
			if err := os.Remove(filepath.Join(dir, "chaos-filler")); err != nil {
				t.Fatal(err)
			}
			t.Logf("chaos: filled the disk with %d MiB for a while", n>>20)
		case "storage-errors", "slow-disk":
			if proxy != nil {
				// The object store answers the next PUTs 503 SlowDown, slowly, or loses the
				// answers after it acted (every process, as a store's trouble would).
				switch {
				case kind == "slow-disk":
					proxy.Inject(s3test.Delay, http.MethodPut, 20+rng.IntN(40), time.Duration(100+rng.IntN(400))*time.Millisecond)
				case rng.IntN(2) == 0:
					proxy.Inject(s3test.SlowDown, http.MethodPut, 5+rng.IntN(30), 0)
				default:
					proxy.Inject(s3test.LoseAnswer, http.MethodPut, 1+rng.IntN(5), 0)
				}
				time.Sleep(time.Duration(1000+rng.IntN(2000)) * time.Millisecond)
				break
			}
			// One region server's storage fails every write with EIO (or syncs slowly) for 1–3 s.
			n := servers[rng.IntN(len(servers))]
			what := map[string]string{"storage-errors": "eio", "slow-disk": "slow"}[kind]
			if err := os.WriteFile(n.faults, []byte(what), 0o644); err != nil {
				t.Fatal(err)
			}
			time.Sleep(time.Duration(1000+rng.IntN(2000)) * time.Millisecond)
			if err := os.WriteFile(n.faults, nil, 0o644); err != nil {
				t.Fatal(err)
			}
		case "move-region", "split-region":
			locs := regions()
			if len(locs) == 0 || kind == "split-region" && splits >= 6 {
				fault = false
				break
			}
			l := locs[rng.IntN(len(locs))]
			dest := servers[rng.IntN(len(servers))].addr
			// A split is at one of the test's keys inside the region (its midpoint is often its
			// first row: it holds a few keys, each with many versions).
			var inside []string
			for i := range keys {
				k := key(i)
				if k > string(l.GetRegion().GetStartKey()) && (len(l.GetRegion().GetEndKey()) == 0 || k < string(l.GetRegion().GetEndKey())) {
					inside = append(inside, k)
				}
			}
			splitKey := ""
			if len(inside) > 0 {
				splitKey = inside[rng.IntN(len(inside))]
			}
			err := cl.Master(ctx, func(ctx context.Context, m pb.MasterClient) error {
				if kind == "move-region" {
					_, err := m.MoveRegion(ctx, &pb.MoveRegionRequest{Region: l.GetRegion().GetName(), Destination: dest})
					return err
				}
				if splitKey == "" {
					return errors.New("no key inside the region to split at")
				}
				_, err := m.SplitRegion(ctx, &pb.SplitRegionRequest{Region: l.GetRegion().GetName(), SplitKey: []byte(splitKey)})
				return err
			})
			if err != nil {
				t.Logf("chaos: %s of %s refused: %v", kind, l.GetRegion().GetName(), err)
				fault = false
			} else if kind == "split-region" {
				splits++
			}
		}
		if fault {
			rep.Faults[kind]++
			rep.FaultsTotal++
			hmu.Lock()
			rep.Timeline = append(rep.Timeline, fmt.Sprintf("%.1fs %s", began, kind))
			hmu.Unlock()
		}
	}
	close(stop)
	wg.Wait()

	// Heal: the object store's injected faults not yet used end with the nemesis; every process
	// runs, every region opens; then read every key once more.
	if proxy != nil {
		proxy.Clear()
	}
	for _, n := range append(append([]*chaosNode{}, masters...), servers...) {
		n.signal(syscall.SIGCONT)
		n.mu.Lock()
		dead := n.p == nil
		n.mu.Unlock()
		if dead {
			n.start(t, bin)
		} else {
			n.restartIfExited(t, bin)
		}
	}
	// Healed: every region open and no dead server's recovery pending (a region can look OPEN on
	// a process that died until its recovery reassigns it).
	recovering := func() []string {
		st, err := clusterStatus()
		if err != nil {
			return []string{err.Error()}
		}
		return st.GetDeadServers()
	}
	healed := time.Now().Add(3 * time.Minute)
	for len(regions()) == 0 || len(recovering()) > 0 {
		if time.Now().After(healed) {
			t.Fatalf("not healed 3 minutes after the nemesis stopped: regions open %v, dead servers being recovered %v", len(regions()) > 0, recovering())
		}
		// A process that stops while the cluster heals (a master that lost its lease, a region
		// server that could not register in time) is started again, as Kubernetes would.
		for _, n := range append(append([]*chaosNode{}, masters...), servers...) {
			n.restartIfExited(t, bin)
		}
		time.Sleep(100 * time.Millisecond) // polling the master
	}
	for i := range keys {
		k := key(i)
		call := now()
		v, err := get(ctx, k)
		if err != nil {
			t.Fatalf("final read of %s: %v", k, err)
		}
		record(-1, regOp{key: k}, regOp{value: v}, call, now(), nil)
	}
	rep.Seconds = time.Since(start).Seconds()

	res, info := porcupine.CheckOperationsVerbose(registerModel, history, 2*time.Minute)
	rep.Linearizable = res == porcupine.Ok
	if res != porcupine.Ok {
		rep.Lost = -1 // unknown: see the failing key's history
		dumpFailingKeys(t, history)
		if f, err := os.CreateTemp("", "chaos-history-*.html"); err == nil {
			_ = porcupine.Visualize(registerModel, info, f)
			f.Close()
			t.Logf("chaos: history visualized in %s", f.Name())
		}
	}
	js, _ := json.MarshalIndent(rep, "", "  ")
	t.Logf("chaos report:\n%s", js)
	if path := os.Getenv("CHAOS_REPORT"); path != "" {
		if storageMode != "dir" { // bin/chaos-report.json, bin/chaos-report-s3.json
			path = strings.TrimSuffix(path, ".json") + "-" + storageMode + ".json"
		}
		if err := os.WriteFile(path, js, 0o644); err != nil {
			t.Error(err)
		}
	}
	if res != porcupine.Ok {
		t.Fatalf("the history is not linearizable (%v): a write was lost or a read was stale; seed %d", res, seed)
	}
	if rep.Puts == 0 || rep.Gets == 0 || rep.FaultsTotal == 0 {
		t.Fatalf("the run did nothing useful: %+v", rep)
	}
}
