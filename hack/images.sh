#!/usr/bin/env bash
# Builds container images as docker-archive tarballs into bin/images/, without a Docker daemon or a
# registry (hack/tools/imagetar packs static binaries into a single-layer image that runs as non-root).
# hack/local-cluster.sh load bin/images/NAME.tar puts one into the local cluster.
#
# Usage: hack/images.sh NAME...      NAME: engine operator pause coredns netcheck loadcheck minio hbaseload
#        hack/images.sh --ref NAME   prints the image reference of NAME
#        hack/images.sh --list       prints the names
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
OUT=$ROOT/bin/images
TOOLS=$ROOT/bin/tools
mkdir -p "$OUT" "$TOOLS"

# Engine and operator images carry the version of the checkout (never :latest).
VERSION=${VERSION:-$(cd "$ROOT" && git describe --tags --always --dirty 2>/dev/null || echo dev)}
VERSION=${VERSION//+/-}

ref() {
  case $1 in
    engine) echo "docker.io/cellstore/engine:$VERSION" ;;
    operator) echo "docker.io/cellstore/operator:$VERSION" ;;
    pause) echo docker.io/cellstore/pause:3.10 ;;
    coredns) echo docker.io/cellstore/coredns:v1.12.4 ;;
    netcheck) echo "docker.io/cellstore/netcheck:$VERSION" ;;
    loadcheck) echo "docker.io/cellstore/loadcheck:$VERSION" ;;
    hbaseload) echo "docker.io/cellstore/hbaseload:$VERSION" ;;
    minio) echo "docker.io/cellstore/minio:$(basename "$("$ROOT/hack/s3-server.sh" --print-path)" | sed 's/^minio-//')" ;;
    *) echo "images: unknown image '$1' (known: $NAMES)" >&2; return 2 ;;
  esac
}
NAMES="engine operator pause coredns netcheck loadcheck minio hbaseload"
if [ "${1:-}" = --ref ]; then ref "${2:?image name}"; exit; fi
if [ "${1:-}" = --list ]; then echo "$NAMES"; exit; fi
[ $# -gt 0 ] || { echo "usage: $0 NAME... ($NAMES) | --ref NAME | --list" >&2; exit 2; }

gobuild() { # OUT PKG: a static linux binary
  (cd "$ROOT" && CGO_ENABLED=0 GOOS=linux go build -trimpath -ldflags "-s -w -X main.version=$VERSION" -o "$1" "$2")
}
gobuild "$TOOLS/imagetar" ./hack/tools/imagetar

for name in "$@"; do
  r=$(ref "$name")
  case $name in
    engine)
      gobuild "$TOOLS/cellstore" ./engine/cmd/cellstore
      "$TOOLS/imagetar" --ref "$r" --out "$OUT/engine.tar" --file "$TOOLS/cellstore:/usr/local/bin/cellstore" --entrypoint /usr/local/bin/cellstore ;;
    operator)
      gobuild "$TOOLS/manager" ./operator/cmd
      "$TOOLS/imagetar" --ref "$r" --out "$OUT/operator.tar" --file "$TOOLS/manager:/manager" --entrypoint /manager ;;
    pause)
      gobuild "$TOOLS/pause" ./hack/tools/pause
      "$TOOLS/imagetar" --ref "$r" --out "$OUT/pause.tar" --file "$TOOLS/pause:/pause" --entrypoint /pause ;;
    coredns)
      k8sbin=$("$ROOT/hack/k8s-binaries.sh" --print-dir)
      [ -x "$k8sbin/coredns" ] || "$ROOT/hack/k8s-binaries.sh" cluster
      # non-root binds port 53: the cluster's containerd sets ip_unprivileged_port_start=0 in pods.
      "$TOOLS/imagetar" --ref "$r" --out "$OUT/coredns.tar" --file "$k8sbin/coredns:/coredns" --entrypoint /coredns ;;
    netcheck)
      gobuild "$TOOLS/netcheck" ./e2e/netcheck
      "$TOOLS/imagetar" --ref "$r" --out "$OUT/netcheck.tar" --file "$TOOLS/netcheck:/usr/local/bin/netcheck" --entrypoint "/usr/local/bin/netcheck" ;;
    loadcheck)
      gobuild "$TOOLS/loadcheck" ./e2e/loadcheck
      "$TOOLS/imagetar" --ref "$r" --out "$OUT/loadcheck.tar" --file "$TOOLS/loadcheck:/usr/local/bin/loadcheck" --entrypoint "/usr/local/bin/loadcheck" ;;
    hbaseload)
      # The stock HBase Java client running engine/hbase/testdata/HBaseLoad.java (the default
      # command), and HBase's PerformanceEvaluation and shell run by HBaseTool.java, for the e2e
      # suite: a Java runtime cut by jlink from the JDK hack/hbase-client.sh installs, the shared
      # libraries it loads (from this machine), the jars from Maven Central (the shaded client in
      # /opt/hbase/lib; PE's in /opt/hbase/pe; the 2.4 shell's Ruby with JRuby in /opt/hbase/shell,
      # its shell.rb without the "trace" line). Nothing of it is committed.
      hb=$("$ROOT/hack/hbase-client.sh")
      jhome=$(dirname "$(dirname "$(readlink -f "$(command -v javac)")")")
      work=$TOOLS/hbaseload
      rm -rf "$work" && mkdir -p "$work/classes" "$work/root"
      # (javac's notes about deprecated calls are not shown; its errors are.)
      out=$(javac -nowarn -d "$work/classes" -cp "$hb/lib/*" "$ROOT"/engine/hbase/testdata/*.java 2>&1) || { echo "$out" >&2; exit 1; }
      # The entrypoint keeps resolved names 1 s, not the JVM's 30: the region servers' pods change
      # addresses when they restart (docs/hbase-clients.md). It compiles with C1 only and collects
      # with one thread: it is a test load on a 2-core node that also runs the cluster under test,
      # and should take as little of its CPU as it can.
      # A logging backend for HBaseLoad alone (the shaded client has only slf4j's API): log4j's jars
      # from pe/ and a configuration that prints the client's INFO records (each retry) with the
      # time and the thread, so the e2e can tell what a slow request waited for.
      mkdir -p "$work/log"
      for j in log4j-api log4j-core log4j-slf4j-impl; do cp "$hb/pe/$j"-[0-9]*.jar "$work/log/"; done
      cat > "$work/log/log4j2.properties" <<'LOG'
status = error
appender.out.type = Console
appender.out.name = out
appender.out.layout.type = PatternLayout
appender.out.layout.pattern = %d{yyyy-MM-dd'T'HH:mm:ss.SSS'Z'}{UTC} [%t] %c{1}: %m%n
rootLogger.level = warn
rootLogger.appenderRef.out.ref = out
logger.client.name = org.apache.hadoop.hbase.client
logger.client.level = info
LOG
      mkdir -p "$work/shell/patch"
      for j in jruby-complete hbase-shell jackson-core-asl jackson-mapper-asl; do cp "$hb/shell/$j"-[0-9]*.jar "$work/shell/$j.jar"; done
      (cd "$work/shell/patch" && "$jhome/bin/jar" xf "$work/shell/hbase-shell.jar" shell.rb && grep -v '^[[:space:]]*trace[[:space:]]*$' shell.rb > shell.rb.new && mv shell.rb.new shell.rb)
      "$jhome/bin/jlink" --module-path "$jhome/jmods" --output "$work/jre" --strip-debug --no-header-files --no-man-pages \
        --add-modules java.base,java.logging,java.management,java.naming,java.security.jgss,java.security.sasl,java.sql,java.xml,java.scripting,jdk.unsupported,jdk.httpserver,jdk.crypto.ec,jdk.zipfs,jdk.security.auth,jdk.naming.dns,java.desktop
      find "$work/jre" -type l | while read -r l; do cp --remove-destination "$(readlink -f "$l")" "$l"; done
      # java.desktop is there for java.beans (Hadoop's configuration); its graphics, fonts and sound
      # are never loaded: their native libraries (and the X11 ones they would pull in) stay out.
      rm -f "$work"/jre/lib/lib{awt,awt_xawt,awt_headless,fontmanager,jawt,javajpeg,jsound,lcms,mlib_image,splashscreen}.so
      # The libraries the runtime's binaries load, at the paths the dynamic loader looks in.
      { ldd "$work/jre/bin/java"; find "$work/jre" -name '*.so' -exec ldd {} \; ; } 2>/dev/null |
        awk '$2 == "=>" && $3 ~ /^\// {print $3} $1 ~ /^\/.*ld-linux/ {print $1}' | grep -v "^$work/" | sort -u |
        while read -r lib; do mkdir -p "$work/root$(dirname "$lib")" && cp -L "$lib" "$work/root$lib"; done
      "$TOOLS/imagetar" --ref "$r" --out "$OUT/hbaseload.tar" --dir "$work/root:/" --dir "$work/jre:/opt/java" \
        --dir "$hb/lib:/opt/hbase/lib" --dir "$work/classes:/opt/hbase/classes" --dir "$hb/pe:/opt/hbase/pe" --dir "$work/shell:/opt/hbase/shell" --dir "$work/log:/opt/hbase/log" \
        --env LD_LIBRARY_PATH=/lib/x86_64-linux-gnu:/usr/lib/x86_64-linux-gnu --env JAVA_HOME=/opt/java \
        --entrypoint "/opt/java/bin/java -XX:-UsePerfData -XX:TieredStopAtLevel=1 -XX:+UseSerialGC -Xmx256m -Djava.io.tmpdir=/tmp -Dsun.net.inetaddr.ttl=1 -Dlog4j2.configurationFile=/opt/hbase/log/log4j2.properties -cp /opt/hbase/lib/*:/opt/hbase/log/*:/opt/hbase/classes HBaseLoad" ;;
    minio)
      # A development S3 server in the cluster (quickstart, e2e): MinIO built from its Go module.
      "$TOOLS/imagetar" --ref "$r" --out "$OUT/minio.tar" --file "$("$ROOT/hack/s3-server.sh"):/usr/local/bin/minio" --entrypoint /usr/local/bin/minio ;;
  esac
done
