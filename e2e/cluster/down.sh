#!/bin/bash
# down.sh — stop the e2e cluster and leave nothing behind: no process, network
# namespace, mount, cgroup or runtime file of it, and the kernel settings the
# kubelet changed put back. Safe to run twice, or with no cluster at all.
# Keeps $FERRY_E2E_STATE/logs for a post-mortem and the build cache.
# Exits non-zero when something could not be removed, naming it.
set -uo pipefail
source "$(dirname "$0")/lib.sh"

[ "$(id -u)" = 0 ] || die "down.sh must run as root"

# ours PID: the process is one of ours — kube, etcd, containerd or a shim
# whose command line names our state folder (every one does: its runtime
# folder, certificates or kubeconfig) — so a PID reused since up.sh, or
# anything else, is never signalled. Not the binaries' folder: another
# cluster (another FERRY_E2E_STATE and FERRY_E2E_NETNS) runs the same cached
# kube binary, and a down.sh here killed its API server and kubelets.
ours() {
  case "$(readlink "/proc/$1/exe" 2>/dev/null)" in
    # "(deleted)": the binary was rebuilt while this cluster ran.
    "$BIN/kube" | "$BIN/kube (deleted)" | */etcd | */containerd | */containerd-shim-runc-v2 | "$RUN/minio/minio") ;;
    *) return 1 ;;
  esac
  tr '\0' ' ' < "/proc/$1/cmdline" 2>/dev/null | grep -qF -e "$STATE/"
}
# all_ours: every process of ours, whether or not $PIDS names it.
all_ours() {
  local p
  for p in $(ps -eo pid=,args= | grep -F -e "$STATE/" | awk '{ print $1 }'); do
    ours "$p" && echo "$p"
  done
}
pid_of() { [ -f "$PIDS" ] && awk -v n="$1" '$1 == n { p = $2 } END { print p }' "$PIDS"; }
# stop NAME...: SIGTERM, up to 10 s, then SIGKILL.
stop() {
  local n p live=()
  for n in "$@"; do
    p=$(pid_of "$n")
    [ -n "$p" ] && ours "$p" && kill "$p" 2>/dev/null && live+=("$p")
  done
  [ ${#live[@]} -gt 0 ] || return 0
  for _ in $(seq 40); do
    for i in "${!live[@]}"; do kill -0 "${live[$i]}" 2>/dev/null || unset "live[$i]"; done
    [ ${#live[@]} -gt 0 ] || return 0
    sleep 0.25
  done
  for p in "${live[@]}"; do ours "$p" && kill -9 "$p" 2>/dev/null && log "$* did not stop in 10 s: killed $p"; done
  sleep 0.5
}
alive() { local p; p=$(pid_of "$1"); [ -n "$p" ] && ours "$p"; }
# myctr SOCKET ARGS...: ctr against one node's containerd.
myctr() { local sock=$1; shift; timeout 10 ctr --address "$sock" -n k8s.io "$@"; }
# Worker node names and all containerd names, for stop.
worker_procs() { local k; for k in $(workers); do echo "$1-node$k"; done; }
# kubepods_pids: every process below the kubelet's cgroup root (containers).
kubepods_pids() { local r; for r in $(cgroup_roots); do find /sys/fs/cgroup/*/"$r" -name cgroup.procs -exec cat {} + 2>/dev/null; done | sort -un; }
# shim_pids: containerd shims of our containerd (their -address is our socket).
shim_pids() {
  local p
  local s
  for p in $(for s in $(sockets); do ps -eo pid=,args= | grep -F -- "-address $s" | awk '{ print $1 }'; done); do
    case "$(readlink "/proc/$p/exe" 2>/dev/null)" in */containerd-shim-runc-v2) echo "$p" ;; esac
  done
}

# Pod network namespaces (cni-*) made by our containerd, known by the inode of
# their containers' network namespace; found first, while containers run.
pod_netns=()
declare -A inode=()
for p in $(kubepods_pids); do
  i=$(stat -L -c %i "/proc/$p/ns/net" 2>/dev/null) && inode[$i]=1
done
for f in /run/netns/cni-*; do
  [ -e "$f" ] || continue
  i=$(stat -L -c %i "$f" 2>/dev/null) && [ -n "${inode[$i]:-}" ] && pod_netns+=("${f##*/}")
done
# Sandbox IDs, for the CNI result cache and shim sockets left by a hard stop.
sandbox_ids=$(for p in $(shim_pids); do tr '\0' '\n' < "/proc/$p/cmdline" | awk 'prev == "-id" { print } { prev = $0 }'; done | sort -u)

if [ -s "$PIDS" ]; then
  rss=0; hwm=0
  for p in $(awk '{ print $2 }' "$PIDS") $(shim_pids) $(kubepods_pids); do
    [ -r "/proc/$p/status" ] || continue
    r=$(awk '/^VmRSS:/ { print $2 }' "/proc/$p/status" 2>/dev/null); rss=$((rss + ${r:-0}))
    h=$(awk '/^VmHWM:/ { print $2 }' "/proc/$p/status" 2>/dev/null); hwm=$((hwm + ${h:-0}))
  done
  [ $rss -gt 0 ] && log "memory: cluster RSS $((rss / 1024)) MB now, sum of per-process peaks $((hwm / 1024)) MB"
fi

# 1. No controller may recreate pods while the node drains.
stop kube-controller-manager kube-scheduler

# 2. Let the kubelet remove every pod the real way (containers stopped, CNI
#    DEL, pod network namespace removed), for at most 30 s.
if alive kube-apiserver && alive kubelet && alive containerd; then
  for ns in $(kapi /api/v1/namespaces | grep -o '"kubernetes.io/metadata.name":"[^"]*"' | cut -d'"' -f4); do
    kapi "/api/v1/namespaces/$ns/pods?gracePeriodSeconds=0" -X DELETE -o /dev/null
  done
  for _ in $(seq 120); do
    left=$(for s in $(sockets); do myctr "$s" tasks ls -q 2>/dev/null; done)
    for n in "${pod_netns[@]}"; do [ -e "/run/netns/$n" ] && left="$left $n"; done
    [ -z "${left// /}" ] && break
    sleep 0.25
  done
fi

# 3. Node, then what is left in containerd, then the control plane.
stop kubelet kube-proxy $(worker_procs kubelet) $(worker_procs kube-proxy)
for s in $(sockets); do
  [ -S "$s" ] || continue
  for id in $(myctr "$s" tasks ls -q 2>/dev/null); do myctr "$s" tasks delete --force "$id" >/dev/null 2>&1; done
done
stop containerd $(worker_procs containerd) kube-apiserver
stop etcd

# 4. Whatever survived (or was never in $PIDS): container processes, our
#    shims, our daemons.
for _ in 1 2 3; do
  pids="$(kubepods_pids) $(all_ours)"
  [ -z "${pids// /}" ] && break
  kill -9 $pids 2>/dev/null
  sleep 0.5
done

# 5. Mounts under our runtime folder and of our pod network namespaces,
#    deepest first; then the namespaces.
unmount_ours() {
  local m
  awk '{ print $2 }' /proc/mounts | while read -r m; do
    m=$(printf '%b' "$m")
    case "$m" in "$RUN"/*) echo "$m" ;; esac
    for n in "${pod_netns[@]}"; do [ "$m" = "/run/netns/$n" ] && echo "$m"; done
  done | sort -r | while read -r m; do umount "$m" 2>/dev/null || umount -l "$m" 2>/dev/null; done
}
unmount_ours; unmount_ours
for n in "${pod_netns[@]}"; do
  [ -e "/run/netns/$n" ] && { ip netns delete "$n" 2>/dev/null || rm -f "/run/netns/$n"; }
done
for k in $(workers); do
  n=$(worker_netns "$k")
  [ -e "/var/run/netns/$n" ] && ip netns delete "$n"
done
[ -e "/var/run/netns/$WS_NETNS" ] && ip netns delete "$WS_NETNS"
[ -e "$NETNS_PATH" ] && ip netns delete "$NETNS"
# `ip netns add` made /run/netns a mount point; undone when up.sh saw none.
if [ -f "$STATE/netns-mount-ours" ] && [ -z "$(ls -A /run/netns 2>/dev/null)" ]; then
  grep -q ' /run/netns ' /proc/mounts && umount /run/netns 2>/dev/null
  rm -f "$STATE/netns-mount-ours"
fi

# 6. The kubelet's cgroups, in every hierarchy, deepest first.
for _ in 1 2 3 4 5; do
  left=0
  for h in $(for r in $(cgroup_roots); do echo /sys/fs/cgroup/*/"$r"; done); do
    [ -d "$h" ] || continue
    find "$h" -depth -type d -exec rmdir {} + 2>/dev/null
    [ -d "$h" ] && left=1
  done
  [ $left = 0 ] && break
  sleep 0.5
done

# 7. Kernel settings, and files the runtime keeps outside $RUN.
if [ -f "$STATE/sysctl.saved" ]; then
  while IFS== read -r k v; do sysctl -q -w "$k=$v" >/dev/null; done < "$STATE/sysctl.saved"
  rm -f "$STATE/sysctl.saved"
fi
for id in $sandbox_ids; do
  rm -f /var/lib/cni/results/ferry-e2e-"$id"-* /var/lib/cni/results/cni-loopback-"$id"-*
  for s in $(sockets); do
    rm -f "/run/containerd/s/$(printf '%s' "$s/k8s.io/$id" | sha256sum | cut -d' ' -f1)"
  done
done
[ -d /var/log/containers ] && find /var/log/containers -maxdepth 1 -type l -lname "$RUN/*" -delete
# The registry's hostPath storage, and /var/lib/ferry when that leaves it empty.
if [ -f "$STATE/control-plane-only" ]; then
  rm -f "$STATE/control-plane-only" # a management cluster: the storage is another cluster's
else
  rm -rf --one-file-system "$HOST_STORAGE"
  rmdir "$(dirname "$HOST_STORAGE")" 2>/dev/null
fi
# Folders that did not exist before up.sh, if they are empty now.
if [ -f "$STATE/created" ]; then
  while read -r d; do
    [ -d "$d" ] && find "$d" -depth -type d -empty -delete 2>/dev/null
  done < "$STATE/created"
  rm -f "$STATE/created"
fi

# 8. The runtime folder, once nothing is mounted below it.
if grep -qF " $RUN/" /proc/mounts; then
  echo "ferry-e2e: still mounted under $RUN, not removing it" >&2
else
  rm -rf --one-file-system "$RUN"
fi
rm -f "$PIDS" "$ENV_FILE" "$KUBECONFIG_FILE" "$WS_KUBECONFIG"

# 9. Check.
problems=()
for p in $(all_ours); do problems+=("process $p"); done
for p in $(kubepods_pids); do problems+=("container process $p"); done
[ -e "$NETNS_PATH" ] && problems+=("network namespace $NETNS")
for n in "${pod_netns[@]}"; do [ -e "/run/netns/$n" ] && problems+=("network namespace $n"); done
grep -qF " $RUN/" /proc/mounts && problems+=("mounts under $RUN")
for h in $(for r in $(cgroup_roots); do echo /sys/fs/cgroup/*/"$r"; done); do [ -d "$h" ] && problems+=("cgroup $h"); done
for k in $(workers); do [ -e "/var/run/netns/$(worker_netns "$k")" ] && problems+=("network namespace $(worker_netns "$k")"); done
[ -e "/var/run/netns/$WS_NETNS" ] && problems+=("network namespace $WS_NETNS")
[ -e "$RUN" ] && problems+=("folder $RUN")
[ -e "$HOST_STORAGE" ] && problems+=("registry storage $HOST_STORAGE")
[ ${#problems[@]} -eq 0 ] && rm -f "$WORKERS_FILE"
if [ ${#problems[@]} -gt 0 ]; then
  echo "ferry-e2e: down left behind: ${problems[*]}" >&2
  exit 1
fi
log "cluster down: no process, network namespace, mount or cgroup left"
