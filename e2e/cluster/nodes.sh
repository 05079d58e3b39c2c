#!/bin/bash
# nodes.sh — worker nodes and a workstation for the e2e cluster up.sh started.
#
#   nodes.sh add [N]          join N worker nodes (default $FERRY_E2E_WORKERS,
#                             else 2) and make the workstation namespace
#   nodes.sh stop-kubelet NODE    stop NODE's kubelet (node1, node2, …)
#   nodes.sh start-kubelet NODE   start it again
#   nodes.sh rss              print the cluster's RSS in MB (every process of it)
#   nodes.sh minio BIN BUCKET the cluster's object store: MinIO BIN (built from
#                             tools/minio) on node1's address, 10.200.0.1:9000,
#                             which every node's pods reach (the workstation does
#                             not), data in $RUN/minio, with bucket BUCKET; the
#                             root credentials from MINIO_ROOT_USER and
#                             MINIO_ROOT_PASSWORD. Prints the data folder.
#
# Node k (2, 3, …) is network namespace $FERRY_E2E_NETNS-node<k> with its own
# loopback, containerd, kubelet and kube-proxy; its eth0 (10.200.0.<k>) is a
# veth into node1's bridge node0, and its pods get 10.88.<k>.0/24, routed
# between the nodes. 127.0.0.1 on a node is that node's own: its NodePorts
# and the registry its containerd pulls from.
#
# The workstation, network namespace $FERRY_E2E_NETNS-ws (10.200.0.100, also
# on node0), reaches the API server (10.200.0.1:6443) and nothing else: its
# firewall rejects every other connection, and its loopback has no NodePort.
# e2e/cluster/exec.sh --workstation runs commands there. Everything is
# removed by down.sh.
set -euo pipefail
source "$(dirname "$0")/lib.sh"
export T0

[ "$(id -u)" = 0 ] || die "nodes.sh must run as root"
[ -f "$ENV_FILE" ] && [ -e "$NETNS_PATH" ] || die "no cluster is up: run e2e/cluster/up.sh first"

kubeconfig_workers=$RUN/kubeconfig-workers

# node_ready NAME: the API server reports NAME Ready.
node_ready() { kapi "/api/v1/nodes/$1" | grep -qF '"type":"Ready","status":"True"'; }

