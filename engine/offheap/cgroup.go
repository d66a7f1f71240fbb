package offheap

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strconv"
	"strings"
)

// Unlimited is the Limit of a cgroup without a memory limit.
const Unlimited int64 = -1

// v1 reports "no limit" as PAGE_COUNTER_MAX pages (9223372036854771712 on
// 4 KiB pages); anything this large is treated as unlimited.
const v1UnlimitedThreshold = int64(1) << 62

// CgroupMemory is the memory limit that applies to this process.
type CgroupMemory struct {
	// Version is 1 or 2, or 0 when the process is in no memory cgroup that
	// could be found (no /proc/self/cgroup, no memory controller mounted).
	Version int
	// Path is the process's cgroup path as listed in /proc/self/cgroup.
	Path string
	// Dir is the cgroup's directory (relative to the file system root used).
	Dir string
	// Limit is the effective limit in bytes: the smallest limit of the
	// cgroup and its ancestors up to the mount point. Unlimited (-1) if none.
	Limit int64
	// LimitFile is the file the effective limit was read from.
	LimitFile string
	// HugetlbAccounting is true when cgroup v2 is mounted with
	// memory_hugetlb_accounting, so hugetlb pages count against memory.max.
	HugetlbAccounting bool
}

// Limited reports whether a memory limit applies.
func (c CgroupMemory) Limited() bool { return c.Limit >= 0 }

func (c CgroupMemory) String() string {
	if c.Version == 0 {
		return "no memory cgroup"
	}
	if !c.Limited() {
		return fmt.Sprintf("cgroup v%d %s: no memory limit", c.Version, c.Path)
	}
	return fmt.Sprintf("cgroup v%d limit %s (%s)", c.Version, FormatQuantity(c.Limit), c.LimitFile)
}

type procCgroup struct {
	hierarchy   string
	controllers []string
	path        string
}

type mount struct {
	root, point, fstype string
	superOpts           []string
}

func readProcCgroup(root string) ([]procCgroup, error) {
	b, err := os.ReadFile(filepath.Join(root, "proc/self/cgroup"))
	if err != nil {
		return nil, err
	}
	var out []procCgroup
	for i, line := range strings.Split(string(b), "\n") {
		line = strings.TrimSpace(line)
		if line == "" {
			continue
		}
		parts := strings.SplitN(line, ":", 3)
		if len(parts) != 3 {
			return nil, fmt.Errorf("%s line %d: malformed %q (want hierarchy:controllers:path)",
				filepath.Join(root, "proc/self/cgroup"), i+1, line)
		}
		var ctrls []string
		if parts[1] != "" {
			ctrls = strings.Split(parts[1], ",")
		}
		out = append(out, procCgroup{hierarchy: parts[0], controllers: ctrls, path: parts[2]})
	}
	return out, nil
}

// unescapeMount decodes the octal escapes (\040 for space) in mountinfo.
func unescapeMount(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+4 <= len(s) {
			if v, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(v))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

func readMounts(root string) ([]mount, error) {
	name := filepath.Join(root, "proc/self/mountinfo")
	f, err := os.Open(name)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []mount
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		sep := -1
		for i, f := range fields {
			if f == "-" {
				sep = i
				break
			}
		}
		// id parent major:minor root mountpoint options [optional...] - fstype source superoptions
		if sep < 6 || len(fields) < sep+4 {
			continue // not a line we understand; skip rather than fail
		}
		out = append(out, mount{
			root:      unescapeMount(fields[3]),
			point:     unescapeMount(fields[4]),
			fstype:    fields[sep+1],
			superOpts: strings.Split(fields[sep+3], ","),
		})
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("reading %s: %w", name, err)
	}
	return out, nil
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

// cgroupDir finds the directory of the process's cgroup for a v1 controller
// (controller != "") or for the v2 unified hierarchy (controller == "").
// It returns the directory, the mount point (the top of the walk), the
// cgroup path and the mount.
func cgroupDir(cgs []procCgroup, mounts []mount, controller string) (dir, top, cgPath string, m mount, ok bool) {
	found := false
	for _, cg := range cgs {
		if controller == "" && cg.hierarchy == "0" && len(cg.controllers) == 0 ||
			controller != "" && contains(cg.controllers, controller) {
			cgPath, found = cg.path, true
			break
		}
	}
	if !found {
		return "", "", "", mount{}, false
	}
	// Prefer the mount whose root contains the cgroup path, the longest
	// such root winning; otherwise (cgroup namespaces, where paths look
	// like "/") take the first mount of the hierarchy.
	best, fallback := -1, -1
	for i, mt := range mounts {
		match := controller == "" && mt.fstype == "cgroup2" ||
			controller != "" && mt.fstype == "cgroup" && contains(mt.superOpts, controller)
		if !match {
			continue
		}
		if fallback < 0 {
			fallback = i
		}
		if pathUnder(cgPath, mt.root) && (best < 0 || len(mt.root) > len(mounts[best].root)) {
			best = i
		}
	}
	if best < 0 {
		best = fallback
	}
	if best < 0 {
		return "", "", "", mount{}, false
	}
	m = mounts[best]
	rel := "/"
	if pathUnder(cgPath, m.root) {
		rel = "/" + strings.TrimPrefix(strings.TrimPrefix(cgPath, m.root), "/")
	}
	rel = path.Clean(rel)
	if strings.HasPrefix(rel, "/..") { // process outside the namespace's view
		rel = "/"
	}
	return path.Join(m.point, rel), m.point, cgPath, m, true
}

func pathUnder(p, root string) bool {
	return root == "/" || p == root || strings.HasPrefix(p, root+"/")
}

// readLimitFile reads a memory limit file: "max" (v2) or a huge number (v1)
// mean unlimited. A missing file reports found=false.
func readLimitFile(name string) (limit int64, found bool, err error) {
	b, err := os.ReadFile(name)
	if errors.Is(err, fs.ErrNotExist) {
		return 0, false, nil
	}
	if err != nil {
		return 0, false, err
	}
	s := string(bytes.TrimSpace(b))
	if s == "max" {
		return Unlimited, true, nil
	}
	v, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		if u, uerr := strconv.ParseUint(s, 10, 64); uerr == nil && u > uint64(v1UnlimitedThreshold) {
			return Unlimited, true, nil
		}
		return 0, false, fmt.Errorf("%s: cannot parse %q as bytes or \"max\"", name, s)
	}
	if v < 0 || v >= v1UnlimitedThreshold {
		return Unlimited, true, nil
	}
	return v, true, nil
}

