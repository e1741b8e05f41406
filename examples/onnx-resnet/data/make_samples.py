#!/usr/bin/env python3
"""Regenerate the examples' bundled sample images (synthetic, so that they can be
committed with no licence question): onnx-resnet/data/sample.png (4:3, so the
resize-then-center-crop does something) and yolo/data/sample.png (wide, so the
letterbox pads top and bottom). Needs only numpy; PNG is written by hand.

Usage: python3 examples/onnx-resnet/data/make_samples.py
"""
import os
import struct
import zlib

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))


def write_png(path, rgb):
    h, w, _ = rgb.shape
    # Filter type 1 (Sub) on every row: smooth gradients compress far better.
    rows = rgb.astype(np.int16)
    sub = np.concatenate([rows[:, :1], rows[:, 1:] - rows[:, :-1]], axis=1).astype(np.uint8)
    raw = b"".join(b"\x01" + sub[y].tobytes() for y in range(h))

    def chunk(tag, data):
        return struct.pack(">I", len(data)) + tag + data + struct.pack(">I", zlib.crc32(tag + data) & 0xFFFFFFFF)

    png = b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 0))
    png += chunk(b"IDAT", zlib.compress(raw, 9)) + chunk(b"IEND", b"")
    with open(path, "wb") as f:
        f.write(png)
    print(f"{path}: {w}x{h}, {len(png)} bytes")


def scene(w, h):
    """Sky gradient, a sun, sea and a beach: smooth areas and sharp edges."""
    y, x = np.mgrid[0:h, 0:w].astype(np.float32)
    img = np.zeros((h, w, 3), np.float32)
    t = y / h
    img[..., 0] = 90 + 120 * t
    img[..., 1] = 140 + 60 * t
    img[..., 2] = 235 - 20 * t
    sea = y > 0.55 * h
    img[sea] = np.stack([20 + 0 * x[sea], 80 + 40 * (y[sea] / h - 0.55), 140 + 0 * x[sea]], axis=-1)
    beach = y > 0.8 * h + 0.08 * h * np.sin(x / w * 6.0)
    img[beach] = [225, 200, 150]
    sun = (x - 0.72 * w) ** 2 + (y - 0.25 * h) ** 2 < (0.09 * h) ** 2
    img[sun] = [255, 255, 255]  # pure white: the preprocessing test looks for it
    return np.clip(img, 0, 255).astype(np.uint8)


if __name__ == "__main__":
    write_png(os.path.join(HERE, "sample.png"), scene(200, 150))
    write_png(os.path.normpath(os.path.join(HERE, "..", "..", "yolo", "data", "sample.png")), scene(240, 135))
