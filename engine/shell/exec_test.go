package shell

import (
	"bytes"
	"context"
	"errors"
	"maps"
	"strings"
	"testing"
	"testing/quick"

	pb "github.com/cellstore/cellstore/engine/api/cellstore/v1"
	"github.com/cellstore/cellstore/engine/client"
)

func TestBinaryRoundTrip(t *testing.T) {
	if got := Binary([]byte("ab\x00\\\xff")); got != `ab\x00\x5C\xFF` {
		t.Errorf("Binary = %s", got)
	}
	f := func(b []byte) bool { return bytes.Equal(ParseBinary(Binary(b)), b) }
	if err := quick.Check(f, nil); err != nil {
		t.Error(err)
	}
}

// Argument mistakes are caught before anything is sent, with the verb's usage.
func TestUsageErrors(t *testing.T) {
	c, err := client.New(client.Config{Masters: []string{"127.0.0.1:1"}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	var out bytes.Buffer
	sh := &Shell{Client: c, Out: &out}
	for line, want := range map[string]string{
		`put 't', 'r'`:                "usage: put",
		`nosuch 't'`:                  "unknown command",
		`get 't', 'r', {NOPE => 1}`:   "get does not know NOPE",
		`scan 't', {LIMIT => 'many'}`: "LIMIT must be a number",
		`create 't'`:                  "at least one column family",
		`create 't', {NAME => 'f', BLOOMFILTER => 'X'}`:                               "BLOOMFILTER must be",
		`set_quota TYPE => SPACE, USER => 'u', LIMIT => '1G/sec'`:                     "only TYPE => THROTTLE",
		`set_quota TYPE => THROTTLE, USER => 'u', LIMIT => '10 per sec'`:              "bad limit",
		`set_quota TYPE => THROTTLE, USER => 'u', TABLE => 't', LIMIT => '10req/sec'`: "a user's quota on one table or namespace is not supported",
		`get 't', 'r', {TIMERANGE => [5, 1]}`:                                         "ends before it starts",
		`put 't', 'r', ':q', 'v'`:                                                     "bad column",
		`put 't', 'r', 'f:q', 'v', {TTL => 0}`:                                        "TTL must be a positive",
		`put 't', 'r', 'f:q', 'v', 5, {COLOUR => 'x'}`:                                "put does not know COLOUR",
		`delete 't', 'r', 'f:q', {COLOUR => 'x'}`:                                     "delete does not know COLOUR",
		`get 't', 'r', {AUTHORIZATIONS => 5}`:                                         "AUTHORIZATIONS must be 'label' or ['label', ...]",
		`add_labels []`:                                                               "give at least one label",
		`put 't', 'r', 'f:q', 'v', {TTL => 5}, 7`:                                     "usage: put",
		`create 't', {NAME => 'f', VERSIONS => 99999999999}`:                          "VERSIONS 99999999999 is out of range",
		`scan 't', {LIMIT => 4294967297}`:                                             "LIMIT 4294967297 is out of range",
		`create 't', 'f', {NUMREGIONS => 4294967298}`:                                 "NUMREGIONS 4294967298 is out of range",
		`aggregate 't', 'f:q', {TYPE => 'int'}`:                                       "TYPE is 'long' or 'double'",
		`aggregate 't', 'f:q', {REVERSED => true}`:                                    "it does not take REVERSED",
		`aggregate 't', 'f:q', {NOPE => 1}`:                                           "aggregate does not know NOPE",
		`bulk_delete 't'`:                                                             "bulk_delete takes a table and",
		`deleteall 't', 'r', 'f:q', 1700000000000, 'x'`:                               "deleteall takes a table, a row",
		`bulk_delete 't', {DELETE_TYPE => 'CELL'}`:                                    "DELETE_TYPE is ROW, FAMILY, COLUMN or VERSION",
		`bulk_delete 't', {TIMESTAMP => -1}`:                                          "TIMESTAMP takes a timestamp",
		`call_function 't', 'fn', 'ep', 'arg', {LIMIT => 5}`:                          "it does not take LIMIT",
		`call_function 't', 'fn'`:                                                     "endpoint",
		`create 't', {NAME => 'f', IN_MEMORY_COMPACTION => 'LAZY'}`:                   "IN_MEMORY_COMPACTION must be NONE, BASIC or EAGER",
		`create 't', 'f', {METADATA => 'x'}`:                                          "METADATA must be a {KEY => value} hash",
	} {
		err := sh.Run(context.Background(), line)
		var ue *UsageError
		if err == nil || !strings.Contains(err.Error(), want) || (errors.As(err, &ue) && ue == nil) {
			t.Errorf("%s: want an error containing %q, got %v", line, want, err)
		}
	}
	if out.Len() != 0 {
		t.Errorf("output for failed commands: %q", out.String())
	}
}

// What a terminal would act on is escaped in text the store holds for people.
func TestText(t *testing.T) {
	for in, want := range map[string]string{
		"ops":                "ops",
		"José ✓":             "José ✓",
		"\x1b]0;pwned\x07":   `\x1B]0;pwned\x07`,
		"a\rb\nc":            `a\x0Db\x0Ac`,
		"back\\slash":        `back\x5Cslash`,
		"csi\u009b2J":        `csi\xC2\x9B2J`,
		"bad\xffutf8":        `bad\xFFutf8`,
		"replacement \uFFFD": "replacement \uFFFD",
	} {
		if got := Text(in); got != want {
			t.Errorf("Text(%q) = %q, want %q", in, got, want)
		}
	}
}

// Table attributes as HBase's shell names them: the policies and free-form values land in the
// descriptor's attributes (an empty value removes one), and describe lists them back.
func TestTableAttributes(t *testing.T) {
	td := &pb.TableDescriptor{}
	cmd, err := Parse(`alter 't', {FLUSH_POLICY => 'FlushAllStoresPolicy', MEMSTORE_FLUSHSIZE => 65536, ` +
		`METADATA => {'hbase.hregion.percolumnfamilyflush.size.lower.bound' => '16384', 'owner' => 'ops'}, ` +
		`CONFIGURATION => {'owner' => ''}, SPLIT_POLICY => 'DisabledRegionSplitPolicy'}`)
	if err != nil || len(cmd.Args) != 2 {
		t.Fatal(cmd, err)
	}
	args := cmd.Args[1:]
	for _, k := range args[0].Keys {
		if ok, err := tableAttribute(td, k, args[0].Map[k]); !ok || err != nil {
			t.Fatalf("%s: %v %v", k, ok, err)
		}
	}
	want := map[string]string{"FLUSH_POLICY": "FlushAllStoresPolicy", "SPLIT_POLICY": "DisabledRegionSplitPolicy",
		"hbase.hregion.percolumnfamilyflush.size.lower.bound": "16384"}
	if !maps.Equal(td.Attributes, want) || td.MemstoreFlushSize != 65536 {
		t.Fatalf("attributes %v, flush size %d", td.Attributes, td.MemstoreFlushSize)
	}
	got := describeTableAttributes(td)
	if w := "REGION_REPLICATION => '1', MEMSTORE_FLUSHSIZE => '65536', FLUSH_POLICY => 'FlushAllStoresPolicy', " +
		"SPLIT_POLICY => 'DisabledRegionSplitPolicy', METADATA => {'hbase.hregion.percolumnfamilyflush.size.lower.bound' => '16384'}"; got != w {
		t.Fatalf("describe:\n%s\nwant\n%s", got, w)
	}
	if ok, _ := tableAttribute(td, "COLOUR", Value{}); ok {
		t.Fatal("an unknown attribute was taken")
	}
}
