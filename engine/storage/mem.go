package storage

import (
	"fmt"
	"io"
	"io/fs"
	"math/rand/v2"
	"path"
	"slices"
	"sync"
	"time"
)

// Mem is an in-memory FS that models POSIX durability (see the package
// documentation): every file remembers how many of its bytes were synced,
// and every directory remembers its entries as of its last SyncDir.
// CrashClone builds the filesystem a power loss could leave.
type Mem struct {
	mu   sync.Mutex
	root *memNode
}

var _ FS = (*Mem)(nil)

type memNode struct {
	isDir   bool
	modTime time.Time

	// Files. Writes only append, and Truncate syncs, so the first synced
	// bytes of data never change: they are the durable content.
	data   []byte
	synced int

	// Directories: live entries and the entries as of the last SyncDir.
	children map[string]*memNode
	durable  map[string]*memNode
}

func newMemDir() *memNode {
	return &memNode{isDir: true, children: map[string]*memNode{}, durable: map[string]*memNode{}, modTime: time.Now()}
}

// NewMem returns an empty in-memory FS.
func NewMem() *Mem { return &Mem{root: newMemDir()} }

// lookup returns the node of a cleaned name and its parent. m.mu is held.
func (m *Mem) lookup(c string) (node, parent *memNode, base string, err error) {
	if c == "." {
		return m.root, nil, ".", nil
	}
	cur := m.root
	parts := splitPath(c)
	for i, p := range parts {
		if !cur.isDir {
			return nil, nil, "", fs.ErrNotExist
		}
		next := cur.children[p]
		if i == len(parts)-1 {
			return next, cur, p, nil
		}
		if next == nil {
			return nil, nil, "", fs.ErrNotExist
		}
		cur = next
	}
	return nil, nil, "", fs.ErrNotExist // unreachable
}

func (m *Mem) clean(op, name string) (string, error) {
	c, err := Clean(name)
	if err != nil {
		return "", &fs.PathError{Op: op, Path: name, Err: err}
	}
	return c, nil
}

