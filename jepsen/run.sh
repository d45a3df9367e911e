#!/bin/sh
# One Jepsen-style run of tern: see jepsen/harness.py (--help) and
# jepsen/README.md. Example: jepsen/run.sh --nodes 3 --time 60 --nemesis kill
exec python3 "$(dirname "$0")/harness.py" "$@"
