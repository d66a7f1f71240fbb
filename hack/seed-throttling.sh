#!/usr/bin/env bash
# The seed's throttling study, on one machine: two tenants share a standalone store (stopped by PID
# on exit) — "noisy" writes as fast as 8 threads go (randomWrite --autoFlush), "quiet" reads with 2
# threads (randomRead) — first with no quota, then with the noisy tenant throttled
# (set_quota TYPE => THROTTLE, USER => 'noisy', LIMIT => $LIMIT). Prints each tenant's ops/s and
# latency (p50/p99) in both phases (docs/benchmarks.md, "Throttling"). Needs jq.
#
# Usage: LIMIT=500req/sec PHASE_SECONDS=15 hack/seed-throttling.sh
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
LIMIT=${LIMIT:-500req/sec}
PHASE_SECONDS=${PHASE_SECONDS:-15}
command -v jq >/dev/null || { echo "seed-throttling: needs jq (apt-get install jq)" >&2; exit 1; }
echo "==> building bin/cellstore" >&2
go build -o bin/cellstore ./engine/cmd/cellstore
# shellcheck source=hack/lib/standalone.sh
source "$ROOT/hack/lib/standalone.sh"
WORK=$(mktemp -d "${TMPDIR:-/tmp}/cellstore-throttle.XXXXXX")
EXTRA_CLEANUP='rm -rf "$WORK"'
standalone_start "$WORK/store"

pe() { bin/cellstore pe --masters "$MASTER" --valueSize 100 --json "$@" 2>/dev/null; }
echo "==> loading the quiet tenant's rows" >&2
pe --user quiet --table quiet --rows 40000 sequentialWrite 1 >/dev/null

declare -A RESULT
phase() { # LABEL
	echo "==> $1: both tenants for ${PHASE_SECONDS}s" >&2
	pe --user noisy --table noisy --rows 100000 --duration "${PHASE_SECONDS}s" --autoFlush randomWrite 8 >"$WORK/noisy.json" &
	local noisy=$!
	pe --user quiet --table quiet --rows 20000 --duration "${PHASE_SECONDS}s" randomRead 2 >"$WORK/quiet.json"
	wait "$noisy"
	local t
	for t in noisy quiet; do
		RESULT[$1/$t]=$(jq -r '"\(.ops_per_sec | floor) | \(.latency_us.p50) / \(.latency_us.p99)"' "$WORK/$t.json")
	done
}
phase "no quota"
bin/cellstore shell --masters "$MASTER" -e "set_quota TYPE => THROTTLE, USER => 'noisy', LIMIT => '$LIMIT'" >&2
# Quotas reach the region server with its next heartbeat (every second).
sleep 3
phase "noisy throttled"

printf '\n| phase | noisy writes/s | noisy p50 / p99 µs | quiet reads/s | quiet p50 / p99 µs |\n|---|---|---|---|---|\n'
for p in "no quota" "noisy throttled"; do
	label=$p
	[[ $p == "noisy throttled" ]] && label="noisy throttled to $LIMIT"
	printf '| %s | %s | %s |\n' "$label" "${RESULT[$p/noisy]}" "${RESULT[$p/quiet]}"
done
