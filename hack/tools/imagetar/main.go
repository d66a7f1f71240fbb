// Command imagetar builds a single-layer container image from local files, without a Docker daemon
// or a registry, and writes it as a docker-archive tarball that `ctr images import` (and `docker load`)
// accept. The local cluster and CI load images this way.
//
//	imagetar --ref docker.io/cellstore/engine:v0.1.0 --out bin/images/engine.tar \
//	    --file bin/linux/cellstore:/usr/local/bin/cellstore --entrypoint /usr/local/bin/cellstore --nonroot
package main

import (
	"archive/tar"
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// nonrootUID is the user images run as (the conventional "nonroot" id of distroless images).
const nonrootUID = 65532

type listFlag []string

func (l *listFlag) String() string     { return strings.Join(*l, ",") }
func (l *listFlag) Set(v string) error { *l = append(*l, v); return nil }

func main() {
	var files, dirs, env listFlag
	ref := flag.String("ref", "", "image reference, e.g. docker.io/cellstore/engine:v0.1.0 (required; never :latest)")
	out := flag.String("out", "", "output tarball (required)")
	entrypoint := flag.String("entrypoint", "", "entrypoint, space-separated words")
	nonroot := flag.Bool("nonroot", true, "run as uid/gid 65532 and add /etc/passwd and /etc/group entries for it")
	flag.Var(&files, "file", "SRC:DST[:MODE] file to add (repeatable); MODE is octal, default keeps the source mode")
	flag.Var(&dirs, "dir", "SRC:DST directory tree to add (repeatable)")
	flag.Var(&env, "env", "KEY=VALUE environment variable (repeatable)")
	flag.Parse()
	if err := run(*ref, *out, *entrypoint, *nonroot, files, dirs, env); err != nil {
		fmt.Fprintln(os.Stderr, "imagetar:", err)
		os.Exit(1)
	}
}

type entry struct {
	hdr  tar.Header
	data []byte
}

func run(refStr, out, entrypoint string, nonroot bool, files, dirs, env []string) error {
	if refStr == "" || out == "" {
		return errors.New("--ref and --out are required")
	}
	ref, err := name.NewTag(refStr, name.StrictValidation)
	if err != nil {
		return fmt.Errorf("bad --ref %q: %w (use a full reference such as docker.io/cellstore/engine:v0.1.0)", refStr, err)
	}
	if ref.TagStr() == "latest" {
		return fmt.Errorf("--ref %q: use a versioned tag, not :latest (images are loaded, never pulled)", refStr)
	}
	entries := map[string]*entry{}
	addDir := func(p string, mode int64) {
		if p == "/" {
			return
		}
		for d := p; d != "/" && d != "."; d = path.Dir(d) {
			if _, ok := entries[d]; !ok {
				entries[d] = &entry{hdr: tar.Header{Typeflag: tar.TypeDir, Name: strings.TrimPrefix(d, "/") + "/", Mode: 0o755}}
			}
		}
		entries[p].hdr.Mode = mode
	}
	addFile := func(dst string, data []byte, mode int64) {
		addDir(path.Dir(dst), 0o755)
		entries[dst] = &entry{hdr: tar.Header{Typeflag: tar.TypeReg, Name: strings.TrimPrefix(dst, "/"), Mode: mode, Size: int64(len(data))}, data: data}
	}
	addDir("/tmp", 0o1777)
	addDir("/etc", 0o755)
	if nonroot {
		addFile("/etc/passwd", []byte(fmt.Sprintf("root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:%d:%d:nonroot:/home/nonroot:/sbin/nologin\n", nonrootUID, nonrootUID)), 0o644)
		addFile("/etc/group", []byte(fmt.Sprintf("root:x:0:\nnonroot:x:%d:\n", nonrootUID)), 0o644)
		addDir("/home/nonroot", 0o755)
		entries["/home/nonroot"].hdr.Uid, entries["/home/nonroot"].hdr.Gid = nonrootUID, nonrootUID
	}
	for _, f := range files {
		parts := strings.Split(f, ":")
		if len(parts) < 2 || len(parts) > 3 || !path.IsAbs(parts[1]) {
			return fmt.Errorf("bad --file %q: want SRC:/ABS/DST[:MODE]", f)
		}
		data, err := os.ReadFile(parts[0])
		if err != nil {
			return fmt.Errorf("--file %q: %w", f, err)
		}
		st, err := os.Stat(parts[0])
		if err != nil {
			return err
		}
		mode := int64(st.Mode().Perm())
		if len(parts) == 3 {
			if mode, err = strconv.ParseInt(parts[2], 8, 32); err != nil {
				return fmt.Errorf("bad mode in --file %q: %w", f, err)
			}
		}
		addFile(path.Clean(parts[1]), data, mode)
	}
	for _, d := range dirs {
		src, dst, ok := strings.Cut(d, ":")
		if !ok || !path.IsAbs(dst) {
			return fmt.Errorf("bad --dir %q: want SRC:/ABS/DST", d)
		}
		err := filepath.WalkDir(src, func(p string, de fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			rel, _ := filepath.Rel(src, p)
			target := path.Join(dst, filepath.ToSlash(rel))
			info, err := de.Info()
			if err != nil {
				return err
			}
			switch {
			case de.IsDir():
				addDir(target, int64(info.Mode().Perm()))
			case info.Mode().IsRegular():
				data, err := os.ReadFile(p)
				if err != nil {
					return err
				}
				addFile(target, data, int64(info.Mode().Perm()))
			default:
				return fmt.Errorf("%s: only regular files and directories are supported", p)
			}
			return nil
		})
		if err != nil {
			return fmt.Errorf("--dir %q: %w", d, err)
		}
	}

	// A reproducible layer: sorted names, fixed times, numeric owners.
	names := make([]string, 0, len(entries))
	for n := range entries {
		names = append(names, n)
	}
	sort.Strings(names)
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, n := range names {
		e := entries[n]
		e.hdr.ModTime = time.Unix(0, 0)
		e.hdr.Format = tar.FormatPAX
		if err := tw.WriteHeader(&e.hdr); err != nil {
			return err
		}
		if _, err := tw.Write(e.data); err != nil {
			return err
		}
	}
	if err := tw.Close(); err != nil {
		return err
	}
	layerBytes := buf.Bytes()
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(layerBytes)), nil
	})
	if err != nil {
		return err
	}
	cfg := v1.Config{Env: append([]string{"PATH=/usr/local/bin:/usr/bin:/bin"}, env...), WorkingDir: "/"}
	if entrypoint != "" {
		cfg.Entrypoint = strings.Fields(entrypoint)
	}
	if nonroot {
		cfg.User = fmt.Sprintf("%d:%d", nonrootUID, nonrootUID)
		cfg.WorkingDir = "/home/nonroot"
	}
	base, err := mutate.ConfigFile(empty.Image, &v1.ConfigFile{Architecture: "amd64", OS: "linux", Config: cfg, Created: v1.Time{Time: time.Unix(0, 0).UTC()}})
	if err != nil {
		return err
	}
	img, err := mutate.AppendLayers(base, layer)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
		return err
	}
	tmp := out + ".tmp"
	if err := tarball.WriteToFile(tmp, ref, img); err != nil {
		return fmt.Errorf("write %s: %w", out, err)
	}
	if err := os.Rename(tmp, out); err != nil {
		return err
	}
	fmt.Printf("imagetar: wrote %s (%s)\n", out, ref)
	return nil
}
