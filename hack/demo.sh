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
