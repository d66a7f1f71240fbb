package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"os/signal"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/spf13/pflag"

	pb "github.com/cellstore/cellstore/engine/api/cellstore/v1"
	"github.com/cellstore/cellstore/engine/settings"
)

// A configuration file has one `flag-name = value` per line; blank lines and lines starting
// with # are skipped. The operator renders it from a StoreCluster's config overrides into a
// ConfigMap. Flags given on the command line win over the file.

// configEntry is one setting of a configuration file, with its line for errors.
type configEntry struct {
	value string
	line  int
}

// readConfigFile parses a configuration file against the flags it may set.
func readConfigFile(fs *pflag.FlagSet, path string) (map[string]configEntry, []byte, error) {
	content, err := os.ReadFile(path)
	if err != nil {
		return nil, nil, fmt.Errorf("config file: %w", err)
	}
	out := map[string]configEntry{}
	sc := bufio.NewScanner(bytes.NewReader(content))
	for line := 1; sc.Scan(); line++ {
		text := strings.TrimSpace(sc.Text())
		if text == "" || strings.HasPrefix(text, "#") {
			continue
		}
		name, value, ok := strings.Cut(text, "=")
		name, value = strings.TrimSpace(name), strings.TrimSpace(value)
		if !ok || name == "" {
			return nil, nil, fmt.Errorf("%s:%d: want 'flag-name = value', got %q", path, line, text)
		}
		name = strings.TrimPrefix(name, "--")
		if fs.Lookup(name) == nil {
			return nil, nil, fmt.Errorf("%s:%d: unknown setting %q (settings are the command's flags: see --help)", path, line, name)
		}
		out[name] = configEntry{value: value, line: line}
	}
	return out, content, sc.Err()
}

// configFile is a process's configuration file: loaded at start, re-read (Reload) when it
// changes, on SIGHUP or when asked (UpdateConfiguration), applying at once the flags that change
// without a restart (engine/settings) and reporting the others.
type configFile struct {
	fs      *pflag.FlagSet
	path    string
	role    settings.Role
	cmdLine map[string]bool // flags given on the command line: the file does not touch them

	mu      sync.Mutex
	applied map[string]configEntry // the file's settings in effect (a restart-only change is not)
	content []byte
	// apply makes the flag's current value take effect, per online flag (set by the command
	// once its server exists).
	apply map[string]func() error
}

// loadConfigFile applies the configuration file at path (none when empty) to the flags not given
// on the command line, and returns it for later reloads.
func loadConfigFile(fs *pflag.FlagSet, path string, role settings.Role) (*configFile, error) {
	c := &configFile{fs: fs, path: path, role: role, cmdLine: map[string]bool{}, applied: map[string]configEntry{}}
	if path == "" {
		return c, nil
	}
	fs.Visit(func(f *pflag.Flag) { c.cmdLine[f.Name] = true })
	entries, content, err := readConfigFile(fs, path)
	if err != nil {
		return nil, err
	}
	for _, name := range slices.Sorted(maps.Keys(entries)) {
		e := entries[name]
		if c.cmdLine[name] {
			continue
		}
		if err := fs.Set(name, e.value); err != nil {
			return nil, fmt.Errorf("%s:%d: %s: %w", path, e.line, name, err)
		}
		c.applied[name] = e
	}
	c.content = content
	return c, nil
}

// setApply registers how each online flag takes effect.
func (c *configFile) setApply(apply map[string]func() error) {
	c.mu.Lock()
	c.apply = apply
	c.mu.Unlock()
}

