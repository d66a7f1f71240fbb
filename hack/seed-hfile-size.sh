#!/usr/bin/env bash
# Re-runs the HBase blog post "The Effect of ColumnFamily, RowKey and KeyValue Design on HFile
# Size" (Meil and Murphy, 2014) on Cellstore's store files: five designs × compression × data
# block encoding, each written as one store file; prints the sizes as markdown tables
# (docs/benchmarks.md, "Store file size by design"). Takes a few seconds; nothing to start.
#
# Usage: hack/seed-hfile-size.sh [-rows 1000] [-seed 1]
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
exec go run ./hack/tools/hfilesize "$@"
