package region

import (
	"bytes"
	"testing"
)

func TestSplitPolicies(t *testing.T) {
	for _, tc := range []struct {
		attrs   map[string]string
		row     string
		want    string
		noSplit bool
	}{
		{nil, "abcdef", "abcdef", false},
		{map[string]string{SplitPolicyAttribute: "org.apache.hadoop.hbase.regionserver.SteppingSplitPolicy"}, "abcdef", "abcdef", false},
		{map[string]string{SplitPolicyAttribute: "DisabledRegionSplitPolicy"}, "abcdef", "abcdef", true},
		{map[string]string{SplitPolicyAttribute: "org.apache.hadoop.hbase.regionserver.KeyPrefixRegionSplitPolicy", KeyPrefixLengthAttribute: "4"}, "abcdef", "abcd", false},
		{map[string]string{SplitPolicyAttribute: "KeyPrefixRegionSplitPolicy", oldKeyPrefixLengthAttribute: "2"}, "abcdef", "ab", false},
		{map[string]string{SplitPolicyAttribute: "KeyPrefixRegionSplitPolicy", KeyPrefixLengthAttribute: "8"}, "abc", "abc", false},
		{map[string]string{SplitPolicyAttribute: "DelimitedKeyPrefixRegionSplitPolicy", KeyPrefixDelimiterAttribute: "_"}, "user12_2024_x", "user12", false},
		{map[string]string{SplitPolicyAttribute: "DelimitedKeyPrefixRegionSplitPolicy", KeyPrefixDelimiterAttribute: "::"}, "nodelimiter", "nodelimiter", false},
	} {
		p, err := ParseSplitPolicy(tc.attrs)
		if err != nil {
			t.Fatalf("%v: %v", tc.attrs, err)
		}
		if got := p.Cut([]byte(tc.row)); !bytes.Equal(got, []byte(tc.want)) || p.NoAutoSplit != tc.noSplit {
			t.Fatalf("%v: Cut(%q) = %q (no auto split %v), want %q (%v)", tc.attrs, tc.row, got, p.NoAutoSplit, tc.want, tc.noSplit)
		}
	}
	for _, bad := range []map[string]string{
		{SplitPolicyAttribute: "com.example.Mine"},
		{SplitPolicyAttribute: "KeyPrefixRegionSplitPolicy"},
		{SplitPolicyAttribute: "KeyPrefixRegionSplitPolicy", KeyPrefixLengthAttribute: "0"},
		{SplitPolicyAttribute: "KeyPrefixRegionSplitPolicy", KeyPrefixLengthAttribute: "four"},
		{SplitPolicyAttribute: "DelimitedKeyPrefixRegionSplitPolicy"},
	} {
		if _, err := ParseSplitPolicy(bad); err == nil {
			t.Fatalf("%v accepted", bad)
		}
	}
}
