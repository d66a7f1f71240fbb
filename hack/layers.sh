#!/usr/bin/env bash
# Checks that no lower layer of the engine imports a higher one (docs/architecture.md): each line
# below is a package and the packages it must not depend on, directly or not. Part of `make lint`.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
M=github.com/cellstore/cellstore/engine
rules=(
  "cell storage offheap wal memstore sfile blockcache schema lease security access rpc|region regionserver master client shell"
  "region layout snapshot|regionserver master client shell"
  "hbase|region regionserver master client shell"
  "regionserver|master client shell"
  "client|regionserver master shell region"
  "master|regionserver client shell"
)
bad=0
for r in "${rules[@]}"; do
  pkgs=${r%%|*} forbidden=${r##*|}
  for p in $pkgs; do
    deps=$(go list -deps "$M/$p")
    for f in $forbidden; do
      if grep -qx "$M/$f" <<<"$deps"; then
        echo "layering: engine/$p depends on engine/$f (a lower layer must not import a higher one)"
        bad=1
      fi
    done
  done
done
exit $bad
