#!/usr/bin/env bash
# The decisions of scripts/gpu-check.sh without a GPU, in a few seconds: the driver's and
# the toolkit's versions read through fake nvidia-smi / nvcc programs on PATH (a hanging
# nvidia-smi included), the driver-too-old decision, the step budget (a step that
# overruns is killed and counted failed, later ones are skipped), the JSON lines, the
# summary line and the CUDA 12 toolkit folder merged from fake wheels.
set -uo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
source "$here/../../scripts/gpu-check.sh"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
passes=0 fails=0
check() {  # check DESCRIPTION COMMAND...
  local what="$1"
  shift
  if "$@"; then echo "ok   $what"; passes=$((passes + 1)); else echo "FAIL $what"; fails=$((fails + 1)); fi
}
not() { ! "$@"; }
eq() { [ "$1" = "$2" ] || { echo "     got '$1', want '$2'"; return 1; }; }

# -- versions through fake programs on PATH
mkdir -p "$work/bin"
cat >"$work/bin/nvidia-smi" <<'EOF'
#!/bin/sh
echo "+-----------------------------------------------------------------------------+"
echo "| NVIDIA-SMI 550.54.15    Driver Version: 550.54.15    CUDA Version: 12.4     |"
EOF
cat >"$work/bin/nvcc" <<'EOF'
#!/bin/sh
echo "nvcc: NVIDIA (R) Cuda compiler driver"
echo "Cuda compilation tools, release 13.0, V13.0.88"
EOF
chmod +x "$work/bin/nvidia-smi" "$work/bin/nvcc"
PATH="$work/bin:$PATH"
check "driver version from nvidia-smi's header" eq "$(driver_cuda_version)" "12.4"
check "toolkit version from nvcc --version" eq "$(nvcc_version nvcc)" "13.0"
check "find_nvcc prefers PATH" eq "$(find_nvcc)" "$work/bin/nvcc"
check "driver 12.4 is too old for toolkit 13.0" driver_too_old 12.4 13.0
check "driver 13.0 runs toolkit 13.0" not driver_too_old 13.0 13.0
check "driver 13.0 runs toolkit 13.1 (minor-version compatibility)" not driver_too_old 13.0 13.1
check "driver 13.2 runs toolkit 12.9" not driver_too_old 13.2 12.9
check "an unknown driver version decides nothing" not driver_too_old "" 13.0
check "version_lt orders 12.9 < 12.10" version_lt 12.9 12.10
check "version_lt is strict" not version_lt 13.0 13.0

# A hanging nvidia-smi is cut off by its time limit.
printf '#!/bin/sh\nsleep 30\n' >"$work/bin/nvidia-smi"
t0=$SECONDS
v="$(NVSMI_TIMEOUT=1 driver_cuda_version)"
check "a hanging nvidia-smi costs its time limit, not more ($((SECONDS - t0)) s)" test $((SECONDS - t0)) -le 4
check "and gives no version from nvidia-smi" test -z "$(NVSMI_TIMEOUT=1 timeout 1 nvidia-smi)"
: "$v"

# -- steps under the budget, JSON lines, the summary
OUT="$work/out"
mkdir -p "$OUT"
: >"$OUT/results.jsonl"
START=$SECONDS PASSED=0 FAILED=0 SKIPPED=0 BUDGET_S=2 RESERVE_S=0 MIN_STEP_S=1
step fast 100 true
finish fast $? 'quotes " and \ backslash
and a newline'
step slow 100 sleep 30
rc=$?
check "an overrunning step is killed at the budget (exit $rc)" test "$rc" -eq 124
finish slow $rc "sleeps"
check "the slow step took the budget, not 30 s ($((SECONDS - START)) s)" test $((SECONDS - START)) -le 3
step late 100 true
check "a step after the budget is spent is skipped" test $? -eq 99
check "three JSON lines" eq "$(wc -l <"$OUT/results.jsonl")" "3"
check "every line parses as JSON, statuses passed/timeout/skipped" eq "$(python3 -c '
import json, sys
print(",".join(json.loads(l)["status"] for l in open(sys.argv[1])))' "$OUT/results.jsonl")" "passed,timeout,skipped"
check "the detail keeps quotes and backslashes" eq "$(python3 -c '
import json, sys
print(json.loads(open(sys.argv[1]).readline())["detail"])' "$OUT/results.jsonl")" 'quotes " and \ backslash and a newline'
check "summary line" eq "$(summary_line)" "gpu-check: ran 2, passed 1, failed 1, skipped 1"

# -- a CUDA 12 toolkit folder from (fake) wheels
site="$work/site"
for f in cuda_runtime/lib/libcudart.so.12 cuda_runtime/include/cuda_runtime.h cuda_nvcc/bin/nvcc \
  cuda_nvcc/nvvm/bin/cicc cudnn/include/cudnn.h cudnn/lib/libcudnn.so.9 cublas/lib/libcublas.so.12; do
  mkdir -p "$(dirname "$site/nvidia/$f")" && : >"$site/nvidia/$f"
done
chmod +x "$site/nvidia/cuda_nvcc/bin/nvcc"
GPU_CHECK_WHEELS="$site" make_cuda12_root "$work/cu12"
check "merged toolkit folder made" test $? -eq 0
check "nvcc in bin/" test -x "$work/cu12/bin/nvcc"
check "nvvm/ beside bin/" test -f "$work/cu12/nvvm/bin/cicc"
check "cuDNN headers and libraries in include/ and lib/" test -f "$work/cu12/include/cudnn.h" -a -f "$work/cu12/lib/libcudnn.so.9"
check "unversioned library names for CMake" eq "$(readlink "$work/cu12/lib/libcudnn.so")" "libcudnn.so.9"
check "lib64 is lib" eq "$(readlink "$work/cu12/lib64")" "lib"
check "targets/x86_64-linux/include for nvcc.profile" test -f "$work/cu12/targets/x86_64-linux/include/cudnn.h"
rm "$site/nvidia/cudnn/include/cudnn.h"
GPU_CHECK_WHEELS="$site" make_cuda12_root "$work/cu12b"
check "without cuDNN the merge fails" test $? -ne 0

echo "gpu_check_logic: $passes passed, $fails failed"
[ "$fails" -eq 0 ]
