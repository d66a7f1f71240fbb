#!/usr/bin/env bash
# hack/pe-storage.sh [RUNS]: docs/benchmarks.md "Object storage against the directory backend".
# Runs the same `cellstore pe` commands against a standalone store on the local disk (--dir) and on
# a local S3 server (MinIO built by hack/s3-server.sh, started and stopped by PID, its data in a
# temporary directory on the same disk), one after the other in one session, and prints them side
# by side, with the object store's requests per written row. Both stores are stopped by PID and
# their directories removed on exit, also on failure. BACKENDS="dir s3 s3cache" picks the backends
# (s3cache: S3 with the region server's local file cache, --file-cache-size 2Gi), ONLY=regex the
# commands, STANDALONE_FLAGS passes flags to every store, PE_FLAGS to every `cellstore pe`. Besides
# throughput it prints the CPU the store and the S3 server spent per written or read row (from
# /proc: user + system time), since on one machine the S3 server's CPU is taken from the store's.
# Needs jq.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
RUNS=${1:-3}
command -v jq >/dev/null || { echo "pe-storage: needs jq (apt-get install jq)" >&2; exit 1; }

echo "==> building bin/cellstore and the S3 server" >&2
go build -o bin/cellstore ./engine/cmd/cellstore
MINIO=$(hack/s3-server.sh)

# shellcheck source=hack/lib/standalone.sh
source "$ROOT/hack/lib/standalone.sh"

WORK=$(mktemp -d "${TMPDIR:-/tmp}/cellstore-pes.XXXXXX")
MINIO_PID=
EXTRA_CLEANUP='[[ -n $MINIO_PID ]] && kill $MINIO_PID 2>/dev/null; wait $MINIO_PID 2>/dev/null; rm -rf "$WORK"'
trap standalone_cleanup EXIT
S3_ADDR=127.0.0.1:$(free_port)
MINIO_ROOT_USER=cellstore MINIO_ROOT_PASSWORD=cellstore-secret MINIO_BROWSER=off MINIO_UPDATE=off \
	"$MINIO" server "$WORK/minio" --address "$S3_ADDR" --console-address 127.0.0.1:$(free_port) --quiet >"$WORK/minio.log" 2>&1 &
MINIO_PID=$!
for i in $(seq 300); do
	curl -fs "http://$S3_ADDR/minio/health/ready" >/dev/null 2>&1 && break
	[[ $i == 300 ]] && { cat "$WORK/minio.log" >&2; echo "pe-storage: MinIO not ready" >&2; exit 1; }
	sleep 0.1
done
export CELLSTORE_S3_ACCESS_KEY_ID=cellstore CELLSTORE_S3_SECRET_ACCESS_KEY=cellstore-secret

pe() { bin/cellstore pe --masters "$MASTER" --valueSize 100 --presplit 4 --json ${PE_FLAGS:-} "$@" 2>/dev/null; }

# cpu_ticks PID: the process's user + system CPU time in clock ticks (0 when it is not running).
cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat" 2>/dev/null || echo 0; }
TICK_US=$((1000000 / $(getconf CLK_TCK)))

