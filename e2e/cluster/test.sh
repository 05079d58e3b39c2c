#!/bin/bash
# test.sh [GO TEST ARGS...] — bring the e2e cluster up, run the e2e tests inside
# its network namespace, then join worker nodes (nodes.sh add) and run the
# multi-node tests (TestMultiNode*) from the workstation namespace, which
# reaches only the API server; always tear it down (also on failure or
# Ctrl-C). Prints how long each step took. Exit status: the tests', or 1
# when the cluster did not come up or down.sh left something behind.
# Default go test arguments: -count=1 -v ./e2e/...
# FERRY_E2E_WORKERS: worker nodes to join (default 2; 0: single node only).
# FERRY_E2E_MULTINODE_RUN: the -run pattern of the second phase
# (default ^TestMultiNode).
# FERRY_E2E_FRESH_RUNS: -run patterns, each run from the workstation on a
# cluster started anew with its workers after the multi-node phase (default
# "^TestFreshUpgrade$ ^TestFreshUpgradeS3$ ^TestFreshRestore$ ^TestFreshDiskFull$";
# empty: none).
# Tests hand files to later phases in $FERRY_E2E_CARRY (a phase-one backup
# restored into a fresh cluster).
# FERRY_E2E_CENTRE: 1 (default) also starts a second cluster's control plane,
# the fleet centre's management cluster, in a namespace of its own
# ($FERRY_E2E_NETNS-centre, state $FERRY_E2E_STATE-centre); the tests find it
# through FERRY_E2E_CENTRE_KUBECONFIG and FERRY_E2E_CENTRE_NETNS.
set -uo pipefail
source "$(dirname "$0")/lib.sh"
GO=${GO:-go}
[ $# -gt 0 ] || set -- -count=1 -v ./e2e/...

now() { date +%s.%N; }
secs() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.1f", b - a }'; }
CENTRE_STATE=$STATE-centre
CENTRE_NETNS=$NETNS-centre
centre() { FERRY_E2E_STATE=$CENTRE_STATE FERRY_E2E_NETNS=$CENTRE_NETNS "$@"; }
up_s=- test_s=- down_s=- nodes_s=- mn_s=- fresh_s=-
rc=1
finish() {
  trap - EXIT INT TERM
  local t; t=$(now)
  "$E2E_DIR/cluster/down.sh" || rc=1
  if [ -e "/var/run/netns/$CENTRE_NETNS" ] || [ -e "$CENTRE_STATE/run" ]; then
    centre "$E2E_DIR/cluster/down.sh" || rc=1
  fi
  down_s=$(secs "$t" "$(now)")
  [ -n "${test_t0:-}" ] && [ "$test_s" = - ] && test_s="$(secs "$test_t0" "$t") (interrupted)"
  echo "e2e: cluster up ${up_s}s, tests ${test_s}s, workers join ${nodes_s}s, multi-node tests ${mn_s}s, fresh clusters ${fresh_s}s, down ${down_s}s; exit $rc" >&2
  exit $rc
}
trap finish EXIT
trap 'rc=130; exit' INT TERM

# A cluster left by an interrupted run would make up.sh refuse.
if [ -e "$NETNS_PATH" ] || [ -e "$RUN" ]; then
  log "removing the cluster a previous run left"
  "$E2E_DIR/cluster/down.sh" || exit 1
fi
if [ -e "/var/run/netns/$CENTRE_NETNS" ] || [ -e "$CENTRE_STATE/run" ]; then
  log "removing the centre's cluster a previous run left"
  centre "$E2E_DIR/cluster/down.sh" || exit 1
fi

export FERRY_E2E_CARRY=$STATE/carry
rm -rf "$FERRY_E2E_CARRY" && mkdir -p "$FERRY_E2E_CARRY"

# Modules the tests need are fetched here: the netns has no network.
(cd "$REPO_DIR" && GOFLAGS="${GOFLAGS:-} -mod=readonly" "$GO" list -test -deps ./e2e/... >/dev/null) || exit 1

t=$(now)
"$E2E_DIR/cluster/up.sh" >/dev/null || exit 1
if [ "${FERRY_E2E_CENTRE:-1}" = 1 ]; then
  centre_kubeconfig=$(centre env FERRY_E2E_CONTROL_PLANE=1 "$E2E_DIR/cluster/up.sh") || exit 1
  printf 'FERRY_E2E_CENTRE_KUBECONFIG=%q\nFERRY_E2E_CENTRE_NETNS=%q\n' "$centre_kubeconfig" "$CENTRE_NETNS" >> "$ENV_FILE"
fi
up_s=$(secs "$t" "$(now)")

test_t0=$(now)
(cd "$REPO_DIR" && FERRY_E2E=1 "$E2E_DIR/cluster/exec.sh" "$GO" test "$@")
rc=$?
test_s=$(secs "$test_t0" "$(now)")

workers=${FERRY_E2E_WORKERS:-2}
[ "$workers" -gt 0 ] || exit
t=$(now)
"$E2E_DIR/cluster/nodes.sh" add "$workers" || { rc=1; exit; }
nodes_s=$(secs "$t" "$(now)")
t=$(now)
(cd "$REPO_DIR" && FERRY_E2E=1 "$E2E_DIR/cluster/exec.sh" --workstation "$GO" test -count=1 -v -timeout 20m \
  -run "${FERRY_E2E_MULTINODE_RUN:-^TestMultiNode}" ./e2e/)
mrc=$?
mn_s=$(secs "$t" "$(now)")
[ $rc = 0 ] && rc=$mrc

# Fresh clusters, one per pattern, the way a site's is on its first day.
fresh=${FERRY_E2E_FRESH_RUNS-^TestFreshUpgrade\$ ^TestFreshUpgradeS3\$ ^TestFreshRestore\$ ^TestFreshDiskFull\$}
[ -n "$fresh" ] || exit
t=$(now)
i=0
for run in $fresh; do
  i=$((i + 1))
  "$E2E_DIR/cluster/down.sh" >/dev/null || { rc=1; exit; }
  # The centre after the cluster: its down.sh, too, checks the registry's
  # hostPath storage on the host, which the cluster's down.sh removes.
  if [ $i = 1 ] && { [ -e "/var/run/netns/$CENTRE_NETNS" ] || [ -e "$CENTRE_STATE/run" ]; }; then
    centre "$E2E_DIR/cluster/down.sh" >/dev/null || { rc=1; exit; }
  fi
  rm -rf "$STATE/logs.$i" && cp -a "$LOGS" "$STATE/logs.$i"   # up.sh starts them anew
  "$E2E_DIR/cluster/up.sh" >/dev/null || { rc=1; exit; }
  "$E2E_DIR/cluster/nodes.sh" add "$workers" >/dev/null || { rc=1; exit; }
  log "fresh cluster $i: $run"
  (cd "$REPO_DIR" && FERRY_E2E=1 "$E2E_DIR/cluster/exec.sh" --workstation "$GO" test -count=1 -v -timeout 20m \
    -run "$run" ./e2e/)
  frc=$?
  [ $rc = 0 ] && rc=$frc
done
fresh_s=$(secs "$t" "$(now)")
