// Command cri-cleanup stops and removes every pod sandbox of a CRI runtime, so that the runtime runs
// each pod's CNI teardown before hack/local-cluster.sh stops it. crictl (cri-tools) is not served by
// the Go module proxy here, hence this small client.
//
//	cri-cleanup -endpoint unix:///run/cellstore-k8s/containerd/containerd.sock
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

func main() {
	endpoint := flag.String("endpoint", "", "CRI socket, e.g. unix:///run/containerd/containerd.sock")
	timeout := flag.Duration("timeout", 90*time.Second, "overall time limit")
	flag.Parse()
	if *endpoint == "" {
		fmt.Fprintln(os.Stderr, "cri-cleanup: -endpoint is required")
		os.Exit(2)
	}
	if err := run(*endpoint, *timeout); err != nil {
		fmt.Fprintln(os.Stderr, "cri-cleanup:", err)
		os.Exit(1)
	}
}

func run(endpoint string, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	conn, err := grpc.NewClient(endpoint, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return fmt.Errorf("connect %s: %w", endpoint, err)
	}
	defer conn.Close()
	rt := runtimeapi.NewRuntimeServiceClient(conn)
	pods, err := rt.ListPodSandbox(ctx, &runtimeapi.ListPodSandboxRequest{})
	if err != nil {
		return fmt.Errorf("list pod sandboxes: %w", err)
	}
	var failed int
	for _, p := range pods.Items {
		name := p.GetMetadata().GetNamespace() + "/" + p.GetMetadata().GetName()
		if _, err := rt.StopPodSandbox(ctx, &runtimeapi.StopPodSandboxRequest{PodSandboxId: p.Id}); err != nil {
			fmt.Fprintf(os.Stderr, "stop %s: %v\n", name, err)
			failed++
			continue
		}
		if _, err := rt.RemovePodSandbox(ctx, &runtimeapi.RemovePodSandboxRequest{PodSandboxId: p.Id}); err != nil {
			fmt.Fprintf(os.Stderr, "remove %s: %v\n", name, err)
			failed++
			continue
		}
		fmt.Printf("removed pod sandbox %s\n", name)
	}
	if failed > 0 {
		return fmt.Errorf("%d of %d pod sandboxes could not be removed", failed, len(pods.Items))
	}
	return nil
}
