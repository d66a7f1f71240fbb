package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	pb "github.com/cellstore/cellstore/engine/api/cellstore/v1"
	"github.com/cellstore/cellstore/engine/cell"
	"github.com/cellstore/cellstore/engine/client"
	"github.com/cellstore/cellstore/engine/layout"
	"github.com/cellstore/cellstore/engine/processtest"
	"github.com/cellstore/cellstore/engine/security"
)

// forwarder is a TCP port forwarder standing in for a NodePort or load balancer: the only way
// the external client is given to each server. It can be stopped and started again on its port.
type forwarder struct {
	t        *testing.T
	addr     string // where clients connect
	to       string
	accepted atomic.Int64
	mu       sync.Mutex
	ln       net.Listener
	conns    map[net.Conn]bool
}

func newForwarder(t *testing.T, to string) *forwarder {
	f := &forwarder{t: t, addr: "127.0.0.1:" + freePort(t), to: to, conns: map[net.Conn]bool{}}
	f.start()
	t.Cleanup(f.stop)
	return f
}

func (f *forwarder) start() {
	ln, err := net.Listen("tcp", f.addr)
	if err != nil {
		f.t.Fatal(err)
	}
	f.mu.Lock()
	f.ln = ln
	f.mu.Unlock()
	go func() {
		for {
			in, err := ln.Accept()
			if err != nil {
				return
			}
			f.accepted.Add(1)
			out, err := net.Dial("tcp", f.to)
			if err != nil {
				in.Close()
				continue
			}
			f.mu.Lock()
			f.conns[in], f.conns[out] = true, true
			f.mu.Unlock()
			pipe := func(dst, src net.Conn) {
				_, _ = io.Copy(dst, src)
				dst.Close()
				src.Close()
			}
			go pipe(out, in)
			go pipe(in, out)
		}
	}()
}

// stop closes the listener and every forwarded connection.
func (f *forwarder) stop() {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.ln != nil {
		f.ln.Close()
		f.ln = nil
	}
	for c := range f.conns {
		c.Close()
	}
	f.conns = map[net.Conn]bool{}
}

// TestExternalAccess: a client given only external addresses (forwarders standing in for
// spec.externalAccess's NodePorts) reaches the master and every region server through the
// addresses the master publishes for them, and through nothing else: with the forwarders
// stopped it cannot read; published elsewhere, it finds them again. Without published addresses
// it says what to do.
//
// Over TLS the servers' certificate names only "localhost", which they advertise, and not the
// forwarders' 127.0.0.1: the client checks each server against its own name, and the masters it
// is given (external addresses) as server certificates of the CA, or against --tls-server-name.
func TestExternalAccess(t *testing.T) {
	t.Run("plaintext", func(t *testing.T) { testExternalAccess(t, false) })
	t.Run("TLS", func(t *testing.T) { testExternalAccess(t, true) })
}

