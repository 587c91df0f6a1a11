#!/usr/bin/env bash
# Usage: scripts/bench-native-vs-portable.sh [ROUNDS] [convgraph-bench options...]
#
# The portable default build (build/, x86-64-v2 with run-time kernel levels) against a
# -DCONVGRAPH_NATIVE=ON build (build-native/, everything compiled for this CPU) on the
# standard suite. Both convgraph-bench binaries run alternately, ROUNDS times each
# (default 3), so machine noise hits both alike; per (layer, direction) the median over
# rounds of the meta-optimizer's choice is compared, and the last lines give the geomean
# of the portable/native time ratio per direction and overall.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
source "$here/common.sh"
rounds="${1:-3}"
[ $# -gt 0 ] && shift
install_missing python3

BUILD_TARGETS=convgraph-bench configure_and_build
BUILD_DIR="$ROOT/build-native" BUILD_TARGETS=convgraph-bench CONVGRAPH_WITH_CUDA=OFF \
  configure_and_build -DCONVGRAPH_NATIVE=ON -DCONVGRAPH_BUILD_TESTS=OFF -DCONVGRAPH_BUILD_EXAMPLES=OFF

out="$ROOT/build/native-vs-portable"
mkdir -p "$out"
for r in $(seq 1 "$rounds"); do
  for b in portable native; do
    dir="$ROOT/build"
    [ "$b" = native ] && dir="$ROOT/build-native"
    echo "== round $r: $b" >&2
    "$dir/benchmarks/convgraph-bench" --suite standard --json "$out/$b-$r.json" "$@" >"$out/$b-$r.log"
  done
done

python3 - "$out" "$rounds" <<'EOF'
import json, math, statistics, sys
out, rounds = sys.argv[1], int(sys.argv[2])
def chosen(build):
    times = {}
    for r in range(1, rounds + 1):
        for rec in json.load(open(f"{out}/{build}-{r}.json"))["records"]:
            if rec.get("chosen"):
                times.setdefault((rec["layer"], rec["direction"]), []).append((rec["median_ms"], rec["algorithm"]))
    return {k: (statistics.median(t for t, _ in v), v[-1][1]) for k, v in times.items()}
p, n = chosen("portable"), chosen("native")
keys = sorted(set(p) & set(n))
print(f"{'layer':<22}{'dir':<12}{'portable ms':>12}{'native ms':>11}{'ratio':>8}  algorithms (portable / native)")
ratios = {}
for k in keys:
    r = p[k][0] / n[k][0]
    ratios.setdefault(k[1], []).append(r)
    print(f"{k[0]:<22}{k[1]:<12}{p[k][0]:>12.3f}{n[k][0]:>11.3f}{r:>8.3f}  {p[k][1]} / {n[k][1]}")
geo = lambda v: math.exp(sum(map(math.log, v)) / len(v))
for d, v in ratios.items():
    print(f"geomean portable/native {d}: {geo(v):.3f} ({len(v)} layers)")
print(f"geomean portable/native overall: {geo([x for v in ratios.values() for x in v]):.3f}")
EOF
