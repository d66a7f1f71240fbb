package regionserver

import (
	"context"
	"fmt"
	"net/http"
	"time"

	pb "github.com/cellstore/cellstore/engine/api/cellstore/v1"
)

// PrestopHandler serves POST /prestop?timeout=D, the pod's preStop hook (`cellstore prestop`): it
// asks the master to drain this server and waits until it holds no regions or the timeout passes.
// It answers 200 either way, saying which; the process then stops on SIGTERM.
func (s *Server) PrestopHandler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost {
			http.Error(w, "use POST", http.StatusMethodNotAllowed)
			return
		}
		timeout := 5 * time.Minute
		if v := r.URL.Query().Get("timeout"); v != "" {
			d, err := time.ParseDuration(v)
			if err != nil || d <= 0 {
				http.Error(w, fmt.Sprintf("bad timeout %q: want a duration such as 90s", v), http.StatusBadRequest)
				return
			}
			timeout = d
		}
		ctx, cancel := context.WithTimeout(r.Context(), timeout)
		defer cancel()
		fmt.Fprintln(w, s.drainSelf(ctx))
	})
}

// drainSelf drains this server through the master and waits until its regions are gone. It stops
// waiting early when the drain cannot finish: no other live region server can take the regions (the
// whole cluster is being deleted or scaled to zero), or the master has not answered for
// masterSilence. The regions are then closed by the graceful stop, which flushes them: nothing is
// lost, they are only unavailable until the master reassigns them.
func (s *Server) drainSelf(ctx context.Context) string {
	err := s.callMaster(ctx, func(ctx context.Context, m pb.MasterClient) error {
		// This process's drain only: the next process of this server (the restarted pod) is not
		// draining — a drain of the whole server name is an operator's decision (the shell's drain).
		_, err := m.DrainServer(ctx, &pb.DrainServerRequest{Server: s.Name(), StartCode: s.serverName().GetStartCode()})
		return err
	})
	if err != nil {
		return fmt.Sprintf("drain of %s not requested: %v", s.Name(), err)
	}
	t := time.NewTicker(100 * time.Millisecond)
	defer t.Stop()
	lastAnswer, nextCheck := time.Now(), time.Now().Add(drainFirstCheck)
	progress := drainProgress{stall: drainStall}
	for {
		n := len(s.OnlineRegions())
		if n == 0 {
			return fmt.Sprintf("%s drained: no regions left", s.Name())
		}
		if progress.stalled(n, time.Now()) {
			// Nothing moves (the regions cannot go anywhere, or the operator restarts the pod
			// anyway: kubectl annotate ... force-restart, onDrainTimeout: Proceed): the rest of the
			// timeout would only delay the restart.
			return fmt.Sprintf("%s holds %d regions and none has left for %s: stopping with them (they are flushed)", s.Name(), n, drainStall)
		}
		if now := time.Now(); now.After(nextCheck) {
			nextCheck = now.Add(time.Second)
			others, err := s.serversThatCanTakeRegions(ctx)
			switch {
			case err == nil && others == 0:
				return fmt.Sprintf("%s holds %d regions and no other live region server can take them: stopping with them (they are flushed)", s.Name(), n)
			case err == nil:
				lastAnswer = now
			case now.Sub(lastAnswer) > masterSilence:
				return fmt.Sprintf("%s holds %d regions and the master has not answered for %s (%v): stopping with them (they are flushed)", s.Name(), n, masterSilence, err)
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Sprintf("%s still holds %d regions at the timeout", s.Name(), n)
		case <-t.C:
		}
	}
}

// drainProgress tells a drain that has stopped making progress: no region has left for stall.
type drainProgress struct {
	stall time.Duration
	least int       // the fewest regions seen
	since time.Time // when that was first seen
}

// stalled records that the server holds n regions at now and says whether none has left for the
// stall time.
func (p *drainProgress) stalled(n int, now time.Time) bool {
	if p.since.IsZero() || n < p.least {
		p.least, p.since = n, now
		return false
	}
	return now.Sub(p.since) >= p.stall
}

// drainStall is how long a drain may go without a region leaving before the hook stops waiting
// (a variable for tests).
var drainStall = 2 * time.Minute

// masterSilence is how long a draining server waits for an unreachable master (a variable for
// tests).
var masterSilence = 15 * time.Second

// drainFirstCheck is when a draining server first looks at the cluster (a variable for tests).
var drainFirstCheck = time.Second

// serversThatCanTakeRegions counts the other live region servers that are neither draining nor
// stopping.
func (s *Server) serversThatCanTakeRegions(ctx context.Context) (int, error) {
	var st *pb.ClusterStatusResponse
	err := s.callMaster(ctx, func(ctx context.Context, m pb.MasterClient) error {
		var err error
		st, err = m.ClusterStatus(ctx, &pb.ClusterStatusRequest{})
		return err
	})
	if err != nil {
		return 0, err
	}
	n := 0
	for _, sv := range st.GetServers() {
		if sv.GetLive() && !sv.GetDraining() && !sv.GetStopping() && sv.GetServer().Address() != s.Name() {
			n++
		}
	}
	return n, nil
}
