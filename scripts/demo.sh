#!/usr/bin/env bash
# Installs what is missing, builds, and runs the main job (convgraph-bench) on its
# built-in quick suite: every CPU algorithm timed and checked on small layers.
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
install_missing
configure_and_build
exec "$BUILD_DIR/benchmarks/convgraph-bench" --suite quick "$@"
