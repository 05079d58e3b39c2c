#!/usr/bin/env bash
# dist-check (`make dist-check`, run by `make test`): the release files of
# `make dist` work as docs/install.md says, for this machine's platform.
#
#  1. `make dist` for the host's platform into a temporary folder: the files
#     expected and no other, each archive's entries (root-owned; that the
#     packing is reproducible, hack/dist's tests show), `sha256sum -c`, cosign
#     verify-blob of checksums.txt (and a tampered copy refused), the SBOMs
#     (SPDX 2.3, >= 100 packages, the Go modules linked: oras-go, Helm,
#     cosign, distribution).
#  2. ferry from the archives (both extracted into one folder), run with
#     PATH=/usr/bin:/bin and an empty HOME: version (front and full of one
#     build), key generate, package create of hack/demo's definition (with
#     SBOMs: ferry-sbom beside it), package sbom, sign, verify, inspect,
#     init --help (its --bin-dir is that folder), completion.
#  3. The same with `go install …/cmd/ferry@<version>` and
#     `go install …/sbomgen/cmd/ferry-sbom@<version>` from a file-system
#     module proxy holding the committed HEAD (hack/modproxy): one full binary.
#
# Everything it makes is removed on exit, the module versions it put into
# GOMODCACHE too. Needs go, git, jq, tar, sha256sum and cosign (make deps puts
# it in .bin/).
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
export PATH="$root/.bin:$PATH"
GO=${GO:-go}
MAKE=${MAKE:-make}

tmp=$(mktemp -d "${TMPDIR:-/tmp}/ferry-dist-check-XXXXXX")
modcache=$($GO env GOMODCACHE)
modversion=
cleanup() {
	if [ -n "$modversion" ]; then
		for m in github.com/ferrypkg/ferry github.com/ferrypkg/ferry/sbomgen; do
			if [ -d "$modcache/$m@$modversion" ]; then
				chmod -R u+w "$modcache/$m@$modversion"
				rm -rf "${modcache:?}/$m@$modversion"
			fi
			dl="$modcache/cache/download/$m/@v"
			rm -f "$dl/$modversion".{info,mod,zip,ziphash,lock,partial}
			if [ -f "$dl/list" ]; then
				grep -vxF "$modversion" "$dl/list" >"$dl/list.new" || true
				if [ -s "$dl/list.new" ]; then mv "$dl/list.new" "$dl/list"; else rm -f "$dl/list.new" "$dl/list"; fi
			fi
			rmdir -p "$dl" "$modcache/$(dirname "$m")" 2>/dev/null || true
		done
	fi
	chmod -R u+w "$tmp" 2>/dev/null || true
	rm -rf "$tmp"
}
trap cleanup EXIT

step() { printf '== %s (%ds)\n' "$*" "$SECONDS"; }
fail() { echo "dist-check: FAIL: $*" >&2; exit 1; }

os=$($GO env GOOS) arch=$($GO env GOARCH)

