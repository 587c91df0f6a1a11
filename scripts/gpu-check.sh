#!/usr/bin/env bash
# The device check, for a fresh Debian/Ubuntu machine with an NVIDIA GPU (an H200 here),
# inside a total budget of 7 minutes (BUDGET_S=420):
#   probe      the driver's CUDA version (nvidia-smi, time-limited; else libcuda's
#              cuDriverGetVersion) against the toolkit's (nvcc: PATH, /usr/local/cuda*/bin)
#   deps       Eigen, Catch2 2, ... through install_missing (scripts/common.sh); offline, the
#              .deb files in GPU_CHECK_DEBS (default <repo>/.gpu-debs) unpacked into a prefix
#   toolkit    only when the driver is older than the toolkit: the CUDA 12 runtime, nvcc,
#              cuBLAS, cuFFT, cuDNN wheels (already installed, e.g. beside PyTorch, or from
#              PyPI) merged into one toolkit folder that CMake accepts
#   configure, build        convgraph_test_cuda (convgraph-bench later, before it runs)
#   gpu-free tests          the tests/cuda cases that need no GPU; without a GPU the check
#                           stops here, "no usable GPU: <reason>" as its last line
#   gpu tests               every tests/cuda case; "SKIPPED: no GPU" counts as a failure
#   launch-blocking         the GPU cases again with CUDA_LAUNCH_BLOCKING=1 (a kernel fault
#                           is reported at its launch), a sparser sweep
#   sanitizer               compute-sanitizer memcheck on a small sweep, if time is left
#   bench, torch anchor     convgraph-bench device=cuda (built only now) and
#                           benchmarks/torch_anchor.py, reported, never failing the check
# Each step runs under `timeout`, capped by what is left of the budget, and appends one
# JSON line to OUTDIR/results.jsonl when it ends; logs are OUTDIR/<step>.log. The last
# line is "gpu-check: ran N, passed P, failed F, skipped S" (then, without a GPU, the
# "no usable GPU" line). Exit 0 when nothing failed, 1 otherwise, 2 on bad usage.
#
#   scripts/gpu-check.sh OUTDIR
#   scripts/gpu-check.sh --fetch-debs DIR   (on a machine with apt access: the .deb files
#                                            an offline GPU machine needs; carry DIR along)
# Knobs: BUILD_DIR (<repo>/build-gpu), JOBS (nproc), BUDGET_S (420),
# CONVGRAPH_CUDA_SWEEP_STRIDE (4), GPU_CHECK_DEBS, GPU_CHECK_WHEELS (a pip --target folder).
set -uo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
DEB_PACKAGES=(libeigen3-dev catch2 nlohmann-json3-dev libcli11-dev)
CU12_WHEELS=(nvidia-cuda-runtime-cu12 nvidia-cuda-nvcc-cu12 nvidia-cuda-cccl-cu12 nvidia-cublas-cu12
  nvidia-cufft-cu12 nvidia-cudnn-cu12)

# ---- helpers (sourced by tests/scripts/gpu_check_logic.sh) ------------------------------

# json_str TEXT: TEXT as a JSON string literal (one line).
json_str() {
  printf '"%s"' "$(printf '%s' "$1" | tr '\n\t\r' '   ' | sed 's/\\/\\\\/g; s/"/\\"/g' | tr -d '\000-\037')"
}

# result STEP STATUS SECONDS DETAIL: appends a line to results.jsonl and counts it.
# STATUS: passed, failed, timeout (counts as failed) or skipped.
result() {
  case "$2" in
    passed) PASSED=$((PASSED + 1)) ;;
    failed | timeout) FAILED=$((FAILED + 1)) ;;
    skipped) SKIPPED=$((SKIPPED + 1)) ;;
  esac
  printf '{"step":%s,"status":"%s","seconds":%s,"detail":%s}\n' "$(json_str "$1")" "$2" "$3" \
    "$(json_str "$4")" >>"$OUT/results.jsonl"
  echo "== $1: $2 (${3}s) $(printf '%s' "$4" | tr '\n' ' ')"
}

summary_line() { echo "gpu-check: ran $((PASSED + FAILED)), passed $PASSED, failed $FAILED, skipped $SKIPPED"; }

# Seconds left of the budget, less a reserve for the summary.
left() { echo $((BUDGET_S - (SECONDS - START) - ${RESERVE_S:-5})); }

