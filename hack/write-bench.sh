#!/usr/bin/env bash
# hack/write-bench.sh [RUNS]: the write-path report of docs/benchmarks.md, the write commands of
# HBase's PerformanceEvaluation run with `cellstore pe` against a standalone store (SYNC_WAL, 100-byte
# values, TestTable pre-split into 4 regions, client on the same machine). It first measures the
# disk's own write + sync latency (so readers can compare machines), then runs each command RUNS
# times (default 3) and prints, per command, the run with the median throughput and the WAL's
# appends per sync during that command. The store runs on a temporary directory under TMPDIR,
# stopped by PID and removed on exit, also on failure. Extra store flags: STANDALONE_FLAGS; ONLY=regex
# runs only the commands whose label matches.
# Needs jq.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
RUNS=${1:-3}
command -v jq >/dev/null || { echo "write-bench: needs jq (apt-get install jq)" >&2; exit 1; }

echo "==> the disk: write 300 bytes + fdatasync into a preallocated file (TMPDIR=${TMPDIR:-/tmp})" >&2
go test -run XXX -bench LocalAppendSync -benchtime 3000x ./engine/storage/ |
	awk '/^BenchmarkLocalAppendSync/ {sub(/.*syncers=/, "", $1); sub(/-[0-9]+$/, "", $1);
		printf "disk: %s syncer(s): %.0f us per write+sync, %.0f syncs/s\n", $1, $3 / 1000, 1e9 / $3}'

echo "==> building bin/cellstore" >&2
go build -o bin/cellstore ./engine/cmd/cellstore

# shellcheck source=hack/lib/standalone.sh
source "$ROOT/hack/lib/standalone.sh"
standalone_start "$(mktemp -d "${TMPDIR:-/tmp}/cellstore-wb.XXXXXX")"

pe() { bin/cellstore pe --masters "$MASTER" --valueSize 100 --presplit 4 --json "$@" 2>/dev/null; }

echo "==> creating TestTable (4 regions) with 100,000 rows (not measured)" >&2
pe --rows 25000 sequentialWrite 4 >/dev/null

printf '%-40s %9s %9s %8s %8s %9s %10s %s\n' "command" "ops/s" "rows/s" "p50 us" "p99 us" "p99.9 us" "app/sync" "(all runs, ops/s)"
measure() { # LABEL PE-ARGS...
	local label=$1 runs=() aps=() i a0 s0 a1 s1
	shift
	[[ $label =~ ${ONLY:-.} ]] || return 0
	for i in $(seq "$RUNS"); do
		echo "    $label: run $i of $RUNS" >&2
		a0=$(metric cellstore_regionserver_wal_append_count)
		s0=$(metric cellstore_regionserver_wal_sync_count)
		runs+=("$(pe "$@")")
		a1=$(metric cellstore_regionserver_wal_append_count)
		s1=$(metric cellstore_regionserver_wal_sync_count)
		aps+=("$(awk -v a=$((a1 - a0)) -v s=$((s1 - s0)) 'BEGIN {printf "%.2f", s ? a / s : 0}')")
	done
	local line
	line=$(for i in "${!runs[@]}"; do jq -c --arg aps "${aps[$i]}" '. + {aps: $aps}' <<<"${runs[$i]}"; done | jq -rs '
		(sort_by(.ops_per_sec)) as $r | ($r[((length - 1) / 2 | floor)]) as $m |
		[($m.ops_per_sec | floor), ($m.rows_per_sec | floor), $m.latency_us.p50, $m.latency_us.p99,
		 $m.latency_us["p99.9"], $m.aps,
		 ([$r[].ops_per_sec | floor | tostring] | join(", ")),
		 ([$r[].errors | to_entries[] | "\(.key)=\(.value)"] | join(" "))] | @tsv')
	local ops rows p50 p99 p999 ap all errs
	IFS=$'\t' read -r ops rows p50 p99 p999 ap all errs <<<"$line"
	printf '%-40s %9s %9s %8s %8s %9s %10s (%s)%s\n' "$label" "$ops" "$rows" "$p50" "$p99" "$p999" "$ap" "$all" "${errs:+  ERRORS: $errs}"
}
measure "sequentialWrite 1 thread (2 MiB buffer)" --rows 500000 --table SeqWrite sequentialWrite 1
measure "randomWrite --autoFlush 1 thread" --rows 25000 --duration 10s --autoFlush randomWrite 1
measure "randomWrite --autoFlush 4 threads" --rows 25000 --duration 10s --autoFlush randomWrite 4
measure "randomWrite --autoFlush 16 threads" --rows 25000 --duration 10s --autoFlush randomWrite 16
measure "increment 4 threads" --rows 25000 --duration 10s increment 4
measure "checkAndPut 4 threads" --rows 25000 --duration 10s checkAndPut 4
