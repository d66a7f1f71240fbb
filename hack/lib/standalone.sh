# hack/lib/standalone.sh: sourced by the benchmark scripts. standalone_start DIR starts
# `cellstore standalone` on DIR/data (bin/cellstore must exist), waits until it is ready and sets
# MASTER, HTTP and PID; an EXIT trap stops it by PID (also on failure) and removes DIR.
# Extra flags for the store come from STANDALONE_FLAGS; STANDALONE_STORAGE replaces the default
# "--dir DIR/data" (e.g. the --s3-* flags of a bucket); STANDALONE_SCHEME=https for a store whose
# endpoints serve TLS. standalone_stop stops it (to restart it).

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])' 2>/dev/null ||
	shuf -i 40000-60000 -n 1; } # (not 20000-29999: the tests' ports, engine/processtest)

# stop_pid PID [TENTHS]: SIGTERM, up to TENTHS tenths of a second (default 300) for the process
# to exit, then SIGKILL. Nothing when PID is empty or gone.
stop_pid() {
	local pid=$1
	if [[ -n $pid ]] && kill -0 "$pid" 2>/dev/null; then
		kill "$pid"
		for _ in $(seq "${2:-300}"); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
		kill -9 "$pid" 2>/dev/null || true
	fi
}

standalone_stop() {
	stop_pid "${PID:-}"
	PID=
}

standalone_cleanup() {
	standalone_stop
	if [[ -n ${STANDALONE_DIR:-} ]]; then rm -rf "$STANDALONE_DIR"; fi
	if [[ -n ${EXTRA_CLEANUP:-} ]]; then eval "$EXTRA_CLEANUP"; fi
}

standalone_start() { # DIR (kept across restarts)
	STANDALONE_DIR=$1
	mkdir -p "$STANDALONE_DIR"
	trap standalone_cleanup EXIT
	MASTER=127.0.0.1:$(free_port)
	HTTP=127.0.0.1:$(free_port)
	echo "==> starting a standalone store in $STANDALONE_DIR (master $MASTER)" >&2
	# shellcheck disable=SC2086
	bin/cellstore standalone ${STANDALONE_STORAGE:---dir $STANDALONE_DIR/data} --master-addr "$MASTER" \
		--master-http-addr 127.0.0.1:$(free_port) --data-addr 127.0.0.1:$(free_port) \
		--admin-addr 127.0.0.1:$(free_port) --http-addr "$HTTP" --log-level warn ${STANDALONE_FLAGS:-} \
		>>"$STANDALONE_DIR/standalone.log" 2>&1 &
	PID=$!
	local i
	for i in $(seq 600); do
		curl -fsk "${STANDALONE_SCHEME:-http}://$HTTP/readyz" >/dev/null 2>&1 && return 0
		kill -0 "$PID" 2>/dev/null || { cat "$STANDALONE_DIR/standalone.log" >&2; echo "the store exited" >&2; exit 1; }
		sleep 0.1
	done
	echo "the store was not ready after 60 s; its log: $STANDALONE_DIR/standalone.log" >&2
	exit 1
}

# metric NAME [DECIMALS]: the sum of a metric's samples on the store's /metrics, with DECIMALS
# decimals (default 0; 6 for a time in seconds).
metric() { curl -fsk "${STANDALONE_SCHEME:-http}://$HTTP/metrics" | awk -v n="$1" -v d="${2:-0}" '$1 == n || index($1, n "{") == 1 {s += $2} END {printf "%.*f", d, s}'; }
