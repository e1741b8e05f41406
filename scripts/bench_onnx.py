#!/usr/bin/env python3
"""kiln next to ONNX Runtime on the reference models, measured in the same run.

Usage: scripts/bench_onnx.py [MODELS_DIR [REAL_MODELS_DIR]]
  MODELS_DIR       the reference models (default ../shared/models)
  REAL_MODELS_DIR  yolov8n and pplcnet from fetch_real_models.py (default MODELS_DIR/real;
                   skipped when absent)
Environment: KILN=path/to/kiln uses that binary instead of building `kiln` in release mode.
Needs: pip install onnxruntime numpy.
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
REAL = sys.argv[2] if len(sys.argv) > 2 else os.path.join(MODELS, "real")
KILN = os.environ.get("KILN") or os.path.join(ROOT, "target", "release", "kiln")

# (name, model, input .npy, timed runs)
CASES = [
    ("mlp", os.path.join(MODELS, "mlp.onnx"), os.path.join(MODELS, "mlp.input.npy"), 200),
    ("lenet", os.path.join(MODELS, "lenet.onnx"), os.path.join(MODELS, "lenet.input.npy"), 200),
    ("resnet18", os.path.join(MODELS, "resnet18.onnx"), os.path.join(MODELS, "resnet18.input.npy"), 5),
    ("mobilenetv2", os.path.join(MODELS, "mobilenetv2.onnx"), os.path.join(MODELS, "mobilenetv2.input.npy"), 5),
    ("gpt_tiny", os.path.join(MODELS, "gpt_tiny.onnx"), os.path.join(MODELS, "gpt_tiny.input.npy"), 20),
    ("yolov8n", os.path.join(REAL, "yolov8n.onnx"), os.path.join(REAL, "yolov8n.input.images.npy"), 10),
    ("pplcnet", os.path.join(REAL, "pplcnet.onnx"), os.path.join(REAL, "pplcnet.input.x.npy"), 20),
]


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


def kiln_median_us(model, input_name, inp, threads, runs):
    out = subprocess.run(
        [KILN, "bench", model, "--input", f"{input_name}={inp}", "--threads", str(threads), "--runs", str(runs)],
        check=True, capture_output=True, text=True).stdout
    return float(re.search(r"median ([0-9.]+) us", out).group(1))


def main():
    if not os.environ.get("KILN"):
        subprocess.run(["cargo", "build", "--release", "-q", "-p", "kiln"], check=True, cwd=ROOT)
    only = set(os.environ.get("MODELS", "").split(",")) - {""}
    print("| model | kiln 1 thread | ORT 1 thread | kiln 2 threads | ORT 2 threads |")
    print("| --- | --- | --- | --- | --- |")
    for name, model, inp, runs in CASES:
        if only and name not in only:
            continue
        if not (os.path.exists(model) and os.path.exists(inp)):
            print(f"<!-- {name}: skipped, {model} or its input is absent -->", file=sys.stderr)
            continue
        x = np.load(inp)
        input_name = ort.InferenceSession(model, providers=["CPUExecutionProvider"]).get_inputs()[0].name
        row = [name]
        for threads in (1, 2):
            k = kiln_median_us(model, input_name, inp, threads, runs)
            o = ort_median_us(model, x, threads, runs)
            row += [f"{k:.1f} µs ({k / o:.2f}× ORT)", f"{o:.1f} µs"]
        print("| " + " | ".join([row[0], row[1], row[2], row[3], row[4]]) + " |")


if __name__ == "__main__":
    main()
