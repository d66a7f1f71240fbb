#!/usr/bin/env bash
# Builds the S3 server the tests run — MinIO, from its Go module through the module proxy (no
# release download) — into bin/tools/minio-<version>. A second run finds it and takes no time.
# The first build takes about 4 minutes on 2 cores from a cold module cache.
#
# Usage: hack/s3-server.sh               build if missing, print the binary's path
#        hack/s3-server.sh --print-path  print the path only
set -euo pipefail
MINIO_VERSION=v0.0.0-20260212201848-7aac2a2c5b7c
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BIN=$ROOT/bin/tools/minio-$MINIO_VERSION
case "${1:-}" in
  --print-path) echo "$BIN"; exit 0 ;;
  "") ;;
  *) echo "usage: $0 [--print-path]" >&2; exit 2 ;;
esac
if [ ! -x "$BIN" ]; then
  command -v go >/dev/null || { echo "s3-server: go is not on PATH" >&2; exit 1; }
  echo "s3-server: building MinIO $MINIO_VERSION from its Go module (about 4 minutes on 2 cores the first time)" >&2
  tmp=$(mktemp -d "$ROOT/bin/tools/.minio-build.XXXXXX" 2>/dev/null || { mkdir -p "$ROOT/bin/tools"; mktemp -d "$ROOT/bin/tools/.minio-build.XXXXXX"; })
  trap 'rm -rf "$tmp"' EXIT
  # Its own module context: MinIO's dependencies never enter the project's go.mod.
  (cd "$tmp" && GOFLAGS=-mod=mod GOBIN="$tmp" CGO_ENABLED=0 go install -trimpath -ldflags "-s -w" "github.com/minio/minio@$MINIO_VERSION")
  mv "$tmp/minio" "$BIN"
fi
echo "$BIN"
