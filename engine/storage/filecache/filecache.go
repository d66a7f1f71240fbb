// Package filecache keeps ranges of immutable objects (store files in a bucket) in files on a
// pod-local disk, so that reads that miss the block caches in memory cost a local read instead of
// a GET — the role of the file engine of HBase's bucket cache, for stores whose files are in S3.
//
// An entry is one range of one version of an object (its key and ETag): the range a reader asked
// for (a block, the trailer, an index), or the whole object for objects up to PrefetchBelow, which
// are fetched whole when opened. An entry's file holds a header, a CRC-32C per 64 KiB chunk and the
// bytes; a read checks the chunks it touches, and an entry that fails its check is dropped and
// read again from the bucket. The cache is a least-recently-used set bounded by Capacity bytes of
// files; on Open it takes back the entries a previous process left (a container restart keeps an
// emptyDir), oldest first.
//
// The cache never fails a read: a cache disk that is full or failing is counted
// (cellstore_filecache_errors_total) and the read goes to the bucket.
package filecache

import (
	"container/list"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/cellstore/cellstore/engine/storage"
)

// Config configures a Cache.
type Config struct {
	// Dir holds the cache's files (created; only the cache writes there).
	Dir string
	// Capacity bounds the disk space of the cache's files (counted in whole 4 KiB blocks).
	Capacity int64
	// PrefetchBelow: objects up to this size are read whole when opened (default 4 MiB; < 0: never).
	PrefetchBelow int64
	// MaxEntry bounds one cached range (default 16 MiB); larger reads bypass the cache.
	MaxEntry int64
	// Registerer, if set, receives the cellstore_filecache_* metrics.
	Registerer prometheus.Registerer
}

const (
	chunkSize   = 64 << 10
	magic       = 0x43534643 // "CSFC"
	headerSize  = 16         // magic, chunk size, data length
	tempPrefix  = "tmp-"
	entrySuffix = ".fc"
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// Cache is a file cache of object ranges. Safe for concurrent use.
type Cache struct {
	cfg Config
	m   *metrics

	mu      sync.Mutex
	entries map[string]*list.Element // by entry name; values *entry
	lru     *list.List               // front: most recently used
	used    int64
}

type entry struct {
	name string
	size int64 // bytes of the file on disk (onDisk)
}

// blockSize is what a file occupies at least, as the kubelet counts an emptyDir's use (blocks, not
// bytes): a cache of many small entries (trailers, small index reads) must not pass the volume's
// size limit, over which the pod is evicted.
const blockSize = 4096

// onDisk is the space a file of n bytes takes: whole blocks.
func onDisk(n int64) int64 { return (n + blockSize - 1) / blockSize * blockSize }

// Open opens (creating) the cache directory and takes back the entries found there.
func Open(cfg Config) (*Cache, error) {
	if cfg.Dir == "" || cfg.Capacity <= 0 {
		return nil, errors.New("filecache: a directory and a capacity above zero are required")
	}
	if cfg.PrefetchBelow == 0 {
		cfg.PrefetchBelow = 4 << 20
	}
	if cfg.MaxEntry <= 0 {
		cfg.MaxEntry = 16 << 20
	}
	if err := os.MkdirAll(cfg.Dir, 0o755); err != nil {
		return nil, fmt.Errorf("filecache: %w", err)
	}
	c := &Cache{cfg: cfg, m: newMetrics(cfg.Registerer), entries: map[string]*list.Element{}, lru: list.New()}
	type found struct {
		name string
		size int64
		mod  int64
	}
	var all []found
	err := filepath.WalkDir(cfg.Dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		if strings.HasPrefix(d.Name(), tempPrefix) || !strings.HasSuffix(d.Name(), entrySuffix) {
			_ = os.Remove(p) // a write cut short by a crash
			return nil
		}
		fi, err := d.Info()
		if err != nil {
			return nil
		}
		all = append(all, found{name: d.Name(), size: onDisk(fi.Size()), mod: fi.ModTime().UnixNano()})
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("filecache: scanning %s: %w", cfg.Dir, err)
	}
	sort.Slice(all, func(i, j int) bool { return all[i].mod < all[j].mod })
	for _, f := range all { // oldest first: each goes to the front
		c.entries[f.name] = c.lru.PushFront(&entry{name: f.name, size: f.size})
		c.used += f.size
	}
	c.mu.Lock()
	victims := c.evictLocked() // a smaller capacity than the last process had
	c.mu.Unlock()
	c.remove(victims)
	c.m.used.Set(float64(c.used))
	return c, nil
}

// Used returns the bytes of the cache's files.
func (c *Cache) Used() int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.used
}

