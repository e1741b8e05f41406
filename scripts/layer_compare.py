#!/usr/bin/env python3
"""kiln's kernels next to ONNX Runtime's nodes, layer by layer, measured in alternating rounds.

Usage: scripts/layer_compare.py MODEL.onnx NAME=INPUT.npy [--threads N] [--rounds R] [--runs N]
  Each round runs `kiln bench MODEL --profile` (per-kernel medians) and then ONNX Runtime with
  its profiler on (per-node medians over --runs runs), so that both see the same phase of a
  shared machine; the table keeps each side's fastest round. Kernels and nodes are matched by
  their data input's and output's shapes (kiln's from the kernel's TIR signature, ORT's from the
  profiler) and, for convolutions, their window, in model order where several share them; a kiln kernel called k times is compared
  per call. The last column is kiln / ORT: above 1, kiln's layer is slower.
Environment: KILN=path/to/kiln (default target/release/kiln).
Needs: pip install onnxruntime numpy.
"""
import argparse
import collections
import json
import os
import re
import statistics
import subprocess
import tempfile

import numpy as np
import onnxruntime as ort

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ARGS = argparse.ArgumentParser(description=__doc__.split("\n")[0])
ARGS.add_argument("model")
ARGS.add_argument("input", help="NAME=PATH.npy")
ARGS.add_argument("--threads", type=int, default=1)
ARGS.add_argument("--rounds", type=int, default=3)
ARGS.add_argument("--runs", type=int, default=100)
OPTS = ARGS.parse_args()
KILN = os.environ.get("KILN", os.path.join(ROOT, "target/release/kiln"))
name, path = OPTS.input.split("=", 1)
x = np.load(path)


def window(weight):
    """A convolution weight's kernel height and width (OIHW, packed OIHW<k>o or ORT's blocked
    6-D weights all keep them at 2 and 3); () for anything else."""
    return tuple(weight[2:4]) if len(weight) >= 4 else ()


def kiln_signatures():
    """Each kernel's (data input shape, output shape, window) from `kiln build --emit tir`."""
    with tempfile.TemporaryDirectory() as out:
        shape = "x".join(str(d) for d in x.shape)
        subprocess.run([KILN, "build", OPTS.model, "--input-shape", f"{name}={shape}", "--emit", "tir", "-o", out],
                       check=True, capture_output=True)
        tir = open(next(os.path.join(out, f) for f in os.listdir(out) if f.endswith(".tir"))).read()
    sigs = {}
    for m in re.finditer(r"def (\w+)\((.*)\):", tir):
        shapes = [tuple(int(v) for v in s.split(",")) for s in re.findall(r"T\.Buffer\(\[([\d, ]+)\]", m.group(2))]
        if len(shapes) >= 2:
            conv = "conv2d" in m.group(1) and len(shapes) > 2
            sigs[m.group(1)] = (shapes[0], shapes[-1], window(shapes[1]) if conv else ())
    return sigs


def kiln_round():
    """Per kernel: (µs per call, calls)."""
    p = subprocess.run([KILN, "bench", OPTS.model, "--input", OPTS.input, "--threads", str(OPTS.threads),
                        "--runs", str(OPTS.runs), "--profile"], check=True, capture_output=True, text=True)
    out = {}
    for m in re.finditer(r"^\s*([\d.]+) us\s+[\d.]+%\s+(\d+)×.*?(\w+)$", p.stdout + p.stderr, re.M):
        out[m.group(3)] = (float(m.group(1)) / int(m.group(2)), int(m.group(2)))
    return out


def ort_session():
    """An ONNX Runtime session with its profiler on, at --threads."""
    options = ort.SessionOptions()
    options.intra_op_num_threads = OPTS.threads
    options.inter_op_num_threads = 1
    options.enable_profiling = True
    return ort.InferenceSession(OPTS.model, options, providers=["CPUExecutionProvider"])


def ort_round():
    """Per node, in execution order: (median µs, input shape, output shape, window, op)."""
    # Warm-up runs in a session of their own (its trace discarded), then the timed ones.
    sess = ort_session()
    feed = {sess.get_inputs()[0].name: x}
    for _ in range(10):
        sess.run(None, feed)
    os.remove(sess.end_profiling())
    sess = ort_session()
    for _ in range(OPTS.runs):
        sess.run(None, feed)
    trace = sess.end_profiling()
    events = [e for e in json.load(open(trace)) if e.get("cat") == "Node" and e["name"].endswith("_kernel_time")]
    os.remove(trace)
    times, desc, order = collections.defaultdict(list), {}, []
    for e in events:
        node = e["name"][: -len("_kernel_time")]
        if node not in desc:
            order.append(node)
            ins = [tuple(list(s.values())[0]) for s in e["args"].get("input_type_shape", [])[:2]]
            outs = [tuple(list(s.values())[0]) for s in e["args"].get("output_type_shape", [])[:1]]
            win = window(ins[1]) if len(ins) > 1 and e["args"]["op_name"] == "Conv" else ()
            desc[node] = (ins[0] if ins else (), outs[0] if outs else (), win, e["args"]["op_name"])
        times[node].append(e["dur"])
    return {n: (statistics.median(times[n]),) + desc[n] for n in order}


def main():
    sigs = kiln_signatures()
    kiln_best, ort_best, ort_desc = {}, {}, {}
    for r in range(OPTS.rounds):
        for k, (us, calls) in kiln_round().items():
            kiln_best[k] = min(kiln_best.get(k, (us, calls)), (us, calls))
        for n, (us, i, o, win, op) in ort_round().items():
            ort_best[n] = min(ort_best.get(n, us), us)
            ort_desc[n] = (i, o, win, op)
    # ORT nodes by shapes, in execution order; each kiln kernel takes the first unmatched one.
    by_shapes = collections.defaultdict(list)
    for n, (i, o, win, op) in ort_desc.items():
        by_shapes[(i, o, win)].append(n)
    rows = []
    for k, (us, calls) in kiln_best.items():
        sig = sigs.get(k)
        nodes = by_shapes.get(sig, []) if sig else []
        take = nodes[:calls]
        del nodes[:calls]
        ort_us = statistics.mean(ort_best[n] for n in take) if take else float("nan")
        op = ort_desc[take[0]][3] if take else "-"
        rows.append((us * calls, us, calls, ort_us, op, k, sig))
    rows.sort(key=lambda r: -r[0])
    print(f"{'kernel':40} {'calls':>5} {'kiln µs/call':>13} {'ORT µs/node':>12} {'kiln/ORT':>9}  shapes (ORT op)")
    total_k = total_o = 0.0
    for total, us, calls, ort_us, op, k, sig in rows:
        ratio = us / ort_us if ort_us == ort_us else float("nan")
        if ort_us == ort_us:
            total_k += total
            total_o += ort_us * calls
        shapes = f"{list(sig[0])} -> {list(sig[1])}" if sig else ""
        print(f"{k:40} {calls:5d} {us:13.1f} {ort_us:12.1f} {ratio:9.2f}  {shapes} ({op})")
    left = [n for ns in by_shapes.values() for n in ns]
    print(f"\nmatched: kiln {total_k:.0f} µs, ORT {total_o:.0f} µs ({total_k / max(total_o, 1e-9):.2f}×); "
          f"ORT nodes left unmatched: {len(left)} ({sum(ort_best[n] for n in left):.0f} µs)")


main()
