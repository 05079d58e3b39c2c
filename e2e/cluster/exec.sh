#!/bin/bash
# exec.sh [--workstation] CMD [ARG...] — run CMD inside the e2e cluster's
# network namespace, where 127.0.0.1 is the node's loopback (API server,
# NodePorts, registries containerd pulls from), with the FERRY_E2E_*
# variables up.sh wrote, e.g.
#   e2e/cluster/exec.sh go test -count=1 -v ./e2e/...
# With --workstation, CMD runs in the workstation namespace nodes.sh made
# instead, which reaches the API server and nothing else, with
# FERRY_E2E_KUBECONFIG naming the API server's address there and
# FERRY_E2E_WORKSTATION=1.
set -euo pipefail
source "$(dirname "$0")/lib.sh"
where=$NETNS_PATH
if [ "${1:-}" = --workstation ]; then
  shift
  where=/var/run/netns/$WS_NETNS
  [ -e "$where" ] || die "no workstation namespace: run e2e/cluster/nodes.sh add"
fi
[ $# -gt 0 ] || die "usage: exec.sh [--workstation] CMD [ARG...]"
[ -f "$ENV_FILE" ] && [ -e "$NETNS_PATH" ] || die "no cluster is up ($ENV_FILE missing): run e2e/cluster/up.sh"
set -a
source "$ENV_FILE"
set +a
# The namespace this was called from (the host's), for tests that look at
# it: the caller's, which lives while CMD runs.
export FERRY_E2E_HOST_NET=${FERRY_E2E_HOST_NET:-/proc/$PPID/ns/net}
if [ "$where" != "$NETNS_PATH" ]; then
  export FERRY_E2E_KUBECONFIG=$WS_KUBECONFIG FERRY_E2E_WORKSTATION=1
fi
exec nsenter --net="$where" -- "$@"
