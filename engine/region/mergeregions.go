package region

import (
	"bytes"
	"fmt"
)

// MergeClosed writes the region merged from two closed adjacent regions a and b (a's end key is
// b's start key; the master's merge step, on shared storage): its .regioninfo, a link to every
// store file of both and its manifest, written last, as CreateLinked does. merged's range is set
// here ([a.StartKey, b.EndKey)); its id and name are the caller's. The merged region reads the
// parents' files through its links until its first compaction rewrites them into its own (it asks
// for one when it opens); the parents' directories must stay until then. It is idempotent. It
// fails with ErrCannotMerge when the regions do not touch, either still holds references (a
// daughter of a split or a merge not compacted yet) or has edits that were never replayed
// (recovered.edits: open it first); nothing is written then.
func MergeClosed(st Storage, a, b, merged Info) (Info, error) {
	files := st.files()
	if len(a.EndKey) == 0 || !bytes.Equal(a.EndKey, b.StartKey) {
		return Info{}, fmt.Errorf("%w: regions %s (%q, %q) and %s (%q, %q) do not touch", ErrCannotMerge,
			a.EncodedName(), a.StartKey, a.EndKey, b.EncodedName(), b.StartKey, b.EndKey)
	}
	var table TableDescriptor
	for i, p := range []Info{a, b} {
		dir := p.Dir()
		_, t, err := readRegionInfo(files, dir)
		if err != nil {
			return Info{}, fmt.Errorf("region %s: %w", p.EncodedName(), err)
		}
		if i == 0 {
			table = t
		}
		man, _, _, err := readManifest(files, dir)
		if err != nil {
			return Info{}, fmt.Errorf("region %s: %w", p.EncodedName(), err)
		}
		if man.hasReferences() {
			return Info{}, fmt.Errorf("%w: region %s still reads reference files: it can merge once a compaction has rewritten them", ErrCannotMerge, p.EncodedName())
		}
		if err := man.checkNoHandoff(p.EncodedName(), ErrCannotMerge); err != nil {
			return Info{}, err
		}
		if err := checkRecoveredReplayed(files, dir, man, p.EncodedName(), ErrCannotMerge); err != nil {
			return Info{}, err
		}
	}
	var refs []FileRef
	for _, p := range []Info{a, b} {
		_, r, err := RegionFiles(st, p)
		if err != nil {
			return Info{}, err
		}
		refs = append(refs, r...)
	}
	merged.StartKey, merged.EndKey = bytes.Clone(a.StartKey), bytes.Clone(b.EndKey)
	merged.Parent = ""
	if err := createLinked(files, table, merged, refs, true); err != nil {
		return Info{}, fmt.Errorf("region %s: writing the merge of %s and %s: %w", merged.EncodedName(), a.EncodedName(), b.EncodedName(), err)
	}
	return merged, nil
}
