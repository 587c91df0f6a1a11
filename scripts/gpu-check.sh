#!/usr/bin/env bash
# GPU check, for a machine with an NVIDIA GPU (sized for an H200, about 8 minutes):
#   1. configure with CONVGRAPH_WITH_CUDA=ON into build-gpu and build the CUDA test
#      executable (and convgraph-bench when the tree has it),
#   2. run every CUDA test (tests/cuda, including the "[cuda]" GPU sweeps) - on a GPU
#      machine a "SKIPPED: no GPU" counts as a failure,
#   3. run convgraph-bench --flags device=cuda --json OUTDIR/bench.json when it exists,
#   4. run benchmarks/torch_anchor.py (PyTorch + cuDNN autotuning on the standard layers)
#      when torch imports, writing OUTDIR/torch_anchor.json.
# Everything is logged under OUTDIR; OUTDIR/summary.txt has one line per step.
# Exit status: 0 when configure, build and the tests passed (benchmarks are reported but
# do not fail the check), 1 otherwise, 2 bad usage.
#
# Knobs (environment): BUILD_DIR (default <repo>/build-gpu), JOBS (default nproc),
# CONVGRAPH_CUDA_SWEEP_STRIDE (GPU sweep sampling, default 4), BUDGET_S (default 470).
set -uo pipefail

if [ $# -ne 1 ]; then
  echo "usage: scripts/gpu-check.sh OUTDIR" >&2
  exit 2
fi
mkdir -p "$1" || exit 2
OUT="$(cd "$1" && pwd)"
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD="${BUILD_DIR:-$ROOT/build-gpu}"
JOBS="${JOBS:-$(nproc)}"
BUDGET_S="${BUDGET_S:-470}"
export CONVGRAPH_CUDA_SWEEP_STRIDE="${CONVGRAPH_CUDA_SWEEP_STRIDE:-4}"
: > "$OUT/summary.txt"
status=0

note() { echo "== $*" | tee -a "$OUT/summary.txt"; }
# Seconds left of the budget, at least 10.
left() {
  local l=$((BUDGET_S - SECONDS))
  [ "$l" -lt 10 ] && l=10
  echo "$l"
}
# step NAME MAX_SECONDS LOG cmd...: runs cmd under a timeout (the smaller of MAX_SECONDS
# and what is left of the budget), logs to LOG, notes the outcome; returns cmd's status.
step() {
  local name="$1" max="$2" log="$3"
  shift 3
  local t
  t="$(left)"
  [ "$max" -lt "$t" ] && t="$max"
  local start=$SECONDS
  timeout --kill-after=10 "$t" "$@" >"$log" 2>&1
  local rc=$?
  local took=$((SECONDS - start))
  if [ $rc -eq 0 ]; then
    note "$name: ok (${took}s)"
  elif [ $rc -eq 124 ] || [ $rc -eq 137 ]; then
    note "$name: TIMED OUT after ${t}s (see $(basename "$log"))"
  else
    note "$name: FAILED, exit $rc (${took}s; see $(basename "$log"))"
  fi
  return $rc
}

note "gpu-check $(date -u +%Y-%m-%dT%H:%M:%SZ) on $(hostname), repo $ROOT, build $BUILD"
{ nvidia-smi || echo "nvidia-smi failed"; } >"$OUT/nvidia-smi.txt" 2>&1
{ nvcc --version; cmake --version; } >"$OUT/tools.txt" 2>&1

generator=()
command -v ninja >/dev/null && generator=(-G Ninja)
if ! step configure 150 "$OUT/configure.log" \
    cmake -S "$ROOT" -B "$BUILD" "${generator[@]}" -DCMAKE_BUILD_TYPE=Release -DCONVGRAPH_WITH_CUDA=ON \
    -DCONVGRAPH_BUILD_TESTS=ON -DCONVGRAPH_BUILD_BENCHMARKS=ON -DCONVGRAPH_BUILD_EXAMPLES=OFF; then
  tail -n 30 "$OUT/configure.log" >&2
  exit 1
fi

targets=(convgraph_test_cuda)
have_bench=0
if cmake --build "$BUILD" --target help 2>/dev/null | grep -q 'convgraph-bench'; then
  targets+=(convgraph-bench)
  have_bench=1
fi
if ! step "build (${targets[*]})" 330 "$OUT/build.log" cmake --build "$BUILD" --parallel "$JOBS" --target "${targets[@]}"; then
  grep -m 20 -E 'error|Error' "$OUT/build.log" >&2
  exit 1
fi

# 2. The CUDA tests, in one process (each cuDNN/cuFFT set-up happens once).
test_exe="$BUILD/tests/convgraph_test_cuda"
if step "tests (tests/cuda, sweep stride $CONVGRAPH_CUDA_SWEEP_STRIDE)" 240 "$OUT/tests.log" \
    "$test_exe" --durations yes --order decl; then :; else status=1; fi
if grep -q 'SKIPPED: no GPU' "$OUT/tests.log"; then
  note "tests: GPU cases SKIPPED:$(grep -m1 -A1 'SKIPPED: no GPU' "$OUT/tests.log" | tr -s ' \n' ' ' | sed 's/^ *SKIPPED://')"
  status=1
fi
grep -E '^(All tests passed|test cases:)' "$OUT/tests.log" | tee -a "$OUT/summary.txt"
grep -A 40 'CUDA conv sweep:' "$OUT/tests.log" | grep -E '^(CUDA|  cuda)' >"$OUT/sweep-stats.txt"

# 3. convgraph-bench on the GPU (reported, never fails the check).
if [ "$have_bench" = 1 ]; then
  bench="$(find "$BUILD" -maxdepth 3 -type f -name convgraph-bench -perm -u+x | head -n 1)"
  step "convgraph-bench device=cuda" 120 "$OUT/bench.log" \
    "$bench" --flags device=cuda --json "$OUT/bench.json" || true
else
  note "convgraph-bench: not in this tree, skipped"
fi

# 4. The PyTorch anchor (reported, never fails the check).
if python3 -c 'import torch' >/dev/null 2>&1; then
  step "torch anchor" 120 "$OUT/torch_anchor.log" \
    python3 "$ROOT/benchmarks/torch_anchor.py" --json "$OUT/torch_anchor.json" || true
else
  note "torch anchor: python3 cannot import torch, skipped"
fi

note "done in ${SECONDS}s, status $status"
exit $status