// Reload re-reads the file: changed settings that apply online take effect (a removed line
// brings the flag's default back); others are reported as waiting for a restart, at every
// reload until then. A file that does not parse changes nothing.
func (c *configFile) Reload() *pb.ConfigurationReport {
	c.mu.Lock()
	defer c.mu.Unlock()
	rep := &pb.ConfigurationReport{}
	if c.path == "" {
		return rep // started without a configuration file (--config): nothing to re-read
	}
	entries, content, err := readConfigFile(c.fs, c.path)
	if err != nil {
		rep.Error = err.Error()
		return rep
	}
	c.content = content
	names := map[string]bool{}
	for n := range entries {
		names[n] = true
	}
	for n := range c.applied {
		names[n] = true
	}
	type change struct {
		name, old, value string
		present          bool
	}
	var online []change
	for _, name := range slices.Sorted(maps.Keys(names)) {
		e, now := entries[name]
		was, before := c.applied[name]
		if c.cmdLine[name] || now == before && e.value == was.value {
			continue
		}
		if !settings.IsOnline(c.role, name) || c.apply[name] == nil {
			rep.NeedsRestart = append(rep.NeedsRestart, name)
			continue
		}
		fl := c.fs.Lookup(name)
		value := e.value
		if !now {
			value = fl.DefValue
		}
		online = append(online, change{name: name, old: fl.Value.String(), value: value, present: now})
	}
	// Every value must parse before any applies.
	for i, ch := range online {
		if err := c.fs.Set(ch.name, ch.value); err != nil {
			for _, done := range online[:i] {
				_ = c.fs.Set(done.name, done.old)
			}
			rep.Error = fmt.Sprintf("%s: %s = %s: %v (nothing applied)", c.path, ch.name, ch.value, err)
			rep.NeedsRestart = nil
			return rep
		}
	}
	var failed []string
	for _, ch := range online {
		if err := c.apply[ch.name](); err != nil {
			_ = c.fs.Set(ch.name, ch.old)
			failed = append(failed, fmt.Sprintf("%s = %s: %v", ch.name, ch.value, err))
			continue
		}
		rep.Applied = append(rep.Applied, ch.name+" = "+ch.value)
		if ch.present {
			c.applied[ch.name] = entries[ch.name]
		} else {
			delete(c.applied, ch.name)
		}
	}
	if len(failed) > 0 {
		rep.Error = "not applied: " + strings.Join(failed, "; ")
	}
	return rep
}

// watch reloads the file when its content changes (checked every interval: a Kubernetes
// ConfigMap volume is updated by a symlink swap, which no file event follows reliably) and on
// SIGHUP, logging what each reload did, until ctx ends.
func (c *configFile) watch(ctx context.Context, interval time.Duration, log *slog.Logger) {
	if c.path == "" {
		return
	}
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	go func() {
		defer signal.Stop(hup)
		var tick <-chan time.Time // nil: no periodic check
		if interval > 0 {
			t := time.NewTicker(interval)
			defer t.Stop()
			tick = t.C
		}
		for {
			select {
			case <-ctx.Done():
				return
			case <-hup:
			case <-tick:
				b, err := os.ReadFile(c.path)
				c.mu.Lock()
				same := err != nil || bytes.Equal(b, c.content)
				c.mu.Unlock()
				if same {
					continue
				}
			}
			logReport(log, c.Reload())
		}
	}()
}

// logReport logs what a reload did.
func logReport(log *slog.Logger, r *pb.ConfigurationReport) {
	switch {
	case r.GetError() != "":
		log.Warn("configuration file re-read: not applied", "error", r.GetError(), "applied", r.GetApplied(), "needs_restart", r.GetNeedsRestart())
	case len(r.GetApplied()) > 0 || len(r.GetNeedsRestart()) > 0:
		log.Info("configuration file re-read", "applied", r.GetApplied(), "needs_restart", r.GetNeedsRestart())
	}
}

// watchInterval is --config-watch-interval: a duration, 0 for no periodic check, never negative.
type watchInterval time.Duration

func (w *watchInterval) Set(s string) error {
	d, err := time.ParseDuration(s)
	if err != nil {
		return err
	}
	if d < 0 {
		return fmt.Errorf("%v is negative: give a duration, or 0 to check the file only on SIGHUP and update_config", d)
	}
	*w = watchInterval(d)
	return nil
}

func (w *watchInterval) String() string { return time.Duration(*w).String() }
func (w *watchInterval) Type() string   { return "duration" }

const configWatchUsage = "how often to check the --config file for changes (0: only on SIGHUP or the shell's update_config)"
