# Cellstore: an HBase-style wide-column store and its Kubernetes operator.
# `make help` lists the targets. Tools are installed into bin/ at the versions pinned below.

SHELL := /usr/bin/env bash -o pipefail
.SHELLFLAGS := -ec
.DEFAULT_GOAL := help

ROOT := $(abspath .)
LOCALBIN := $(ROOT)/bin
export PATH := $(LOCALBIN):$(PATH)

## Tool versions
CONTROLLER_GEN_VERSION ?= v0.19.0
GINKGO_VERSION ?= $(shell go list -m -f '{{.Version}}' github.com/onsi/ginkgo/v2)
GOTESTSUM_VERSION ?= v1.13.0
HELM_VERSION ?= v3.19.0
STATICCHECK_VERSION ?= v0.6.1
PROTOC_GEN_GO_VERSION ?= v1.36.7
PROTOC_GEN_GO_GRPC_VERSION ?= v1.5.1
BUF_VERSION ?= v1.55.1
# promtool of Prometheus 3.16 (its Go module's versions are v0.<major><minor>.<patch>)
PROMTOOL_VERSION ?= v0.316.0

CONTROLLER_GEN ?= $(LOCALBIN)/controller-gen-$(CONTROLLER_GEN_VERSION)
GINKGO ?= $(LOCALBIN)/ginkgo-$(GINKGO_VERSION)
GOTESTSUM ?= $(LOCALBIN)/gotestsum-$(GOTESTSUM_VERSION)
HELM ?= $(LOCALBIN)/helm-$(HELM_VERSION)
STATICCHECK ?= $(LOCALBIN)/staticcheck-$(STATICCHECK_VERSION)
PROTOC_GEN_GO ?= $(LOCALBIN)/protoc-gen-go-$(PROTOC_GEN_GO_VERSION)
PROTOC_GEN_GO_GRPC ?= $(LOCALBIN)/protoc-gen-go-grpc-$(PROTOC_GEN_GO_GRPC_VERSION)
BUF ?= $(LOCALBIN)/buf-$(BUF_VERSION)
PROMTOOL ?= $(LOCALBIN)/promtool-$(PROMTOOL_VERSION)

K8S_BIN_DIR = $(shell hack/k8s-binaries.sh --print-dir)

##@ General

.PHONY: help
help: ## Show this help.
	@awk 'BEGIN {FS = ":.*##"; printf "\nUsage:\n  make \033[36m<target>\033[0m\n"} \
	  /^[a-zA-Z_0-9-]+:.*?##/ { printf "  \033[36m%-16s\033[0m %s\n", $$1, $$2 } \
	  /^##@/ { printf "\n\033[1m%s\033[0m\n", substr($$0, 5) }' $(MAKEFILE_LIST)

##@ Development

.PHONY: generate
generate: $(CONTROLLER_GEN) ## Generate code: deepcopy (controller-gen) and protobuf/gRPC (buf).
	@if [ -d operator/api ]; then $(CONTROLLER_GEN) object paths=./operator/api/...; \
	  else echo "generate: no operator/api yet, no deepcopy code to generate"; fi
	@if [ -f engine/api/buf.gen.yaml ]; then $(MAKE) --no-print-directory proto; \
	  else echo "generate: no engine/api/buf.gen.yaml yet, no protobuf code to generate"; fi

.PHONY: proto
proto: $(BUF) $(PROTOC_GEN_GO) $(PROTOC_GEN_GO_GRPC)
	ln -sf $(PROTOC_GEN_GO) $(LOCALBIN)/protoc-gen-go
	ln -sf $(PROTOC_GEN_GO_GRPC) $(LOCALBIN)/protoc-gen-go-grpc
	cd engine/api && $(BUF) generate

