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

// drainSelf drains this server through the master and waits until its regions are gone.
func (s *Server) drainSelf(ctx context.Context) string {
	err := s.callMaster(ctx, func(ctx context.Context, m pb.MasterClient) error {
		_, err := m.DrainServer(ctx, &pb.DrainServerRequest{Server: s.Name()})
		return err
	})
	if err != nil {
		return fmt.Sprintf("drain of %s not requested: %v", s.Name(), err)
	}
	t := time.NewTicker(100 * time.Millisecond)
	defer t.Stop()
	for {
		n := len(s.OnlineRegions())
		if n == 0 {
			return fmt.Sprintf("%s drained: no regions left", s.Name())
		}
		select {
		case <-ctx.Done():
			return fmt.Sprintf("%s still holds %d regions at the timeout", s.Name(), n)
		case <-t.C:
		}
	}
}
