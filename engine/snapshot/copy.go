package snapshot

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"io/fs"
	"path"
	"slices"
	"strings"
	"sync"
	"sync/atomic"

	pb "github.com/cellstore/cellstore/engine/api/cellstore/v1"
	"github.com/cellstore/cellstore/engine/region"
)

// Export and import (HBase's ExportSnapshot): a snapshot's files and manifest copied from one root
// to another — a cluster's storage, a backup bucket or prefix, a directory. Both ends have the
// same layout: the files go to archive/<path> at the destination and the manifest to
// snapshots/<name>/manifest, written last, so a copy that stops midway is no snapshot there. At a
// cluster's root that is all a snapshot needs (a clone or restore reads files from archive/ when
// data/ has none, and the cleaner keeps what a manifest names), so importing into a cluster is
// the same copy the other way.

// CopyOptions tune Copy.
type CopyOptions struct {
	// Parallel is the number of files copied at once (default 4).
	Parallel int
	// Progress, when set, is called after every file (from several goroutines, one at a time).
	Progress func(CopyProgress)
}

// CopyProgress says how far a copy is.
type CopyProgress struct {
	Files, FilesTotal int
	// Skipped: files the destination had already (an earlier copy of this or another snapshot).
	Skipped int
	// Bytes copied (or found at the destination) so far, of BytesTotal: the sizes of the files
	// opened so far (a file's size is known once it is opened).
	Bytes, BytesTotal int64
}

// ErrDestinationConflict: the destination holds another file at the path a copied file goes to.
var ErrDestinationConflict = errors.New("snapshot: the destination holds another file at that path")

// ErrVerify: a copied file read back from the destination differs from what was read from the
// source.
var ErrVerify = errors.New("snapshot: copy verification failed")

// Copy copies snapshot name from src to dst: every file its manifest names (found at its path or
// under archive/) to archive/<path> at dst, checked by CRC32C of what was read against a second
// read of what was written, then the manifest. Files dst has already with the same size are not
// copied again (files never change, and a copy becomes visible only whole); one of another size
// fails the copy (ErrDestinationConflict) and stays. A snapshot of that name at dst that is
// another snapshot is refused.
func Copy(ctx context.Context, src, dst region.Storage, name string, opts CopyOptions) (CopyProgress, error) {
	if err := CheckName(name); err != nil {
		return CopyProgress{}, err
	}
	key := ManifestKey(name)
	body, err := src.ReadObject(key)
	if err != nil {
		return CopyProgress{}, fmt.Errorf("reading snapshot %s: %w", name, err)
	}
	man, err := Decode(body)
	if err == nil {
		err = checkNamed(man, name)
	}
	if err != nil {
		return CopyProgress{}, fmt.Errorf("snapshot %s: %w", name, err)
	}
	if have, err := dst.ReadObject(key); err == nil {
		if !bytes.Equal(have, body) {
			return CopyProgress{}, fmt.Errorf("the destination has another snapshot named %s: delete it there or copy under another name", name)
		}
	} else if !errors.Is(err, fs.ErrNotExist) {
		return CopyProgress{}, err
	}
	// Announce the copy, then wait for a prune under way (intent.go).
	in, err := beginIntent(dst, intentCopy, "copy of snapshot "+name)
	if err != nil {
		return CopyProgress{}, err
	}
	defer in.end()
	if err := waitNoPrune(ctx, dst); err != nil {
		return CopyProgress{}, err
	}
	paths := Paths(man)
	slices.Sort(paths)
	paths = slices.Compact(paths)
	sizes := fileSizes(man)
	var prog CopyProgress
	prog.FilesTotal = len(paths)
	var mu sync.Mutex
	report := func(f func(*CopyProgress)) {
		mu.Lock()
		defer mu.Unlock()
		f(&prog)
		if opts.Progress != nil {
			opts.Progress(prog)
		}
	}
	parallel := opts.Parallel
	if parallel <= 0 {
		parallel = 4
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	work := make(chan string)
	var firstErr atomic.Pointer[error]
	var wg sync.WaitGroup
	for range parallel {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for p := range work {
				n, skipped, err := copyFile(ctx, src, dst, p, sizes[p], func(total int64) { report(func(c *CopyProgress) { c.BytesTotal += total }) })
				if err != nil {
					firstErr.CompareAndSwap(nil, &err)
					cancel()
					continue
				}
				report(func(c *CopyProgress) {
					c.Files++
					c.Bytes += n
					if skipped {
						c.Skipped++
					}
				})
			}
		}()
	}
	for _, p := range paths {
		if ctx.Err() != nil {
			break
		}
		work <- p
	}
	close(work)
	wg.Wait()
	if e := firstErr.Load(); e != nil {
		return prog, *e
	}
	if err := ctx.Err(); err != nil {
		return prog, err
	}
	if err := in.confirm(); err != nil {
		return prog, fmt.Errorf("copying snapshot %s: %w", name, err)
	}
	if err := dst.WriteObject(key, body, false); err != nil {
		return prog, fmt.Errorf("writing snapshot %s's manifest: %w", name, err)
	}
	return prog, nil
}

// fileSizes are the sizes the manifest records of whole store files (a half of a split parent
// records an estimate, and manifests of earlier releases may record none).
func fileSizes(man *pb.SnapshotManifest) map[string]int64 {
	sizes := map[string]int64{}
	for _, r := range man.GetRegions() {
		for _, f := range r.GetFiles() {
			if !f.GetHalf() && f.GetSize() > 0 {
				sizes[f.GetPath()] = f.GetSize()
			}
		}
	}
	return sizes
}

