#!/usr/bin/env bash
# hack/pe-report.sh [RUNS]: the performance report of docs/benchmarks.md. Starts a standalone store
# on a temporary directory (stopped by PID and removed on exit, also on failure), loads it with
# `cellstore pe`, runs each measured command RUNS times (default 3) and prints, per command, the run
# with the median throughput, then the region server's RSS and Go heap. Needs jq.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
RUNS=${1:-3}
command -v jq >/dev/null || { echo "pe-report: needs jq (apt-get install jq)" >&2; exit 1; }

echo "==> building bin/cellstore" >&2
go build -o bin/cellstore ./engine/cmd/cellstore

# shellcheck source=hack/lib/standalone.sh
source "$ROOT/hack/lib/standalone.sh"
standalone_start "$(mktemp -d /tmp/cellstore-pe.XXXXXX)"

pe() { bin/cellstore pe --masters "$MASTER" --valueSize 100 --json "$@" 2>/dev/null; }

echo "==> loading TestTable: sequentialWrite, 4 threads x 100,000 rows (not measured)" >&2
pe --rows 100000 sequentialWrite 4 >/dev/null

printf '%-44s %12s %12s %9s %9s %s\n' "command" "ops/s" "rows/s" "p50 us" "p99 us" "(all runs, ops/s)"
measure() { # LABEL PE-ARGS...
	local label=$1 runs=() i
	shift
	for i in $(seq "$RUNS"); do
		echo "    $label: run $i of $RUNS" >&2
		runs+=("$(pe "$@")")
	done
	local line
	line=$(printf '%s\n' "${runs[@]}" | jq -rs '
		(sort_by(.ops_per_sec)) as $r | ($r[((length - 1) / 2 | floor)]) as $m |
		[($m.ops_per_sec | floor), ($m.rows_per_sec | floor), $m.latency_us.p50, $m.latency_us.p99,
		 ([$r[].ops_per_sec | floor | tostring] | join(", ")),
		 ([$r[].errors | to_entries[] | "\(.key)=\(.value)"] | join(" "))] | @tsv')
	local ops rows p50 p99 all errs
	IFS=$'\t' read -r ops rows p50 p99 all errs <<<"$line"
	printf '%-44s %12s %12s %9s %9s (%s)%s\n' "$label" "$ops" "$rows" "$p50" "$p99" "$all" "${errs:+  ERRORS: $errs}"
}
measure "sequentialWrite 1 thread (batches of 1000)" --rows 100000 --batchSize 1000 --table SeqWrite sequentialWrite 1
measure "randomWrite --autoFlush 4 threads" --rows 100000 --duration 10s --autoFlush randomWrite 4
measure "randomRead 1 thread" --rows 100000 --duration 10s randomRead 1
measure "randomRead 4 threads" --rows 100000 --duration 10s randomRead 4
measure "scan 1 thread (caching 100)" --rows 400000 scan 1
measure "scan 1 thread (caching 1000)" --rows 400000 --caching 1000 scan 1
measure "scanRange100 1 thread" --rows 100000 --duration 10s scanRange100 1
measure "increment 1 thread" --rows 100000 --duration 10s increment 1
measure "increment 4 threads" --rows 100000 --duration 10s increment 4

metrics=$(curl -fs "http://$HTTP/metrics")
heap=$(awk '$1 == "go_memory_classes_heap_objects_bytes" {printf "%.1f", $2 / 1048576}' <<<"$metrics")
offheap=$(awk '$1 ~ /^cellstore_offheap_arena_bytes/ {s += $2} END {printf "%.0f", s / 1048576}' <<<"$metrics")
rss=$(awk '/^VmRSS/ {printf "%.1f", $2 / 1024}' "/proc/$PID/status")
hwm=$(awk '/^VmHWM/ {printf "%.1f", $2 / 1024}' "/proc/$PID/status")
echo
echo "store process (master + region server): RSS ${rss} MiB (peak ${hwm} MiB), Go heap objects ${heap} MiB, off-heap arenas mapped ${offheap} MiB"
