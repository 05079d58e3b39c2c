#!/bin/bash
# build.sh — build what the e2e cluster runs, into $FERRY_E2E_CACHE:
#   bin/kube (+ links kube-apiserver, kube-controller-manager, kube-scheduler,
#   kubelet, kube-proxy) from e2e/kube, Kubernetes v1.35.4 from the Go module
#   proxy. A cold build takes 10–15 minutes on 2 cores; it is skipped while
#   bin/kube is newer than e2e/kube/{go.mod,go.sum,main.go} (FORCE=1 rebuilds).
#   bin/source-controller and bin/kustomize-controller from e2e/flux, Flux
#   v1.9.0 from the Go module proxy, static, with their config/ folders
#   (CRDs, RBAC, Deployments) from the module cache in flux/<controller>/
#   (TestFlux); skipped while both are newer than e2e/flux/go.{mod,sum},
#   and not built at all with FERRY_E2E_FLUX=0 (the demo runs no Flux).
#   With FERRY_E2E_ARGOCD=1: bin/argocd, bin/helm, bin/kustomize and Argo CD's
#   manifests (build-argocd.sh; alone: `make e2e-argocd-build`).
#   img/tiny and img/tiny.tar: the tiny program and its one-layer image, the
#   node's only image (also its sandbox image); seconds, rebuilt every time.
set -euo pipefail
source "$(dirname "$0")/lib.sh"
export GOFLAGS=-buildvcs=false GOWORK=off
GO=${GO:-go}
mkdir -p "$BIN" "$IMG"

kube_fresh() {
  [ -x "$BIN/kube" ] || return 1
  local f
  for f in go.mod go.sum main.go; do
    [ "$BIN/kube" -nt "$E2E_DIR/kube/$f" ] || return 1
  done
}

if [ "${FORCE:-0}" != 1 ] && kube_fresh; then
  log "kube v$KUBE_VERSION: cached $BIN/kube"
else
  log "kube v$KUBE_VERSION: building $BIN/kube (cold: 10–15 min on 2 cores; GOCACHE makes rebuilds fast)"
  minor=$(echo "$KUBE_VERSION" | cut -d. -f2)
  ldflags="-s -w"
  for p in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    ldflags="$ldflags -X $p.gitVersion=v$KUBE_VERSION -X $p.gitMajor=1 -X $p.gitMinor=$minor -X $p.gitTreeState=clean -X $p.buildDate=1970-01-01T00:00:00Z"
  done
  (cd "$E2E_DIR/kube" && CGO_ENABLED=0 "$GO" build -trimpath -ldflags "$ldflags" -o "$BIN/kube.tmp" .)
  mv -f "$BIN/kube.tmp" "$BIN/kube"
  log "kube v$KUBE_VERSION: built $(du -m "$BIN/kube" | cut -f1) MB"
fi
for n in kube-apiserver kube-controller-manager kube-scheduler kubelet kube-proxy; do
  ln -sfn kube "$BIN/$n"
done

# Flux's controllers (TestFlux), built as they are released but static, and
# each one's config/ beside: the tests read their CRDs, RBAC and Deployment.
FLUX=$CACHE/flux
FLUX_CONTROLLERS="source-controller kustomize-controller"
flux_fresh() {
  local c f
  for c in $FLUX_CONTROLLERS; do
    [ -x "$BIN/$c" ] && [ -d "$FLUX/$c/config" ] || return 1
    for f in go.mod go.sum; do
      [ "$BIN/$c" -nt "$E2E_DIR/flux/$f" ] || return 1
    done
  done
}
if [ "${FERRY_E2E_FLUX:-1}" = 0 ]; then
  log "flux: not built (FERRY_E2E_FLUX=0)"
elif [ "${FORCE:-0}" != 1 ] && flux_fresh; then
  log "flux: cached $BIN/{${FLUX_CONTROLLERS// /,}}"
