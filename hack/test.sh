#!/usr/bin/env bash
# Runs Cellstore's test stages; `make test` runs them all and is what CI runs (.ci/run).
#
#   hack/test.sh lint      gofmt, go vet and staticcheck (make lint)
#   hack/test.sh unit      unit tests of every package, with -race and the invariants build tag
#   hack/test.sh envtest   integration tests (build tag envtest) against a real kube-apiserver + etcd
#   hack/test.sh e2e       the ginkgo end-to-end suite (build tag e2e) against $KUBECONFIG; without
#                          one it brings up the local cluster (hack/local-cluster.sh) and stops it after,
#                          also when the tests fail. E2E_IMAGE_LOADER="CMD" loads image tarballs into a
#                          cluster of your own (e.g. "kind load image-archive --name cellstore").
#   hack/test.sh all       the four, in that order; each runs even if an earlier one failed
set -uo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
GOTESTSUM=${GOTESTSUM:-}
GINKGO=${GINKGO:-}
T0=$(date +%s)
say() { printf '[test %5ss] %s\n' "$(( $(date +%s) - T0 ))" "$*"; }

gotest() { # go test, through gotestsum when installed (make installs it)
  if [ -n "$GOTESTSUM" ]; then "$GOTESTSUM" --format pkgname-and-test-fails --format-hide-empty-pkg -- "$@"
  else go test "$@"; fi
}
# packages that have test files with the given build tag
tagged_pkgs() { grep -rl --include='*_test.go' "^//go:build .*\b$1\b" . | xargs -r -n1 dirname | sort -u; }

lint() { make --no-print-directory lint; }

unit() {
  # The S3 server of the object-storage tests (MinIO from its Go module; built once, then cached).
  CELLSTORE_S3_SERVER=$("$ROOT/hack/s3-server.sh") || { say "cannot build the S3 server (hack/s3-server.sh)"; return 1; }
  export CELLSTORE_S3_SERVER
  # promtool for the alert rules' tests (make installs it; built from its Go module).
  CELLSTORE_PROMTOOL=${PROMTOOL:-}
  [ -n "$CELLSTORE_PROMTOOL" ] && [ -x "$CELLSTORE_PROMTOOL" ] ||
    CELLSTORE_PROMTOOL=$(make --no-print-directory print-promtool | tail -n1) && [ -x "$CELLSTORE_PROMTOOL" ] || { say "cannot install promtool (make print-promtool)"; return 1; }
  export CELLSTORE_PROMTOOL
  # The stock HBase Java client (a JDK and the client's jars from Maven Central) for the wire
  # compatibility tests.
  CELLSTORE_HBASE_CLIENT=$("$ROOT/hack/hbase-client.sh") || { say "cannot install the HBase client (hack/hbase-client.sh)"; return 1; }
  export CELLSTORE_HBASE_CLIENT
  # Headless Chromium (Debian's) for the status pages' browser test.
  CELLSTORE_CHROMIUM=$("$ROOT/hack/chromium.sh") || { say "cannot install Chromium (hack/chromium.sh)"; return 1; }
  export CELLSTORE_CHROMIUM
  gotest -race -tags invariants -timeout 20m ./...
  local rc=$?
  smallfs || rc=1
  return $rc
}

# The tests that fill a real filesystem (ENOSPC from the kernel, not injected) run on a 4 MiB tmpfs
# mounted here, one package at a time (they share it). Mounting needs root: CI has it and must run
# them; elsewhere they are reported skipped.
smallfs() {
  local mnt rc
  mnt=$(mktemp -d /tmp/cellstore-smallfs.XXXXXX)
  if ! mount -t tmpfs -o size=4m tmpfs "$mnt" 2>/dev/null; then
    rmdir "$mnt"
    if [ "${CI:-}" = true ]; then say "cannot mount a tmpfs for the disk-full tests (needs root)"; return 1; fi
    say "disk-full tests on a real filesystem skipped: mounting a tmpfs needs root"
    return 0
  fi
  say "disk-full tests on a 4 MiB tmpfs at $mnt"
  CELLSTORE_TEST_SMALLFS=$mnt gotest -p 1 -count=1 -run '^(TestLocalNoSpace|TestLocalDiskFull)$' ./engine/storage ./engine/wal
  rc=$?
  umount "$mnt" && rmdir "$mnt"
  return $rc
}

