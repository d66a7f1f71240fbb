package hbase

import (
	"cmp"
	"context"
	"errors"
	"io"
	"net"
	"slices"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/proto"

	pb "github.com/cellstore/cellstore/engine/api/cellstore/v1"
	hb "github.com/cellstore/cellstore/engine/api/hbase/v2"
	"github.com/cellstore/cellstore/engine/cell"
)

// fuzzCall is one method of one service the adapter serves.
type fuzzCall struct{ service, method string }

// fuzzCalls lists every modelled method of every service and ClientService's methods, which are
// served without the table of constructors: the fuzz seeds.
func fuzzCalls() []fuzzCall {
	var calls []fuzzCall
	for service, methods := range hb.Services {
		for method := range methods {
			calls = append(calls, fuzzCall{service, method})
		}
	}
	for _, m := range []string{"Get", "Mutate", "Scan", "Multi", "ExecService"} {
		calls = append(calls, fuzzCall{"ClientService", m})
	}
	slices.SortFunc(calls, func(a, b fuzzCall) int {
		return cmp.Or(cmp.Compare(a.service, b.service), cmp.Compare(a.method, b.method))
	})
	return slices.Compact(calls)
}

// refusingMaster is a backend whose master is a real gRPC server that implements no method: the
// adapter converts a master call's request before it reaches the master.
type refusingMaster struct {
	fakeBackend
	client pb.MasterClient
}

func (b refusingMaster) Master(ctx context.Context, fn func(context.Context, pb.MasterClient) error) error {
	return fn(ctx, b.client)
}

func startRefusingMaster(tb testing.TB) pb.MasterClient {
	tb.Helper()
	return startMasterServer(tb, pb.UnimplementedMasterServer{})
}

// startMasterServer serves m over a real gRPC socket and returns a client of it.
func startMasterServer(tb testing.TB, m pb.MasterServer) pb.MasterClient {
	tb.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	srv := grpc.NewServer()
	pb.RegisterMasterServer(srv, m)
	go func() { _ = srv.Serve(lis) }()
	tb.Cleanup(srv.Stop)
	cc, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { cc.Close() })
	return pb.NewMasterClient(cc)
}

// FuzzHBaseCall sends one call — a service and method of HBase's RPC (each modelled one is a
// seed, with an empty request; six with well-formed requests and cell blocks), arbitrary request
// bytes and cell block — over a real socket to the adapter. Behind it a region server's handler
// answers gets (other data-path methods are refused as unknown) and a real gRPC master refuses
// every call, so what is fuzzed is how the adapter reads and converts requests, not how it
// converts answers. Whatever the bytes, the server answers within 5 s or ends the connection,
// never panics (a panic in any of its goroutines ends the test binary), and goes on serving the
// next connection.
func FuzzHBaseCall(f *testing.F) {
	calls := fuzzCalls()
	region := &hb.RegionSpecifier{Type: hb.RegionSpecifier_REGION_NAME.Enum(), Value: regionName(&pb.TableName{Namespace: "default", Name: "t"}, nil, 1, 0)}
	table := &hb.TableName{Namespace: []byte("default"), Qualifier: []byte("t")}
	kv := cell.AppendKeyValue(nil, []byte("row"), []byte("f"), []byte("q"), 5, cell.Put, []byte("v"))
	block := append([]byte{0, 0, 0, byte(len(kv))}, kv...)
	put := &hb.MutationProto{Row: []byte("row"), MutateType: hb.MutationProto_PUT.Enum(), AssociatedCellCount: proto.Int32(1)}
	scan := &hb.Scan{StartRow: []byte("a"), StopRow: []byte("z"), Column: []*hb.Column{{Family: []byte("f")}},
		Filter: &hb.Filter{Name: proto.String("org.apache.hadoop.hbase.filter.PrefixFilter"), SerializedFilter: mustMarshal(&hb.PrefixFilter{Prefix: []byte("r")})}}
	seeds := map[fuzzCall][]struct {
		req   proto.Message
		cells []byte
	}{
		{"ClientService", "Get"}:    {{&hb.GetRequest{Region: region, Get: &hb.Get{Row: []byte("row"), Column: []*hb.Column{{Family: []byte("f"), Qualifier: [][]byte{[]byte("q")}}}}}, nil}},
		{"ClientService", "Mutate"}: {{&hb.MutateRequest{Region: region, Mutation: put}, block}},
		{"ClientService", "Scan"}:   {{&hb.ScanRequest{Region: region, Scan: scan, NumberOfRows: proto.Uint32(10)}, nil}},
		{"ClientService", "Multi"}: {{&hb.MultiRequest{RegionAction: []*hb.RegionAction{{Region: region, Action: []*hb.Action{
			{Index: proto.Uint32(0), Mutation: put}, {Index: proto.Uint32(1), Get: &hb.Get{Row: []byte("row")}}}}}}, block}},
		{"ClientService", "ExecService"}: {{&hb.CoprocessorServiceRequest{Region: region, Call: &hb.CoprocessorServiceCall{Row: []byte("row"),
			ServiceName: proto.String("AggregateService"), MethodName: proto.String("GetRowNum"),
			Request: mustMarshal(&hb.AggregateRequest{InterpreterClassName: proto.String("org.apache.hadoop.hbase.client.coprocessor.LongColumnInterpreter"), Scan: scan})}}, nil}},
		{"MasterService", "CreateTable"}: {{&hb.CreateTableRequest{TableSchema: &hb.TableSchema{TableName: table,
			ColumnFamilies: []*hb.ColumnFamilySchema{{Name: []byte("f"), Attributes: []*hb.BytesBytesPair{{First: []byte("VERSIONS"), Second: []byte("3")}}}}}}, nil}},
	}
	for _, c := range calls {
		for _, s := range seeds[c] {
			f.Add(c.service, c.method, mustMarshal(s.req), s.cells)
		}
		f.Add(c.service, c.method, []byte{}, []byte(nil))
	}

	addr := startServerOf(f, refusingMaster{client: startRefusingMaster(f)}, nil)
	f.Fuzz(func(t *testing.T, service, method string, param, cells []byte) {
		c := fuzzCall{service, method}
		cl := dial(t, addr)
		cl.hello(c.service)
		h := &hb.RequestHeader{CallId: proto.Uint32(1), MethodName: proto.String(c.method), RequestParam: proto.Bool(true)}
		if len(cells) > 0 {
			h.CellBlockMeta = &hb.CellBlockMeta{Length: proto.Uint32(uint32(len(cells)))}
		}
		hbytes, _ := proto.Marshal(h)
		if _, err := cl.nc.Write(frame(append(appendDelimited(appendDelimited(nil, hbytes), param), cells...))); err != nil {
			return // the server ended the connection after the header: allowed
		}
		// (Go's fuzzing engine gives up on an input after 10 s: fail before, naming the call.)
		_ = cl.nc.SetReadDeadline(time.Now().Add(5 * time.Second))
		if _, err := readFrame(cl.r, nil, 64<<20); err != nil && !errors.Is(err, io.EOF) && !errors.Is(err, io.ErrUnexpectedEOF) {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				t.Fatalf("%s.%s: no answer in 5 s", c.service, c.method)
			}
		}
	})
}

func mustMarshal(m proto.Message) []byte {
	b, err := proto.Marshal(m)
	if err != nil {
		panic(err)
	}
	return b
}
