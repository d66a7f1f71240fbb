// Package snapshot holds table snapshots on storage (HBase's snapshots): a manifest that names the
// store files a table's regions were made of, and new regions made of links to those files (a
// clone or a restore). No data is copied: store files never change, and a file compacted away or
// dropped with its table keeps its path under archive/, where the archive cleaner leaves it while
// a snapshot or a linking table names it. The master drives these (engine/master); the layout is
// in docs/storage-format.md.
package snapshot

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io/fs"
	"path"
	"regexp"
	"strings"

	"google.golang.org/protobuf/proto"

	pb "github.com/cellstore/cellstore/engine/api/cellstore/v1"
	"github.com/cellstore/cellstore/engine/layout"
	"github.com/cellstore/cellstore/engine/region"
)

// Dir holds one directory per snapshot: snapshots/<name>/manifest.
const Dir = "snapshots"

// LinksDir holds the tables' copies of the manifests their regions link to:
// links/<ns>/<table>/<snapshot>.
const LinksDir = "links"

// ManifestKey is where a snapshot's manifest is.
func ManifestKey(name string) string { return path.Join(Dir, name, "manifest") }

// LinkManifestKey is where a table keeps its copy of the manifest of the snapshot it was cloned
// or restored from: links/<ns>/<table>/<snapshot>-<unique>, never written twice (a copy can be
// deleted once its regions no longer link to it without racing a later restore).
func LinkManifestKey(t *pb.TableName, snapshot string, unique int64) string {
	return path.Join(LinksDir, t.GetNamespace(), t.GetName(), fmt.Sprintf("%s-%d", snapshot, unique))
}

// LinkManifestsDir is where a table's copies of manifests are.
func LinkManifestsDir(t *pb.TableName) string {
	return path.Join(LinksDir, t.GetNamespace(), t.GetName())
}

var nameRE = regexp.MustCompile(`^[A-Za-z0-9_][A-Za-z0-9_.-]*$`)

// CheckName refuses names HBase refuses: a snapshot name is made of letters, digits, '_', '-' and
// '.', and does not start with '.' or '-'.
func CheckName(name string) error {
	if len(name) > 200 || !nameRE.MatchString(name) {
		return fmt.Errorf("snapshot name %q is not valid: use letters, digits, '_', '-' and '.' (not first), at most 200", name)
	}
	return nil
}

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// ErrCorrupt: a manifest's checksum or encoding is wrong.
var ErrCorrupt = errors.New("snapshot: corrupt manifest")

// Encode is a manifest's stored form: the message's bytes and their CRC32C.
func Encode(m *pb.SnapshotManifest) ([]byte, error) {
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(m)
	if err != nil {
		return nil, err
	}
	return binary.BigEndian.AppendUint32(b, crc32.Checksum(b, castagnoli)), nil
}

// Decode reads a manifest's stored form.
func Decode(b []byte) (*pb.SnapshotManifest, error) {
	if len(b) < 4 {
		return nil, fmt.Errorf("%w: %d bytes", ErrCorrupt, len(b))
	}
	body, sum := b[:len(b)-4], binary.BigEndian.Uint32(b[len(b)-4:])
	if crc32.Checksum(body, castagnoli) != sum {
		return nil, fmt.Errorf("%w: checksum mismatch", ErrCorrupt)
	}
	m := &pb.SnapshotManifest{}
	if err := proto.Unmarshal(body, m); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrCorrupt, err)
	}
	return m, nil
}

// Read reads the manifest at key; a missing one matches fs.ErrNotExist.
func Read(st region.Storage, key string) (*pb.SnapshotManifest, error) {
	b, err := st.ReadObject(key)
	if err != nil {
		return nil, err
	}
	m, err := Decode(b)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", key, err)
	}
	return m, nil
}

