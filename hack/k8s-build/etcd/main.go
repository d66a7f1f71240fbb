// Command etcd is upstream etcd's server entry point, built from its Go module for envtest and the
// local cluster (hack/k8s-binaries.sh).
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() { etcdmain.Main(os.Args) }
