#!/usr/bin/env python3
"""Per-kernel GFLOP/s of a model's convolutions, from kiln's own profile.

Usage: scripts/kernel_gflops.py MODEL.onnx INPUT_NAME=INPUT.npy [--target T] [--threads N] [--runs N]
  Builds the model's TIR (`kiln build --emit tir`) for the input's shape, runs
  `kiln bench --profile`, and prints each kernel's time (slowest first) with, for
  convolutions, the GFLOP/s and the input / weight / output shapes read from the
  kernel's signature (a packed OIHW<k>o weight counted as O = blocks × k).
  Compare the figures with the machine's FMA peak (~100 GFLOP/s per Zen 3 core on
  AVX2) and, for ONNX Runtime, with scripts/ort_profile.py.
Environment: KILN=path/to/kiln (default target/release/kiln).
"""
import argparse
import os
import re
import subprocess
import sys
import tempfile

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ARGS = argparse.ArgumentParser(description=__doc__.split("\n")[0])
ARGS.add_argument("model")
ARGS.add_argument("input", help="NAME=PATH.npy")
ARGS.add_argument("--target", default="llvm -mcpu=native")
ARGS.add_argument("--threads", type=int, default=1)
ARGS.add_argument("--runs", type=int, default=20)
OPTS = ARGS.parse_args()
KILN = os.environ.get("KILN") or os.path.join(ROOT, "target", "release", "kiln")

name, path = OPTS.input.split("=", 1)
shape = "x".join(str(d) for d in np.load(path).shape)
with tempfile.TemporaryDirectory() as out:
    subprocess.run([KILN, "build", OPTS.model, "--input-shape", f"{name}={shape}", "--target", OPTS.target,
                    "--emit", "tir", "-o", out], check=True, capture_output=True)
    tir = open(next(os.path.join(out, f) for f in os.listdir(out) if f.endswith(".tir"))).read()
prof = subprocess.run([KILN, "bench", OPTS.model, "--input", OPTS.input, "--threads", str(OPTS.threads),
                       "--runs", str(OPTS.runs), "--profile", "--target", OPTS.target],
                      check=True, capture_output=True, text=True)
text = prof.stdout + prof.stderr

signatures = {}
for m in re.finditer(r"def (\w+)\((.*)\):", tir):
    signatures[m.group(1)] = [[int(x) for x in s.split(",")]
                              for s in re.findall(r"T\.Buffer\(\[([\d, ]+)\]", m.group(2))]

for m in re.finditer(r"^\s*([\d.]+) us\s+([\d.]+)%\s+(\d+)×.*?(\w+)$", text, re.M):
    us, calls, kernel = float(m.group(1)), int(m.group(3)), m.group(4)
    shapes = signatures.get(kernel)
    line = f"{us:9.1f} us {calls:2d}× {kernel:44s}"
    if shapes and "conv2d" in kernel and len(shapes) >= 3:
        # The weight: the packed (5-D) parameter where there is one — a fused
        # prologue (a residual add before a downsampling convolution) puts
        # other parameters first — else the second; the input just before it.
        k = next((i for i, s in enumerate(shapes[1:-1], 1) if len(s) == 5), 1)
        x, w, y = shapes[k - 1], shapes[k], shapes[-1]
        out_channels = w[0] * (w[4] if len(w) == 5 else 1)
        per_output = int(np.prod(w)) // out_channels
        flops = 2 * int(np.prod(y)) * per_output * calls
        line += f" {flops / us / 1e3:6.1f} GFLOP/s  in {x} w {w} out {y}"
    print(line)
print(text.strip().splitlines()[-1])
