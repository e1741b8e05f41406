#!/usr/bin/env python3
"""ONNX Runtime's own per-operator and per-node times for a model (its profiler).

Usage: scripts/ort_profile.py MODEL.onnx INPUT.npy [--threads N] [--runs N] [--top N]
  Runs the model N times (after 10 warm-up runs) with ORT's profiling on and prints the
  mean time per run of each operator type and of the slowest nodes — to compare with
  `kiln bench --profile` or scripts/kernel_gflops.py kernel by kernel. (ORT fuses and
  renames nodes, e.g. `…_nchwc` for its blocked-layout convolutions.)
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
for e in events:
    node = e["name"][: -len("_kernel_time")]
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