// copyFile copies one data file to archive/<p> at dst (unless it is there) and verifies it; want
// is the file's size the manifest records (0: none).
func copyFile(ctx context.Context, src, dst region.Storage, p string, want int64, sized func(int64)) (n int64, skipped bool, err error) {
	from := p
	f, err := src.OpenObject(p)
	if errors.Is(err, fs.ErrNotExist) {
		from = path.Join("archive", p)
		f, err = src.OpenObject(from)
	}
	if err != nil {
		return 0, false, fmt.Errorf("reading %s: %w", p, err)
	}
	defer f.Close()
	size, err := f.Size()
	if err != nil {
		return 0, false, err
	}
	if want > 0 && size != want {
		// Files never change: this is not the file the snapshot took (truncated or replaced).
		return 0, false, fmt.Errorf("%w: %s is %d bytes, the snapshot's manifest says %d: it is not the file the snapshot took; the snapshot cannot be copied whole", ErrVerify, from, size, want)
	}
	sized(size)
	to := path.Join("archive", p)
	if have, err := dst.StatObject(to); err == nil && have == size {
		return size, true, nil
	} else if err == nil {
		// A file of another size at its name is not this one (files never change, and WriteStream
		// puts a file at its name only whole): it belongs to something else at the destination —
		// a table or snapshot there may read it — and is left as it is.
		return 0, false, fmt.Errorf("%w: the destination already holds a different file at %s (%d bytes; the snapshot's %s is %d): "+
			"nothing was replaced. Check that the source and the destination belong together (a snapshot of another cluster whose file paths are the same, or a manifest naming files that are not its own)",
			ErrDestinationConflict, to, have, from, size)
	} else if !errors.Is(err, fs.ErrNotExist) {
		return 0, false, err
	}
	h := crc32.New(castagnoli)
	r := io.TeeReader(&ctxReader{ctx: ctx, r: io.NewSectionReader(f, 0, size)}, h)
	if n, err = dst.WriteStream(ctx, to, r); err != nil {
		return n, false, fmt.Errorf("copying %s to %s: %w", from, to, err)
	}
	if n != size {
		_ = dst.DeleteObject(to) // this copy's (there was none before it): a later copy writes it whole
		return n, false, fmt.Errorf("copying %s: read %d bytes of %d", from, n, size)
	}
	// Read back what the destination holds.
	g, err := dst.OpenObject(to)
	if err != nil {
		return n, false, err
	}
	defer g.Close()
	h2 := crc32.New(castagnoli)
	m, err := io.CopyBuffer(h2, &ctxReader{ctx: ctx, r: io.NewSectionReader(g, 0, size+1)}, make([]byte, 4<<20))
	if err != nil {
		return n, false, fmt.Errorf("verifying %s: %w", to, err)
	}
	if m != size || h.Sum32() != h2.Sum32() {
		err := fmt.Errorf("%w: %s: %d bytes CRC32C %08x read, %d bytes CRC32C %08x at the destination", ErrVerify, p, size, h.Sum32(), m, h2.Sum32())
		if derr := dst.DeleteObject(to); derr != nil {
			// Left in place, a later copy would find a file of the right size there and skip it.
			return n, false, fmt.Errorf("%w; deleting the damaged copy failed too, delete %s at the destination by hand before copying again: %w", err, to, derr)
		}
		return n, false, err
	}
	return n, false, nil
}

// ctxReader stops a long copy when its context ends.
type ctxReader struct {
	ctx context.Context
	r   io.Reader
}

func (c *ctxReader) Read(p []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	return c.r.Read(p)
}

// ReadFrom lists the snapshots at a root (a cluster's storage or a backup location).
func ReadFrom(st region.Storage) ([]*pb.SnapshotDescription, error) {
	var out []*pb.SnapshotDescription
	bad, err := Walk(st, func(m *pb.SnapshotManifest) error {
		out = append(out, Describe(m))
		return nil
	})
	if err != nil {
		return nil, err
	}
	for key, err := range bad {
		return nil, fmt.Errorf("%s: %w", key, err)
	}
	slices.SortFunc(out, func(a, b *pb.SnapshotDescription) int { return strings.Compare(a.GetName(), b.GetName()) })
	return out, nil
}

// Prune deletes the files under archive/data at a backup location that no snapshot there names
// (after a snapshot was deleted from it). When a copy to the location is under way (from this
// process or another: intent.go) it deletes nothing and fails with ErrCopyUnderway; the files stay
// for the next prune.
func Prune(st region.Storage) (int, error) {
	ex, err := ExcludeCopies(st, "prune of unreferenced files")
	if err != nil {
		if errors.Is(err, ErrCopyUnderway) {
			err = fmt.Errorf("%w: unreferenced files stay until the next prune", err)
		}
		return 0, err
	}
	defer ex.End()
	// The files the snapshots name, a manifest at a time (hourly backups kept for a month name
	// mostly the same files hundreds of times).
	keep := map[string]bool{}
	bad, err := Walk(st, func(m *pb.SnapshotManifest) error {
		for _, p := range Paths(m) {
			keep[path.Join("archive", p)] = true
		}
		return nil
	})
	if err != nil {
		return 0, err
	}
	for key, err := range bad {
		return 0, fmt.Errorf("snapshot manifest %s cannot be read (%v): nothing is pruned until it is repaired or deleted", key, err)
	}
	n := 0
	err = st.WalkFiles("archive/data", func(p string) error {
		if keep[p] {
			return nil
		}
		if err := ex.Check(); err != nil {
			return err
		}
		n++
		return st.DeleteObject(p)
	})
	return n, err
}
