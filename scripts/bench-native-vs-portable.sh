#!/usr/bin/env bash
# Usage: scripts/bench-native-vs-portable.sh [ROUNDS] [convgraph-bench options...]
#
# The portable default build (build/: x86-64-v2 with run-time kernel levels) against a
# -DCONVGRAPH_NATIVE=ON build (build-native/: everything compiled for this CPU), on the
# standard suite, interleaved in one run (scripts/bench-compare.sh). The last line is the
# geomean of portable/native times (1.00 = as fast; the target is at most 1.05).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
source "$here/common.sh"
install_missing python3
BUILD_TARGETS=convgraph-bench configure_and_build
BUILD_DIR="$ROOT/build-native" BUILD_TARGETS=convgraph-bench CONVGRAPH_WITH_CUDA=OFF \
  configure_and_build -DCONVGRAPH_NATIVE=ON -DCONVGRAPH_BUILD_TESTS=OFF -DCONVGRAPH_BUILD_EXAMPLES=OFF
exec "$here/bench-compare.sh" portable "$ROOT/build" native "$ROOT/build-native" "$@"
