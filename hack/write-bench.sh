#!/usr/bin/env bash
# hack/write-bench.sh [RUNS]: the write-path report of docs/benchmarks.md, the write commands of
# HBase's PerformanceEvaluation run with `cellstore pe` against a standalone store (SYNC_WAL, 100-byte
# values, TestTable pre-split into 4 regions, client on the same machine). It first measures the
# disk's own write + sync latency and prints the cores (so readers can compare machines), then runs each command RUNS
# times (default 3) and prints, per command, the run with the median throughput and what the WAL
# did during that run: appends per sync, the mean sync (us/sync) and the share of the run it spent
# syncing (sync%: the syncs' time over the run's). The two ASYNC_WAL lines wait for no sync: the
# request path's own ceiling. HBASE=1 then runs the write commands whose workloads match with
# HBase's own PerformanceEvaluation against an Apache HBase standalone (hack/lib/hbase-standalone.sh;
# jars from Maven Central) and prints Cellstore / HBase in rows/s. The store runs on a temporary
# directory under TMPDIR, stopped by PID and removed on exit, also on failure. Extra store flags: STANDALONE_FLAGS; ONLY=regex
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

# The cores, and on a virtual machine whose idle driver is haltpoll how long an idle core polls
# before it halts (0: at once, and a thread woken onto it waits for the host to run the core again):
# it moves the few-thread figures by a sixth on the development machine (docs/benchmarks.md,
# "2026-12-06 (ninth)").
haltpoll=/sys/module/haltpoll/parameters/guest_halt_poll_ns
echo "cpus: $(nproc)$([[ -r $haltpoll ]] && echo ", an idle core polls up to $(cat $haltpoll) ns before it halts (haltpoll)")"

echo "==> building bin/cellstore" >&2
go build -o bin/cellstore ./engine/cmd/cellstore

# shellcheck source=hack/lib/standalone.sh
source "$ROOT/hack/lib/standalone.sh"
standalone_start "$(mktemp -d "${TMPDIR:-/tmp}/cellstore-wb.XXXXXX")"

pe() { bin/cellstore pe --masters "$MASTER" --valueSize 100 --presplit 4 --json "$@" 2>/dev/null; }

echo "==> creating TestTable (4 regions) with 100,000 rows (not measured)" >&2
pe --rows 25000 sequentialWrite 4 >/dev/null

