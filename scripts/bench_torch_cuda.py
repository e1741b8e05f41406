#!/usr/bin/env python3
"""kiln next to PyTorch on one NVIDIA GPU: batch-1 latency of the reference models.

Usage: scripts/bench_torch_cuda.py MODELS_DIR KILN [PTX_DIR] [--runs N]

MODELS_DIR holds <model>.onnx, <model>.input.npy and <model>.output.npy (the
reference models). KILN is a kiln binary with feature `cuda`; with PTX_DIR it
runs the PTX there (`<model>.ptx`, from `kiln build --target cuda --emit ptx`
on a machine with LLVM), so the GPU machine needs no LLVM.

PyTorch runs the same ONNX graph (weights and all) as eager torch operators
(cuDNN convolutions), float32, TF32 off, input already on the GPU, and again
replayed as a CUDA graph; kiln likewise, kernel by kernel and as a CUDA graph.
Each figure is the median of the timed runs after warm-up, all in this one run.
Both PyTorch outputs are checked against ONNX Runtime's reference output first.
Prints a markdown table with the GPU's name.
"""
import argparse
import os
import re
import subprocess
import sys
import time

import numpy as np
import onnx
import torch
import torch.nn.functional as F
from onnx import numpy_helper

MODELS = ["mlp", "lenet", "resnet18", "mobilenetv2"]


class OnnxAsTorch(torch.nn.Module):
    """The ONNX graph's nodes as torch operators (the ops of the reference models)."""

    def __init__(self, path, device):
        super().__init__()
        g = onnx.load(path).graph
        host = {i.name: numpy_helper.to_array(i) for i in g.initializer}
        self.consts = {name: torch.from_numpy(a.copy()).to(device) for name, a in host.items()}
        self.input = next(i.name for i in g.input if i.name not in self.consts)
        self.output = g.output[0].name
        self.nodes = []
        for n in g.node:
            ins = list(n.input)
            attrs = {a.name: onnx.helper.get_attribute_value(a) for a in n.attribute}
            # Bounds and shapes read on the host at load time: reading a GPU
            # tensor inside forward() synchronizes, which a CUDA graph capture refuses.
            if n.op_type == "Clip":
                for k, key in ((1, "min"), (2, "max")):
                    if len(ins) > k and ins[k]:
                        attrs[key] = float(host[ins[k]])
                ins = ins[:1]
            elif n.op_type == "Reshape":
                attrs["shape"] = [int(v) for v in host[ins[1]].tolist()]
                ins = ins[:1]
            self.nodes.append((n.op_type, ins, n.output[0], attrs))

    def forward(self, x):
        env = dict(self.consts)
        env[self.input] = x
        for op, ins, out, a in self.nodes:
            i = [env[k] if k else None for k in ins]
            env[out] = apply(op, i, a)
        return env[self.output]


def pads2d(a):
    p = a.get("pads", [0, 0, 0, 0])
    if p[:2] != p[2:]:
        raise NotImplementedError(f"asymmetric pads {p}")
    return p[:2]


def apply(op, i, a):
    if op == "Conv":
        return F.conv2d(i[0], i[1], i[2] if len(i) > 2 else None, stride=a.get("strides", [1, 1]),
                        padding=pads2d(a), dilation=a.get("dilations", [1, 1]), groups=a.get("group", 1))
    if op == "BatchNormalization":
        return F.batch_norm(i[0], i[3], i[4], i[1], i[2], False, 0.0, a.get("epsilon", 1e-5))
    if op == "Relu":
        return F.relu(i[0])
    if op == "MaxPool":
        k = a["kernel_shape"]
        return F.max_pool2d(i[0], k, a.get("strides", k), pads2d(a), ceil_mode=bool(a.get("ceil_mode", 0)))
    if op == "AveragePool":
        k = a["kernel_shape"]
        return F.avg_pool2d(i[0], k, a.get("strides", k), pads2d(a), ceil_mode=bool(a.get("ceil_mode", 0)),
                            count_include_pad=bool(a.get("count_include_pad", 0)))
    if op == "GlobalAveragePool":
        return i[0].mean(dim=(2, 3), keepdim=True)
    if op == "Add":
        return i[0] + i[1]
    if op == "Mul":
        return i[0] * i[1]
    if op == "Flatten":
        return torch.flatten(i[0], a.get("axis", 1))
    if op == "Reshape":
        return i[0].reshape(a["shape"])
    if op == "MatMul":
        return i[0] @ i[1]
    if op == "Gemm":
        x = i[0].T if a.get("transA", 0) else i[0]
        w = i[1].T if a.get("transB", 0) else i[1]
        y = a.get("alpha", 1.0) * (x @ w)
        return y + a.get("beta", 1.0) * i[2] if len(i) > 2 and i[2] is not None else y
    if op == "Clip":
        return torch.clamp(i[0], a.get("min"), a.get("max"))
    if op == "Softmax":
        return torch.softmax(i[0], a.get("axis", -1))
    raise NotImplementedError(op)


