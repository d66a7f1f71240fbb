package master

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math/bits"
	"slices"

	"google.golang.org/protobuf/proto"

	pb "github.com/cellstore/cellstore/engine/api/cellstore/v1"
	"github.com/cellstore/cellstore/engine/cell"
	"github.com/cellstore/cellstore/engine/region"
	"github.com/cellstore/cellstore/engine/schema"
)

const (
	// DefaultNamespace is the namespace of a table named without one.
	DefaultNamespace = schema.DefaultNamespace
	// SystemNamespace is HBase's namespace of system tables (hbase:meta and the like): users
	// cannot create tables in it.
	SystemNamespace = schema.SystemNamespace
	// MaxSplitKeys bounds the regions of a pre-split table.
	MaxSplitKeys = 10000
)

// normTableName fills in the default namespace.
func normTableName(t *pb.TableName) *pb.TableName {
	if t == nil {
		return nil
	}
	ns := t.GetNamespace()
	if ns == "" {
		ns = DefaultNamespace
	}
	return &pb.TableName{Namespace: ns, Name: t.GetName()}
}

// The rules for names and a descriptor's numbers are the schema package's, shared with the
// shell, the client and the region.
func validNamespace(ns string) error       { return schema.Namespace(ns) }
func validTableName(t *pb.TableName) error { return schema.TableName(t) }
func validFamilyName(f []byte) error       { return schema.Family(f) }
func validDescriptor(td *pb.TableDescriptor) error {
	if n := descriptorSize(td); n > maxDescriptorBytes {
		return fmt.Errorf("the table descriptor takes %d bytes, more than the limit of %d (its attributes and families' settings)", n, maxDescriptorBytes)
	}
	if err := schema.Descriptor(td); err != nil {
		return err
	}
	if _, err := region.ParseSplitPolicy(td.GetAttributes()); err != nil {
		return err
	}
	if _, err := region.ParseFlushPolicy(td.GetAttributes()); err != nil {
		return err
	}
	return checkNormalizerAttributes(td.GetAttributes())
}

// maxDescriptorBytes bounds a table descriptor: each region's open order and the catalog's table
// row carry it.
const maxDescriptorBytes = 1 << 20

// descriptorSize is what td takes in the catalog: without its functions' modules, which a request
// may carry and which are stored apart (storeFunctions).
func descriptorSize(td *pb.TableDescriptor) int {
	if !slices.ContainsFunc(td.GetFunctions(), func(f *pb.TableFunction) bool { return len(f.GetModule()) > 0 }) {
		return proto.Size(td)
	}
	c := proto.CloneOf(td)
	for _, f := range c.GetFunctions() {
		f.Module = nil
	}
	return proto.Size(c)
}

// splitPolicyOf is a table's split policy (checked when the table was created or altered).
func splitPolicyOf(t *pb.CatalogTable) region.SplitPolicy {
	p, _ := region.ParseSplitPolicy(t.GetTable().GetAttributes())
	return p
}

const maxReplication = schema.MaxReplication

// splitKeysFor returns the sorted split keys of a new table: the given ones (checked) or
// numRegions-1 keys spread evenly over the first 8 bytes of the key space.
func splitKeysFor(keys [][]byte, numRegions int32) ([][]byte, error) {
	if len(keys) > 0 && numRegions > 0 {
		return nil, fmt.Errorf("give split keys or a number of regions, not both")
	}
	if numRegions < 0 {
		return nil, fmt.Errorf("number of regions %d is negative", numRegions)
	}
	if numRegions > MaxSplitKeys+1 || len(keys) > MaxSplitKeys {
		return nil, fmt.Errorf("at most %d regions per table at creation", MaxSplitKeys+1)
	}
	if numRegions > 1 {
		out := make([][]byte, 0, numRegions-1)
		for i := uint64(1); i < uint64(numRegions); i++ {
			q, _ := bits.Div64(i, 0, uint64(numRegions)) // i * 2^64 / n
			out = append(out, bytes.TrimRight(binary.BigEndian.AppendUint64(nil, q), "\x00"))
		}
		return out, nil
	}
	out := make([][]byte, 0, len(keys))
	for i, k := range keys {
		if len(k) == 0 {
			return nil, fmt.Errorf("split key %d is empty (the first region starts at the empty key already)", i)
		}
		if len(k) > cell.MaxRowLength {
			return nil, fmt.Errorf("split key %d has %d bytes, more than a row key's limit of %d", i, len(k), cell.MaxRowLength)
		}
		out = append(out, bytes.Clone(k))
	}
	slices.SortFunc(out, bytes.Compare)
	for i := 1; i < len(out); i++ {
		if bytes.Equal(out[i-1], out[i]) {
			return nil, fmt.Errorf("split key %q is given twice", out[i])
		}
	}
	return out, nil
}
