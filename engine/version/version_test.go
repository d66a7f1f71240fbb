package version

import (
	"strings"
	"testing"
)

func TestParse(t *testing.T) {
	for in, want := range map[string]string{"v1.2.3": "v1.2.3", "0.1.0": "v0.1.0", "v2.10.0-rc.1": "v2.10.0", "v1.0.0+abc": "v1.0.0"} {
		v, ok := Parse(in)
		if !ok || v.String() != want {
			t.Errorf("Parse(%q) = %v, %t; want %s", in, v, ok, want)
		}
	}
	for _, in := range []string{"dev", "", "fc6eab3", "v1.2", "v1.2.3.4", "v1.02.3", "v1.-2.3", "v1..3"} {
		if v, ok := Parse(in); ok {
			t.Errorf("Parse(%q) = %v, want not a version", in, v)
		}
	}
}

func TestCheckServer(t *testing.T) {
	for _, tc := range []struct{ master, server, want string }{
		{"v1.4.2", "v1.4.0", ""},
		{"v1.4.0", "v1.3.9", ""}, // not restarted yet
		{"v1.4.0", "v1.5.0", "upgrade the masters first"},
		{"v1.4.0", "v1.2.0", "one minor version at a time"},
		{"v2.0.0", "v1.9.0", "different major versions"},
		{"dev", "v9.0.0", ""},
		{"v1.0.0", "fc6eab3", ""},
	} {
		err := CheckServer(tc.master, tc.server)
		if (tc.want == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), tc.want)) {
			t.Errorf("CheckServer(%s, %s) = %v, want %q", tc.master, tc.server, err, tc.want)
		}
	}
}

func TestCheckUpgrade(t *testing.T) {
	for _, tc := range []struct{ from, to, want string }{
		{"v1.3.2", "v1.3.5", ""},
		{"v1.3.5", "v1.3.2", ""}, // a patch back
		{"v1.3.2", "v1.4.0", ""},
		{"v1.3.2", "v1.5.0", "upgrade one minor version at a time (to v1.4.x first)"},
		{"v1.4.0", "v1.3.9", "minor downgrade"},
		{"v1.9.0", "v2.0.0", "major version"},
		{"fc6eab3", "v9.0.0", ""},
	} {
		err := CheckUpgrade(tc.from, tc.to)
		if (tc.want == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), tc.want)) {
			t.Errorf("CheckUpgrade(%s, %s) = %v, want %q", tc.from, tc.to, err, tc.want)
		}
	}
}

func TestDistinct(t *testing.T) {
	got := Distinct([]string{"v1.10.0", "", "dev", "v1.2.0", "v1.10.0", "abc123", "v1.2.0-rc.1", "v1.2.0+build-7", "v0.9.9"})
	want := []string{"v0.9.9", "v1.2.0-rc.1", "v1.2.0", "v1.2.0+build-7", "v1.10.0", "abc123", "dev"}
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("Distinct = %v, want %v", got, want)
	}
}
