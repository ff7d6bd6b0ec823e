# ibcoll build and test entry points. `make demo` and `make test` are the
# two commands a new user needs; both install what they need first.

GO        ?= go
PKGS      ?= ./...
# Packages whose tests are provider-generic: they run again inside the
# rxe VM against the real libibverbs.
RXE_PKGS  ?= ./verbs ./dm ./tlmlx5 \
	./coll='RXE|Quick|SeedHang|Invalid|Lifecycle|Cancel|Mismatch|TeamCreation|InitInto' \
	./cmd/ibcoll-perf='MultiProcess|MPIRun|LaunchedRefusal' ./cmd/ibcoll-pingpong='ActiveDevices' 
APT_GET   := $(shell command -v apt-get 2>/dev/null)
SUDO      := $(shell [ "$$(id -u)" = 0 ] || echo sudo)
VERBS_H   := /usr/include/infiniband/verbs.h

.PHONY: all deps build test test-unit test-rxe test-hw soak demo bench bench-rxe bench-mpi bench-ucc lint generate clean

all: build

deps:
	@if [ ! -e $(VERBS_H) ]; then \
	  if [ -n "$(APT_GET)" ]; then \
	    echo "deps: installing libibverbs-dev (headers for the ibv provider)"; \
	    $(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get update -q >/dev/null && \
	    $(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends libibverbs-dev ibverbs-providers >/dev/null || exit 1; \
	  else \
	    echo "deps: $(VERBS_H) is missing and this system has no apt-get."; \
	    echo "      Install rdma-core's libibverbs development package with your package manager,"; \
	    echo "      or build the soft-only library with CGO_ENABLED=0."; \
	    exit 1; \
	  fi; \
	fi
	@$(GO) mod download

build: deps
	$(GO) build $(PKGS)

# Unit tests (race detector on), then the rxe VM suite.
test: deps lint test-unit test-rxe

test-unit:
	$(GO) test -race -count=1 -timeout 20m $(PKGS)

# Random collectives with random faults on in-process teams for $(SOAK), without the
# race detector (make test runs 60 s of it with the race detector, in test-unit). It
# prints what it ran and what it found; IBCOLL_SEED=<seed> replays a run's draws. No
# go test timeout: the soak's own watchdog reports a hang with every stack.
SOAK      ?= 10m
soak: deps
	IBCOLL_SOAK=$(SOAK) IBCOLL_SOAK_EAGER_CLOSE=1 $(GO) test -count=1 -timeout 0 -run '^TestSoak$$' -v ./coll

test-rxe: deps
	@scripts/test-rxe.sh $(RXE_PKGS)

# The whole suite on a node with real RDMA NICs (the hardware CI runner,
# .github/workflows/hw.yml): IBCOLL_REQUIRE=rdma, plus cuda where a GPU
# answers, so a test that would skip for lack of them fails instead. It first
# prints the node's GPU/NIC topology and each local rank's placement.
test-hw: deps
	$(GO) run ./cmd/ibcoll-topo
	IBCOLL_REQUIRE=rdma$$(nvidia-smi -L >/dev/null 2>&1 && echo ,cuda) \
	  $(GO) test -race -count=1 -timeout 30m $(PKGS)

demo: deps
	@scripts/demo.sh

bench: deps
	$(GO) test -run '^$$' -bench . -benchtime 2s ./verbs
	$(MAKE) bench-rxe
	$(MAKE) bench-mpi

# perftest and ibcoll's verbs layer side by side on rxe0/rxe1, in one boot of the VM.
bench-rxe: deps
	$(GO) build -o .cache/bin/ibcoll-pingpong ./cmd/ibcoll-pingpong
	test/rxevm/run scripts/rxe-baseline.sh

# ibcoll-perf against UCC's ucc_perftest: allreduce and reduce, 2 ranks, persistent,
# 4 KiB to 16 MiB, two alternated rounds (issue 14's end-to-end comparison). UCC is not
# built here: point UCC_PERFTEST at a ucc_perftest (see scripts/bench-ucc.sh);
# BENCH_DTYPE picks the element type (int8), BENCH_RUNS how many pairs of rounds (1).
bench-ucc: deps
	scripts/bench-ucc.sh

# ibcoll-perf against Open MPI (pml ucx, rc_verbs) over the same rxe0/rxe1, no
# shared memory on either side, two alternated rounds at 2 and 8 ranks, in one
# boot of the VM; it fails if MPI's bytes went any other way. BENCH_* variables
# (scripts/bench-mpi.sh) shrink or grow it.
bench-mpi: deps
	@command -v mpicc >/dev/null && [ -e /usr/include/x86_64-linux-gnu/openmpi/mpi.h -o -e /usr/lib/x86_64-linux-gnu/openmpi/include/mpi.h ] || \
	  $(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends libopenmpi-dev openmpi-bin >/dev/null
	scripts/bench-mpi.sh

lint: deps
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi
	$(GO) vet $(PKGS)
	CGO_ENABLED=0 $(GO) vet $(PKGS)
	CGO_ENABLED=0 $(GO) build $(PKGS)

clean:
	rm -rf bin .cache/rxevm-run
