#!/usr/bin/env bash
# `make quickstart`: a running Cellstore on the local single-node Kubernetes.
#   1. builds the engine and operator images (bin/images/) and brings up the local cluster (the first
#      run builds Kubernetes from source: 10-20 minutes on 2 cores), then loads the images into it;
#   2. installs the operator with Helm (charts/cellstore-operator);
#   3. deploys a development S3 server in the namespace (config/samples/dev-s3-server.yaml: MinIO
#      built from its Go module, its data on a ReadWriteOnce claim of the default StorageClass) and
#      makes its bucket;
#   4. applies the minimal StoreCluster sample (config/samples/) with the engine image just built —
#      its data all in that bucket — and waits for it to become Available, printing its progress;
#   5. writes and reads a row with `cellstore shell` in the cluster, and prints how to go on.
# Re-running it upgrades what is there. KUBECONFIG set: uses that cluster instead (the images must
# then be loadable: QUICKSTART_IMAGE_LOADER="kind load image-archive", for example).
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
NS=${QUICKSTART_NAMESPACE:-cellstore}
NAME=minimal
T0=$(date +%s)
step() { printf '\n[quickstart %4ss] ==> %s\n' "$(( $(date +%s) - T0 ))" "$*"; }
die() { echo "quickstart: $*" >&2; exit 1; }

step "Building the engine, operator and development S3 server images (bin/images/)"
hack/images.sh engine operator minio
ENGINE=$(hack/images.sh --ref engine)
OPERATOR=$(hack/images.sh --ref operator)
S3IMAGE=$(hack/images.sh --ref minio)

KBIN=$(hack/k8s-binaries.sh --print-dir)
if [ -z "${KUBECONFIG:-}" ]; then
  step "Starting the local cluster (hack/local-cluster.sh up)"
  hack/local-cluster.sh up
  KUBECONFIG=$(hack/local-cluster.sh kubeconfig)
  export KUBECONFIG
  LOADER="hack/local-cluster.sh load"
else
  LOADER=${QUICKSTART_IMAGE_LOADER:-}
fi
KUBECTL=$KBIN/kubectl
[ -x "$KUBECTL" ] || KUBECTL=$(command -v kubectl) || die "no kubectl: run hack/k8s-binaries.sh cluster, or put kubectl on PATH"
k() { "$KUBECTL" "$@"; }

step "Loading the images into the cluster"
if [ -n "$LOADER" ]; then
  for img in engine operator minio; do $LOADER "bin/images/$img.tar"; done
else
  echo "KUBECONFIG is set and QUICKSTART_IMAGE_LOADER is not: assuming $ENGINE, $OPERATOR and $S3IMAGE are in the cluster"
fi

step "Installing the operator with Helm ($OPERATOR)"
# Helm installs a chart's CRDs only when they are missing and never upgrades them: apply them first.
k apply --server-side --force-conflicts -f charts/cellstore-operator/crds >/dev/null ||
  die "cannot apply the StoreCluster CRD: kubectl get crd storeclusters.cellstore.io"
HELM=${HELM:-$ROOT/bin/helm-v3.19.0}   # make quickstart installs it (make tools)
[ -x "$HELM" ] || make --no-print-directory "$HELM" >/dev/null
"$HELM" upgrade --install cellstore-operator charts/cellstore-operator --namespace cellstore-system --create-namespace \
  --set image.repository="${OPERATOR%:*}" --set-string image.tag="${OPERATOR##*:}" --wait --timeout 5m >/dev/null ||
  die "the operator did not become ready: kubectl -n cellstore-system describe pods; kubectl -n cellstore-system logs deploy/cellstore-operator"
k -n cellstore-system get deploy cellstore-operator

step "Creating namespace $NS"
# A namespace still being deleted (a teardown just before) takes no new objects: wait for it to go.
deadline=$(( $(date +%s) + 600 ))
while [ -n "$(k get namespace "$NS" -o jsonpath='{.metadata.deletionTimestamp}' 2>/dev/null)" ]; do
  [ "$(date +%s)" -lt "$deadline" ] || die "namespace $NS is still being deleted after 10 minutes: kubectl get all -n $NS"
  printf '[quickstart %4ss]     namespace %s is being deleted; waiting\n' "$(( $(date +%s) - T0 ))" "$NS"
  sleep 3
done
k create namespace "$NS" --dry-run=client -o yaml | k apply -f - >/dev/null

step "Deploying the development S3 server dev-s3 in $NS (config/samples/dev-s3-server.yaml, image $S3IMAGE)"
# The bucket Job's template cannot change: a Job kept from an earlier run with other images goes.
job_image=$(k -n "$NS" get job dev-s3-bucket -o jsonpath='{.spec.template.spec.containers[0].image}' 2>/dev/null || true)
[ -z "$job_image" ] || [ "$job_image" = "$ENGINE" ] || k -n "$NS" delete job dev-s3-bucket --wait >/dev/null
sed -e "s#image: docker.io/cellstore/minio:dev#image: $S3IMAGE#" -e "s#image: docker.io/cellstore/engine:v0.1.0#image: $ENGINE#" \
  config/samples/dev-s3-server.yaml | k -n "$NS" apply -f -
