#!/bin/bash
# build-argocd.sh — build Argo CD (issue 55) into $FERRY_E2E_CACHE, as it is
# released but static, from the Go module proxy:
#   bin/argocd: e2e/argocd, Argo CD v3.6.1 built with Go 1.27.3 (Argo CD v3.6
#   needs it; the go command fetches that toolchain through the proxy, and
#   ferry's own module stays on its Go). One multi-call binary:
#   argocd-server, argocd-repo-server, argocd-application-controller,
#   argocd-applicationset-controller, … by the name it runs as (or
#   ARGOCD_BINARY_NAME). Its manifests (install.yaml, crds/) go to
#   argocd/manifests, and hack/git-verify-wrapper.sh (the /bin/sh script
#   its repo server runs for every git source, in its image) to argocd/.
#   bin/helm, bin/kustomize: e2e/argocd/tools, the programs its repo server
#   runs (helm 4.3.1, kustomize 5.8.2).
# Installs the Debian packages whose programs go into the images (git,
# dash, coreutils, redis-server) when missing.
# Skipped while all three are newer than e2e/argocd/{,tools/}go.{mod,sum}
# (FORCE=1 rebuilds). Run by `make e2e-argocd-build`, and by build.sh with
# FERRY_E2E_ARGOCD=1; not part of `make e2e`. Heavy: niced, under the lock
# the other heavy builds take.
set -euo pipefail
source "$(dirname "$0")/lib.sh"
export GOFLAGS=-buildvcs=false GOWORK=off CGO_ENABLED=0 GOTOOLCHAIN=go1.27.3
GO=${GO:-go}
ARGOCD=$CACHE/argocd
ARGOCD_VERSION=v3.6.1
HELM_VERSION=v4.3.1
mkdir -p "$BIN"

# The programs TestArgoCD puts in Argo CD's and Redis's images with their
# libraries (e2e/argocd_pkg_test.go) are this machine's Debian packages;
# Redis's service, started by its install, is stopped right after it.
missing=""
for p in git dash coreutils redis-server; do dpkg -s "$p" >/dev/null 2>&1 || missing="$missing $p"; done
if [ -n "$missing" ]; then
  log "apt-get install$missing"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $missing >/dev/null
  case $missing in *redis-server*)
    systemctl disable --now redis-server >/dev/null 2>&1 || service redis-server stop >/dev/null 2>&1 || true ;;
  esac
fi

# copy_sources copies what TestArgoCD takes from Argo CD's module besides
# the binary: its manifests and the script its image holds.
copy_sources() {
  local dir
  dir=$(cd "$E2E_DIR/argocd" && "$GO" list -m -f '{{.Dir}}' github.com/argoproj/argo-cd/v3)
  rm -rf "$ARGOCD" && mkdir -p "$ARGOCD/manifests"
  cp "$dir/manifests/install.yaml" "$ARGOCD/manifests/"
  cp -R "$dir/manifests/crds" "$ARGOCD/manifests/crds"
  cp "$dir/hack/git-verify-wrapper.sh" "$ARGOCD/"
  chmod -R u+w "$ARGOCD"
}

fresh() {
  local b f
  [ -f "$ARGOCD/manifests/install.yaml" ] || return 1
  for b in argocd helm kustomize; do
    [ -x "$BIN/$b" ] || return 1
    for f in go.mod go.sum tools/go.mod tools/go.sum; do
      [ "$BIN/$b" -nt "$E2E_DIR/argocd/$f" ] || return 1
    done
  done
}
if [ "${FORCE:-0}" != 1 ] && fresh; then
  [ -f "$ARGOCD/git-verify-wrapper.sh" ] || copy_sources
  log "argocd $ARGOCD_VERSION: cached $BIN/{argocd,helm,kustomize}"
  exit 0
fi

heavy() { flock /tmp/ferry-heavy.lock nice -n 19 "$@"; }
log "argocd $ARGOCD_VERSION: building $BIN/argocd, helm, kustomize with $GOTOOLCHAIN (cold: ~15 min for argocd and ~5 for helm on 2 cores shared with other builds; GOCACHE makes rebuilds fast)"
t=$SECONDS
pkg=github.com/argoproj/argo-cd/v3/common
ldflags="-s -w -X $pkg.version=${ARGOCD_VERSION#v} -X $pkg.gitTag=$ARGOCD_VERSION -X $pkg.gitTreeState=clean -X $pkg.kubectlVersion=v0.37.0"
(cd "$E2E_DIR/argocd" && heavy "$GO" build -trimpath -ldflags "$ldflags" -o "$BIN/argocd.tmp" github.com/argoproj/argo-cd/v3/cmd)
log "argocd: $((SECONDS - t))s"
(cd "$E2E_DIR/argocd/tools" &&
  heavy "$GO" build -trimpath -ldflags "-s -w -X helm.sh/helm/v4/internal/version.version=$HELM_VERSION" -o "$BIN/helm.tmp" helm.sh/helm/v4/cmd/helm &&
  log "helm: $((SECONDS - t))s" &&
  heavy "$GO" build -trimpath -ldflags '-s -w' -o "$BIN/kustomize.tmp" sigs.k8s.io/kustomize/kustomize/v5)
copy_sources
for b in helm kustomize argocd; do mv -f "$BIN/$b.tmp" "$BIN/$b"; done
log "argocd $ARGOCD_VERSION: built in $((SECONDS - t))s: $(cd "$BIN" && du -m argocd helm kustomize | awk '{printf "%s %s MB; ", $2, $1}')"
