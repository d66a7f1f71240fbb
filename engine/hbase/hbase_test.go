package hbase

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	pb "github.com/cellstore/cellstore/engine/api/cellstore/v1"
	hb "github.com/cellstore/cellstore/engine/api/hbase/v2"
	"github.com/cellstore/cellstore/engine/cell"
	"github.com/cellstore/cellstore/engine/rpc"
	"github.com/cellstore/cellstore/engine/security"
)

func TestRegionNames(t *testing.T) {
	for _, c := range []struct {
		table   *pb.TableName
		start   string
		id      uint64
		replica int32
	}{
		{&pb.TableName{Namespace: "default", Name: "t"}, "", 1795707766833, 0},
		{&pb.TableName{Namespace: "ns", Name: "orders"}, "a,b.c,", 42, 0},
		{&pb.TableName{Namespace: "default", Name: "t"}, "row-3", 7, 2},
	} {
		n := regionName(c.table, []byte(c.start), c.id, c.replica)
		if !bytes.HasSuffix(n, []byte(".")) || n[len(n)-34] != '.' {
			t.Fatalf("%s: not <name>.<md5>.", n)
		}
		p, err := parseRegionName(n)
		if err != nil {
			t.Fatalf("%s: %v", n, err)
		}
		if !proto.Equal(p.table, c.table) || string(p.start) != c.start || p.id != c.id || p.replica != c.replica {
			t.Fatalf("%s parsed as %+v", n, p)
		}
	}
	// HBase's MD5 of the name before the encoded part, known from a real HBase client.
	if n := regionName(&pb.TableName{Namespace: "default", Name: "compat"}, nil, 1795707766833, 0); !strings.HasSuffix(string(n), ".58367c8a0045a445b0336eda7bf1798c.") {
		t.Fatalf("%s: not the encoded name the Java client computes (58367c8a0045a445b0336eda7bf1798c)", n)
	}
	for _, bad := range []string{"", "t", "t,", "t,a,notanumber", "t,a,5_zz"} {
		if _, err := parseRegionName([]byte(bad)); err == nil {
			t.Errorf("%q parsed", bad)
		}
	}
}

// The region names an adapter remembers are bounded in bytes as in number: a client may name a
// region with any start key (the table, id and replica select it). Start keys over HBase's limit
// are refused.
func TestKnownRegionNamesAreBounded(t *testing.T) {
	a := New(fakeBackend{}, nil)
	table := &pb.TableName{Namespace: "default", Name: "t"}
	for i := range 2000 { // 32 MiB of names
		start := fmt.Appendf(bytes.Repeat([]byte("k"), 16<<10), "%d", i)
		name, _, e := a.region(&hb.RegionSpecifier{Type: hb.RegionSpecifier_REGION_NAME.Enum(), Value: regionName(table, start, 1, 0)})
		if e != nil || name != "r1" {
			t.Fatalf("name %d: %q %v", i, name, e)
		}
	}
	var held int64
	a.regions.Range(func(k, _ any) bool { held += int64(len(k.(string))); return true })
	if held > maxKnownRegionBytes || held == 0 {
		t.Fatalf("the adapter remembers %d bytes of region names, limit %d", held, maxKnownRegionBytes)
	}
	long := regionName(table, bytes.Repeat([]byte("k"), cell.MaxRowLength+1), 1, 0)
	if _, _, e := a.region(&hb.RegionSpecifier{Type: hb.RegionSpecifier_REGION_NAME.Enum(), Value: long}); e == nil || len(e.msg) > 1024 {
		t.Fatalf("a start key over the limit: %v", e)
	}
}

// Open hbase:meta scanners are bounded by the bytes of the rows they keep as by their number, and
// one unused for its lease is gone.
func TestMetaScannersAreBounded(t *testing.T) {
	var s metaScanners
	row := func() []metaRow {
		return []metaRow{{key: []byte("t,,1"), cells: []cell.KeyValue{make(cell.KeyValue, 1<<20)}}}
	}
	for i := range 200 { // 200 MiB of rows
		s.put(uint64(i), &metaScanner{rows: row(), touched: time.Now()})
	}
	held := 0
	for _, ms := range s.open {
		held += ms.bytes
	}
	if held != s.bytes || held > maxMetaScannerBytes || len(s.open) == 0 {
		t.Fatalf("%d open scanners keep %d bytes (counted %d), limit %d", len(s.open), held, s.bytes, maxMetaScannerBytes)
	}
	if _, ok := s.take(199); !ok {
		t.Fatal("the newest scanner is gone")
	}
	s.put(1000, &metaScanner{rows: row(), touched: time.Now().Add(-2 * metaScannerTTL)})
	if _, ok := s.take(1000); ok {
		t.Fatal("a scanner unused for twice its lease was continued")
	}
	s.put(1001, &metaScanner{rows: row(), touched: time.Now().Add(-2 * metaScannerTTL)})
	s.put(1002, &metaScanner{rows: row(), touched: time.Now()})
	if _, ok := s.open[1001]; ok {
		t.Fatal("an expired scanner stayed when another was opened")
	}
}

func TestMetaOrder(t *testing.T) {
	keys := [][]byte{[]byte("t,,1.x."), []byte("t,a,2.x."), []byte("t,a\x00,3.x."), []byte("t,b,1.x."), []byte("t2,,1.x."), []byte("t")}
	got := slices.Clone(keys)
	rand.Shuffle(len(got), func(i, j int) { got[i], got[j] = got[j], got[i] })
	slices.SortFunc(got, compareMetaKeys)
	want := [][]byte{[]byte("t"), []byte("t,,1.x."), []byte("t,a,2.x."), []byte("t,a\x00,3.x."), []byte("t,b,1.x."), []byte("t2,,1.x.")}
	for i := range want {
		if !bytes.Equal(got[i], want[i]) {
			t.Fatalf("order %q, want %q", got, want)
		}
	}
	// The client's locating scan: reversed from "t,b5,99999999999999" down to "t,,".
	sc := &hb.Scan{StartRow: []byte("t,b5,99999999999999"), StopRow: []byte("t,,"), IncludeStopRow: proto.Bool(true), Reversed: proto.Bool(true)}
	var in []string
	for _, k := range want {
		if metaInRange(k, sc) {
			in = append(in, string(k))
		}
	}
	if !slices.Equal(in, []string{"t,,1.x.", "t,a,2.x.", "t,a\x00,3.x.", "t,b,1.x."}) {
		t.Fatalf("in the locating scan: %q", in)
	}
}

func TestJavaDuration(t *testing.T) {
	for ms, want := range map[int64]string{5: "5ms", 1500: "1sec, 500ms", 61_000: "1mins, 1sec, 0ms", 0: "100ms"} {
		if got := javaDuration(ms); got != want {
			t.Errorf("%d ms: %q, want %q", ms, got, want)
		}
	}
}