else
  log "flux: building $FLUX_CONTROLLERS (cold: 33 min on 2 cores shared with other builds, load 8–11; GOCACHE makes rebuilds fast)"
  t=$SECONDS
  for c in $FLUX_CONTROLLERS; do
    (cd "$E2E_DIR/flux" && CGO_ENABLED=0 "$GO" build -trimpath -ldflags '-s -w' -o "$BIN/$c.tmp" "github.com/fluxcd/$c")
    dir=$(cd "$E2E_DIR/flux" && "$GO" list -m -f '{{.Dir}}' "github.com/fluxcd/$c")
    rm -rf "$FLUX/$c" && mkdir -p "$FLUX/$c"
    cp -R "$dir/config" "$FLUX/$c/config" && chmod -R u+w "$FLUX/$c"
    mv -f "$BIN/$c.tmp" "$BIN/$c"
  done
  log "flux: built in $((SECONDS - t))s: $(cd "$BIN" && du -m $FLUX_CONTROLLERS | awk '{printf "%s %s MB; ", $2, $1}')"
fi

# The previous release (e2e/previous-release), for the upgrade test: its
# sources from this repository's history, built as its Makefile builds them
# (amd64 only), into $PREV/<commit>/bin; kept while the commit is the same.
PREV=$CACHE/previous
prev=$(grep -v '^#' "$E2E_DIR/previous-release" | head -n 1)
if [ "${FERRY_E2E_PREVIOUS:-1}" = 0 ]; then
  log "previous release: not built (FERRY_E2E_PREVIOUS=0)"
elif [ -x "$PREV/$prev/bin/ferry-full" ] && [ -x "$PREV/$prev/bin/ferry-registry-linux-amd64" ]; then
  log "previous release ${prev:0:12}: cached $PREV/$prev/bin"
else
  git -C "$REPO_DIR" cat-file -e "$prev^{commit}" 2>/dev/null ||
    git -C "$REPO_DIR" fetch -q --unshallow 2>/dev/null || true
  git -C "$REPO_DIR" cat-file -e "$prev^{commit}" 2>/dev/null ||
    die "previous release $prev is not in this clone's history (a shallow clone? git fetch --unshallow)"
  log "previous release ${prev:0:12}: building into $PREV/$prev/bin"
  t=$SECONDS
  rm -rf "$PREV/$prev.tmp" && mkdir -p "$PREV/$prev.tmp/src"
  git -C "$REPO_DIR" archive "$prev" | tar -x -C "$PREV/$prev.tmp/src"
  (cd "$PREV/$prev.tmp/src" && GOFLAGS=-buildvcs=false make -s build BIN="$PREV/$prev.tmp/bin" \
    REGISTRY_ARCHES=amd64 INJECTOR_ARCHES=amd64 FERRY_VERSION=previous FERRY_COMMIT="$prev" FERRY_BUILD="${prev:0:16}") >/dev/null
  rm -rf "$PREV/$prev" && mkdir -p "$PREV/$prev"
  mv "$PREV/$prev.tmp/bin" "$PREV/$prev/bin" && rm -rf "$PREV/$prev.tmp"
  log "previous release ${prev:0:12}: built in $((SECONDS - t))s"
fi

# Argo CD (issue 55): opt-in, not part of `make e2e` yet (build-argocd.sh).
if [ "${FERRY_E2E_ARGOCD:-0}" = 1 ]; then
  GO=$GO bash "$E2E_DIR/cluster/build-argocd.sh"
fi

# The tiny program, static and reproducible, and its image for `ctr import`.
ref=$(cd "$REPO_DIR" &&
  CGO_ENABLED=0 "$GO" build -trimpath -ldflags '-s -w -buildid=' -o "$IMG/tiny" ./e2e/internal/tiny &&
  "$GO" run ./e2e/cmd/mkimg -bin "$IMG/tiny" -name "$TINY_IMAGE" -cmd pause -o "$IMG/tiny.tar")
log "image $ref: $IMG/tiny.tar"