add() {
  local n=${1:-${FERRY_E2E_WORKERS:-2}} k first last
  first=$(( $(workers | sort -n | tail -n 1 || true) + 0 ))
  [ "$first" -ge 2 ] && first=$((first + 1)) || first=2
  last=$((first + n - 1))
  [ "$last" -le 99 ] || die "too many workers"
  sed "s#server: https://127.0.0.1:6443#server: https://$NODE_IP:6443#" "$KUBECONFIG_FILE" > "$kubeconfig_workers"
  chmod 600 "$kubeconfig_workers"
  inns sysctl -qw net.ipv4.ip_forward=1

  for k in $(seq "$first" "$last"); do
    local ns d ip
    ns=$(worker_netns "$k"); d=$(worker_dir "$k"); ip=10.200.0.$k
    echo "$k" >> "$WORKERS_FILE"     # before anything exists: down.sh finds it
    ip netns add "$ns"
    ip -n "$ns" link set lo up
    ip -n "$NETNS" link add "vnode$k" type veth peer name eth0 netns "$ns"
    ip -n "$NETNS" link set "vnode$k" master node0 up
    ip -n "$ns" addr add "$ip/24" dev eth0
    ip -n "$ns" link set eth0 up
    ip -n "$ns" route add default dev eth0   # nothing beyond the cluster answers
    nsenter --net="/var/run/netns/$ns" -- sysctl -qw net.ipv4.ip_forward=1
    for h in /sys/fs/cgroup/*/; do
      if grep -q " ${h%/} cgroup" /proc/mounts; then mkdir -p "$h$ns"; fi
    done
    node_config "$d" "node$k" "$ip" "10.88.$k.0/24" "$ns" "$kubeconfig_workers"
    IN_NETNS=/var/run/netns/$ns start "containerd-node$k" containerd --config "$d/containerd/config.toml"
    wait_for "containerd of node$k" 30 ctr --address "$d/containerd/containerd.sock" version
    CURRENT=ctr-import
    ctr --address "$d/containerd/containerd.sock" -n k8s.io images import "$IMG/tiny.tar" >> "$LOGS/ctr-import.log" 2>&1
    IN_NETNS=/var/run/netns/$ns start "kubelet-node$k" "$BIN/kubelet" --config="$d/kubelet/config.yaml" --kubeconfig="$kubeconfig_workers" \
      --root-dir="$d/kubelet/root" --cert-dir="$d/kubelet/pki" --hostname-override="node$k" --node-ip="$ip"
    IN_NETNS=/var/run/netns/$ns start "kube-proxy-node$k" "$BIN/kube-proxy" --config="$d/kube-proxy.yaml"
  done
  # Pod subnets routed between every two nodes.
  local all a b
  all="1 $(workers | tr '\n' ' ')"
  for a in $all; do
    for b in $all; do
      [ "$a" = "$b" ] && continue
      if [ "$a" = 1 ]; then
        ip -n "$NETNS" route replace "10.88.$b.0/24" via "10.200.0.$b"
      else
        ip -n "$(worker_netns "$a")" route replace "10.88.$b.0/24" via "10.200.0.$b"
      fi
    done
  done
  for k in $(seq "$first" "$last"); do
    CURRENT=kubelet-node$k
    wait_for "node node$k" 120 node_ready "node$k"
  done
  CURRENT=

  # The workstation: the API server, nothing else.
  if [ ! -e "/var/run/netns/$WS_NETNS" ]; then
    ip netns add "$WS_NETNS"
    ip -n "$WS_NETNS" link set lo up
    ip -n "$NETNS" link add vws type veth peer name eth0 netns "$WS_NETNS"
    ip -n "$NETNS" link set vws master node0 up
    ip -n "$WS_NETNS" addr add "$WS_IP/24" dev eth0
    ip -n "$WS_NETNS" link set eth0 up
    local wsx=(nsenter --net="/var/run/netns/$WS_NETNS" -- iptables -w)
    "${wsx[@]}" -A OUTPUT -o lo -j ACCEPT
    "${wsx[@]}" -A OUTPUT -m conntrack --ctstate ESTABLISHED,RELATED -j ACCEPT
    "${wsx[@]}" -A OUTPUT -p tcp -d "$NODE_IP" --dport 6443 -j ACCEPT
    "${wsx[@]}" -A OUTPUT -p tcp -j REJECT --reject-with tcp-reset
    "${wsx[@]}" -A OUTPUT -j REJECT
    cp "$kubeconfig_workers" "$WS_KUBECONFIG"
    log "workstation $WS_NETNS: $WS_IP, reaches only the API server $NODE_IP:6443"
  fi
  {
    printf 'FERRY_E2E_NODES=%q\n' "node1 $(workers | sed 's/^/node/' | tr '\n' ' ' | sed 's/ $//')"
    printf 'FERRY_E2E_WS_KUBECONFIG=%q\n' "$WS_KUBECONFIG"
  } >> "$ENV_FILE"
  log "cluster: $(( $(workers | wc -l) + 1 )) nodes Ready; RSS $(rss) MB"
}

# proc_name NODE SERVICE: the name start gave NODE's SERVICE.
proc_name() {
  case $1 in
    node1) echo "$2" ;;
    node*) echo "$2-$1" ;;
    *) die "no node $1" ;;
  esac
}

stop_kubelet() {
  local name p
  name=$(proc_name "$1" kubelet)
  p=$(awk -v n="$name" '$1 == n { print $2 }' "$PIDS" | tail -n 1)
  [ -n "$p" ] && kill "$p" 2>/dev/null || true
  for _ in $(seq 40); do kill -0 "$p" 2>/dev/null || break; sleep 0.25; done
  kill -9 "$p" 2>/dev/null || true
  log "stopped $name"
}

start_kubelet() {
  local name IN_NETNS
  name=$(proc_name "$1" kubelet)
  [ -f "$RUN/cmds/$name" ] || die "no command for $name"
  local cmdline
  IN_NETNS=$(sed -n 1p "$RUN/cmds/$name" | cut -d= -f2-)
  IN_NETNS=$(eval "echo $IN_NETNS")
  cmdline=$(sed -n 2p "$RUN/cmds/$name")
  eval "set -- $cmdline"
  start "$name" "$@"
  log "started $name"
}

# rss: the cluster's resident memory in MB, every process of it (daemons,
# shims, containers).
rss() {
  local total=0 p r
  for p in $(awk '{ print $2 }' "$PIDS") \
    $(for s in $(sockets); do ps -eo pid=,args= | grep -F -- "-address $s" | awk '{ print $1 }'; done) \
    $(for r in $(cgroup_roots); do find /sys/fs/cgroup/memory/"$r" -name cgroup.procs -exec cat {} + 2>/dev/null; done | sort -u); do
    r=$(awk '/^VmRSS:/ { print $2 }' "/proc/$p/status" 2>/dev/null || true)
    total=$((total + ${r:-0}))
  done
  echo $((total / 1024))
}

minio() {
  local bin=$1 bucket=$2 dir=$RUN/minio
  [ -n "${MINIO_ROOT_USER:-}" ] && [ -n "${MINIO_ROOT_PASSWORD:-}" ] || die "minio: set MINIO_ROOT_USER and MINIO_ROOT_PASSWORD"
  [ -x "$bin" ] || die "minio: $bin is not executable (make deps builds .bin/minio)"
  local p
  p=$(awk '$1 == "minio" { p = $2 } END { print p }' "$PIDS")
  if [ -z "$p" ] || ! kill -0 "$p" 2>/dev/null; then
    mkdir -p "$dir/data" "$dir/home"
    # Copied under $RUN: down.sh stops what runs from there.
    cp "$bin" "$dir/minio"
    HOME=$dir/home MINIO_BROWSER=off MINIO_UPDATE=off start minio "$dir/minio" server --quiet \
      --address "$NODE_IP:9000" --console-address 127.0.0.1:9001 "$dir/data"
    wait_for "MinIO" 60 inns curl -fsS "http://$NODE_IP:9000/minio/health/ready"
  fi
  local code
  code=$(inns curl -sS --aws-sigv4 "aws:amz:us-east-1:s3" --user "$MINIO_ROOT_USER:$MINIO_ROOT_PASSWORD" \
    -X PUT "http://$NODE_IP:9000/$bucket" -o /dev/null -w '%{http_code}') || die "minio: create bucket $bucket"
  # 409: the bucket is there already.
  [ "$code" = 200 ] || [ "$code" = 409 ] || die "minio: create bucket $bucket: HTTP $code"
  echo "$dir/data"
}

case ${1:-} in
  add) shift; add "$@" ;;
  minio) minio "${2:?minio binary}" "${3:?bucket}" ;;
  stop-kubelet) stop_kubelet "${2:?node}" ;;
  start-kubelet) start_kubelet "${2:?node}" ;;
  rss) rss ;;
  *) die "usage: nodes.sh add [N] | stop-kubelet NODE | start-kubelet NODE | rss" ;;
esac
