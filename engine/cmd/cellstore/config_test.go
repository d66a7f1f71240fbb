package main

import (
	"errors"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	pb "github.com/cellstore/cellstore/engine/api/cellstore/v1"
	"github.com/cellstore/cellstore/engine/settings"
	"github.com/cellstore/cellstore/engine/wal"
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
	if _, err := loadConfigFile(fs, write("# comment\n\nstorage-dir = /data\n--flush-size=9\n"), settings.RegionServer); err != nil {
		t.Fatal(err)
	}
	if *a != "/data" || *b != 7 {
		t.Errorf("storage-dir %q flush-size %d: want /data and the command line's 7", *a, *b)
	}
	for _, bad := range []string{"nope = 1\n", "flush-size = x\n", "just text\n"} {
		fs := pflag.NewFlagSet("y", pflag.ContinueOnError)
		fs.Int("flush-size", 1, "")
		_, err := loadConfigFile(fs, write(bad), settings.RegionServer)
		if err == nil || !strings.Contains(err.Error(), "c.conf:1") {
			t.Errorf("%q: want an error naming the file and line, got %v", bad, err)
		}
	}
	if _, err := loadConfigFile(fs, filepath.Join(dir, "missing"), settings.RegionServer); err == nil {
		t.Error("missing file accepted")
	}
}