# step NAME MAX_SECONDS cmd...: runs cmd under a limit of min(MAX_SECONDS, what is left),
# logging to OUTDIR/NAME.log; a step with under MIN_STEP_S (5) s left is skipped. DETAIL (a global)
# may be set by the caller afterwards; returns cmd's status (124: timed out, 99: skipped).
step() {
  local name="$1" max="$2" t
  shift 2
  t="$(left)"
  [ "$max" -lt "$t" ] && t="$max"
  if [ "$t" -lt "${MIN_STEP_S:-5}" ]; then
    result "$name" skipped 0 "the 7-minute budget is spent"
    return 99
  fi
  local start=$SECONDS rc
  timeout --kill-after=3 "$t" "$@" >"$OUT/$name.log" 2>&1
  rc=$?
  STEP_SECONDS=$((SECONDS - start))
  STEP_LIMIT=$t
  return $rc
}

# finish NAME RC DETAIL: records a step's outcome from its exit status.
finish() {
  case "$2" in
    0) result "$1" passed "$STEP_SECONDS" "$3" ;;
    99) ;;
    124 | 137) result "$1" timeout "$STEP_SECONDS" "timed out after ${STEP_LIMIT}s; $3" ;;
    *) result "$1" failed "$STEP_SECONDS" "exit $2; $3" ;;
  esac
}

# The driver's CUDA version as MAJOR.MINOR: nvidia-smi's header, else cuDriverGetVersion.
driver_cuda_version() {
  local v
  v="$(timeout "${NVSMI_TIMEOUT:-15}" nvidia-smi 2>/dev/null | sed -n 's/.*CUDA Version: *\([0-9][0-9.]*\).*/\1/p' | head -n 1)"
  if [ -z "$v" ] && command -v python3 >/dev/null; then
    v="$(timeout 15 python3 -c '
import ctypes
v = ctypes.c_int(0)
ctypes.CDLL("libcuda.so.1").cuDriverGetVersion(ctypes.byref(v))
print(f"{v.value // 1000}.{v.value % 1000 // 10}" if v.value else "")' 2>/dev/null)"
  fi
  echo "$v"
}

# Why no GPU can be used (empty when one can): asks the driver API directly.
gpu_unusable_reason() {
  command -v python3 >/dev/null || { timeout 15 nvidia-smi -L >/dev/null 2>&1 || echo "nvidia-smi -L failed and python3 is missing"; return; }
  timeout "${NVSMI_TIMEOUT:-20}" python3 -c '
import ctypes, sys
try:
    cu = ctypes.CDLL("libcuda.so.1")
except OSError as e:
    sys.exit(f"libcuda.so.1 cannot be loaded ({e})")
r = cu.cuInit(0)
if r != 0:
    sys.exit(f"cuInit failed with CUresult {r}")
n = ctypes.c_int(0)
cu.cuDeviceGetCount(ctypes.byref(n))
if n.value == 0:
    sys.exit("the driver sees no CUDA device")' 2>&1 | tail -n 1
}

# The toolkit's version as MAJOR.MINOR from `nvcc --version`.
nvcc_version() { "$1" --version 2>/dev/null | sed -n 's/.*release \([0-9][0-9.]*\),.*/\1/p' | head -n 1; }

# version_lt A B: A < B for dotted versions.
version_lt() { [ "$1" != "$2" ] && [ "$(printf '%s\n%s\n' "$1" "$2" | sort -V | head -n 1)" = "$1" ]; }

# driver_too_old DRIVER TOOLKIT: the driver cannot run this toolkit's code. Within one
# major version, CUDA's minor-version compatibility runs it (the build carries sm_90
# machine code, no PTX needs JIT), so only the major versions are compared.
driver_too_old() { [ -n "$1" ] && [ -n "$2" ] && version_lt "${1%%.*}" "${2%%.*}"; }

# The nvcc to use: PATH, then the newest /usr/local/cuda*/bin.
find_nvcc() {
  command -v nvcc 2>/dev/null && return
  local d
  for d in /usr/local/cuda/bin $(ls -d /usr/local/cuda-*/bin 2>/dev/null | sort -Vr); do
    [ -x "$d/nvcc" ] && { echo "$d/nvcc"; return; }
  done
}

# Site folders holding nvidia/<component> wheels (PyTorch's, or GPU_CHECK_WHEELS).
wheel_roots() {
  [ -n "${GPU_CHECK_WHEELS:-}" ] && echo "$GPU_CHECK_WHEELS"
  command -v python3 >/dev/null &&
    python3 -c 'import site, sys; print("\n".join(site.getsitepackages() + [site.getusersitepackages()]))' 2>/dev/null
}

