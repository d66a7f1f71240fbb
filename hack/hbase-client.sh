#!/usr/bin/env bash
# Installs what the HBase wire-compatibility tests run: a JDK (Debian's openjdk-17-jdk-headless when
# javac is missing), Maven (Debian's), and the stock HBase client from Maven Central — the shaded
# client jar with its runtime dependencies — into .cache/hbase-client/<version>/lib, with Maven's
# repository under .cache/m2. Nothing of HBase is committed. A second run finds them and takes no
# time.
#
# Usage: hack/hbase-client.sh               install if missing, print the directory of the jars
#        hack/hbase-client.sh --print-dir   print the directory only
set -euo pipefail
HBASE_VERSION=2.6.4
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
DIR=$ROOT/.cache/hbase-client/$HBASE_VERSION
case "${1:-}" in
  --print-dir) echo "$DIR/lib"; exit 0 ;;
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
if [ ! -f "$DIR/lib/.complete" ]; then
  echo "hbase-client: fetching hbase-shaded-client $HBASE_VERSION and its dependencies from Maven Central" >&2
  mkdir -p "$DIR"
  cat > "$DIR/pom.xml" <<EOF
<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>io.cellstore.test</groupId>
  <artifactId>hbase-compat</artifactId>
  <version>1</version>
  <dependencies>
    <dependency>
      <groupId>org.apache.hbase</groupId>
      <artifactId>hbase-shaded-client</artifactId>
      <version>$HBASE_VERSION</version>
    </dependency>
  </dependencies>
</project>
EOF
  rm -rf "$DIR/lib"
  mvn -q -B -f "$DIR/pom.xml" -Dmaven.repo.local="$ROOT/.cache/m2" dependency:copy-dependencies -DoutputDirectory="$DIR/lib" >&2
  touch "$DIR/lib/.complete"
fi
echo "$DIR/lib"
