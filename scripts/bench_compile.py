#!/usr/bin/env python3
"""kiln's compile times: a cold build next to a rebuild after a weights-only change.

Usage: scripts/bench_compile.py [--rounds N] [--target T] [MODELS_DIR]
  MODELS_DIR  the reference models (default ../shared/models)
  --rounds N  builds of each kind per model; the table shows the best and the median (default 3)
  --target T  kiln's target (default `llvm -mcpu=native`)
Environment: KILN=path/to/kiln uses that binary instead of target/release/kiln;
MODELS=a,b times only those models (default resnet18,mobilenetv2).

Each round builds `kiln build MODEL --emit lib -o DIR` (what `Build` does in a build
script: kernels, weights, C API, static library):
  cold     into an empty DIR;
  weights  the same model with every float weight of over 1000 elements scaled by 1.01 (the
           same file name, in its own folder) into the DIR of the cold build, so that its
           kernel cache holds the kernels and only the weights are new.
Also prints, from the last build of each kind, what `<model>.timings.txt` says (pass total,
LLVM wall time and threads, kernel objects reused). Wall times on a shared machine drift:
compare the two columns of one run, not runs of different days.
Needs: pip install onnx numpy.
"""
import argparse
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np
import onnx
from onnx import numpy_helper

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ARGS = argparse.ArgumentParser(description=__doc__.split("\n")[0])
ARGS.add_argument("--rounds", type=int, default=3)
ARGS.add_argument("--target", default="llvm -mcpu=native")
ARGS.add_argument("models_dir", nargs="?", default=os.path.join(ROOT, "..", "shared", "models"))
OPTS = ARGS.parse_args()
KILN = os.environ.get("KILN") or os.path.join(ROOT, "target", "release", "kiln")
MODELS = os.environ.get("MODELS", "resnet18,mobilenetv2").split(",")


def build(model, out):
    """Seconds of one `kiln build --emit lib`, and its timings report."""
    start = time.perf_counter()
    subprocess.run([KILN, "build", model, "--emit", "lib", "--target", OPTS.target, "-o", out], check=True,
                   capture_output=True)
    seconds = time.perf_counter() - start
    name = os.path.splitext(os.path.basename(model))[0]
    with open(os.path.join(out, f"{name}.timings.txt")) as f:
        return seconds, f.read()


def scaled_copy(model, folder, factor):
    """`model` with its large float weights multiplied by `factor`, saved under its own name in `folder`."""
    m = onnx.load(model)
    for init in m.graph.initializer:
        a = numpy_helper.to_array(init)
        if a.dtype == np.float32 and a.size > 1000:
            init.CopyFrom(numpy_helper.from_array((a * factor).astype(np.float32), init.name))
    path = os.path.join(folder, os.path.basename(model))
    onnx.save(m, path)
    return path


def summary(timings):
    passes = re.search(r"pass timing \(total ([0-9.]+) ms\)", timings)
    objects = re.search(r"kernel objects: (.*)", timings)
    parts = []
    if passes:
        parts.append(f"passes {float(passes.group(1)):.0f} ms")
    if objects:
        parts.append(objects.group(1))
    return "; ".join(parts)


def cpu():
    try:
        with open("/proc/cpuinfo") as f:
            info = f.read()
        name = re.search(r"model name\s*:\s*(.*)", info).group(1)
        flags = re.search(r"flags\s*:\s*(.*)", info).group(1).split()
        wanted = [x for x in ("avx2", "fma", "avx512f", "avx512_vnni", "avx512_bf16") if x in flags]
        return f"{name}; {' '.join(wanted)}; {os.cpu_count()} cores"
    except (OSError, AttributeError):
        return "unknown CPU"


def main():
    print(f"CPU: {cpu()}; kiln target `{OPTS.target}`; `kiln build MODEL --emit lib`, {OPTS.rounds} rounds\n")
    print("| model | cold build (best / median) | weights-only rebuild (best / median) |")
    print("| --- | --- | --- |")
    notes = []
    for name in MODELS:
        model = os.path.join(OPTS.models_dir, f"{name}.onnx")
        if not os.path.exists(model):
            print(f"skipped {name}: {model} is not there", file=sys.stderr)
            continue
        cold, warm = [], []
        with tempfile.TemporaryDirectory() as tmp:
            for r in range(OPTS.rounds):
                out = os.path.join(tmp, f"out{r}")
                seconds, cold_timings = build(model, out)
                cold.append(seconds)
                folder = os.path.join(tmp, f"weights{r}")
                os.makedirs(folder)
                seconds, warm_timings = build(scaled_copy(model, folder, 1.01 + 0.01 * r), out)
                warm.append(seconds)
                shutil.rmtree(out)
        row = lambda t: f"{min(t):.2f} s / {statistics.median(t):.2f} s"
        print(f"| {name} | {row(cold)} | {row(warm)} |")
        notes.append(f"{name}: cold: {summary(cold_timings)}; weights-only: {summary(warm_timings)}")
    print()
    for n in notes:
        print(n)


if __name__ == "__main__":
    main()