// ---- the protocol over a real socket ----

type fakeBackend struct{}

func (fakeBackend) ClusterID() string { return "test-cluster" }

func (fakeBackend) SlowCall() time.Duration { return 0 }
func (fakeBackend) Self() *pb.ServerName {
	return &pb.ServerName{Host: "127.0.0.1", Port: 1, StartCode: 7}
}
func (fakeBackend) Region(t *pb.TableName, id uint64, replica int32) (string, bool) {
	return "r1", t.GetName() == "t" && id == 1 && replica == 0
}
func (fakeBackend) Master(context.Context, func(context.Context, pb.MasterClient) error) error {
	return errors.New("no master in this test")
}
func (fakeBackend) Online(name string) bool { return name == "r1" }

// startServer runs an rpc.Server whose only handler answers gets with one cell, with the adapter.
func startServer(t *testing.T) string { return startServerOf(t, fakeBackend{}, nil) }

func startServerOf(t testing.TB, b Backend, auth *security.Authenticator) string {
	return startServerTLS(t, b, auth, nil)
}

func startServerTLS(t testing.TB, b Backend, auth *security.Authenticator, certs *security.Certs) string {
	t.Helper()
	return startServerLogged(t, b, auth, certs, nil)
}

func startServerLogged(t testing.TB, b Backend, auth *security.Authenticator, certs *security.Certs, log *slog.Logger) string {
	t.Helper()
	return serveOptions(t, regionOneGets(), rpc.ServerOptions{Foreign: New(b, log), Auth: auth, TLS: certs})
}

// regionOneGets serves gets of region r1, each answering one cell.
func regionOneGets() map[uint32]rpc.Handler {
	return map[uint32]rpc.Handler{uint32(pb.Method_METHOD_GET): func(_ context.Context, c *rpc.Call) {
		req, err := rpc.Request[pb.GetRequest](c)
		if err != nil || req.GetRegion().GetName() != "r1" {
			c.Fail(&pb.ErrorDetail{Code: pb.ErrorCode_ERROR_CODE_INVALID_ARGUMENT, Message: "bad request"})
			return
		}
		c.Reply(&pb.GetResponse{Result: &pb.Result{CellCount: 1}}, cell.AppendKeyValue(nil, req.GetGet().GetRow(), []byte("f"), []byte("q"), 5, cell.Put, []byte("v")))
	}}
}

// serveHandlers runs an rpc.Server of these handlers with the adapter over fakeBackend and
// answers its address.
func serveHandlers(t *testing.T, handlers map[uint32]rpc.Handler) string {
	return serveOptions(t, handlers, rpc.ServerOptions{Foreign: New(fakeBackend{}, nil)})
}

// serveOptions runs an rpc.Server of these handlers with these options, a 1 MiB request limit
// and (unless the options set one) a 5 s read timeout, and answers its address.
func serveOptions(t testing.TB, handlers map[uint32]rpc.Handler, opts rpc.ServerOptions) string {
	t.Helper()
	opts.MaxFrame = 1 << 20
	if opts.ReadTimeout == 0 {
		opts.ReadTimeout = 5 * time.Second
	}
	srv := rpc.NewServer(handlers, opts)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(func() { srv.Close() })
	return lis.Addr().String()
}

type client struct {
	t  testing.TB
	nc net.Conn
	r  *bufio.Reader
	id uint32
}

func dial(t testing.TB, addr string) *client {
	t.Helper()
	nc, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { nc.Close() })
	_ = nc.SetDeadline(time.Now().Add(10 * time.Second))
	return &client{t: t, nc: nc, r: bufio.NewReader(nc)}
}

func frame(b []byte) []byte { return append(binary.BigEndian.AppendUint32(nil, uint32(len(b))), b...) }

func (c *client) hello(service string) {
	c.t.Helper()
	h, _ := proto.Marshal(&hb.ConnectionHeader{UserInfo: &hb.UserInformation{EffectiveUser: proto.String("alice")}, ServiceName: proto.String(service),
		CellBlockCodecClass: proto.String("org.apache.hadoop.hbase.codec.KeyValueCodec")})
	if _, err := c.nc.Write(append([]byte("HBas\x00\x50"), frame(h)...)); err != nil {
		c.t.Fatal(err)
	}
}

// call sends a request and reads its answer: the header and the message bytes and cell block.
func (c *client) call(method string, req proto.Message, cells []byte) (*hb.ResponseHeader, []byte, []byte) {
	c.t.Helper()
	c.id++
	h := &hb.RequestHeader{CallId: proto.Uint32(c.id), MethodName: proto.String(method), RequestParam: proto.Bool(true)}
	if len(cells) > 0 {
		h.CellBlockMeta = &hb.CellBlockMeta{Length: proto.Uint32(uint32(len(cells)))}
	}
	hbytes, _ := proto.Marshal(h)
	body, _ := proto.Marshal(req)
	if _, err := c.nc.Write(frame(append(appendDelimited(appendDelimited(nil, hbytes), body), cells...))); err != nil {
		c.t.Fatal(err)
	}
	return c.read()
}

func (c *client) read() (*hb.ResponseHeader, []byte, []byte) {
	c.t.Helper()
	buf, err := readFrame(c.r, nil, 16<<20)
	if err != nil {
		c.t.Fatalf("reading an answer: %v", err)
	}
	hbytes, rest, err := splitDelimited(buf)
	if err != nil {
		c.t.Fatal(err)
	}
	var h hb.ResponseHeader
	if err := proto.Unmarshal(hbytes, &h); err != nil {
		c.t.Fatal(err)
	}
	if h.GetException() != nil {
		return &h, nil, nil
	}
	msg, rest, err := splitDelimited(rest)
	if err != nil {
		c.t.Fatal(err)
	}
	return &h, msg, rest
}

// closed reports whether the server closed the connection (after any answers).
func (c *client) closed() bool {
	_ = c.nc.SetReadDeadline(time.Now().Add(5 * time.Second))
	_, err := io.ReadAll(c.r)
	return err == nil
}

