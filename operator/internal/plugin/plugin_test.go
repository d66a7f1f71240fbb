package plugin

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"
)

// noCluster is a connect for tests that need no API server: it fails, and counts its calls.
func noCluster(calls *int) func(ConnectOptions) (*Env, error) {
	return func(ConnectOptions) (*Env, error) {
		*calls++
		return nil, errors.New("no kubeconfig")
	}
}

// The help reads as kubectl runs the plugin ("kubectl cellstore"), the binary keeps its name.
func TestUsage(t *testing.T) {
	var calls int
	for _, tc := range []struct {
		args []string
		want []string
	}{
		{[]string{"--help"}, []string{"Usage:\n  kubectl cellstore [command]\n", `Use "kubectl cellstore [command] --help"`, "help for kubectl cellstore"}},
		{[]string{"status", "--help"}, []string{"Usage:\n  kubectl cellstore status NAME [flags]\n"}},
		{[]string{"drain", "--help"}, []string{"Usage:\n  kubectl cellstore drain NAME SERVER [flags]\n"}},
	} {
		var out bytes.Buffer
		if err := Main(context.Background(), append([]string{"/usr/local/bin/kubectl-cellstore"}, tc.args...), noCluster(&calls), &out, &out); err != nil {
			t.Fatalf("%v: %v", tc.args, err)
		}
		for _, want := range tc.want {
			if !strings.Contains(out.String(), want) {
				t.Errorf("%v lacks %q:\n%s", tc.args, want, out.String())
			}
		}
		if strings.Contains(out.String(), "kubectl-cellstore") {
			t.Errorf("%v names the binary instead of kubectl cellstore:\n%s", tc.args, out.String())
		}
	}
	if calls != 0 {
		t.Errorf("help connected %d times", calls)
	}
	if n := NewCommand(noCluster(&calls)).Name(); n != "kubectl-cellstore" {
		t.Errorf("the root command is %q: cobra's completion scripts name the binary by it", n)
	}
}

// Run as kubectl_complete-cellstore, the binary prints cobra's completions of its arguments; what
// needs no API server is completed without one, and when the API server cannot be reached nothing
// is offered and nothing but the directive is printed.
func TestCompletionHelper(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
		// connects: the completion needs the API server (here: fails to reach it).
		connects bool
	}{
		{[]string{"sta"}, "status\tShow a StoreCluster: phase, servers, regions, conditions, rollout and the last restarts\n:4\n", false},
		{[]string{}, "", false}, // checked below: every subcommand
		{[]string{"hibernate", "prod", ""}, "on\noff\n:4\n", false},
		{[]string{"hibernate", "prod", "of"}, "off\n:4\n", false},
		{[]string{"logs", "prod", "--role", ""}, "master\nregionserver\n:4\n", false},
		{[]string{"status", "prod", ""}, ":4\n", false},
		{[]string{"status", ""}, ":5\n", true},
		{[]string{"drain", "prod", ""}, ":5\n", true},
		{[]string{"hibernate", ""}, ":5\n", true},
		{[]string{"-n", ""}, ":5\n", true},
	} {
		var calls int
		var out, errOut bytes.Buffer
		argv := append([]string{"/home/me/bin/" + CompletionHelper}, tc.args...)
		if err := Main(context.Background(), argv, noCluster(&calls), &out, &errOut); err != nil {
			t.Fatalf("%v: %v", tc.args, err)
		}
		if len(tc.args) == 0 {
			for _, sub := range []string{"status\t", "drain\t", "logs\t", "hibernate\t"} {
				if !strings.Contains(out.String(), "\n"+sub) {
					t.Errorf("no arguments: %q not offered:\n%s", sub, out.String())
				}
			}
			if !strings.HasSuffix(out.String(), "\n:4\n") {
				t.Errorf("no arguments: %q", out.String())
			}
		} else if out.String() != tc.want {
			t.Errorf("%v: %q, want %q", tc.args, out.String(), tc.want)
		}
		if (calls > 0) != tc.connects {
			t.Errorf("%v connected %d times", tc.args, calls)
		}
	}
}

func TestCommandArgs(t *testing.T) {
	for _, tc := range []struct{ argv, want []string }{
		{[]string{"kubectl-cellstore", "status", "prod"}, []string{"status", "prod"}},
		{[]string{"/usr/bin/kubectl-cellstore"}, []string{}},
		{[]string{"/usr/bin/kubectl_complete-cellstore", "status", ""}, []string{"__complete", "status", ""}},
		{[]string{"/c/bin/kubectl_complete-cellstore.exe", "st"}, []string{"__complete", "st"}},
		{[]string{"kubectl_complete-cellstore"}, []string{"__complete", ""}},
		{[]string{"/bin/kubectl_complete-cellstore-old", "st"}, []string{"st"}},
	} {
		if got := commandArgs(tc.argv); strings.Join(got, "\x00") != strings.Join(tc.want, "\x00") || got == nil {
			t.Errorf("%q: %q, want %q", tc.argv, got, tc.want)
		}
	}
}

// Messages print on one line, with nothing a terminal would act on.
func TestOneLine(t *testing.T) {
	if got := oneLine("bucket \x1b]0;pwned\x07 missing\nretrying\tsoon ✓"); got != "bucket  ]0;pwned  missing retrying soon ✓" {
		t.Errorf("oneLine: %q", got)
	}
}
