package region

import (
	"bytes"
	"fmt"
	"strconv"
	"strings"
)

// Table attributes that choose where and whether a table's regions split, with HBase's names
// (a table descriptor's SPLIT_POLICY and the policies' settings).
const (
	SplitPolicyAttribute = "SPLIT_POLICY"
	// KeyPrefixLengthAttribute: KeyPrefixRegionSplitPolicy splits only between rows whose first
	// this-many bytes differ. (HBase also reads the older prefix_split_key_policy.prefix_length.)
	KeyPrefixLengthAttribute    = "KeyPrefixRegionSplitPolicy.prefix_length"
	oldKeyPrefixLengthAttribute = "prefix_split_key_policy.prefix_length"
	// KeyPrefixDelimiterAttribute: DelimitedKeyPrefixRegionSplitPolicy splits only between rows
	// whose parts before the first delimiter differ.
	KeyPrefixDelimiterAttribute = "DelimitedKeyPrefixRegionSplitPolicy.delimiter"
)

// SplitPolicy is a table's split policy (HBase's RegionSplitPolicy): whether its regions split
// when they grow, and how a split row is cut so that rows sharing a prefix stay in one region
// (so that an atomic multi-row mutation of them always finds them together).
type SplitPolicy struct {
	// Name is the policy's short class name ("" for the default, size-based policy).
	Name string
	// NoAutoSplit: the regions split only when asked (DisabledRegionSplitPolicy).
	NoAutoSplit  bool
	prefixLength int
	delimiter    []byte
}

// ParseSplitPolicy reads a table's split policy from its attributes. The policy names HBase
// uses are accepted with or without their package
// (org.apache.hadoop.hbase.regionserver.); the size-based ones (ConstantSize,
// IncreasingToUpperBound, Stepping, BusyRegion) all mean the default here: split at the table's
// or cluster's split size.
func ParseSplitPolicy(attrs map[string]string) (SplitPolicy, error) {
	name := attrs[SplitPolicyAttribute]
	short := name[strings.LastIndexByte(name, '.')+1:]
	p := SplitPolicy{Name: short}
	switch short {
	case "", "ConstantSizeRegionSplitPolicy", "IncreasingToUpperBoundRegionSplitPolicy", "SteppingSplitPolicy", "BusyRegionSplitPolicy":
	case "DisabledRegionSplitPolicy":
		p.NoAutoSplit = true
	case "KeyPrefixRegionSplitPolicy":
		v, ok := attrs[KeyPrefixLengthAttribute]
		if !ok {
			v, ok = attrs[oldKeyPrefixLengthAttribute]
		}
		if !ok {
			return p, fmt.Errorf("region: %s needs the table attribute %s (the number of leading row bytes that must not split apart)", short, KeyPrefixLengthAttribute)
		}
		n, err := strconv.Atoi(strings.TrimSpace(v))
		if err != nil || n <= 0 {
			return p, fmt.Errorf("region: %s %q is not a positive number of bytes", KeyPrefixLengthAttribute, v)
		}
		p.prefixLength = n
	case "DelimitedKeyPrefixRegionSplitPolicy":
		v := attrs[KeyPrefixDelimiterAttribute]
		if v == "" {
			return p, fmt.Errorf("region: %s needs the table attribute %s (the delimiter that ends the row prefix that must not split apart)", short, KeyPrefixDelimiterAttribute)
		}
		p.delimiter = []byte(v)
	default:
		return p, fmt.Errorf("region: unknown %s %q (KeyPrefixRegionSplitPolicy, DelimitedKeyPrefixRegionSplitPolicy, DisabledRegionSplitPolicy or a size-based one)", SplitPolicyAttribute, name)
	}
	return p, nil
}

// Cut returns the row a region splits at instead of row: its prefix, so that every row sharing
// that prefix lands in the upper daughter. Rows no longer than the prefix stay as they are.
func (p SplitPolicy) Cut(row []byte) []byte {
	switch {
	case p.prefixLength > 0 && len(row) > p.prefixLength:
		return bytes.Clone(row[:p.prefixLength])
	case len(p.delimiter) > 0:
		if i := bytes.Index(row, p.delimiter); i >= 0 {
			return bytes.Clone(row[:i])
		}
	}
	return row
}
