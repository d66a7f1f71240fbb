package processtest

import (
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
)

// Two test binaries running at once are never handed the same port, and no port FreePort hands
// out is one the kernel gives a listener on port 0.
func TestFreePortIsOneBinarysOwn(t *testing.T) {
	if parent := os.Getenv("PROCESSTEST_CHILD"); parent != "" {
		// The second binary, looking for a block where the parent took one: it must take others.
		pid, _ := strconv.Atoi(parent)
		firstBlock = func() int { return pid }
		var out []string
		for range portBlock + 2 { // more than one block
			out = append(out, FreePort(t))
		}
		os.Stdout.WriteString("ports " + strings.Join(out, " ") + "\n")
		return
	}
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		t.Fatal(err)
	}
	var first, last int
	if _, err := fmt.Sscan(string(b), &first, &last); err != nil {
		t.Fatalf("ip_local_port_range %q: %v", b, err)
	}
	mine := map[string]bool{}
	for range 3 {
		p := FreePort(t)
		n, _ := strconv.Atoi(p)
		if n >= first && n <= last {
			t.Fatalf("port %d is in the kernel's ephemeral range %d-%d", n, first, last)
		}
		if mine[p] {
			t.Fatalf("port %s handed out twice", p)
		}
		mine[p] = true
	}
	cmd := exec.Command(os.Args[0], "-test.run", "^TestFreePortIsOneBinarysOwn$")
	cmd.Env = append(os.Environ(), "PROCESSTEST_CHILD="+strconv.Itoa(os.Getpid()))
	b, err = cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("child: %v\n%s", err, b)
	}
	i := strings.Index(string(b), "ports ")
	if i < 0 {
		t.Fatalf("child printed no ports:\n%s", b)
	}
	theirs := strings.Fields(strings.SplitN(string(b[i+len("ports "):]), "\n", 2)[0])
	if len(theirs) != portBlock+2 {
		t.Fatalf("child handed out %d ports, want %d", len(theirs), portBlock+2)
	}
	seen := map[string]bool{}
	for _, p := range theirs {
		if mine[p] || seen[p] {
			t.Fatalf("port %s handed to both binaries or twice to the child (mine %v, theirs %v)", p, mine, theirs)
		}
		seen[p] = true
	}
}

// The test ports take the larger part of 20000-29999 the ephemeral range leaves, on either side.
func TestPortWindow(t *testing.T) {
	for _, c := range []struct {
		first, last, lo, hi int
		err                 bool
	}{
		{32768, 60999, 20000, 30000, false}, // Linux's default: above the window
		{1024, 4999, 20000, 30000, false},   // below it
		{15000, 25000, 25001, 30000, false}, // over its start: the part above
		{25000, 40000, 20000, 25000, false}, // over its end: the part below
		{22000, 23000, 23001, 30000, false}, // inside: the larger side
		{27000, 28000, 20000, 27000, false},
		{10000, 40000, 0, 0, true}, // over all of it
		{20100, 29900, 0, 0, true}, // too little left on either side
	} {
		lo, hi, err := portWindow(c.first, c.last)
		if (err != nil) != c.err || !c.err && (lo != c.lo || hi != c.hi) {
			t.Errorf("ephemeral %d-%d: %d-%d, %v; want %d-%d (error %v)", c.first, c.last, lo, hi, err, c.lo, c.hi, c.err)
		}
	}
}