func TestProtocol(t *testing.T) {
	addr := startServer(t)

	// The registry preamble answers the cluster id.
	c := dial(t, addr)
	if _, err := c.nc.Write([]byte("Regist")); err != nil {
		t.Fatal(err)
	}
	_, msg, _ := c.read()
	var reg hb.GetConnectionRegistryResponse
	if err := proto.Unmarshal(msg, &reg); err != nil || reg.GetClusterId() != "test-cluster" {
		t.Fatalf("registry preamble: %v %v", reg.GetClusterId(), err)
	}

	// ClientMetaService.
	c = dial(t, addr)
	c.hello("ClientMetaService")
	_, msg, _ = c.call("GetMetaRegionLocations", &hb.GetMetaRegionLocationsRequest{}, nil)
	var locs hb.GetMetaRegionLocationsResponse
	if err := proto.Unmarshal(msg, &locs); err != nil || len(locs.GetMetaLocations()) != 1 ||
		string(locs.GetMetaLocations()[0].GetRegionInfo().GetTableName().GetQualifier()) != "meta" {
		t.Fatalf("meta locations: %v %v", &locs, err)
	}
	h, _, _ := c.call("NoSuchMethod", &hb.GetClusterIdRequest{}, nil)
	if h.GetException().GetExceptionClassName() != classUnknownProtocol {
		t.Fatalf("unknown method: %v", h)
	}

	// ClientService through the region server's handler, cells converted both ways.
	c = dial(t, addr)
	c.hello("ClientService")
	region := &hb.RegionSpecifier{Type: hb.RegionSpecifier_REGION_NAME.Enum(), Value: regionName(&pb.TableName{Namespace: "default", Name: "t"}, nil, 1, 0)}
	_, msg, cells := c.call("Get", &hb.GetRequest{Region: region, Get: &hb.Get{Row: []byte("row")}}, nil)
	var get hb.GetResponse
	if err := proto.Unmarshal(msg, &get); err != nil || get.GetResult().GetAssociatedCellCount() != 1 {
		t.Fatalf("get: %v %v", &get, err)
	}
	if l := binary.BigEndian.Uint32(cells); int(l) != len(cells)-4 || !bytes.Contains(cells, []byte("row")) {
		t.Fatalf("cell block %x", cells)
	}
	other := &hb.RegionSpecifier{Type: hb.RegionSpecifier_REGION_NAME.Enum(), Value: regionName(&pb.TableName{Namespace: "default", Name: "t"}, nil, 2, 0)}
	h, _, _ = c.call("Get", &hb.GetRequest{Region: other, Get: &hb.Get{Row: []byte("row")}}, nil)
	if h.GetException().GetExceptionClassName() != classNotServingRegion {
		t.Fatalf("a region not here: %v", h)
	}
	h, _, _ = c.call("Get", &hb.GetRequest{Region: region, Get: &hb.Get{Row: []byte("row"),
		Filter: &hb.Filter{Name: proto.String("org.example.MyFilter")}}}, nil)
	if e := h.GetException(); e.GetExceptionClassName() != classDoNotRetry || !strings.Contains(e.GetStackTrace(), "org.example.MyFilter is not supported") {
		t.Fatalf("an unknown filter: %v", h)
	}
	// A mutation whose cells overrun the block is refused, and the connection goes on.
	h, _, _ = c.call("Mutate", &hb.MutateRequest{Region: region, Mutation: &hb.MutationProto{Row: []byte("r"), MutateType: hb.MutationProto_PUT.Enum(),
		AssociatedCellCount: proto.Int32(3)}}, []byte{0, 0, 0, 1, 9})
	if h.GetException().GetExceptionClassName() != classDoNotRetry {
		t.Fatalf("a short cell block: %v", h)
	}
	if _, msg, _ = c.call("Get", &hb.GetRequest{Region: region, Get: &hb.Get{Row: []byte("row")}}, nil); msg == nil {
		t.Fatal("the connection did not go on after a refused request")
	}
	// Coprocessor services: an unknown one, an interpreter and a request that cannot be served
	// are refused, saying why.
	exec := func(service, method string, req proto.Message) *hb.ResponseHeader {
		b, _ := proto.Marshal(req)
		if b == nil {
			b = []byte{}
		}
		h, _, _ := c.call("ExecService", &hb.CoprocessorServiceRequest{Region: region, Call: &hb.CoprocessorServiceCall{
			Row: []byte("row"), ServiceName: proto.String(service), MethodName: proto.String(method), Request: b}}, nil)
		return h
	}
	if h := exec("AccessControlService", "Grant", &hb.GetRequest{}); h.GetException().GetExceptionClassName() != classUnknownProtocol {
		t.Fatalf("an unknown coprocessor service: %v", h)
	}
	agg := &hb.AggregateRequest{InterpreterClassName: proto.String("org.apache.hadoop.hbase.client.coprocessor.BigDecimalColumnInterpreter"),
		Scan: &hb.Scan{Column: []*hb.Column{{Family: []byte("f")}}}}
	if h := exec("AggregateService", "GetSum", agg); !strings.Contains(h.GetException().GetStackTrace(), "LongColumnInterpreter or DoubleColumnInterpreter") {
		t.Fatalf("an unknown interpreter: %v", h)
	}
	agg.InterpreterClassName = proto.String("org.apache.hadoop.hbase.client.coprocessor.LongColumnInterpreter")
	if h := exec("AggregateService", "GetMode", agg); h.GetException().GetExceptionClassName() != classUnknownProtocol {
		t.Fatalf("an unknown aggregate method: %v", h)
	}
	if h := exec("hbase.pb.MultiRowMutationService", "MutateRows", &hb.GetRequest{Region: region}); h.GetException() == nil {
		t.Fatalf("a MutateRows request that is not one: %v", h)
	}
}

