package master

import (
	"bytes"
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/cellstore/cellstore/engine/access"
	"github.com/cellstore/cellstore/engine/layout"
	"github.com/cellstore/cellstore/engine/security"
	"github.com/cellstore/cellstore/engine/version"
	corev1 "k8s.io/api/core/v1"
	ctrlclient "sigs.k8s.io/controller-runtime/pkg/client"

	pb "github.com/cellstore/cellstore/engine/api/cellstore/v1"
	"github.com/cellstore/cellstore/engine/client"
	"github.com/cellstore/cellstore/operator/api/v1alpha1"
	"github.com/cellstore/cellstore/operator/internal/resources"
)

// NewEngine is the Factory of real clusters: it reaches the masters through their Service with
// the engine's Go client, which finds the active master (standbys redirect) and retries what can
// be retried within each call's deadline. With TLS Generated (spec.security) it connects as
// "cellstore-operator" in the admins' group, with a client certificate it issues itself from the
// cluster's CA (read with reader) and keeps in memory; with TLS Provided, with the certificate of
// the user's client Secret.
func NewEngine(reader ctrlclient.Reader) Factory {
	e := &engineFactory{reader: reader, creds: map[string]*operatorCreds{}}
	return e.client
}

type engineFactory struct {
	reader ctrlclient.Reader
	mu     sync.Mutex
	creds  map[string]*operatorCreds // by namespace/name
}

type operatorCreds struct {
	caPEM []byte
	certs *security.Certs
}

func (e *engineFactory) client(cluster *v1alpha1.StoreCluster) (Client, error) {
	cfg := client.Config{
		Masters:          []string{resources.MasterAddress(cluster)},
		User:             "cellstore-operator",
		OperationTimeout: 30 * time.Second,
		RPCTimeout:       10 * time.Second,
	}
	if cluster.Spec.TLSEnabled() {
		certs, err := e.certsFor(cluster)
		if err != nil {
			return nil, fmt.Errorf("master of StoreCluster %s/%s: %w", cluster.Namespace, cluster.Name, err)
		}
		cfg.TLS = certs
	}
	c, err := client.New(cfg)
	if err != nil {
		return nil, fmt.Errorf("master of StoreCluster %s/%s: %w", cluster.Namespace, cluster.Name, err)
	}
	return &engineClient{c: c}, nil
}

// certsFor returns the operator's client certificate for cluster, issuing it when there is none,
// the CA changed, or a third of its life is left. With tls Provided it is the user's client
// Secret instead: the operator holds no CA key to issue one.
func (e *engineFactory) certsFor(cluster *v1alpha1.StoreCluster) (*security.Certs, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if cluster.Spec.TLSProvided() {
		return e.providedCerts(ctx, cluster)
	}
	sec := &corev1.Secret{}
	if err := e.reader.Get(ctx, ctrlclient.ObjectKey{Namespace: cluster.Namespace, Name: resources.CASecretName(cluster)}, sec); err != nil {
		return nil, fmt.Errorf("the cluster's CA (Secret %s): %w", resources.CASecretName(cluster), err)
	}
	caPEM := resources.TrustBundle(sec.Data, time.Now()) // during a CA renewal, two
	key := cluster.Namespace + "/" + cluster.Name
	e.mu.Lock()
	defer e.mu.Unlock()
	if oc := e.creds[key]; oc != nil && bytes.Equal(oc.caPEM, caPEM) {
		if l := oc.certs.Leaf(); l != nil && !resources.NeedsRenewal(l.NotBefore, l.NotAfter, time.Now()) {
			return oc.certs, nil
		}
	}
	ca, err := security.ParseCA(sec.Data[resources.KeyCACert], sec.Data[resources.KeyCAKey])
	if err != nil {
		return nil, fmt.Errorf("the cluster's CA (Secret %s): %w", sec.Name, err)
	}
	is, err := ca.Issue(security.Request{CommonName: "cellstore-operator", Organizations: []string{resources.GroupAdmins}, Client: true, Validity: 24 * time.Hour})
	if err != nil {
		return nil, err
	}
	certs, err := security.CertsFromPEM(is.CertPEM, is.KeyPEM, caPEM)
	if err != nil {
		return nil, err
	}
	e.creds[key] = &operatorCreds{caPEM: caPEM, certs: certs}
	return certs, nil
}

