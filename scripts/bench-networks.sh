#!/usr/bin/env bash
# The whole-network benchmark: lenet, resnet8 and c3d_small (benchmarks/NETWORKS.md), a
# training step and inference, in convgraph (`convgraph-bench --networks`) and in PyTorch
# (benchmarks/networks_torch.py, Debian's python3-torch), same threads and batches, in
# alternating rounds of one run. Prints per network and mode the median ms over the rounds,
# images/s, peak memory and the ratio convgraph/pytorch; the last line is
#   geomean ratio convgraph/pytorch train step: X
# Installs python3-torch when missing and builds convgraph-bench in $BUILD_DIR (normal
# build dir) unless CONVGRAPH_BENCH names an executable. Environment: THREADS (2),
# ROUNDS (3), NETWORKS (lenet,resnet8,c3d_small); extra arguments go to networks_torch.py
# (e.g. --repeats 20). Writes every record to benchmarks/RESULTS-latest.networks.json.
# PYTHON (/usr/bin/python3): Debian's python3-torch lives in the system interpreter, which a
# python3 earlier on PATH (pyenv, venv) does not see.
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
THREADS="${THREADS:-2}"
ROUNDS="${ROUNDS:-3}"
NETWORKS="${NETWORKS:-lenet,resnet8,c3d_small}"
PYTHON="${PYTHON:-/usr/bin/python3}"
# libopenblas0: python3-torch's dense layers run on libblas.so.3, which is netlib's slow
# reference BLAS unless OpenBLAS is installed (torch only recommends it).
install_missing python3 python3-torch libopenblas0
# PyTorch's OpenMP threads sleep at barriers, as oneDNN's do in bench-anchors.sh: spinning
# ones collapse on these shared VMs (2x slower steps under load). Override to compare.
export OMP_WAIT_POLICY="${OMP_WAIT_POLICY:-passive}"
# OpenBLAS (the dense layers) sizes its own pthread pool from the machine unless told: with
# more threads than THREADS it fights PyTorch's OpenMP threads (LeNet's step measured 47 ms
# against 25 ms with the pool at THREADS on a 2-vCPU VM).
export OPENBLAS_NUM_THREADS="${OPENBLAS_NUM_THREADS:-$THREADS}"

exe="${CONVGRAPH_BENCH:-}"
if [ -z "$exe" ]; then
  BUILD_TARGETS=convgraph-bench configure_and_build >&2
  exe="$BUILD_DIR/benchmarks/convgraph-bench"
fi
convgraph=1
help="$("$exe" --help 2>/dev/null || true)"  # not piped: grep -q would cut it short under pipefail
if ! grep -q -- '--networks' <<<"$help"; then
  echo "== convgraph side SKIPPED: $exe does not support --networks yet (not in its --help);" \
       "timing PyTorch only" >&2
  convgraph=0
fi

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
run_convgraph() {  # round
  CONVGRAPH_THREADS="$THREADS" OMP_NUM_THREADS="$THREADS" \
    "$exe" --networks "$NETWORKS" --threads "$THREADS" --json "$work/convgraph-$1.json" >&2
}
run_pytorch() {  # round [args...]
  local r="$1"; shift
  OMP_NUM_THREADS="$THREADS" "$PYTHON" "$ROOT/benchmarks/networks_torch.py" --networks "$NETWORKS" \
    --threads "$THREADS" "$@" >"$work/pytorch-$r.jsonl"
}

echo "# whole-network benchmark (scripts/bench-networks.sh)"
echo "# date:    $(date -u +%Y-%m-%dT%H:%M:%SZ)"
echo "# machine: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//'), $(nproc) CPUs"
echo "# commit:  $(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo unknown)"
echo "# load:    $(cut -d' ' -f1-3 /proc/loadavg) (1/5/15 min; numbers are only trustworthy on an idle machine)"
echo "# pytorch: $("$PYTHON" -c 'import torch; print(torch.__version__)'), $PYTHON"
echo "# OpenMP:  OMP_WAIT_POLICY=$OMP_WAIT_POLICY, OPENBLAS_NUM_THREADS=$OPENBLAS_NUM_THREADS"
echo "# threads: $THREADS, rounds: $ROUNDS (convgraph and PyTorch alternate, first one then the other)"
for r in $(seq 1 "$ROUNDS"); do
  echo "== round $r/$ROUNDS" >&2
  # Alternate who goes first, so that a slow phase of the machine hits both sides alike.
  if [ $((r % 2)) -eq 1 ]; then
    if [ "$convgraph" = 1 ]; then run_convgraph "$r"; fi
    run_pytorch "$r" "$@"
  else
    run_pytorch "$r" "$@"
    if [ "$convgraph" = 1 ]; then run_convgraph "$r"; fi
  fi
