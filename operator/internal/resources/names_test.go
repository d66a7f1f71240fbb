package resources

import "testing"

func TestImageTag(t *testing.T) {
	for in, want := range map[string]string{
		"docker.io/cellstore/engine:v1.2.3":             "v1.2.3",
		"registry.example:5000/cellstore/engine:v1.2.3": "v1.2.3",
		"registry.example:5000/cellstore/engine":        "",
		"cellstore/engine@sha256:abcd":                  "",
		"cellstore/engine:v1.2.3@sha256:abcd":           "v1.2.3",
		"engine":                                        "",
	} {
		if got := ImageTag(in); got != want {
			t.Errorf("ImageTag(%q) = %q, want %q", in, got, want)
		}
	}
}
