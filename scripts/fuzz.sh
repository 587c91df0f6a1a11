#!/usr/bin/env bash
# Usage: scripts/fuzz.sh [SECONDS]   (per target; default 10)
# Installs clang and libFuzzer when missing, builds the fuzz targets (fuzz/) with clang,
# libFuzzer, ASan and UBSan in the sanitized build (SANITIZE_BUILD_DIR, default build-asan,
# shared with scripts/test.sh --sanitize; see build_sanitized in common.sh), and
# runs every target for SECONDS from a scratch copy of its seed corpus (fuzz/corpus/<t>;
# new inputs never go into the repository). Crash inputs are kept in
# $BUILD_DIR/fuzz-artifacts/. The last line is
#   fuzz: N targets, M executions, K crashes
# and the exit status is non-zero when K > 0.
# Targets run JOBS at a time (default: the core count).
# Extra libFuzzer flags can be passed in FUZZ_FLAGS (e.g. FUZZ_FLAGS="-jobs=2").
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
source "$ROOT/scripts/common.sh"
BUILD_DIR="$SANITIZE_BUILD_DIR"
SECONDS_PER_TARGET="${1:-10}"
case "$SECONDS_PER_TARGET" in
  '' | *[!0-9]*) echo "usage: scripts/fuzz.sh [SECONDS per target]" >&2; exit 2 ;;
esac

targets=()
for src in "$ROOT"/fuzz/fuzz_*.cpp; do
  t="$(basename "$src" .cpp)"
  targets+=("${t#fuzz_}")
done
# FUZZ_TARGETS="conv tensor" runs only those.
if [ -n "${FUZZ_TARGETS:-}" ]; then read -r -a targets <<<"$FUZZ_TARGETS"; fi
build_sanitized "${targets[@]/#/convgraph_fuzz_}"

work="$(mktemp -d "${TMPDIR:-/tmp}/convgraph-fuzz.XXXXXX")"
trap 'rm -rf "$work"' EXIT
artifacts="$BUILD_DIR/fuzz-artifacts"
mkdir -p "$artifacts"
export ASAN_OPTIONS="${ASAN_OPTIONS:-abort_on_error=1:detect_leaks=1:allocator_may_return_null=1}"
export UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}"

# Fuzz JOBS targets at a time (each libFuzzer process uses one core), then read the logs.
fuzz_one() {  # target
  local t=$1 corpus="$work/corpus-$1"
  mkdir -p "$corpus"
  cp -r "$ROOT/fuzz/corpus/$t/." "$corpus/" 2>/dev/null || true
  echo "== fuzzing $t for ${SECONDS_PER_TARGET}s" >&2
  # shellcheck disable=SC2086
  # (a subshell, so the shell's "Aborted" notice for a crashing fuzzer lands in the log)
  local rc=0
  ("$BUILD_DIR/fuzz/convgraph_fuzz_$t" -max_total_time="$SECONDS_PER_TARGET" -timeout=30 -rss_limit_mb=2048 \
    -print_final_stats=1 -artifact_prefix="$artifacts/$t-" ${FUZZ_FLAGS:-} "$corpus") >"$work/$t.log" 2>&1 || rc=$?
  echo "$rc" >"$work/$t.rc"
}
for t in "${targets[@]}"; do
  while [ "$(jobs -rp | wc -l)" -ge "$JOBS" ]; do wait -n || true; done
  fuzz_one "$t" &
done
wait

total_execs=0
total_crashes=0
summary=()
for t in "${targets[@]}"; do
  log="$work/$t.log"
  rc="$(cat "$work/$t.rc" 2>/dev/null || echo 1)"
  execs="$(sed -n 's/^stat::number_of_executed_units: *\([0-9]*\).*/\1/p' "$log" | tail -1)"
  if [ -z "$execs" ]; then  # no final stats (killed): the last status line's "#N"
    execs="$(sed -n 's/^#\([0-9][0-9]*\).*/\1/p' "$log" | tail -1)"
  fi
  execs="${execs:-0}"
  # libFuzzer names each crash, leak, timeout or out-of-memory input it writes (a "slow
  # unit" is only a report: it finished within -timeout).
  crashes="$(sed -n 's/.*Test unit written to \(.*\)/\1/p' "$log" | grep -vc '/[^/]*slow-unit-[^/]*$' || true)"
  if [ "$rc" -ne 0 ] && [ "$crashes" -eq 0 ]; then crashes=1; fi
  if [ "$crashes" -gt 0 ]; then
    cp "$log" "$artifacts/$t.log"
    echo "-- $t: crash; log in $artifacts/$t.log, input(s):" >&2
    sed -n 's/.*Test unit written to \(.*\)/     \1/p' "$log" | sort -u >&2
    grep -E 'ERROR|property violated|runtime error' "$log" | head -5 >&2 || true
  fi
  summary+=("$t: $execs executions, $crashes crashes, corpus $(find "$work/corpus-$t" -type f | wc -l) inputs")
  total_execs=$((total_execs + execs))
  total_crashes=$((total_crashes + crashes))
done
printf '%s\n' "${summary[@]}"
echo "fuzz: ${#targets[@]} targets, $total_execs executions, $total_crashes crashes"
[ "$total_crashes" -eq 0 ]
