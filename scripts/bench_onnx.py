#!/usr/bin/env python3
"""kiln next to ONNX Runtime on the reference models, measured in the same run.

Usage: scripts/bench_onnx.py [--target T] [--rounds N] [--tuning DIR] [--bf16] [MODELS_DIR [REAL_MODELS_DIR]]
  MODELS_DIR       the reference models (default ../shared/models); its `quantized/` (from
                   scripts/quantize_models.py) adds resnet18 and mobilenetv2 in QDQ and
                   QOperator form (`resnet18.qdq`, …), next to ORT's int8 kernels
  REAL_MODELS_DIR  yolov8n and pplcnet from fetch_real_models.py (default MODELS_DIR/real;
                   skipped when absent)
  --target T       kiln's target (default `llvm -mcpu=native`); `llvm -mcpu=znver3` measures
                   the AVX2 code path on an AMD machine, `llvm -mcpu=znver3 -mattr=-sse4a` on an
                   Intel one (Zen code may use AMD's SSE4A, which kiln refuses on Intel CPUs)
  --rounds N       pairs of batches: kiln and ORT alternate batch by batch, N times each
                   (default 9); each latency is the median of its batches' medians, and kiln / ORT
                   the median of the pairs' ratios
  --tuning DIR     also time kiln with the tuning log DIR/<model>.json (from `kiln tune`), in
                   the same rounds, and show its speed-up over the untuned build
  --bf16           also time each float model in kiln's bf16 precision (`--precision bf16`,
                   rows `<model>.bf16`) next to ONNX Runtime's float32 run of the same model;
                   skipped, with the reason, where kiln refuses it (no AMX-BF16)
Environment: KILN=path/to/kiln uses that binary instead of building `kiln` in release mode;
MODELS=a,b runs only those models.
Needs: pip install onnxruntime numpy.
Prints the CPU (model name and its vector features) and a markdown table: median latency per
model, 1 and 2 threads, with kiln's ratio to ONNX Runtime measured in the same run, and each
latency as GFLOP/s (the model's convolution and matrix-product work, counted from the ONNX graph
as a direct computation would do it) next to the CPU's fp32 FMA peak measured in the same rounds
(`kiln peak`). A second table gives kiln / ORT for the fastest run of all batches.

Why batches in pairs: on a shared machine slow phases last seconds and move either runtime's
medians by 30 % or more. kiln runs as one `kiln bench --paced` process per model and thread
count (compiled once), timing a batch whenever this script asks; ORT's batch runs next to it,
a moment later (their orders alternating), so each pair meets the same phase.
"""
import argparse
import os
import re
import statistics
import subprocess
import sys
import time

import numpy as np
import onnxruntime as ort

from kiln_paced import PacedKiln

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ARGS = argparse.ArgumentParser(description=__doc__.split("\n")[0])
ARGS.add_argument("--target", default="llvm -mcpu=native")
ARGS.add_argument("--rounds", type=int, default=9)
ARGS.add_argument("--tuning")
ARGS.add_argument("--bf16", action="store_true")
ARGS.add_argument("models_dir", nargs="?", default=os.path.join(ROOT, "..", "shared", "models"))
ARGS.add_argument("real_models_dir", nargs="?")
OPTS = ARGS.parse_args()
MODELS = OPTS.models_dir
REAL = OPTS.real_models_dir or os.path.join(MODELS, "real")
KILN = os.environ.get("KILN") or os.path.join(ROOT, "target", "release", "kiln")

