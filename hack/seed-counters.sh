#!/usr/bin/env bash
# The seed's "increment vs read-modify-write counters" experiment, scaled to one machine: starts a
# standalone store (stopped by PID on exit), then runs hack/tools/counters against it: the server's
# atomic Increment, a client Get then Put, and a Get then check-and-put retried until it holds,
# with many writers on a few hot counters (docs/benchmarks.md, "Counters").
#
# Usage: hack/seed-counters.sh [-threads 8] [-counters 4] [-updates 500]
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
echo "==> building bin/cellstore" >&2
go build -o bin/cellstore ./engine/cmd/cellstore
# shellcheck source=hack/lib/standalone.sh
source "$ROOT/hack/lib/standalone.sh"
standalone_start "$(mktemp -d "${TMPDIR:-/tmp}/cellstore-counters.XXXXXX")"
go run ./hack/tools/counters -masters "$MASTER" "$@"
