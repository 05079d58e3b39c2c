#!/bin/bash
# deps.sh — install the Debian packages the e2e cluster runs (idempotent: only
# what `dpkg -s` reports missing, one `apt-get update` first), then stop the
# services those packages start: up.sh runs its own etcd and containerd.
set -euo pipefail
source "$(dirname "$0")/lib.sh"

PACKAGES="etcd-server containerd runc containernetworking-plugins iptables conntrack socat openssl curl iproute2 util-linux"
missing=""
for p in $PACKAGES; do dpkg -s "$p" >/dev/null 2>&1 || missing="$missing $p"; done
if [ -n "$missing" ]; then
  log "apt-get install$missing"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $missing >/dev/null
  # Only right after installing: without systemd, `service etcd stop` is
  # start-stop-daemon --exec /usr/bin/etcd, which kills every etcd on the
  # machine — another e2e cluster's too (it killed one mid-run).
  for s in containerd etcd; do
    systemctl disable --now "$s" >/dev/null 2>&1 || service "$s" stop >/dev/null 2>&1 || true
  done
fi
