package master

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/watch"
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
	// Logger (default slog.Default()).
	Logger *slog.Logger

	mu    sync.Mutex
	le    *leaderelection.LeaderElector
	lock  *renewTimedLock // le's
	token string
}

// renewTimedLock is the election's Lease lock, noting when each successful renewal of this
// master's record was sent: client-go's own record of it is when the answer arrived, which a slow
// answer (up to the request timeout) moves past what the lease's margin allows for.
type renewTimedLock struct {
	resourcelock.Interface
	mu   sync.Mutex
	sent time.Time // of the last Create or Update of this master's record that succeeded
}

func (l *renewTimedLock) Create(ctx context.Context, ler resourcelock.LeaderElectionRecord) error {
	t := time.Now()
	err := l.Interface.Create(ctx, ler)
	l.note(t, ler, err)
	return err
}

func (l *renewTimedLock) Update(ctx context.Context, ler resourcelock.LeaderElectionRecord) error {
	t := time.Now()
	err := l.Interface.Update(ctx, ler)
	l.note(t, ler, err)
	return err
}

func (l *renewTimedLock) note(sent time.Time, ler resourcelock.LeaderElectionRecord, err error) {
	if err != nil || ler.HolderIdentity != l.Identity() {
		return // (a release writes no holder)
	}
	l.mu.Lock()
	l.sent = sent
	l.mu.Unlock()
}

// renewed is when the last renewal that succeeded was sent (zero: none yet).
func (l *renewTimedLock) renewed() time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.sent
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

func (e *KubernetesElection) log() *slog.Logger {
	if e.Logger != nil {
		return e.Logger
	}
	return slog.Default()
}

// Validate checks the settings and builds the elector (so a bad setting fails at start-up).
func (e *KubernetesElection) Validate() error {
	_, _, err := e.elector(ElectionCallbacks{Elected: func(context.Context) {}})
	return err
}

// leaseClient is a client for the election's Lease; timeout bounds each request (0: none, for
// a watch).
func (e *KubernetesElection) leaseClient(timeout time.Duration) (*kubernetes.Clientset, error) {
	cfg := rest.CopyConfig(e.Config)
	cfg.Timeout = timeout
	return kubernetes.NewForConfig(rest.AddUserAgent(cfg, "cellstore-master-election"))
}

// holderID is this process's identity in the Lease: its address and a token of this process.
func (e *KubernetesElection) holderID() string { return e.Identity + "#" + e.token }

func (e *KubernetesElection) elector(cb ElectionCallbacks) (*leaderelection.LeaderElector, *renewTimedLock, error) {
	if err := e.fill(); err != nil {
		return nil, nil, err
	}
	cs, err := e.leaseClient(max(time.Second, e.RenewDeadline/2))
	if err != nil {
		return nil, nil, fmt.Errorf("master: kubernetes client: %w", err)
	}
	lock := &renewTimedLock{Interface: &resourcelock.LeaseLock{
		LeaseMeta:  metav1.ObjectMeta{Namespace: e.Namespace, Name: e.Name},
		Client:     cs.CoordinationV1(),
		LockConfig: resourcelock.ResourceLockConfig{Identity: e.holderID()},
	}}
	le, err := leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
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
	return le, lock, err
}

// Run implements Elector. Besides client-go's polling (every RetryPeriod), a standby watches the
// Lease: when the active master gives it up (a stopping master releases it: no holder), the
// standby tries at once instead of at its next poll, so a graceful handover takes a round trip to
// the API server rather than up to RetryPeriod. Without permission to watch (a Role from before
// this change), the standby polls as before.
func (e *KubernetesElection) Run(ctx context.Context, cb ElectionCallbacks) {
	released := make(chan struct{}, 1)
	wctx, wcancel := context.WithCancel(ctx)
	defer wcancel()
	go e.watchReleases(wctx, released)

	var mu sync.Mutex
	leading := false
	elected := make(chan struct{})
	var electedDone sync.WaitGroup
	for ctx.Err() == nil {
		actx, acancel := context.WithCancel(ctx)
		calledOff := false // this attempt's, under mu
		wrapped := cb
		wrapped.Elected = func(lctx context.Context) {
			mu.Lock()
			if calledOff {
				// The attempt was called off (below) just as it won: client-go gives the Lease
				// up again on the cancelled context, and the next attempt takes it.
				mu.Unlock()
				return
			}
			leading = true
			electedDone.Add(1)
			mu.Unlock()
			defer electedDone.Done()
			close(elected)
			cb.Elected(lctx)
		}
		le, lock, err := e.elector(wrapped)
		if err != nil {
			// Validate was called at start-up; this cannot fail later except for the same reasons.
			acancel()
			<-ctx.Done()
			return
		}
		e.mu.Lock()
		e.le, e.lock = le, lock
		e.mu.Unlock()
		stop := make(chan struct{})
		go func() {
			select {
			case <-stop:
			case <-released:
				mu.Lock()
				if !leading {
					calledOff = true
					acancel()
				}
				mu.Unlock()
			}
		}()
		le.Run(actx)
		close(stop)
		acancel()
		mu.Lock()
		again := calledOff && !leading
		mu.Unlock()
		if !again {
			break // leadership ended, or ctx did
		}
		e.log().Info("the election Lease was released: trying to take it at once", "lease", e.Namespace+"/"+e.Name)
	}
	// client-go starts OnStartedLeading in a goroutine and returns when leadership ends; wait
	// for the callback so the caller knows the active phase is over.
	select {
	case <-elected:
		electedDone.Wait()
		e.releaseIfHeld()
	default:
	}
}

