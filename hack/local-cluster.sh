#!/usr/bin/env bash
# A real single-node Kubernetes on this machine, without kind or a registry: etcd, kube-apiserver,
# kube-controller-manager, kube-scheduler, containerd + runc (Debian), kubelet, kube-proxy (iptables),
# bridge CNI, CoreDNS, and StorageClasses whose volumes non-root pods can write: the default "standard"
# (ReadWriteOnce only, like kind's) and "shared" (ReadWriteMany too).
#
#   hack/local-cluster.sh up [--hugepages N]  start (builds what is missing; N 2 MiB hugepages reserved
#                                             before the kubelet starts, restored by down)
#   hack/local-cluster.sh down [--purge]      stop what up started (by recorded PID), remove its pods,
#                                             mounts, bridge and iptables rules, restore sysctls;
#                                             --purge also deletes cluster state (etcd, volumes, images)
#   hack/local-cluster.sh status              what is running, and the node's readiness
#   hack/local-cluster.sh load FILE.tar...    import image tarballs (hack/images.sh) into the node
#   hack/local-cluster.sh kubeconfig          print the admin kubeconfig path
#
# State lives in .cache/local-cluster/ (certificates, configs, data, logs, PIDs) and /run/cellstore-k8s/
# (containerd sockets and runtime state). Needs root (it runs a kubelet).
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
STATE=${LOCAL_CLUSTER_DIR:-$ROOT/.cache/local-cluster}
RUNTIME=/run/cellstore-k8s
PKI=$STATE/pki ETC=$STATE/etc DATA=$STATE/data LOGS=$STATE/logs PIDS=$STATE/pids
CTR_SOCK=$RUNTIME/containerd/containerd.sock
BRIDGE=cellstore0
POD_CIDR=10.244.0.0/24 SVC_CIDR=10.96.0.0/16 DNS_IP=10.96.0.10 API_PORT=6443
NODE_NAME=$(hostname | tr '[:upper:]' '[:lower:]')
KUBECONFIG_ADMIN=$PKI/admin.kubeconfig
# started in this order, stopped in reverse
COMPONENTS=(containerd etcd kube-apiserver kube-controller-manager kube-scheduler kubelet kube-proxy hostpath-provisioner)
APT_PACKAGES=(containerd runc containernetworking-plugins conntrack iptables openssl)

T0=$(date +%s)
say() { printf '[local-cluster %4ss] %s\n' "$(( $(date +%s) - T0 ))" "$*"; }
die() { echo "local-cluster: $*" >&2; exit 1; }

bindir() { "$ROOT/hack/k8s-binaries.sh" --print-dir; }
KBIN=$(bindir)
kubectl() { "$KBIN/kubectl" --kubeconfig="$KUBECONFIG_ADMIN" "$@"; }
ctr_() { ctr -a "$CTR_SOCK" -n k8s.io "$@"; }

node_ip() {
  local ip
  ip=$(ip -4 route get 1.1.1.1 2>/dev/null | awk '{for (i=1;i<NF;i++) if ($i=="src") {print $(i+1); exit}}')
  [ -n "$ip" ] || ip=$(ip -4 -o addr show scope global 2>/dev/null | awk '{split($4,a,"/"); print a[1]; exit}')
  [ -n "$ip" ] || die "no IPv4 address on a non-loopback interface; the kubelet needs one"
  echo "$ip"
}

