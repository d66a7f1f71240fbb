//go:build tools

// Package k8sbuild pins the upstream Kubernetes and etcd programs that hack/k8s-binaries.sh builds for
// envtest and the local cluster. It is a build-only wrapper module, not part of Cellstore.
package k8sbuild

import (
	_ "go.etcd.io/etcd/server/v3/etcdmain"
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kube-controller-manager"
	_ "k8s.io/kubernetes/cmd/kube-proxy"
	_ "k8s.io/kubernetes/cmd/kube-scheduler"
	_ "k8s.io/kubernetes/cmd/kubectl"
	_ "k8s.io/kubernetes/cmd/kubelet"
)