done

"$PYTHON" - "$work" "$ROOT/benchmarks/RESULTS-latest.networks.json" "$convgraph" <<'EOF'
import glob, json, math, statistics, sys

work, out, convgraph_ran = sys.argv[1], sys.argv[2], sys.argv[3] == "1"

def records(path):
    """Network records of a JSON document ({"records": [...]} or a list) or of JSON lines."""
    text = open(path).read()
    try:
        doc = json.loads(text)
        docs = doc.get("records", [doc]) if isinstance(doc, dict) else doc
    except json.JSONDecodeError:
        docs = [json.loads(line) for line in text.splitlines() if line.strip()]
    return [d for d in docs if isinstance(d, dict) and "network" in d and "mode" in d]

runs = {}  # (framework, network, mode) -> records of all rounds
all_records = []
for framework, pattern in (("convgraph", "convgraph-*.json"), ("pytorch", "pytorch-*.jsonl")):
    for path in sorted(glob.glob(f"{work}/{pattern}")):
        for rec in records(path):
            rec.setdefault("framework", framework)
            all_records.append(rec)
            runs.setdefault((framework, rec["network"], rec["mode"]), []).append(rec)
json.dump({"tool": "bench-networks.sh", "records": all_records}, open(out, "w"), indent=1)

def median(framework, network, mode, key):
    vals = [r.get(key, r.get("median_ms") if key == "ms" else None) for r in runs.get((framework, network, mode), [])]
    vals = [v for v in vals if isinstance(v, (int, float)) and not math.isnan(v)]
    return statistics.median(vals) if vals else None

fmt = lambda v, spec: format(v, spec) if v is not None else "-".rjust(int(spec.split(".")[0]))
mib = lambda v: None if v is None else v / 2**20
networks = list(dict.fromkeys(n for _, n, _ in runs))
print(f"{'network':10} {'mode':5} {'convgraph ms':>12} {'pytorch ms':>11} {'ratio':>6} {'cg img/s':>9} "
      f"{'pt img/s':>9} {'cg peak MiB':>11} {'pt peak MiB':>11}")
train_ratios = []
for network in networks:
    for mode in ("train", "infer"):
        cg, pt = median("convgraph", network, mode, "ms"), median("pytorch", network, mode, "ms")
        if cg is None and pt is None:
            continue
        ratio = cg / pt if cg and pt else None
        if ratio is not None and mode == "train":
            train_ratios.append(ratio)
        print(f"{network:10} {mode:5} {fmt(cg, '12.2f')} {fmt(pt, '11.2f')} {fmt(ratio, '6.2f')} "
              f"{fmt(median('convgraph', network, mode, 'images_per_s'), '9.0f')} "
              f"{fmt(median('pytorch', network, mode, 'images_per_s'), '9.0f')} "
              f"{fmt(mib(median('convgraph', network, mode, 'peak_bytes')), '11.1f')} "
              f"{fmt(mib(median('pytorch', network, mode, 'peak_bytes')), '11.1f')}")
print(f"(ms: median over the rounds of each round's median; wrote {out})", file=sys.stderr)
if train_ratios:
    geomean = math.exp(sum(map(math.log, train_ratios)) / len(train_ratios))
    print(f"geomean ratio convgraph/pytorch train step: {geomean:.3f}")
else:
    why = "convgraph-bench has no --networks yet" if not convgraph_ran else "no network timed on both sides"
    print(f"geomean ratio convgraph/pytorch train step: n/a ({why})")
EOF