// walkLimits reads file in dir and each ancestor up to top and returns the
// smallest limit found.
func walkLimits(root, dir, top, file string) (limit int64, from string, err error) {
	limit = Unlimited
	for d := dir; ; d = path.Dir(d) {
		name := filepath.Join(root, d, file)
		v, found, err := readLimitFile(name)
		if err != nil {
			return 0, "", err
		}
		if found && v != Unlimited && (limit == Unlimited || v < limit) {
			limit, from = v, path.Join(d, file)
		}
		if d == top || d == "/" || !strings.HasPrefix(d, top) {
			break
		}
	}
	return limit, from, nil
}

// ReadCgroupMemory returns the memory limit of the calling process's cgroup,
// cgroup v1 or v2 (in a hybrid setup the v1 memory controller wins, as that
// is the one the kernel enforces). root is the file system root holding
// proc/ and sys/ ("" or "/" for the real one; tests pass a testdata tree).
func ReadCgroupMemory(root string) (CgroupMemory, error) {
	if root == "" {
		root = "/"
	}
	none := CgroupMemory{Limit: Unlimited}
	cgs, err := readProcCgroup(root)
	if errors.Is(err, fs.ErrNotExist) {
		return none, nil
	}
	if err != nil {
		return none, err
	}
	mounts, err := readMounts(root)
	if errors.Is(err, fs.ErrNotExist) {
		return none, nil
	}
	if err != nil {
		return none, err
	}
	if dir, top, p, _, ok := cgroupDir(cgs, mounts, "memory"); ok {
		lim, from, err := walkLimits(root, dir, top, "memory.limit_in_bytes")
		if err != nil {
			return none, err
		}
		return CgroupMemory{Version: 1, Path: p, Dir: dir, Limit: lim, LimitFile: from}, nil
	}
	if dir, top, p, m, ok := cgroupDir(cgs, mounts, ""); ok {
		lim, from, err := walkLimits(root, dir, top, "memory.max")
		if err != nil {
			return none, err
		}
		return CgroupMemory{Version: 2, Path: p, Dir: dir, Limit: lim, LimitFile: from,
			HugetlbAccounting: contains(m.superOpts, "memory_hugetlb_accounting")}, nil
	}
	return none, nil
}

// hugetlbSizeName is the kernel's name for a hugepage size in cgroup files
// ("2MB", "1GB").
func hugetlbSizeName(pageSize int64) string {
	switch {
	case pageSize%(1<<30) == 0:
		return fmt.Sprintf("%dGB", pageSize>>30)
	case pageSize%(1<<20) == 0:
		return fmt.Sprintf("%dMB", pageSize>>20)
	}
	return fmt.Sprintf("%dKB", pageSize>>10)
}

// ReadCgroupHugetlb returns how many bytes of hugepages of pageSize the
// process's cgroup (hugetlb controller, v1 or v2) still allows: the
// smallest limit-minus-usage over the cgroup and its ancestors. limited is
// false when no hugetlb limit applies.
func ReadCgroupHugetlb(root string, pageSize int64) (available int64, limited bool, err error) {
	if root == "" {
		root = "/"
	}
	cgs, err := readProcCgroup(root)
	if errors.Is(err, fs.ErrNotExist) {
		return 0, false, nil
	}
	if err != nil {
		return 0, false, err
	}
	mounts, err := readMounts(root)
	if errors.Is(err, fs.ErrNotExist) {
		return 0, false, nil
	}
	if err != nil {
		return 0, false, err
	}
	name := "hugetlb." + hugetlbSizeName(pageSize)
	limitFile, usageFile := name+".max", name+".current"
	dir, top, _, _, ok := cgroupDir(cgs, mounts, "hugetlb")
	if ok {
		limitFile, usageFile = name+".limit_in_bytes", name+".usage_in_bytes"
	} else if dir, top, _, _, ok = cgroupDir(cgs, mounts, ""); !ok {
		return 0, false, nil
	}
	available = Unlimited
	for d := dir; ; d = path.Dir(d) {
		lim, found, err := readLimitFile(filepath.Join(root, d, limitFile))
		if err != nil {
			return 0, false, err
		}
		if found && lim != Unlimited {
			usage, ufound, err := readLimitFile(filepath.Join(root, d, usageFile))
			if err != nil {
				return 0, false, err
			}
			if !ufound || usage == Unlimited {
				usage = 0
			}
			if a := max(lim-usage, 0); available == Unlimited || a < available {
				available = a
			}
		}
		if d == top || d == "/" || !strings.HasPrefix(d, top) {
			break
		}
	}
	return available, available != Unlimited, nil
}
