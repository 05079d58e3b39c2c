# Release archives (issue 30): `make dist` writes into $(DIST_DIR)
#   ferry_<v>_<os>_<arch>.tar.gz       per platform: ferry, ferry-full, ferry-sbom, README.md
#   ferry-cluster_<v>_linux_<arch>.tar.gz  per linux arch: what `ferry init` ships into a
#                                      cluster of that arch (beside ferry, or --bin-dir):
#                                      ferry-injector-linux-<arch>, ferry-registry-linux-<arch>,
#                                      ferry-linux-<arch> (the agent's ferry-full)
#   <archive name>.spdx.json           the SPDX SBOM of each archive (ferry-sbom)
#   checksums.txt                      sha256sum's format, over the archives and SBOMs
#   checksums.txt.sig, cosign.pub      cosign's signature over checksums.txt, and its key
# Check a download with
#   cosign verify-blob --key cosign.pub --insecure-ignore-tlog=true --signature checksums.txt.sig checksums.txt
#   sha256sum -c --ignore-missing checksums.txt
# (docs/install.md). Archives are reproducible: the same commit and Go
# toolchain give the same bytes (hack/dist). Included by the Makefile.
#
#   DIST_PLATFORMS  default linux/amd64 linux/arm64 darwin/amd64 darwin/arm64
#   DIST_VERSION    default the tag on HEAD, else its Go pseudo-version
#                   (v0.0.0-<commit time>-<12 hex>), "+dirty" with uncommitted changes
#   DIST_KEY        a cosign private key (password in COSIGN_PASSWORD); without it an
#                   ephemeral key pair signs, and only its cosign.pub is kept: a real
#                   release passes its key and publishes cosign.pub where users get it
#   DIST_EPOCH      the archives' file times: SOURCE_DATE_EPOCH, else the commit's time

DIST_DIR       ?= $(CURDIR)/out/dist
DIST_PLATFORMS ?= linux/amd64 linux/arm64 darwin/amd64 darwin/arm64
DIST_KEY       ?=
COSIGN         ?= cosign
DIST_EPOCH     ?= $(or $(SOURCE_DATE_EPOCH),$(shell git log -1 --format=%ct 2>/dev/null))
# The cluster archives: one per linux architecture among the platforms.
DIST_CLUSTER_ARCHES ?= $(patsubst linux/%,%,$(filter linux/%,$(DIST_PLATFORMS)))
DIST_STAGE      = $(DIST_DIR)/.stage

# Computed once, when first used (it runs git and hack/modproxy).
ifeq ($(origin DIST_VERSION),undefined)
DIST_VERSION = $(eval DIST_VERSION := $(shell $(GO) run ./hack/modproxy version)$(if $(shell git status --porcelain 2>/dev/null),+dirty))$(DIST_VERSION)
endif
DIST_LDFLAGS = -s -w -X $(FERRY_VERSION_PKG).version=$(DIST_VERSION) -X $(FERRY_VERSION_PKG).commit=$(FERRY_COMMIT) -X $(FERRY_VERSION_PKG).build=$(FERRY_BUILD) -buildid=ferry:$(DIST_VERSION):$(FERRY_COMMIT):$(FERRY_BUILD)

# The dist check reads JSON output with jq.
APT_PACKAGES += jq

.PHONY: dist dist-check

