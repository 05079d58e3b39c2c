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

# The kubelet's cgroup root: pods go below /sys/fs/cgroup/*/$CGROUP_ROOT, so
# down.sh finds every container process there and touches no other cgroup.
CGROUP_ROOT=$NETNS

NODE_NAME=node1
NODE_IP=10.200.0.1             # on node0, a port-less bridge inside the netns
POD_CIDR=10.88.0.0/16
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
