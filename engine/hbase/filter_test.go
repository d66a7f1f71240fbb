package hbase

import (
	"bytes"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/cellstore/cellstore/engine/access"
	hb "github.com/cellstore/cellstore/engine/api/hbase/v2"
)

// A FuzzyRowFilter's mask arrives as HBase's client serializes it — preprocessed (-1 fixed, 2 any)
// on the JVMs everyone runs, or raw (0, 1) — and becomes Cellstore's 0/1 mask; other bytes are
// refused with a DoNotRetry.
func TestFuzzyRowFilterMasks(t *testing.T) {
	conv := func(mask []byte) (*hb.Filter, []byte, error) {
		data, err := proto.Marshal(&hb.FuzzyRowFilter{FuzzyKeysData: []*hb.BytesBytesPair{{First: []byte("row?"), Second: mask}}})
		if err != nil {
			t.Fatal(err)
		}
		f := &hb.Filter{Name: proto.String("org.apache.hadoop.hbase.filter.FuzzyRowFilter"), SerializedFilter: data}
		out, err := convertFilter(f)
		if err != nil {
			return f, nil, err
		}
		return f, out.GetFuzzyRow().GetKeys()[0].GetMask(), nil
	}
	for _, mask := range [][]byte{{0xff, 0xff, 0xff, 2}, {0, 0, 0, 1}} {
		if _, got, err := conv(mask); err != nil || !bytes.Equal(got, []byte{0, 0, 0, 1}) {
			t.Errorf("mask %x: %x %v, want 00000001", mask, got, err)
		}
	}
	if _, _, err := conv([]byte{0, 7}); err == nil {
		t.Error("a mask byte of 7 was accepted")
	}
}

// RegexStringComparator's Java flags become RE2 flags: HBase's default DOTALL makes '.' match a
// newline; COMMENTS is refused.
func TestRegexComparatorFlags(t *testing.T) {
	for _, tc := range []struct {
		flags int32
		want  string
	}{
		{0, "x.y"}, {javaDotall, "(?s)x.y"}, {javaCaseInsensitive | javaDotall, "(?is)x.y"},
		{javaMultiline, "(?m)x.y"}, {javaLiteral, `x\.y`},
	} {
		data, err := proto.Marshal(&hb.RegexStringComparator{Pattern: proto.String("x.y"), PatternFlags: proto.Int32(tc.flags), Charset: proto.String("UTF-8")})
		if err != nil {
			t.Fatal(err)
		}
		c, err := convertComparator(&hb.Comparator{Name: proto.String("org.apache.hadoop.hbase.filter.RegexStringComparator"), SerializedComparator: data})
		if err != nil || c.GetRegex() != tc.want {
			t.Errorf("flags %d: %q %v, want %q", tc.flags, c.GetRegex(), err, tc.want)
		}
	}
	data, _ := proto.Marshal(&hb.RegexStringComparator{Pattern: proto.String("x"), PatternFlags: proto.Int32(javaComments), Charset: proto.String("UTF-8")})
	if _, err := convertComparator(&hb.Comparator{Name: proto.String("org.apache.hadoop.hbase.filter.RegexStringComparator"), SerializedComparator: data}); err == nil {
		t.Error("the COMMENTS flag was accepted")
	}
}

// HBase's visibility attribute becomes Cellstore's: a mutation's CellVisibility its expression, a
// read's Authorizations its labels; a cell ACL in HBase's form is refused (it used to pass through
// as if in Cellstore's encoding, or the labels were dropped and the cells stored unlabelled).
func TestVisibilityAndACLAttributes(t *testing.T) {
	cv, _ := proto.Marshal(&hb.CellVisibility{Expression: proto.String("secret & !eu")})
	got, err := leanAttributes([]*hb.NameBytesPair{{Name: proto.String("VISIBILITY"), Value: cv}, {Name: proto.String("other"), Value: []byte("x")}}, true)
	if err != nil || string(got[access.VisibilityAttribute]) != "secret & !eu" || string(got["other"]) != "x" || got["VISIBILITY"] != nil {
		t.Fatalf("a mutation's CellVisibility: %q %v", got, err)
	}
	au, _ := proto.Marshal(&hb.Authorizations{Label: []string{"secret", "pii"}})
	got, err = leanAttributes([]*hb.NameBytesPair{{Name: proto.String("VISIBILITY"), Value: au}}, false)
	want, _ := access.EncodeAuthorizations([]string{"secret", "pii"})
	if err != nil || !bytes.Equal(got[access.AuthorizationsAttribute], want) {
		t.Fatalf("a read's Authorizations: %q %v", got, err)
	}
	if _, err := leanAttributes([]*hb.NameBytesPair{{Name: proto.String("acl"), Value: []byte{0x0a, 0x03, 'b', 'o', 'b'}}}, true); err == nil {
		t.Fatal("an HBase cell ACL was accepted")
	}
}

// TestTimeRanges: HBase's [t, t) is an empty range (not all time, nor an error), and its "all
// time" upper bound is Cellstore's unbounded To.
func TestTimeRanges(t *testing.T) {
	const maxTs = int64(^uint64(0) >> 1)
	for _, c := range []struct {
		from, to         uint64
		wantFrom, wantTo int64
	}{
		{5, 5, maxTs, maxTs},
		{0, 0, maxTs, maxTs},
		{0, uint64(maxTs), 0, 0},
		{3, 9, 3, 9},
	} {
		got := leanTimeRange(&hb.TimeRange{From: proto.Uint64(c.from), To: proto.Uint64(c.to)})
		if got.GetFrom() != c.wantFrom || got.GetTo() != c.wantTo {
			t.Errorf("[%d, %d) = [%d, %d), want [%d, %d)", c.from, c.to, got.GetFrom(), got.GetTo(), c.wantFrom, c.wantTo)
		}
	}
}
