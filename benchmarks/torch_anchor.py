#!/usr/bin/env python3
"""PyTorch/cuDNN anchor for convgraph's GPU convolutions.

Times torch convolutions (forward, grad w.r.t. inputs, grad w.r.t. weights) on the standard
layer set with torch.backends.cudnn.benchmark = True (cuDNN autotunes each shape, as
convgraph's meta-optimizer does) and writes one JSON record per (layer, direction).

By default float32 is strict (TF32 off), matching convgraph's float32 compute type; pass
--tf32 to time PyTorch's default TF32 convolutions as well.

usage: torch_anchor.py [--layers FILE] [--json OUT] [--repeats N] [--tf32] [--only a,b]
Exit status: 0 ok, 1 a layer failed, 2 torch/CUDA unavailable (a JSON with "error" is
still written).
"""
import argparse
import json
import math
import os
import statistics
import sys
import time

DIRECTIONS = ("fwd", "bwd_data", "bwd_filter")


def parse_layers(text):
    layers = []
    for raw in text.splitlines():
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        f = line.split()
        if len(f) != 10:
            raise ValueError(f"layer line needs 10 columns: {raw!r}")
        axes = lambda s: tuple(int(v) for v in s.split("x"))
        layer = dict(name=f[0], N=int(f[1]), C=int(f[2]), K=int(f[3]), spatial=axes(f[4]), kernel=axes(f[5]),
                     stride=axes(f[6]), pad=axes(f[7]), dilation=axes(f[8]), groups=int(f[9]))
        nd = len(layer["spatial"])
        if not all(len(layer[k]) == nd for k in ("kernel", "stride", "pad", "dilation")):
            raise ValueError(f"axis counts differ in {raw!r}")
        layers.append(layer)
    return layers


def out_size(layer):
    return tuple((i + 2 * p - ((k - 1) * d + 1)) // s + 1 for i, k, s, p, d in
                 zip(layer["spatial"], layer["kernel"], layer["stride"], layer["pad"], layer["dilation"]))


def flops(layer):
    # 2 * N * K * (C/G) * prod(kernel) * prod(out): the same for every direction.
    return 2.0 * layer["N"] * layer["K"] * (layer["C"] // layer["groups"]) * math.prod(layer["kernel"]) * \
        math.prod(out_size(layer))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    here = os.path.dirname(os.path.abspath(__file__))
    ap.add_argument("--layers", default=os.path.join(here, "layers.txt"))
    ap.add_argument("--json", default="torch_anchor.json")
    ap.add_argument("--repeats", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--tf32", action="store_true", help="also time with TF32 allowed (PyTorch's default)")
    ap.add_argument("--only", default="", help="comma-separated layer names")
    args = ap.parse_args()

    result = {"tool": "torch_anchor", "records": [], "layers_file": None}
    try:
        import torch
        import torch.nn.functional as F
    except Exception as e:  # no torch on this machine
        result["error"] = f"cannot import torch: {e}"
        json.dump(result, open(args.json, "w"), indent=1)
        print(result["error"], file=sys.stderr)
        return 2
    if not torch.cuda.is_available():
        result["error"] = "torch.cuda.is_available() is False"
        json.dump(result, open(args.json, "w"), indent=1)
        print(result["error"], file=sys.stderr)
        return 2

    layers = parse_layers(open(args.layers).read())
    result["layers_file"] = os.path.abspath(args.layers)
    if args.only:
        keep = set(args.only.split(","))
        layers = [l for l in layers if l["name"] in keep]

    dev = torch.device("cuda")
    torch.backends.cudnn.benchmark = True
    result.update(torch=torch.__version__, cuda=torch.version.cuda, cudnn=torch.backends.cudnn.version(),
                  device=torch.cuda.get_device_name(0), repeats=args.repeats, warmup=args.warmup)
    conv = {1: F.conv1d, 2: F.conv2d, 3: F.conv3d}

    def timed(fn):
        for _ in range(args.warmup):  # the first call also runs cuDNN's autotuner
            fn()
        torch.cuda.synchronize()
        times = []
        for _ in range(args.repeats):
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record()
            fn()
            b.record()
            b.synchronize()
            times.append(a.elapsed_time(b))
        return times

    failures = 0
    modes = [False, True] if args.tf32 else [False]
    for tf32 in modes:
        torch.backends.cudnn.allow_tf32 = tf32
        torch.backends.cuda.matmul.allow_tf32 = tf32
        for layer in layers:
            nd = len(layer["spatial"])
            g = torch.Generator(device=dev).manual_seed(1)
            x = torch.rand((layer["N"], layer["C"]) + layer["spatial"], device=dev, generator=g) * 2 - 1
            w = torch.rand((layer["K"], layer["C"] // layer["groups"]) + layer["kernel"], device=dev, generator=g) * 2 - 1
            kw = dict(stride=layer["stride"], padding=layer["pad"], dilation=layer["dilation"], groups=layer["groups"])
            dy = torch.rand((layer["N"], layer["K"]) + out_size(layer), device=dev, generator=g) * 2 - 1

            def backward(mask):
                return torch.ops.aten.convolution_backward(dy, x, w, None, list(layer["stride"]), list(layer["pad"]),
                                                           list(layer["dilation"]), False, [0] * nd, layer["groups"],
                                                           mask)

            fns = {"fwd": lambda: conv[nd](x, w, **kw),
                   "bwd_data": lambda: backward([True, False, False]),
                   "bwd_filter": lambda: backward([False, True, False])}
            for direction in DIRECTIONS:
                rec = dict(layer=layer["name"], direction=direction, dtype="float32", tf32=tf32,
                           flops=flops(layer))
                try:
                    t0 = time.time()
                    times = timed(fns[direction])
                    med = statistics.median(times)
                    rec.update(ms_median=med, ms_min=min(times), gflops=flops(layer) / (med * 1e6),
                               wall_s=time.time() - t0)
                    print(f"{layer['name']:16s} {direction:10s} tf32={int(tf32)} {med:9.4f} ms "
                          f"{rec['gflops']:9.1f} GFLOP/s", flush=True)
                except Exception as e:
                    failures += 1
                    rec["error"] = f"{type(e).__name__}: {e}"
                    print(f"{layer['name']:16s} {direction:10s} FAILED {rec['error']}", flush=True)
                result["records"].append(rec)
    with open(args.json, "w") as f:
        json.dump(result, f, indent=1)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