// Len returns the number of entries.
func (c *Cache) Len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.entries)
}

// Collectors returns the cache's metrics (for a registry that Config.Registerer was not).
func (c *Cache) Collectors() []prometheus.Collector { return c.m.all() }

func (c *Cache) path(name string) string { return filepath.Join(c.cfg.Dir, name[:2], name) }

// entryName names the range [off, off+n) of the object version id (n < 0: the whole object).
func entryName(id string, off, n int64) string {
	r := "all"
	if n >= 0 {
		r = strconv.FormatInt(off, 16) + "-" + strconv.FormatInt(n, 16)
	}
	return id + "-" + r + entrySuffix
}

// objectID names an object version: its key and ETag, hashed.
func objectID(key, etag string) string {
	h := sha256.Sum256([]byte(key + "\x00" + etag))
	return hex.EncodeToString(h[:16])
}

// read copies the entry's bytes at off into p; false when the entry is missing, shorter than
// off+len(p) or damaged (then it is dropped).
func (c *Cache) read(name string, p []byte, off int64) bool {
	c.mu.Lock()
	el, ok := c.entries[name]
	if ok {
		c.lru.MoveToFront(el)
	}
	c.mu.Unlock()
	if !ok {
		return false
	}
	err := c.readFile(name, p, off)
	if err == nil {
		return true
	}
	if !errors.Is(err, fs.ErrNotExist) {
		c.m.errors.Inc()
	}
	c.drop(name)
	return false
}

func (c *Cache) readFile(name string, p []byte, off int64) error {
	f, err := os.Open(c.path(name))
	if err != nil {
		return err
	}
	defer f.Close()
	var h [headerSize]byte
	if _, err := f.ReadAt(h[:], 0); err != nil {
		return err
	}
	if binary.LittleEndian.Uint32(h[0:]) != magic || binary.LittleEndian.Uint32(h[4:]) != chunkSize {
		return errors.New("filecache: bad header")
	}
	size := int64(binary.LittleEndian.Uint64(h[8:]))
	if off < 0 || off+int64(len(p)) > size {
		return errors.New("filecache: range outside the entry")
	}
	if len(p) == 0 {
		return nil
	}
	chunks := (size + chunkSize - 1) / chunkSize
	first, last := off/chunkSize, (off+int64(len(p))-1)/chunkSize
	sums := make([]byte, 4*(last-first+1))
	if _, err := f.ReadAt(sums, headerSize+4*first); err != nil {
		return err
	}
	dataStart := headerSize + 4*chunks
	lo, hi := first*chunkSize, min((last+1)*chunkSize, size)
	buf := make([]byte, hi-lo)
	if _, err := f.ReadAt(buf, dataStart+lo); err != nil {
		return err
	}
	for i := first; i <= last; i++ {
		b := buf[(i-first)*chunkSize : min((i-first+1)*chunkSize, int64(len(buf)))]
		if crc32.Checksum(b, castagnoli) != binary.LittleEndian.Uint32(sums[4*(i-first):]) {
			return fmt.Errorf("filecache: %s: chunk %d fails its checksum", name, i)
		}
	}
	copy(p, buf[off-lo:])
	return nil
}