# (name, model, input .npy, runs per batch): a batch of kiln's takes at least ~40 ms — after the
# pause between batches this VM runs slowly for a few milliseconds (LeNet at two threads: 20-25 µs
# a run in batches of 4 ms, 13-14 µs in batches of 40 ms, as in one long `kiln bench`).
CASES = [
    ("mlp", os.path.join(MODELS, "mlp.onnx"), os.path.join(MODELS, "mlp.input.npy"), 5000),
    ("lenet", os.path.join(MODELS, "lenet.onnx"), os.path.join(MODELS, "lenet.input.npy"), 2000),
    ("resnet18", os.path.join(MODELS, "resnet18.onnx"), os.path.join(MODELS, "resnet18.input.npy"), 4),
    ("mobilenetv2", os.path.join(MODELS, "mobilenetv2.onnx"), os.path.join(MODELS, "mobilenetv2.input.npy"), 10),
    ("gpt_tiny", os.path.join(MODELS, "gpt_tiny.onnx"), os.path.join(MODELS, "gpt_tiny.input.npy"), 20),
    ("yolov8n", os.path.join(REAL, "yolov8n.onnx"), os.path.join(REAL, "yolov8n.input.images.npy"), 4),
    ("pplcnet", os.path.join(REAL, "pplcnet.onnx"), os.path.join(REAL, "pplcnet.input.x.npy"), 20),
]
# The bf16 precision: kiln `--precision bf16` against ORT's float32 run of the same model.
if OPTS.bf16:
    CASES += [(f"{name}.bf16", model, inp, runs) for name, model, inp, runs in list(CASES)]
# Quantized by scripts/quantize_models.py (int8; ORT runs its int8 kernels): skipped when absent.
QUANTIZED = os.path.join(MODELS, "quantized")
for base, runs in (("resnet18", 4), ("mobilenetv2", 10)):
    for fmt in ("qdq", "qop"):
        CASES.append((f"{base}.{fmt}", os.path.join(QUANTIZED, f"{base}.{fmt}.onnx"),
                      os.path.join(MODELS, f"{base}.input.npy"), runs))


# After a batch, before the other runtime's: ONNX Runtime's idle intra-op workers spin 2^20 times
# (`log2_spin` in its thread pool) before they block — on this VM beyond 50 ms at times: kiln's
# 2-thread batches that started 5 ms after ORT's took 1.5-2x as long (MobileNetV2 9.6-14.6 ms
# against 6.1-7.9), and LeNet's 20-22 µs against 13-14 at 50 ms; none at 200 ms. kiln's workers
# spin for 200 µs.
PAUSE_AFTER_ORT_S = 0.25
PAUSE_AFTER_KILN_S = 0.005


