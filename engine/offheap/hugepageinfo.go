package offheap

import (
	"bufio"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// HugepagePool is the kernel's pool of hugetlb pages of one size.
type HugepagePool struct {
	PageSize int64 // bytes per page
	Total    int64 // pages in the pool (nr_hugepages / HugePages_Total)
	Free     int64 // pages not faulted in (free_hugepages / HugePages_Free)
	Reserved int64 // free pages already promised to mappings (resv_hugepages / HugePages_Rsvd)
	Surplus  int64 // overcommitted pages (surplus_hugepages / HugePages_Surp)
	Source   string
}

// Available returns the pages a new mapping can still reserve.
func (p HugepagePool) Available() int64 { return max(p.Free-p.Reserved, 0) }

func (p HugepagePool) String() string {
	return fmt.Sprintf("%s pages: %d total, %d free, %d reserved, %d available (%s)",
		FormatQuantity(p.PageSize), p.Total, p.Free, p.Reserved, p.Available(), p.Source)
}

// ReadHugepagePool reads the hugetlb pool of pageSize from
// sys/kernel/mm/hugepages/hugepages-<kB>kB under root, falling back to
// proc/meminfo for the default hugepage size. root "" means "/".
func ReadHugepagePool(root string, pageSize int64) (HugepagePool, error) {
	if root == "" {
		root = "/"
	}
	p := HugepagePool{PageSize: pageSize}
	dir := filepath.Join(root, "sys/kernel/mm/hugepages", fmt.Sprintf("hugepages-%dkB", pageSize>>10))
	if _, err := os.Stat(dir); err == nil {
		p.Source = dir
		for _, f := range []struct {
			name string
			dst  *int64
		}{{"nr_hugepages", &p.Total}, {"free_hugepages", &p.Free}, {"resv_hugepages", &p.Reserved}, {"surplus_hugepages", &p.Surplus}} {
			b, err := os.ReadFile(filepath.Join(dir, f.name))
			if err != nil {
				if errors.Is(err, fs.ErrNotExist) && f.name == "surplus_hugepages" {
					continue
				}
				return p, err
			}
			v, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
			if err != nil {
				return p, fmt.Errorf("%s: %w", filepath.Join(dir, f.name), err)
			}
			*f.dst = v
		}
		return p, nil
	}
	mi, err := ReadMeminfo(root)
	if err != nil {
		return p, err
	}
	if mi["Hugepagesize"] != pageSize {
		return p, fmt.Errorf("no %s hugepage pool: %s does not exist and the default hugepage size is %s",
			FormatQuantity(pageSize), dir, FormatQuantity(mi["Hugepagesize"]))
	}
	p.Source = filepath.Join(root, "proc/meminfo")
	p.Total, p.Free, p.Reserved, p.Surplus = mi["HugePages_Total"], mi["HugePages_Free"], mi["HugePages_Rsvd"], mi["HugePages_Surp"]
	return p, nil
}

// ReadMeminfo parses proc/meminfo under root into a map of values; fields
// in kB are converted to bytes, page counts are left as counts.
func ReadMeminfo(root string) (map[string]int64, error) {
	if root == "" {
		root = "/"
	}
	name := filepath.Join(root, "proc/meminfo")
	f, err := os.Open(name)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	out := make(map[string]int64)
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		key, rest, ok := strings.Cut(sc.Text(), ":")
		if !ok {
			continue
		}
		fields := strings.Fields(rest)
		if len(fields) == 0 {
			continue
		}
		v, err := strconv.ParseInt(fields[0], 10, 64)
		if err != nil {
			return nil, fmt.Errorf("%s: field %s: %w", name, key, err)
		}
		if len(fields) > 1 && fields[1] == "kB" {
			v <<= 10
		}
		out[key] = v
	}
	return out, sc.Err()
}
