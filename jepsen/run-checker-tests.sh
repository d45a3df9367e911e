#!/bin/sh
# Runs the checker's unit tests (jepsen/checker/test_checker.py, Python 3
# stdlib unittest). Exit 0 when all pass. Meant for ctest registration:
#   add_test(NAME jepsen_checker COMMAND ${CMAKE_SOURCE_DIR}/jepsen/run-checker-tests.sh)
set -eu
cd "$(dirname "$0")/checker"
exec python3 -m unittest -v test_checker test_harness
