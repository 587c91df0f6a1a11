#!/usr/bin/env bash
# Usage: scripts/bench-compare.sh NAME_A DIR_A NAME_B DIR_B [ROUNDS] [convgraph-bench options...]
#
# Runs DIR_A/benchmarks/convgraph-bench and DIR_B/benchmarks/convgraph-bench alternately,
# ROUNDS times each (default 3; the standard suite unless options say otherwise), so
# machine noise hits both alike. Per (layer, direction) it compares the medians over
# rounds of the meta-optimizer's choice; the last lines give the geomean A/B time ratio
# per direction and overall. Results (JSON, logs) go to DIR_A/bench-compare/.
set -euo pipefail
[ $# -ge 4 ] || { echo "usage: scripts/bench-compare.sh NAME_A DIR_A NAME_B DIR_B [ROUNDS] [bench options]" >&2; exit 2; }
name_a="$1" dir_a="$2" name_b="$3" dir_b="$4"
shift 4
rounds="${1:-3}"
[ $# -gt 0 ] && shift
out="$dir_a/bench-compare"
mkdir -p "$out"
for r in $(seq 1 "$rounds"); do
  for side in a b; do
    if [ "$side" = a ]; then name="$name_a" dir="$dir_a"; else name="$name_b" dir="$dir_b"; fi
    echo "== round $r: $name" >&2
    "$dir/benchmarks/convgraph-bench" --suite standard --json "$out/$name-$r.json" "$@" >"$out/$name-$r.log"
  done
done

python3 - "$out" "$rounds" "$name_a" "$name_b" <<'EOF'
import json, math, statistics, sys
out, rounds, a, b = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
def chosen(build):
    times = {}
    for r in range(1, rounds + 1):
        for rec in json.load(open(f"{out}/{build}-{r}.json"))["records"]:
            if rec.get("chosen"):
                times.setdefault((rec["layer"], rec["direction"]), []).append((rec["median_ms"], rec["algorithm"]))
    return {k: (statistics.median(t for t, _ in v), v[-1][1]) for k, v in times.items()}
ta, tb = chosen(a), chosen(b)
print(f"{'layer':<22}{'dir':<12}{a + ' ms':>14}{b + ' ms':>14}{'ratio':>8}  algorithm ({a} / {b})")
ratios = {}
for k in sorted(set(ta) & set(tb)):
    r = ta[k][0] / tb[k][0]
    ratios.setdefault(k[1], []).append(r)
    print(f"{k[0]:<22}{k[1]:<12}{ta[k][0]:>14.3f}{tb[k][0]:>14.3f}{r:>8.3f}  {ta[k][1]} / {tb[k][1]}")
geo = lambda v: math.exp(sum(map(math.log, v)) / len(v))
for d, v in ratios.items():
    print(f"geomean {a}/{b} {d}: {geo(v):.3f} ({len(v)} layers)")
print(f"geomean {a}/{b} overall: {geo([x for v in ratios.values() for x in v]):.3f}")
EOF
