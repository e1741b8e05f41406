#!/usr/bin/env python3
"""kiln next to ONNX Runtime on the reference models, measured in the same run.

Usage: scripts/bench_onnx.py [MODELS_DIR]   (default ../shared/models)
Needs: pip install onnxruntime numpy; builds `kiln` in release mode.
Prints a markdown table: median latency per model, 1 and 2 threads.
"""
import os
import re
import subprocess
import sys
import time

import numpy as np
import onnxruntime as ort

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MODELS = sys.argv[1] if len(sys.argv) > 1 else os.path.join(ROOT, "..", "shared", "models")
KILN = os.path.join(ROOT, "target", "release", "kiln")


def ort_median_us(model, x, threads, runs):
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = threads
    opts.inter_op_num_threads = 1
    sess = ort.InferenceSession(model, opts, providers=["CPUExecutionProvider"])
    name = sess.get_inputs()[0].name
    for _ in range(10):
        sess.run(None, {name: x})
    times = []
    for _ in range(runs):
        t = time.perf_counter()
        sess.run(None, {name: x})
        times.append((time.perf_counter() - t) * 1e6)
    return sorted(times)[len(times) // 2]


def kiln_median_us(model, inp, threads, runs):
    out = subprocess.run(
        [KILN, "bench", model, "--input", f"x={inp}", "--threads", str(threads), "--runs", str(runs)],
        check=True, capture_output=True, text=True).stdout
    return float(re.search(r"median ([0-9.]+) us", out).group(1))


def main():
    subprocess.run(["cargo", "build", "--release", "-q", "-p", "kiln"], check=True, cwd=ROOT)
    print("| model | kiln 1 thread | ORT 1 thread | kiln 2 threads | ORT 2 threads |")
    print("| --- | --- | --- | --- | --- |")
    for name in ["mlp", "lenet", "resnet18", "mobilenetv2"]:
        model = os.path.join(MODELS, f"{name}.onnx")
        inp = os.path.join(MODELS, f"{name}.input.npy")
        x = np.load(inp)
        runs = 200 if name in ("mlp", "lenet") else 5
        row = [name]
        for threads in (1, 2):
            k = kiln_median_us(model, inp, threads, runs)
            o = ort_median_us(model, x, threads, runs)
            row += [f"{k:.1f} µs ({k / o:.2f}× ORT)", f"{o:.1f} µs"]
        print("| " + " | ".join([row[0], row[1], row[2], row[3], row[4]]) + " |")


if __name__ == "__main__":
    main()
