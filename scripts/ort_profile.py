#!/usr/bin/env python3
"""ONNX Runtime's own per-operator and per-node times for a model (its profiler).

Usage: scripts/ort_profile.py MODEL.onnx INPUT.npy [--threads N] [--runs N] [--top N]
  Runs the model N times (after 10 warm-up runs) with ORT's profiling on and prints the
  mean time per run of each operator type and of the slowest nodes — to compare with
  `kiln bench --profile` or scripts/kernel_gflops.py kernel by kernel. (ORT fuses and
  renames nodes, e.g. `…_nchwc` for its blocked-layout convolutions.)
  Then, as `kiln bench --profile` does, time by kernel class (stem: a convolution over at
  most 4 input channels; depthwise; 1x1; other convolutions; dense: Gemm/MatMul) against
  its share of the FLOPs: the reference for its "time / FLOP" column.
Needs: pip install onnxruntime numpy.
"""
import argparse
import collections
import json
import os

import numpy as np
import onnxruntime as ort

ARGS = argparse.ArgumentParser(description=__doc__.split("\n")[0])
ARGS.add_argument("model")
ARGS.add_argument("input")
ARGS.add_argument("--threads", type=int, default=1)
ARGS.add_argument("--runs", type=int, default=30)
ARGS.add_argument("--top", type=int, default=20)
OPTS = ARGS.parse_args()

options = ort.SessionOptions()
options.intra_op_num_threads = OPTS.threads
options.inter_op_num_threads = 1
sess = ort.InferenceSession(OPTS.model, options, providers=["CPUExecutionProvider"])
feed = {sess.get_inputs()[0].name: np.load(OPTS.input)}
for _ in range(10):
    sess.run(None, feed)
sess.end_profiling()
options.enable_profiling = True
sess = ort.InferenceSession(OPTS.model, options, providers=["CPUExecutionProvider"])
for _ in range(OPTS.runs):
    sess.run(None, feed)
trace = sess.end_profiling()
events = [e for e in json.load(open(trace)) if e.get("cat") == "Node" and e["name"].endswith("_kernel_time")]
os.remove(trace)
by_op, by_node = collections.defaultdict(float), collections.defaultdict(float)
node_desc = {}

def shape_of(args, key, k):
    shapes = args.get(key, [])
    return list(shapes[k].values())[0] if len(shapes) > k else None


def class_and_flops(args):
    """kiln's kernel class of an ORT node and its multiply-add FLOPs (0 where not counted)."""
    op = args["op_name"]
    x, w, out = shape_of(args, "input_type_shape", 0), shape_of(args, "input_type_shape", 1), shape_of(args, "output_type_shape", 0)
    if op in ("Conv", "FusedConv") and x and w and out and len(w) == 4:
        flops = 2 * int(np.prod(out)) * w[1] * w[2] * w[3]
        if w[1] == 1 and x[1] > 1:
            return "depthwise", flops
        if x[1] <= 4:
            return "stem", flops
        return ("1x1" if w[2:] == [1, 1] else "conv"), flops
    if op in ("Gemm", "MatMul", "FusedMatMul") and x and w and out:
        return "dense", 2 * int(np.prod(out)) * x[-1]
    return "other", 0


by_class = collections.defaultdict(lambda: [0.0, 0])
for e in events:
    node = e["name"][: -len("_kernel_time")]
    cls, flops = class_and_flops(e["args"])
    by_class[cls][0] += e["dur"] / OPTS.runs
    by_class[cls][1] += flops // OPTS.runs
    by_op[e["args"]["op_name"]] += e["dur"] / OPTS.runs
    by_node[node] += e["dur"] / OPTS.runs
    # The first input's and the output's shapes, to match nodes with kiln's kernels.
    shapes = [list(s.values())[0] for s in e["args"].get("input_type_shape", [])[:1]]
    shapes += [list(s.values())[0] for s in e["args"].get("output_type_shape", [])[:1]]
    node_desc[node] = f'{e["args"]["op_name"]:12} ' + " -> ".join(str(s) for s in shapes)
print(f"ONNX Runtime {ort.__version__}, {OPTS.threads} thread(s): {sum(by_op.values()):.1f} us per run in kernels")
for op, us in sorted(by_op.items(), key=lambda kv: -kv[1]):
    print(f"{us:9.1f} us  {op}")
print()
for node, us in sorted(by_node.items(), key=lambda kv: -kv[1])[: OPTS.top]:
    print(f"{us:9.1f} us  {node:40} {node_desc[node]}")
total_us = sum(t for t, _ in by_class.values())
total_flops = sum(f for _, f in by_class.values()) or 1
print()
print(f"by class ({total_flops / 1e9:.3f} GFLOP counted)")
print(f"{'class':>14} {'time':>12} {'time %':>7} {'FLOP %':>11} {'time / FLOP':>13} {'GFLOP/s':>9}")
for cls, (us, flops) in sorted(by_class.items(), key=lambda kv: -kv[1][0]):
    share = flops / total_flops
    ratio = f"{(us / total_us) / share:13.2f}" if share > 0 else f"{'-':>13}"
    rate = f"{flops / us / 1e3:9.1f}" if flops else f"{'-':>9}"
    print(f"{cls:>14} {us:9.1f} us {100 * us / total_us:6.1f}% {100 * share:10.1f}% {ratio} {rate}")