## dist: release archives, SBOMs, checksums and their signature in $(DIST_DIR).
# Each platform's builds run in a subshell (its GOOS/GOARCH stay there; set -e
# stops at the first failure). Every binary is static (CGO_ENABLED=0) and
# built as `make build` builds it,
# stamped with DIST_VERSION; the SBOMs are made by this machine's ferry-sbom
# (the staged one for the host's platform, else one built for it).
dist:
	@[ -n '$(DIST_VERSION)' ] && [ -n '$(DIST_EPOCH)' ] || { echo "dist: no version or time (not a git work tree?)"; exit 1; }
	rm -rf '$(DIST_DIR)' && mkdir -p '$(DIST_STAGE)'
	@set -eu; v='$(DIST_VERSION)'; \
	for p in $(DIST_PLATFORMS); do ( \
	  os=$${p%/*} arch=$${p#*/}; d='$(DIST_STAGE)'/ferry_$${v}_$${os}_$${arch}; mkdir -p "$$d"; \
	  echo "dist: $$p: ferry, ferry-full, ferry-sbom"; \
	  export GOOS=$$os GOARCH=$$arch CGO_ENABLED=0; \
	  $(GO) build -trimpath -ldflags='$(DIST_LDFLAGS)' -o "$$d/ferry-full" ./cmd/ferry; \
	  $(GO) build -trimpath -ldflags='$(DIST_LDFLAGS)' -o "$$d/ferry" ./cmd/ferry/front; \
	  (cd sbomgen && $(GO) build -trimpath -ldflags='-s -w' -o "$$d/ferry-sbom" ./cmd/ferry-sbom); \
	  cp README.md "$$d/" ); \
	done; \
	for a in $(DIST_CLUSTER_ARCHES); do ( \
	  d='$(DIST_STAGE)'/ferry-cluster_$${v}_linux_$$a; full='$(DIST_STAGE)'/ferry_$${v}_linux_$$a/ferry-full; mkdir -p "$$d"; \
	  echo "dist: linux/$$a: injector, registry, agent"; \
	  export GOOS=linux GOARCH=$$a CGO_ENABLED=0; \
	  $(GO) build -trimpath -ldflags='-s -w -buildid=' -o "$$d/ferry-injector-linux-$$a" ./injector/cmd/ferry-injector; \
	  $(GO) build -trimpath -ldflags='-s -w -buildid=' -o "$$d/ferry-registry-linux-$$a" ./registry/cmd/ferry-registry; \
	  if [ -f "$$full" ]; then cp "$$full" "$$d/ferry-linux-$$a"; \
	  else $(GO) build -trimpath -ldflags='$(DIST_LDFLAGS)' -o "$$d/ferry-linux-$$a" ./cmd/ferry; fi ); \
	done; \
	helper='$(DIST_STAGE)'/ferry_$${v}_$$($(GO) env GOOS)_$$($(GO) env GOARCH)/ferry-sbom; \
	if [ ! -x "$$helper" ]; then \
	  helper='$(DIST_STAGE)/.host/ferry-sbom'; \
	  (cd sbomgen && CGO_ENABLED=0 $(GO) build -trimpath -ldflags='-s -w' -o "$$helper" ./cmd/ferry-sbom); \
	fi; \
	echo "dist: packing, SBOMs, checksums"; \
	$(GO) run ./hack/dist -o '$(DIST_DIR)' -epoch '$(DIST_EPOCH)' -sbom "$$helper" -version "$$v" '$(DIST_STAGE)'/ferry*_*
	@set -eu; out='$(DIST_DIR)'; \
	quiet() { local log; log=$$("$$@" 2>&1) || { echo "$$log"; return 1; }; }; \
	if [ -n '$(DIST_KEY)' ]; then \
	  key='$(DIST_KEY)'; $(COSIGN) public-key --key "$$key" --outfile "$$out/cosign.pub"; \
	else \
	  echo "dist: no DIST_KEY: an ephemeral key pair signs (its cosign.pub is in $$out)"; \
	  keys=$$(mktemp -d); trap 'rm -rf "$$keys"' EXIT; export COSIGN_PASSWORD=; \
	  (cd "$$keys" && quiet $(COSIGN) generate-key-pair); key=$$keys/cosign.key; cp "$$keys/cosign.pub" "$$out/"; \
	fi; \
	quiet $(COSIGN) sign-blob --yes --tlog-upload=false --key "$$key" --output-signature "$$out/checksums.txt.sig" "$$out/checksums.txt"; \
	chmod 0644 "$$out/checksums.txt.sig"; \
	quiet $(COSIGN) verify-blob --key "$$out/cosign.pub" --insecure-ignore-tlog=true --signature "$$out/checksums.txt.sig" "$$out/checksums.txt"; \
	echo "dist: checksums.txt signed and verified (cosign verify-blob)"
	rm -rf '$(DIST_STAGE)'

## dist-check: `make dist` for this platform into a temporary folder, then
## the archives' contents, checksums, signature and SBOMs, and ferry run from
## the archives and from `go install …@<version>` (hack/dist-check.sh).
dist-check:
	@bash hack/dist-check.sh

TEST_TARGETS += dist-check
