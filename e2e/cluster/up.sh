#!/bin/bash
# up.sh — start a single-node Kubernetes for ferry's end-to-end tests and print
# the path of its kubeconfig (the only line on stdout; progress goes to stderr).
#
# Every process runs inside the network namespace $FERRY_E2E_NETNS (default
# ferry-e2e), whose only interface besides loopback is node0, a port-less
# bridge holding the node IP, with the default route into it: nothing the
# cluster does can reach another address. Inside, 127.0.0.1 is the node's
# loopback: the API server (:6443), NodePorts, and the plain-HTTP registries
# containerd pulls from (ports 31999 and 5000-5009). Run commands there with
# e2e/cluster/exec.sh.
#
# Needs root, the packages of deps.sh and the output of build.sh. On failure
# it prints the failing component's log and tears the cluster down again
# (FERRY_E2E_KEEP=1 keeps it for inspection; down.sh removes it).
#
# FERRY_E2E_CONTROL_PLANE=1 starts only etcd and the control plane (no
# containerd, kubelet, kube-proxy or node): a management cluster, such as the
# fleet centre's, in a namespace of its own (another FERRY_E2E_STATE and
# FERRY_E2E_NETNS); it leaves the registry's hostPath storage alone.
set -euo pipefail
source "$(dirname "$0")/lib.sh"
export T0

[ "$(id -u)" = 0 ] || die "up.sh must run as root"
CONTROL_PLANE_ONLY=${FERRY_E2E_CONTROL_PLANE:-0}
for f in "$BIN/kube" "$IMG/tiny" "$IMG/tiny.tar"; do
  [ -e "$f" ] || die "$f missing: run e2e/cluster/build.sh first"
done
for c in etcd containerd containerd-shim-runc-v2 runc ctr curl openssl nsenter ip iptables; do
  command -v "$c" >/dev/null || die "$c not found: run e2e/cluster/deps.sh first"
done
[ -x /usr/lib/cni/bridge ] || die "/usr/lib/cni/bridge not found: run e2e/cluster/deps.sh first"
[ ! -e "$NETNS_PATH" ] || die "network namespace $NETNS exists: a cluster is up (or left over); run e2e/cluster/down.sh"
[ ! -e "$RUN" ] || die "$RUN exists: a cluster is up (or left over); run e2e/cluster/down.sh"

failed() {
  local rc=$?
  trap - ERR
  echo "ferry-e2e: up failed (exit $rc); logs in $LOGS" >&2
  if [ -n "${CURRENT:-}" ] && [ -f "$LOGS/$CURRENT.log" ]; then
    echo "--- last lines of $LOGS/$CURRENT.log" >&2
    tail -n 25 "$LOGS/$CURRENT.log" >&2
    echo "---" >&2
  fi
  if [ "${FERRY_E2E_KEEP:-0}" = 1 ]; then
    echo "ferry-e2e: FERRY_E2E_KEEP=1: cluster left up; e2e/cluster/down.sh removes it" >&2
  else
    "$E2E_DIR/cluster/down.sh" >&2 || true
  fi
  exit 1
}
trap failed ERR

rm -rf "$LOGS"
mkdir -p "$STATE" "$RUN" "$LOGS" "$PKI"
chmod 700 "$STATE"
: > "$PIDS"

# Kernel settings the kubelet changes for the whole host: saved once, put back
# by down.sh (a saved file left by an interrupted run already holds the values
# from before that run).
if [ ! -f "$STATE/sysctl.saved" ]; then
  for k in $KUBELET_SYSCTLS; do echo "$k=$(sysctl -n "$k")"; done > "$STATE/sysctl.saved.tmp"
  mv "$STATE/sysctl.saved.tmp" "$STATE/sysctl.saved"
fi

