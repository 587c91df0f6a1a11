#!/usr/bin/env bash
# Runs convgraph-bench's quick suite and a small per-level sweep under qemu-user as older
# x86-64 CPUs, proving the library picks kernels by CPUID and never executes an
# instruction the CPU lacks (that would be SIGILL). Skips when qemu-user is missing.
# usage: qemu_check.sh BENCH TEST_BACKENDS
set -uo pipefail
bench=$1 tests=$2
qemu=$(command -v qemu-x86_64 || true)
if [ -z "$qemu" ]; then
  echo "SKIPPED: qemu-x86_64 is not installed (Debian package qemu-user)"
  exit 0
fi
fail=0
for pair in Haswell:avx2 Nehalem:baseline; do
  cpu=${pair%%:*} want=${pair##*:}
  echo "== qemu-x86_64 -cpu $cpu (expect cpu kernels: $want)"
  # One timed run, meta candidates only, forward only, a cheap reference check: emulated
  # AVX2 is slow (the whole quick suite took 67 s), and the small sweep below runs every
  # per-level algorithm in every direction at this level.
  out=$("$qemu" -cpu "$cpu" "$bench" --suite quick --directions fwd --meta-only --repeats 1 --early-stop 1.5 \
        --check-flops 1e6 2>&1); rc=$?
  echo "$out" | grep -E "^cpu kernels|total" | head -3
  if [ $rc -ne 0 ]; then echo "FAIL: convgraph-bench exited $rc under -cpu $cpu"; echo "$out" | tail -5; fail=1; fi
  # A here-string, not a pipe: grep -q exits at the first match and, under pipefail, the
  # echo it cut short (SIGPIPE) would fail the check at random.
  if ! grep -q "^cpu kernels: $want " <<<"$out"; then echo "FAIL: -cpu $cpu did not run the $want kernels"; fail=1; fi
  out=$("$qemu" -cpu "$cpu" "$tests" "[isa-small],CPU levels: names*" 2>&1); rc=$?
  echo "$out" | grep -E "CPU level|test cases" | head -3
  if [ $rc -ne 0 ]; then echo "FAIL: the small sweep failed under -cpu $cpu"; echo "$out" | tail -15; fail=1; fi
done
[ $fail -eq 0 ] && echo "qemu: every CPU ran its level's kernels"
exit $fail