func (m *Mem) Create(name string) (File, error) {
	c, err := m.clean("create", name)
	if err != nil {
		return nil, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	node, parent, base, err := m.lookup(c)
	if err != nil || parent == nil {
		if err == nil {
			err = fs.ErrExist // the root
		}
		return nil, &fs.PathError{Op: "create", Path: c, Err: err}
	}
	if !parent.isDir {
		return nil, &fs.PathError{Op: "create", Path: c, Err: fs.ErrNotExist}
	}
	if node != nil {
		return nil, &fs.PathError{Op: "create", Path: c, Err: fs.ErrExist}
	}
	n := &memNode{modTime: time.Now()}
	parent.children[base] = n
	return &memFile{fs: m, node: n, name: c}, nil
}

func (m *Mem) Open(name string) (ReadableFile, error) {
	c, err := m.clean("open", name)
	if err != nil {
		return nil, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	node, _, _, err := m.lookup(c)
	if err == nil && node == nil {
		err = fs.ErrNotExist
	}
	if err != nil {
		return nil, &fs.PathError{Op: "open", Path: c, Err: err}
	}
	if node.isDir {
		return nil, &fs.PathError{Op: "open", Path: c, Err: fmt.Errorf("is a directory")}
	}
	return &memReadFile{fs: m, node: node, name: c}, nil
}

func (m *Mem) List(dir string) ([]string, error) {
	c, err := m.clean("list", dir)
	if err != nil {
		return nil, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	node, _, _, err := m.lookup(c)
	if err == nil && node == nil {
		err = fs.ErrNotExist
	}
	if err != nil {
		return nil, &fs.PathError{Op: "list", Path: c, Err: err}
	}
	if !node.isDir {
		return nil, &fs.PathError{Op: "list", Path: c, Err: fmt.Errorf("not a directory")}
	}
	names := make([]string, 0, len(node.children))
	for n := range node.children {
		names = append(names, n)
	}
	slices.Sort(names)
	return names, nil
}

func (m *Mem) Stat(name string) (FileInfo, error) {
	c, err := m.clean("stat", name)
	if err != nil {
		return FileInfo{}, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	node, _, base, err := m.lookup(c)
	if err == nil && node == nil {
		err = fs.ErrNotExist
	}
	if err != nil {
		return FileInfo{}, &fs.PathError{Op: "stat", Path: c, Err: err}
	}
	return FileInfo{Name: base, Size: int64(len(node.data)), IsDir: node.isDir, ModTime: node.modTime}, nil
}

func (m *Mem) Rename(oldname, newname string) error {
	oc, err := m.clean("rename", oldname)
	if err != nil {
		return err
	}
	nc, err := m.clean("rename", newname)
	if err != nil {
		return err
	}
	linkErr := func(err error) error { return &linkError{op: "rename", old: oc, new: nc, err: err} }
	m.mu.Lock()
	defer m.mu.Unlock()
	node, oparent, obase, err := m.lookup(oc)
	if err == nil && (node == nil || oparent == nil) {
		err = fs.ErrNotExist
	}
	if err != nil {
		return linkErr(err)
	}
	target, nparent, nbase, err := m.lookup(nc)
	if err == nil && (nparent == nil || !nparent.isDir) {
		err = fs.ErrNotExist
	}
	if err != nil {
		return linkErr(err)
	}
	if oc == nc {
		return nil
	}
	if node.isDir && (nc == oc || len(nc) > len(oc) && nc[:len(oc)+1] == oc+"/") {
		return linkErr(fmt.Errorf("cannot move a directory into itself"))
	}
	if target != nil {
		if target.isDir || node.isDir {
			return linkErr(fs.ErrExist)
		}
	}
	delete(oparent.children, obase)
	nparent.children[nbase] = node
	return nil
}

func (m *Mem) Remove(name string) error {
	c, err := m.clean("remove", name)
	if err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	node, parent, base, err := m.lookup(c)
	if err == nil && node == nil {
		err = fs.ErrNotExist
	}
	if err == nil && parent == nil {
		err = fmt.Errorf("%w: refusing to remove the root", ErrInvalidPath)
	}
	if err == nil && node.isDir && len(node.children) > 0 {
		err = fmt.Errorf("directory not empty")
	}
	if err != nil {
		return &fs.PathError{Op: "remove", Path: c, Err: err}
	}
	delete(parent.children, base)
	return nil
}

func (m *Mem) RemoveAll(name string) error {
	c, err := m.clean("removeall", name)
	if err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if c == "." {
		return &fs.PathError{Op: "removeall", Path: c, Err: fmt.Errorf("%w: refusing to remove the root", ErrInvalidPath)}
	}
	node, parent, base, err := m.lookup(c)
	if err != nil || node == nil {
		return nil
	}
	delete(parent.children, base)
	return nil
}

func (m *Mem) MkdirAll(dir string) error {
	c, err := m.clean("mkdir", dir)
	if err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	cur := m.root
	for _, p := range splitPath(c) {
		next := cur.children[p]
		if next == nil {
			next = newMemDir()
			cur.children[p] = next
			cur.durable[p] = next // MkdirAll is durable on return
		} else if !next.isDir {
			return &fs.PathError{Op: "mkdir", Path: c, Err: fmt.Errorf("%s is not a directory", p)}
		}
		cur = next
	}
	return nil
}

func (m *Mem) Truncate(name string, size int64) error {
	c, err := m.clean("truncate", name)
	if err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	node, _, _, err := m.lookup(c)
	if err == nil && node == nil {
		err = fs.ErrNotExist
	}
	if err == nil && node.isDir {
		err = fmt.Errorf("is a directory")
	}
	if err == nil && size < 0 {
		err = fmt.Errorf("negative size %d", size)
	}
	if err != nil {
		return &fs.PathError{Op: "truncate", Path: c, Err: err}
	}
	if size <= int64(len(node.data)) {
		// Copy: the old backing array may be shared with a crash clone
		// or an earlier synced view.
		node.data = slices.Clone(node.data[:size])
	} else {
		node.data = append(node.data, make([]byte, size-int64(len(node.data)))...)
	}
	node.synced = len(node.data)
	node.modTime = time.Now()
	return nil
}

func (m *Mem) SyncDir(dir string) error {
	c, err := m.clean("syncdir", dir)
	if err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	node, _, _, err := m.lookup(c)
	if err == nil && node == nil {
		err = fs.ErrNotExist
	}
	if err == nil && !node.isDir {
		err = fmt.Errorf("not a directory")
	}
	if err != nil {
		return &fs.PathError{Op: "syncdir", Path: c, Err: err}
	}
	node.durable = make(map[string]*memNode, len(node.children))
	for k, v := range node.children {
		node.durable[k] = v
	}
	return nil
}

// CrashOptions tunes CrashClone.
type CrashOptions struct {
	// Rand, when set, keeps a random part of each file's unsynced tail
	// (possibly zero-filled), the way a power loss can persist some
	// written-but-unsynced pages. Without it every unsynced byte is lost.
	Rand *rand.Rand
	// Pages, with Rand, keeps instead each 4 KiB page of the unsynced tail
	// (by file offset; the first one from the synced end) or not,
	// independently, a lost page reading as zeros, and ends the file after
	// a random page of it: the order in which a disk may persist pages
	// overwritten in place (blocks written ahead with zeros, the block a
	// write continues), where a later page can survive an earlier one.
	Pages bool
}

// CrashPage is the page size of CrashOptions.Pages.
const CrashPage = 4096

// CrashClone returns a new Mem holding what a power loss could leave of m:
// only the directory entries as of each directory's last sync, and only the
// synced bytes of each file (see CrashOptions). m is unchanged.
func (m *Mem) CrashClone(opts CrashOptions) *Mem {
	m.mu.Lock()
	defer m.mu.Unlock()
	seen := map[*memNode]*memNode{} // hard links through unsynced renames
	var clone func(n *memNode) *memNode
	clone = func(n *memNode) *memNode {
		if c, ok := seen[n]; ok {
			return c
		}
		if n.isDir {
			c := newMemDir()
			c.modTime = n.modTime
			seen[n] = c
			for name, child := range n.durable {
				cc := clone(child)
				c.children[name] = cc
				c.durable[name] = cc
			}
			return c
		}
		c := &memNode{data: crashData(n.data, n.synced, opts), modTime: n.modTime}
		c.synced = len(c.data)
		seen[n] = c
		return c
	}
	return &Mem{root: clone(m.root)}
}

// crashData is what a power loss could leave of a file's data of which the first synced bytes
// were synced (see CrashOptions).
func crashData(data []byte, synced int, opts CrashOptions) []byte {
	r := opts.Rand
	if r == nil || len(data) == synced {
		return slices.Clone(data[:synced])
	}
	if opts.Pages {
		var pages [][2]int // [from, to) of each unsynced page
		for from := synced; from < len(data); {
			to := min((from/CrashPage+1)*CrashPage, len(data))
			pages = append(pages, [2]int{from, to})
			from = to
		}
		out := slices.Clone(data[:synced])
		for _, p := range pages[:r.IntN(len(pages)+1)] {
			if r.IntN(2) == 0 {
				out = append(out, data[p[0]:p[1]]...)
			} else {
				out = append(out, make([]byte, p[1]-p[0])...)
			}
		}
		return out
	}
	keep, zero := synced, 0
	extra := len(data) - synced
	switch r.IntN(3) {
	case 1:
		keep += r.IntN(extra + 1)
	case 2:
		k := r.IntN(extra + 1)
		keep += k
		zero = r.IntN(k + 1) // the last `zero` kept bytes read as zeros
	}
	out := slices.Clone(data[:keep])
	clear(out[len(out)-zero:])
	return out
}

// String lists the tree with file sizes (synced/total), for test failures.
func (m *Mem) String() string {
	m.mu.Lock()
	defer m.mu.Unlock()
	var b []byte
	var walk func(prefix string, n *memNode)
	walk = func(prefix string, n *memNode) {
		names := make([]string, 0, len(n.children))
		for k := range n.children {
			names = append(names, k)
		}
		slices.Sort(names)
		for _, k := range names {
			c := n.children[k]
			p := path.Join(prefix, k)
			if c.isDir {
				b = fmt.Appendf(b, "%s/\n", p)
				walk(p, c)
			} else {
				b = fmt.Appendf(b, "%s %d/%d\n", p, c.synced, len(c.data))
			}
		}
	}
	walk("", m.root)
	return string(b)
}

type memFile struct {
	fs     *Mem
	node   *memNode
	name   string
	closed bool
}

func (f *memFile) Name() string { return f.name }

func (f *memFile) Write(p []byte) (int, error) {
	f.fs.mu.Lock()
	defer f.fs.mu.Unlock()
	if f.closed {
		return 0, &fs.PathError{Op: "write", Path: f.name, Err: fs.ErrClosed}
	}
	d := f.node.data
	if need := len(d) + len(p); need > cap(d) {
		// Double (append grows large slices by only 1.25x): writing a file
		// of n bytes then copies at most about n bytes in total, which
		// keeps flushes of big memstores in tests and benchmarks cheap.
		grown := make([]byte, len(d), max(need, 2*cap(d)))
		copy(grown, d)
		d = grown
	}
	f.node.data = append(d, p...)
	f.node.modTime = time.Now()
	return len(p), nil
}

func (f *memFile) Sync() error {
	f.fs.mu.Lock()
	defer f.fs.mu.Unlock()
	if f.closed {
		return &fs.PathError{Op: "sync", Path: f.name, Err: fs.ErrClosed}
	}
	f.node.synced = len(f.node.data)
	return nil
}

func (f *memFile) Close() error {
	f.fs.mu.Lock()
	defer f.fs.mu.Unlock()
	if f.closed {
		return &fs.PathError{Op: "close", Path: f.name, Err: fs.ErrClosed}
	}
	f.closed = true
	return nil
}

type memReadFile struct {
	fs     *Mem
	node   *memNode
	name   string
	closed bool
}

func (r *memReadFile) ReadAt(p []byte, off int64) (int, error) {
	r.fs.mu.Lock()
	defer r.fs.mu.Unlock()
	if r.closed {
		return 0, &fs.PathError{Op: "read", Path: r.name, Err: fs.ErrClosed}
	}
	if off < 0 {
		return 0, &fs.PathError{Op: "read", Path: r.name, Err: fmt.Errorf("negative offset %d", off)}
	}
	if off >= int64(len(r.node.data)) {
		return 0, io.EOF
	}
	n := copy(p, r.node.data[off:])
	if n < len(p) {
		return n, io.EOF
	}
	return n, nil
}

func (r *memReadFile) Size() (int64, error) {
	r.fs.mu.Lock()
	defer r.fs.mu.Unlock()
	return int64(len(r.node.data)), nil
}

func (r *memReadFile) Close() error {
	r.fs.mu.Lock()
	defer r.fs.mu.Unlock()
	if r.closed {
		return &fs.PathError{Op: "close", Path: r.name, Err: fs.ErrClosed}
	}
	r.closed = true
	return nil
}

// linkError is os.LinkError without importing os into the in-memory FS.
type linkError struct {
	op, old, new string
	err          error
}

func (e *linkError) Error() string { return e.op + " " + e.old + " " + e.new + ": " + e.err.Error() }
func (e *linkError) Unwrap() error { return e.err }
