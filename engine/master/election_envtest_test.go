//go:build envtest

package master_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/cellstore/cellstore/engine/master"
)

// The election against a real kube-apiserver and etcd (envtest). operator/internal/testenv is
// internal to operator/, so this starts envtest the same way: binaries from $KUBEBUILDER_ASSETS or
// hack/k8s-binaries.sh --print-dir.
//
//	KUBEBUILDER_ASSETS=$(hack/k8s-binaries.sh --print-dir) go test -tags envtest ./engine/master/...

func startAPIServer(t *testing.T) *rest.Config {
	t.Helper()
	assets := os.Getenv("KUBEBUILDER_ASSETS")
	if assets == "" {
		root, err := filepath.Abs("../..")
		if err != nil {
			t.Fatal(err)
		}
		out, err := exec.Command(filepath.Join(root, "hack", "k8s-binaries.sh"), "--print-dir").Output()
		if err != nil {
			t.Fatalf("hack/k8s-binaries.sh --print-dir: %v", err)
		}
		assets = strings.TrimSpace(string(out))
	}
	env := &envtest.Environment{BinaryAssetsDirectory: assets}
	cfg, err := env.Start()
	if err != nil {
		t.Fatalf("start kube-apiserver and etcd from %s: %v", assets, err)
	}
	t.Cleanup(func() { _ = env.Stop() })
	return cfg
}

func TestKubernetesElectionFailover(t *testing.T) {
	cfg := startAPIServer(t)
	elect := func(addr string) master.Elector {
		return &master.KubernetesElection{Config: cfg, Namespace: "default", Name: "cellstore-master",
			Identity: addr, LeaseDuration: 2 * time.Second, RenewDeadline: 1500 * time.Millisecond, RetryPeriod: 200 * time.Millisecond}
	}
	runFailover(t, elect)
	// The Lease names the new active master.
	cs := kubernetes.NewForConfigOrDie(cfg)
	var lease *coordinationv1.Lease
	deadline := time.Now().Add(10 * time.Second)
	for {
		var err error
		lease, err = cs.CoordinationV1().Leases("default").Get(context.Background(), "cellstore-master", metav1.GetOptions{})
		if err == nil && lease.Spec.HolderIdentity != nil && *lease.Spec.HolderIdentity != "" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no Lease holder: %v %v", lease, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if lease.Spec.LeaseTransitions == nil || *lease.Spec.LeaseTransitions < 1 {
		t.Errorf("lease transitions %v, want at least one (the failover)", lease.Spec.LeaseTransitions)
	}
}

// A bad election setting fails at start-up.
func TestKubernetesElectionValidates(t *testing.T) {
	e := &master.KubernetesElection{Config: &rest.Config{Host: "https://127.0.0.1:1"}, Namespace: "ns", Name: "l", Identity: "a:1",
		LeaseDuration: time.Second, RenewDeadline: 2 * time.Second}
	if err := e.Validate(); err == nil {
		t.Error("a renew deadline longer than the lease validated")
	}
}

