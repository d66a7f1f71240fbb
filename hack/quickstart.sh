#!/usr/bin/env bash
# `make quickstart`: brings up the local single-node Kubernetes (building what it needs the first time),
# loads the locally built images, checks the cluster with the end-to-end suite's environment specs,
# and leaves it running with instructions. Until the operator and engine land (README.md, "Status"),
# this is as far as the quickstart goes.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
step() { printf '\n==> %s\n' "$*"; }

step "Building test images (bin/images/)"
hack/images.sh netcheck
step "Starting the local cluster (the first run builds Kubernetes from source: 10-20 minutes on 2 cores)"
hack/local-cluster.sh up
KUBECONFIG=$(hack/local-cluster.sh kubeconfig)
export KUBECONFIG
hack/local-cluster.sh load bin/images/netcheck.tar
step "Checking the cluster: images, StatefulSet DNS names, volumes"
go test -count=1 -tags e2e -timeout 10m ./e2e -ginkgo.label-filter=environment
KUBECTL=$(hack/k8s-binaries.sh --print-dir)/kubectl
cat <<MSG

The local cluster is up.
  export KUBECONFIG=$KUBECONFIG
  $KUBECTL get nodes
Stop it:   make cluster-down        (hack/local-cluster.sh down --purge also wipes its state)
MSG
