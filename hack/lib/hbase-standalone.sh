# hack/lib/hbase-standalone.sh: sourced by the benchmark scripts that compare with Apache HBase.
# hbase_start DIR starts an HBase standalone (HMaster with its region server and ZooKeeper in one
# JVM, HBase's own "standalone" mode) on a local-filesystem root under DIR, from the jars
# hack/hbase-client.sh fetched from Maven Central into pe/ (nothing of HBase is committed), waits
# until it has initialised, and sets HBASE_CONF (a directory for the client's classpath) and
# HBASE_PID. hbase_stop stops it by PID; hbase_pe runs HBase's PerformanceEvaluation against it
# (a new client JVM each time, as HBase's own script runs it). Needs a JDK 17 (hack/hbase-client.sh
# installs one) and free_port and stop_pid from hack/lib/standalone.sh.
#
# On a local filesystem HBase cannot sync its WAL (Hadoop's local output stream has no hsync; the
# stream-capability check is turned off, as HBase's standalone mode needs): its writes are
# acknowledged once written to the page cache, never fsynced.

# The JVM options HBase 2.6 needs on Java 17 (its bin/hbase passes the same kind of list).
HBASE_JAVA_OPTS=(--add-opens java.base/java.nio=ALL-UNNAMED --add-opens java.base/sun.nio.ch=ALL-UNNAMED
	--add-opens java.base/java.lang=ALL-UNNAMED --add-opens java.base/java.lang.reflect=ALL-UNNAMED
	--add-opens java.base/java.util=ALL-UNNAMED --add-opens java.base/java.util.concurrent=ALL-UNNAMED
	--add-opens java.base/java.io=ALL-UNNAMED --add-opens java.base/jdk.internal.ref=ALL-UNNAMED
	--add-exports java.base/jdk.internal.misc=ALL-UNNAMED)

hbase_stop() {
	stop_pid "${HBASE_PID:-}" 600
	HBASE_PID=
}

hbase_start() { # DIR
	local dir=$1 hb i
	hb=$("$ROOT/hack/hbase-client.sh")
	HBASE_JARS=$hb/pe
	HBASE_CONF=$dir/conf
	mkdir -p "$HBASE_CONF"
	{
		echo '<?xml version="1.0"?>'
		echo '<configuration>'
		prop() { echo "  <property><name>$1</name><value>$2</value></property>"; }
		prop hbase.cluster.distributed false
		prop hbase.rootdir "file://$dir/root"
		prop hbase.tmp.dir "$dir/tmp"
		prop hbase.zookeeper.quorum 127.0.0.1
		prop hbase.zookeeper.property.clientPort "$(free_port)"
		prop hbase.zookeeper.property.dataDir "$dir/zk"
		prop hbase.master.port "$(free_port)"
		prop hbase.regionserver.port "$(free_port)"
		prop hbase.master.info.port -1
		prop hbase.regionserver.info.port -1
		prop hbase.unsafe.stream.capability.enforce false
		echo '</configuration>'
	} >"$HBASE_CONF/hbase-site.xml"
	printf '%s\n' 'status = warn' 'appender.c.type = Console' 'appender.c.name = C' 'appender.c.layout.type = PatternLayout' \
		'appender.c.layout.pattern = %d %p %c{1}: %m%n' 'rootLogger.level = warn' 'rootLogger.appenderRef.c.ref = C' \
		'logger.m.name = org.apache.hadoop.hbase.master.HMaster' 'logger.m.level = info' \
		'logger.pe.name = org.apache.hadoop.hbase.PerformanceEvaluation' 'logger.pe.level = info' >"$HBASE_CONF/log4j2.properties"
	echo "==> starting an HBase standalone in $dir (HBase's jars from $HBASE_JARS)" >&2
	java "${HBASE_JAVA_OPTS[@]}" -Xmx2g -Dlog4j2.configurationFile="$HBASE_CONF/log4j2.properties" \
		-cp "$HBASE_CONF:$HBASE_JARS/*" org.apache.hadoop.hbase.master.HMaster start >"$dir/hbase.log" 2>&1 &
	HBASE_PID=$!
	for i in $(seq 1200); do
		grep -q "Master has completed initialization" "$dir/hbase.log" && return 0
		kill -0 "$HBASE_PID" 2>/dev/null || { tail -30 "$dir/hbase.log" >&2; echo "HBase exited (the last lines of its log above)" >&2; exit 1; }
		sleep 0.1
	done
	tail -30 "$dir/hbase.log" >&2
	echo "HBase was not ready after 120 s (the last lines of its log above)" >&2
	exit 1
}

# hbase_pe ARGS...: HBase's PerformanceEvaluation (--nomapred) against the standalone; the last
# argument is the number of threads. Prints one JSON line: ops_per_sec (all threads' rows over the
# slowest thread's time, as HBase's PE reports its summary) and latency_us (p50, p99, p99.9 of the
# first thread's latency line).
hbase_pe() {
	local threads=${*: -1} out
	out=$(java --add-opens java.base/java.nio=ALL-UNNAMED -Dlog4j2.configurationFile="$HBASE_CONF/log4j2.properties" \
		-cp "$HBASE_CONF:$HBASE_JARS/*" org.apache.hadoop.hbase.PerformanceEvaluation --nomapred "$@" 2>&1) ||
		{ echo "HBase PerformanceEvaluation $* failed:" >&2; tail -20 <<<"$out" >&2; return 1; }
	awk -v threads="$threads" -v args="$*" '
		/Summary of timings \(ms\)/ { sub(/.*\[/, ""); sub(/\].*/, ""); n = split($0, t, ","); for (i = 1; i <= n; i++) if (t[i] + 0 > slow) slow = t[i] + 0 }
		/Latency \(us\) :/ && !lat { lat = 1; split($0, kv, /, /); for (i in kv) { split(kv[i], p, "="); q[p[1]] = p[2] + 0 } }
		END {
			match(args, /--rows=[0-9]+/); rows = substr(args, RSTART + 7, RLENGTH - 7) + 0
			if (!slow) { print "no summary in HBase PE output" > "/dev/stderr"; exit 1 }
			printf "{\"ops_per_sec\": %.1f, \"latency_us\": {\"p50\": %d, \"p99\": %d, \"p99.9\": %d}}\n", rows * threads / (slow / 1000), q["50th"], q["99th"], q["99.9th"]
		}' <<<"$out"
}