deadline=$(( $(date +%s) + 300 ))
until [ "$(k -n "$NS" get job dev-s3-bucket -o jsonpath='{.status.succeeded}' 2>/dev/null)" = 1 ]; do
  [ "$(date +%s)" -lt "$deadline" ] || die "the bucket was not made in 5 minutes: kubectl -n $NS get pods,pvc,events; kubectl -n $NS logs job/dev-s3-bucket; kubectl -n $NS logs sts/dev-s3"
  printf '[quickstart %4ss]     waiting for dev-s3 and its bucket: %s\n' "$(( $(date +%s) - T0 ))" \
    "$(k -n "$NS" get pods -l app.kubernetes.io/name=dev-s3 -o jsonpath='{range .items[*]}{.metadata.name}={.status.phase} {end}' 2>/dev/null)"
  sleep 3
done
echo "bucket 'cellstore' is ready at http://dev-s3.$NS.svc:9000 (keys in Secret $NS/dev-s3-keys)"

step "Creating StoreCluster $NS/$NAME (config/samples/cellstore_v1alpha1_storecluster_minimal.yaml, image $ENGINE)"
# The kind of storage cannot change: a cluster an earlier quickstart made on a shared volume stays as
# it is until someone deletes it (with its data).
if [ -n "$(k -n "$NS" get storecluster "$NAME" -o jsonpath='{.spec.storage.volume}' 2>/dev/null)" ]; then
  die "StoreCluster $NS/$NAME was made by an earlier quickstart with its data on a shared volume; this one keeps it in S3 and the kind of storage cannot change. Delete it (and its data) first: $KUBECTL -n $NS delete storecluster $NAME; $KUBECTL -n $NS delete pvc $NAME-shared --ignore-not-found"
fi
sed "s#^  image: .*#  image: $ENGINE#" config/samples/cellstore_v1alpha1_storecluster_minimal.yaml | k -n "$NS" apply -f -

step "Waiting for StoreCluster $NS/$NAME to become Available (up to 10 minutes)"
last="" deadline=$(( $(date +%s) + 600 ))
while :; do
  line=$(k -n "$NS" get storecluster "$NAME" -o jsonpath='{.status.phase}|{.status.regionServers.ready}/{.status.regionServers.replicas} region servers ready|{.status.conditions[?(@.type=="Available")].status}|{.status.conditions[?(@.type=="Progressing")].status}|{.status.conditions[?(@.type=="Progressing")].message}' 2>/dev/null || true)
  IFS='|' read -r phase ready avail progressing msg <<<"$line"
  if [ "$line" != "$last" ]; then
    printf '[quickstart %4ss]     phase %-12s %s; %s\n' "$(( $(date +%s) - T0 ))" "${phase:-(none yet)}" "$ready" "${msg:-}"
    last=$line
  fi
  [ "$avail" = True ] && [ "$progressing" = False ] && break
  [ "$(date +%s)" -lt "$deadline" ] || die "StoreCluster $NS/$NAME is not Available after 10 minutes: kubectl -n $NS describe storecluster $NAME; kubectl -n $NS get pods,events"
  sleep 2
done

step "Smoke test: a write and a read through cellstore shell in pod $NAME-master-0"
sh_() { k -n "$NS" exec "$NAME-master-0" -c engine -- cellstore shell --masters "$NAME:16000" -e "$1"; }
smoke() {
  local tables
  tables=$(sh_ "list") || return 1
  grep -q '^quickstart$' <<<"$tables" || sh_ "create 'quickstart', 'f', {SPLITS => ['m']}" || return 1
  sh_ "put 'quickstart', 'hello', 'f:greeting', 'world'; get 'quickstart', 'hello'; status"
}
# Retried for a while: after the local cluster restarts, the status can say Available before the
# pods' containers are back (an exec then finds no container) and regions are still reassigned.
deadline=$(( $(date +%s) + 240 ))
until out=$(smoke 2>&1); do
  [ "$(date +%s)" -lt "$deadline" ] || die "the smoke test failed for 4 minutes: $out"
  printf '[quickstart %4ss]     smoke test not through yet (%s); retrying\n' "$(( $(date +%s) - T0 ))" "$(tail -n1 <<<"$out")"
  sleep 3
done
echo "$out"
grep -q 'value=world' <<<"$out" || die "the row written was not read back: $out"

cat <<MSG

Cellstore is running: StoreCluster $NS/$NAME (2 masters, 3 region servers) managed by the operator in
namespace cellstore-system.

  export KUBECONFIG=$KUBECONFIG
  $KUBECTL -n $NS get storecluster,pods
  $KUBECTL -n $NS exec -it $NAME-master-0 -- cellstore shell --masters $NAME:16000
  $KUBECTL -n $NS exec $NAME-master-0 -- cellstore pe --masters $NAME:16000 --rows 100000 randomWrite 4

Inside the cluster, clients reach the masters at $NAME.$NS.svc:16000.
Tear down:  $KUBECTL -n $NS delete storecluster $NAME && $KUBECTL delete namespace $NS
            $HELM uninstall cellstore-operator -n cellstore-system
  (delete the StoreCluster first: a namespace deleted with region server pods in it waits out their
  termination grace period, the drain timeout, before it goes)
Stop the local cluster:  make cluster-down   (hack/local-cluster.sh down --purge also wipes its state)
MSG
