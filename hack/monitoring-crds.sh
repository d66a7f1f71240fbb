#!/usr/bin/env bash
# Copies prometheus-operator's ServiceMonitor, PodMonitor and PrometheusRule CRDs out of its Go module
# (pinned below; fetched through the Go module proxy) into bin/crds/prometheus-operator/. Tests install
# them to exercise "monitoring CRDs present"; the e2e suite installs them into the cluster.
# Prints the directory.
set -euo pipefail
VERSION=v0.85.0
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
OUT=$ROOT/bin/crds/prometheus-operator/$VERSION
FILES=(monitoring.coreos.com_servicemonitors.yaml monitoring.coreos.com_podmonitors.yaml monitoring.coreos.com_prometheusrules.yaml)
if [ ! -f "$OUT/${FILES[2]}" ]; then
  dir=$(cd "$ROOT" && go mod download -json "github.com/prometheus-operator/prometheus-operator@$VERSION" |
    sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
  [ -n "$dir" ] && [ -d "$dir/example/prometheus-operator-crd" ] ||
    { echo "monitoring-crds: could not download github.com/prometheus-operator/prometheus-operator@$VERSION from the Go module proxy" >&2; exit 1; }
  mkdir -p "$OUT"
  for f in "${FILES[@]}"; do install -m 0644 "$dir/example/prometheus-operator-crd/$f" "$OUT/$f"; done
fi
echo "$OUT"
