#!/usr/bin/env python3
"""One 3 x 3 convolution (+ bias, ReLU) of each ResNet-18 stage, written
plainly and with its reduction split S ways as a grouped convolution whose
S partial sums a ReduceSum adds: the experiment behind kiln's GPU split-K.

Usage: scripts/gpu_split_conv_models.py OUT_DIR

Deterministic (fixed seed): the same script writes the same files on the
machine that compiles the PTX and on the GPU machine that runs it.
"""
import os
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

STAGES = [(64, 56), (128, 28), (256, 14), (512, 7)]
SPLITS = [1, 2, 4, 8]


def model(c, hw, s, w, b):
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, c, hw, hw])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, c, hw, hw])
    inits = [numpy_helper.from_array(b.reshape(1, c, 1, 1), "b")]
    if s == 1:
        inits.append(numpy_helper.from_array(w, "w"))
        nodes = [helper.make_node("Conv", ["x", "w"], ["conv"], pads=[1, 1, 1, 1])]
    else:
        # Group g computes every output channel from input channels g*C/S..: W' = [S*OC, C/S, 3, 3].
        ws = w.reshape(c, s, c // s, 3, 3).transpose(1, 0, 2, 3, 4).reshape(s * c, c // s, 3, 3)
        inits += [numpy_helper.from_array(np.ascontiguousarray(ws), "w"),
                  numpy_helper.from_array(np.array([1, s, c, hw, hw], np.int64), "shape"),
                  numpy_helper.from_array(np.array([1], np.int64), "axis")]
        nodes = [helper.make_node("Conv", ["x", "w"], ["parts"], pads=[1, 1, 1, 1], group=s),
                 helper.make_node("Reshape", ["parts", "shape"], ["parts5"]),
                 helper.make_node("ReduceSum", ["parts5", "axis"], ["conv"], keepdims=0)]
    nodes += [helper.make_node("Add", ["conv", "b"], ["biased"]), helper.make_node("Relu", ["biased"], ["y"])]
    g = helper.make_graph(nodes, "conv", [x], [y], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])


def main():
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    rng = np.random.default_rng(0)
    for c, hw in STAGES:
        w = (rng.standard_normal((c, c, 3, 3)) / np.sqrt(9 * c)).astype(np.float32)
        b = rng.standard_normal(c).astype(np.float32)
        x = rng.standard_normal((1, c, hw, hw)).astype(np.float32)
        np.save(os.path.join(out, f"conv{c}.input.npy"), x)
        for s in SPLITS:
            onnx.save(model(c, hw, s, w, b), os.path.join(out, f"conv{c}_s{s}.onnx"))


if __name__ == "__main__":
    main()