# make_cuda12_root DEST: merges the cu12 wheels' nvidia/<component>/ folders into one
# toolkit folder laid out like /usr/local/cuda (bin, include, lib = lib64, nvvm,
# targets/x86_64-linux), with the unversioned library links CMake looks for.
# Fails when nvcc, the runtime or cuDNN is not among them.
make_cuda12_root() {
  local dest="$1" site comp
  rm -rf "$dest" && mkdir -p "$dest/targets/x86_64-linux"
  for site in $(wheel_roots); do
    [ -f "$site/nvidia/cuda_runtime/lib/libcudart.so.12" ] || continue
    for comp in "$site"/nvidia/*/; do
      cp -rlf "$comp." "$dest/" 2>/dev/null || cp -rf "$comp." "$dest/"
    done
    break
  done
  [ -x "$dest/bin/nvcc" ] && [ -f "$dest/include/cudnn.h" ] && [ -f "$dest/lib/libcudart.so.12" ] || return 1
  ln -sfn lib "$dest/lib64"
  ln -sfn ../../include "$dest/targets/x86_64-linux/include"
  ln -sfn ../../lib "$dest/targets/x86_64-linux/lib"
  local f base
  for f in "$dest"/lib/lib*.so.[0-9]*; do
    base="${f%%.so.*}.so"
    [ -e "$base" ] || ln -s "$(basename "$f")" "$base"
  done
}

# fetch_cuda12 DEST PIP_TARGET: make_cuda12_root from installed wheels, else from PyPI.
fetch_cuda12() {
  make_cuda12_root "$1" && return 0
  export GPU_CHECK_WHEELS="$2"
  python3 -m pip install -q --timeout 15 --retries 0 --target "$2" "${CU12_WHEELS[@]}" && make_cuda12_root "$1"
}

# The folder holding include/cudnn.h: the toolkit's, else a cuDNN wheel's (PyTorch's).
cudnn_root() {
  local site
  [ -f "$(dirname "$(dirname "$1")")/include/cudnn.h" ] && return 0
  for site in $(wheel_roots); do
    [ -f "$site/nvidia/cudnn/include/cudnn.h" ] && { echo "$site/nvidia/cudnn"; return 0; }
  done
}

if (return 0 2>/dev/null); then return 0; fi  # sourced: the helpers only
# A helper as a command (timeout cannot run a shell function).
HELPER=(bash -c 'source "$0" && "$@"' "$ROOT/scripts/gpu-check.sh")

# ---- main ------------------------------------------------------------------------------

if [ "${1:-}" = "--fetch-debs" ] && [ $# -eq 2 ]; then
  mkdir -p "$2" && cd "$2" && apt-get download "${DEB_PACKAGES[@]}" && ls -l
  exit $?
fi
if [ $# -ne 1 ] || [[ "$1" == -* ]]; then
  echo "usage: scripts/gpu-check.sh OUTDIR | --fetch-debs DIR" >&2
  exit 2
fi
mkdir -p "$1" || exit 2
OUT="$(cd "$1" && pwd)"
BUILD="${BUILD_DIR:-$ROOT/build-gpu}"
JOBS="${JOBS:-$(nproc)}"
BUDGET_S="${BUDGET_S:-420}"
export CONVGRAPH_CUDA_SWEEP_STRIDE="${CONVGRAPH_CUDA_SWEEP_STRIDE:-4}"
START=$SECONDS PASSED=0 FAILED=0 SKIPPED=0
: >"$OUT/results.jsonl"
echo "== gpu-check $(date -u +%Y-%m-%dT%H:%M:%SZ) on $(hostname), repo $ROOT, build $BUILD, budget ${BUDGET_S}s"

# -- probe: driver against toolkit
nvcc="$(find_nvcc)"
tk="$([ -n "$nvcc" ] && nvcc_version "$nvcc")"
drv="$(driver_cuda_version)"
no_gpu="$(gpu_unusable_reason)"
{ timeout 15 nvidia-smi || echo "nvidia-smi: not found or failed"; } >"$OUT/nvidia-smi.log" 2>&1
cmake_args=()
use_wheels=0
driver_too_old "$drv" "$tk" && use_wheels=1
result probe passed 0 "driver CUDA ${drv:-unknown}, toolkit ${tk:-none} (${nvcc:-no nvcc}), GPU: ${no_gpu:-usable}$([ $use_wheels = 1 ] && echo ", driver older: CUDA 12 wheels")"

# -- deps: install what is missing; offline, unpack carried .deb files
debs="${GPU_CHECK_DEBS:-$ROOT/.gpu-debs}"
missing=()
for p in "${DEB_PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  result deps passed 0 "installed: ${DEB_PACKAGES[*]}"
else
  # install_missing (scripts/common.sh) for these packages alone, not the whole CI list.
  step deps 90 bash -c 'source "$0/scripts/common.sh" && PACKAGES=() && install_missing "$@"' "$ROOT" "${missing[@]}"
  rc=$?
  DETAIL="missing: ${missing[*]}"
  if [ $rc -ne 0 ] && [ $rc -ne 99 ] && ls "$debs"/*.deb >/dev/null 2>&1; then
    prefix="$BUILD/deps"
    mkdir -p "$prefix"
    rc=0
    for d in "$debs"/*.deb; do dpkg -x "$d" "$prefix" || rc=1; done
    cmake_args+=("-DCMAKE_PREFIX_PATH=$prefix/usr")
    DETAIL="$DETAIL; apt failed, unpacked $(ls "$debs"/*.deb | wc -l) .deb files from $debs into $prefix"
  elif [ $rc -ne 0 ]; then
    DETAIL="$DETAIL; apt failed and $debs has no .deb files (scripts/gpu-check.sh --fetch-debs)"
  fi
  finish deps $rc "$DETAIL"
fi

# -- toolkit: CUDA 12 wheels when the driver is older than the toolkit
if [ $use_wheels = 1 ]; then
  cu12="$BUILD/cuda12"
  step toolkit 150 "${HELPER[@]}" fetch_cuda12 "$cu12" "$BUILD/wheels"
  rc=$?
  finish toolkit $rc "CUDA 12 wheels merged into $cu12"
  if [ $rc -eq 0 ]; then
    nvcc="$cu12/bin/nvcc"
    export CUDAFLAGS="-cudart shared"  # the wheels may lack libcudart_static.a
    export LD_LIBRARY_PATH="$cu12/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    cmake_args+=("-DCUDAToolkit_ROOT=$cu12" "-DCUDNN_ROOT=$cu12" "-DCMAKE_CUDA_RUNTIME_LIBRARY=Shared")
  fi
fi
if [ -n "$nvcc" ]; then
  cmake_args+=("-DCMAKE_CUDA_COMPILER=$nvcc")
  cudnn="$(cudnn_root "$nvcc")"
  if [ -n "$cudnn" ]; then  # cuDNN beside PyTorch rather than in the toolkit
    cmake_args+=("-DCUDNN_ROOT=$cudnn")
    export LD_LIBRARY_PATH="$cudnn/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  fi
fi

# -- configure and build
generator=()
command -v ninja >/dev/null && generator=(-G Ninja)
step configure 90 cmake -S "$ROOT" -B "$BUILD" "${generator[@]}" -DCMAKE_BUILD_TYPE=Release -DCONVGRAPH_WITH_CUDA=ON \
  -DCONVGRAPH_BUILD_TESTS=ON -DCONVGRAPH_BUILD_BENCHMARKS=ON -DCONVGRAPH_BUILD_EXAMPLES=OFF "${cmake_args[@]}"
rc=$?
finish configure $rc "$(grep -m 1 -E 'convgraph: CUDA backends|CMake Error' "$OUT/configure.log")"
if [ $rc -eq 0 ]; then  # the tests first: a benchmark that fails to build must not cost them
  step build 300 cmake --build "$BUILD" --parallel "$JOBS" --target convgraph_test_cuda
  rc=$?
  finish build $rc "convgraph_test_cuda$([ $rc -ne 0 ] && echo ": $(grep -m 1 -E 'error' "$OUT/build.log")")"
fi
test_exe="$BUILD/tests/convgraph_test_cuda"
if [ $rc -ne 0 ] || [ ! -x "$test_exe" ]; then
  result tests skipped 0 "nothing built"
  summary_line
  [ -n "$no_gpu" ] && echo "no usable GPU: $no_gpu"
  exit 1
fi

# counts LOG: Catch2's closing line.
counts() { grep -m 1 -E '^(All tests passed|test cases:)' "$1" | tr -s ' '; }

# -- GPU-free tests, then stop without a GPU
step gpu-free-tests 60 "$test_exe" "~[cuda]~[.]" --order decl  # not [cuda], not hidden
finish gpu-free-tests $? "$(counts "$OUT/gpu-free-tests.log")"
if [ -n "$no_gpu" ]; then
  summary_line
  echo "no usable GPU: $no_gpu"
  exit 1
fi

# -- every CUDA test; a GPU case that skips itself is a failure here
step gpu-tests 180 "$test_exe" "[cuda]" --durations yes --order decl
rc=$?
if grep -q 'SKIPPED: no GPU' "$OUT/gpu-tests.log"; then
  rc=1
  DETAIL="GPU cases SKIPPED: $(grep -m 1 -A 1 'SKIPPED: no GPU' "$OUT/gpu-tests.log" | tr -s ' \n' ' ')"
else
  DETAIL="$(counts "$OUT/gpu-tests.log"); $(grep -m 1 'CUDA conv sweep:' "$OUT/gpu-tests.log")"
fi
finish gpu-tests $rc "$DETAIL"
grep -A 60 'CUDA conv sweep:' "$OUT/gpu-tests.log" | grep -E '^(CUDA|  )' >"$OUT/sweep-stats.txt"

# -- kernel faults where they happen: blocking launches, then the sanitizer
step launch-blocking 60 env CUDA_LAUNCH_BLOCKING=1 CONVGRAPH_CUDA_SWEEP_STRIDE=16 "$test_exe" "[cuda]" --order decl
finish launch-blocking $? "CUDA_LAUNCH_BLOCKING=1, sweep stride 16; $(counts "$OUT/launch-blocking.log")"
sanitizer="$(command -v compute-sanitizer || ls "$(dirname "${nvcc:-/usr/local/cuda/bin/nvcc}")"/compute-sanitizer \
  /usr/local/cuda*/bin/compute-sanitizer 2>/dev/null | head -n 1)"
