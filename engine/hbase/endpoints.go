package hbase

import (
	"encoding/binary"
	"math"
	"strings"

	"google.golang.org/protobuf/proto"

	"github.com/cellstore/cellstore/engine/aggregate"
	pb "github.com/cellstore/cellstore/engine/api/cellstore/v1"
	hb "github.com/cellstore/cellstore/engine/api/hbase/v2"
)

// Coprocessor service calls of the stock client (ClientService.ExecService) that Cellstore's
// built-in endpoints serve (docs/endpoints.md): HBase's AggregateService (AggregationClient) and
// MultiRowMutationService. Any other service is refused by name, as a region server without that
// coprocessor refuses it.

const (
	aggregateService        = "AggregateService"
	multiRowMutationService = "MultiRowMutationService"
)

func (a *Adapter) execService(k *call, req *hb.CoprocessorServiceRequest) {
	if isMeta(req.GetRegion()) {
		k.fail(doNotRetry("coprocessor services on hbase:meta are not supported"))
		return
	}
	name, replica, e := a.region(req.GetRegion())
	if e != nil {
		k.fail(e)
		return
	}
	sc := req.GetCall()
	answer := func(javaClass string, m proto.Message) {
		b, err := proto.Marshal(m)
		if err != nil {
			k.fail(doNotRetry("encoding the %s answer: %v", sc.GetServiceName(), err))
			return
		}
		k.reply(&hb.CoprocessorServiceResponse{Region: req.GetRegion(), Value: &hb.NameBytesPair{Name: proto.String(javaClass), Value: b}}, nil)
	}
	// HBase 2 names a service by its short name; older clients sent the full one.
	switch strings.TrimPrefix(sc.GetServiceName(), "hbase.pb.") {
	case aggregateService:
		var ar hb.AggregateRequest
		if err := proto.Unmarshal(sc.GetRequest(), &ar); err != nil {
			k.fail(doNotRetry("bad AggregateRequest: %v", err))
			return
		}
		a.aggregate(k, name, replica, sc.GetMethodName(), &ar, func(resp *hb.AggregateResponse) {
			answer("org.apache.hadoop.hbase.protobuf.generated.AggregateProtos$AggregateResponse", resp)
		})
	case multiRowMutationService:
		if sc.GetMethodName() != "MutateRows" {
			k.fail(&exception{class: classUnknownProtocol, msg: "MultiRowMutationService has no method " + sc.GetMethodName(), doNotRetry: true})
			return
		}
		var mr hb.MutateRowsRequest
		if err := proto.Unmarshal(sc.GetRequest(), &mr); err != nil {
			k.fail(doNotRetry("bad MutateRowsRequest: %v", err))
			return
		}
		a.mutateRows(k, name, &mr, func(resp *hb.MutateRowsResponse) {
			answer("org.apache.hadoop.hbase.protobuf.generated.MultiRowMutationProtos$MutateRowsResponse", resp)
		})
	default:
		k.fail(&exception{class: classUnknownProtocol, msg: "coprocessor service " + sc.GetServiceName() +
			" is not available: Cellstore serves AggregateService and MultiRowMutationService (docs/endpoints.md) and loads no coprocessors", doNotRetry: true})
	}
}

func (a *Adapter) aggregate(k *call, region string, replica int32, method string, req *hb.AggregateRequest, done func(*hb.AggregateResponse)) {
	var vt pb.ValueType
	switch cls := req.GetInterpreterClassName(); {
	case strings.HasSuffix(cls, ".LongColumnInterpreter"):
		vt = pb.ValueType_VALUE_TYPE_LONG
	case strings.HasSuffix(cls, ".DoubleColumnInterpreter"):
		vt = pb.ValueType_VALUE_TYPE_DOUBLE
	default:
		k.fail(doNotRetry("Cellstore's AggregateService reads values with LongColumnInterpreter or DoubleColumnInterpreter, not %q", cls))
		return
	}
	switch method {
	case "GetMax", "GetMin", "GetSum", "GetRowNum", "GetAvg", "GetStd", "GetMedian":
	default:
		k.fail(&exception{class: classUnknownProtocol, msg: "AggregateService has no method " + method, doNotRetry: true})
		return
	}
	scan, err := leanScan(req.GetScan(), replica)
	if err != nil {
		k.fail(fromError(err))
		return
	}
	if len(scan.GetColumns()) > 1 {
		k.fail(doNotRetry("an aggregation reads one column family; the scan names %d", len(scan.GetColumns())))
		return
	}
	weighted := len(scan.GetColumns()) == 1 && len(scan.GetColumns()[0].GetQualifiers()) > 1
	lreq := &pb.AggregateRequest{Region: &pb.RegionSpecifier{Name: region}, Scan: scan, ValueType: vt}
	if k.timeout > 0 {
		lreq.TimeLimitMs = (k.timeout / 4).Milliseconds()
	}
	t := &aggregate.Totals{Type: vt}
	var step func()
	step = func() {
		k.lean(pb.Method_METHOD_AGGREGATE, lreq, nil, func(msg proto.Message, _ [][]byte) {
			r := msg.(*pb.AggregateResponse)
			t.Merge(r)
			if resume := r.GetResumeRow(); len(resume) > 0 {
				// The region's part ran out of its time budget: go on from there (the answer is
				// the region's whole, as HBase's).
				lreq.Scan = proto.CloneOf(lreq.Scan)
				lreq.Scan.StartRow, lreq.Scan.ExcludeStartRow = resume, false
				go step()
				return
			}
			done(hbaseAggregate(method, weighted, t))
		})
	}
	step()
}