.PHONY: manifests
manifests: $(CONTROLLER_GEN) ## Generate CRDs and RBAC from the operator's API types into config/.
	@if [ -d operator/api ]; then \
	  $(CONTROLLER_GEN) crd rbac:roleName=cellstore-operator paths=./operator/... \
	    output:crd:artifacts:config=config/crd/bases output:rbac:artifacts:config=config/rbac; \
	  else echo "manifests: no operator/api yet, nothing to generate"; fi
	cp config/crd/bases/*.yaml charts/cellstore-operator/crds/
	cp config/rbac/role.yaml charts/cellstore-operator/files/role.yaml

.PHONY: fmt
fmt: ## Format the Go code.
	gofmt -w $$(git ls-files '*.go')

.PHONY: lint
lint: $(STATICCHECK) ## Check the code: gofmt, go mod tidy, go vet and staticcheck, with and without build tags; no lower layer imports a higher one.
	@bad=$$(gofmt -l $$(git ls-files '*.go')); [ -z "$$bad" ] || { echo "gofmt needed on:"; echo "$$bad"; exit 1; }
	@go mod tidy -diff >/dev/null || { echo "go.mod/go.sum are not tidy: run go mod tidy"; go mod tidy -diff; exit 1; }
	go vet ./...
	go vet -tags invariants,envtest,e2e,faultinject ./...
	$(STATICCHECK) ./...
	$(STATICCHECK) -tags invariants,envtest,e2e,faultinject ./...
	GOOS=wasip1 GOARCH=wasm go vet ./engine/compute/function/guest/ ./engine/compute/function/examples/... ./engine/compute/function/testdata/testguest/
	hack/layers.sh

##@ Build

.PHONY: build
build: ## Build every package and the programs into bin/.
	go build ./...
	@mkdir -p $(LOCALBIN)
	@for d in engine/cmd/cellstore operator/cmd operator/cmd/kubectl-cellstore; do \
	  if [ -d $$d ]; then CGO_ENABLED=0 go build -trimpath -o $(LOCALBIN)/ ./$$d; fi; done
# kubectl runs kubectl_complete-cellstore for `kubectl cellstore <TAB>`: the plugin itself under that
# name (a relative link: no second copy to fall out of step, and cp copies the binary through it).
	@if [ -d operator/cmd/kubectl-cellstore ]; then ln -sfn kubectl-cellstore $(LOCALBIN)/kubectl_complete-cellstore; fi
	@$(MAKE) --no-print-directory functions

.PHONY: functions
functions: ## Build the example table functions (WebAssembly, docs/functions.md) into bin/functions/.
	@mkdir -p $(LOCALBIN)/functions
	@for d in engine/compute/function/examples/*/; do n=$$(basename $$d); \
	  GOOS=wasip1 GOARCH=wasm CGO_ENABLED=0 go build -buildmode=c-shared -trimpath -ldflags='-s -w' -o $(LOCALBIN)/functions/$$n.wasm ./$$d; \
	  echo "bin/functions/$$n.wasm"; done

.PHONY: images
images: ## Build the images as tarballs into bin/images/ (no Docker daemon needed).
	hack/images.sh $$(hack/images.sh --list)

##@ Test

export GOTESTSUM GINKGO HELM PROMTOOL

.PHONY: test
test: $(GOTESTSUM) $(GINKGO) $(HELM) $(PROMTOOL) ## Run everything CI runs: lint, unit, envtest and end-to-end tests (brings up the local cluster).
	hack/test.sh all

.PHONY: test-unit
test-unit: $(GOTESTSUM) $(HELM) $(PROMTOOL) ## Unit tests with -race and the invariants build tag.
	hack/test.sh unit

.PHONY: test-envtest
test-envtest: $(GOTESTSUM) ## Integration tests against a real kube-apiserver and etcd (envtest).
	hack/test.sh envtest

.PHONY: e2e
e2e: $(GOTESTSUM) $(GINKGO) $(HELM) ## End-to-end suite; uses KUBECONFIG when set, else brings up (and tears down) the local cluster.
	hack/test.sh e2e

.PHONY: chaos
chaos: $(GOTESTSUM) ## The long chaos run: real processes under a nemesis, history checked linearizable (CHAOS_SECONDS, CHAOS_FAULTS, CHAOS_SEED); report in bin/chaos-report.json.
	hack/k8s-binaries.sh envtest
	@# A run on S3 (CHAOS_STORAGE s3, or the default dir,s3) starts MinIO, built here unless CELLSTORE_S3_SERVER names one.
	case ",$${CHAOS_STORAGE:-dir,s3}," in *,s3,*) s3=$${CELLSTORE_S3_SERVER:-$$(hack/s3-server.sh)} || exit 1;; *) s3=$${CELLSTORE_S3_SERVER:-};; esac; \
	KUBEBUILDER_ASSETS=$$(hack/k8s-binaries.sh --print-dir) CELLSTORE_S3_SERVER=$$s3 CHAOS_SECONDS=$${CHAOS_SECONDS:-1200} CHAOS_FAULTS=$${CHAOS_FAULTS:-120} \
	  CHAOS_REPORT=$(LOCALBIN)/chaos-report.json go test -count=1 -tags envtest -v -run TestChaos -timeout 60m ./engine/chaos/