// TestHostileConnections: bad preambles, codecs, authentication methods, oversized and
// malformed frames and random bytes get an exception or a closed connection, never a crash, and
// the server goes on serving.
func TestHostileConnections(t *testing.T) {
	addr := startServer(t)
	fatal := func(what string, send []byte, class string) {
		t.Helper()
		c := dial(t, addr)
		if _, err := c.nc.Write(send); err != nil {
			t.Fatal(err)
		}
		h, _, _ := c.read()
		if h.GetException().GetExceptionClassName() != class {
			t.Fatalf("%s: %v, want %s", what, h, class)
		}
		if !c.closed() {
			t.Fatalf("%s: the connection stayed open", what)
		}
	}
	fatal("version 1", []byte("HBas\x01\x50"), classFatalConnection)
	fatal("Kerberos", []byte("HBas\x00\x51"), classBadAuth)
	fatal("security preamble", []byte("Securi"), classFatalConnection)
	h, _ := proto.Marshal(&hb.ConnectionHeader{ServiceName: proto.String("ClientService"), CellBlockCodecClass: proto.String("my.Codec")})
	fatal("unknown codec", append([]byte("HBas\x00\x50"), frame(h)...), classUnsupportedCellCodec)
	h, _ = proto.Marshal(&hb.ConnectionHeader{ServiceName: proto.String("ClientService"), CellBlockCompressorClass: proto.String("gz")})
	fatal("compression", append([]byte("HBas\x00\x50"), frame(h)...), classUnsupportedCompression)
	hello, _ := proto.Marshal(&hb.ConnectionHeader{ServiceName: proto.String("ClientService")})
	fatal("oversized frame", append(append([]byte("HBas\x00\x50"), frame(hello)...), 0x7f, 0xff, 0xff, 0xff), classDoNotRetry)
	// An oversized request whose header came with its length is answered on its call id, as
	// HBase's server does (the client fails that call; an answer on the connection's id it skips,
	// and sends the whole request again on a new connection).
	{
		c := dial(t, addr)
		c.hello("ClientService")
		hdr, _ := proto.Marshal(&hb.RequestHeader{CallId: proto.Uint32(7), MethodName: proto.String("Multi"), RequestParam: proto.Bool(true)})
		big := append(binary.BigEndian.AppendUint32(nil, 2<<20), appendDelimited(nil, hdr)...)
		if _, err := c.nc.Write(big); err != nil {
			t.Fatal(err)
		}
		h, _, _ := c.read()
		if h.GetCallId() != 7 || h.GetException().GetExceptionClassName() != classRequestTooBig || !h.GetException().GetDoNotRetry() {
			t.Errorf("oversized request with its header: %v, want call 7 answered %s", h, classRequestTooBig)
		}
		if !c.closed() {
			t.Error("the connection stayed open after an oversized request")
		}
	}
	fatal("a header that is not protobuf", append(append([]byte("HBas\x00\x50"), frame(hello)...), frame([]byte{5, 0xff, 0xff, 0xff, 0xff, 0xff})...), classFatalConnection)

	// Random bytes after a good connection header: answered or closed, nothing else.
	rng := rand.New(rand.NewPCG(3, 4))
	for i := range 200 {
		c := dial(t, addr)
		junk := make([]byte, rng.IntN(300))
		for j := range junk {
			junk[j] = byte(rng.UintN(256))
		}
		if i%2 == 0 && len(junk) >= 4 { // a plausible length so the body is read
			binary.BigEndian.PutUint32(junk, uint32(len(junk)-4))
		}
		_, _ = c.nc.Write(append(append([]byte("HBas\x00\x50"), frame(hello)...), junk...))
		_ = c.nc.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
		_, _ = io.Copy(io.Discard, c.r)
		c.nc.Close()
	}
	// Still serving.
	c := dial(t, addr)
	c.hello("ClientService")
	region := &hb.RegionSpecifier{Type: hb.RegionSpecifier_REGION_NAME.Enum(), Value: regionName(&pb.TableName{Namespace: "default", Name: "t"}, nil, 1, 0)}
	if _, msg, _ := c.call("Get", &hb.GetRequest{Region: region, Get: &hb.Get{Row: []byte("row")}}, nil); msg == nil {
		t.Fatal("no answer after the hostile connections")
	}
}

// An HBase client that announces a request as large as the server's queue and sends a few bytes
// of it does not stop another client's calls (the queue admits a request's bytes as they arrive).
func TestDribbledRequestDoesNotHoldOtherClients(t *testing.T) {
	addr := serveOptions(t, regionOneGets(), rpc.ServerOptions{Foreign: New(fakeBackend{}, nil), MaxQueuedBytes: 1 << 20, ReadTimeout: time.Minute})
	dribbler := dial(t, addr)
	dribbler.hello("ClientService")
	if _, err := dribbler.nc.Write(append(binary.BigEndian.AppendUint32(nil, 1<<20-16), 0, 1, 2, 3, 4, 5, 6, 7)); err != nil {
		t.Fatal(err)
	}
	c := dial(t, addr) // (its calls fail past its 10 s deadline)
	c.hello("ClientService")
	region := &hb.RegionSpecifier{Type: hb.RegionSpecifier_REGION_NAME.Enum(), Value: regionName(&pb.TableName{Namespace: "default", Name: "t"}, nil, 1, 0)}
	for i := range 20 {
		if _, msg, _ := c.call("Get", &hb.GetRequest{Region: region, Get: &hb.Get{Row: []byte("row")}}, nil); msg == nil {
			t.Fatalf("get %d beside the dribbler: no answer", i)
		}
	}
}

// With security on, an HBase client that proves no user (plaintext, no client certificate) is
// refused at its connection header, told which client settings give it TLS.
func TestSecureServerRefusesAnonymousHBaseClients(t *testing.T) {
	addr := startServerOf(t, fakeBackend{}, &security.Authenticator{Required: true})
	c := dial(t, addr)
	c.hello("ClientService")
	h, _, _ := c.read()
	if e := h.GetException(); e.GetExceptionClassName() != classAccessDenied || !strings.Contains(e.GetStackTrace(), "hbase.client.netty.tls.enabled") {
		t.Fatalf("a secure server answered %v", h)
	}
	if !c.closed() {
		t.Fatal("the connection stayed open")
	}
}