// ReadNamed reads snapshot name's manifest (ManifestKey(name)); a missing one matches
// fs.ErrNotExist. One whose body names another snapshot fails with ErrCorrupt: everything goes by
// the name inside (listings, the table's copy of the manifest a clone or restore writes, the
// restore it records), so a manifest renamed or copied by hand, or damaged, is refused wherever it
// is read by name.
func ReadNamed(st region.Storage, name string) (*pb.SnapshotManifest, error) {
	key := ManifestKey(name)
	m, err := Read(st, key)
	if err != nil {
		return nil, err
	}
	if err := checkNamed(m, name); err != nil {
		return nil, fmt.Errorf("%s: %w", key, err)
	}
	return m, nil
}

// checkNamed refuses a manifest read as snapshot name's that names another snapshot.
func checkNamed(m *pb.SnapshotManifest, name string) error {
	if m.GetName() != name {
		return fmt.Errorf("%w: the manifest of snapshot %s names snapshot %q (renamed or copied by hand, or damaged): delete it, or put it back under the name it holds",
			ErrCorrupt, name, m.GetName())
	}
	return nil
}

// Write stores a new snapshot's manifest, create-only: a snapshot of that name that exists
// already fails with an error matching fs.ErrExist.
func Write(st region.Storage, m *pb.SnapshotManifest) error {
	b, err := Encode(m)
	if err != nil {
		return err
	}
	return st.WriteObject(ManifestKey(m.GetName()), b, true)
}

// Walk calls fn with every snapshot's manifest, by name, one at a time; fn's error ends the walk.
// A manifest that cannot be read is reported in bad (by key) and left out: one damaged snapshot
// must not hide the others.
func Walk(st region.Storage, fn func(*pb.SnapshotManifest) error) (bad map[string]error, err error) {
	err = st.WalkFiles(Dir, func(p string) error {
		if path.Base(p) != "manifest" || strings.Count(p, "/") != 2 {
			return nil
		}
		m, err := ReadNamed(st, path.Base(path.Dir(p)))
		switch {
		case errors.Is(err, fs.ErrNotExist): // deleted meanwhile
		case err != nil:
			if bad == nil {
				bad = map[string]error{}
			}
			bad[p] = err
		default:
			return fn(m)
		}
		return nil
	})
	return bad, err
}

// Delete removes a snapshot's manifest. Its files stay where they are; the archive cleaner
// removes those no other snapshot or linking table names.
func Delete(st region.Storage, name string) error { return st.DeleteObject(ManifestKey(name)) }

// Describe summarises a manifest.
func Describe(m *pb.SnapshotManifest) *pb.SnapshotDescription {
	d := &pb.SnapshotDescription{Name: m.GetName(), Table: proto.CloneOf(m.GetTable().GetName()), CreatedMs: m.GetCreatedMs(),
		SkipFlush: m.GetSkipFlush(), Regions: int32(len(m.GetRegions()))}
	for _, r := range m.GetRegions() {
		d.Files += int32(len(r.GetFiles()))
		for _, f := range r.GetFiles() {
			d.SizeBytes += f.GetSize()
		}
	}
	return d
}

// Paths are the data files a manifest names, the modules of the table's functions included.
func Paths(m *pb.SnapshotManifest) []string {
	var out []string
	for _, r := range m.GetRegions() {
		for _, f := range r.GetFiles() {
			out = append(out, f.GetPath())
		}
	}
	for _, f := range m.GetTable().GetFunctions() {
		out = append(out, layout.FunctionModuleKey(f.GetSha256()))
	}
	return out
}

// RegionOf records a region's store files as they are on storage now.
func RegionOf(st region.Storage, ri *pb.RegionInfo) (*pb.SnapshotRegion, error) {
	_, refs, err := region.RegionFiles(st, layout.StorageInfo(ri))
	if err != nil {
		return nil, err
	}
	sr := &pb.SnapshotRegion{RegionId: ri.GetRegionId(), StartKey: ri.GetStartKey(), EndKey: ri.GetEndKey()}
	for _, f := range refs {
		sr.Files = append(sr.Files, &pb.SnapshotFile{Family: f.Family, Path: f.Path, Half: f.Half, SplitRow: f.SplitRow,
			Top: f.Top, Size: f.Size, Entries: f.Entries, MaxSeq: f.MaxSeq})
	}
	return sr, nil
}