// put stores data as the entry name (a failure is counted, never returned).
func (c *Cache) put(name string, data []byte) {
	if int64(len(data)) > c.cfg.MaxEntry {
		return
	}
	c.mu.Lock()
	_, exists := c.entries[name]
	c.mu.Unlock()
	if exists {
		return
	}
	chunks := (int64(len(data)) + chunkSize - 1) / chunkSize
	buf := make([]byte, headerSize+4*chunks+int64(len(data)))
	binary.LittleEndian.PutUint32(buf[0:], magic)
	binary.LittleEndian.PutUint32(buf[4:], chunkSize)
	binary.LittleEndian.PutUint64(buf[8:], uint64(len(data)))
	for i := int64(0); i < chunks; i++ {
		b := data[i*chunkSize : min((i+1)*chunkSize, int64(len(data)))]
		binary.LittleEndian.PutUint32(buf[headerSize+4*i:], crc32.Checksum(b, castagnoli))
	}
	copy(buf[headerSize+4*chunks:], data)
	size := onDisk(int64(len(buf)))
	if size > c.cfg.Capacity {
		return
	}
	// Make room first, so that the disk holds at most Capacity bytes of entries.
	c.mu.Lock()
	c.used += size
	victims := c.evictLocked()
	c.mu.Unlock()
	c.remove(victims)
	if err := c.writeFile(name, buf); err != nil {
		c.m.errors.Inc()
		c.mu.Lock()
		c.used -= size
		c.mu.Unlock()
		c.m.used.Set(float64(c.Used()))
		return
	}
	c.mu.Lock()
	if _, ok := c.entries[name]; ok { // another reader cached it meanwhile: same bytes, one file
		c.used -= size
	} else {
		c.entries[name] = c.lru.PushFront(&entry{name: name, size: size})
	}
	used := c.used
	c.mu.Unlock()
	c.m.used.Set(float64(used))
}

// writeFile writes an entry by a temporary file and a rename: a reader never sees half of one.
// Not synced: a crash may lose entries or leave damaged ones, which their checksums catch.
func (c *Cache) writeFile(name string, buf []byte) error {
	dir := filepath.Dir(c.path(name))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	f, err := os.CreateTemp(dir, tempPrefix)
	if err != nil {
		return err
	}
	_, err = f.Write(buf)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(f.Name(), c.path(name))
	}
	if err != nil {
		_ = os.Remove(f.Name())
	}
	return err
}

// evictLocked takes least recently used entries out until the files fit Capacity, returning their
// names for removal outside the lock.
func (c *Cache) evictLocked() []string {
	var victims []string
	for c.used > c.cfg.Capacity && c.lru.Len() > 0 {
		e := c.lru.Remove(c.lru.Back()).(*entry)
		delete(c.entries, e.name)
		c.used -= e.size
		victims = append(victims, e.name)
	}
	c.m.evictions.Add(float64(len(victims)))
	return victims
}

func (c *Cache) remove(names []string) {
	for _, n := range names {
		if err := os.Remove(c.path(n)); err != nil && !errors.Is(err, fs.ErrNotExist) {
			c.m.errors.Inc()
		}
	}
}

func (c *Cache) drop(name string) {
	c.mu.Lock()
	el, ok := c.entries[name]
	if ok {
		c.lru.Remove(el)
		delete(c.entries, name)
		c.used -= el.Value.(*entry).size
	}
	used := c.used
	c.mu.Unlock()
	if ok {
		c.remove([]string{name})
	}
	c.m.used.Set(float64(used))
}

// OpenObject opens the object at key for random reads through the cache. An object up to
// PrefetchBelow is read whole now (one GET) unless the cache holds it already.
func (c *Cache) OpenObject(ctx context.Context, b storage.Bucket, key string) (storage.ReadableFile, error) {
	info, err := b.Stat(ctx, key)
	if err != nil {
		return nil, storage.NotExist(err)
	}
	r := &reader{c: c, b: b, key: key, size: info.Size, id: objectID(key, info.ETag)}
	if info.Size <= c.cfg.PrefetchBelow && info.Size <= c.cfg.MaxEntry {
		r.whole = entryName(r.id, 0, -1)
		c.mu.Lock()
		_, cached := c.entries[r.whole]
		c.mu.Unlock()
		// A cached object counts nothing here: each ReadAt counts its own hit.
		if !cached {
			data, got, err := b.Get(ctx, key)
			if err != nil {
				return nil, storage.NotExist(err)
			}
			c.fetchedWhole(len(data)) // fetched, cached or not
			if got.ETag != info.ETag && got.ETag != "" && info.ETag != "" {
				// Replaced between the Stat and the Get (store files never are): do not cache.
				r.whole = ""
			} else {
				c.put(r.whole, data)
			}
		}
	}
	return r, nil
}

