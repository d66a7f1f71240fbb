package main

import (
	"bufio"
	"fmt"
	"os"
	"strings"

	"github.com/spf13/pflag"
)

// loadConfigFile applies a config file to flags that were not given on the command line. The file
// has one `flag-name = value` per line; blank lines and lines starting with # are skipped. The
// operator renders it from a StoreCluster's config overrides into a ConfigMap.
func loadConfigFile(fs *pflag.FlagSet, path string) error {
	if path == "" {
		return nil
	}
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("config file: %w", err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for line := 1; sc.Scan(); line++ {
		text := strings.TrimSpace(sc.Text())
		if text == "" || strings.HasPrefix(text, "#") {
			continue
		}
		name, value, ok := strings.Cut(text, "=")
		name, value = strings.TrimSpace(name), strings.TrimSpace(value)
		if !ok || name == "" {
			return fmt.Errorf("%s:%d: want 'flag-name = value', got %q", path, line, text)
		}
		name = strings.TrimPrefix(name, "--")
		fl := fs.Lookup(name)
		if fl == nil {
			return fmt.Errorf("%s:%d: unknown setting %q (settings are the command's flags: see --help)", path, line, name)
		}
		if fl.Changed { // the command line wins
			continue
		}
		if err := fs.Set(name, value); err != nil {
			return fmt.Errorf("%s:%d: %s: %w", path, line, name, err)
		}
	}
	return sc.Err()
}
