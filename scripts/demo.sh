#!/usr/bin/env bash
# Installs what is missing, builds what the demo runs, and runs the main job
# (convgraph-bench) on its built-in quick suite: every CPU algorithm timed and checked on
# small layers. Options are passed to convgraph-bench (e.g. --suite standard).
#
# The demo build (build-demo/) is compiled for this CPU only (CONVGRAPH_NATIVE: one ISA
# level instead of three) and without CUDA unless a GPU is present, and builds only
# convgraph-bench, so the first result comes in minutes. scripts/test.sh builds the
# portable library and everything else in build/.
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
start=$(date +%s)
say() { echo "== demo [$(( $(date +%s) - start )) s]: $*" >&2; }

say "install phase: checking the Debian packages the build needs"
install_missing
cuda=OFF
if command -v nvidia-smi >/dev/null && timeout 10 nvidia-smi -L >/dev/null 2>&1; then cuda=AUTO; fi
say "build phase: convgraph-bench in build-demo/ (native CPU kernels, CUDA $cuda, $JOBS jobs)"
BUILD_DIR="${DEMO_BUILD_DIR:-$ROOT/build-demo}" CONVGRAPH_WITH_CUDA=$cuda BUILD_TARGETS=convgraph-bench \
  configure_and_build -DCONVGRAPH_NATIVE=ON -DCONVGRAPH_BUILD_TESTS=OFF -DCONVGRAPH_BUILD_EXAMPLES=OFF >&2 || true
bench="${DEMO_BUILD_DIR:-$ROOT/build-demo}/benchmarks/convgraph-bench"
[ -x "$bench" ] || { say "the build failed (see above)"; exit 1; }

# Timings on a busy machine mislead the meta-optimizer: wait up to 60 s until less than a
# quarter of the CPU time is busy (sampled from /proc/stat over 2 s; the load average lags
# the end of the build by a minute), and say how busy it was.
busy_percent() {
  local a b
  a=($(head -1 /proc/stat)); sleep 2; b=($(head -1 /proc/stat))
  local idle=$(( (b[4] + b[5]) - (a[4] + a[5]) )) total=0
  for i in 1 2 3 4 5 6 7 8; do total=$(( total + b[i] - a[i] )); done
  echo $(( total > 0 ? 100 * (total - idle) / total : 0 ))
}
for i in $(seq 1 20); do
  busy=$(busy_percent)
  [ "$busy" -lt 25 ] && break
  [ "$i" = 1 ] && say "the CPUs are ${busy}% busy: waiting up to 60 s for a quiet machine"
done
say "timing phase: CPUs ${busy}% busy before the run (load average $(cut -d' ' -f1 /proc/loadavg))"
exec "$bench" --suite quick "$@"