def median_and_fastest(times):
    times = sorted(times)
    return times[len(times) // 2], times[0]


class OrtBatches:
    """An ONNX Runtime session, warmed up; `batch()` times `runs` runs: (median, fastest) in µs."""

    def __init__(self, model, x, threads, runs):
        opts = ort.SessionOptions()
        opts.intra_op_num_threads = threads
        opts.inter_op_num_threads = 1
        self.sess = ort.InferenceSession(model, opts, providers=["CPUExecutionProvider"])
        self.feed = {self.sess.get_inputs()[0].name: x}
        self.runs = runs
        self.pause_after = PAUSE_AFTER_ORT_S
        for _ in range(10):
            self.sess.run(None, self.feed)

    def batch(self):
        times = []
        for _ in range(self.runs):
            t = time.perf_counter()
            self.sess.run(None, self.feed)
            times.append((time.perf_counter() - t) * 1e6)
        return median_and_fastest(times)

    def close(self):
        self.sess = None


class KilnBatches(PacedKiln):
    """A `kiln bench --paced` process (the model compiled once); `batch()` has it time `runs` runs:
    (median, fastest) in µs, as kiln measures them."""

    def __init__(self, model, input_name, inp, threads, runs, tuning=None, precision="fp32"):
        args = [KILN, "bench", model, "--input", f"{input_name}={inp}", "--threads", str(threads), "--runs",
                str(runs), "--target", OPTS.target, "--precision", precision]
        super().__init__(args + (["--tuning", tuning] if tuning else []))
        self.pause_after = PAUSE_AFTER_KILN_S

    def batch(self):
        return super().batch()[:2]


def paired_batches(sides, pairs):
    """Each side's batch results over `pairs` rounds, the sides' order alternating round by round."""
    results = [[] for _ in sides]
    pause = PAUSE_AFTER_ORT_S
    for i in range(pairs):
        order = list(range(len(sides)))
        if i % 2:
            order.reverse()
        for k in order:
            time.sleep(pause)
            results[k].append(sides[k].batch())
            pause = sides[k].pause_after
    return results


def model_gflop(model, x):
    """Floating-point operations of one run, in GFLOP: 2 per multiply-add of every Conv, Gemm and
    MatMul (as a direct computation does them; Winograd does fewer), with shapes inferred for the
    input's shape."""
    import onnx
    from onnx import numpy_helper, shape_inference

    m = onnx.load(model)
    graph_input = next(i for i in m.graph.input if i.name not in {t.name for t in m.graph.initializer})
    for d, n in zip(graph_input.type.tensor_type.shape.dim, x.shape):
        d.ClearField("dim_param")
        d.dim_value = n
    m = shape_inference.infer_shapes(m)
    shapes = {t.name: list(t.dims) for t in m.graph.initializer}
    for v in list(m.graph.value_info) + list(m.graph.input) + list(m.graph.output):
        dims = v.type.tensor_type.shape.dim
        if all(d.HasField("dim_value") for d in dims):
            shapes[v.name] = [d.dim_value for d in dims]
    for node in m.graph.node:
        if node.op_type == "Constant":
            shapes[node.output[0]] = list(numpy_helper.to_array(node.attribute[0].t).shape)
    flops = 0
    for node in m.graph.node:
        out = shapes.get(node.output[0])
        if out is None:
            continue
        if node.op_type in ("Conv", "QLinearConv"):
            w = shapes[node.input[1 if node.op_type == "Conv" else 3]]
            flops += 2 * int(np.prod(out)) * int(np.prod(w[1:]))
        elif node.op_type in ("Gemm", "MatMul", "QGemm", "QLinearMatMul"):
            a = shapes[node.input[0]]
            transposed = node.op_type == "Gemm" and any(at.name == "transA" and at.i for at in node.attribute)
            flops += 2 * int(np.prod(out)) * (a[-2] if transposed else a[-1])
    return flops / 1e9


def fma_peak(threads):
    """This CPU's fp32 FMA peak in GFLOP/s on `threads` threads, measured now (`kiln peak`)."""
    out = subprocess.run([KILN, "peak", "--threads", str(threads)], check=True, capture_output=True, text=True).stdout
    return float(re.findall(r"peak: ([0-9.]+) GFLOP/s", out)[-1])


def cpu_description():
    """The CPU's model name and the vector features that decide kiln's kernels."""
    model, flags = "unknown CPU", set()
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                key, _, value = line.partition(":")
                if key.strip() == "model name":
                    model = value.strip()
                elif key.strip() in ("flags", "Features"):
                    flags = set(value.split())
    except OSError:
        pass
    wanted = ["avx2", "fma", "avx512f", "avx512_vnni", "avx512_bf16", "avx_vnni", "amx_tile", "asimd",
              "asimddp", "bf16"]
    return f"{model}; {' '.join(f for f in wanted if f in flags) or 'no AVX2/AVX-512/NEON'}"


def main():
    if not os.environ.get("KILN"):
        subprocess.run(["cargo", "build", "--release", "-q", "-p", "kiln"], check=True, cwd=ROOT)
    only = set(os.environ.get("MODELS", "").split(",")) - {""}
    print(f"CPU: {cpu_description()}; {os.cpu_count()} cores; kiln target `{OPTS.target}`; "
          f"ONNX Runtime {ort.__version__}; medians of {OPTS.rounds} batches each, kiln and ORT alternating "
          f"batch by batch; kiln / ORT = the median of the batch pairs' ratios\n")
    tuned_header = " kiln tuned 1 thread | kiln tuned 2 threads |" if OPTS.tuning else ""
    print("| model | kiln 1 thread | ORT 1 thread | kiln 2 threads | ORT 2 threads |" + tuned_header)
    print("| --- | --- | --- | --- | --- |" + (" --- | --- |" if OPTS.tuning else ""))
    minima = []
    for name, model, inp, runs in CASES:
        if only and name not in only:
            continue
        if not (os.path.exists(model) and os.path.exists(inp)):
            print(f"<!-- {name}: skipped, {model} or its input is absent -->", file=sys.stderr)
            continue
        x = np.load(inp)
        input_name = ort.InferenceSession(model, providers=["CPUExecutionProvider"]).get_inputs()[0].name
        log = os.path.join(OPTS.tuning, f"{name}.json") if OPTS.tuning else None
        log = log if log and os.path.exists(log) else None
        precision = "bf16" if name.endswith(".bf16") else "fp32"
        if precision == "bf16":
            probe = KilnBatches(model, input_name, inp, 1, 1, precision=precision)
            try:
                probe.batch()
            except RuntimeError as e:
                print(f"<!-- {name}: skipped, {e} -->", file=sys.stderr)
                continue
            finally:
                probe.close()
        # A quantized model's work is its float original's (ONNX shape inference stops at
        # com.microsoft operators, which would leave most of a QOperator graph uncounted).
        original = os.path.join(MODELS, name.split(".")[0] + ".onnx")
        quantized = "." in name and precision == "fp32"
        gflop = model_gflop(original if quantized and os.path.exists(original) else model, x)
        fastest_ratios = []
        work = f"{gflop:.2f} GFLOP" if gflop >= 0.1 else f"{gflop * 1e3:.2f} MFLOP"
        row, tuned = [f"{name} ({work})"], []
        for threads in (1, 2):
            peak = fma_peak(threads)
            sides = [KilnBatches(model, input_name, inp, threads, runs, precision=precision),
                     OrtBatches(model, x, threads, runs)]
            if log:
                sides.append(KilnBatches(model, input_name, inp, threads, runs, log, precision))
            try:
                results = paired_batches(sides, max(1, OPTS.rounds))
            finally:
                for side in sides:
                    side.close()
            peak = max(peak, fma_peak(threads))
            medians = [statistics.median(m for m, _ in r) for r in results]
            fastest = [min(f for _, f in r) for r in results]
            # Each pair's ratio: both batches met the same phase of the machine.
            ratio = statistics.median(km / om for (km, _), (om, _) in zip(results[0], results[1]))
            (k, o), (k_min, o_min) = medians[:2], fastest[:2]
            fastest_ratios.append(f"{k_min / o_min:.2f}×")
            rate = lambda us: f"{gflop / us * 1e6:.1f} GFLOP/s = {100 * gflop / us * 1e6 / peak:.0f}% of {peak:.0f}"
            row += [f"{k:.1f} µs ({ratio:.2f}× ORT; {rate(k)})", f"{o:.1f} µs ({rate(o)})"]
            if OPTS.tuning:
                if log:
                    t = medians[2]
                    gain = statistics.median(km / tm for (km, _), (tm, _) in zip(results[0], results[2]))
                    tuned.append(f"{t:.1f} µs ({gain:.2f}× faster, {t / o:.2f}× ORT)")
                else:
                    tuned.append("no log")
        print("| " + " | ".join(row + tuned) + " |")
        minima.append(f"| {name} | {' | '.join(fastest_ratios)} |")
    # Fastest runs: less moved by a shared machine's slow phases than medians.
    print("\nkiln / ORT, fastest run of all batches:\n")
    print("| model | 1 thread | 2 threads |\n| --- | --- | --- |\n" + "\n".join(minima))


if __name__ == "__main__":
    main()