// providedCerts is the operator's identity with tls Provided: the certificate and key of the
// client Secret (spec.security.certificates.clientSecretName), checking the servers against the CA
// of the server Secret (the one that signed the servers' certificate). They are read on every
// call, so a renewed certificate is used from the next one.
func (e *engineFactory) providedCerts(ctx context.Context, cluster *v1alpha1.StoreCluster) (*security.Certs, error) {
	p := cluster.Spec.Security.Certificates
	if p == nil {
		return nil, fmt.Errorf("security.tls Provided without security.certificates")
	}
	read := func(name, field string) (*corev1.Secret, error) {
		sec := &corev1.Secret{}
		if err := e.reader.Get(ctx, ctrlclient.ObjectKey{Namespace: cluster.Namespace, Name: name}, sec); err != nil {
			return nil, fmt.Errorf("%s: %w", resources.SecretRef(name, field), err)
		}
		return sec, nil
	}
	server, err := read(p.ServerSecretName, resources.ServerSecretField)
	if err != nil {
		return nil, err
	}
	cl, err := read(p.ClientSecretName, resources.ClientSecretField)
	if err != nil {
		return nil, err
	}
	for _, k := range []struct {
		sec *corev1.Secret
		key string
	}{{cl, corev1.TLSCertKey}, {cl, corev1.TLSPrivateKeyKey}, {server, resources.KeyCACert}} {
		if len(k.sec.Data[k.key]) == 0 {
			return nil, fmt.Errorf("no key %s in Secret %s", k.key, k.sec.Name)
		}
	}
	certs, err := security.CertsFromPEM(cl.Data[corev1.TLSCertKey], cl.Data[corev1.TLSPrivateKeyKey], server.Data[resources.KeyCACert])
	if err != nil {
		return nil, fmt.Errorf("the operator's client certificate (%s) with the CA of Secret %s: %w", resources.SecretRef(cl.Name, resources.ClientSecretField), server.Name, err)
	}
	return certs, nil
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
	var versions []string
	for _, v := range st.GetMasterVersions() {
		versions = append(versions, v)
	}
	for _, s := range st.Servers {
		if s.Live {
			versions = append(versions, s.GetVersion())
		}
	}
	out.Versions = version.Distinct(versions)
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

func (e *engineClient) ExternalAddresses(ctx context.Context) (map[string]string, error) {
	var out map[string]string
	err := e.call(ctx, func(ctx context.Context, m pb.MasterClient) error {
		resp, err := m.GetExternalAddresses(ctx, &pb.GetExternalAddressesRequest{})
		out = resp.GetAddresses()
		return err
	})
	return out, err
}

func (e *engineClient) SetExternalAddresses(ctx context.Context, addrs map[string]string) error {
	return e.call(ctx, func(ctx context.Context, m pb.MasterClient) error {
		_, err := m.SetExternalAddresses(ctx, &pb.SetExternalAddressesRequest{Addresses: addrs})
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

func permissionProto(p Permission, withActions bool) (*pb.Permission, error) {
	out := &pb.Permission{User: p.User, Namespace: p.Namespace, Family: []byte(p.Family)}
	if p.Qualifier != "" {
		out.Qualifier = []byte(p.Qualifier)
	}
	if p.Table != "" {
		out.Table = client.ParseTableName(p.Table)
	}
	if withActions {
		a, err := access.ParseActions(p.Actions)
		if err != nil {
			return nil, err
		}
		out.Actions = uint32(a)
	}
	return out, nil
}

func (e *engineClient) Grant(ctx context.Context, p Permission) error {
	pp, err := permissionProto(p, true)
	if err != nil {
		return err
	}
	return e.call(ctx, func(ctx context.Context, m pb.MasterClient) error {
		_, err := m.Grant(ctx, &pb.GrantRequest{Permission: pp})
		return err
	})
}

func (e *engineClient) Revoke(ctx context.Context, p Permission) error {
	pp, err := permissionProto(p, false)
	if err != nil {
		return err
	}
	return e.call(ctx, func(ctx context.Context, m pb.MasterClient) error {
		_, err := m.Revoke(ctx, &pb.RevokeRequest{Permission: pp})
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

func (e *engineClient) ListTables(ctx context.Context) ([]string, error) { return e.tables(ctx, false) }

// tables lists the tables ("namespace:table"), only those enabled (or being enabled) when asked.
func (e *engineClient) tables(ctx context.Context, enabledOnly bool) ([]string, error) {
	var out []string
	err := e.call(ctx, func(ctx context.Context, m pb.MasterClient) error {
		resp, err := m.ListTables(ctx, &pb.ListTablesRequest{})
		if err != nil {
			return err
		}
		out = out[:0]
		for _, t := range resp.GetTables() {
			if enabledOnly && t.GetState() != pb.TableState_TABLE_STATE_ENABLED && t.GetState() != pb.TableState_TABLE_STATE_ENABLING {
				continue
			}
			n := t.GetTable().GetName()
			out = append(out, n.GetNamespace()+":"+n.GetName())
		}
		return nil
	})
	return out, err
}

// isCode says whether err is the master's answer with that code.
func isCode(err error, code pb.ErrorCode) bool {
	d, ok := pb.DetailOf(err)
	return ok && d.GetCode() == code
}

func (e *engineClient) Snapshot(ctx context.Context, table, name string) error {
	return e.call(ctx, func(ctx context.Context, m pb.MasterClient) error {
		_, err := m.Snapshot(ctx, &pb.SnapshotRequest{Table: client.ParseTableName(table), Name: name})
		switch {
		case isCode(err, pb.ErrorCode_ERROR_CODE_SNAPSHOT_EXISTS):
			return nil // taken by an earlier attempt
		case isCode(err, pb.ErrorCode_ERROR_CODE_TABLE_NOT_FOUND):
			return fmt.Errorf("%w: %v", ErrTableNotFound, err)
		}
		return err
	})
}

func (e *engineClient) CopySnapshot(ctx context.Context, name string, export bool) (CopyStatus, error) {
	var resp *pb.CopySnapshotResponse
	err := e.call(ctx, func(ctx context.Context, m pb.MasterClient) (err error) {
		if export {
			resp, err = m.ExportSnapshot(ctx, &pb.CopySnapshotRequest{Name: name})
		} else {
			resp, err = m.ImportSnapshot(ctx, &pb.CopySnapshotRequest{Name: name})
		}
		return err
	})
	if err != nil {
		return CopyStatus{}, err
	}
	st := CopyStatus{State: CopyRunning, Files: resp.GetFiles(), FilesTotal: resp.GetFilesTotal(), Bytes: resp.GetBytes(), Error: resp.GetError()}
	switch resp.GetState() {
	case pb.CopyState_COPY_STATE_DONE:
		st.State = CopyDone
	case pb.CopyState_COPY_STATE_FAILED:
		st.State = CopyFailed
	}
	return st, nil
}

func (e *engineClient) RestoreSnapshot(ctx context.Context, name string, until time.Time) error {
	req := &pb.SnapshotNameRequest{Name: name}
	if !until.IsZero() {
		req.UntilMs = until.UnixMilli()
	}
	return e.call(ctx, func(ctx context.Context, m pb.MasterClient) error {
		_, err := m.RestoreSnapshot(ctx, req)
		return err
	})
}

// notFoundSnapshot: the master's answer for a snapshot that does not exist.
func notFoundSnapshot(err error) bool { return isCode(err, pb.ErrorCode_ERROR_CODE_SNAPSHOT_NOT_FOUND) }

func (e *engineClient) DeleteSnapshot(ctx context.Context, name string) error {
	return e.call(ctx, func(ctx context.Context, m pb.MasterClient) error {
		_, err := m.DeleteSnapshot(ctx, &pb.SnapshotNameRequest{Name: name})
		if notFoundSnapshot(err) {
			return nil
		}
		return err
	})
}

func (e *engineClient) DeleteBackup(ctx context.Context, name string) error {
	return e.call(ctx, func(ctx context.Context, m pb.MasterClient) error {
		_, err := m.DeleteBackup(ctx, &pb.SnapshotNameRequest{Name: name})
		if notFoundSnapshot(err) {
			return nil
		}
		return err
	})
}

func (e *engineClient) EnabledTables(ctx context.Context) ([]string, error) {
	return e.tables(ctx, true)
}

func (e *engineClient) TableEnabled(ctx context.Context, table string) (bool, string, error) {
	var enabled bool
	var why string
	err := e.call(ctx, func(ctx context.Context, m pb.MasterClient) error {
		resp, err := m.ListTables(ctx, &pb.ListTablesRequest{})
		if err != nil {
			return err
		}
		for _, t := range resp.GetTables() {
			if layout.TableKey(t.GetTable().GetName()) == table {
				enabled, why = t.GetState() == pb.TableState_TABLE_STATE_ENABLED, t.GetRestoreError()
			}
		}
		return nil
	})
	return enabled, why, err
}

// IsInvalid says whether err is the master's refusal of a request as invalid (a retry cannot help).
func IsInvalid(err error) bool { return isCode(err, pb.ErrorCode_ERROR_CODE_INVALID_ARGUMENT) }

// IsUnimplemented says whether err is a master's answer to a call its engine version does not
// have (an engine older than the operator).
func IsUnimplemented(err error) bool { return status.Code(err) == codes.Unimplemented }

func (e *engineClient) DisableTable(ctx context.Context, table string) error {
	return e.c.MasterWait(ctx, func(ctx context.Context, m pb.MasterClient) error {
		_, err := m.DisableTable(ctx, &pb.TableRequest{Table: client.ParseTableName(table)})
		if isCode(err, pb.ErrorCode_ERROR_CODE_TABLE_DISABLED) || isCode(err, pb.ErrorCode_ERROR_CODE_TABLE_NOT_FOUND) {
			return nil
		}
		return err
	})
}

func (e *engineClient) EnableTable(ctx context.Context, table string) error {
	return e.c.MasterWait(ctx, func(ctx context.Context, m pb.MasterClient) error {
		_, err := m.EnableTable(ctx, &pb.TableRequest{Table: client.ParseTableName(table)})
		if isCode(err, pb.ErrorCode_ERROR_CODE_TABLE_NOT_FOUND) || (isCode(err, pb.ErrorCode_ERROR_CODE_FAILED_PRECONDITION) && strings.Contains(err.Error(), "already enabled")) {
			return nil
		}
		return err
	})
}
