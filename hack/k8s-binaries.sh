#!/usr/bin/env bash
# Builds the Kubernetes programs Cellstore's tests run, from Go modules only (no release downloads):
#
#   envtest set:  kube-apiserver, etcd, kubectl
#   cluster set:  the envtest set + kubelet, kube-controller-manager, kube-scheduler, kube-proxy,
#                 coredns, cri-cleanup
#
# into bin/k8s/<kubernetes version>/. Versions are pinned by the wrapper modules hack/k8s-build
# (Kubernetes, etcd, a CRI clean-up client) and hack/coredns-build (CoreDNS). A binary is rebuilt only
# when its wrapper module changed, so a second run takes seconds.
#
# Usage: hack/k8s-binaries.sh [envtest|cluster]   (default: cluster)
#        hack/k8s-binaries.sh --print-dir         prints the output directory and exits
set -euo pipefail

K8S_VERSION=v1.34.4
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
OUT=${K8S_BIN_DIR:-$ROOT/bin/k8s/$K8S_VERSION}

case "${1:-cluster}" in
  --print-dir) echo "$OUT"; exit 0 ;;
  envtest) set_name=envtest ;;
  cluster) set_name=cluster ;;
  *) echo "usage: $0 [envtest|cluster|--print-dir]" >&2; exit 2 ;;
esac

command -v go >/dev/null || { echo "k8s-binaries: go is not on PATH; install Go 1.24 or newer first" >&2; exit 1; }
mkdir -p "$OUT"
T0=$(date +%s)
say() { printf '[k8s-binaries %4ss] %s\n' "$(( $(date +%s) - T0 ))" "$*"; }

# -X flags so that `kubectl version` and the apiserver's /version report the real release.
minor=${K8S_VERSION#v1.}; minor=${minor%%.*}
ldflags="-s -w"
for p in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
  ldflags+=" -X $p.gitVersion=$K8S_VERSION -X $p.gitMajor=1 -X $p.gitMinor=$minor -X $p.gitTreeState=clean"
  ldflags+=" -X $p.buildDate=1970-01-01T00:00:00Z"
done

# build NAME MODULE_DIR PACKAGE: skipped when the binary exists and was built from the same module files.
build() {
  local name=$1 mod=$2 pkg=$3 stamp want
  stamp="$OUT/.$name.stamp"
  want=$( (cat "$mod/go.mod" "$mod/go.sum"; echo "$pkg $ldflags"; go env GOVERSION) | sha256sum | cut -d' ' -f1)
  if [ -x "$OUT/$name" ] && [ "$(cat "$stamp" 2>/dev/null)" = "$want" ]; then
    say "$name: up to date"
    return 0
  fi
  say "$name: building $pkg (first build of the cluster set takes 10-20 minutes on 2 cores)"
  local t=$(date +%s)
  if ! (cd "$mod" && CGO_ENABLED=0 go build -trimpath -ldflags "$ldflags" -o "$OUT/$name.tmp" "$pkg"); then
    rm -f "$OUT/$name.tmp"
    echo "k8s-binaries: building $name failed (see the compiler output above). If modules could not be" >&2
    echo "downloaded, check that the Go module proxy is reachable (go env GOPROXY)." >&2
    exit 1
  fi
  mv "$OUT/$name.tmp" "$OUT/$name"
  echo "$want" > "$stamp"
  say "$name: built in $(( $(date +%s) - t ))s"
}

K=$ROOT/hack/k8s-build
build etcd "$K" ./etcd
build kube-apiserver "$K" k8s.io/kubernetes/cmd/kube-apiserver
build kubectl "$K" k8s.io/kubernetes/cmd/kubectl
if [ "$set_name" = cluster ]; then
  build kube-controller-manager "$K" k8s.io/kubernetes/cmd/kube-controller-manager
  build kube-scheduler "$K" k8s.io/kubernetes/cmd/kube-scheduler
  build kubelet "$K" k8s.io/kubernetes/cmd/kubelet
  build kube-proxy "$K" k8s.io/kubernetes/cmd/kube-proxy
  build cri-cleanup "$K" ./cri-cleanup
  build coredns "$ROOT/hack/coredns-build" .
fi
say "done: $set_name binaries in $OUT"
