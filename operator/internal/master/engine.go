package master

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	pb "github.com/cellstore/cellstore/engine/api/cellstore/v1"
	"github.com/cellstore/cellstore/engine/client"
	"github.com/cellstore/cellstore/operator/api/v1alpha1"
	"github.com/cellstore/cellstore/operator/internal/resources"
)

// Engine is the Factory of real clusters: it reaches the masters through their Service with the
// engine's Go client, which finds the active master (standbys redirect) and retries what can be
// retried within each call's deadline.
func Engine(cluster *v1alpha1.StoreCluster) (Client, error) {
	c, err := client.New(client.Config{
		Masters:          []string{resources.MasterAddress(cluster)},
		User:             "cellstore-operator",
		OperationTimeout: 30 * time.Second,
		RPCTimeout:       10 * time.Second,
	})
	if err != nil {
		return nil, fmt.Errorf("master of StoreCluster %s/%s: %w", cluster.Namespace, cluster.Name, err)
	}
	return &engineClient{c: c}, nil
}

// NewEngineClient wraps an engine client (tests run the operator against an in-process master).
func NewEngineClient(c *client.Client) Client { return &engineClient{c: c} }

type engineClient struct{ c *client.Client }

func (e *engineClient) call(ctx context.Context, fn func(context.Context, pb.MasterClient) error) error {
	return e.c.Master(ctx, fn)
}

func (e *engineClient) ClusterStatus(ctx context.Context) (*ClusterStatus, error) {
	var st *pb.ClusterStatusResponse
	if err := e.call(ctx, func(ctx context.Context, m pb.MasterClient) error {
		var err error
		st, err = m.ClusterStatus(ctx, &pb.ClusterStatusRequest{})
		return err
	}); err != nil {
		return nil, err
	}
	out := &ClusterStatus{ActiveMaster: st.ActiveMaster, RegionsTotal: st.Regions, RegionsInTransition: int32(len(st.RegionsInTransition))}
	if v, err := strconv.Atoi(st.ClusterConfig["default_region_replication"]); err == nil {
		out.DefaultRegionReplication = int32(v)
	}
	for _, s := range st.Servers {
		state := ServerOnline
		switch {
		case !s.Live:
			state = ServerDead
		case s.Stopping:
			state = ServerStopping
		}
		out.Servers = append(out.Servers, ServerStatus{
			Name: s.Server.Address(), State: state,
			Draining: s.Draining, Zone: s.Zone, Regions: s.Regions,
		})
	}
	return out, nil
}

func (e *engineClient) Drain(ctx context.Context, server string) error {
	return e.call(ctx, func(ctx context.Context, m pb.MasterClient) error {
		_, err := m.DrainServer(ctx, &pb.DrainServerRequest{Server: server})
		return err
	})
}

func (e *engineClient) Undrain(ctx context.Context, server string) error {
	return e.call(ctx, func(ctx context.Context, m pb.MasterClient) error {
		_, err := m.UndrainServer(ctx, &pb.DrainServerRequest{Server: server})
		return err
	})
}

func (e *engineClient) Balance(ctx context.Context) error {
	return e.call(ctx, func(ctx context.Context, m pb.MasterClient) error {
		_, err := m.Balance(ctx, &pb.BalanceRequest{})
		return err
	})
}

func (e *engineClient) SetServerZone(ctx context.Context, server, zone string) error {
	return e.call(ctx, func(ctx context.Context, m pb.MasterClient) error {
		_, err := m.SetServerZone(ctx, &pb.SetServerZoneRequest{Server: server, Zone: zone})
		return err
	})
}

var timeUnitSeconds = map[TimeUnit]int64{Second: 1, Minute: 60, Hour: 3600, Day: 86400}

func toProto(s Subject, t ThrottleType) (*pb.Quota, error) {
	tt, ok := pb.ThrottleType_value["THROTTLE_TYPE_"+string(t)]
	if !ok {
		return nil, fmt.Errorf("unknown throttle type %q", t)
	}
	q := &pb.Quota{Type: pb.ThrottleType(tt)}
	switch {
	case s.User != "":
		q.Subject = &pb.Quota_User{User: s.User}
	case s.Table != "":
		q.Subject = &pb.Quota_Table{Table: client.ParseTableName(s.Table)}
	case s.Namespace != "":
		q.Subject = &pb.Quota_Namespace{Namespace: s.Namespace}
	default:
		return nil, fmt.Errorf("quota without a user, table or namespace")
	}
	return q, nil
}

func (e *engineClient) SetQuota(ctx context.Context, q Quota) error {
	p, err := toProto(q.Subject, q.Type)
	if err != nil {
		return err
	}
	secs, ok := timeUnitSeconds[q.TimeUnit]
	if !ok {
		return fmt.Errorf("unknown time unit %q", q.TimeUnit)
	}
	p.Limit, p.TimeUnitSeconds = int64(q.Limit), secs
	return e.call(ctx, func(ctx context.Context, m pb.MasterClient) error {
		_, err := m.SetQuota(ctx, &pb.SetQuotaRequest{Quota: p})
		return err
	})
}

func (e *engineClient) RemoveQuota(ctx context.Context, key QuotaKey) error {
	p, err := toProto(key.Subject, key.Type)
	if err != nil {
		return err
	}
	return e.call(ctx, func(ctx context.Context, m pb.MasterClient) error {
		_, err := m.SetQuota(ctx, &pb.SetQuotaRequest{Quota: p, Remove: true})
		return err
	})
}

func (e *engineClient) ListQuotas(ctx context.Context) ([]Quota, error) {
	var resp *pb.ListQuotasResponse
	if err := e.call(ctx, func(ctx context.Context, m pb.MasterClient) error {
		var err error
		resp, err = m.ListQuotas(ctx, &pb.ListQuotasRequest{})
		return err
	}); err != nil {
		return nil, err
	}
	units := map[int64]TimeUnit{1: Second, 60: Minute, 3600: Hour, 86400: Day}
	var out []Quota
	for _, q := range resp.Quotas {
		var s Subject
		switch sub := q.Subject.(type) {
		case *pb.Quota_User:
			s.User = sub.User
		case *pb.Quota_Table:
			s.Table = sub.Table.GetNamespace() + ":" + sub.Table.GetName()
		case *pb.Quota_Namespace:
			s.Namespace = sub.Namespace
		}
		tu, ok := units[q.TimeUnitSeconds]
		if !ok {
			return nil, fmt.Errorf("the master holds a quota of %s per %d s, which has no HBase time unit", s, q.TimeUnitSeconds)
		}
		out = append(out, Quota{Subject: s, Type: ThrottleType(strings.TrimPrefix(q.Type.String(), "THROTTLE_TYPE_")), Limit: uint64(q.Limit), TimeUnit: tu})
	}
	return out, nil
}

func (e *engineClient) SetDefaultRegionReplication(ctx context.Context, n int32) error {
	return e.call(ctx, func(ctx context.Context, m pb.MasterClient) error {
		_, err := m.SetClusterConfig(ctx, &pb.SetClusterConfigRequest{Config: map[string]string{"default_region_replication": strconv.Itoa(int(n))}})
		return err
	})
}

func (e *engineClient) Close() error { return e.c.Close() }
