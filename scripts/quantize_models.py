#!/usr/bin/env python3
"""Quantized versions of the shared reference models, for kiln's int8 path.

Usage: scripts/quantize_models.py [MODELS_DIR [OUT_DIR]]
  MODELS_DIR  the reference models (default ../shared/models)
  OUT_DIR     where to write (default MODELS_DIR/quantized)

For resnet18 and mobilenetv2 writes, made by ONNX Runtime's `quantize_static`
calibrated on 8 seeded random inputs of the model's input shape (MinMax):
  `<model>.qdq.onnx`  QDQ format (QuantizeLinear/DequantizeLinear around each
                      convolution and matmul; int8 activations, per-channel int8 weights);
  `<model>.qop.onnx`  QOperator format (QLinearConv, and ONNX Runtime's
                      com.microsoft QLinearAdd, QLinearGlobalAveragePool, QGemm;
                      uint8 activations, per-channel int8 weights);
and for each `<model>.<format>.output.npy`: ONNX Runtime's output on the
model's stored input (`<model>.input.npy`), the reference kiln's is compared with,
and `<model>.<format>.output.cpu`: whether the CPU that computed it has VNNI
(`vnni` or `no-vnni`). Without VNNI, ONNX Runtime's int8 results are not the
exact integer arithmetic: its AVX2 uint8 x int8 kernels saturate the pairwise
sums of `vpmaddubsw` (MobileNetV2's first QLinearConv: 3,380 values up to 103
steps off), and its QDQ int8 convolutions run in float there; kiln's test then
allows a few steps (see `compiler/tests/onnx_models.rs`).
Needs: pip install onnx onnxruntime numpy.
"""
import os
import sys

import numpy as np
import onnx
import onnxruntime as ort
from onnxruntime.quantization import CalibrationDataReader, QuantFormat, QuantType, quantize_static
from onnxruntime.quantization.shape_inference import quant_pre_process

MODELS = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..", "..", "shared", "models")
OUT = sys.argv[2] if len(sys.argv) > 2 else os.path.join(MODELS, "quantized")


class RandomInputs(CalibrationDataReader):
    def __init__(self, name, shape, n=8):
        rng = np.random.default_rng(0)
        self.batches = iter([{name: rng.standard_normal(shape).astype(np.float32)} for _ in range(n)])

    def get_next(self):
        return next(self.batches, None)


def vnni():
    """Whether this CPU has a VNNI dot product (AVX-512 VNNI or AVX-VNNI)."""
    try:
        flags = open("/proc/cpuinfo").read().split()
    except OSError:
        return False
    return "avx512_vnni" in flags or "avx_vnni" in flags


def main():
    os.makedirs(OUT, exist_ok=True)
    for name in ["resnet18", "mobilenetv2"]:
        src = os.path.join(MODELS, f"{name}.onnx")
        if not os.path.exists(src):
            print(f"skipped {name}: {src} is missing")
            continue
        model = onnx.load(src)
        inp = model.graph.input[0]
        shape = [d.dim_value or 1 for d in inp.type.tensor_type.shape.dim]
        pre = os.path.join(OUT, f"{name}.pre.onnx")
        quant_pre_process(src, pre)
        x = np.load(os.path.join(MODELS, f"{name}.input.npy"))
        for fmt, qformat, activations in [
            ("qdq", QuantFormat.QDQ, QuantType.QInt8),
            ("qop", QuantFormat.QOperator, QuantType.QUInt8),
        ]:
            dst = os.path.join(OUT, f"{name}.{fmt}.onnx")
            quantize_static(
                pre,
                dst,
                RandomInputs(inp.name, shape),
                quant_format=qformat,
                per_channel=True,
                activation_type=activations,
                weight_type=QuantType.QInt8,
            )
            so = ort.SessionOptions()
            so.intra_op_num_threads = 1
            sess = ort.InferenceSession(dst, so, providers=["CPUExecutionProvider"])
            y = sess.run(None, {inp.name: x})[0]
            np.save(os.path.join(OUT, f"{name}.{fmt}.output.npy"), y)
            with open(os.path.join(OUT, f"{name}.{fmt}.output.cpu"), "w") as f:
                f.write("vnni\n" if vnni() else "no-vnni\n")
            print(f"wrote {dst} and its ONNX Runtime output {y.shape}")
        os.remove(pre)


if __name__ == "__main__":
    main()