step "make dist DIST_PLATFORMS=$os/$arch"
$MAKE --no-print-directory dist DIST_DIR="$tmp/dist" DIST_PLATFORMS="$os/$arch" | sed 's/^/  /'
out=$tmp/dist
archive=$(cd "$out" && ls ferry_*_"${os}_${arch}".tar.gz)
v=${archive#ferry_}
v=${v%_"${os}_${arch}".tar.gz}
echo "  version $v"

step "files"
want="checksums.txt checksums.txt.sig cosign.pub ferry_${v}_${os}_${arch}.spdx.json ferry_${v}_${os}_${arch}.tar.gz"
entries="README.md ferry ferry-full ferry-sbom"
if [ "$os" = linux ]; then
	want="$want ferry-cluster_${v}_linux_${arch}.spdx.json ferry-cluster_${v}_linux_${arch}.tar.gz"
fi
got=$(cd "$out" && ls -A | sort | tr '\n' ' ')
[ "$got" = "$(tr ' ' '\n' <<<"$want" | sort | tr '\n' ' ')" ] || fail "out/dist holds: $got; want: $want"
check_entries() { # archive, expected entries
	local listing names
	listing=$(tar -tzvf "$out/$1")
	names=$(tar -tzf "$out/$1" | tr '\n' ' ')
	[ "$names" = "$2 " ] || fail "$1 holds $names, want $2"
	if grep -Ev '^-(rwxr-xr-x|rw-r--r--) root/root ' <<<"$listing"; then fail "$1: an entry not owned by root or of another mode"; fi
}
check_entries "ferry_${v}_${os}_${arch}.tar.gz" "$entries"
if [ "$os" = linux ]; then
	check_entries "ferry-cluster_${v}_linux_${arch}.tar.gz" "ferry-injector-linux-$arch ferry-linux-$arch ferry-registry-linux-$arch"
fi
(cd "$out" && ls -l --block-size=K | sed 's/^/  /')

step "checksums and signature"
[ "$(wc -l <"$out/checksums.txt")" -eq "$(cd "$out" && ls ./*.tar.gz ./*.spdx.json | wc -l)" ] || fail "checksums.txt does not list every archive and SBOM"
sed 's/^/  /' "$out/checksums.txt"
(cd "$out" && sha256sum -c checksums.txt) | sed 's/^/  /'
cosign verify-blob --key "$out/cosign.pub" --insecure-ignore-tlog=true --signature "$out/checksums.txt.sig" "$out/checksums.txt" 2>&1 | grep -v '^WARNING' | sed 's/^/  /'
awk 'NR == 1 { $0 = (substr($0, 1, 1) == "0" ? "1" : "0") substr($0, 2) } 1' "$out/checksums.txt" >"$tmp/tampered.txt"
if cosign verify-blob --key "$out/cosign.pub" --insecure-ignore-tlog=true --signature "$out/checksums.txt.sig" "$tmp/tampered.txt" >"$tmp/tampered.log" 2>&1; then
	fail "cosign verify-blob accepted a tampered checksums.txt"
fi
echo "  a tampered checksums.txt: refused ($(tail -1 "$tmp/tampered.log"))"

step "SBOMs"
for sbom in "$out"/*.spdx.json; do
	jq -e '.spdxVersion == "SPDX-2.3"' "$sbom" >/dev/null || fail "$sbom is not SPDX 2.3"
	n=$(jq '.packages | length' "$sbom")
	[ "$n" -ge 100 ] || fail "$sbom lists $n packages, want >= 100"
	for m in oras.land/oras-go/v2 helm.sh/helm/v3 github.com/sigstore/cosign/v2 github.com/distribution/distribution/v3; do
		jq -e --arg m "$m" 'any(.packages[]; .name == $m)' "$sbom" >/dev/null || fail "$sbom does not name $m"
	done
	a=$(basename "$sbom" .spdx.json).tar.gz
	grep -q "$(sha256sum "$out/$a" | cut -c1-64)" "$sbom" || fail "$sbom does not name the digest of $a"
	echo "  $(basename "$sbom"): $n packages, oras-go, helm, cosign, distribution; its subject is $a"
done

# exercise BIN_DIR WANT_VERSION: the user's commands, in a bare environment.
demo=$tmp/demo
$GO run ./hack/demo "$demo"
exercise() {
	local bin=$1 want=$2 work=$tmp/work-$(basename "$1")
	mkdir -p "$work/home" "$work/tmp" "$work/keys"
	run() { env -i PATH=/usr/bin:/bin HOME="$work/home" TMPDIR="$work/tmp" COSIGN_PASSWORD=dist-check "$@"; }
	local ver
	ver=$(run "$bin/ferry" version -o json)
	jq -e --arg v "$want" '.version == $v and (.full == null or .full.version == $v)' <<<"$ver" >/dev/null ||
		fail "ferry version -o json: $ver; want version $want"
	echo "  ferry version: $(run "$bin/ferry" version | tr '\n' ' ')"
	run "$bin/ferry" key generate "$work/keys" >/dev/null
	(cd "$demo" && run "$bin/ferry" package create -f "$work/demo.tar.zst" >/dev/null)
	local sboms
	sboms=$(run "$bin/ferry" package sbom "$work/demo.tar.zst" -o json | jq length)
	[ "$sboms" -ge 2 ] || fail "package sbom lists $sboms SBOMs, want 2 (one per image)"
	run "$bin/ferry" package sign "$work/demo.tar.zst" --key "$work/keys/cosign.key" >/dev/null
	run "$bin/ferry" package verify "$work/demo.tar.zst" --key "$work/keys/cosign.pub" >/dev/null
	run "$bin/ferry" package inspect "$work/demo.tar.zst" --key "$work/keys/cosign.pub" -o json |
		jq -e '.signed and .name == "demo"' >/dev/null || fail "package inspect: not signed"
	run "$bin/ferry" init --help | grep -qF "(default \"$bin\")" || fail "init --help names another --bin-dir default than $bin"
	run "$bin/ferry" completion bash | grep -q '__start_ferry' || fail "completion bash"
	echo "  key generate, package create (with $sboms SBOMs), sbom, sign, verify, inspect, init --help, completion: ok"
}

step "ferry from the archives"
install=$tmp/install
mkdir -p "$install"
for a in "$out"/*.tar.gz; do tar -xzf "$a" -C "$install"; done
exercise "$install" "$v"

step "go install …@<version> from a module proxy holding HEAD"
modversion=$($GO run ./hack/modproxy version)
$GO run ./hack/modproxy write -o "$tmp/proxy" | sed 's/^/  /'
goinstall() {
	GOBIN="$tmp/gobin" GOPROXY="file://$tmp/proxy,$($GO env GOPROXY)" GONOSUMDB=github.com/ferrypkg/ferry \
		GOFLAGS=-trimpath CGO_ENABLED=0 $GO install "$1@$modversion"
}
goinstall github.com/ferrypkg/ferry/cmd/ferry
goinstall github.com/ferrypkg/ferry/sbomgen/cmd/ferry-sbom
[ "$(ls "$tmp/gobin" | tr '\n' ' ')" = "ferry ferry-sbom " ] || fail "go install made: $(ls "$tmp/gobin")"
exercise "$tmp/gobin" "$modversion"

step "ok"
