#!/usr/bin/env bash
# The README's demo: generate sample sources locally (no network), create a
# package from them, inspect, sign and verify it, then serve, push, pull
# (signature checked first, byte-identical result) and inspect the copy.
set -euo pipefail
cd "$(dirname "$0")/.."
ferry=${FERRY:-bin/ferry}
work=${DEMO_DIR:-out/demo}
mkdir -p out
echo "== generating demo sources in $work/src"
go run ./hack/demo "$work/src"
echo "== ferry package create $work/src -f $work/demo-1.0.0.tar.zst"
"$ferry" package create "$work/src" -f "$work/demo-1.0.0.tar.zst"
echo "== ferry package inspect $work/demo-1.0.0.tar.zst"
"$ferry" package inspect "$work/demo-1.0.0.tar.zst"

echo "== ferry key generate $work/keys (password from COSIGN_PASSWORD)"
export COSIGN_PASSWORD=${COSIGN_PASSWORD-demo}
rm -rf "$work/keys"; mkdir -p "$work/keys"
"$ferry" key generate "$work/keys"
echo "== ferry package sign $work/demo-1.0.0.tar.zst --key $work/keys/cosign.key"
"$ferry" package sign "$work/demo-1.0.0.tar.zst" --key "$work/keys/cosign.key"
echo "== ferry package verify $work/demo-1.0.0.tar.zst --key $work/keys/cosign.pub"
"$ferry" package verify "$work/demo-1.0.0.tar.zst" --key "$work/keys/cosign.pub"

port=${DEMO_PORT:-5055}
echo "== ferry registry serve --addr 127.0.0.1:$port --root $work/registry (background)"
rm -rf "$work/registry"
"$ferry" registry serve --addr "127.0.0.1:$port" --root "$work/registry" >"$work/serve.log" 2>&1 &
serve=$!
trap 'kill $serve 2>/dev/null; wait $serve 2>/dev/null' EXIT
for _ in $(seq 100); do (echo >/dev/tcp/127.0.0.1/$port) 2>/dev/null && break; sleep 0.1; done
ref=127.0.0.1:$port/pkgs/demo:1.0.0
echo "== ferry package push $work/demo-1.0.0.tar.zst $ref"
"$ferry" package push "$work/demo-1.0.0.tar.zst" "$ref"
echo "== ferry package pull $ref -f $work/pulled.tar.zst --key $work/keys/cosign.pub"
rm -f "$work/pulled.tar.zst"
"$ferry" package pull "$ref" -f "$work/pulled.tar.zst" --key "$work/keys/cosign.pub"
cmp "$work/demo-1.0.0.tar.zst" "$work/pulled.tar.zst" && echo "pulled archive is byte-identical to the created one"
echo "== ferry package inspect $ref (reads manifests only)"
"$ferry" package inspect "$ref"

# The cluster half: the demo package deployed from a workstation onto the
# project's own local two-node Kubernetes (the e2e harness, e2e/cluster:
# its kube build is cached; the first run builds it, 10–15 min on 2 cores).
# FERRY_DEMO_CLUSTER=0 skips it.
if [ "${FERRY_DEMO_CLUSTER:-1}" = 0 ]; then
  echo "== FERRY_DEMO_CLUSTER=0: the cluster half skipped"
  exit 0
fi
if [ "$(id -u)" != 0 ]; then
  echo "== the cluster half needs root (network namespaces, containerd); skipped: run as root, or FERRY_DEMO_CLUSTER=0" >&2
  exit 1
fi
kill "$serve" 2>/dev/null; wait "$serve" 2>/dev/null || true
# Its own namespace and state, apart from a `make e2e` cluster.
export FERRY_E2E_NETNS=${FERRY_DEMO_NETNS:-ferry-demo}
cache=${FERRY_E2E_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/ferry-e2e}
export FERRY_E2E_STATE=${FERRY_DEMO_STATE:-$cache/demo-state}
cluster=e2e/cluster
echo "== a local Kubernetes: Debian's etcd and containerd, kube v1.35 built from the Go module proxy (cached)"
bash $cluster/deps.sh
FERRY_E2E_FLUX=0 bash $cluster/build.sh   # the demo runs no Flux: its controllers are not built
go build -o "$work/demo-tool" ./hack/demo
[ -e "/var/run/netns/$FERRY_E2E_NETNS" ] && bash $cluster/down.sh
trap 'echo "== tearing the cluster down"; bash '$cluster'/down.sh' EXIT
bash $cluster/up.sh >/dev/null
bash $cluster/nodes.sh add 1
# On the workstation: it reaches the API server and nothing else.
ws() { bash $cluster/exec.sh --workstation bash -c 'KUBECONFIG=$FERRY_E2E_KUBECONFIG exec "$@"' ws "$@"; }
echo "== ferry init   (on the workstation, which reaches only the API server)"
ws "$ferry" init
echo "== ferry deploy $work/demo-1.0.0.tar.zst --key $work/keys/cosign.pub   (pushed through a tunnel to the registry Pod)"
ws "$ferry" deploy "$work/demo-1.0.0.tar.zst" --key "$work/keys/cosign.pub"
echo "== the Pods run the images by digest, pulled from the registry on their own node"
ws "$work/demo-tool" pods
echo "== ferry list"
ws "$ferry" list
