#!/usr/bin/env bash
# Prints tern's own C sources and headers, one per line, sorted: every
# *.c/*.h below the source folders, never build dirs, fuzz corpora or
# anything not ours. The one list behind `make format`, `make test`'s
# format check and `make tidy`'s header filter.
set -euo pipefail
cd "$(dirname "$0")/.."
find include common tlog auth proto rdma raft index client cli node bench tests jepsen \
    -name '*.[ch]' -not -path '*/corpus/*' -not -path '*/build*' | LC_ALL=C sort
