#!/bin/bash
# exec.sh CMD [ARG...] — run CMD inside the e2e cluster's network namespace,
# where 127.0.0.1 is the node's loopback (API server, NodePorts, registries
# containerd pulls from), with the FERRY_E2E_* variables up.sh wrote, e.g.
#   e2e/cluster/exec.sh go test -count=1 -v ./e2e/...
set -euo pipefail
source "$(dirname "$0")/lib.sh"
[ $# -gt 0 ] || die "usage: exec.sh CMD [ARG...]"
[ -f "$ENV_FILE" ] && [ -e "$NETNS_PATH" ] || die "no cluster is up ($ENV_FILE missing): run e2e/cluster/up.sh"
set -a
source "$ENV_FILE"
set +a
exec nsenter --net="$NETNS_PATH" -- "$@"
