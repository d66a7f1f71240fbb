#!/usr/bin/env bash
# Builds container images as docker-archive tarballs into bin/images/, without a Docker daemon or a
# registry (hack/tools/imagetar packs static binaries into a single-layer image that runs as non-root).
# hack/local-cluster.sh load bin/images/NAME.tar puts one into the local cluster.
#
# Usage: hack/images.sh NAME...      NAME: engine operator pause coredns netcheck loadcheck minio
#        hack/images.sh --ref NAME   prints the image reference of NAME
#        hack/images.sh --list       prints the names
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
OUT=$ROOT/bin/images
TOOLS=$ROOT/bin/tools
mkdir -p "$OUT" "$TOOLS"

# Engine and operator images carry the version of the checkout (never :latest).
VERSION=${VERSION:-$(cd "$ROOT" && git describe --tags --always --dirty 2>/dev/null || echo dev)}
VERSION=${VERSION//+/-}

ref() {
  case $1 in
    engine) echo "docker.io/cellstore/engine:$VERSION" ;;
    operator) echo "docker.io/cellstore/operator:$VERSION" ;;
    pause) echo docker.io/cellstore/pause:3.10 ;;
    coredns) echo docker.io/cellstore/coredns:v1.12.4 ;;
    netcheck) echo "docker.io/cellstore/netcheck:$VERSION" ;;
    loadcheck) echo "docker.io/cellstore/loadcheck:$VERSION" ;;
    minio) echo "docker.io/cellstore/minio:$(basename "$("$ROOT/hack/s3-server.sh" --print-path)" | sed 's/^minio-//')" ;;
    *) echo "images: unknown image '$1' (known: $NAMES)" >&2; return 2 ;;
  esac
}
NAMES="engine operator pause coredns netcheck loadcheck minio"
if [ "${1:-}" = --ref ]; then ref "${2:?image name}"; exit; fi
if [ "${1:-}" = --list ]; then echo "$NAMES"; exit; fi
[ $# -gt 0 ] || { echo "usage: $0 NAME... ($NAMES) | --ref NAME | --list" >&2; exit 2; }

gobuild() { # OUT PKG: a static linux binary
  (cd "$ROOT" && CGO_ENABLED=0 GOOS=linux go build -trimpath -ldflags "-s -w -X main.version=$VERSION" -o "$1" "$2")
}
gobuild "$TOOLS/imagetar" ./hack/tools/imagetar

for name in "$@"; do
  r=$(ref "$name")
  case $name in
    engine)
      gobuild "$TOOLS/cellstore" ./engine/cmd/cellstore
      "$TOOLS/imagetar" --ref "$r" --out "$OUT/engine.tar" --file "$TOOLS/cellstore:/usr/local/bin/cellstore" --entrypoint /usr/local/bin/cellstore ;;
    operator)
      gobuild "$TOOLS/manager" ./operator/cmd
      "$TOOLS/imagetar" --ref "$r" --out "$OUT/operator.tar" --file "$TOOLS/manager:/manager" --entrypoint /manager ;;
    pause)
      gobuild "$TOOLS/pause" ./hack/tools/pause
      "$TOOLS/imagetar" --ref "$r" --out "$OUT/pause.tar" --file "$TOOLS/pause:/pause" --entrypoint /pause ;;
    coredns)
      k8sbin=$("$ROOT/hack/k8s-binaries.sh" --print-dir)
      [ -x "$k8sbin/coredns" ] || "$ROOT/hack/k8s-binaries.sh" cluster
      # non-root binds port 53: the cluster's containerd sets ip_unprivileged_port_start=0 in pods.
      "$TOOLS/imagetar" --ref "$r" --out "$OUT/coredns.tar" --file "$k8sbin/coredns:/coredns" --entrypoint /coredns ;;
    netcheck)
      gobuild "$TOOLS/netcheck" ./e2e/netcheck
      "$TOOLS/imagetar" --ref "$r" --out "$OUT/netcheck.tar" --file "$TOOLS/netcheck:/usr/local/bin/netcheck" --entrypoint "/usr/local/bin/netcheck" ;;
    loadcheck)
      gobuild "$TOOLS/loadcheck" ./e2e/loadcheck
      "$TOOLS/imagetar" --ref "$r" --out "$OUT/loadcheck.tar" --file "$TOOLS/loadcheck:/usr/local/bin/loadcheck" --entrypoint "/usr/local/bin/loadcheck" ;;
    minio)
      # A development S3 server in the cluster (quickstart, e2e): MinIO built from its Go module.
      "$TOOLS/imagetar" --ref "$r" --out "$OUT/minio.tar" --file "$("$ROOT/hack/s3-server.sh"):/usr/local/bin/minio" --entrypoint /usr/local/bin/minio ;;
  esac
done
