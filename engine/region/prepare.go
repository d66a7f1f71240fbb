package region

import (
	"fmt"
	"path"
	"sync"
)

// Prepared is what a region's open reads, read ahead by the server it moves to while the one it
// leaves still serves it: the store files its manifest names, opened (on a bucket, small ones
// fetched whole into the file cache), and its family directories' listings. Store files are written
// once under names never used again, so a file opened here is the file a later manifest names by
// that path; the open (Config.Prepared) takes those its manifest still names, opens only the ones
// written since (the source's last flush) and reads nothing else but the .regioninfo and the
// manifest, at once. A file listed here that the final manifest does not name is a leftover (the
// closed source writes nothing more), archived by the open as the lists it makes would be; what
// was written after the listing waits for a later open.
//
// Nothing is written while preparing, and a Prepared that no open takes must be released.
type Prepared struct {
	mu       sync.Mutex
	files    map[string]*storeFile // by path, as named in the manifest read
	inMemory map[string]bool       // family name -> its store files were opened as IN_MEMORY
	listed   map[string][]string   // family name -> the names its directory held
	taken    int                   // files an open took
	released bool
}

// Prepare opens the store files of a region's manifest and lists its family directories, for an
// Open on this server to take (Config.Prepared). cfg is the one that Open will be given (its WAL
// is not used).
func Prepare(cfg Config, info Info) (*Prepared, error) {
	defer cfg.Prepared.Release() // not used here
	if err := cfg.fill(); err != nil {
		return nil, err
	}
	cfg.Descriptor, cfg.Prepared = nil, nil // read only: the open writes what it must
	r, err := regionShell(cfg, info, false)
	if err != nil {
		return nil, err
	}
	m, err := r.takeManifest()
	if err != nil {
		return nil, err
	}
	set := &fileSet{byFamily: make([][]*storeFile, len(r.fams))}
	listed, err := r.openFiles(m, set, true, nil)
	p := &Prepared{files: map[string]*storeFile{}, inMemory: map[string]bool{}, listed: map[string][]string{}}
	for i, f := range r.fams {
		p.inMemory[f.Name] = f.InMemory
		p.listed[f.Name] = listed[i]
		for _, sf := range set.byFamily[i] {
			p.files[sf.path] = sf
		}
	}
	if err != nil {
		p.Release()
		return nil, fmt.Errorf("preparing region %s: %w", r.name, err)
	}
	return p, nil
}

// Files is the number of store files prepared and not taken yet.
func (p *Prepared) Files() int {
	if p == nil {
		return 0
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.files)
}

// Taken is the number of prepared store files an open took.
func (p *Prepared) Taken() int {
	if p == nil {
		return 0
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.taken
}

// take hands r the prepared store file of family fam that mf names, or nil when none was opened
// for it (a file written since, or one of a family whose settings changed).
func (p *Prepared) take(r *Region, fam int, mf manifestFile) *storeFile {
	if p == nil {
		return nil
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	f := r.fams[fam]
	key := path.Join(r.dir, f.Name, mf.Name)
	sf := p.files[key]
	if sf == nil || p.released || (sf.ref != nil) != mf.Reference || p.inMemory[f.Name] != f.InMemory {
		return nil
	}
	delete(p.files, key)
	p.taken++
	sf.r, sf.family = r, fam
	return sf
}

// listing is what a family's directory held when prepared (ok false: not listed then).
func (p *Prepared) listing(family string) (names []string, ok bool) {
	if p == nil {
		return nil, false
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	names, ok = p.listed[family]
	return names, ok && !p.released
}

// Release closes the store files no open took. It may be called more than once, and on nil.
func (p *Prepared) Release() {
	if p == nil {
		return
	}
	p.mu.Lock()
	files := p.files
	p.files, p.released = nil, true
	p.mu.Unlock()
	for _, sf := range files {
		sf.release()
	}
}
