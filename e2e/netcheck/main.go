// Command netcheck is the end-to-end suite's test workload: a tiny HTTP server and a few client
// commands, packed by itself into an image so that the suite needs no image from a registry.
//
//	netcheck serve            serve "hello from $HOSTNAME" on :8080 until SIGTERM
//	netcheck resolve NAME     print the addresses NAME resolves to, one per line
//	netcheck get URL          HTTP GET, print the body; exit 1 unless 200
//	netcheck write FILE TEXT  write TEXT to FILE (tests that a volume is writable)
//	netcheck cat FILE         print FILE
//	netcheck signal SIG PID   send SIG (KILL, QUIT, TERM) to PID; from an ephemeral container that
//	                          shares a container's process namespace, QUIT makes a Go program
//	                          (PID 1 there, which ignores KILL sent from inside) exit at once
package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"syscall"
	"time"
)

func main() {
	if len(os.Args) < 2 {
		fail("usage: netcheck serve | resolve NAME | get URL | write FILE TEXT | cat FILE | signal SIG PID")
	}
	args := os.Args[2:]
	switch os.Args[1] {
	case "serve":
		serve()
	case "resolve":
		need(args, 1)
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		addrs, err := net.DefaultResolver.LookupHost(ctx, args[0])
		check(err)
		for _, a := range addrs {
			fmt.Println(a)
		}
	case "get":
		need(args, 1)
		c := &http.Client{Timeout: 5 * time.Second}
		resp, err := c.Get(args[0])
		check(err)
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		check(err)
		fmt.Print(string(body))
		if resp.StatusCode != http.StatusOK {
			fail(resp.Status)
		}
	case "write":
		need(args, 2)
		check(os.WriteFile(args[0], []byte(args[1]), 0o644))
	case "cat":
		need(args, 1)
		b, err := os.ReadFile(args[0])
		check(err)
		fmt.Print(string(b))
	case "signal":
		need(args, 2)
		sig, ok := map[string]syscall.Signal{"KILL": syscall.SIGKILL, "QUIT": syscall.SIGQUIT, "TERM": syscall.SIGTERM}[args[0]]
		if !ok {
			fail("unknown signal " + args[0] + " (KILL, QUIT or TERM)")
		}
		pid, err := strconv.Atoi(args[1])
		check(err)
		check(syscall.Kill(pid, sig))
	default:
		fail("unknown command " + os.Args[1])
	}
}

func serve() {
	host, _ := os.Hostname()
	srv := &http.Server{Addr: ":8080", ReadHeaderTimeout: 5 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprintf(w, "hello from %s\n", host)
	})}
	go func() {
		ch := make(chan os.Signal, 1)
		signal.Notify(ch, syscall.SIGTERM, syscall.SIGINT)
		<-ch
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
	}()
	if err := srv.ListenAndServe(); err != nil && err != http.ErrServerClosed {
		fail(err.Error())
	}
}

func need(args []string, n int) {
	if len(args) < n {
		fail(fmt.Sprintf("%s needs %d argument(s)", os.Args[1], n))
	}
}

func check(err error) {
	if err != nil {
		fail(err.Error())
	}
}

func fail(msg string) {
	fmt.Fprintln(os.Stderr, "netcheck:", msg)
	os.Exit(1)
}
