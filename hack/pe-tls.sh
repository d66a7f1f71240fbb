#!/usr/bin/env bash
# hack/pe-tls.sh [RUNS]: docs/benchmarks.md "The cost of TLS". Runs `cellstore pe` randomRead and
# randomWrite --autoFlush (4 threads, 100-byte values, table pre-split into 4 regions) against one
# standalone store started alternately in plaintext and with --security=on (TLS 1.3 on every port,
# the client authenticated by its certificate), RUNS rounds (default 3) on the same data, and prints
# the medians side by side with their ratio. The store is stopped by PID and its directory removed
# on exit, also on failure. Needs jq.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
RUNS=${1:-3}
command -v jq >/dev/null || { echo "pe-tls: needs jq (apt-get install jq)" >&2; exit 1; }

echo "==> building bin/cellstore" >&2
go build -o bin/cellstore ./engine/cmd/cellstore

# shellcheck source=hack/lib/standalone.sh
source "$ROOT/hack/lib/standalone.sh"
WORK=$(mktemp -d "${TMPDIR:-/tmp}/cellstore-pet.XXXXXX")
EXTRA_CLEANUP='rm -rf "$WORK"'
PKI=$WORK/pki
bin/cellstore certs ca --out "$PKI/ca" >/dev/null
bin/cellstore certs issue --ca "$PKI/ca" --out "$PKI/server" --cn cellstore-server --groups cellstore:servers --hosts 127.0.0.1,localhost --server --client >/dev/null
bin/cellstore certs issue --ca "$PKI/ca" --out "$PKI/pe" --cn pe --client >/dev/null
SERVER_TLS="--security=on --superusers @cellstore:servers,pe --tls-cert-file $PKI/server/tls.crt --tls-key-file $PKI/server/tls.key --tls-ca-file $PKI/server/ca.crt"
CLIENT_TLS="--tls-ca-file $PKI/ca/ca.crt --tls-cert-file $PKI/pe/tls.crt --tls-key-file $PKI/pe/tls.key"

start() { # plain|tls
	if [[ $1 == tls ]]; then
		STANDALONE_FLAGS=$SERVER_TLS STANDALONE_SCHEME=https CLIENT=$CLIENT_TLS
	else
		STANDALONE_FLAGS= STANDALONE_SCHEME=http CLIENT=
	fi
	standalone_start "$WORK/store"
}
# shellcheck disable=SC2086
pe() { bin/cellstore pe --masters "$MASTER" --valueSize 100 --presplit 4 --json $CLIENT "$@" 2>/dev/null; }

declare -A RESULT
start plain
echo "==> loading TestTable: sequentialWrite, 4 threads x 25,000 rows (not measured)" >&2
pe --rows 25000 sequentialWrite 4 >/dev/null
for round in $(seq "$RUNS"); do
	for mode in plain tls; do
		[[ $round == 1 && $mode == plain ]] || start "$mode"
		echo "    round $round of $RUNS: $mode" >&2
		RESULT[$mode,read]+="$(pe --rows 25000 --duration 10s randomRead 4)"$'\n'
		RESULT[$mode,write]+="$(pe --rows 25000 --duration 10s --autoFlush randomWrite 4)"$'\n'
		standalone_stop
	done
done

median() { jq -rs 'sort_by(.ops_per_sec) | .[(length - 1) / 2 | floor] | "\(.ops_per_sec | floor)\t\(.latency_us.p99)"'; }
printf '%-36s %12s %9s %12s %9s %7s\n' "command (4 threads)" "plain ops/s" "p99 us" "TLS ops/s" "p99 us" "TLS/plain"
for cmd in read write; do
	IFS=$'\t' read -r pops pp99 <<<"$(printf '%s' "${RESULT[plain,$cmd]}" | median)"
	IFS=$'\t' read -r tops tp99 <<<"$(printf '%s' "${RESULT[tls,$cmd]}" | median)"
	label=randomRead
	[[ $cmd == write ]] && label="randomWrite --autoFlush"
	printf '%-36s %12s %9s %12s %9s %7.2f\n' "$label" "$pops" "$pp99" "$tops" "$tp99" "$(jq -n "$tops / $pops")"
done
