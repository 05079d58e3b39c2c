# Injector (issue 6): stage-0 loaders and stage-1 binaries, their size
# budgets and their benchmarks. Included by the Makefile.

INJECTOR_ARCHES     := amd64 arm64
INJECTOR_LOADER_MAX := 16384   # 16 KiB per architecture (inject/loader.MaxSize)
INJECTOR_STAGE1_MAX := 3145728 # 3 MiB per architecture (inject.MaxStage1Size)
INJECTOR_FUZZTIME   ?= 10s

.PHONY: injector injector-sizes injector-bench injector-fuzz

## injector: bin/ferry-loader-linux-<arch> (+ .lst) and bin/ferry-injector-linux-<arch>,
## where inject.LoadStage1(bin, arch) finds stage 1.
injector:
	@mkdir -p $(BIN)
	$(GO) run ./inject/loader/gen -o $(BIN)
	@for a in $(INJECTOR_ARCHES); do \
	  echo "CGO_ENABLED=0 GOOS=linux GOARCH=$$a go build -trimpath -ldflags='-s -w -buildid=' -o $(BIN)/ferry-injector-linux-$$a ./injector/cmd/ferry-injector"; \
	  CGO_ENABLED=0 GOOS=linux GOARCH=$$a $(GO) build -trimpath -ldflags='-s -w -buildid=' -o $(BIN)/ferry-injector-linux-$$a ./injector/cmd/ferry-injector || exit 1; \
	done

## injector-sizes: print stage-0 and stage-1 sizes and fail over budget.
injector-sizes: injector
	@fail=0; printf '%-8s %-8s %10s %10s\n' stage arch bytes budget; \
	for a in $(INJECTOR_ARCHES); do \
	  for s in loader:ferry-loader:$(INJECTOR_LOADER_MAX) injector:ferry-injector:$(INJECTOR_STAGE1_MAX); do \
	    n=$${s%%:*}; rest=$${s#*:}; f=$${rest%%:*}; max=$${rest#*:}; \
	    size=$$(stat -c %s $(BIN)/$$f-linux-$$a); \
	    printf '%-8s %-8s %10d %10d\n' $$n $$a $$size $$max; \
	    if [ $$size -gt $$max ]; then echo "  OVER BUDGET: $$f-linux-$$a"; fail=1; fi; \
	  done; \
	done; exit $$fail

## injector-bench: sizes, then blob-serving MB/s and 100 MiB reassemble+verify+extract.
injector-bench: injector-sizes
	$(GO) test ./injector -run '^$$' -bench 'BlobServe|Reassemble100MiB' -benchtime 5x

# FUZZFLAGS (the Makefile's): new inputs are not minimized for up to 60 s
# each; on a loaded machine that ran past -fuzztime, and the run failed
# with 'context deadline exceeded' after finding nothing.
injector-fuzz:
	$(GO) test ./injector -run '^$$' -fuzz '^FuzzDecodeJSON$$' -fuzztime $(INJECTOR_FUZZTIME) $(FUZZFLAGS)

BENCH_TARGETS += injector-bench
TEST_TARGETS  += injector-sizes injector-fuzz
