package hbasev2

import (
	"bytes"
	"encoding/binary"
	"strings"
	"testing"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// These tests pin wire facts taken from HBase's own .proto files (hbase-protocol-shaded): the
// bytes HBase's Java client writes for a message are the bytes Go writes for the same message,
// because both emit fields in field-number order.

func marshal(t *testing.T, m proto.Message) []byte {
	t.Helper()
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(m)
	if err != nil {
		t.Fatalf("marshal %T: %v", m, err)
	}
	return b
}

func TestRequestHeaderBytes(t *testing.T) {
	h := &RequestHeader{
		CallId:       proto.Uint32(1),
		MethodName:   proto.String("Get"),
		RequestParam: proto.Bool(true),
	}
	want := []byte{
		0x08, 0x01, // call_id = 1 (field 1, varint)
		0x1a, 0x03, 'G', 'e', 't', // method_name (field 3, bytes)
		0x20, 0x01, // request_param = true (field 4, varint)
	}
	if got := marshal(t, h); !bytes.Equal(got, want) {
		t.Fatalf("RequestHeader = % x, want % x", got, want)
	}
}

func TestConnectionHeaderBytes(t *testing.T) {
	const codec = "org.apache.hadoop.hbase.codec.KeyValueCodec"
	if len(codec) != 0x2b {
		t.Fatalf("codec class length %d", len(codec))
	}
	h := &ConnectionHeader{
		UserInfo:            &UserInformation{EffectiveUser: proto.String("hbase")},
		ServiceName:         proto.String("ClientService"),
		CellBlockCodecClass: proto.String(codec),
	}
	var want []byte
	want = append(want, 0x0a, 0x07, 0x0a, 0x05) // user_info { effective_user (5 bytes) }
	want = append(want, "hbase"...)
	want = append(want, 0x12, 0x0d) // service_name, 13 bytes
	want = append(want, "ClientService"...)
	want = append(want, 0x1a, 0x2b) // cell_block_codec_class, 43 bytes
	want = append(want, codec...)
	if got := marshal(t, h); !bytes.Equal(got, want) {
		t.Fatalf("ConnectionHeader = % x, want % x", got, want)
	}
}

// A whole call frame as the Java client writes it: a 4-byte big-endian total length, then the
// RequestHeader and the request, each prefixed with its varint length (writeDelimitedTo).
func TestGetCallFrame(t *testing.T) {
	header := &RequestHeader{CallId: proto.Uint32(7), MethodName: proto.String("Get"), RequestParam: proto.Bool(true)}
	req := &GetRequest{
		Region: &RegionSpecifier{Type: RegionSpecifier_REGION_NAME.Enum(), Value: []byte("r1")},
		Get:    &Get{Row: []byte("k")},
	}
	wantReq := []byte{
		0x0a, 0x06, // region (field 1), 6 bytes
		0x08, 0x01, // type = REGION_NAME (1)
		0x12, 0x02, 'r', '1', // value
		0x12, 0x03, // get (field 2), 3 bytes
		0x0a, 0x01, 'k', // row
	}
	if got := marshal(t, req); !bytes.Equal(got, wantReq) {
		t.Fatalf("GetRequest = % x, want % x", got, wantReq)
	}

	var body []byte
	body = protowire.AppendBytes(body, marshal(t, header))
	body = protowire.AppendBytes(body, marshal(t, req))
	frame := binary.BigEndian.AppendUint32(nil, uint32(len(body)))
	frame = append(frame, body...)

	// Decode it back the way the server will.
	n := binary.BigEndian.Uint32(frame)
	rest := frame[4:]
	if int(n) != len(rest) {
		t.Fatalf("frame length %d, body %d", n, len(rest))
	}
	hb, k := protowire.ConsumeBytes(rest)
	if k < 0 {
		t.Fatal("bad header length")
	}
	rest = rest[k:]
	var gotHeader RequestHeader
	if err := proto.Unmarshal(hb, &gotHeader); err != nil {
		t.Fatal(err)
	}
	newCall, ok := Lookup("ClientService", gotHeader.GetMethodName())
	if !ok {
		t.Fatalf("no ClientService.%s", gotHeader.GetMethodName())
	}
	gotReq, _ := newCall()
	pb, k := protowire.ConsumeBytes(rest)
	if k < 0 || k != len(rest) {
		t.Fatal("bad request length")
	}
	if err := proto.Unmarshal(pb, gotReq); err != nil {
		t.Fatal(err)
	}
	if !proto.Equal(gotReq, req) || gotHeader.GetCallId() != 7 {
		t.Fatalf("round trip: %v %v", &gotHeader, gotReq)
	}
}

// TimestampsFilter.timestamps is declared [packed = true] in HBase (proto2 does not pack by
// default).
func TestTimestampsFilterPacked(t *testing.T) {
	got := marshal(t, &TimestampsFilter{Timestamps: []int64{1, 2}})
	want := []byte{0x0a, 0x02, 0x01, 0x02}
	if !bytes.Equal(got, want) {
		t.Fatalf("TimestampsFilter = % x, want % x", got, want)
	}
}

// Go's proto.Marshal and proto.Unmarshal check proto2 required fields (including in nested
// messages) unless AllowPartial is set.
func TestRequiredFields(t *testing.T) {
	partial := &TableName{Namespace: []byte("default")} // qualifier missing
	if _, err := proto.Marshal(partial); err == nil || !strings.Contains(err.Error(), "required field") {
		t.Fatalf("marshal without qualifier: err = %v", err)
	}
	b, err := proto.MarshalOptions{AllowPartial: true}.Marshal(partial)
	if err != nil {
		t.Fatal(err)
	}
	var tn TableName
	err = proto.Unmarshal(b, &tn)
	if err == nil || !strings.Contains(err.Error(), "required field") || !strings.Contains(err.Error(), "qualifier") {
		t.Fatalf("unmarshal without qualifier: err = %v", err)
	}
	if err := (proto.UnmarshalOptions{AllowPartial: true}).Unmarshal(b, &tn); err != nil {
		t.Fatalf("AllowPartial unmarshal: %v", err)
	}

	// Nested: a GetRequest whose region lacks its value.
	nested := &GetRequest{
		Region: &RegionSpecifier{Type: RegionSpecifier_ENCODED_REGION_NAME.Enum()},
		Get:    &Get{Row: []byte("k")},
	}
	if _, err := proto.Marshal(nested); err == nil {
		t.Fatal("marshal GetRequest with incomplete region: no error")
	}

	// RequestHeader has no required fields: even an empty one decodes.
	var h RequestHeader
	if err := proto.Unmarshal(nil, &h); err != nil {
		t.Fatalf("empty RequestHeader: %v", err)
	}
	// GetConnectionRegistryResponse.cluster_id is required.
	var reg GetConnectionRegistryResponse
	if err := proto.Unmarshal(nil, &reg); err == nil {
		t.Fatal("empty GetConnectionRegistryResponse: no error")
	}
}

// Fields a newer client sends survive as unknown fields and are re-emitted unchanged.
func TestUnknownFieldsKept(t *testing.T) {
	b := marshal(t, &Get{Row: []byte("k")})
	b = protowire.AppendTag(b, 99, protowire.VarintType)
	b = protowire.AppendVarint(b, 5)
	var g Get
	if err := proto.Unmarshal(b, &g); err != nil {
		t.Fatal(err)
	}
	if got := marshal(t, &g); !bytes.Equal(got, b) {
		t.Fatalf("re-marshal = % x, want % x", got, b)
	}
}

func TestDefaults(t *testing.T) {
	var g Get
	if g.GetMaxVersions() != 1 || !g.GetCacheBlocks() || g.GetConsistency() != Consistency_STRONG {
		t.Fatalf("Get defaults: max_versions %d cache_blocks %v", g.GetMaxVersions(), g.GetCacheBlocks())
	}
	var s Scan
	if s.GetMaxVersions() != 1 || !s.GetCacheBlocks() || !s.GetIncludeStartRow() || s.GetIncludeStopRow() ||
		s.GetReadType() != Scan_DEFAULT {
		t.Fatal("Scan defaults")
	}
	var cs ClusterStatus
	if cs.GetMasterInfoPort() != -1 {
		t.Fatalf("ClusterStatus.master_info_port default %d", cs.GetMasterInfoPort())
	}
	var m MutationProto
	if m.GetDurability() != MutationProto_USE_DEFAULT {
		t.Fatal("MutationProto.durability default")
	}
	var ri RegionInfo
	if ri.GetReplicaId() != 0 {
		t.Fatal("RegionInfo.replica_id default")
	}
}

func TestEnumNumbers(t *testing.T) {
	for _, c := range []struct {
		name string
		got  protoreflect.EnumNumber
		want protoreflect.EnumNumber
	}{
		{"CellType.PUT", CellType_PUT.Number(), 4},
		{"CellType.DELETE", CellType_DELETE.Number(), 8},
		{"CellType.DELETE_FAMILY_VERSION", CellType_DELETE_FAMILY_VERSION.Number(), 10},
		{"CellType.DELETE_COLUMN", CellType_DELETE_COLUMN.Number(), 12},
		{"CellType.DELETE_FAMILY", CellType_DELETE_FAMILY.Number(), 14},
		{"CellType.MAXIMUM", CellType_MAXIMUM.Number(), 255},
		{"RegionSpecifierType.REGION_NAME", RegionSpecifier_REGION_NAME.Number(), 1},
		{"RegionSpecifierType.ENCODED_REGION_NAME", RegionSpecifier_ENCODED_REGION_NAME.Number(), 2},
		{"CompareType.NO_OP", CompareType_NO_OP.Number(), 6},
		{"MutationType.PUT", MutationProto_PUT.Number(), 2},
		{"MutationType.DELETE", MutationProto_DELETE.Number(), 3},
		{"DeleteType.DELETE_FAMILY_VERSION", MutationProto_DELETE_FAMILY_VERSION.Number(), 3},
		{"Durability.FSYNC_WAL", MutationProto_FSYNC_WAL.Number(), 4},
		{"FilterList.MUST_PASS_ALL", FilterList_MUST_PASS_ALL.Number(), 1},
		{"FilterList.MUST_PASS_ONE", FilterList_MUST_PASS_ONE.Number(), 2},
		{"BitComparator.XOR", BitComparator_XOR.Number(), 3},
		{"TableState.ENABLING", TableState_ENABLING.Number(), 3},
		{"GetProcedureResultResponse.FINISHED", GetProcedureResultResponse_FINISHED.Number(), 2},
		{"RegionState.ABNORMALLY_CLOSED", RegionState_ABNORMALLY_CLOSED.Number(), 15},
		{"Option.UNKNOWN_SERVERS", Option_UNKNOWN_SERVERS.Number(), 14},
	} {
		if c.got != c.want {
			t.Errorf("%s = %d, want %d", c.name, c.got, c.want)
		}
	}
}

// Spot checks of field numbers that came with later 2.x releases.
func TestFieldNumbers(t *testing.T) {
	for _, c := range []struct {
		msg   proto.Message
		field protoreflect.Name
		num   protoreflect.FieldNumber
	}{
		{&ConnectionHeader{}, "attribute", 7},
		{&RequestHeader{}, "timeout", 7},
		{&RequestHeader{}, "attribute", 8},
		{&ExceptionResponse{}, "server_overloaded", 6},
		{&Scan{}, "need_cursor_result", 24},
		{&ScanResponse{}, "cursor", 12},
		{&RegionAction{}, "condition", 4},
		{&RegionActionResult{}, "processed", 3},
		{&Condition{}, "filter", 7},
		{&BalanceResponse{}, "moves_executed", 3},
		{&GetTableDescriptorsRequest{}, "namespace", 4},
		{&ServerLoad{}, "regionCachedInfo", 16},
		{&RegionInfo{}, "replica_id", 7},
	} {
		fd := c.msg.ProtoReflect().Descriptor().Fields().ByName(c.field)
		if fd == nil || fd.Number() != c.num {
			t.Errorf("%T.%s: %v, want number %d", c.msg, c.field, fd, c.num)
		}
	}
}

func TestServices(t *testing.T) {
	for _, svc := range []string{"ClientService", "MasterService", "ClientMetaService"} {
		methods := Services[svc]
		if len(methods) == 0 {
			t.Fatalf("%s has no methods", svc)
		}
		for name, newCall := range methods {
			req, resp := newCall()
			if req == nil || resp == nil {
				t.Errorf("%s.%s: nil message", svc, name)
				continue
			}
			r2, _ := newCall()
			if r2 == req {
				t.Errorf("%s.%s: constructor reuses its message", svc, name)
			}
		}
	}
	// HBase spells these two in lower camel case on the wire.
	for _, m := range []string{"truncateTable", "getProcedureResult"} {
		if _, ok := Lookup("MasterService", m); !ok {
			t.Errorf("MasterService.%s missing", m)
		}
	}
	if _, ok := Lookup("MasterService", "TruncateTable"); ok {
		t.Error("MasterService.TruncateTable must not exist (HBase sends truncateTable)")
	}
	if _, ok := Lookup("NoSuchService", "Get"); ok {
		t.Error("unknown service found")
	}
}