// A restarted master keeps its address, but while the previous process holds the Lease the new one
// is a standby: it learns the leader's address (without the process token) and is not elected.
func TestKubernetesElectionSameAddressIsNotTheHolder(t *testing.T) {
	cfg := startAPIServer(t)
	elect := func() *master.KubernetesElection {
		return &master.KubernetesElection{Config: cfg, Namespace: "default", Name: "same-address", Identity: "m-0.m.ns.svc:16000",
			LeaseDuration: 3 * time.Second, RenewDeadline: 2 * time.Second, RetryPeriod: 100 * time.Millisecond}
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	firstElected := make(chan struct{})
	go elect().Run(ctx, master.ElectionCallbacks{Elected: func(lctx context.Context) { close(firstElected); <-lctx.Done() }})
	select {
	case <-firstElected:
	case <-time.After(20 * time.Second):
		t.Fatal("the first candidate was not elected")
	}
	secondElected, leaders := candidate(t, ctx, elect())
	waitLeader(t, leaders, "m-0.m.ns.svc:16000") // the address alone
	// Several lease durations: the first process renews, the second must stay a standby.
	select {
	case <-secondElected:
		t.Fatal("a second process with the same address took the Lease its predecessor holds")
	case <-time.After(4 * time.Second):
	}
}

// A standby takes a released Lease at once, not at its next poll: with a retry period of 30 s
// (client-go polls every 30–36 s), the standby must hold the Lease well within that after the
// active candidate gives it up. Without the watch on the Lease this fails.
func TestKubernetesElectionTakesAReleasedLeaseAtOnce(t *testing.T) {
	cfg := startAPIServer(t)
	// raced: another write of the Lease lands between client-go's read and its write when it
	// releases the Lease (as when the master stops while a renewal is under way: client-go
	// cancels the request, the API server applies it a moment later), so client-go's release
	// fails with a conflict; the master then releases the Lease itself.
	for _, raced := range []bool{false, true} {
		name := "released"
		if raced {
			name = "released-raced"
		}
		t.Run(name, func(t *testing.T) {
			firstCfg := cfg
			var racedRelease atomic.Bool
			if raced {
				firstCfg = rest.CopyConfig(cfg)
				firstCfg.Wrap(func(rt http.RoundTripper) http.RoundTripper {
					return raceRelease{next: rt, cfg: cfg, lease: name, done: &racedRelease}
				})
			}
			elect := func(cfg *rest.Config, addr string) *master.KubernetesElection {
				return &master.KubernetesElection{Config: cfg, Namespace: "default", Name: name, Identity: addr,
					LeaseDuration: 90 * time.Second, RenewDeadline: 60 * time.Second, RetryPeriod: 30 * time.Second}
			}
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			firstCtx, stopFirst := context.WithCancel(ctx)
			firstElected, firstDone := make(chan struct{}), make(chan struct{})
			go func() {
				defer close(firstDone)
				elect(firstCfg, "m-0:16000").Run(firstCtx, master.ElectionCallbacks{Elected: func(lctx context.Context) { close(firstElected); <-lctx.Done() }})
			}()
			select {
			case <-firstElected:
			case <-time.After(20 * time.Second):
				t.Fatal("the first candidate was not elected")
			}
			secondElected, leaders := candidate(t, ctx, elect(cfg, "m-1:16000"))
			// The second candidate has seen the Lease held (it made its first attempt) before the
			// first gives it up; its next poll would be 30 s away.
			waitLeader(t, leaders, "m-0:16000")
			released := time.Now()
			stopFirst()
			<-firstDone // the first candidate released the Lease on its way out
			if raced && !racedRelease.Load() {
				t.Fatal("client-go's release was not raced (the test's interception missed it)")
			}
			select {
			case at := <-secondElected:
				t.Logf("the standby took the released Lease %v after the first candidate stopped", at.Sub(released).Round(time.Millisecond))
			case <-time.After(15 * time.Second):
				t.Fatal("the standby did not take the released Lease within 15 s (it waited for its 30 s poll)")
			}
		})
	}
}

// raceRelease changes the Lease (a label) just before client-go's release of it reaches the API
// server — the one update that sets an empty holder — once: the release then meets a real
// conflict.
type raceRelease struct {
	next  http.RoundTripper
	cfg   *rest.Config
	lease string
	done  *atomic.Bool
}

func (r raceRelease) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.Method == http.MethodPut && strings.HasSuffix(req.URL.Path, "/leases/"+r.lease) && req.Body != nil && !r.done.Load() {
		body, err := io.ReadAll(req.Body)
		req.Body.Close()
		if err != nil {
			return nil, err
		}
		req.Body = io.NopCloser(bytes.NewReader(body))
		obj, _, err := scheme.Codecs.UniversalDeserializer().Decode(body, nil, nil) // protobuf or JSON
		if l, ok := obj.(*coordinationv1.Lease); err == nil && ok && l.Spec.HolderIdentity != nil && *l.Spec.HolderIdentity == "" &&
			r.done.CompareAndSwap(false, true) {
			leases := kubernetes.NewForConfigOrDie(r.cfg).CoordinationV1().Leases("default")
			l, err := leases.Get(req.Context(), r.lease, metav1.GetOptions{})
			if err == nil {
				l.Labels = map[string]string{"raced": "yes"}
				_, err = leases.Update(req.Context(), l, metav1.UpdateOptions{})
			}
			if err != nil {
				return nil, fmt.Errorf("racing the release: %w", err)
			}
		}
	}
	return r.next.RoundTrip(req)
}