def median_us(fn, runs):
    for _ in range(20):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(runs):
        t = time.perf_counter()
        fn()
        torch.cuda.synchronize()
        times.append((time.perf_counter() - t) * 1e6)
    return sorted(times)[len(times) // 2]


def torch_us(path, x, want, runs):
    model = OnnxAsTorch(path, "cuda").eval()
    xs = torch.from_numpy(x).cuda()
    with torch.no_grad():
        got = model(xs).cpu().numpy()
        check("PyTorch eager", path, got, want)
        eager = median_us(lambda: model(xs), runs)
        graph = torch.cuda.CUDAGraph()
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(3):
                model(xs)
        torch.cuda.current_stream().wait_stream(side)
        with torch.cuda.graph(graph):
            ys = model(xs)
        graph.replay()
        torch.cuda.synchronize()
        check("PyTorch CUDA graph", path, ys.cpu().numpy(), want)
        replay = median_us(graph.replay, runs)
    return eager, replay


def check(what, path, got, want):
    err = float(np.max(np.abs(got - want)))
    scale = float(np.max(np.abs(want)))
    if err > 1e-3 * scale:
        sys.exit(f"{what} disagrees with the reference on {path}: max abs error {err} (scale {scale})")


def kiln_us(kiln, path, inp, ptx, runs):
    cmd = [kiln, "bench", path, "--target", "cuda", "--input", f"x={inp}", "--runs", str(runs)]
    if ptx:
        cmd += ["--ptx", ptx]
    out = subprocess.run(cmd, capture_output=True, text=True)
    if out.returncode != 0:
        sys.exit(f"{' '.join(cmd)} failed:\n{out.stdout}{out.stderr}")
    found = {mode: float(us) for us, mode in re.findall(r"median ([\d.]+) us.*?\((launches|graph)\)", out.stdout)}
    return found["launches"], found["graph"]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("models_dir")
    ap.add_argument("kiln")
    ap.add_argument("ptx_dir", nargs="?")
    ap.add_argument("--runs", type=int, default=200)
    a = ap.parse_args()
    models_dir, kiln, ptx_dir, runs = a.models_dir, a.kiln, a.ptx_dir, a.runs
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.benchmark = True
    gpu = torch.cuda.get_device_name()
    print(f"GPU: {gpu}; PyTorch {torch.__version__}; median of {runs} runs, batch 1, float32\n")
    print("| model | kiln, launches (µs) | kiln, CUDA graph (µs) | PyTorch eager (µs) | PyTorch, CUDA graph (µs) "
          "| PyTorch eager / kiln graph | PyTorch graph / kiln graph |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for m in MODELS:
        path = os.path.join(models_dir, f"{m}.onnx")
        if not os.path.exists(path):
            continue
        inp = os.path.join(models_dir, f"{m}.input.npy")
        x = np.load(inp)
        want = np.load(os.path.join(models_dir, f"{m}.output.npy"))
        ptx = os.path.join(ptx_dir, f"{m}.ptx") if ptx_dir else None
        k_launch, k_graph = kiln_us(kiln, path, inp, ptx, runs)
        t_eager, t_graph = torch_us(path, x, want, runs)
        print(f"| {m} | {k_launch:.1f} | {k_graph:.1f} | {t_eager:.1f} | {t_graph:.1f} "
              f"| {t_eager / k_graph:.2f}× | {t_graph / k_graph:.2f}× |", flush=True)


if __name__ == "__main__":
    main()