declare -A RESULT
measure() { # BACKEND LABEL PE-ARGS...
	local backend=$1 label=$2 runs=() i p0 p1 rows s0 s1 m0 m1
	shift 2
	if ! [[ $label =~ ${ONLY:-.} ]]; then RESULT[$backend/$label]="- - - - - -"; return 0; fi
	p0=$(metric cellstore_s3_requests_total)
	s0=$(cpu_ticks "$PID") m0=$(cpu_ticks "$MINIO_PID")
	for i in $(seq "$RUNS"); do
		echo "    $backend: $label: run $i of $RUNS" >&2
		runs+=("$(pe "$@")")
	done
	p1=$(metric cellstore_s3_requests_total)
	s1=$(cpu_ticks "$PID") m1=$(cpu_ticks "$MINIO_PID")
	[[ $backend == dir ]] && m1=$m0 # MinIO idles while the directory backend runs
	rows=$(printf '%s\n' "${runs[@]}" | jq -s '[.[].rows] | add')
	RESULT[$backend/$label]=$(printf '%s\n' "${runs[@]}" | jq -rs --argjson req $((p1 - p0)) --argjson rows "$rows" \
		--argjson scpu $(((s1 - s0) * TICK_US)) --argjson mcpu $(((m1 - m0) * TICK_US)) '
		(sort_by(.ops_per_sec)) as $r | ($r[((length - 1) / 2 | floor)]) as $m |
		def per_row(x): if $rows > 0 then (x / $rows * 100 | floor) / 100 else 0 end;
		"\($m.rows_per_sec | floor) \($m.latency_us.p50) \($m.latency_us.p99) \(if $rows > 0 then $req / $rows else 0 end) \(per_row($scpu)) \(per_row($mcpu))"')
}

run_backend() { # BACKEND
	local b=$1
	case $b in
	s3) STANDALONE_STORAGE="--s3-endpoint http://$S3_ADDR --s3-bucket cellstore-pe --s3-path-style --s3-create-bucket" ;;
	s3cache) STANDALONE_STORAGE="--s3-endpoint http://$S3_ADDR --s3-bucket cellstore-pe-cache --s3-path-style --s3-create-bucket
		--file-cache-dir $WORK/filecache --file-cache-size 2Gi" ;;
	dir) STANDALONE_STORAGE="--dir $WORK/dir" ;;
	*) echo "pe-storage: unknown backend $b (dir, s3, s3cache)" >&2; exit 2 ;;
	esac
	standalone_start "$WORK/run-$b"
	measure "$b" "sequentialWrite 1 thread (batches of 1000)" --rows 100000 --batchSize 1000 sequentialWrite 1
	measure "$b" "sequentialWrite 1 thread (2 MiB buffer)" --rows 500000 sequentialWrite 1
	measure "$b" "randomWrite --autoFlush 4 threads" --rows 100000 --duration 10s --autoFlush randomWrite 4
	measure "$b" "randomWrite --autoFlush 16 threads" --rows 100000 --duration 10s --autoFlush randomWrite 16
	# A clean stop flushes everything: after the restart reads come from store files, cold first.
	standalone_stop
	standalone_start "$WORK/run-$b"
	RUNS_SAVED=$RUNS
	RUNS=1
	measure "$b" "randomRead 4 threads, cold cache" --rows 100000 --duration 10s randomRead 4
	RUNS=$RUNS_SAVED
	measure "$b" "randomRead 4 threads, warm cache" --rows 100000 --duration 10s randomRead 4
	measure "$b" "scan 1 thread (caching 1000)" --rows 100000 --caching 1000 scan 1
	standalone_stop
}

BACKENDS=${BACKENDS:-dir s3 s3cache}
for b in $BACKENDS; do run_backend "$b"; done

# One line per command: each backend's rows/s (p50/p99 us), its ratio to the directory's, the
# object store's requests per row, and the CPU microseconds per row of the store and the S3 server.
printf '\n%-44s' "command"
for b in $BACKENDS; do printf ' %24s %6s %8s %13s' "$b rows/s (p50/p99 us)" "x dir" "req/row" "cpu us/row"; done
printf '\n'
for label in "sequentialWrite 1 thread (batches of 1000)" "sequentialWrite 1 thread (2 MiB buffer)" "randomWrite --autoFlush 4 threads" \
	"randomWrite --autoFlush 16 threads" "randomRead 4 threads, cold cache" "randomRead 4 threads, warm cache" \
	"scan 1 thread (caching 1000)"; do
	read -r dr _ <<<"${RESULT[dir/$label]:-- - - - - -}"
	printf '%-44s' "$label"
	for b in $BACKENDS; do
		read -r r p50 p99 req scpu mcpu <<<"${RESULT[$b/$label]:-- - - - - -}"
		printf ' %24s %6s %8s %13s' "$r ($p50/$p99)" "$(awk -v a="$r" -v b="$dr" 'BEGIN {printf "%.2f", (b + 0) ? a / b : 0}')" "$(awk -v x="$req" 'BEGIN {if (x ~ /^[0-9]/) printf "%.2g", x; else print x}')" "$scpu+$mcpu"
	done
	printf '\n'
done