// fetchedWhole counts an object of n bytes fetched whole on open: a miss and its bytes.
func (c *Cache) fetchedWhole(n int) {
	c.m.misses.Inc()
	c.m.fetched.Add(float64(n))
}

// PrefetchBelow is the size up to which objects are cached whole when opened.
func (c *Cache) PrefetchBelow() int64 { return c.cfg.PrefetchBelow }

// OpenWritten opens an object this process has just written (info from the write, data its bytes
// when the writer kept them): no request is made. The bytes of an object up to PrefetchBelow are
// cached whole, as OpenObject would fetch them; without them (or an ETag to name the version) the
// object is opened as OpenObject does.
func (c *Cache) OpenWritten(ctx context.Context, b storage.Bucket, info storage.ObjectInfo, data []byte) (storage.ReadableFile, error) {
	if info.ETag == "" || (data != nil && int64(len(data)) != info.Size) {
		return c.OpenObject(ctx, b, info.Key)
	}
	r := &reader{c: c, b: b, key: info.Key, size: info.Size, id: objectID(info.Key, info.ETag)}
	if data != nil && info.Size <= c.cfg.PrefetchBelow && info.Size <= c.cfg.MaxEntry {
		r.whole = entryName(r.id, 0, -1)
		c.put(r.whole, data)
	}
	return r, nil
}

// smallObject bounds the objects OpenSmall reads by one GET: a GET of this much costs about what a
// HEAD does, so a cache that already held the object (it cannot be looked up without the object's
// ETag) loses little by fetching it again.
const smallObject = 256 << 10

// OpenSmall opens an object the caller expects to be small (sizeHint, from its own records) with
// one GET of the whole object instead of OpenObject's HEAD and GET. What the GET returns is what
// is read, whatever the hint said; a hint of 0 or above smallObject (or PrefetchBelow) opens the
// object as OpenObject does.
func (c *Cache) OpenSmall(ctx context.Context, b storage.Bucket, key string, sizeHint int64) (storage.ReadableFile, error) {
	if sizeHint <= 0 || sizeHint > smallObject || sizeHint > c.cfg.PrefetchBelow || sizeHint > c.cfg.MaxEntry {
		return c.OpenObject(ctx, b, key)
	}
	data, info, err := b.Get(ctx, key)
	if err != nil {
		return nil, storage.NotExist(err)
	}
	c.fetchedWhole(len(data))
	info.Key, info.Size = key, int64(len(data))
	return c.OpenWritten(ctx, b, info, data)
}

// reader reads one object version through the cache.
type reader struct {
	c     *Cache
	b     storage.Bucket
	key   string
	id    string
	size  int64
	whole string // the whole-object entry's name, for a prefetched object
}

func (r *reader) ReadAt(p []byte, off int64) (int, error) {
	if off < 0 {
		return 0, fmt.Errorf("filecache: %s: negative offset %d", r.key, off)
	}
	if off >= r.size {
		return 0, io.EOF
	}
	n := min(int64(len(p)), r.size-off)
	q := p[:n]
	if r.whole != "" && r.c.read(r.whole, q, off) {
		r.c.m.hits.Inc()
		return r.done(len(q), len(p))
	}
	name := entryName(r.id, off, n)
	if r.c.read(name, q, 0) {
		r.c.m.hits.Inc()
		return r.done(len(q), len(p))
	}
	r.c.m.misses.Inc()
	data, err := r.b.GetRange(context.Background(), r.key, off, n)
	if err != nil {
		return 0, storage.NotExist(err)
	}
	r.c.m.fetched.Add(float64(len(data)))
	m := copy(q, data)
	if int64(len(data)) == n {
		r.c.put(name, data)
	}
	return r.done(m, len(p))
}

func (r *reader) done(n, want int) (int, error) {
	if n < want {
		return n, io.EOF
	}
	return n, nil
}

func (r *reader) Size() (int64, error) { return r.size, nil }
func (r *reader) Close() error         { return nil }