.PHONY: fuzz
fuzz: ## Every fuzz target with Go's fuzzing engine, FUZZTIME each (default 60s; FUZZ=regex picks targets); make test runs their seed corpora.
	hack/fuzz.sh

##@ Local cluster

.PHONY: cluster-up
cluster-up: ## Start the local single-node Kubernetes (KIND=1 uses kind where Docker allows it).
ifeq ($(KIND),1)
	kind create cluster --name cellstore --wait 120s
else
	hack/local-cluster.sh up
endif

.PHONY: cluster-down
cluster-down: ## Stop the local cluster (keeps its state; hack/local-cluster.sh down --purge wipes it).
ifeq ($(KIND),1)
	kind delete cluster --name cellstore
else
	hack/local-cluster.sh down
endif

.PHONY: quickstart
quickstart: $(HELM) ## The main job: local cluster, operator (Helm), a StoreCluster, smoke test through cellstore shell.
	hack/quickstart.sh

##@ Tools

$(LOCALBIN):
	mkdir -p $(LOCALBIN)

# go-install-tool TARGET PACKAGE VERSION: installs PACKAGE@VERSION as TARGET (a versioned file name),
# so a version bump here installs the new one and nothing stale is used.
define go-install-tool
@[ -f "$(1)" ] || { set -e; echo "Installing $(2)@$(3) into $(LOCALBIN)"; tmp=$$(mktemp -d "$(LOCALBIN)/.install.XXXXXX"); \
  GOBIN=$$tmp go install $(2)@$(3); mv "$$tmp"/* "$(1)"; rmdir "$$tmp"; }
endef

$(CONTROLLER_GEN): | $(LOCALBIN)
	$(call go-install-tool,$@,sigs.k8s.io/controller-tools/cmd/controller-gen,$(CONTROLLER_GEN_VERSION))
$(GINKGO): | $(LOCALBIN)
	$(call go-install-tool,$@,github.com/onsi/ginkgo/v2/ginkgo,$(GINKGO_VERSION))
$(GOTESTSUM): | $(LOCALBIN)
	$(call go-install-tool,$@,gotest.tools/gotestsum,$(GOTESTSUM_VERSION))
$(HELM): | $(LOCALBIN)
	$(call go-install-tool,$@,helm.sh/helm/v3/cmd/helm,$(HELM_VERSION))
$(PROMTOOL): | $(LOCALBIN)
	$(call go-install-tool,$@,github.com/prometheus/prometheus/cmd/promtool,$(PROMTOOL_VERSION))
.PHONY: print-promtool
print-promtool: $(PROMTOOL) ## Install promtool (the alert rules' tests use it) and print its path.
	@echo $(PROMTOOL)
$(STATICCHECK): | $(LOCALBIN)
	$(call go-install-tool,$@,honnef.co/go/tools/cmd/staticcheck,$(STATICCHECK_VERSION))
$(PROTOC_GEN_GO): | $(LOCALBIN)
	$(call go-install-tool,$@,google.golang.org/protobuf/cmd/protoc-gen-go,$(PROTOC_GEN_GO_VERSION))
$(PROTOC_GEN_GO_GRPC): | $(LOCALBIN)
	$(call go-install-tool,$@,google.golang.org/grpc/cmd/protoc-gen-go-grpc,$(PROTOC_GEN_GO_GRPC_VERSION))
$(BUF): | $(LOCALBIN)
	$(call go-install-tool,$@,github.com/bufbuild/buf/cmd/buf,$(BUF_VERSION))

.PHONY: tools
tools: $(CONTROLLER_GEN) $(GINKGO) $(GOTESTSUM) $(STATICCHECK) ## Install the development tools into bin/.
