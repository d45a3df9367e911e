# tern: top-level entry points. A thin layer over CMake, ctest and scripts/;
# the stages themselves live in scripts/test.sh.
#
#   make demo    install deps, build build/, run the 3-node demo
#   make test    install deps; clang-format check of every C file; build/ +
#                ctest, build-asan/ (ASan+UBSan) +
#                ctest, build-fuzz/ (clang libFuzzer) smoke run,
#                tests/rxe/run.sh (RDMA on soft-RoCE in a QEMU guest;
#                skipped if the guest cannot boot), jepsen/smoke.sh
#                (Jepsen-style smoke runs in network namespaces); ends
#                with "N passed, N failed"
#   make jepsen         the full Jepsen-style matrix (jepsen/matrix.sh:
#                       every workload x nemesis; JEPSEN_TIME per run,
#                       default 120 s; JEPSEN_NODES, default 5)
#   make jepsen-smoke   Jepsen-style smoke runs (network namespaces, root)
#   make test-rxe       only the soft-RoCE stage
#   make deb     Debian packages (ternd, tern-cli, libtern0, libtern-dev)
#                in build-deb/ from a Release build (scripts/deb.sh)
#   make build | asan | fuzz | clean | format | format-check | tidy
SHELL := /bin/bash
JOBS ?= 2
export JOBS

# Our C sources (never build dirs or third-party code).
C_FILES = $(shell scripts/c-files.sh)

.PHONY: all deps build test asan fuzz demo deb clean format format-check tidy jepsen jepsen-smoke test-rxe

all: build

deps:
	@scripts/install-deps.sh

build: deps
	@scripts/test.sh build

test: deps
	@scripts/test.sh format normal asan fuzz jepsen rxe

asan: deps
	@scripts/test.sh asan

fuzz: deps
	@scripts/test.sh fuzz

jepsen: deps
	@scripts/test.sh build && TERN_BUILD=$(CURDIR)/build jepsen/matrix.sh

jepsen-smoke: deps
	@scripts/test.sh jepsen

test-rxe: deps
	@scripts/test.sh rxe

demo: build
	@TERN_BIN=$(CURDIR)/build scripts/demo.sh

deb: deps
	@scripts/deb.sh

clean:
	rm -rf build build-asan build-fuzz build-deb

format:
	@command -v clang-format >/dev/null || scripts/install-deps.sh
	clang-format -i $(C_FILES)

format-check: deps
	@scripts/test.sh format

# clang-tidy (checks in .clang-tidy) over every source file of ours in
# build/'s compile database.
tidy: build
	@command -v clang-tidy >/dev/null || scripts/install-deps.sh
	@python3 -c 'import json,os; r=os.getcwd()+"/"; \
	    print("\n".join(sorted({e["file"] for e in json.load(open("build/compile_commands.json")) \
	    if e["file"].startswith(r) and not e["file"].startswith(r+"build")})))' | \
	    xargs -r -P$(JOBS) -n4 clang-tidy -p build --quiet