# ---------------------------------------------------------------- certificates
# One CA; the API server's serving certificate; one admin client certificate
# (system:masters) used by every component; the service-account signing key.
# ECDSA P-256: generating them takes milliseconds.
(
  cd "$PKI"
  cat > openssl.cnf <<'EOF'
[req]
distinguished_name = dn
[dn]
[ca]
basicConstraints = critical,CA:TRUE
keyUsage = critical,keyCertSign,cRLSign,digitalSignature
subjectKeyIdentifier = hash
EOF
  key() { openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$1.key" 2>/dev/null; }
  key ca
  openssl req -x509 -new -key ca.key -subj "/CN=ferry-e2e-ca" -days 3650 -config openssl.cnf -extensions ca -out ca.crt
  sign() { # NAME SUBJECT EXTENSIONS
    key "$1"
    openssl req -new -key "$1.key" -subj "$2" -config openssl.cnf -out "$1.csr"
    printf '%s\n' "$3" > "$1.ext"
    openssl x509 -req -in "$1.csr" -CA ca.crt -CAkey ca.key -CAcreateserial -days 3650 -extfile "$1.ext" -out "$1.crt" 2>/dev/null
  }
  sign apiserver "/CN=kube-apiserver" "basicConstraints=CA:FALSE
keyUsage=critical,digitalSignature,keyEncipherment
extendedKeyUsage=serverAuth
subjectAltName=IP:127.0.0.1,IP:$NODE_IP,IP:$SERVICE_IP,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local"
  sign admin "/O=system:masters/CN=ferry-e2e-admin" "basicConstraints=CA:FALSE
keyUsage=critical,digitalSignature,keyEncipherment
extendedKeyUsage=clientAuth"
  key sa
  openssl pkey -in sa.key -pubout -out sa.pub
  chmod 600 ./*.key
)
b64() { base64 -w0 < "$1"; }
cat > "$KUBECONFIG_FILE.tmp" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: ferry-e2e
  cluster:
    server: https://127.0.0.1:6443
    certificate-authority-data: $(b64 "$PKI/ca.crt")
users:
- name: ferry-e2e-admin
  user:
    client-certificate-data: $(b64 "$PKI/admin.crt")
    client-key-data: $(b64 "$PKI/admin.key")
contexts:
- name: ferry-e2e
  context: {cluster: ferry-e2e, user: ferry-e2e-admin}
current-context: ferry-e2e
EOF
chmod 600 "$KUBECONFIG_FILE.tmp"
mv "$KUBECONFIG_FILE.tmp" "$KUBECONFIG_FILE"
log "certificates and kubeconfig in $STATE"

# --------------------------------------------------------------------- configs
mkdir -p "$RUN/etcd"
node_config "$RUN" "$NODE_NAME" "$NODE_IP" "$NODE_POD_SUBNET" "$CGROUP_ROOT" "$KUBECONFIG_FILE"

# Host folders the runtime creates outside $RUN: down.sh removes them again
# (when empty) if they did not exist before the first up.sh.
if [ ! -f "$STATE/created" ]; then
  for d in /run/netns /run/containerd /var/lib/cni /var/log/containers; do
    [ -e "$d" ] || echo "$d"
  done > "$STATE/created"
fi

# The registry's hostPath storage: a fresh cluster starts with none.
if [ "$CONTROL_PLANE_ONLY" = 1 ]; then
  touch "$STATE/control-plane-only"
elif [ -e "$HOST_STORAGE" ]; then
  log "removing $HOST_STORAGE, registry storage an earlier cluster left"
  rm -rf --one-file-system "$HOST_STORAGE"
fi

# The kubelet wants its cgroup root to exist, in every hierarchy (cgroup v1).
for h in /sys/fs/cgroup/*/; do
  grep -q " ${h%/} cgroup" /proc/mounts && mkdir -p "$h$CGROUP_ROOT"
done

# ----------------------------------------------------------- network namespace
grep -q ' /run/netns ' /proc/mounts || touch "$STATE/netns-mount-ours"
ip netns add "$NETNS"
ip -n "$NETNS" link set lo up
ip -n "$NETNS" link add node0 type bridge
ip -n "$NETNS" addr add "$NODE_IP/24" dev node0
ip -n "$NETNS" link set node0 up
ip -n "$NETNS" route add default dev node0
log "network namespace $NETNS: node0 $NODE_IP"

# ------------------------------------------------------------------------ etcd
start etcd etcd --name node1 --data-dir "$RUN/etcd" \
  --listen-client-urls http://127.0.0.1:2379 --advertise-client-urls http://127.0.0.1:2379 \
  --listen-peer-urls http://127.0.0.1:2380 --initial-advertise-peer-urls http://127.0.0.1:2380 \
  --initial-cluster node1=http://127.0.0.1:2380
wait_for etcd 30 inns curl -sf -m 2 http://127.0.0.1:2379/health

# --------------------------------------------------------------- control plane
start kube-apiserver "$BIN/kube-apiserver" --etcd-servers=http://127.0.0.1:2379 \
  --bind-address=0.0.0.0 --secure-port=6443 --advertise-address="$NODE_IP" \
  --tls-cert-file="$PKI/apiserver.crt" --tls-private-key-file="$PKI/apiserver.key" --client-ca-file="$PKI/ca.crt" \
  --service-account-issuer=https://kubernetes.default.svc --service-account-key-file="$PKI/sa.pub" \
  --service-account-signing-key-file="$PKI/sa.key" \
  --service-cluster-ip-range="$SERVICE_CIDR" --service-node-port-range=30000-32767 \
  --authorization-mode=Node,RBAC --allow-privileged=true \
  --kubelet-client-certificate="$PKI/admin.crt" --kubelet-client-key="$PKI/admin.key" \
  --kubelet-preferred-address-types=InternalIP
wait_for kube-apiserver 90 kapi /readyz

start kube-controller-manager "$BIN/kube-controller-manager" --kubeconfig="$KUBECONFIG_FILE" \
  --authentication-kubeconfig="$KUBECONFIG_FILE" --authorization-kubeconfig="$KUBECONFIG_FILE" \
  --service-account-private-key-file="$PKI/sa.key" --root-ca-file="$PKI/ca.crt" \
  --cluster-signing-cert-file="$PKI/ca.crt" --cluster-signing-key-file="$PKI/ca.key" \
  --leader-elect=false --use-service-account-credentials=false --bind-address=127.0.0.1 \
  --node-monitor-grace-period=20s
start kube-scheduler "$BIN/kube-scheduler" --kubeconfig="$KUBECONFIG_FILE" \
  --authentication-kubeconfig="$KUBECONFIG_FILE" --authorization-kubeconfig="$KUBECONFIG_FILE" \
  --leader-elect=false --bind-address=127.0.0.1
CURRENT=kube-controller-manager
wait_for "service account default/default" 60 kapi /api/v1/namespaces/default/serviceaccounts/default

if [ "$CONTROL_PLANE_ONLY" = 1 ]; then
  CURRENT=
  {
    printf 'FERRY_E2E_KUBECONFIG=%q\n' "$KUBECONFIG_FILE"
    printf 'FERRY_E2E_STATE=%q\n' "$STATE"
    printf 'FERRY_E2E_NETNS=%q\n' "$NETNS"
  } > "$ENV_FILE"
  log "control plane up (no node)"
  echo "$KUBECONFIG_FILE"
  exit 0
fi

# ------------------------------------------------------------------ containerd
start containerd containerd --config "$RUN/containerd/config.toml"
wait_for containerd 30 ctr --address "$SOCK" version
CURRENT=ctr-import
ctr --address "$SOCK" -n k8s.io images import "$IMG/tiny.tar" > "$LOGS/ctr-import.log" 2>&1
log "imported $TINY_IMAGE"

# ------------------------------------------------------------------------ node
start kubelet "$BIN/kubelet" --config="$RUN/kubelet/config.yaml" --kubeconfig="$KUBECONFIG_FILE" \
  --root-dir="$RUN/kubelet/root" --cert-dir="$RUN/kubelet/pki" \
  --hostname-override="$NODE_NAME" --node-ip="$NODE_IP"
start kube-proxy "$BIN/kube-proxy" --config="$RUN/kube-proxy.yaml"
CURRENT=kubelet
node_ready() { kapi "/api/v1/nodes/$NODE_NAME" | grep -qF '"type":"Ready","status":"True"'; }
wait_for "node $NODE_NAME" 120 node_ready
CURRENT=

# What tests need to find the cluster; exec.sh exports it.
{
  printf 'FERRY_E2E_KUBECONFIG=%q\n' "$KUBECONFIG_FILE"
  printf 'FERRY_E2E_STATE=%q\n' "$STATE"
  printf 'FERRY_E2E_CACHE=%q\n' "$CACHE"
  printf 'FERRY_E2E_NETNS=%q\n' "$NETNS"
  printf 'FERRY_E2E_CONTAINERD=%q\n' "$SOCK"
  printf 'FERRY_E2E_IMAGE=%q\n' "$TINY_IMAGE"
  printf 'FERRY_E2E_TINY=%q\n' "$IMG/tiny"
  printf 'FERRY_E2E_REGISTRY_PORTS=%q\n' "${TEST_REGISTRY_PORTS// /,}"
} > "$ENV_FILE"
log "cluster up: node $NODE_NAME Ready"
echo "$KUBECONFIG_FILE"