// releaseBudget bounds the time a stopping master spends releasing a Lease client-go could not.
const releaseBudget = 3 * time.Second

// releaseIfHeld gives the Lease up when it still names this master. client-go's own release
// (ReleaseOnCancel) reads the Lease and writes it back without a holder; a write that lands in
// between makes it fail with a conflict, and the Lease stays held, so a standby waits out the
// lease duration. Such a write comes from this very master: when it stops just after it was
// elected or during a renewal, client-go cancels the renewal's request, and the API server may
// apply it a moment later. Here the Lease is read afresh and released, a few times on conflicts,
// within releaseBudget: a term lost to an API server that does not answer ends without waiting
// for it much longer.
func (e *KubernetesElection) releaseIfHeld() {
	budget := min(e.RenewDeadline, releaseBudget)
	cs, err := e.leaseClient(max(time.Second, budget/2))
	if err != nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), budget)
	defer cancel()
	leases := cs.CoordinationV1().Leases(e.Namespace)
	me := e.holderID()
	for range 3 {
		l, err := leases.Get(ctx, e.Name, metav1.GetOptions{})
		if err != nil && !apierrors.IsNotFound(err) {
			e.log().Warn("could not read the election Lease after stopping: if it still names this master, a standby takes it when it expires", "lease", e.Namespace+"/"+e.Name, "err", err)
		}
		if err != nil || l.Spec.HolderIdentity == nil || *l.Spec.HolderIdentity != me {
			return // gone, someone else's or released
		}
		e.log().Info("the election Lease still names this master after it stopped: releasing it", "lease", e.Namespace+"/"+e.Name)
		now := metav1.NewMicroTime(time.Now())
		one := int32(1)
		l.Spec.HolderIdentity, l.Spec.LeaseDurationSeconds, l.Spec.AcquireTime, l.Spec.RenewTime = nil, &one, &now, &now
		if _, err = leases.Update(ctx, l, metav1.UpdateOptions{}); err == nil || !apierrors.IsConflict(err) {
			if err != nil {
				e.log().Warn("could not release the election Lease: a standby takes it when it expires", "lease", e.Namespace+"/"+e.Name, "err", err)
			}
			return
		}
	}
}

// watchReleases signals released whenever the Lease has no holder (given up by a stopping master,
// or deleted), until ctx ends. Watch errors are retried with a pause; a refused watch (no
// permission) ends the watching: the election polls.
func (e *KubernetesElection) watchReleases(ctx context.Context, released chan<- struct{}) {
	cs, err := e.leaseClient(0)
	if err != nil {
		return
	}
	leases := cs.CoordinationV1().Leases(e.Namespace)
	signal := func() {
		select {
		case released <- struct{}{}:
		default:
		}
	}
	sel := fields.OneTermEqualSelector("metadata.name", e.Name).String()
	rv, pause := "", e.RetryPeriod
	for ctx.Err() == nil {
		w, err := leases.Watch(ctx, metav1.ListOptions{FieldSelector: sel, ResourceVersion: rv, AllowWatchBookmarks: true})
		if apierrors.IsForbidden(err) || apierrors.IsUnauthorized(err) {
			e.log().Info("cannot watch the election Lease: a standby notices a released Lease only when it polls", "lease", e.Namespace+"/"+e.Name, "err", err)
			return
		}
		if err == nil {
			for ev := range w.ResultChan() {
				switch ev.Type {
				case watch.Error:
					if apierrors.IsResourceExpired(apierrors.FromObject(ev.Object)) || apierrors.IsGone(apierrors.FromObject(ev.Object)) {
						rv = "" // start again from the current state
					}
				case watch.Deleted:
					rv = ""
					signal()
				case watch.Added, watch.Modified, watch.Bookmark:
					if l, ok := ev.Object.(*coordinationv1.Lease); ok {
						rv = l.ResourceVersion
						if ev.Type != watch.Bookmark && (l.Spec.HolderIdentity == nil || *l.Spec.HolderIdentity == "") {
							signal()
						}
					}
				}
			}
			w.Stop()
		}
		select {
		case <-ctx.Done():
		case <-time.After(pause):
		}
	}
}

// Check implements Elector: it fails once this master has seen another holder of the Lease, and
// once RenewDeadline has passed since its last successful renewal was sent. (client-go's own
// Check passes as soon as the elector has read a successor's record — a master that resumes
// after a pause finds that on its first renewal attempt, and stays active until the attempt's
// deadline — and it measures from the renewal's answer.)
func (e *KubernetesElection) Check() error {
	e.mu.Lock()
	le, lock := e.le, e.lock
	e.mu.Unlock()
	if le == nil {
		return nil
	}
	if !le.IsLeader() {
		return fmt.Errorf("%w: the Lease %s/%s is held by %s", ErrNotActive, e.Namespace, e.Name, le.GetLeader())
	}
	if sent := lock.renewed(); sent.IsZero() || time.Since(sent) > e.RenewDeadline {
		return fmt.Errorf("%w: the Lease %s/%s was last renewed %v ago, past the renew deadline %v", ErrNotActive, e.Namespace, e.Name,
			time.Since(sent).Round(time.Millisecond), e.RenewDeadline)
	}
	return nil
}
