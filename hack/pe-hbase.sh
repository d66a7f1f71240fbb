#!/usr/bin/env bash
# The cost of the HBase protocol: HBase's own PerformanceEvaluation against a standalone beside
# `cellstore pe` against the same standalone, one after the other, same workloads (100-byte
# values, tables pre-split into 4 regions; each its own table: HBase's PE names its family info0). Prints rows/s of each and their ratio (docs/benchmarks.md,
# "The HBase protocol").
#
# Usage: hack/pe-hbase.sh [ROWS_PER_THREAD]   (default 25000)
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
ROWS=${1:-25000}
HB=$("$ROOT/hack/hbase-client.sh")
BIN=$(mktemp -d)/cellstore
DIR=$(mktemp -d)
(cd "$ROOT" && go build -o "$BIN" ./engine/cmd/cellstore)
"$BIN" standalone --dir "$DIR" --master-addr 127.0.0.1:19000 --master-http-addr 127.0.0.1:19010 --data-addr 127.0.0.1:19020 \
  --admin-addr 127.0.0.1:19021 --http-addr 127.0.0.1:19030 --log-level warn > "$DIR/standalone.log" 2>&1 &
PID=$!
trap 'kill $PID 2>/dev/null; wait $PID 2>/dev/null; rm -rf "$DIR"' EXIT
for _ in $(seq 60); do grep -q "connect with" "$DIR/standalone.log" && break; sleep 0.5; done
LOG=$DIR/log4j2.properties
printf '%s\n' 'status = warn' 'appender.c.type = Console' 'appender.c.name = C' 'appender.c.layout.type = PatternLayout' \
  'appender.c.layout.pattern = %m%n' 'rootLogger.level = warn' 'rootLogger.appenderRef.c.ref = C' \
  'logger.pe.name = org.apache.hadoop.hbase.PerformanceEvaluation' 'logger.pe.level = info' > "$LOG"
hbase_pe() { # command threads [options]: prints ops/s
  local cmd=$1 threads=$2; shift 2
  java --add-opens java.base/java.nio=ALL-UNNAMED -Dlog4j2.configurationFile="$LOG" -cp "$HB/pe/*" org.apache.hadoop.hbase.PerformanceEvaluation \
    -Dhbase.client.registry.impl=org.apache.hadoop.hbase.client.RpcConnectionRegistry -Dhbase.client.bootstrap.servers=127.0.0.1:19020 \
    --nomapred --table=HBasePE --rows="$ROWS" --presplit=4 --valueSize=100 "$@" "$cmd" "$threads" > "$DIR/hbase-pe.out" 2>&1 ||
    { echo "HBase PerformanceEvaluation $cmd failed:" >&2; tail -20 "$DIR/hbase-pe.out" >&2; return 1; }
  sed -n 's/.*Summary of timings (ms): \[\(.*\)\]/\1/p' "$DIR/hbase-pe.out" | tr ',' '\n' | sort -n | tail -1 |
    awk -v n=$((ROWS * threads)) '{ printf "%.0f", n / ($1 / 1000) }'
}
cellstore_pe() { # command threads [options]: prints ops/s
  local cmd=$1 threads=$2; shift 2
  "$BIN" pe --masters 127.0.0.1:19000 --rows "$ROWS" --presplit 4 --valueSize 100 --json "$@" "$cmd" "$threads" |
    python3 -c 'import json,sys; r=json.load(sys.stdin); print(round(r["rows_per_sec"]))'
}
cpu_ticks() { awk '{ print $14 + $15 }' "/proc/$PID/stat"; } # the standalone's CPU time, 1/100 s
now() { date +%s.%N; }
# What the idle server burns per second (heartbeats, timers), taken off each run's CPU time.
i0=$(cpu_ticks); t0=$(now); sleep 5; i1=$(cpu_ticks); t1=$(now)
IDLE=$(awk -v a="$i0" -v b="$i1" -v s="$t0" -v e="$t1" 'BEGIN { print (b - a) / (e - s) }')
per_op() { # ticks before, after, start, end, ops: the server's CPU µs per operation beyond idle
  awk -v a="$1" -v b="$2" -v s="$3" -v e="$4" -v n="$5" -v idle="$IDLE" -v hz="$(getconf CLK_TCK)" \
    'BEGIN { printf "%.1f", ((b - a) - idle * (e - s)) / hz * 1e6 / n }'
}
echo "The client's rows/s and the server's CPU per row (µs, from /proc, less what the idle server burns: what the protocol costs the server)."
echo "A slower client also costs the server more per request (it idles and wakes between requests): the last columns run"
echo "cellstore pe again paced at HBase PE's rate (--rate), so both protocols are compared at one load."
printf '%-26s %10s %7s %10s %7s %7s %7s %10s %12s\n' workload "HBase PE" "µs/row" "cs pe" "µs/row" "rows/s" "CPU" "cs paced" "CPU ratio"
printf '%-26s %10s %7s %10s %7s %7s %7s %10s %12s\n' "" "rows/s" "" "rows/s" "" "ratio" "ratio" "µs/row" "at one load"
run() { # label command threads autoflush(yes|no) paced(yes|no)
  local label=$1 cmd=$2 threads=$3 af=$4 paced=$5
  local afc= afh= h c p c0 c1 h0 h1 p0 p1 cs ce hs he ps pe_ cu hu pu=- eq=-
  [ "$af" = yes ] && afc=--autoFlush && afh=--autoFlush=true
  c0=$(cpu_ticks); cs=$(now); c=$(cellstore_pe "$cmd" "$threads" $afc); c1=$(cpu_ticks); ce=$(now)
  h0=$(cpu_ticks); hs=$(now); h=$(hbase_pe "$cmd" "$threads" $afh); h1=$(cpu_ticks); he=$(now)
  cu=$(per_op "$c0" "$c1" "$cs" "$ce" $((ROWS * threads))); hu=$(per_op "$h0" "$h1" "$hs" "$he" $((ROWS * threads)))
  if [ "$paced" = yes ]; then
    p0=$(cpu_ticks); ps=$(now); p=$(cellstore_pe "$cmd" "$threads" $afc --rate "$h"); p1=$(cpu_ticks); pe_=$(now)
    pu=$(per_op "$p0" "$p1" "$ps" "$pe_" $((ROWS * threads)))
    eq=$(awk -v h="$hu" -v p="$pu" 'BEGIN { printf "%.2f", (p > 0 ? h / p : 0) }')
  fi
  printf '%-26s %10s %7s %10s %7s %7s %7s %10s %12s\n' "$label" "$h" "$hu" "$c" "$cu" \
    "$(awk -v h="$h" -v c="$c" 'BEGIN { printf "%.2f", (c > 0 ? h / c : 0) }')" \
    "$(awk -v h="$hu" -v c="$cu" 'BEGIN { printf "%.2f", (c > 0 ? h / c : 0) }')" "$pu" "$eq"
}
# Paced where one operation is one row (single gets and puts); batched writes and scans are not.
run "sequentialWrite 1" sequentialWrite 1 no no
run "randomRead 1" randomRead 1 no yes
run "randomRead 4" randomRead 4 no yes
run "scan 1" scan 1 no no
run "randomWrite --autoFlush 4" randomWrite 4 yes yes