// candidate runs an election in the background: when it is elected (it then holds on until its
// leadership ends) and the leaders it learns.
// Run has returned (its Lease released) before the test's API server stops: a test's cleanups
// run after its deferred cancel, in reverse order of registration.
func candidate(t *testing.T, ctx context.Context, e master.Elector) (elected <-chan time.Time, leaders <-chan string) {
	el, ls := make(chan time.Time, 1), make(chan string, 16)
	done := make(chan struct{})
	t.Cleanup(func() { <-done })
	go func() {
		defer close(done)
		e.Run(ctx, master.ElectionCallbacks{
			Elected: func(lctx context.Context) { el <- time.Now(); <-lctx.Done() },
			Leader: func(id string) {
				select {
				case ls <- id:
				default:
				}
			},
		})
	}()
	return el, ls
}

// waitLeader fails unless the first leader learned is want.
func waitLeader(t *testing.T, leaders <-chan string, want string) {
	t.Helper()
	select {
	case id := <-leaders:
		if id != want {
			t.Fatalf("leader reported as %q, want %q", id, want)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the candidate never learned the leader")
	}
}

// An active master that finds another holder in the Lease (it was paused past its lease, and a
// standby took over) fails its Check at once, while its election is still winding down: client-go's
// own check passed from that moment on, for up to the renew deadline, and the deposed master could
// commit.
func TestKubernetesElectionCheckFailsOnceAnotherHoldsTheLease(t *testing.T) {
	cfg := startAPIServer(t)
	e := &master.KubernetesElection{Config: cfg, Namespace: "default", Name: "deposed", Identity: "m-0:16000",
		LeaseDuration: 30 * time.Second, RenewDeadline: 20 * time.Second, RetryPeriod: 100 * time.Millisecond}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	elected := make(chan context.Context, 1)
	done := make(chan struct{})
	t.Cleanup(func() { <-done })
	go func() {
		defer close(done)
		e.Run(ctx, master.ElectionCallbacks{Elected: func(lctx context.Context) { elected <- lctx; <-lctx.Done() }})
	}()
	var lctx context.Context
	select {
	case lctx = <-elected:
	case <-time.After(20 * time.Second):
		t.Fatal("not elected")
	}
	if err := e.Check(); err != nil {
		t.Fatalf("Check of the elected master: %v", err)
	}
	// Another master takes the Lease (as after this one's pause).
	cs := kubernetes.NewForConfigOrDie(cfg)
	leases := cs.CoordinationV1().Leases("default")
	if err := retry.RetryOnConflict(retry.DefaultRetry, func() error { // (it renews meanwhile)
		l, err := leases.Get(context.Background(), "deposed", metav1.GetOptions{})
		if err != nil {
			return err
		}
		other := "m-1:16000#x"
		now := metav1.NewMicroTime(time.Now())
		l.Spec.HolderIdentity, l.Spec.AcquireTime, l.Spec.RenewTime = &other, &now, &now
		_, err = leases.Update(context.Background(), l, metav1.UpdateOptions{})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second) // well within the renew deadline
	for e.Check() == nil {
		if time.Now().After(deadline) {
			t.Fatal("Check still passes 5 s after another master took the Lease")
		}
		time.Sleep(20 * time.Millisecond) // polling the elector's renewals
	}
	if lctx.Err() != nil {
		t.Fatal("the election had already ended: the check proves nothing")
	}
}
