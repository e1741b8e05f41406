#!/usr/bin/env python3
"""Run ONNX's own backend tests (the `model.onnx` + `test_data_set_*` folders
shipped in the `onnx` Python package: `node/` when present, `simple/`,
`pytorch-operator/`, `pytorch-converted/`) through `kiln run`, for the tests
whose operators and dtypes kiln imports.

Usage: scripts/onnx_node_tests.py [-v]      (needs: pip install onnx numpy)
Prints how many ran, passed and failed, and the failures with their reason.
"""
import glob
import os
import subprocess
import sys
import tempfile

import numpy as np
import onnx
from onnx import numpy_helper

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
KILN = os.path.join(ROOT, "target", "release", "kiln")
SUPPORTED = {
    "Add", "Sub", "Mul", "Div", "Pow", "Neg", "Exp", "Log", "Sqrt", "Reciprocal", "Tanh", "Sigmoid", "Erf",
    "Relu", "Clip", "MatMul", "Gemm", "Conv", "MaxPool", "AveragePool", "GlobalAveragePool",
    "BatchNormalization", "Softmax", "Flatten", "Reshape", "Transpose", "Concat", "Identity", "Dropout", "Constant",
    "LeakyRelu", "Gelu", "LayerNormalization", "Cast", "Squeeze", "Unsqueeze", "ReduceSum", "ReduceMean", "ReduceMax",
    "Shape", "Slice", "Split", "Expand", "Gather", "Where", "Equal", "Less", "Not",
}
DTYPES = {np.dtype("float32"), np.dtype("int64"), np.dtype("int32"), np.dtype("bool"), np.dtype("uint8"), np.dtype("int8")}


def load(pb):
    t = onnx.TensorProto()
    with open(pb, "rb") as f:
        t.ParseFromString(f.read())
    return t.name, numpy_helper.to_array(t)


def main():
    verbose = "-v" in sys.argv
    subprocess.run(["cargo", "build", "--release", "-q", "-p", "kiln"], check=True, cwd=ROOT)
    # The `node` suite when the installed package ships it, and the model suites it always ships.
    base = os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data")
    ran, passed, failures, skipped = 0, 0, [], 0
    for d in sorted(glob.glob(os.path.join(base, "*", "test_*"))):
        model_path = os.path.join(d, "model.onnx")
        data = os.path.join(d, "test_data_set_0")
        if not (os.path.exists(model_path) and os.path.isdir(data)):
            continue
        model = onnx.load(model_path)
        ops = {n.op_type for n in model.graph.node}
        inputs = [load(p) for p in sorted(glob.glob(os.path.join(data, "input_*.pb")))]
        outputs = [load(p) for p in sorted(glob.glob(os.path.join(data, "output_*.pb")))]
        if not ops <= SUPPORTED or any(a.dtype not in DTYPES for _, a in inputs + outputs):
            skipped += 1
            continue
        ran += 1
        name = os.path.relpath(d, base)
        with tempfile.TemporaryDirectory() as tmp:
            args = [KILN, "run", model_path]
            graph_inputs = [i.name for i in model.graph.input if i.name not in {t.name for t in model.graph.initializer}]
            for (pname, arr), gname in zip(inputs, graph_inputs):
                p = os.path.join(tmp, f"{gname}.npy")
                np.save(p, arr)
                args += ["--input", f"{gname}={p}"]
            outs = [os.path.join(tmp, f"out{i}.npy") for i in range(len(outputs))]
            for o in outs:
                args += ["--output", o]
            r = subprocess.run(args, capture_output=True, text=True)
            if r.returncode != 0:
                failures.append((name, r.stderr.strip().splitlines()[-1] if r.stderr.strip() else f"exit {r.returncode}"))
                continue
            ok = True
            for (oname, want), o in zip(outputs, outs):
                got = np.load(o)
                if got.shape != want.shape or not np.allclose(got, want, rtol=1e-4, atol=1e-5, equal_nan=True):
                    err = np.max(np.abs(got.astype(np.float64) - want)) if got.shape == want.shape else f"shape {got.shape} vs {want.shape}"
                    failures.append((name, f"output `{oname}` differs (max abs error {err})"))
                    ok = False
                    break
            passed += ok
    print(f"ONNX backend node tests within kiln's operators: {ran} ran, {passed} passed, {len(failures)} failed ({skipped} skipped: other operators or dtypes)")
    for name, why in failures if verbose else failures[:40]:
        print(f"  FAIL {name}: {why}")


if __name__ == "__main__":
    main()