func testExternalAccess(t *testing.T, withTLS bool) {
	bin := cellstoreBinary(t)
	dir := t.TempDir()
	host := "127.0.0.1"
	var secFlags []string
	var certs *security.Certs
	if withTLS {
		host = "localhost"
		pk := filepath.Join(dir, "pki")
		run(t, bin, "certs", "ca", "--out", filepath.Join(pk, "ca"))
		run(t, bin, "certs", "issue", "--ca", filepath.Join(pk, "ca"), "--out", filepath.Join(pk, "server"), "--cn", "cellstore-server",
			"--groups", "cellstore:servers", "--hosts", "localhost", "--server", "--client")
		run(t, bin, "certs", "issue", "--ca", filepath.Join(pk, "ca"), "--out", filepath.Join(pk, "admin"), "--cn", "admin", "--client")
		server := filepath.Join(pk, "server")
		secFlags = []string{"--security=on", "--tls-cert-file", filepath.Join(server, "tls.crt"), "--tls-key-file", filepath.Join(server, "tls.key"),
			"--tls-ca-file", filepath.Join(server, "ca.crt"), "--superusers", "@cellstore:servers,admin"}
		var err error
		caFile := filepath.Join(pk, "ca", "ca.crt")
		if certs, err = security.LoadCerts(security.Files{CA: caFile, Cert: filepath.Join(pk, "admin", "tls.crt"), Key: filepath.Join(pk, "admin", "tls.key")}); err != nil {
			t.Fatal(err)
		}
	}
	masterAddr, masterHTTP := host+":"+freePort(t), "127.0.0.1:"+freePort(t)
	m := processtest.Start(t, bin, append([]string{"master", "--storage-dir", dir, "--grpc-addr", masterAddr, "--http-addr", masterHTTP,
		"--advertise-host", host, "--balancer-period", "-1s", "--log-level", "warn"}, secFlags...)...)
	m.HTTP, m.HTTPS = masterHTTP, withTLS
	m.WaitReady(t, 60*time.Second)
	var datas []string
	for range 2 {
		data, httpAddr := host+":"+freePort(t), "127.0.0.1:"+freePort(t)
		p := processtest.Start(t, bin, append([]string{"regionserver", "--storage-dir", dir, "--masters", masterAddr, "--data-addr", data,
			"--admin-addr", "127.0.0.1:" + freePort(t), "--http-addr", httpAddr, "--advertise-host", host,
			"--memstore-offheap-size", "32Mi", "--blockcache-offheap-size", "16Mi", "--blockcache-onheap-size", "16Mi", "--log-level", "warn"}, secFlags...)...)
		p.HTTP, p.HTTPS, p.Data = httpAddr, withTLS, data
		p.WaitReady(t, 60*time.Second)
		datas = append(datas, data)
	}
	ctx := context.Background()
	admin, err := client.New(client.Config{Masters: []string{masterAddr}, TLS: certs})
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()

	masterFwd := newForwarder(t, masterAddr)
	published := map[string]string{masterAddr: masterFwd.addr}
	var rsFwd []*forwarder
	for _, d := range datas {
		f := newForwarder(t, d)
		rsFwd = append(rsFwd, f)
		published[d] = f.addr
	}
	if err := admin.Master(ctx, func(ctx context.Context, mc pb.MasterClient) error {
		_, err := mc.SetExternalAddresses(ctx, &pb.SetExternalAddressesRequest{Addresses: published})
		return err
	}); err != nil {
		t.Fatal(err)
	}

	ext, err := client.New(client.Config{Masters: []string{masterFwd.addr}, External: true, TLS: certs, OperationTimeout: 30 * time.Second,
		RPCTimeout: 2 * time.Second, Pause: 20 * time.Millisecond, MaxPause: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer ext.Close()
	td := &pb.TableDescriptor{Name: &pb.TableName{Namespace: "default", Name: "ext"}, Families: []*pb.ColumnFamilyDescriptor{{Name: []byte("f")}}}
	if _, err := ext.CreateTable(ctx, td, [][]byte{[]byte("m")}); err != nil {
		t.Fatal(err)
	}
	// Both regions' servers, so that both forwarders are needed.
	servers := map[string]bool{}
	for deadline := time.Now().Add(60 * time.Second); len(servers) < 2; {
		servers = map[string]bool{}
		for _, l := range processtest.TableLocations(ctx, admin, "ext") {
			if l.GetState() == pb.RegionState_REGION_STATE_OPEN {
				servers[layout.ServerName(l.GetServer())] = true
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("the two regions did not open on two servers: %v", servers)
		}
		if len(servers) < 2 {
			if err := admin.Master(ctx, func(ctx context.Context, mc pb.MasterClient) error {
				_, err := mc.Balance(ctx, &pb.BalanceRequest{})
				return err
			}); err != nil {
				t.Fatal(err)
			}
			time.Sleep(100 * time.Millisecond) // polling the master
		}
	}
	tbl := ext.Table("ext")
	rows := []string{"apple", "zebra"} // one in each region
	for _, r := range rows {
		if err := tbl.Put(ctx, client.NewPut([]byte(r)).Add("f", "q", cell.LatestTimestamp, []byte("v-"+r))); err != nil {
			t.Fatalf("put %s through the external addresses: %v", r, err)
		}
	}
	read := func(ctx context.Context, c *client.Client) error {
		for _, r := range rows {
			res, err := c.Table("ext").Get(ctx, &pb.Get{Row: []byte(r)})
			if err != nil {
				return err
			}
			if v := string(res.Value("f", "q")); v != "v-"+r {
				return fmt.Errorf("%s = %q", r, v)
			}
		}
		return nil
	}
	if err := read(ctx, ext); err != nil {
		t.Fatal(err)
	}
	if masterFwd.accepted.Load() == 0 || rsFwd[0].accepted.Load() == 0 || rsFwd[1].accepted.Load() == 0 {
		t.Fatalf("connections through the forwarders: master %d, servers %d and %d; want each used",
			masterFwd.accepted.Load(), rsFwd[0].accepted.Load(), rsFwd[1].accepted.Load())
	}

	// The advertised addresses are reachable from here, but the external client never uses them.
	for _, f := range rsFwd {
		f.stop()
	}
	sctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	err = read(sctx, ext)
	cancel()
	if err == nil {
		t.Fatal("read with the region servers' external addresses down: want an error, the client went around them")
	}
	// The servers come back at other external addresses (their pods on other nodes): the client
	// drops the addresses it could not reach and asks the masters again.
	for i, d := range datas {
		f := newForwarder(t, d)
		rsFwd[i] = f
		published[d] = f.addr
	}
	if err := admin.Master(ctx, func(ctx context.Context, mc pb.MasterClient) error {
		_, err := mc.SetExternalAddresses(ctx, &pb.SetExternalAddressesRequest{Addresses: published})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if err := read(ctx, ext); err != nil {
		t.Fatalf("read after the servers moved to new external addresses: %v", err)
	}
	if rsFwd[0].accepted.Load() == 0 && rsFwd[1].accepted.Load() == 0 {
		t.Fatal("the read after the move went around the new external addresses")
	}

	if withTLS {
		// A named master is checked against that name; the wrong one fails.
		for name, ok := range map[string]bool{"localhost": true, "db.example.com": false} {
			// The case that fails gives up soon; the one that works has the time a loaded machine
			// needs for its TLS handshakes.
			opTimeout, rpcTimeout := 30*time.Second, 5*time.Second
			if !ok {
				opTimeout, rpcTimeout = 3*time.Second, time.Second
			}
			named, err := client.New(client.Config{Masters: []string{masterFwd.addr}, External: true, TLS: certs, TLSServerName: name,
				OperationTimeout: opTimeout, RPCTimeout: rpcTimeout, Pause: 20 * time.Millisecond, MaxPause: 200 * time.Millisecond})
			if err != nil {
				t.Fatal(err)
			}
			err = read(ctx, named)
			named.Close()
			if (err == nil) != ok {
				t.Errorf("TLSServerName %q: %v, want success %t", name, err, ok)
			}
		}
		// (A master with a certificate of another CA is refused: TestClientConfigAnyName.)
	}

	// With nothing published, an external client is told what is missing.
	if err := admin.Master(ctx, func(ctx context.Context, mc pb.MasterClient) error {
		_, err := mc.SetExternalAddresses(ctx, &pb.SetExternalAddressesRequest{})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	fresh, err := client.New(client.Config{Masters: []string{masterFwd.addr}, External: true, TLS: certs, OperationTimeout: 3 * time.Second,
		RPCTimeout: time.Second, Pause: 20 * time.Millisecond, MaxPause: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer fresh.Close()
	if err := read(ctx, fresh); err == nil || !strings.Contains(err.Error(), "spec.externalAccess") {
		t.Fatalf("read with no external addresses published: %v, want an error naming spec.externalAccess", err)
	}
}
