# ferry — build, test, bench, demo.
#
# `make demo` and `make test` are the two set-up commands of the README: each
# installs what it needs on a fresh Debian machine (apt packages, pinned peer
# tools built from tools/go.mod into .bin/) before it runs.

SHELL := /bin/bash
GO    ?= go
BIN   := $(CURDIR)/bin
TOOLS := $(CURDIR)/.bin
export PATH := $(TOOLS):$(BIN):$(PATH)
export GOFLAGS ?= -buildvcs=false

APT_PACKAGES := docker-registry skopeo zstd qemu-user-static time chromium chromium-driver git
PEER_TOOLS   := helm crane regctl oras cosign

.PHONY: all build test fuzz bench demo lint deps apt tools clean

# Each area may add its own targets in mk/<area>.mk and hook them in with
#   TEST_TARGETS  += <target>   (run by `make test` after go test)
#   BENCH_TARGETS += <target>   (run by `make bench`)
TEST_TARGETS  :=
BENCH_TARGETS :=
-include $(sort $(wildcard mk/*.mk))

all: build

REGISTRY_ARCHES := amd64 arm64

# What `ferry version` prints: GOFLAGS has -buildvcs=false, so the commit and
# the tag (empty without one: "(devel)") are passed at link time.
FERRY_VERSION ?= $(shell git describe --tags --dirty 2>/dev/null)
FERRY_COMMIT  ?= $(shell git rev-parse HEAD 2>/dev/null)
# A digest of the sources built, uncommitted changes included: the front
# binary refuses to hand commands to a ferry-full of another build.
FERRY_BUILD   ?= $(shell { git rev-parse HEAD; git status --porcelain; git diff HEAD; } 2>/dev/null | sha256sum | cut -c1-16)

## build: ferry, the front binary that starts in milliseconds (version,
## package push/pull/inspect/verify, registry login/logout) and hands every
## other command to ferry-full beside it, which has them all (static: init
## builds the agent's image from it); and what `ferry init` ships into a
## cluster in bin/: the in-cluster registry and the injector (stage 0 and 1)
## per architecture. `go build ./cmd/ferry` alone gives the full binary.
## ferry-sbom, beside them, is the helper `package create` runs for SBOMs:
## Syft, in a module of its own (sbomgen/go.mod), so that neither ferry
## binary (nor the agent's image, made from ferry-full) links it.
FERRY_VERSION_PKG := github.com/ferrypkg/ferry/cmd/ferry/internal/cli
# The same three values go into the Go build ID (cli.StampPrefix): with
# -trimpath the build information records no -ldflags, and the front reads
# ferry-full's build from the file before it runs it.
FERRY_LDFLAGS = -s -w -X $(FERRY_VERSION_PKG).version=$(FERRY_VERSION) -X $(FERRY_VERSION_PKG).commit=$(FERRY_COMMIT) -X $(FERRY_VERSION_PKG).build=$(FERRY_BUILD) -buildid=ferry:$(FERRY_VERSION):$(FERRY_COMMIT):$(FERRY_BUILD)
build: injector
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags='$(FERRY_LDFLAGS)' -o $(BIN)/ferry-full ./cmd/ferry
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags='$(FERRY_LDFLAGS)' -o $(BIN)/ferry ./cmd/ferry/front
	cd sbomgen && CGO_ENABLED=0 $(GO) build -trimpath -ldflags='-s -w' -o $(BIN)/ferry-sbom ./cmd/ferry-sbom
	@for a in $(REGISTRY_ARCHES); do \
	  CGO_ENABLED=0 GOOS=linux GOARCH=$$a $(GO) build -trimpath -ldflags='-s -w -buildid=' -o $(BIN)/ferry-registry-linux-$$a ./registry/cmd/ferry-registry || exit 1; \
	done

## deps: everything the tests need on a fresh machine (idempotent).
deps: apt tools

apt:
	@missing=""; for p in $(APT_PACKAGES); do dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	if [ -n "$$missing" ]; then \
	  echo "apt-get install$$missing"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $$missing >/dev/null; \
	fi
	@# the Debian package starts a registry on :5000; tests start their own.
	@systemctl disable --now docker-registry >/dev/null 2>&1 || service docker-registry stop >/dev/null 2>&1 || true

# MinIO, the object store of the S3 storage tests, has a module of its own
# (tools/minio/go.mod): in tools/go.mod, the other tools' newer
# dependencies (olekukonko/tablewriter v1) break its build.
tools:
	@for t in $(PEER_TOOLS); do \
	  if [ ! -x $(TOOLS)/$$t ]; then \
	    echo "building pinned peer tools (tools/go.mod)"; \
	    (cd tools && GOBIN=$(TOOLS) $(GO) install tool) || exit 1; \
	    break; \
	  fi; \
	done
	@if [ ! -x $(TOOLS)/minio ]; then \
	  echo "building MinIO (tools/minio/go.mod)"; \
	  (cd tools/minio && GOBIN=$(TOOLS) $(GO) install -trimpath -ldflags='-s -w' tool) || exit 1; \
	fi

## test: the README's test command.
# Files tests save (the browser tests' screenshots) go to out/test/_artifacts.
# -timeout 30m: cmd/ferry's tests build and run the binaries and take ~10 min on 2
# busy cores, the default 10 min limit per package.
test: deps build
	@mkdir -p out/test
	FERRY_REQUIRE_TOOLS=1 FERRY_SBOM=$(BIN)/ferry-sbom $(GO) test -count=1 -timeout 30m -artifacts -outputdir $(CURDIR)/out/test ./...
	$(MAKE) --no-print-directory fuzz FUZZTIME=1000x
	@for t in $(TEST_TARGETS); do $(MAKE) --no-print-directory $$t || exit 1; done

# A budget in executions (Nx), not in time: Go 1.26's coordinator can fail a
# time-bounded run with a bare "context deadline exceeded" as the deadline
# fires (go.dev/issue/75804, fixed in Go 1.27), and CI hit it. The targets run
# 100-1,000 executions a second here, so 1000x is ~10 s each.
FUZZTIME ?= 6000x
# Minimizing each new interesting input may take up to 60 s by default, and
# the instrumented package (cosign, helm) makes every run of it slow: a short
# fuzz run then spends all its time minimizing (5 executions instead of
# ~1,500). New inputs are kept barely minimized instead.
FUZZFLAGS ?= -fuzzminimizetime 100x
fuzz:
	$(GO) test ./artifact/definition -run '^$$' -fuzz '^FuzzParseDefinition$$' -fuzztime $(FUZZTIME) $(FUZZFLAGS)
	$(GO) test ./artifact -run '^$$' -fuzz '^FuzzReadArchive$$' -fuzztime $(FUZZTIME) $(FUZZFLAGS)
	$(GO) test ./artifact -run '^$$' -fuzz '^FuzzReadLayout$$' -fuzztime $(FUZZTIME) $(FUZZFLAGS)
	$(GO) test ./artifact/gitrepo -run '^$$' -fuzz '^FuzzTree$$' -fuzztime $(FUZZTIME) $(FUZZFLAGS)
	$(GO) test ./deploy/gitserver -run '^$$' -fuzz '^FuzzUploadPack$$' -fuzztime $(FUZZTIME) $(FUZZFLAGS)
	$(GO) test ./artifact/bom -run '^$$' -fuzz '^FuzzRead$$' -fuzztime $(FUZZTIME) $(FUZZFLAGS)
	$(GO) test ./artifact/bom -run '^$$' -fuzz '^FuzzReadIndex$$' -fuzztime $(FUZZTIME) $(FUZZFLAGS)

bench: deps build
	FERRY_BIN=$(BIN)/ferry $(GO) test ./artifact -run '^$$' -bench . -benchtime 1x -timeout 60m
	@# Every budget runs; those over budget are named at the end (exit 1).
	@failed=; for t in $(BENCH_TARGETS); do $(MAKE) --no-print-directory $$t || failed="$$failed $$t"; done; \
	  if [ -n "$$failed" ]; then echo "bench: over budget or failed:$$failed"; exit 1; fi

# The demo's cluster runs on this machine: its binaries are built for this
# architecture only (a cold cross-build of the registry and the injector
# for the other one is minutes the demo never uses).
demo:
	@$(MAKE) --no-print-directory build REGISTRY_ARCHES=$$($(GO) env GOARCH) INJECTOR_ARCHES=$$($(GO) env GOARCH)
	@bash ./hack/demo.sh

# gofmt covers every module's files; go vet ./... stops at a nested
# module's go.mod, so sbomgen is vetted on its own. No production .go file
# is longer than MAX_FILE_LINES (hack/long-files.sh).
MAX_FILE_LINES ?= 600
lint:
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt: $$out"; exit 1; fi
	@MAX_FILE_LINES=$(MAX_FILE_LINES) bash hack/long-files.sh
	@$(GO) run ./hack/layers
	$(GO) vet ./...
	cd sbomgen && $(GO) vet ./...

clean:
	rm -rf $(BIN) out

## generate: the Package and fleet APIs' deep copies and CRDs, from their Go types
## (controller-gen, pinned in tools/controller-gen/go.mod).
generate:
	@if [ ! -x $(TOOLS)/controller-gen ]; then (cd tools/controller-gen && GOBIN=$(TOOLS) $(GO) install tool) || exit 1; fi
	$(TOOLS)/controller-gen object paths=./deploy/api/... crd:crdVersions=v1 output:crd:dir=./deploy/api/v1alpha1/crd
	$(TOOLS)/controller-gen object paths=./deploy/fleet/api/... crd:crdVersions=v1 output:crd:dir=./deploy/fleet/api/v1alpha1/crd
