package regionserver

import (
	"cmp"
	"embed"
	"fmt"
	"html/template"
	"net/http"
	"slices"
	"time"

	"github.com/cellstore/cellstore/engine/blockcache"
	"github.com/cellstore/cellstore/engine/telemetry"
)

// The region server's status page (HBase's region server UI), plain HTML rendered here, no
// external assets: the server, its master (a link), memory (memstore budget, block caches), the
// WAL, its regions (state, size, requests) and recent warnings and errors. Served on the HTTP port
// at "/", behind the same check as the profiling endpoints when security is on.

//go:embed statuspage.html
var statusFS embed.FS

var statusTmpl = template.Must(template.Must(template.New("statuspage.html").Funcs(telemetry.PageFuncs()).Parse(telemetry.PageHead)).ParseFS(statusFS, "statuspage.html"))

type statusRegion struct {
	Name, Table, State, Start, End string
	Replica                        int32
	Memstore, Size                 int64
	Files                          int64
	Reads, Writes                  int64
}

type statusPage struct {
	Title, Server, Scheme, MasterLink, Masters, Ready string
	StartCode                                         int64
	Started, Now                                      time.Time
	MemstoreUsed, MemstoreLimit                       int64
	L1, L2                                            blockcache.Stats
	HasL2                                             bool
	WALUnits                                          int
	WALPinning                                        []string
	WALErr                                            string
	Regions                                           []statusRegion
	Recent                                            []telemetry.RecentRecord
}

// StatusPage serves the region server's status page.
func (s *Server) StatusPage() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p := s.statusData()
		p.Scheme = "http"
		if r.TLS != nil {
			p.Scheme = "https"
		}
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		w.Header().Set("Content-Security-Policy", "default-src 'none'; style-src 'unsafe-inline'")
		if err := statusTmpl.Execute(w, p); err != nil {
			s.log.Warn("rendering the status page", "err", err)
		}
	})
}

func (s *Server) statusData() *statusPage {
	sn := s.serverName()
	p := &statusPage{Title: "Cellstore region server " + s.nameStr, Server: s.nameStr, StartCode: sn.GetStartCode(),
		Started: time.UnixMilli(sn.GetStartCode()), Now: time.Now(), Recent: s.recent.Records(), MemstoreLimit: s.cfg.MemstoreBytes,
		Ready: "ready"}
	if err := s.Ready(); err != nil {
		p.Ready = err.Error()
	}
	p.Masters = fmt.Sprint(s.cfg.Masters)
	if a := s.masterHTTP.Load(); a != nil {
		p.MasterLink = *a
	}
	p.L1 = s.l1.Stats()
	if s.l2 != nil {
		p.L2, p.HasL2 = s.l2.Stats(), true
	}
	if w := s.currentWAL(); w != nil {
		p.WALUnits, p.WALPinning = w.Backlog()
		if err := w.Err(); err != nil {
			p.WALErr = err.Error()
		}
	}
	s.regions.Range(func(_, v any) bool {
		or := v.(*onlineRegion)
		sr := statusRegion{Name: or.name, Table: or.tkey, Replica: or.info.GetReplicaId(), State: stateName(or.state.Load()),
			Start: telemetry.PrintableKey(or.info.GetStartKey()), End: telemetry.PrintableKey(or.info.GetEndKey())}
		if r := or.r.Load(); r != nil {
			ms := r.MemstoreStats()
			mt := r.Metrics()
			sr.Memstore, sr.Size, sr.Files = ms.DataBytes, mt.StoreFileBytes.Load(), mt.StoreFiles.Load()
			sr.Reads, sr.Writes = mt.ReadRequests.Load(), mt.WriteRequests.Load()
			p.MemstoreUsed += ms.ChunkBytes
		}
		p.Regions = append(p.Regions, sr)
		return true
	})
	slices.SortFunc(p.Regions, func(a, b statusRegion) int {
		if c := cmp.Compare(a.Table, b.Table); c != 0 {
			return c
		}
		if c := cmp.Compare(a.Start, b.Start); c != 0 {
			return c
		}
		return cmp.Compare(a.Replica, b.Replica)
	})
	return p
}

func stateName(st int32) string {
	switch st {
	case stateOpening:
		return "OPENING"
	case stateOpen:
		return "OPEN"
	case stateClosing:
		return "CLOSING"
	}
	return fmt.Sprint(st)
}