if [ -n "$sanitizer" ]; then
  # Small: the op kernels, matmul and one convolution case per algorithm family.
  step sanitizer 60 "$sanitizer" --tool memcheck --error-exitcode 86 "$test_exe" \
    "cuda elementwise ops match the CPU" "cuda reductions and the autodiff broadcast helpers match the CPU" \
    "cuda softmax, log_softmax, their gradients and cross-entropy match the CPU" \
    "cuda matmul (2-D, batched, broadcast, vectors) matches the CPU" \
    "GPU: algorithms honour the workspace limit and reject a short workspace"
  rc=$?
  if [ $rc -eq 124 ] || [ $rc -eq 137 ]; then  # slow under memcheck: not a finding
    result sanitizer skipped "$STEP_SECONDS" "did not finish within ${STEP_LIMIT}s"
  else
    finish sanitizer $rc "memcheck; $(grep -m 1 'ERROR SUMMARY' "$OUT/sanitizer.log")"
  fi
else
  result sanitizer skipped 0 "compute-sanitizer not found"
fi

# -- benchmarks: reported, never failing the check (an unfinished one still has its log)
if cmake --build "$BUILD" --target help 2>/dev/null | grep -q 'convgraph-bench'; then
  step build-bench 120 cmake --build "$BUILD" --parallel "$JOBS" --target convgraph-bench
  finish build-bench $? "convgraph-bench"
fi
bench="$(find "$BUILD" -maxdepth 3 -type f -name convgraph-bench -perm -u+x | head -n 1)"
if [ -n "$bench" ]; then
  step bench 60 "$bench" --flags device=cuda --json "$OUT/bench.json"
  rc=$?
  [ $rc -ne 99 ] && result bench "$([ $rc -eq 0 ] && echo passed || echo skipped)" "$STEP_SECONDS" \
    "exit $rc, reported only; see bench.log"
else
  result bench skipped 0 "convgraph-bench was not built"
fi
if python3 -c 'import torch' >/dev/null 2>&1; then
  step torch-anchor 60 python3 "$ROOT/benchmarks/torch_anchor.py" --json "$OUT/torch_anchor.json"
  rc=$?
  [ $rc -ne 99 ] && result torch-anchor "$([ $rc -eq 0 ] && echo passed || echo skipped)" "$STEP_SECONDS" \
    "exit $rc, reported only; see torch-anchor.log"
else
  result torch-anchor skipped 0 "python3 cannot import torch"
fi

echo "== done in $((SECONDS - START))s; results in $OUT/results.jsonl"
summary_line
[ "$FAILED" -eq 0 ]
