#!/usr/bin/env bash
# Data-parallel scaling of the network benchmark's training steps (benchmarks/bench_mpi.cpp):
# 1 process against mpirun with 2 ranks, one thread each (CONVGRAPH_THREADS=1), on the same
# global batch. Prints, per network, the time per global step (median over the rounds of
# each run's median), the speedup T1/T2 and the scaling efficiency T1/(2 T2), with the
# machine's load average before and after (the figures mean little on a busy machine).
#
#   scripts/bench-mpi.sh [ROUNDS] [NETWORKS]     defaults: 3 rounds, lenet,resnet8,c3d_small
#   BUILD_DIR: a configured build with MPI and benchmarks (default build/); the script
#   builds convgraph-bench-mpi there (it is not part of the default build).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${BUILD_DIR:-$root/build}"
exe="$build/benchmarks/convgraph-bench-mpi"
rounds="${1:-3}"
networks="${2:-lenet,resnet8,c3d_small}"
if ! cmake --build "$build" --target convgraph-bench-mpi >/dev/null; then
  echo "bench-mpi: cannot build convgraph-bench-mpi in $build (needs MPI and CONVGRAPH_BUILD_BENCHMARKS=ON)" >&2
  exit 1
fi
flags=(--oversubscribe)
[ "$(id -u)" -eq 0 ] && flags+=(--allow-run-as-root)
out="$(mktemp -d)"
trap 'rm -rf "$out"' EXIT
echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg) ($(nproc) cores)"
for ((r = 0; r < rounds; ++r)); do  # alternating, so a load change hits both sides alike
  CONVGRAPH_THREADS=1 "$exe" --threads 1 --networks "$networks" >>"$out/1"
  CONVGRAPH_THREADS=1 mpirun -np 2 "${flags[@]}" "$exe" --threads 1 --networks "$networks" >>"$out/2"
done
echo "load average after:  $(cut -d' ' -f1-3 /proc/loadavg)"
python3 - "$out/1" "$out/2" <<'PY'
import statistics, sys
def read(path):
    runs = {}
    for line in open(path):
        name, ranks, batch, ms, min_ms, ips = line.split()
        runs.setdefault(name, []).append(float(ms))
        runs[name + ":batch"] = batch
    return runs
one, two = read(sys.argv[1]), read(sys.argv[2])
print(f"{'network':<10} {'batch':>5} {'1 rank ms':>10} {'2 ranks ms':>11} {'speedup':>8} {'efficiency':>10}")
for name in [n for n in one if not n.endswith(":batch")]:
    t1, t2 = statistics.median(one[name]), statistics.median(two[name])
    print(f"{name:<10} {one[name + ':batch']:>5} {t1:>10.2f} {t2:>11.2f} {t1 / t2:>8.2f} {t1 / (2 * t2):>10.0%}")
PY