envtest() {
  "$ROOT/hack/k8s-binaries.sh" envtest || return 1
  # The operator checks S3 buckets against a real S3 server too.
  CELLSTORE_S3_SERVER=$("$ROOT/hack/s3-server.sh") || { say "cannot build the S3 server (hack/s3-server.sh)"; return 1; }
  export CELLSTORE_S3_SERVER
  KUBEBUILDER_ASSETS=$("$ROOT/hack/k8s-binaries.sh" --print-dir)
  export KUBEBUILDER_ASSETS
  mapfile -t pkgs < <(tagged_pkgs envtest)
  [ ${#pkgs[@]} -gt 0 ] || { say "no envtest packages"; return 0; }
  gotest -tags envtest -timeout 30m "${pkgs[@]}"
  local rc=$?
  reap_envtest
  return $rc
}

# A test binary killed by its timeout cannot stop the kube-apiserver and etcd it started: stop the
# envtest processes of our binaries that lost their parent, so nothing outlives the stage.
reap_envtest() {
  local p
  for p in $(pgrep -f "^$KUBEBUILDER_ASSETS/(etcd|kube-apiserver) .*k8s_test_framework" || true); do
    if [ "$(ps -o ppid= -p "$p" | tr -d ' ')" = 1 ]; then
      say "stopping envtest process $p left behind by a killed test"
      kill -KILL "$p" 2>/dev/null || true
    fi
  done
}

e2e() {
  local managed=no rc images=(netcheck loadcheck engine operator minio hbaseload)
  # One version for every image of the run (git describe could change under a long run).
  VERSION=$("$ROOT/hack/images.sh" --ref engine) && VERSION=${VERSION##*:} || return 1
  # Release versions (a checkout's own is a commit), so that the engine upgrade spec goes through
  # the version rule (engine/version): this checkout as v0.1.0-COMMIT unless it is a release, the
  # upgrade as the next minor version of it.
  local upgrade
  if [[ ! $VERSION =~ ^v?[0-9]+\.[0-9]+\.[0-9]+ ]]; then VERSION=v0.1.0-$VERSION; fi
  [[ $VERSION =~ ^v?([0-9]+)\.([0-9]+)\.[0-9]+(.*)$ ]]
  upgrade=v${BASH_REMATCH[1]}.$((10#${BASH_REMATCH[2]} + 1)).0${BASH_REMATCH[3]}
  export VERSION
  # The operator upgrade spec needs a second operator image: the same code under another version.
  VERSION=$VERSION-upgrade "$ROOT/hack/images.sh" operator && mv "$ROOT/bin/images/operator.tar" "$ROOT/bin/images/operator-upgrade.tar" || return 1
  # The engine upgrade spec rolls a cluster to a second engine image: the same code under the next
  # minor version.
  VERSION=$upgrade "$ROOT/hack/images.sh" engine && mv "$ROOT/bin/images/engine.tar" "$ROOT/bin/images/engine-upgrade.tar" || return 1
  "$ROOT/hack/images.sh" "${images[@]}" || return 1
  images+=(operator-upgrade engine-upgrade)
  local crds
  crds=$("$ROOT/hack/monitoring-crds.sh") || return 1
  if [ -z "${KUBECONFIG:-}" ]; then
    managed=yes
    # 2 MiB hugepages for the hugepages spec, reserved before the kubelet starts.
    "$ROOT/hack/local-cluster.sh" up --hugepages "${E2E_HUGEPAGES:-160}" || { "$ROOT/hack/local-cluster.sh" down; return 1; }
    KUBECONFIG=$("$ROOT/hack/local-cluster.sh" kubeconfig)
    export KUBECONFIG
  fi
  local img
  for img in "${images[@]}"; do
    if [ $managed = yes ]; then "$ROOT/hack/local-cluster.sh" load "bin/images/$img.tar"
    elif [ -n "${E2E_IMAGE_LOADER:-}" ]; then $E2E_IMAGE_LOADER "bin/images/$img.tar"
    else say "KUBECONFIG is set and E2E_IMAGE_LOADER is not: assuming bin/images/$img.tar is already in the cluster"; fi
  done
  local kbin
  kbin=$("$ROOT/hack/k8s-binaries.sh" --print-dir)
  [ -x "$kbin/kubectl" ] && export KUBECTL=${KUBECTL:-$kbin/kubectl}
  export HELM=${HELM:-$ROOT/bin/helm-v3.19.0}
  [ -x "$HELM" ] || make --no-print-directory "$HELM" >/dev/null || return 1
  E2E_ENGINE_IMAGE=$("$ROOT/hack/images.sh" --ref engine)
  E2E_OPERATOR_IMAGE=$("$ROOT/hack/images.sh" --ref operator)
  E2E_LOADCHECK_IMAGE=$("$ROOT/hack/images.sh" --ref loadcheck)
  E2E_NETCHECK_IMAGE=$("$ROOT/hack/images.sh" --ref netcheck)
  E2E_MINIO_IMAGE=$("$ROOT/hack/images.sh" --ref minio)
  E2E_HBASELOAD_IMAGE=$("$ROOT/hack/images.sh" --ref hbaseload)
  E2E_OPERATOR_UPGRADE_IMAGE=${E2E_OPERATOR_IMAGE}-upgrade
  E2E_ENGINE_UPGRADE_IMAGE=${E2E_ENGINE_IMAGE%:*}:$upgrade
  E2E_MONITORING_CRDS=$crds
  export E2E_ENGINE_IMAGE E2E_OPERATOR_IMAGE E2E_LOADCHECK_IMAGE E2E_NETCHECK_IMAGE E2E_MINIO_IMAGE E2E_HBASELOAD_IMAGE E2E_OPERATOR_UPGRADE_IMAGE E2E_ENGINE_UPGRADE_IMAGE E2E_MONITORING_CRDS
  # The README's two commands in that order: on the cluster it manages, the stage runs the quickstart
  # first (its operator release stays installed in cellstore-system: the suite must install beside
  # it), then the suite. The quickstart's StoreCluster and S3 server are deleted once they have
  # served its smoke test, to leave the machine's cores to the suite. E2E_AFTER_QUICKSTART=yes|no overrides.
  local qrc=0
  if [ "${E2E_AFTER_QUICKSTART:-$managed}" = yes ]; then
    say "make quickstart's script on this cluster first (then the suite, as 'make quickstart; make test' does)"
    QUICKSTART_IMAGE_LOADER=true "$ROOT/hack/quickstart.sh" || { qrc=1; say "the quickstart FAILED on the e2e cluster"; }
    "${KUBECTL:-kubectl}" -n "${QUICKSTART_NAMESPACE:-cellstore}" delete storecluster minimal --ignore-not-found --wait --timeout 5m ||
      say "the quickstart's StoreCluster did not go within 5 minutes; the suite runs beside it"
    "${KUBECTL:-kubectl}" -n "${QUICKSTART_NAMESPACE:-cellstore}" delete statefulset,job -l app.kubernetes.io/name=dev-s3 --ignore-not-found --wait --timeout 2m ||
      say "the quickstart's development S3 server did not go within 2 minutes; the suite runs beside it"
  fi
  # E2E_LABELS picks specs by label (ginkgo's --label-filter), e.g. E2E_LABELS=s3.
  if [ -n "$GINKGO" ]; then
    "$GINKGO" -v --tags e2e --timeout 60m --poll-progress-after 120s --label-filter "${E2E_LABELS:-}" ./e2e
  else
    go test -v -tags e2e -timeout 60m ./e2e -ginkgo.v -ginkgo.label-filter "${E2E_LABELS:-}"
  fi
  rc=$?
  [ $qrc = 0 ] || rc=1
  [ $managed = yes ] && "$ROOT/hack/local-cluster.sh" down
  return $rc
}

stages=("$@")
[ "${stages[0]:-all}" = all ] && stages=(lint unit envtest e2e)
summary=() failed=0
for s in "${stages[@]}"; do
  case $s in lint|unit|envtest|e2e) ;; *) echo "usage: $0 lint|unit|envtest|e2e|all" >&2; exit 2 ;; esac
  say "=== $s"
  t=$(date +%s)
  if $s; then summary+=("$s passed ($(( $(date +%s) - t ))s)"); else summary+=("$s FAILED ($(( $(date +%s) - t ))s)"); failed=$((failed + 1)); fi
done
say "summary: $(IFS=,; echo "${summary[*]}" | sed 's/,/, /g'); wall time $(( $(date +%s) - T0 ))s"
exit $(( failed > 0 ))
