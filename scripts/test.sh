#!/usr/bin/env bash
# Installs what is missing, builds (incrementally), and runs every test with ctest.
# GPU tests skip themselves where no GPU is present.
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
install_missing
configure_and_build
cd "$BUILD_DIR"
ctest --output-on-failure -j"$JOBS" "$@"
