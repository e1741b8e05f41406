"""Call a kiln model's packed entry from Python with ctypes: NumPy arrays
described as DLPack tensors, the model discovered with kiln_<model>_describe().

    python3 packed_call.py libresnet18.so resnet18 input.npy [expected.npy]

The shared object is the model's static library linked whole:
    cc -shared -o libresnet18.so -Wl,--whole-archive libkiln_resnet18.a -Wl,--no-whole-archive -lm
Prints the outputs' shapes and, given the expected output, the largest
difference (exit status 1 when it exceeds 1e-4 x max |expected|).
"""
import ctypes
import sys

import numpy as np


class DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class DLTensor(ctypes.Structure):
    _fields_ = [
        ("data", ctypes.c_void_p),
        ("device", DLDevice),
        ("ndim", ctypes.c_int32),
        ("dtype", DLDataType),
        ("shape", ctypes.POINTER(ctypes.c_int64)),
        ("strides", ctypes.POINTER(ctypes.c_int64)),
        ("byte_offset", ctypes.c_uint64),
    ]


class TensorInfo(ctypes.Structure):
    _fields_ = [
        ("name", ctypes.c_char_p),
        ("ndim", ctypes.c_int32),
        ("shape", ctypes.POINTER(ctypes.c_int64)),
        ("dtype", DLDataType),
    ]


class ModelInfo(ctypes.Structure):
    _fields_ = [
        ("name", ctypes.c_char_p),
        ("target", ctypes.c_char_p),
        ("num_inputs", ctypes.c_int32),
        ("inputs", ctypes.POINTER(TensorInfo)),
        ("num_outputs", ctypes.c_int32),
        ("outputs", ctypes.POINTER(TensorInfo)),
        ("arena_bytes", ctypes.c_uint64),
        ("arena_align", ctypes.c_uint64),
    ]


KDLCPU = 1
NUMPY_OF_DLPACK = {(0, 8): np.int8, (0, 16): np.int16, (0, 32): np.int32, (0, 64): np.int64,
                   (1, 8): np.uint8, (1, 16): np.uint16, (1, 32): np.uint32, (1, 64): np.uint64,
                   (2, 16): np.float16, (2, 32): np.float32, (2, 64): np.float64, (6, 8): np.bool_}


def as_dltensor(a):
    """A DLTensor viewing NumPy array `a` (kept alive by the caller), with its real strides."""
    code = {"i": 0, "u": 1, "f": 2, "b": 6}[a.dtype.kind]
    shape = (ctypes.c_int64 * a.ndim)(*a.shape)
    strides = (ctypes.c_int64 * a.ndim)(*[s // a.itemsize for s in a.strides])
    t = DLTensor(a.ctypes.data, DLDevice(KDLCPU, 0), a.ndim, DLDataType(code, a.itemsize * 8, 1),
                 shape, strides, 0)
    return t, (shape, strides)


def main():
    so, model, input_path = sys.argv[1:4]
    expected = np.load(sys.argv[4]) if len(sys.argv) > 4 else None
    lib = ctypes.CDLL(so)
    describe = getattr(lib, f"kiln_{model}_describe")
    describe.restype = ctypes.POINTER(ModelInfo)
    call = getattr(lib, f"kiln_{model}_call")
    call.argtypes = [ctypes.POINTER(DLTensor), ctypes.c_int, ctypes.POINTER(DLTensor), ctypes.c_int,
                     ctypes.c_void_p]
    error_string = getattr(lib, f"kiln_{model}_error_string")
    error_string.restype = ctypes.c_char_p

    info = describe().contents
    ins = [info.inputs[i] for i in range(info.num_inputs)]
    outs = [info.outputs[i] for i in range(info.num_outputs)]
    print(f"{info.name.decode()} ({info.target.decode()}): inputs",
          [(t.name.decode(), list(t.shape[:t.ndim])) for t in ins], "outputs",
          [(t.name.decode(), list(t.shape[:t.ndim])) for t in outs], f"arena {info.arena_bytes} bytes")

    x = np.ascontiguousarray(np.load(input_path))
    ys = [np.empty(list(t.shape[:t.ndim]), NUMPY_OF_DLPACK[(t.dtype.code, t.dtype.bits)]) for t in outs]
    arrays = [x] + ys
    described = [as_dltensor(a) for a in arrays]
    tensors = (DLTensor * len(arrays))(*[t for t, _ in described])
    arena = np.empty(info.arena_bytes + info.arena_align, np.uint8)
    skip = (-arena.ctypes.data) % info.arena_align
    status = call(tensors, 1, ctypes.cast(ctypes.byref(tensors, ctypes.sizeof(DLTensor)), ctypes.POINTER(DLTensor)),
                  len(ys), arena.ctypes.data + skip)
    if status != 0:
        print(f"kiln_{model}_call: {status}: {error_string(status).decode()}")
        return 1

    # A wrong shape is refused with its code, not run.
    bad = np.zeros([d + 1 for d in x.shape], x.dtype)
    tensors[0], keep = as_dltensor(bad)
    refused = call(tensors, 1, ctypes.cast(ctypes.byref(tensors, ctypes.sizeof(DLTensor)),
                                           ctypes.POINTER(DLTensor)), len(ys), arena.ctypes.data + skip)
    print(f"a wrong input shape: status {refused} ({error_string(refused).decode()})")
    if refused != 6:
        return 1

    for y, t in zip(ys, outs):
        print(f"output {t.name.decode()}: shape {list(y.shape)}")
    if expected is not None:
        err = float(np.max(np.abs(ys[0].astype(np.float64) - expected)))
        scale = float(np.max(np.abs(expected)))
        print(f"max abs error against the expected output: {err:.3e} (tolerance {1e-4 * scale:.3e})")
        if err > 1e-4 * scale:
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
