package master

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
)

// Elector decides which master is active.
type Elector interface {
	// Run campaigns until ctx ends or leadership, once won, is lost. It calls cb.Elected (once at
	// most) with a context that ends when leadership ends, and cb.Leader whenever it learns who the
	// active master is. Run returns only after cb.Elected's context has ended.
	Run(ctx context.Context, cb ElectionCallbacks)
	// Check returns an error when this process may no longer be the leader although it was not
	// told yet (its last renewal is too old): the master must not write the catalog then.
	Check() error
}

// ElectionCallbacks are what an Elector reports.
type ElectionCallbacks struct {
	Elected func(ctx context.Context)
	Leader  func(identity string)
}

// NoElection makes this process the active master at once (--election=none: a single master or
// the standalone mode).
type NoElection struct {
	// Identity is this master's address, reported as the leader.
	Identity string
}

// Run implements Elector.
func (e NoElection) Run(ctx context.Context, cb ElectionCallbacks) {
	if cb.Leader != nil {
		cb.Leader(e.Identity)
	}
	if ctx.Err() != nil {
		return
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		cb.Elected(ctx)
	}()
	<-ctx.Done()
	<-done
}

// Check implements Elector.
func (NoElection) Check() error { return nil }

// KubernetesElection elects the active master through a coordination.k8s.io Lease with client-go's
// leader election (--election=kubernetes). The Lease's holder identity is the active master's
// advertised address, which standbys name in NOT_ACTIVE_MASTER answers, followed by '#' and a
// token of this process: a restarted master keeps its address (a StatefulSet pod's DNS name) but is
// a new candidate, and must not take the Lease as its own while the previous process may still
// hold it (a force-deleted pod's container can outlive its API object).
type KubernetesElection struct {
	Config    *rest.Config
	Namespace string
	Name      string
	// Identity is this master's advertised address (host:port of its gRPC service).
	Identity string
	// LeaseDuration, RenewDeadline and RetryPeriod as client-go's (defaults 15 s, 10 s, 2 s).
	// A standby takes over LeaseDuration after the last renewal it saw; the active master stops
	// when it could not renew for RenewDeadline, and refuses catalog writes from then on (Check),
	// so the two never write the catalog together while the clocks run at the same rate.
	LeaseDuration time.Duration
	RenewDeadline time.Duration
	RetryPeriod   time.Duration

	mu    sync.Mutex
	le    *leaderelection.LeaderElector
	token string
}

// holderAddress is the address in a Lease holder identity (address#token).
func holderAddress(id string) string {
	if i := strings.LastIndexByte(id, '#'); i >= 0 {
		return id[:i]
	}
	return id
}

func (e *KubernetesElection) fill() error {
	if e.Config == nil || e.Namespace == "" || e.Name == "" || e.Identity == "" {
		return errors.New("master: kubernetes election needs a rest config, the Lease's namespace and name, and this master's identity")
	}
	if e.LeaseDuration <= 0 {
		e.LeaseDuration = 15 * time.Second
	}
	if e.RenewDeadline <= 0 {
		e.RenewDeadline = 10 * time.Second
	}
	if e.RetryPeriod <= 0 {
		e.RetryPeriod = 2 * time.Second
	}
	if e.LeaseDuration <= e.RenewDeadline {
		return fmt.Errorf("master: lease duration %v must exceed the renew deadline %v", e.LeaseDuration, e.RenewDeadline)
	}
	if e.LeaseDuration < time.Second {
		return fmt.Errorf("master: lease duration %v is under a second (a Lease counts whole seconds)", e.LeaseDuration)
	}
	if e.token == "" {
		e.token = strconv.FormatUint(rand.Uint64(), 36)
	}
	return nil
}

// Validate checks the settings and builds the elector (so a bad setting fails at start-up).
func (e *KubernetesElection) Validate() error {
	_, err := e.elector(ElectionCallbacks{Elected: func(context.Context) {}})
	return err
}

func (e *KubernetesElection) elector(cb ElectionCallbacks) (*leaderelection.LeaderElector, error) {
	if err := e.fill(); err != nil {
		return nil, err
	}
	cfg := rest.CopyConfig(e.Config)
	cfg.Timeout = max(time.Second, e.RenewDeadline/2)
	cs, err := kubernetes.NewForConfig(rest.AddUserAgent(cfg, "cellstore-master-election"))
	if err != nil {
		return nil, fmt.Errorf("master: kubernetes client: %w", err)
	}
	lock := &resourcelock.LeaseLock{
		LeaseMeta:  metav1.ObjectMeta{Namespace: e.Namespace, Name: e.Name},
		Client:     cs.CoordinationV1(),
		LockConfig: resourcelock.ResourceLockConfig{Identity: e.Identity + "#" + e.token},
	}
	return leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
		Lock:          lock,
		LeaseDuration: e.LeaseDuration,
		RenewDeadline: e.RenewDeadline,
		RetryPeriod:   e.RetryPeriod,
		// The master stops everything it does before it cancels the election's context, so it
		// can hand the Lease over at once.
		ReleaseOnCancel: true,
		Name:            e.Namespace + "/" + e.Name,
		Callbacks: leaderelection.LeaderCallbacks{
			OnStartedLeading: cb.Elected,
			OnStoppedLeading: func() {},
			OnNewLeader: func(id string) {
				if cb.Leader != nil {
					cb.Leader(holderAddress(id))
				}
			},
		},
	})
}

// Run implements Elector.
func (e *KubernetesElection) Run(ctx context.Context, cb ElectionCallbacks) {
	elected := make(chan struct{})
	var electedDone sync.WaitGroup
	wrapped := cb
	wrapped.Elected = func(lctx context.Context) {
		electedDone.Add(1)
		defer electedDone.Done()
		close(elected)
		cb.Elected(lctx)
	}
	le, err := e.elector(wrapped)
	if err != nil {
		// Validate was called at start-up; this cannot fail later except for the same reasons.
		<-ctx.Done()
		return
	}
	e.mu.Lock()
	e.le = le
	e.mu.Unlock()
	le.Run(ctx)
	// client-go starts OnStartedLeading in a goroutine and returns when leadership ends; wait
	// for the callback so the caller knows the active phase is over.
	select {
	case <-elected:
		electedDone.Wait()
	default:
	}
}

// Check implements Elector: it fails once RenewDeadline has passed since the last renewal.
func (e *KubernetesElection) Check() error {
	e.mu.Lock()
	le := e.le
	e.mu.Unlock()
	if le == nil {
		return nil
	}
	if err := le.Check(e.RenewDeadline - e.LeaseDuration); err != nil {
		return fmt.Errorf("%w: %v", ErrNotActive, err)
	}
	return nil
}
