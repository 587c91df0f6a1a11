#!/usr/bin/env bash
# Installs what is missing, builds (incrementally) and runs the tests with ctest.
#
#   scripts/test.sh [MODE] [ctest arguments...]
#     (no mode)   the normal build in build/ (BUILD_DIR overrides), every test
#     --sanitize  AddressSanitizer + UndefinedBehaviorSanitizer build (clang) in build-asan/,
#                 every test
#     --tsan      ThreadSanitizer build in build-tsan/: the thread pool, runtime, optimizer,
#                 meta-optimizer and tuning-cache tests
#     --ci        what CI runs (.ci/run): the normal suite, the --sanitize suite, and
#                 scripts/fuzz.sh for CI_FUZZ_SECONDS (default 10) per target
# GPU tests skip themselves where no GPU is present.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
mode=normal
case "${1:-}" in
  --sanitize) mode=asan; shift ;;
  --tsan) mode=tsan; shift ;;
  --ci) mode=ci; shift ;;
esac

if [ "$mode" = ci ]; then
  # The normal suite, then the ASan+UBSan suite, then every fuzz target briefly in the same
  # sanitized build. (TSan is left to `--tsan` by hand: a third full build does not fit
  # CI's 30-minute budget on 2 cores.)
  start=$(date +%s)
  "$here/test.sh" "$@"
  echo "== CI: normal suite passed after $(( $(date +%s) - start )) s"
  "$here/test.sh" --sanitize "$@"
  echo "== CI: ASan+UBSan suite passed after $(( $(date +%s) - start )) s"
  "$here/fuzz.sh" "${CI_FUZZ_SECONDS:-10}"
  echo "== CI: every suite passed in $(( $(date +%s) - start )) s"
  exit 0
fi

source "$here/common.sh"
install_missing
case "$mode" in
  normal)
    configure_and_build
    cd "$BUILD_DIR"
    ctest --output-on-failure -j"$JOBS" "$@" ;;
  asan)
    # CUDA off: the CUDA runtime and ASan do not mix without a GPU's driver settings; the
    # GPU-free CUDA tests are built in every configuration anyway.
    build_sanitized
    cd "$SANITIZE_BUILD_DIR"
    ASAN_OPTIONS=detect_leaks=1:abort_on_error=0 UBSAN_OPTIONS=print_stacktrace=1 \
      ctest --output-on-failure -j"$JOBS" -LE bench "$@" ;;
  tsan)
    tsan_dir="${TSAN_BUILD_DIR:-$ROOT/build-tsan}"
    BUILD_DIR="$tsan_dir" CONVGRAPH_WITH_CUDA=OFF BUILD_TARGETS="convgraph_test_runtime convgraph_test_optimizer" \
      configure_and_build -DCONVGRAPH_TSAN=ON -DCONVGRAPH_BUILD_EXAMPLES=OFF -DCONVGRAPH_BUILD_BENCHMARKS=OFF
    cd "$tsan_dir"
    TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1" \
      ctest --output-on-failure -j"$JOBS" -R "^(runtime|optimizer):" "$@" ;;
esac
