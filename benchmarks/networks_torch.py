#!/usr/bin/python3
"""PyTorch side of the whole-network benchmark: lenet, resnet8, c3d_small on the CPU.

The networks are those of benchmarks/NETWORKS.md (convgraph-bench --networks builds the
same). For each network and mode it times, on one fixed random batch (seeded):
  train  a training step: zero the gradients, forward, softmax cross-entropy, backward,
         plain SGD update (lr 0.01, no momentum, no weight decay); train-mode batch norm
  infer  eval mode under torch.no_grad(): forward to the 10 logits
after --warmup untimed runs, --repeats timed runs; the median is reported. Each (network,
mode) runs in a fresh Python process so that its memory is measured alone.

peak_bytes is the resident-set growth of that process: the peak RSS (VmHWM, reset through
/proc/self/clear_refs just before) over warm-up and timed runs minus the RSS before the
model and data were created. It counts parameters, gradients, activations, the batch and
what PyTorch's CPU allocator keeps; not the Python interpreter and libtorch themselves.
(torch.profiler's memory view only sums tensor allocations per op, so it misses
allocator and library buffers; RSS is what a user pays for.)

Prints one JSON line per (network, mode):
  {"network": ..., "framework": "pytorch", "mode": "train"|"infer", "ms": median,
   "images_per_s": ..., "peak_bytes": ..., "min_ms": ..., "runs": ..., "threads": ...,
   "batch": ..., "torch": version, "blas": the BLAS library loaded}

The dense layers (and some convolution gradients) run on the BLAS behind Debian's
libblas.so.3: install libopenblas0 (python3-torch recommends it); with netlib's reference
BLAS, which --no-install-recommends leaves, they are several times slower (a warning says
so).

usage: networks_torch.py [--networks lenet,resnet8,c3d_small] [--threads T]
                         [--modes train,infer] [--warmup N] [--repeats N] [--seed S]
                         [--describe]
  --describe  print each network's layers (output shape, parameter count) and exit
Exit status: 0 ok, 1 a run failed, 2 bad usage or no torch.
"""
import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time

NETWORKS = ("lenet", "resnet8", "c3d_small")
MODES = ("train", "infer")
LEARNING_RATE = 0.01


