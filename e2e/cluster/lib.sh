# Shared settings of ferry's end-to-end cluster scripts; sourced, not run.
#
# Everything the cluster writes goes under two folders:
#   FERRY_E2E_CACHE  build output kept between runs (bin/kube, img/)
#                    default ${XDG_CACHE_HOME:-$HOME/.cache}/ferry-e2e
#   FERRY_E2E_STATE  one cluster's certificates, configs, data and logs
#                    default $FERRY_E2E_CACHE/state
# and one network namespace, FERRY_E2E_NETNS (default ferry-e2e), that holds
# every process of the node: nothing listens on, or routes to, the host's
# interfaces.

E2E_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
REPO_DIR=$(cd "$E2E_DIR/.." && pwd)

CACHE=${FERRY_E2E_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/ferry-e2e}
STATE=${FERRY_E2E_STATE:-$CACHE/state}
NETNS=${FERRY_E2E_NETNS:-ferry-e2e}
NETNS_PATH=/var/run/netns/$NETNS

BIN=$CACHE/bin                 # kube (multi-call) and its links
IMG=$CACHE/img                 # tiny (static binary), tiny.tar (its image)
RUN=$STATE/run                 # data of the running cluster, removed by down.sh
PKI=$RUN/pki                   # certificates and keys
LOGS=$STATE/logs
PIDS=$STATE/pids               # "name pid" lines, in start order
KUBECONFIG_FILE=$STATE/kubeconfig
ENV_FILE=$STATE/env            # FERRY_E2E_* for tests, written by up.sh
SOCK=$RUN/containerd/containerd.sock
# The nodes share the host's file system, so the registry's hostPath storage
# (ferry init's default, --storage-dir) lands on the host: the cluster's
# data all the same. up.sh starts it empty and down.sh removes it, so that no
# run sees blobs an earlier one pushed.
HOST_STORAGE=/var/lib/ferry/registry

# The kubelet's cgroup root: pods go below /sys/fs/cgroup/*/$CGROUP_ROOT, so
# down.sh finds every container process there and touches no other cgroup.
CGROUP_ROOT=$NETNS

NODE_NAME=node1
NODE_IP=10.200.0.1             # on node0, the bridge inside the netns
POD_CIDR=10.88.0.0/16          # node k's pods get 10.88.k.0/24
NODE_POD_SUBNET=10.88.1.0/24

# Worker nodes (nodes.sh): node k (k = 2, 3, …) runs containerd, kubelet and
# kube-proxy in network namespace $NETNS-node<k>, with IP 10.200.0.<k> on a
# veth into node0, its data in $RUN/node<k> and its pods below cgroup
# /$NETNS-node<k>. The workstation namespace $NETNS-ws (10.200.0.100)
# reaches the API server (10.200.0.1:6443) and nothing else. $WORKERS_FILE
# lists the workers' numbers while they exist.
WORKERS_FILE=$STATE/workers
WS_NETNS=$NETNS-ws
WS_IP=10.200.0.100
WS_KUBECONFIG=$STATE/kubeconfig-ws
worker_netns() { echo "$NETNS-node$1"; }
worker_dir() { echo "$RUN/node$1"; }
workers() { [ -f "$WORKERS_FILE" ] && cat "$WORKERS_FILE"; }
# cgroup_roots / sockets: the kubelets' cgroup roots and containerd sockets
# of node1 and every worker.
cgroup_roots() { echo "$CGROUP_ROOT"; for k in $(workers); do echo "$NETNS-node$k"; done; }
sockets() { echo "$SOCK"; for k in $(workers); do echo "$(worker_dir "$k")/containerd/containerd.sock"; done; }
SERVICE_CIDR=10.96.0.0/24
SERVICE_IP=10.96.0.1
KUBE_VERSION=1.35.4

# The imported image: the tiny program, also the sandbox ("pause") image.
TINY_IMAGE=ferry.local/tiny:e2e
# Loopback ports containerd pulls from over plain HTTP (certs.d/127.0.0.1:<port>):
# 31999 for ferry's in-cluster registry, the others for registries tests start.
REGISTRY_NODEPORT=31999
TEST_REGISTRY_PORTS="5000 5001 5002 5003 5004 5005 5006 5007 5008 5009"

# Kernel settings the kubelet changes on the host (they are not per network
# namespace); up.sh saves them, down.sh puts them back.
KUBELET_SYSCTLS="vm.overcommit_memory vm.panic_on_oom kernel.panic kernel.panic_on_oops kernel.keys.root_maxkeys kernel.keys.root_maxbytes"

T0=${T0:-$(date +%s.%N)}
# log MESSAGE: one line on stderr with the seconds since the script started.
log() { printf '[%6.1fs] %s\n' "$(awk -v a="$T0" -v b="$(date +%s.%N)" 'BEGIN { print b - a }')" "$*" >&2; }
die() { echo "ferry-e2e: $*" >&2; exit 1; }

# inns CMD...: run CMD inside the node's network namespace. nsenter, not
# `ip netns exec`, which remounts /sys and would hide the cgroup hierarchies.
inns() { nsenter --net="$NETNS_PATH" -- "$@"; }