// TestConfigFileReload: a re-read file applies the changed settings that change online (a
// removed line brings the default back), reports the others as waiting for a restart at every
// re-read, leaves flags given on the command line alone, and applies nothing from a file with a
// bad value or when a setting refuses its value.
func TestConfigFileReload(t *testing.T) {
	p := filepath.Join(t.TempDir(), "rs.conf")
	write := func(s string) {
		t.Helper()
		if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	fs := pflag.NewFlagSet("rs", pflag.ContinueOnError)
	scanners := fs.Int("max-scanners", 100, "")
	slow := fs.Duration("slow-call-threshold", 500*time.Millisecond, "")
	idle := fs.Duration("idle-timeout", time.Minute, "")
	flush := fs.Int64("memstore-flush-size", 128, "")
	if err := fs.Parse([]string{"--idle-timeout=2m"}); err != nil {
		t.Fatal(err)
	}
	write("max-scanners = 10\nmemstore-flush-size = 64\nidle-timeout = 5m\n")
	cf, err := loadConfigFile(fs, p, settings.RegionServer)
	if err != nil {
		t.Fatal(err)
	}
	var applied []string
	record := func(name string, v func() string) func() error {
		return func() error { applied = append(applied, name+"="+v()); return nil }
	}
	cf.setApply(map[string]func() error{
		"max-scanners": func() error {
			if *scanners <= 0 {
				return errors.New("must be positive")
			}
			return record("max-scanners", func() string { return strconv.Itoa(*scanners) })()
		},
		"slow-call-threshold": record("slow-call-threshold", func() string { return slow.String() }),
		"idle-timeout":        record("idle-timeout", func() string { return idle.String() }),
	})
	if *scanners != 10 || *flush != 64 || *idle != 2*time.Minute {
		t.Fatalf("at start: max-scanners %d, memstore-flush-size %d, idle-timeout %v", *scanners, *flush, *idle)
	}
	check := func(what string, r *pb.ConfigurationReport, wantApplied, wantRestart []string, wantErr bool) {
		t.Helper()
		if !slices.Equal(r.GetApplied(), wantApplied) || !slices.Equal(r.GetNeedsRestart(), wantRestart) || (r.GetError() != "") != wantErr {
			t.Fatalf("%s: applied %q, needs restart %q, error %q; want %q, %q, error %v", what, r.GetApplied(), r.GetNeedsRestart(), r.GetError(),
				wantApplied, wantRestart, wantErr)
		}
	}
	check("unchanged", cf.Reload(), nil, nil, false)
	write("max-scanners = 20\nslow-call-threshold = 250ms\nmemstore-flush-size = 32\nidle-timeout = 9m\n")
	check("changed", cf.Reload(), []string{"max-scanners = 20", "slow-call-threshold = 250ms"}, []string{"memstore-flush-size"}, false)
	if *scanners != 20 || *slow != 250*time.Millisecond || *flush != 64 || *idle != 2*time.Minute ||
		!slices.Equal(applied, []string{"max-scanners=20", "slow-call-threshold=250ms"}) {
		t.Fatalf("after the change: max-scanners %d, slow %v, flush %d, idle %v, applied %q", *scanners, *slow, *flush, *idle, applied)
	}
	check("again", cf.Reload(), nil, []string{"memstore-flush-size"}, false)
	// A removed line: the default again.
	write("max-scanners = 20\nmemstore-flush-size = 64\n")
	check("removed", cf.Reload(), []string{"slow-call-threshold = 500ms"}, nil, false)
	// A bad value: nothing applies.
	write("max-scanners = 30\nslow-call-threshold = soon\nmemstore-flush-size = 64\n")
	check("bad value", cf.Reload(), nil, nil, true)
	if *scanners != 20 {
		t.Fatalf("max-scanners %d after a file with a bad value, want 20 kept", *scanners)
	}
	// A value the setting refuses: it keeps its value, the others apply.
	write("max-scanners = 0\nslow-call-threshold = 1s\nmemstore-flush-size = 64\n")
	check("refused", cf.Reload(), []string{"slow-call-threshold = 1s"}, nil, true)
	if *scanners != 20 {
		t.Fatalf("max-scanners %d after a refused value, want 20 kept", *scanners)
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

// TestOnlineSettingsHaveAppliers: every setting engine/settings says changes without a restart
// has a way to take effect in its process, and no other one does.
func TestOnlineSettingsHaveAppliers(t *testing.T) {
	for role, appliers := range map[settings.Role]map[string]func() error{
		settings.RegionServer: regionServerSettings(nil, &regionServerFlags{}, nil),
		settings.Master:       masterSettings(nil, &masterFlags{}, nil),
	} {
		got := slices.Sorted(maps.Keys(appliers))
		if want := settings.Online(role); !slices.Equal(got, want) {
			t.Errorf("%s: appliers for %q, online settings %q", role, got, want)
		}
	}
	// Each online setting is a flag of its command.
	for role, cmd := range map[settings.Role]*pflag.FlagSet{settings.RegionServer: regionServerCommand().Flags(), settings.Master: masterCommand().Flags()} {
		for _, name := range settings.Online(role) {
			if cmd.Lookup(name) == nil {
				t.Errorf("%s: online setting %q is not a flag", role, name)
			}
		}
	}
}

func TestConfigWatchIntervalFlag(t *testing.T) {
	var w watchInterval
	for in, want := range map[string]time.Duration{"0": 0, "30s": 30 * time.Second, "1m": time.Minute} {
		if err := w.Set(in); err != nil || time.Duration(w) != want {
			t.Errorf("Set(%q) = %v, %v; want %v", in, time.Duration(w), err, want)
		}
	}
	for _, bad := range []string{"-1s", "soon"} {
		if err := w.Set(bad); err == nil {
			t.Errorf("Set(%q) was taken", bad)
		}
	}
}

func TestWALCommitDelayFlag(t *testing.T) {
	var auto commitDelayFlag
	leader, syncer := wal.LeaderCommit, wal.SyncerCommit
	for _, c := range []struct {
		object bool
		slots  int
		mode   wal.CommitMode
		want   time.Duration
	}{
		{true, 1, leader, objectLogCommitDelay},
		{true, 4, leader, 0},
		{false, 1, leader, directoryCommitDelay},
		{false, 2, leader, 0},                   // a delay needs one sync slot
		{false, 1, syncer, 0},                   // and the leader commit
		{true, 1, syncer, objectLogCommitDelay}, // an object log has no syncer mode
	} {
		if got := auto.resolve(c.object, c.slots, c.mode); got != c.want || auto.String() != "auto" {
			t.Errorf("auto on object storage %v, %d slots, mode %v: %v (%q), want %v", c.object, c.slots, c.mode, got, auto.String(), c.want)
		}
	}
	var set commitDelayFlag
	if err := set.Set("0"); err != nil || set.resolve(true, 1, leader) != 0 || set.resolve(false, 1, leader) != 0 || set.String() != "0s" {
		t.Fatalf("0: %v, resolves to %v", err, set.resolve(true, 1, leader))
	}
	if err := set.Set("300us"); err != nil || set.resolve(false, 1, leader) != 300*time.Microsecond {
		t.Fatalf("300us: %v, resolves to %v", err, set.resolve(false, 1, leader))
	}
	if err := set.Set("auto"); err != nil || set.String() != "auto" {
		t.Fatalf("auto again: %v, %q", err, set.String())
	}
	if err := set.Set("soon"); err == nil {
		t.Fatal("a delay of \"soon\" was taken")
	}
}