# ---- processes: each started in its own session, its PID recorded; only recorded PIDs are stopped ----
pid_of() { cat "$PIDS/$1.pid" 2>/dev/null || true; }
# alive NAME: the recorded PID is a live process (not a zombie) running the expected program
alive() {
  local pid st exe
  pid=$(pid_of "$1"); [ -n "$pid" ] || return 1
  st=$(ps -o stat= -p "$pid" 2>/dev/null) || return 1
  [ -n "$st" ] && [ "${st#Z}" = "$st" ] || return 1
  exe=$(readlink "/proc/$pid/exe" 2>/dev/null) || return 1
  [ "$(basename "$exe")" = "$1" ]
}
# ---- CPU weights roughly like kind's ----
# kind runs etcd, kube-apiserver, kube-controller-manager and kube-scheduler as pods with CPU requests
# (100m, 250m, 200m, 100m: they weigh as much as pods requesting as much), and containerd and the
# kubelet in its node's system slice, one group beside the pods'. Here they are host processes: in
# the root CPU cgroup every one of their threads would weigh as much as a group of 1024 shares
# (cgroup v1) — half of all pods on a 2-core node (kubepods: 1024 shares per core) — so under CPU
# contention the control plane would take the pods' CPU. Each is started in a group instead:
# cellstore-control-plane 666 shares (the 650m its pods request in kind), and cellstore-node 1024
# (containerd and its shims, the kubelet, kube-proxy, the provisioner).
CPU_GROUPS="cellstore-control-plane:666 cellstore-node:1024"
cpu_group_of() { # NAME: the CPU group a component runs in
  case $1 in
    etcd|kube-apiserver|kube-controller-manager|kube-scheduler) echo cellstore-control-plane ;;
    *) echo cellstore-node ;;
  esac
}
cgroup_v2() { [ -f /sys/fs/cgroup/cgroup.controllers ]; } # the unified hierarchy is mounted
cpu_group_dir() { # GROUP: its directory, v2 (unified) or v1 (cpu controller); empty when neither
  if cgroup_v2; then echo "/sys/fs/cgroup/$1"
  elif [ -d /sys/fs/cgroup/cpu ]; then echo "/sys/fs/cgroup/cpu/$1"; fi
}
# make_cpu_groups: creates the groups and sets their weights; where that is refused (a cgroup
# namespace without the cpu controller delegated, a read-only cgroupfs) the components run where
# this script does, as before, and it says so.
make_cpu_groups() {
  local g name shares dir
  if cgroup_v2 && ! grep -qw cpu /sys/fs/cgroup/cgroup.subtree_control 2>/dev/null; then
    echo +cpu >/sys/fs/cgroup/cgroup.subtree_control 2>/dev/null || true
  fi
  for g in $CPU_GROUPS; do
    name=${g%%:*} shares=${g#*:}
    dir=$(cpu_group_dir "$name")
    if [ -z "$dir" ] || ! mkdir -p "$dir" 2>/dev/null; then
      say "warning: cannot make CPU group $name (${dir:-no cpu cgroup}): the control plane competes with pods unweighted"
      continue
    fi
    if cgroup_v2; then # the kubelet's conversion from shares to weight
      { echo $(( 1 + (shares - 2) * 9999 / 262142 )) >"$dir/cpu.weight"; } 2>/dev/null ||
        say "warning: cannot set $dir/cpu.weight (is the cpu controller enabled in /sys/fs/cgroup/cgroup.subtree_control?): $name runs unweighted"
    else
      { echo "$shares" >"$dir/cpu.shares"; } 2>/dev/null || say "warning: cannot set $dir/cpu.shares: $name runs unweighted"
    fi
  done
}
remove_cpu_groups() { # after every component stopped: a group still holding a process stays
  local g dir
  for g in $CPU_GROUPS; do
    dir=$(cpu_group_dir "${g%%:*}")
    [ -n "$dir" ] && [ -d "$dir" ] && rmdir "$dir" 2>/dev/null || true
  done
}
start() { # NAME CMD...: runs CMD in NAME's CPU group from its first instruction
  local name=$1 procs; shift
  procs="$(cpu_group_dir "$(cpu_group_of "$name")")/cgroup.procs"
  (
    # refused (or no such group): the component runs where this script does
    if [ -f "$procs" ]; then { echo "$BASHPID" >"$procs"; } 2>/dev/null || true; fi
    exec setsid "$@"
  ) >>"$LOGS/$name.log" 2>&1 </dev/null &
  echo $! >"$PIDS/$name.pid"
}
stop() { # NAME: SIGTERM, then SIGKILL after 20 s
  local name=$1 pid
  pid=$(pid_of "$name")
  if [ -n "$pid" ] && alive "$name"; then
    kill -TERM "$pid" 2>/dev/null || true
    for _ in $(seq 200); do alive "$name" || break; sleep 0.1; done
    if alive "$name"; then kill -KILL "$pid" 2>/dev/null || true; say "$name ($pid) killed"; else say "$name ($pid) stopped"; fi
  fi
  rm -f "$PIDS/$name.pid"
}
# waitfor DESC SECONDS CMD...: polls CMD until it succeeds; on timeout names the log to read
waitfor() {
  local desc=$1 secs=$2 log=${WAIT_LOG:-}; shift 2
  local end=$(( $(date +%s) + secs ))
  until "$@" >/dev/null 2>&1; do
    if [ "$(date +%s)" -ge "$end" ]; then
      echo "local-cluster: timed out after ${secs}s waiting for $desc." >&2
      [ -n "$log" ] && { echo "--- last lines of $log:" >&2; tail -n 25 "$log" >&2; }
      echo "Logs: $LOGS. Clean up with: hack/local-cluster.sh down" >&2
      exit 1
    fi
    sleep 0.5
  done
}

ensure_prerequisites() {
  [ "$(id -u)" = 0 ] || die "run as root: the kubelet and containerd need it"
  local missing=()
  command -v containerd >/dev/null || missing+=(containerd)
  command -v runc >/dev/null || missing+=(runc)
  [ -x /usr/lib/cni/bridge ] || missing+=(containernetworking-plugins)
  command -v conntrack >/dev/null || missing+=(conntrack)
  command -v iptables >/dev/null || missing+=(iptables)
  command -v openssl >/dev/null || missing+=(openssl)
  if [ ${#missing[@]} -gt 0 ]; then
    say "installing Debian packages: ${missing[*]}"
    command -v apt-get >/dev/null || die "missing ${missing[*]} and no apt-get to install them; install: ${APT_PACKAGES[*]}"
    apt-get update -qq >/dev/null || die "apt-get update failed"
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null || die "apt-get install ${missing[*]} failed"
  fi
  "$ROOT/hack/k8s-binaries.sh" cluster
  local img
  for img in pause coredns; do
    [ -f "$ROOT/bin/images/$img.tar" ] || "$ROOT/hack/images.sh" "$img"
  done
  mkdir -p "$ROOT/bin/tools"
  (cd "$ROOT" && CGO_ENABLED=0 go build -o bin/tools/hostpath-provisioner ./hack/tools/hostpath-provisioner)
}

gen_pki() { # certificates and kubeconfigs; existing files are kept
  local ip=$1
  mkdir -p "$PKI"
  (
    cd "$PKI"
    key() { [ -f "$1.key" ] || openssl genrsa -out "$1.key" 2048 2>/dev/null; }
    ca() { # NAME CN
      [ -f "$1.crt" ] && return 0
      key "$1"; openssl req -x509 -new -key "$1.key" -sha256 -days 3650 -subj "/CN=$2" -out "$1.crt" 2>/dev/null
    }
    cert() { # NAME SUBJECT USAGE [SAN] [CA]
      [ -f "$1.crt" ] && return 0
      key "$1"
      {
        echo "basicConstraints=CA:FALSE"
        echo "keyUsage=critical,digitalSignature,keyEncipherment"
        echo "extendedKeyUsage=$3"
        [ -z "${4:-}" ] || echo "subjectAltName=$4"
      } >"$1.ext"
      openssl req -new -key "$1.key" -subj "$2" 2>/dev/null |
        openssl x509 -req -CA "${5:-ca}.crt" -CAkey "${5:-ca}.key" -CAcreateserial -days 3650 -sha256 -extfile "$1.ext" -out "$1.crt" 2>/dev/null
      rm -f "$1.ext"
    }
    kubeconfig() { # NAME CERT
      [ -f "$1.kubeconfig" ] && return 0
      cat >"$1.kubeconfig" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: cellstore-local
  cluster: {certificate-authority: $PKI/ca.crt, server: "https://127.0.0.1:$API_PORT"}
users:
- name: $1
  user: {client-certificate: $PKI/$2.crt, client-key: $PKI/$2.key}
contexts:
- name: cellstore-local
  context: {cluster: cellstore-local, user: $1}
current-context: cellstore-local
EOF
    }
    ca ca cellstore-local-ca
    ca front-proxy-ca cellstore-local-front-proxy-ca
    [ -f sa.pub ] || { key sa; openssl rsa -in sa.key -pubout -out sa.pub 2>/dev/null; }
    cert apiserver /CN=kube-apiserver serverAuth \
      "DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local,DNS:localhost,DNS:$NODE_NAME,IP:127.0.0.1,IP:10.96.0.1,IP:$ip"
    cert apiserver-kubelet-client "/O=system:masters/CN=kube-apiserver-kubelet-client" clientAuth
    cert admin "/O=system:masters/CN=cellstore-local-admin" clientAuth
    cert controller-manager /CN=system:kube-controller-manager clientAuth
    cert scheduler /CN=system:kube-scheduler clientAuth
    cert kube-proxy /CN=system:kube-proxy clientAuth
    cert kubelet "/O=system:nodes/CN=system:node:$NODE_NAME" clientAuth
    cert kubelet-serving "/CN=$NODE_NAME" serverAuth "DNS:$NODE_NAME,DNS:localhost,IP:127.0.0.1,IP:$ip"
    cert front-proxy-client /CN=front-proxy-client clientAuth "" front-proxy-ca
    for n in admin controller-manager scheduler kube-proxy kubelet; do kubeconfig "$n" "$n"; done
    chmod 600 ./*.key
  )
}

write_configs() {
  local ip=$1
  mkdir -p "$ETC/cni" "$DATA" "$RUNTIME"
  cat >"$ETC/containerd.toml" <<EOF
version = 2
root = "$DATA/containerd"
state = "$RUNTIME/containerd"
[grpc]
  address = "$CTR_SOCK"
[ttrpc]
  address = ""
[plugins."io.containerd.internal.v1.opt"]
  path = "$DATA/containerd-opt"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "$("$ROOT/hack/images.sh" --ref pause)"
  restrict_oom_score_adj = true
  disable_apparmor = true
  tolerate_missing_hugetlb_controller = true
  enable_unprivileged_ports = true
  enable_unprivileged_icmp = true
[plugins."io.containerd.grpc.v1.cri".containerd]
  snapshotter = "overlayfs"
  default_runtime_name = "runc"
[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
  runtime_type = "io.containerd.runc.v2"
[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
  SystemdCgroup = false
  Root = "$RUNTIME/runc"
[plugins."io.containerd.grpc.v1.cri".cni]
  bin_dir = "/usr/lib/cni"
  conf_dir = "$ETC/cni"
  max_conf_num = 1
EOF
  cat >"$ETC/cni/10-cellstore.conflist" <<EOF
{
  "cniVersion": "1.0.0",
  "name": "cellstore-local",
  "plugins": [
    {"type": "bridge", "bridge": "$BRIDGE", "isGateway": true, "ipMasq": true, "hairpinMode": true,
     "ipam": {"type": "host-local", "ranges": [[{"subnet": "$POD_CIDR"}]], "routes": [{"dst": "0.0.0.0/0"}],
              "dataDir": "$RUNTIME/cni-ipam"}},
    {"type": "portmap", "capabilities": {"portMappings": true}}
  ]
}
EOF
  cgroup_driver=cgroupfs
  cat >"$ETC/kubelet.yaml" <<EOF
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
authentication: {anonymous: {enabled: false}, webhook: {enabled: true}, x509: {clientCAFile: $PKI/ca.crt}}
authorization: {mode: Webhook}
cgroupDriver: $cgroup_driver
failCgroupV1: false
failSwapOn: false
containerRuntimeEndpoint: unix://$CTR_SOCK
clusterDNS: [$DNS_IP]
clusterDomain: cluster.local
resolvConf: /etc/resolv.conf
tlsCertFile: $PKI/kubelet-serving.crt
tlsPrivateKeyFile: $PKI/kubelet-serving.key
address: $ip
healthzBindAddress: 127.0.0.1
healthzPort: 10248
readOnlyPort: 0
serializeImagePulls: false
rotateCertificates: false
# Images are imported, never pulled: image garbage collection would lose them for good.
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
evictionHard: {memory.available: "100Mi", nodefs.available: "1%", nodefs.inodesFree: "1%", imagefs.available: "1%"}
fileCheckFrequency: 5s
syncFrequency: 10s
nodeStatusReportFrequency: 10s
EOF
  cat >"$ETC/kube-proxy.yaml" <<EOF
apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
clientConnection: {kubeconfig: $PKI/kube-proxy.kubeconfig}
hostnameOverride: $NODE_NAME
healthzBindAddress: 127.0.0.1:10256
metricsBindAddress: 127.0.0.1:10249
mode: iptables
clusterCIDR: 10.244.0.0/16
conntrack: {maxPerCore: 0, min: 0}
EOF
  sed -e "s|@DNS_IP@|$DNS_IP|g" -e "s|@COREDNS_IMAGE@|$("$ROOT/hack/images.sh" --ref coredns)|g" \
    "$ROOT/hack/local-cluster/coredns.yaml" >"$ETC/coredns.yaml"
}

cmd_up() {
  local hugepages=""
  while [ $# -gt 0 ]; do
    case $1 in
      --hugepages) hugepages=${2:?--hugepages needs a number of 2 MiB pages}; shift 2 ;;
      *) die "unknown option for up: $1" ;;
    esac
  done
  mkdir -p "$PKI" "$ETC" "$DATA" "$LOGS" "$PIDS"
  local c running=0
  for c in "${COMPONENTS[@]}"; do alive "$c" && running=$((running + 1)); done
  if [ "$running" -eq ${#COMPONENTS[@]} ]; then
    say "already up. export KUBECONFIG=$KUBECONFIG_ADMIN"
    return 0
  fi
  if [ "$running" -gt 0 ] || [ -s "$STATE/sysctl.saved" ]; then
    say "a previous run left state behind; cleaning it up first"
    cmd_down
  fi
  ensure_prerequisites
  local ip; ip=$(node_ip)
  say "node $NODE_NAME at $ip"

  # host settings, remembered for down
  local keys=(net.ipv4.ip_forward net.bridge.bridge-nf-call-iptables fs.inotify.max_user_instances fs.inotify.max_user_watches vm.nr_hugepages)
  modprobe br_netfilter 2>/dev/null || true
  : >"$STATE/sysctl.saved"
  for k in "${keys[@]}"; do
    v=$(sysctl -n "$k" 2>/dev/null) && echo "$k=$v" >>"$STATE/sysctl.saved"
  done
  sysctl -qw net.ipv4.ip_forward=1 fs.inotify.max_user_instances=1024 fs.inotify.max_user_watches=524288
  sysctl -qw net.bridge.bridge-nf-call-iptables=1 2>/dev/null || say "warning: net.bridge.bridge-nf-call-iptables unavailable; Services may not reach pods on the bridge"
  if [ -n "$hugepages" ]; then
    sysctl -qw vm.nr_hugepages="$hugepages"
    say "reserved $(cat /proc/sys/vm/nr_hugepages) of $hugepages requested 2 MiB hugepages"
  fi

  make_cpu_groups
  gen_pki "$ip"
  write_configs "$ip"
  say "certificates and configs ready in $STATE"

  start containerd containerd --config "$ETC/containerd.toml"
  WAIT_LOG=$LOGS/containerd.log waitfor containerd 30 ctr -a "$CTR_SOCK" version
  local t
  for t in "$ROOT"/bin/images/*.tar; do
    ctr_ images import "$t" >/dev/null || die "importing $t failed"
  done
  say "containerd up; images imported: $(ls "$ROOT"/bin/images/*.tar | xargs -n1 basename | tr '\n' ' ')"

  start etcd "$KBIN/etcd" --name cellstore-local --data-dir "$DATA/etcd" \
    --listen-client-urls http://127.0.0.1:2379 --advertise-client-urls http://127.0.0.1:2379 \
    --listen-peer-urls http://127.0.0.1:2380 --initial-advertise-peer-urls http://127.0.0.1:2380 \
    --initial-cluster cellstore-local=http://127.0.0.1:2380 --listen-metrics-urls http://127.0.0.1:2381 \
    --unsafe-no-fsync --quota-backend-bytes 4294967296
  WAIT_LOG=$LOGS/etcd.log waitfor etcd 60 curl -sf http://127.0.0.1:2379/health
  say "etcd healthy"

  start kube-apiserver "$KBIN/kube-apiserver" --etcd-servers=http://127.0.0.1:2379 \
    --bind-address=0.0.0.0 --secure-port=$API_PORT --advertise-address="$ip" \
    --service-cluster-ip-range=$SVC_CIDR --service-node-port-range=30000-32767 \
    --client-ca-file="$PKI/ca.crt" --tls-cert-file="$PKI/apiserver.crt" --tls-private-key-file="$PKI/apiserver.key" \
    --kubelet-client-certificate="$PKI/apiserver-kubelet-client.crt" --kubelet-client-key="$PKI/apiserver-kubelet-client.key" \
    --kubelet-certificate-authority="$PKI/ca.crt" --kubelet-preferred-address-types=InternalIP,Hostname \
    --service-account-key-file="$PKI/sa.pub" --service-account-signing-key-file="$PKI/sa.key" \
    --service-account-issuer=https://kubernetes.default.svc.cluster.local \
    --authorization-mode=Node,RBAC --enable-admission-plugins=NodeRestriction \
    --requestheader-client-ca-file="$PKI/front-proxy-ca.crt" --requestheader-allowed-names=front-proxy-client \
    --requestheader-extra-headers-prefix=X-Remote-Extra- --requestheader-group-headers=X-Remote-Group \
    --requestheader-username-headers=X-Remote-User \
    --proxy-client-cert-file="$PKI/front-proxy-client.crt" --proxy-client-key-file="$PKI/front-proxy-client.key" \
    --enable-aggregator-routing=true --allow-privileged=true --profiling=false --v=1
  apiserver_ready() { [ "$(curl -s --cacert "$PKI/ca.crt" "https://127.0.0.1:$API_PORT/readyz")" = ok ]; }
  WAIT_LOG=$LOGS/kube-apiserver.log waitfor kube-apiserver 120 apiserver_ready
  say "kube-apiserver ready"

  start kube-controller-manager "$KBIN/kube-controller-manager" --kubeconfig="$PKI/controller-manager.kubeconfig" \
    --authentication-kubeconfig="$PKI/controller-manager.kubeconfig" --authorization-kubeconfig="$PKI/controller-manager.kubeconfig" \
    --bind-address=127.0.0.1 --leader-elect=false --cluster-name=cellstore-local \
    --cluster-signing-cert-file="$PKI/ca.crt" --cluster-signing-key-file="$PKI/ca.key" --root-ca-file="$PKI/ca.crt" \
    --service-account-private-key-file="$PKI/sa.key" --use-service-account-credentials=true \
    --service-cluster-ip-range=$SVC_CIDR --allocate-node-cidrs=false --profiling=false --v=1
  start kube-scheduler "$KBIN/kube-scheduler" --kubeconfig="$PKI/scheduler.kubeconfig" \
    --authentication-kubeconfig="$PKI/scheduler.kubeconfig" --authorization-kubeconfig="$PKI/scheduler.kubeconfig" \
    --bind-address=127.0.0.1 --leader-elect=false --profiling=false --v=1
  WAIT_LOG=$LOGS/kube-controller-manager.log waitfor kube-controller-manager 60 curl -skf https://127.0.0.1:10257/healthz
  WAIT_LOG=$LOGS/kube-scheduler.log waitfor kube-scheduler 60 curl -skf https://127.0.0.1:10259/healthz
  say "controller-manager and scheduler healthy"

  start kubelet "$KBIN/kubelet" --config="$ETC/kubelet.yaml" --kubeconfig="$PKI/kubelet.kubeconfig" \
    --root-dir="$DATA/kubelet" --hostname-override="$NODE_NAME" --node-ip="$ip" --v=1
  WAIT_LOG=$LOGS/kubelet.log waitfor "kubelet health" 60 curl -sf http://127.0.0.1:10248/healthz
  start kube-proxy "$KBIN/kube-proxy" --config="$ETC/kube-proxy.yaml" --v=1
  node_ready() { [ "$(kubectl get node "$NODE_NAME" -o 'jsonpath={.status.conditions[?(@.type=="Ready")].status}')" = True ]; }
  WAIT_LOG=$LOGS/kubelet.log waitfor "node $NODE_NAME Ready" 120 node_ready
  say "node $NODE_NAME Ready"

  mkdir -p "$DATA/volumes"
  start hostpath-provisioner "$ROOT/bin/tools/hostpath-provisioner" --kubeconfig="$KUBECONFIG_ADMIN" \
    --dir="$DATA/volumes" --node="$NODE_NAME"
  # A class's parameters cannot change: one kept from an older version of this script is replaced.
  kubectl apply -f "$ROOT/hack/local-cluster/storageclass.yaml" >/dev/null 2>&1 || {
    kubectl delete storageclass standard shared --ignore-not-found >/dev/null
    kubectl apply -f "$ROOT/hack/local-cluster/storageclass.yaml" >/dev/null
  }
  kubectl apply -f "$ETC/coredns.yaml" >/dev/null
  WAIT_LOG=$LOGS/kubelet.log waitfor "CoreDNS Available" 120 kubectl -n kube-system wait --for=condition=Available deploy/coredns --timeout=2s
  say "CoreDNS available; StorageClasses 'standard' (default, ReadWriteOnce) and 'shared' (ReadWriteMany) served by hostpath-provisioner"
  say "cluster up. export KUBECONFIG=$KUBECONFIG_ADMIN; kubectl is $KBIN/kubectl"
}

cmd_down() {
  local purge=no
  [ "${1:-}" = --purge ] && purge=yes
  stop hostpath-provisioner
  # Pods first, while the kubelet and containerd still run: the runtime tears down each pod's network.
  if alive containerd && [ -x "$KBIN/cri-cleanup" ]; then
    stop kubelet
    "$KBIN/cri-cleanup" -endpoint "unix://$CTR_SOCK" -timeout 60s >/dev/null || say "warning: some pods could not be removed cleanly"
    local t
    for t in $(ctr_ tasks ls -q 2>/dev/null); do ctr_ tasks kill -s SIGKILL "$t" >/dev/null 2>&1 || true; done
  fi
  local i
  for (( i=${#COMPONENTS[@]}-1; i>=0; i-- )); do stop "${COMPONENTS[$i]}"; done
  if [ -x "$KBIN/kube-proxy" ]; then "$KBIN/kube-proxy" --cleanup >/dev/null 2>&1 || true; fi
  # container shims of our containerd outlive it: find them by our socket in their command line
  local p
  for p in $(pgrep -f "containerd-shim-runc-v2 .*-address $CTR_SOCK" 2>/dev/null || true); do kill -KILL "$p" 2>/dev/null || true; done
  # mounts under our state and runtime directories, deepest first
  awk '{print $5}' /proc/self/mountinfo | grep -E "^($DATA|$RUNTIME)(/|$)" | sort -r | while read -r m; do umount -l "$m" 2>/dev/null || true; done || true
  local ns
  for ns in /run/netns/cni-*; do
    [ -e "$ns" ] || continue
    if ! ip netns pids "$(basename "$ns")" 2>/dev/null | grep -q .; then umount "$ns" 2>/dev/null || true; rm -f "$ns"; fi
  done
  if ip link show "$BRIDGE" >/dev/null 2>&1; then ip link delete "$BRIDGE"; say "bridge $BRIDGE removed"; fi
  # iptables: rules that jump to the chains of the kubelet, kube-proxy and CNI, then those chains
  local table rule chain
  for table in filter nat mangle; do
    iptables -t "$table" -S 2>/dev/null | grep -E '^-A .* -j (KUBE-|CNI-)' | grep -vE '^-A (KUBE-|CNI-)' | sed 's/^-A/-D/' |
      while read -r rule; do eval "iptables -t $table $rule" 2>/dev/null || true; done || true
    for chain in $(iptables -t "$table" -S 2>/dev/null | awk '/^-N (KUBE-|CNI-)/ {print $2}'); do iptables -t "$table" -F "$chain" 2>/dev/null || true; done
    for chain in $(iptables -t "$table" -S 2>/dev/null | awk '/^-N (KUBE-|CNI-)/ {print $2}'); do iptables -t "$table" -X "$chain" 2>/dev/null || true; done
  done
  # cgroups the kubelet made (cgroupfs driver), deepest first
  local hier
  for hier in /sys/fs/cgroup/*/kubepods /sys/fs/cgroup/kubepods; do
    [ -d "$hier" ] && find "$hier" -depth -type d -exec rmdir {} \; 2>/dev/null || true
  done
  remove_cpu_groups
  rm -rf "$RUNTIME"
  if [ -s "$STATE/sysctl.saved" ]; then
    local kv
    while read -r kv; do sysctl -qw "$kv" 2>/dev/null || true; done <"$STATE/sysctl.saved"
    rm -f "$STATE/sysctl.saved"
    say "sysctls restored"
  fi
  if [ "$purge" = yes ]; then
    rm -rf "$DATA" "$LOGS" "$PIDS" "$ETC"
    say "cluster state purged (certificates kept in $PKI)"
  fi
  say "down"
}

cmd_status() {
  local c rc=0
  for c in "${COMPONENTS[@]}"; do
    if alive "$c"; then printf '  %-24s running (pid %s)\n' "$c" "$(pid_of "$c")"; else printf '  %-24s not running\n' "$c"; rc=1; fi
  done
  if alive kube-apiserver; then kubectl get nodes -o wide 2>/dev/null || rc=1; fi
  return $rc
}

cmd_load() {
  [ $# -gt 0 ] || die "usage: $0 load FILE.tar... (make tarballs with hack/images.sh)"
  alive containerd || die "the cluster is not running: hack/local-cluster.sh up"
  local f
  for f in "$@"; do
    [ -f "$f" ] || die "$f: no such image tarball (build it with hack/images.sh, or 'docker save IMAGE -o $f')"
    ctr_ images import "$f" >/dev/null || die "importing $f failed"
    say "loaded $f"
  done
}

case "${1:-}" in
  up) shift; cmd_up "$@" ;;
  down) shift; cmd_down "$@" ;;
  status) cmd_status ;;
  load) shift; cmd_load "$@" ;;
  kubeconfig) echo "$KUBECONFIG_ADMIN" ;;
  *) sed -n '2,17p' "$0" | sed 's/^# \{0,1\}//'; exit 2 ;;
esac
