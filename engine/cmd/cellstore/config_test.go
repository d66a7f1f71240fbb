package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/spf13/pflag"
)

func TestConfigFile(t *testing.T) {
	dir := t.TempDir()
	write := func(s string) string {
		p := filepath.Join(dir, "c.conf")
		if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	fs := pflag.NewFlagSet("x", pflag.ContinueOnError)
	a := fs.String("storage-dir", "", "")
	b := fs.Int("flush-size", 1, "")
	if err := fs.Parse([]string{"--flush-size=7"}); err != nil {
		t.Fatal(err)
	}
	if err := loadConfigFile(fs, write("# comment\n\nstorage-dir = /data\n--flush-size=9\n")); err != nil {
		t.Fatal(err)
	}
	if *a != "/data" || *b != 7 {
		t.Errorf("storage-dir %q flush-size %d: want /data and the command line's 7", *a, *b)
	}
	for _, bad := range []string{"nope = 1\n", "flush-size = x\n", "just text\n"} {
		fs := pflag.NewFlagSet("y", pflag.ContinueOnError)
		fs.Int("flush-size", 1, "")
		err := loadConfigFile(fs, write(bad))
		if err == nil || !strings.Contains(err.Error(), "c.conf:1") {
			t.Errorf("%q: want an error naming the file and line, got %v", bad, err)
		}
	}
	if err := loadConfigFile(fs, filepath.Join(dir, "missing")); err == nil {
		t.Error("missing file accepted")
	}
}

func TestSplitStatements(t *testing.T) {
	got := splitStatements(`put 't', 'a;b', 'f:q', "x\";y"; get 't', 'a;b' ;list`)
	want := []string{`put 't', 'a;b', 'f:q', "x\";y"`, ` get 't', 'a;b' `, `list`}
	if len(got) != len(want) {
		t.Fatalf("got %q", got)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("statement %d = %q, want %q", i, got[i], want[i])
		}
	}
}
