#!/usr/bin/env bash
# The anchor benchmark: convgraph's chosen convolution algorithm against oneDNN
# (convolution_auto, fp32, NCHW in and out) on the standard layer set, forward, grad inputs
# and grad weights, 2 threads, interleaved in one process. Installs libdnnl-dev when it is
# missing, builds convgraph-anchors in the normal build dir ($BUILD_DIR), and writes
# benchmarks/RESULTS-latest.txt (and .json). Extra arguments go to convgraph-anchors,
# e.g. --only resnet_3x3_28 --directions fwd. REPEATS=N sets the interleaved runs (5).
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
install_missing libdnnl-dev

# Re-configure an existing build: it finds oneDNN if it was installed just now.
[ -f "$BUILD_DIR/CMakeCache.txt" ] && cmake "$BUILD_DIR" >/dev/null
BUILD_TARGETS=convgraph-anchors configure_and_build
exe="$BUILD_DIR/benchmarks/convgraph-anchors"
[ -x "$exe" ] || { echo "convgraph-anchors was not built (is libdnnl-dev installed?)" >&2; exit 1; }

out="$ROOT/benchmarks/RESULTS-latest.txt"
json="$ROOT/benchmarks/RESULTS-latest.json"
cmd=("$exe" --threads 2 --repeats "${REPEATS:-5}" --json "$json" "$@")
{
  echo "# convgraph anchor benchmark (scripts/bench-anchors.sh)"
  echo "# date:    $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  echo "# machine: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//'), $(nproc) CPUs, $(uname -r)"
  echo "# commit:  $(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo unknown)$(git -C "$ROOT" diff --quiet 2>/dev/null || echo ' (+ local changes)')"
  echo "# load:    $(cut -d' ' -f1-3 /proc/loadavg) (1/5/15 min; numbers are only trustworthy on an idle machine)"
  echo "# OpenMP:  OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-passive, the convgraph-anchors default: spinning barriers collapse on these VMs}"
  echo "# command: ${cmd[*]}"
  echo
} >"$out"
# OpenMP reads its thread count at start-up; set it for oneDNN as --threads does.
OMP_NUM_THREADS=2 CONVGRAPH_THREADS=2 "${cmd[@]}" | tee -a "$out"
echo "wrote $out and $json" >&2