def build(name):
    """(model, input batch shape) of a network of NETWORKS.md."""
    from torch import nn

    if name == "lenet":
        model = nn.Sequential(
            nn.Conv2d(1, 20, 5), nn.ReLU(), nn.MaxPool2d(2),   # 20x24x24 -> 20x12x12
            nn.Conv2d(20, 50, 5), nn.ReLU(), nn.MaxPool2d(2),  # 50x8x8 -> 50x4x4
            nn.Flatten(), nn.Linear(800, 500), nn.ReLU(), nn.Linear(500, 10))
        return model, (64, 1, 28, 28)

    if name == "resnet8":
        def conv_bn(cin, cout, k, stride):
            # No convolution bias: batch norm's shift replaces it.
            return [nn.Conv2d(cin, cout, k, stride=stride, padding=k // 2, bias=False), nn.BatchNorm2d(cout)]

        class BasicBlock(nn.Module):
            def __init__(self, cin, cout, stride):
                super().__init__()
                self.body = nn.Sequential(*conv_bn(cin, cout, 3, stride), nn.ReLU(), *conv_bn(cout, cout, 3, 1))
                change = stride != 1 or cin != cout
                self.shortcut = nn.Sequential(*conv_bn(cin, cout, 1, stride)) if change else nn.Identity()
                self.relu = nn.ReLU()

            def forward(self, x):
                return self.relu(self.body(x) + self.shortcut(x))

        model = nn.Sequential(
            *conv_bn(3, 16, 3, 1), nn.ReLU(),                     # 16x32x32
            BasicBlock(16, 16, 1), BasicBlock(16, 32, 2), BasicBlock(32, 64, 2),  # 16x32x32, 32x16x16, 64x8x8
            nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(64, 10))
        return model, (32, 3, 32, 32)

    if name == "c3d_small":
        def block(cin, cout):
            return [nn.Conv3d(cin, cout, 3, padding=1, bias=False), nn.BatchNorm3d(cout), nn.ReLU(), nn.MaxPool3d(2)]

        model = nn.Sequential(*block(3, 32), *block(32, 64),  # 32x4x16x16, 64x2x8x8
                              nn.Flatten(), nn.Linear(64 * 2 * 8 * 8, 10))
        return model, (4, 3, 8, 32, 32)

    raise ValueError(f"networks_torch: unknown network '{name}' (valid: {', '.join(NETWORKS)})")


def rss_bytes(field):
    """VmRSS or VmHWM of this process, in bytes."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
    raise RuntimeError(f"no {field} in /proc/self/status")


def blas_library():
    """The BLAS this process loaded (Debian's libblas.so.3 alternative), or None."""
    with open("/proc/self/maps") as f:
        for line in f:
            path = line.split()[-1]
            if "libblas" in path or "openblas" in path or "libmkl" in path:
                return path
    return None


def reset_peak_rss():
    """Makes VmHWM restart from the current RSS (Linux >= 4.0); False where not allowed."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


def measure(name, mode, threads, warmup, repeats, seed):
    """Runs in a fresh process: times one (network, mode); returns its record."""
    import torch
    import torch.nn.functional as F

    torch.set_num_threads(threads)
    torch.manual_seed(seed)
    base = rss_bytes("VmRSS")
    exact_peak = reset_peak_rss()

    model, shape = build(name)
    x = torch.randn(shape)
    y = torch.randint(0, 10, (shape[0],))
    if mode == "train":
        model.train()
        opt = torch.optim.SGD(model.parameters(), lr=LEARNING_RATE)

        def run():
            opt.zero_grad(set_to_none=True)
            loss = F.cross_entropy(model(x), y)
            loss.backward()
            opt.step()
            return loss
    else:
        model.eval()

        def run():
            with torch.no_grad():
                return model(x)

    out = run()
    if mode == "infer" and tuple(out.shape) != (shape[0], 10):
        raise RuntimeError(f"{name}: output shape {tuple(out.shape)}, expected ({shape[0]}, 10)")
    if not torch.isfinite(out).all():
        raise RuntimeError(f"{name} {mode}: non-finite output")
    for _ in range(max(0, warmup - 1)):
        run()
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        run()
        times.append(time.perf_counter() - t0)

    peak = rss_bytes("VmHWM") if exact_peak else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    ms = statistics.median(times) * 1e3
    return {"network": name, "framework": "pytorch", "mode": mode, "ms": round(ms, 4),
            "images_per_s": round(shape[0] / ms * 1e3, 2), "peak_bytes": max(0, peak - base),
            "min_ms": round(min(times) * 1e3, 4), "runs": repeats, "threads": threads, "batch": shape[0],
            "torch": torch.__version__, "blas": blas_library()}


def describe(name):
    import torch

    model, shape = build(name)
    model.eval()
    print(f"{name}: input {tuple(shape)}, {sum(p.numel() for p in model.parameters())} parameters")
    x = torch.zeros(shape)
    with torch.no_grad():
        for layer in model:
            x = layer(x)
            params = sum(p.numel() for p in layer.parameters())
            print(f"  {type(layer).__name__:18s} -> {str(tuple(x.shape)):22s} {params:8d} parameters")


def parse_list(ap, text, valid, what):
    items = [s for s in text.split(",") if s]
    if not items or any(s not in valid for s in items):
        ap.error(f"--{what}: unknown or empty '{text}' (valid: {','.join(valid)})")
    return items


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--networks", default=",".join(NETWORKS))
    ap.add_argument("--modes", default=",".join(MODES))
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--repeats", type=int, default=10)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--describe", action="store_true")
    ap.add_argument("--worker", nargs=2, metavar=("NETWORK", "MODE"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.threads < 1 or args.warmup < 1 or args.repeats < 1:
        ap.error("--threads, --warmup and --repeats must be >= 1")
    networks = parse_list(ap, args.networks, NETWORKS, "networks")
    modes = parse_list(ap, args.modes, MODES, "modes")
    try:
        import torch  # noqa: F401  (fail early, with a message, where torch is missing)
    except ImportError as e:
        print(f"networks_torch: cannot import torch ({e}); install python3-torch", file=sys.stderr)
        return 2

    if args.describe:
        for name in networks:
            describe(name)
        return 0
    if args.worker:
        print(json.dumps(measure(*args.worker, args.threads, args.warmup, args.repeats, args.seed)))
        return 0

    failed, warned = 0, False
    for name in networks:
        for mode in modes:
            cmd = [sys.executable, os.path.abspath(__file__), "--worker", name, mode, "--threads", str(args.threads),
                   "--warmup", str(args.warmup), "--repeats", str(args.repeats), "--seed", str(args.seed)]
            # OpenMP and OpenBLAS size their pools from the environment, before set_num_threads.
            env = dict(os.environ, OMP_NUM_THREADS=str(args.threads), OPENBLAS_NUM_THREADS=str(args.threads))
            r = subprocess.run(cmd, stdout=subprocess.PIPE, text=True, env=env)
            if r.returncode != 0:
                print(f"networks_torch: {name} {mode} failed (exit {r.returncode})", file=sys.stderr)
                failed = 1
                continue
            line = r.stdout.strip().splitlines()[-1]
            blas = json.loads(line).get("blas") or ""
            if "/blas/" in blas and not warned:
                warned = True
                print(f"networks_torch: warning: {blas} is netlib's reference BLAS; install libopenblas0",
                      file=sys.stderr)
            print(line, flush=True)
    return failed


if __name__ == "__main__":
    sys.exit(main())
