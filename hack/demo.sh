#!/usr/bin/env bash
# The README's demo: generate sample sources locally (no network), create a
# package from them and inspect it.
set -euo pipefail
cd "$(dirname "$0")/.."
ferry=${FERRY:-bin/ferry}
work=${DEMO_DIR:-out/demo}
mkdir -p out
echo "== generating demo sources in $work/src"
go run ./hack/demo "$work/src"
echo "== ferry package create $work/src -o $work/demo-1.0.0.tar.zst"
"$ferry" package create "$work/src" -o "$work/demo-1.0.0.tar.zst"
echo "== ferry package inspect $work/demo-1.0.0.tar.zst"
"$ferry" package inspect "$work/demo-1.0.0.tar.zst"