// A port that serves TLS refuses an HBase client that does not start TLS with an answer it can
// read (in plaintext), naming the settings, also with security off; a TLS client is served.
func TestTLSPortRefusesPlaintextHBaseClients(t *testing.T) {
	ca, caIssued, err := security.NewCA("test-ca", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	srv, err := ca.Issue(security.Request{CommonName: "server", IPs: []net.IP{net.IPv4(127, 0, 0, 1)}, Server: true, Client: true, Validity: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	certs, err := security.CertsFromPEM(srv.CertPEM, srv.KeyPEM, caIssued.CertPEM)
	if err != nil {
		t.Fatal(err)
	}
	addr := startServerTLS(t, fakeBackend{}, nil, certs)
	c := dial(t, addr)
	c.hello("ClientService")
	h, _, _ := c.read()
	if e := h.GetException(); e.GetExceptionClassName() != classAccessDenied || !strings.Contains(e.GetStackTrace(), "TLS only") ||
		!strings.Contains(e.GetStackTrace(), "hbase.client.netty.tls.enabled") {
		t.Fatalf("a TLS port answered a plaintext client %v", h)
	}
	if !c.closed() {
		t.Fatal("the connection stayed open")
	}
	// Over TLS the same client is served.
	tc, err := tls.Dial("tcp", addr, certs.ClientConfig("127.0.0.1"))
	if err != nil {
		t.Fatal(err)
	}
	c = &client{t: t, nc: tc, r: bufio.NewReader(tc)}
	defer tc.Close()
	c.hello("ClientService")
	region := &hb.RegionSpecifier{Type: hb.RegionSpecifier_REGION_NAME.Enum(), Value: regionName(&pb.TableName{Namespace: "default", Name: "t"}, nil, 1, 0)}
	if h, msg, _ := c.call("Get", &hb.GetRequest{Region: region, Get: &hb.Get{Row: []byte("row")}}, nil); msg == nil {
		t.Fatalf("no answer over TLS: %v", h)
	}
}

// Engine errors reach the HBase client as the exceptions it reacts to: those it must retry
// elsewhere (after looking the region up again) are not DoNotRetry.
func TestFromDetail(t *testing.T) {
	for code, want := range map[pb.ErrorCode]struct {
		class      string
		doNotRetry bool
	}{
		pb.ErrorCode_ERROR_CODE_NOT_SERVING_REGION: {classNotServingRegion, false},
		pb.ErrorCode_ERROR_CODE_SERVER_STOPPING:    {classNotServingRegion, false},
		pb.ErrorCode_ERROR_CODE_LEASE_EXPIRED:      {classNotServingRegion, false},
		pb.ErrorCode_ERROR_CODE_REGION_OPENING:     {classRegionOpening, false},
		pb.ErrorCode_ERROR_CODE_TOO_BUSY:           {classRegionTooBusy, false},
		pb.ErrorCode_ERROR_CODE_UNKNOWN_SCANNER:    {classUnknownScanner, true},
		pb.ErrorCode_ERROR_CODE_ACCESS_DENIED:      {classAccessDenied, true},
		pb.ErrorCode_ERROR_CODE_TABLE_NOT_FOUND:    {classTableNotFound, true},
	} {
		e := fromDetail(&pb.ErrorDetail{Code: code, Message: "m"})
		if e.class != want.class || e.doNotRetry != want.doNotRetry {
			t.Errorf("%v: %s (doNotRetry %v), want %s (%v)", code, e.class, e.doNotRetry, want.class, want.doNotRetry)
		}
	}
	// Preconditions the master says pass by themselves are retried by the client; the others not.
	for _, c := range []struct {
		d          *pb.ErrorDetail
		doNotRetry bool
	}{
		{&pb.ErrorDetail{Code: pb.ErrorCode_ERROR_CODE_FAILED_PRECONDITION, Retryable: true}, false},
		{&pb.ErrorDetail{Code: pb.ErrorCode_ERROR_CODE_FAILED_PRECONDITION}, true},
		{&pb.ErrorDetail{Code: pb.ErrorCode_ERROR_CODE_TABLE_EXISTS, Retryable: true}, false},
		{&pb.ErrorDetail{Code: pb.ErrorCode_ERROR_CODE_TABLE_EXISTS}, true},
	} {
		if e := fromDetail(c.d); e.doNotRetry != c.doNotRetry {
			t.Errorf("%v: %s (doNotRetry %v), want doNotRetry %v", c.d, e.class, e.doNotRetry, c.doNotRetry)
		}
	}
	// REGION_MOVED in the form the client parses, with the location's sequence number (which it
	// must find above the one it holds to take the hint).
	e := fromDetail(&pb.ErrorDetail{Code: pb.ErrorCode_ERROR_CODE_REGION_MOVED, NewLocationSeq: 7,
		NewLocation: &pb.ServerName{Host: "rs-1", Port: 16020, StartCode: 42}})
	if want := "Region moved to: hostname=rs-1 port=16020 startCode=42. As of locationSeqNum=7."; e.class != classRegionMoved || e.msg != want {
		t.Errorf("REGION_MOVED: %s %q, want %s %q", e.class, e.msg, classRegionMoved, want)
	}
	// THROTTLED names the quota's type as RpcThrottlingException's message does: the client parses
	// the type and the wait from it.
	for tt, want := range map[pb.ThrottleType]string{
		pb.ThrottleType_THROTTLE_TYPE_REQUEST_NUMBER: "number of requests exceeded - wait 1sec, 500ms",
		pb.ThrottleType_THROTTLE_TYPE_READ_SIZE:      "read size limit exceeded - wait 1sec, 500ms",
		pb.ThrottleType_THROTTLE_TYPE_WRITE_NUMBER:   "number of write requests exceeded - wait 1sec, 500ms",
	} {
		e := fromDetail(&pb.ErrorDetail{Code: pb.ErrorCode_ERROR_CODE_THROTTLED, ThrottleType: tt, RetryAfterMs: 1500})
		if e.class != classThrottling || e.msg != want {
			t.Errorf("THROTTLED %s: %s %q, want %s %q", tt, e.class, e.msg, classThrottling, want)
		}
	}
}

// IN_MEMORY_COMPACTION travels both ways (HBase's MemoryCompactionPolicy names); ADAPTIVE and
// unknown policies are refused, and the default is left out of a described family as HBase does.
func TestFamilyInMemoryCompaction(t *testing.T) {
	schema := func(v string) *hb.ColumnFamilySchema {
		return &hb.ColumnFamilySchema{Name: []byte("f"), Attributes: []*hb.BytesBytesPair{pair("IN_MEMORY_COMPACTION", v)}}
	}
	fd, err := familyDescriptor(schema("eager"))
	if err != nil || fd.GetInMemoryCompaction() != pb.InMemoryCompaction_IN_MEMORY_COMPACTION_EAGER {
		t.Fatalf("EAGER: %v %v", fd, err)
	}
	if back := familySchema(fd); !slices.ContainsFunc(back.GetAttributes(), func(p *hb.BytesBytesPair) bool {
		return string(p.GetFirst()) == "IN_MEMORY_COMPACTION" && string(p.GetSecond()) == "EAGER"
	}) {
		t.Fatalf("described back as %v", back.GetAttributes())
	}
	for _, v := range []string{"ADAPTIVE", "LAZY"} {
		if _, err := familyDescriptor(schema(v)); err == nil || !strings.Contains(err.Error(), "NONE, BASIC or EAGER") {
			t.Fatalf("%s: %v", v, err)
		}
	}
	fd.InMemoryCompaction = pb.InMemoryCompaction_IN_MEMORY_COMPACTION_NONE
	for _, p := range familySchema(fd).GetAttributes() {
		if string(p.GetFirst()) == "IN_MEMORY_COMPACTION" {
			t.Fatal("NONE described")
		}
	}
}

// Settings Cellstore does not have are refused when they ask for something (HBase's defaults
// pass): accepted and ignored, SPLIT_ENABLED => false left a table splitting.
func TestUnsupportedDescriptorSettingsAreRefused(t *testing.T) {
	table := func(k, v string) *hb.TableSchema {
		return &hb.TableSchema{TableName: &hb.TableName{Namespace: []byte("default"), Qualifier: []byte("t")},
			Attributes: []*hb.BytesBytesPair{pair(k, v)}, ColumnFamilies: []*hb.ColumnFamilySchema{{Name: []byte("f")}}}
	}
	for _, k := range []string{"SPLIT_ENABLED", "MERGE_ENABLED", "COMPACTION_ENABLED"} {
		if _, err := tableDescriptor(table(k, "false")); err == nil {
			t.Errorf("%s => false accepted", k)
		}
		if _, err := tableDescriptor(table(k, "true")); err != nil {
			t.Errorf("%s => true: %v", k, err)
		}
	}
	family := func(k, v string) *hb.ColumnFamilySchema {
		return &hb.ColumnFamilySchema{Name: []byte("f"), Attributes: []*hb.BytesBytesPair{pair(k, v)}}
	}
	for _, c := range []struct {
		k, v string
		ok   bool
	}{
		{"BLOOMFILTER", "ROW", true}, {"BLOOMFILTER", "ROWPREFIX_FIXED_LENGTH", false},
		{"REPLICATION_SCOPE", "0", true}, {"REPLICATION_SCOPE", "1", false},
		{"NEW_VERSION_BEHAVIOR", "false", true}, {"NEW_VERSION_BEHAVIOR", "true", false},
		{"IS_MOB", "true", false},
	} {
		if _, err := familyDescriptor(family(c.k, c.v)); (err == nil) != c.ok {
			t.Errorf("%s => %s: %v", c.k, c.v, err)
		}
	}
}

// slowBackend finds every call slow.
type slowBackend struct{ fakeBackend }

func (slowBackend) SlowCall() time.Duration { return time.Nanosecond }

// lockedBuffer is a log destination written by the server's goroutines and read by the test.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// A call that takes the backend's slow-call threshold or longer, from its request read to its
// answer written, is logged with its method and the exception it was answered with.
func TestSlowCallsAreLogged(t *testing.T) {
	var out lockedBuffer
	addr := startServerLogged(t, slowBackend{}, nil, nil, slog.New(slog.NewTextHandler(&out, nil)))
	c := dial(t, addr)
	c.hello("ClientMetaService")
	c.call("GetMetaRegionLocations", &hb.GetMetaRegionLocationsRequest{}, nil)
	if h, _, _ := c.call("NoSuchMethod", &hb.GetClusterIdRequest{}, nil); h.GetException() == nil {
		t.Fatal("an unknown method was answered")
	}
	want := []string{"method=GetMetaRegionLocations", "method=NoSuchMethod", "exception=" + classUnknownProtocol}
	deadline := time.Now().Add(5 * time.Second) // the answer is written before the log line
	for {
		logged := out.String()
		missing := ""
		for _, w := range want {
			if !strings.Contains(logged, w) {
				missing = w
			}
		}
		if missing == "" && strings.Count(logged, `msg="slow call" protocol=hbase`) == 2 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("no slow call logged with %s:\n%s", missing, logged)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// recordingMulti serves MULTI calls of one region action as a region server does (a result per
// action, the region action not processed) and keeps the region action it was sent in got.
func recordingMulti(got *atomic.Pointer[pb.RegionAction]) map[uint32]rpc.Handler {
	return map[uint32]rpc.Handler{uint32(pb.Method_METHOD_MULTI): func(_ context.Context, c *rpc.Call) {
		req, err := rpc.Request[pb.MultiRequest](c)
		if err != nil || len(req.GetRegionActions()) != 1 {
			c.Fail(&pb.ErrorDetail{Code: pb.ErrorCode_ERROR_CODE_INVALID_ARGUMENT, Message: "bad request"})
			return
		}
		ra := req.GetRegionActions()[0]
		got.Store(ra)
		rar := &pb.RegionActionResult{}
		for _, a := range ra.GetActions() {
			rar.Results = append(rar.Results, &pb.ResultOrException{Index: a.GetIndex(), Result: &pb.Result{}})
		}
		c.Reply(&pb.MultiResponse{Results: []*pb.RegionActionResult{rar}})
	}}
}

// clientOfRegion connects an HBase client (ClientService) to a server of these handlers and gives
// region 1 of table t and a cell block of one cell of row.
func clientOfRegion(t *testing.T, handlers map[uint32]rpc.Handler, row string) (*client, *hb.RegionSpecifier, []byte) {
	t.Helper()
	c := dial(t, serveHandlers(t, handlers))
	c.hello("ClientService")
	region := &hb.RegionSpecifier{Type: hb.RegionSpecifier_REGION_NAME.Enum(), Value: regionName(&pb.TableName{Namespace: "default", Name: "t"}, nil, 1, 0)}
	kv := cell.AppendKeyValue(nil, []byte(row), []byte("f"), []byte("q"), 5, cell.Put, []byte("v"))
	return c, region, append(binary.BigEndian.AppendUint32(nil, uint32(len(kv))), kv...)
}

// TestMultiCarriesWritePressure: the write pressure a region server reports with a multi's region
// action reaches HBase's clients as the answer's region statistics (what their backoff reads when
// hbase.client.backpressure.enabled), for that region; none when none is reported.
func TestMultiCarriesWritePressure(t *testing.T) {
	var percent atomic.Uint32
	handlers := map[uint32]rpc.Handler{uint32(pb.Method_METHOD_MULTI): func(_ context.Context, c *rpc.Call) {
		req, err := rpc.Request[pb.MultiRequest](c)
		if err != nil || len(req.GetRegionActions()) != 1 {
			c.Fail(&pb.ErrorDetail{Code: pb.ErrorCode_ERROR_CODE_INVALID_ARGUMENT, Message: "bad request"})
			return
		}
		rar := &pb.RegionActionResult{Results: []*pb.ResultOrException{{Index: 0, Result: &pb.Result{}}}}
		if p := percent.Load(); p > 0 {
			rar.Pressure = &pb.WritePressure{Percent: p}
		}
		c.Reply(&pb.MultiResponse{Results: []*pb.RegionActionResult{rar}})
	}}
	c, region, block := clientOfRegion(t, handlers, "row")
	multi := func() *hb.MultiResponse {
		t.Helper()
		req := &hb.MultiRequest{RegionAction: []*hb.RegionAction{{Region: region, Action: []*hb.Action{{Index: proto.Uint32(0),
			Mutation: &hb.MutationProto{Row: []byte("row"), MutateType: hb.MutationProto_PUT.Enum(), AssociatedCellCount: proto.Int32(1)}}}}}}
		h, msg, _ := c.call("Multi", req, block)
		var resp hb.MultiResponse
		if h.GetException() != nil || proto.Unmarshal(msg, &resp) != nil || len(resp.GetRegionActionResult()) != 1 {
			t.Fatalf("multi: %v %v", h, &resp)
		}
		return &resp
	}
	if st := multi().GetRegionStatistics(); st != nil {
		t.Fatalf("region statistics with no pressure: %v", st)
	}
	percent.Store(42)
	st := multi().GetRegionStatistics()
	if len(st.GetRegion()) != 1 || len(st.GetStat()) != 1 || !bytes.Equal(st.GetRegion()[0].GetValue(), region.GetValue()) || st.GetStat()[0].GetMemStoreLoad() != 42 {
		t.Fatalf("region statistics with 42 %% pressure: %v", st)
	}
}

// Clients before HBase 2.4 send a conditional RowMutations with the condition on the MultiRequest
// and read whether it applied from the answer's processed: the condition goes with the region
// action (it was dropped, and the mutations applied whatever the cell held).
func TestMultiRequestConditionOfOlderClients(t *testing.T) {
	var got atomic.Pointer[pb.RegionAction]
	handlers := recordingMulti(&got)
	c, region, block := clientOfRegion(t, handlers, "row")
	put := &hb.Action{Mutation: &hb.MutationProto{Row: []byte("row"), MutateType: hb.MutationProto_PUT.Enum(), AssociatedCellCount: proto.Int32(1)}}
	cond := &hb.Condition{Row: []byte("row"), Family: []byte("f"), Qualifier: []byte("q"), CompareType: hb.CompareType_EQUAL.Enum()}
	req := &hb.MultiRequest{RegionAction: []*hb.RegionAction{{Region: region, Atomic: proto.Bool(true), Action: []*hb.Action{put}}}, Condition: cond}
	h, msg, _ := c.call("Multi", req, block)
	var resp hb.MultiResponse
	if h.GetException() != nil || proto.Unmarshal(msg, &resp) != nil {
		t.Fatalf("multi: %v", h)
	}
	ra := got.Load()
	if ra == nil || !ra.GetAtomic() || ra.GetCondition() == nil || string(ra.GetCondition().GetRow()) != "row" {
		t.Fatalf("the region action sent: %v; want it atomic under the request's condition", ra)
	}
	if resp.Processed == nil || resp.GetProcessed() {
		t.Errorf("the answer's processed = %v, want false (the condition failed)", resp.Processed)
	}
	// One answer per action, an index alone: those clients take the outcome from processed only
	// for an action with no result (one with a result has exists unset, which they cannot read).
	if rr := resp.GetRegionActionResult(); len(rr) != 1 || len(rr[0].GetResultOrException()) != 1 || rr[0].GetResultOrException()[0].GetResult() != nil {
		t.Errorf("the region action's answers %v; want one, with no result", rr)
	}
	// A condition over several region actions is refused.
	req.RegionAction = append(req.RegionAction, req.RegionAction[0])
	if h, _, _ := c.call("Multi", req, append(block, block...)); h.GetException() == nil {
		t.Error("a request condition over two region actions was taken")
	}
}

// An action the adapter cannot take (a filter it does not know) fails alone in a batch that is
// not applied as one: the other actions of its region are sent and answered (the whole region's
// actions failed with it).
func TestOneBadActionFailsAlone(t *testing.T) {
	var got atomic.Pointer[pb.RegionAction]
	handlers := recordingMulti(&got)
	c, region, block := clientOfRegion(t, handlers, "r1")
	req := &hb.MultiRequest{RegionAction: []*hb.RegionAction{{Region: region, Action: []*hb.Action{
		{Index: proto.Uint32(0), Get: &hb.Get{Row: []byte("r2"), Filter: &hb.Filter{Name: proto.String("org.example.MyFilter")}}},
		{Index: proto.Uint32(1), Mutation: &hb.MutationProto{Row: []byte("r1"), MutateType: hb.MutationProto_PUT.Enum(), AssociatedCellCount: proto.Int32(1)}},
	}}}}
	h, msg, _ := c.call("Multi", req, block)
	var resp hb.MultiResponse
	if h.GetException() != nil || proto.Unmarshal(msg, &resp) != nil || len(resp.GetRegionActionResult()) != 1 {
		t.Fatalf("multi: %v", h)
	}
	rr := resp.GetRegionActionResult()[0]
	if rr.GetException() != nil {
		t.Fatalf("the region action failed whole: %v", rr.GetException())
	}
	byIndex := map[uint32]*hb.ResultOrException{}
	for _, roe := range rr.GetResultOrException() {
		byIndex[roe.GetIndex()] = roe
	}
	if byIndex[0].GetException() == nil || byIndex[1].GetResult() == nil || byIndex[1].GetException() != nil {
		t.Fatalf("answers %v; want the get failed and the put applied", rr.GetResultOrException())
	}
	if ra := got.Load(); ra == nil || len(ra.GetActions()) != 1 || ra.GetActions()[0].GetMutation() == nil {
		t.Fatalf("sent %v; want the put alone", ra)
	}
}

// A mutation sent as column values makes one cell per value, each repeating the row: a small
// request of a long row and many empty values is refused at the server's request limit, before
// its cells are made, and a normal one goes through.
func TestColumnValuesAreBounded(t *testing.T) {
	var cells atomic.Int32
	handlers := map[uint32]rpc.Handler{uint32(pb.Method_METHOD_MUTATE): func(_ context.Context, c *rpc.Call) {
		req, err := rpc.Request[pb.MutateRequest](c)
		if err != nil {
			c.Fail(&pb.ErrorDetail{Code: pb.ErrorCode_ERROR_CODE_INVALID_ARGUMENT, Message: "bad request"})
			return
		}
		cells.Store(req.GetMutation().GetCellCount())
		c.Reply(&pb.MutateResponse{Processed: true})
	}}
	c := dial(t, serveHandlers(t, handlers))
	c.hello("ClientService")
	region := &hb.RegionSpecifier{Type: hb.RegionSpecifier_REGION_NAME.Enum(), Value: regionName(&pb.TableName{Namespace: "default", Name: "t"}, nil, 1, 0)}
	put := func(row []byte, values int) *hb.MutateRequest {
		cv := &hb.MutationProto_ColumnValue{Family: []byte("f")}
		for range values {
			cv.QualifierValue = append(cv.QualifierValue, &hb.MutationProto_ColumnValue_QualifierValue{})
		}
		return &hb.MutateRequest{Region: region, Mutation: &hb.MutationProto{Row: row, MutateType: hb.MutationProto_PUT.Enum(),
			ColumnValue: []*hb.MutationProto_ColumnValue{cv}}}
	}

	if h, _, _ := c.call("Mutate", put([]byte("row"), 3), nil); h.GetException() != nil || cells.Load() != 3 {
		t.Fatalf("a put of three columns: %v, %d cells arrived", h.GetException(), cells.Load())
	}
	// ~36 KB on the wire, ~64 MB of cells if they were made.
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	h, _, _ := c.call("Mutate", put(bytes.Repeat([]byte("r"), cell.MaxRowLength-1), 2000), nil)
	runtime.ReadMemStats(&after)
	if e := h.GetException(); e.GetExceptionClassName() != classDoNotRetry || !strings.Contains(e.GetStackTrace(), "request limit of 1048576 bytes") {
		t.Fatalf("a long row with 2,000 empty values: %v, want %s naming the limit", e, classDoNotRetry)
	}
	if grew := after.TotalAlloc - before.TotalAlloc; grew > 16<<20 {
		t.Fatalf("refusing it allocated %d MiB", grew>>20)
	}
	h, _, _ = c.call("Mutate", put(bytes.Repeat([]byte("r"), cell.MaxRowLength+1), 1), nil)
	if e := h.GetException(); e.GetExceptionClassName() != classDoNotRetry || !strings.Contains(e.GetStackTrace(), "row of 32768 bytes") {
		t.Fatalf("a row over the limit: %v", e)
	}
	// The connection still serves.
	if h, _, _ := c.call("Mutate", put([]byte("row"), 2), nil); h.GetException() != nil || cells.Load() != 2 {
		t.Fatalf("a put after the refusals: %v, %d cells", h.GetException(), cells.Load())
	}
}

// panickyBackend panics where a missed check would: resolving a region, calling the master.
type panickyBackend struct{ fakeBackend }

func (panickyBackend) Region(*pb.TableName, uint64, int32) (string, bool) {
	var names []string
	return names[3], true
}
func (panickyBackend) Master(context.Context, func(context.Context, pb.MasterClient) error) error {
	panic("a check missed this")
}

// A call whose serving panics is answered with an exception (and logged); the connection and
// the server go on. Without the recovery the test binary itself ends.
func TestPanicsAreAnswered(t *testing.T) {
	addr := startServerOf(t, panickyBackend{}, nil)
	region := &hb.RegionSpecifier{Type: hb.RegionSpecifier_REGION_NAME.Enum(), Value: regionName(&pb.TableName{Namespace: "default", Name: "t"}, nil, 1, 0)}

	c := dial(t, addr)
	c.hello("ClientService")
	h, _, _ := c.call("Get", &hb.GetRequest{Region: region, Get: &hb.Get{Row: []byte("row")}}, nil)
	if e := h.GetException(); e.GetExceptionClassName() != classDoNotRetry || !strings.Contains(e.GetStackTrace(), "internal error serving ClientService.Get") {
		t.Fatalf("a get whose serving panicked: %v", h)
	}
	// The connection goes on: the next call is read and answered.
	h, _, _ = c.call("Get", &hb.GetRequest{Region: region, Get: &hb.Get{Row: []byte("row")}}, nil)
	if h.GetException() == nil {
		t.Fatalf("the second get: %v", h)
	}

	m := dial(t, addr)
	m.hello("MasterService")
	h, _, _ = m.call("GetTableNames", &hb.GetTableNamesRequest{}, nil)
	if e := h.GetException(); !strings.Contains(e.GetStackTrace(), "internal error serving MasterService.GetTableNames") {
		t.Fatalf("a master call whose serving panicked: %v", h)
	}
	if _, msg, _ := m.call("IsMasterRunning", &hb.IsMasterRunningRequest{}, nil); msg == nil {
		t.Fatal("the master connection did not go on")
	}
}

// listingMaster answers ListTables and GetTableRegions with one table "t" of three regions.
type listingMaster struct{ pb.UnimplementedMasterServer }

func (listingMaster) ListTables(context.Context, *pb.ListTablesRequest) (*pb.ListTablesResponse, error) {
	return &pb.ListTablesResponse{Tables: []*pb.TableSummary{{Table: &pb.TableDescriptor{Name: &pb.TableName{Namespace: "default", Name: "t"}}}}}, nil
}

func (listingMaster) GetTableRegions(context.Context, *pb.TableRequest) (*pb.GetTableRegionsResponse, error) {
	var locs []*pb.RegionLocation
	bounds := []string{"", "h", "p", ""}
	for i := range 3 {
		locs = append(locs, &pb.RegionLocation{Region: &pb.RegionInfo{RegionId: uint64(i + 1), Name: fmt.Sprintf("r%d", i+1),
			Table: &pb.TableName{Namespace: "default", Name: "t"}, StartKey: []byte(bounds[i]), EndKey: []byte(bounds[i+1])},
			Server: &pb.ServerName{Host: "127.0.0.1", Port: 1, StartCode: 7}})
	}
	return &pb.GetTableRegionsResponse{Locations: locs}, nil
}

type listingBackend struct {
	fakeBackend
	client pb.MasterClient
}

func (b listingBackend) Master(ctx context.Context, fn func(context.Context, pb.MasterClient) error) error {
	return fn(ctx, b.client)
}

// TestMetaScanOpenAndClose: an hbase:meta scan that opens and closes in one call (HBase 1.x's
// small scans, which its clients locate regions with) answers its rows and keeps no scanner.
func TestMetaScanOpenAndClose(t *testing.T) {
	a := New(listingBackend{client: startMasterServer(t, listingMaster{})}, nil)
	for _, c := range []struct {
		rows uint32
		want int
		more bool
	}{{2, 2, true}, {100, 4, false}} { // the table's state row and its three regions
		resp, _, err := a.metaScan(context.Background(), &hb.ScanRequest{Scan: &hb.Scan{}, NumberOfRows: proto.Uint32(c.rows), CloseScanner: proto.Bool(true)})
		if err != nil {
			t.Fatal(err)
		}
		if len(resp.GetCellsPerResult()) != c.want || resp.GetMoreResultsInRegion() != c.more {
			t.Errorf("open and close for %d rows: %d results, more %v; want %d, %v", c.rows, len(resp.GetCellsPerResult()), resp.GetMoreResultsInRegion(), c.want, c.more)
		}
	}
	a.metaScanners.mu.Lock()
	defer a.metaScanners.mu.Unlock()
	if len(a.metaScanners.open) != 0 {
		t.Fatalf("%d hbase:meta scanners left open", len(a.metaScanners.open))
	}
}

// A connection that keeps asking for the cluster id without ever authenticating is closed at its
// second registry preamble (it held a connection slot for ever, writing "Regist" every read
// timeout; the handshake's deadline now also bounds the preambles and header together).
func TestRegistryPreambleCannotHoldAConnection(t *testing.T) {
	addr := serveOptions(t, regionOneGets(), rpc.ServerOptions{Foreign: New(fakeBackend{}, nil), ReadTimeout: time.Second})
	c := dial(t, addr)
	for i := range 2 {
		if _, err := c.nc.Write([]byte("Regist")); err != nil {
			t.Fatal(err)
		}
		h, msg, _ := c.read()
		var reg hb.GetConnectionRegistryResponse
		answered := h.GetException() == nil && proto.Unmarshal(msg, &reg) == nil && reg.GetClusterId() != ""
		if i == 0 && !answered {
			t.Fatalf("the first registry preamble: %v", h)
		}
		if i == 1 && answered {
			t.Fatal("a second registry preamble on one connection was answered")
		}
	}
	if !c.closed() {
		t.Fatal("the connection stayed open after a second registry preamble")
	}
}