printf '%-48s %9s %9s %8s %8s %9s %8s %7s %5s %s\n' "command" "ops/s" "rows/s" "p50 us" "p99 us" "p99.9 us" "app/sync" "us/sync" "sync%" "(all runs, ops/s)"
measure() { # LABEL PE-ARGS...
	local label=$1 runs=() logs=() i a0 s0 n0 t0 a1 s1 n1 t1
	shift
	[[ $label =~ ${ONLY:-.} ]] || return 0
	for i in $(seq "$RUNS"); do
		echo "    $label: run $i of $RUNS" >&2
		a0=$(metric cellstore_regionserver_wal_append_count)
		s0=$(metric cellstore_regionserver_wal_sync_count)
		n0=$(metric cellstore_regionserver_wal_sync_seconds 6)
		t0=$(date +%s.%N)
		runs+=("$(pe "$@")")
		t1=$(date +%s.%N)
		a1=$(metric cellstore_regionserver_wal_append_count)
		s1=$(metric cellstore_regionserver_wal_sync_count)
		n1=$(metric cellstore_regionserver_wal_sync_seconds 6)
		# The log during the run: appends per sync, the mean sync, its syncs' time over the run's
		# (over 100 % when syncs overlap: --wal-sync-slots, multiwal).
		logs+=("$(awk -v a=$((a1 - a0)) -v s=$((s1 - s0)) -v n0="$n0" -v n1="$n1" -v t0="$t0" -v t1="$t1" 'BEGIN {
			printf "{\"aps\": \"%.2f\", \"uss\": \"%.0f\", \"busy\": \"%.0f%%\"}", s ? a / s : 0, s ? (n1 - n0) / s * 1e6 : 0, (n1 - n0) / (t1 - t0) * 100}')")
	done
	local line
	line=$(for i in "${!runs[@]}"; do jq -c --argjson log "${logs[$i]}" '. + $log' <<<"${runs[$i]}"; done | jq -rs '
		(sort_by(.ops_per_sec)) as $r | ($r[((length - 1) / 2 | floor)]) as $m |
		[($m.ops_per_sec | floor), ($m.rows_per_sec | floor), $m.latency_us.p50, $m.latency_us.p99,
		 $m.latency_us["p99.9"], $m.aps, $m.uss, $m.busy,
		 ([$r[].ops_per_sec | floor | tostring] | join(", ")),
		 ([$r[].errors | to_entries[] | "\(.key)=\(.value)"] | join(" "))] | @tsv')
	local ops rows p50 p99 p999 ap uss busy all errs
	IFS=$'\t' read -r ops rows p50 p99 p999 ap uss busy all errs <<<"$line"
	printf '%-48s %9s %9s %8s %8s %9s %8s %7s %5s (%s)%s\n' "$label" "$ops" "$rows" "$p50" "$p99" "$p999" "$ap" "$uss" "$busy" "$all" "${errs:+  ERRORS: $errs}"
	CS_ROWS[$label]=$rows
}
declare -A CS_ROWS # rows/s by label: HBase's PE reports rows (a batched write is one op of many rows in cellstore pe)
measure "sequentialWrite 1 thread (2 MiB buffer)" --rows 500000 --table SeqWrite sequentialWrite 1
measure "randomWrite --autoFlush 1 thread" --rows 25000 --duration 10s --autoFlush randomWrite 1
measure "randomWrite --autoFlush 4 threads" --rows 25000 --duration 10s --autoFlush randomWrite 4
measure "randomWrite --autoFlush 16 threads" --rows 25000 --duration 10s --autoFlush randomWrite 16
# The same without waiting for any sync: the request path's own ceiling on this machine.
measure "randomWrite --autoFlush 4 threads ASYNC_WAL" --rows 25000 --duration 10s --autoFlush --durability ASYNC_WAL randomWrite 4
measure "randomWrite --autoFlush 16 threads ASYNC_WAL" --rows 25000 --duration 10s --autoFlush --durability ASYNC_WAL randomWrite 16
measure "increment 4 threads" --rows 25000 --duration 10s increment 4
measure "checkAndPut 4 threads" --rows 25000 --duration 10s checkAndPut 4

[[ -n ${HBASE:-} ]] || exit 0
# HBASE=1: the write commands with HBase's own PerformanceEvaluation against an Apache HBase
# standalone on this machine, after the store above stopped (one system at a time). HBase's PE
# runs a fixed number of rows per thread (no --duration); each command runs RUNS times too. Only
# the commands whose workloads match are compared: HBase's increment and checkAndPut tests start
# every thread at row 0 (the threads walk the same rows in step), cellstore pe's pick random rows.
# HBase on a local filesystem never syncs its WAL: its figures compare with Cellstore's SYNC_WAL
# lines (every acknowledged write synced) and, for durability like HBase's, its ASYNC_WAL lines.
standalone_stop
# shellcheck source=hack/lib/hbase-standalone.sh
source "$ROOT/hack/lib/hbase-standalone.sh"
HBASE_DIR=$(mktemp -d "${TMPDIR:-/tmp}/hbase-wb.XXXXXX")
EXTRA_CLEANUP='hbase_stop; rm -rf "$HBASE_DIR"'
hbase_start "$HBASE_DIR"
hpe() { hbase_pe --presplit=4 --valueSize=100 "$@"; }
echo "==> HBase: creating TestTable (4 regions) with 100,000 rows, then one randomWrite to warm the server's JIT (not measured)" >&2
hpe --rows=25000 sequentialWrite 4 >/dev/null
hpe --rows=25000 --autoFlush=true randomWrite 4 >/dev/null
printf '\nApache HBase %s standalone (local filesystem: its WAL is written, never synced), HBase PerformanceEvaluation\n' "$(basename "$(dirname "$HBASE_JARS")")"
printf '(latencies: its first thread; per Put, also in the batched sequentialWrite):\n'
printf '%-48s %9s %8s %8s %9s %10s %10s %s\n' "command" "rows/s" "p50 us" "p99 us" "p99.9 us" "CS/HBase" "CS async/" "(all runs, rows/s)"
measure_hbase() { # LABEL HBASE-PE-ARGS...
	local label=$1 runs=() i
	shift
	[[ $label =~ ${ONLY:-.} ]] || return 0
	for i in $(seq "$RUNS"); do
		echo "    HBase $label: run $i of $RUNS" >&2
		runs+=("$(hpe "$@")")
	done
	local line ops p50 p99 p999 all
	line=$(printf '%s\n' "${runs[@]}" | jq -rs '(sort_by(.ops_per_sec)) as $r | ($r[((length - 1) / 2 | floor)]) as $m |
		[($m.ops_per_sec | floor), $m.latency_us.p50, $m.latency_us.p99, $m.latency_us["p99.9"],
		 ([$r[].ops_per_sec | floor | tostring] | join(", "))] | @tsv')
	IFS=$'\t' read -r ops p50 p99 p999 all <<<"$line"
	ratio() { awk -v c="${1:-0}" -v h="$ops" 'BEGIN {if (c > 0 && h > 0) printf "%.2fx", c / h; else print "-"}'; }
	printf '%-48s %9s %8s %8s %9s %10s %10s (%s)\n' "$label" "$ops" "$p50" "$p99" "$p999" \
		"$(ratio "${CS_ROWS[$label]:-}")" "$(ratio "${CS_ROWS[$label ASYNC_WAL]:-}")" "$all"
}
measure_hbase "sequentialWrite 1 thread (2 MiB buffer)" --rows=500000 --table=SeqWrite sequentialWrite 1
measure_hbase "randomWrite --autoFlush 1 thread" --rows=25000 --autoFlush=true randomWrite 1
measure_hbase "randomWrite --autoFlush 4 threads" --rows=25000 --autoFlush=true randomWrite 4
measure_hbase "randomWrite --autoFlush 16 threads" --rows=25000 --autoFlush=true randomWrite 16