// CheckRestorable says whether a manifest can be cloned or restored: it has a table descriptor,
// its regions cover every row once, in order — the first starts at the first row (the empty
// key), each starts where the one before it ends and ends after it starts, the last ends at the
// last row (the empty key) — and each region's files are ones a region can link to (of the
// table's families, at store file paths). A clone or restore makes one region per snapshot region
// on these boundaries, and Materialize refuses any other boundaries or files: a manifest that
// fails here (damaged, or written by hand) must be refused before the table is changed.
func CheckRestorable(m *pb.SnapshotManifest) error {
	if m.GetTable() == nil {
		return errors.New("its manifest has no table descriptor")
	}
	rs := m.GetRegions()
	if len(rs) == 0 {
		return errors.New("its manifest has no regions")
	}
	if k := rs[0].GetStartKey(); len(k) != 0 {
		return fmt.Errorf("its first region starts at %q, not at the first row", k)
	}
	for i, r := range rs {
		start, end := r.GetStartKey(), r.GetEndKey()
		if i > 0 && !bytes.Equal(start, rs[i-1].GetEndKey()) {
			return fmt.Errorf("its region %d starts at %q, not where region %d ends (%q)", i, start, i-1, rs[i-1].GetEndKey())
		}
		switch {
		case i == len(rs)-1 && len(end) != 0:
			return fmt.Errorf("its last region (%d of %d) ends at %q, not at the last row", i, len(rs), end)
		case i < len(rs)-1 && len(end) == 0:
			return fmt.Errorf("its region %d of %d ends at the last row", i, len(rs))
		case len(end) != 0 && bytes.Compare(end, start) <= 0:
			return fmt.Errorf("its region %d ends at %q, not after its start %q", i, end, start)
		}
	}
	rtd, err := layout.RegionTableDescriptor(m.GetTable(), &pb.RegionInfo{Table: m.GetTable().GetName()})
	if err != nil {
		return fmt.Errorf("its table descriptor: %w", err)
	}
	for i, r := range rs {
		if err := region.CheckLinks(rtd, fileRefs(r)); err != nil {
			return fmt.Errorf("its region %d: %w", i, err)
		}
	}
	return nil
}

// fileRefs are the store files a snapshot's region names, as a region made of links to them
// names them.
func fileRefs(sr *pb.SnapshotRegion) []region.FileRef {
	var refs []region.FileRef
	for _, f := range sr.GetFiles() {
		refs = append(refs, region.FileRef{Family: f.GetFamily(), Path: f.GetPath(), Half: f.GetHalf(), SplitRow: f.GetSplitRow(),
			Top: f.GetTop(), Size: f.GetSize(), Entries: f.GetEntries(), MaxSeq: f.GetMaxSeq()})
	}
	return refs
}

// Materialize writes the directories of regions made of links to a snapshot's files: regions[i]
// (a primary of table td, with the boundaries of the snapshot's region i) links to the files of
// the snapshot's region i. It may run again after an interruption; the regions must not be open.
func Materialize(st region.Storage, m *pb.SnapshotManifest, td *pb.TableDescriptor, regions []*pb.RegionInfo) error {
	if len(regions) != len(m.GetRegions()) {
		return fmt.Errorf("snapshot %s has %d regions, %d given", m.GetName(), len(m.GetRegions()), len(regions))
	}
	for i, ri := range regions {
		sr := m.GetRegions()[i]
		if string(ri.GetStartKey()) != string(sr.GetStartKey()) || string(ri.GetEndKey()) != string(sr.GetEndKey()) {
			return fmt.Errorf("snapshot %s: region %d has other boundaries than %s", m.GetName(), i, ri.GetName())
		}
		rtd, err := layout.RegionTableDescriptor(td, ri)
		if err != nil {
			return err
		}
		if err := region.CreateLinked(st, rtd, layout.StorageInfo(ri), fileRefs(sr)); err != nil {
			return fmt.Errorf("snapshot %s: writing region %s: %w", m.GetName(), ri.GetName(), err)
		}
	}
	return nil
}