# kapi PATH [curl args]: call the API server as admin from inside the netns
# (not as "curl", whose user agent gets indented JSON).
kapi() {
  local p=$1; shift
  inns curl -sf -m 5 -A ferry-e2e --cacert "$PKI/ca.crt" --cert "$PKI/admin.crt" --key "$PKI/admin.key" "$@" "https://127.0.0.1:6443$p"
}

# node_config DIR NAME IP SUBNET CGROUP KUBECONFIG: write one node's
# containerd, CNI, kubelet and kube-proxy configuration under DIR: its
# containerd socket is DIR/containerd/containerd.sock, its pods get SUBNET,
# its kubelet listens on IP and puts pods below cgroup /CGROUP.
node_config() {
local d=$1 name=$2 ip=$3 subnet=$4 cgroup=$5 kubeconfig=$6
mkdir -p "$d"/{containerd/certs.d,cni/net.d,cni/ipam,kubelet,podlogs,runc}
cat > "$d/containerd/config.toml" <<EOF
version = 2
root = "$d/containerd/root"
state = "$d/containerd/state"
[grpc]
  address = "$d/containerd/containerd.sock"
[plugins."io.containerd.internal.v1.opt"]
  path = "$d/containerd/opt"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "$TINY_IMAGE"
  stream_server_address = "127.0.0.1"
  # root here lacks CAP_SYS_RESOURCE: a negative oom_score_adj (-998 for
  # sandboxes) would fail in runc with "can't get final child's PID from pipe".
  restrict_oom_score_adj = true
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
        BinaryName = "$(command -v runc)"
        Root = "$d/runc"
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = "$d/cni/net.d"
  [plugins."io.containerd.grpc.v1.cri".registry]
    config_path = "$d/containerd/certs.d"
EOF
# Plain-HTTP pulls from registries on the node's loopback.
for p in $REGISTRY_NODEPORT $TEST_REGISTRY_PORTS; do
  mkdir -p "$d/containerd/certs.d/127.0.0.1:$p"
  cat > "$d/containerd/certs.d/127.0.0.1:$p/hosts.toml" <<EOF
server = "http://127.0.0.1:$p"
[host."http://127.0.0.1:$p"]
  capabilities = ["pull", "resolve"]
EOF
done
cat > "$d/cni/net.d/10-bridge.conflist" <<EOF
{
  "cniVersion": "0.4.0",
  "name": "ferry-e2e",
  "plugins": [
    {"type": "bridge", "bridge": "cni0", "isGateway": true, "ipMasq": true, "hairpinMode": true,
     "ipam": {"type": "host-local", "dataDir": "$d/cni/ipam", "ranges": [[{"subnet": "$subnet"}]], "routes": [{"dst": "0.0.0.0/0"}]}},
    {"type": "portmap", "capabilities": {"portMappings": true}}
  ]
}
EOF
cat > "$d/kubelet/config.yaml" <<EOF
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: $ip
healthzBindAddress: 127.0.0.1
readOnlyPort: 0
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: false}
  x509: {clientCAFile: $PKI/ca.crt}
authorization: {mode: AlwaysAllow}
cgroupDriver: cgroupfs
cgroupRoot: /$cgroup
failCgroupV1: false
failSwapOn: false
containerRuntimeEndpoint: unix://$d/containerd/containerd.sock
podLogsDir: $d/podlogs
clusterDomain: cluster.local
serializeImagePulls: false
evictionHard: {memory.available: "100Mi", nodefs.available: "1%", imagefs.available: "1%", nodefs.inodesFree: "1%"}
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
EOF
cat > "$d/kube-proxy.yaml" <<EOF
apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
clientConnection: {kubeconfig: $kubeconfig}
hostnameOverride: $name
clusterCIDR: $POD_CIDR
mode: iptables
healthzBindAddress: 127.0.0.1:10256
metricsBindAddress: 127.0.0.1:10249
conntrack: {maxPerCore: 0, tcpEstablishedTimeout: 0s, tcpCloseWaitTimeout: 0s}
EOF

}

# start NAME CMD...: run CMD in the node's netns (or the one $IN_NETNS
# names) in the background, in a session of its own (a Ctrl-C meant for the
# tests must not reach the cluster), output to $LOGS/NAME.log. setsid (not a
# group leader here) and nsenter both exec, so $! is CMD's PID. The command
# line is kept in $RUN/cmds/NAME, for restart.
start() {
  local name=$1; shift
  local ns=${IN_NETNS:-$NETNS_PATH}
  CURRENT=$name
  mkdir -p "$RUN/cmds"
  { printf 'IN_NETNS=%q\n' "$ns"; printf '%q ' "$@"; echo; } > "$RUN/cmds/$name"
  setsid nsenter --net="$ns" -- "$@" < /dev/null >> "$LOGS/$name.log" 2>&1 &
  echo "$name $!" >> "$PIDS"
}
# wait_for WHAT SECONDS CMD...: poll CMD every 0.25 s.
wait_for() {
  local what=$1 secs=$2; shift 2
  local end=$((SECONDS + secs))
  until "$@" >/dev/null 2>&1; do
    if [ $SECONDS -ge $end ]; then
      echo "ferry-e2e: $what not ready after ${secs}s" >&2
      return 1
    fi
    sleep 0.25
  done
  log "$what ready"
}

