#!/usr/bin/env bash
# Installs what the HBase wire-compatibility tests run: a JDK (Debian's openjdk-17-jdk-headless when
# javac is missing), Maven (Debian's), and from Maven Central, under .cache/hbase-client/<version>/
# (Maven's repository in .cache/m2):
#   lib/  the stock HBase client: the shaded client jar and its runtime dependencies
#   pe/   HBase's PerformanceEvaluation: hbase-mapreduce and hbase-server with their test jars
#         (where PerformanceEvaluation and the filters it uses live), their dependencies, log4j
#   endpoint/ hbase-endpoint (AggregationClient and its protos), run on pe/'s unshaded client
#   shell/ HBase's shell: hbase-shell 2.4.17 (the last shell on Maven Central) with JRuby and its
#         client (2.4's MasterRegistry asks any region server, as the RPC registry does)
# Nothing of HBase is committed. A second run finds them and takes no time.
#
# Usage: hack/hbase-client.sh               install if missing, print the directory holding lib/ and pe/
#        hack/hbase-client.sh --print-dir   print that directory only
set -euo pipefail
HBASE_VERSION=2.6.4
LOG4J_VERSION=2.17.2
SHELL_VERSION=2.4.17
ENDPOINT_VERSION=2.6.1
JRUBY_VERSION=9.3.13.0
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
DIR=$ROOT/.cache/hbase-client/$HBASE_VERSION
case "${1:-}" in
  --print-dir) echo "$DIR"; exit 0 ;;
  "") ;;
  *) echo "usage: $0 [--print-dir]" >&2; exit 2 ;;
esac
apt_install() {
  echo "hbase-client: installing $* (apt-get)" >&2
  if [ "$(id -u)" = 0 ]; then SUDO=; else SUDO=sudo; fi
  $SUDO apt-get update -qq >&2 && DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "$@" >&2
}
command -v javac >/dev/null && command -v java >/dev/null || apt_install openjdk-17-jdk-headless
command -v mvn >/dev/null || apt_install maven

dep() { # groupId artifactId version [type]
  printf '    <dependency><groupId>%s</groupId><artifactId>%s</artifactId><version>%s</version>%s</dependency>\n' \
    "$1" "$2" "$3" "${4:+<type>$4</type>}"
}
# fetch NAME DEPENDENCIES: copies the dependencies' jars (transitively) into $DIR/NAME.
fetch() {
  local name=$1 deps=$2
  [ -f "$DIR/$name/.complete" ] && return 0
  echo "hbase-client: fetching $name from Maven Central" >&2
  mkdir -p "$DIR"
  cat > "$DIR/$name.pom.xml" <<EOF
<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>io.cellstore.test</groupId>
  <artifactId>hbase-compat-$name</artifactId>
  <version>1</version>
  <dependencies>
$deps
  </dependencies>
</project>
EOF
  rm -rf "${DIR:?}/$name"
  mvn -q -B -f "$DIR/$name.pom.xml" -Dmaven.repo.local="$ROOT/.cache/m2" dependency:copy-dependencies -DoutputDirectory="$DIR/$name" >&2
  touch "$DIR/$name/.complete"
}
fetch lib "$(dep org.apache.hbase hbase-shaded-client $HBASE_VERSION)"
fetch pe "$(dep org.apache.hbase hbase-mapreduce $HBASE_VERSION)
$(dep org.apache.hbase hbase-mapreduce $HBASE_VERSION test-jar)
$(dep org.apache.hbase hbase-server $HBASE_VERSION)
$(dep org.apache.hbase hbase-server $HBASE_VERSION test-jar)
$(dep org.apache.logging.log4j log4j-1.2-api $LOG4J_VERSION)
$(dep org.apache.logging.log4j log4j-core $LOG4J_VERSION)
$(dep org.apache.logging.log4j log4j-slf4j-impl $LOG4J_VERSION)"
# hbase-endpoint alone (2.6.4 is not on Maven Central; 2.6.1 is): it runs on pe/'s unshaded client.
fetch endpoint "    <dependency><groupId>org.apache.hbase</groupId><artifactId>hbase-endpoint</artifactId><version>$ENDPOINT_VERSION</version>
      <exclusions><exclusion><groupId>*</groupId><artifactId>*</artifactId></exclusion></exclusions></dependency>"
fetch shell "$(dep org.apache.hbase hbase-shell $SHELL_VERSION)
$(dep org.jruby jruby-complete $JRUBY_VERSION)
$(dep org.apache.logging.log4j log4j-1.2-api $LOG4J_VERSION)
$(dep org.apache.logging.log4j log4j-core $LOG4J_VERSION)
$(dep org.apache.logging.log4j log4j-slf4j-impl $LOG4J_VERSION)"
echo "$DIR"
