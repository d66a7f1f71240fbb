package master

import (
	"cmp"
	"context"
	"embed"
	"fmt"
	"html/template"
	"net/http"
	"slices"
	"strings"
	"time"

	pb "github.com/cellstore/cellstore/engine/api/cellstore/v1"
	"github.com/cellstore/cellstore/engine/layout"
	"github.com/cellstore/cellstore/engine/telemetry"
)

// The master's status pages (HBase's master UI), plain HTML rendered here, no external assets:
// "/" the cluster (masters, servers with drained and dead ones, tables, regions in transition,
// dead-server recoveries, quotas, settings, recent errors) and "/table?name=ns:t" a table's
// regions (state, server, keys, size, requests). Served on the HTTP port (StatusPage), behind the
// same check as the profiling endpoints when security is on.

//go:embed statuspage.html
var statusFS embed.FS

var statusTmpl = template.Must(template.Must(template.New("statuspage.html").Funcs(telemetry.PageFuncs()).Parse(telemetry.PageHead)).ParseFS(statusFS, "statuspage.html"))

// statusServer is a row of the servers table.
type statusServer struct {
	Name, Zone, State, Link string
	StartCode               int64
	Regions                 int32
	RequestsPerSecond       int64
	Memstore                int64
	HeartbeatMsAgo          int64
}

type statusTable struct {
	Name, State    string
	Regions        int32
	Size, Requests int64
}

type statusRegion struct {
	Name, State, Server, Link, Start, End string
	Replica                               int32
	Memstore, Size                        int64
	Files                                 int32
	Reads, Writes                         int64
}

// statusProc is a region procedure under way (HBase's master page lists its procedures).
type statusProc struct {
	ID                         uint64
	Region, Kind, Step, Target string
	Attempts                   int32
	SinceMsAgo                 int64
}

type statusDead struct {
	Server, Step string
	SinceMsAgo   int64
}

type statusPage struct {
	Title, Error, Active, Self, Scheme string
	Standbys                           []string
	Servers                            []statusServer
	Tables                             []statusTable
	InTransition                       []*pb.RegionInTransition
	Procedures                         []statusProc
	Dead                               []statusDead
	Quotas                             []string
	Config                             [][2]string
	Recent                             []telemetry.RecentRecord
	Table                              string
	Regions                            []statusRegion
	Now                                time.Time
}

// SetHTTPAddress sets Config.HTTPAddress: call it before Start, once the HTTP endpoint listens.
func (m *Master) SetHTTPAddress(addr string) { m.cfg.HTTPAddress = addr }

// StatusPage serves the master's status pages.
func (m *Master) StatusPage() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/{$}", func(w http.ResponseWriter, r *http.Request) { m.renderStatus(w, r, "") })
	mux.HandleFunc("/table", func(w http.ResponseWriter, r *http.Request) {
		name := r.URL.Query().Get("name")
		if name == "" {
			http.Error(w, "name the table: /table?name=namespace:table", http.StatusBadRequest)
			return
		}
		m.renderStatus(w, r, name)
	})
	return mux
}