// hbaseAggregate encodes a region's totals as AggregateImplementation does: values as LongMsg or
// DoubleMsg (the interpreters' cell and promoted types), counts as 8 bytes; no part when the
// region had no value.
func hbaseAggregate(method string, weighted bool, t *aggregate.Totals) *hb.AggregateResponse {
	enc := func(n aggregate.Number) []byte {
		var b []byte
		if n.Type == pb.ValueType_VALUE_TYPE_DOUBLE {
			b, _ = proto.Marshal(&hb.DoubleMsg{DoubleMsg: proto.Float64(n.Double)})
		} else {
			b, _ = proto.Marshal(&hb.LongMsg{LongMsg: proto.Int64(n.Long)})
		}
		return b
	}
	count := func(n int64) []byte { return binary.BigEndian.AppendUint64(nil, uint64(n)) }
	out := &hb.AggregateResponse{}
	switch method {
	case "GetRowNum":
		out.FirstPart = [][]byte{count(t.Rows)}
		return out
	case "GetMedian":
		// The sum of the values and of the weights; the client scans the region holding the
		// median itself. HBase's interpreters read every cell of the row for both sums (they do
		// not look at the qualifier), so with a weight column both are the same sum; without
		// one it sends the interpreter's minimum value (Long.MIN_VALUE, Double.MIN_VALUE).
		weights := aggregate.Number{Type: t.Type, Long: math.MinInt64, Double: math.SmallestNonzeroFloat64}
		if weighted {
			weights = t.Sum()
		}
		out.FirstPart = [][]byte{enc(t.Sum()), enc(weights)}
		return out
	}
	mn, ok := t.Min()
	if !ok {
		return out
	}
	mx, _ := t.Max()
	switch method {
	case "GetMax":
		out.FirstPart = [][]byte{enc(mx)}
	case "GetMin":
		out.FirstPart = [][]byte{enc(mn)}
	case "GetSum":
		out.FirstPart = [][]byte{enc(t.Sum())}
	case "GetAvg":
		out.FirstPart, out.SecondPart = [][]byte{enc(t.Sum())}, count(t.Rows)
	case "GetStd":
		out.FirstPart, out.SecondPart = [][]byte{enc(t.Sum()), enc(t.SumSquares())}, count(t.Rows)
	}
	return out
}

func (a *Adapter) mutateRows(k *call, region string, req *hb.MutateRowsRequest, done func(*hb.MutateRowsResponse)) {
	ra := &pb.RegionAction{Region: &pb.RegionSpecifier{Name: region}, Atomic: true, MultiRow: true}
	var cells []byte
	rc := newRequestCells(k, nil) // MutateRows carries its mutations' cells in column values
	for i, m := range req.GetMutationRequest() {
		lm, c, err := leanMutation(m, rc)
		if err != nil {
			k.fail(fromError(err))
			return
		}
		ra.Actions = append(ra.Actions, &pb.Action{Index: uint32(i), Mutation: lm})
		cells = append(cells, c...)
	}
	for _, c := range req.GetCondition() {
		lc, err := leanCondition(c)
		if err != nil {
			k.fail(fromError(err))
			return
		}
		ra.Conditions = append(ra.Conditions, lc)
	}
	k.lean(pb.Method_METHOD_MULTI, &pb.MultiRequest{NonceGroup: req.GetNonceGroup(), RegionActions: []*pb.RegionAction{ra}}, cells,
		func(msg proto.Message, _ [][]byte) {
			resp := msg.(*pb.MultiResponse)
			if len(resp.GetResults()) != 1 {
				k.fail(doNotRetry("the multi-row mutation got %d answers", len(resp.GetResults())))
				return
			}
			r := resp.GetResults()[0]
			if r.GetException() != nil {
				k.fail(fromDetail(r.GetException()))
				return
			}
			for _, x := range r.GetResults() {
				if x.GetException() != nil {
					k.fail(fromDetail(x.GetException()))
					return
				}
			}
			done(&hb.MutateRowsResponse{Processed: proto.Bool(r.GetProcessed())})
		})
}
