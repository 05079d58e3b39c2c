#!/bin/sh
# Builds Zarf v0.60.0 (the module of this folder's go.mod, with Zarf's own
# replace directives) into ${FERRY_E2E_CACHE:-~/.cache/ferry-e2e}/bin/zarf,
# once: the tests of artifact/zarf look for it there (or on PATH). Heavy
# (Helm, cosign, Syft, client-go): run alone, niced, under the heavy lock.
set -eu
DIR=$(cd "$(dirname "$0")" && pwd)
BIN=${FERRY_E2E_CACHE:-$HOME/.cache/ferry-e2e}/bin
export GOFLAGS=-buildvcs=false GOWORK=off CGO_ENABLED=0
mkdir -p "$BIN"
if [ "${FORCE:-0}" != 1 ] && [ "$BIN/zarf" -nt "$DIR/go.mod" ]; then
  echo "zarf: cached $BIN/zarf"; exit 0
fi
cd "$DIR"
flock /tmp/ferry-heavy.lock nice -n 19 go build -trimpath \
  -ldflags '-s -w -X github.com/zarf-dev/zarf/src/config.CLIVersion=v0.60.0' \
  -o "$BIN/zarf.tmp" github.com/zarf-dev/zarf
mv "$BIN/zarf.tmp" "$BIN/zarf"
echo "zarf: built $BIN/zarf"