func (m *Master) renderStatus(w http.ResponseWriter, r *http.Request, table string) {
	p := m.statusData(r.Context(), table)
	p.Scheme = "http"
	if r.TLS != nil {
		p.Scheme = "https"
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Content-Security-Policy", "default-src 'none'; style-src 'unsafe-inline'")
	if p.Error != "" && table != "" {
		w.WriteHeader(http.StatusNotFound)
	}
	if err := statusTmpl.Execute(w, p); err != nil {
		m.log.Warn("rendering the status page", "err", err)
	}
}

// statusData gathers a page's content; a standby shows who the active master is.
func (m *Master) statusData(ctx context.Context, table string) *statusPage {
	p := &statusPage{Title: "Cellstore master " + m.cfg.Address, Self: m.cfg.Address, Now: m.clock(), Recent: m.recent.Records()}
	cs, err := m.ClusterStatus(ctx, &pb.ClusterStatusRequest{})
	if err != nil {
		leader := m.leader.Load()
		p.Error = "This master is not the active one"
		if leader != nil && *leader != "" {
			p.Active = *leader
			p.Error += ": the active master is " + *leader
		}
		p.Error += " (" + err.Error() + ")."
		return p
	}
	p.Active, p.Standbys = cs.GetActiveMaster(), cs.GetStandbyMasters()
	if err := m.lock(); err != nil {
		p.Error = err.Error()
		return p
	}
	loads := map[string]*pb.RegionLoad{}
	srvLoad := map[string]*pb.ServerLoad{}
	for name, l := range m.loads {
		srvLoad[name] = l
		for _, rl := range l.GetRegions() {
			loads[rl.GetRegion()] = rl
		}
	}
	links := map[string]string{}
	for name, a := range m.httpAddrs {
		links[name] = a
	}
	// Sizes and requests per table, from the servers' region loads.
	perTable := map[string][2]int64{}
	for key, prims := range m.st.index {
		var agg [2]int64
		for _, cr := range prims {
			if l := loads[cr.GetInfo().GetName()]; l != nil {
				agg[0] += l.GetStoreFileBytes()
				agg[1] += l.GetReadRequests() + l.GetWriteRequests()
			}
		}
		perTable[key] = agg
	}
	for _, d := range m.st.dead {
		p.Dead = append(p.Dead, statusDead{Server: d.d.GetServer(), Step: strings.TrimPrefix(d.d.GetStep().String(), "DEAD_SERVER_STEP_"),
			SinceMsAgo: max(0, p.Now.UnixMilli()-d.d.GetDeclaredMs())})
	}
	for _, pr := range m.st.procs {
		p.Procedures = append(p.Procedures, statusProc{ID: pr.p.GetId(), Region: pr.p.GetRegion(),
			Kind: strings.TrimPrefix(pr.p.GetKind().String(), "PROCEDURE_KIND_"), Step: strings.TrimPrefix(pr.p.GetStep().String(), "PROCEDURE_STEP_"),
			Target: pr.p.GetTarget(), Attempts: pr.p.GetAttempts(), SinceMsAgo: max(0, p.Now.UnixMilli()-pr.p.GetStartedMs())})
	}
	slices.SortFunc(p.Procedures, func(a, b statusProc) int { return cmp.Compare(a.ID, b.ID) })
	var regions []statusRegion
	var tableKey string
	if table != "" {
		tableKey = table
		if !strings.Contains(tableKey, ":") {
			tableKey = DefaultNamespace + ":" + tableKey
		}
		if t := m.st.tables[tableKey]; t == nil {
			p.Error = fmt.Sprintf("There is no table %s.", tableKey)
		} else {
			p.Table = tableKey
			for _, cr := range m.st.tableRegions(tableKey) {
				info := cr.GetInfo()
				sr := statusRegion{Name: info.GetName(), State: strings.TrimPrefix(cr.GetState().String(), "REGION_STATE_"),
					Server: cr.GetServer(), Start: telemetry.PrintableKey(info.GetStartKey()), End: telemetry.PrintableKey(info.GetEndKey()), Replica: info.GetReplicaId()}
				if pr := m.st.procs[info.GetName()]; pr != nil {
					sr.State += " (" + strings.TrimPrefix(pr.p.GetStep().String(), "PROCEDURE_STEP_") + ")"
				}
				if l := loads[info.GetName()]; l != nil {
					sr.Memstore, sr.Size, sr.Files, sr.Reads, sr.Writes = l.GetMemstoreBytes(), l.GetStoreFileBytes(), l.GetStoreFiles(),
						l.GetReadRequests(), l.GetWriteRequests()
				}
				regions = append(regions, sr)
			}
		}
	}
	m.mu.Unlock()

	for _, s := range cs.GetServers() {
		st := statusServer{Name: fmt.Sprintf("%s:%d", s.GetServer().GetHost(), s.GetServer().GetPort()), Zone: s.GetZone(),
			StartCode: s.GetServer().GetStartCode(), Regions: s.GetRegions(), HeartbeatMsAgo: s.GetLastHeartbeatMsAgo()}
		switch {
		case !s.GetLive():
			st.State = "gone"
		case s.GetStopping():
			st.State = "stopping"
		default:
			st.State = "live"
		}
		if s.GetDraining() {
			st.State += ", draining"
		}
		if l := srvLoad[st.Name]; l != nil {
			st.RequestsPerSecond, st.Memstore = l.GetRequestsPerSecond(), l.GetMemstoreBytes()
		}
		st.Link = links[st.Name]
		p.Servers = append(p.Servers, st)
	}
	for _, d := range cs.GetDeadServers() {
		if !slices.ContainsFunc(p.Servers, func(s statusServer) bool { return s.Name == d }) {
			p.Servers = append(p.Servers, statusServer{Name: d, State: "dead (recovering)"})
		}
	}
	p.InTransition = cs.GetRegionsInTransition()
	for k, v := range cs.GetClusterConfig() {
		p.Config = append(p.Config, [2]string{k, v})
	}
	slices.SortFunc(p.Config, func(a, b [2]string) int { return cmp.Compare(a[0], b[0]) })
	if tl, err := m.listTables(&pb.ListTablesRequest{}); err == nil {
		for _, t := range tl.GetTables() {
			key := layout.TableKey(t.GetTable().GetName())
			st := statusTable{Name: key, State: strings.TrimPrefix(t.GetState().String(), "TABLE_STATE_"), Regions: t.GetRegions(),
				Size: perTable[key][0], Requests: perTable[key][1]}
			p.Tables = append(p.Tables, st)
		}
	}
	if q, err := m.ListQuotas(ctx, &pb.ListQuotasRequest{}); err == nil {
		for _, x := range q.GetQuotas() {
			p.Quotas = append(p.Quotas, quotaText(x))
		}
	}
	for i := range regions {
		regions[i].Link = links[regions[i].Server]
	}
	slices.SortFunc(regions, func(a, b statusRegion) int {
		if c := cmp.Compare(a.Start, b.Start); c != 0 {
			return c
		}
		return cmp.Compare(a.Replica, b.Replica)
	})
	p.Regions = regions
	return p
}

// quotaText is a quota as the shell's list_quotas shows it.
func quotaText(q *pb.Quota) string {
	var subject string
	switch s := q.GetSubject().(type) {
	case *pb.Quota_User:
		subject = "USER => " + s.User
	case *pb.Quota_Table:
		subject = "TABLE => " + layout.TableKey(s.Table)
	case *pb.Quota_Namespace:
		subject = "NAMESPACE => " + s.Namespace
	default:
		subject = "?"
	}
	return fmt.Sprintf("%s, THROTTLE_TYPE => %s, LIMIT => %d per %ds", subject, strings.TrimPrefix(q.GetType().String(), "THROTTLE_TYPE_"),
		q.GetLimit(), q.GetTimeUnitSeconds())
}
