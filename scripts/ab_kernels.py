#!/usr/bin/env python3
"""Two kiln binaries' per-kernel times on one model, alternated, robust to a noisy machine.

Usage: scripts/ab_kernels.py BASE NEW MODEL NAME=INPUT.npy [--rounds N] [--threads T] [--runs R] [--target T]
  BASE, NEW  two `kiln` binaries (e.g. a copy of target/release/kiln from before a change, and after)
  Runs `kiln bench MODEL --profile` with each binary in turn, N rounds (default 3), and prints per
  kernel: the minimum time of each binary over the rounds and, for kernels whose time moved, the
  ratio NEW / BASE after dividing each round's time by the sum of the kernels that did not move in
  that round (a shared VM's slow phases move every kernel by 15-20 % between rounds; the unchanged
  kernels measure the phase). A kernel "moved" when its minima differ by more than 7 %; name them
  instead with --changed a,b,c, or let --changed auto find them: the kernels whose assembly
  differs between the two binaries (`kiln build MODEL --emit asm` with each, labels ignored).
Prints the model's median and fastest run per round too.
"""
import argparse
import glob
import os
import re
import statistics
import subprocess
import tempfile

ARGS = argparse.ArgumentParser(description=__doc__.split("\n")[0])
ARGS.add_argument("base")
ARGS.add_argument("new")
ARGS.add_argument("model")
ARGS.add_argument("input", help="NAME=PATH.npy")
ARGS.add_argument("--rounds", type=int, default=3)
ARGS.add_argument("--threads", type=int, default=1)
ARGS.add_argument("--runs", type=int, default=100)
ARGS.add_argument("--changed", help="comma-separated kernel names known to differ, or `auto` (assembly diff)")
ARGS.add_argument("--target", help='build for this target, e.g. "llvm -mcpu=znver3" (the AVX2 path on any x86 CPU)')
OPTS = ARGS.parse_args()

# The kernel's name ends the line (newer profiles put GFLOP/s and a class before it).
KERNEL = re.compile(r"\s*([\d.]+) us\s+[\d.]+%\s+\d+×.*?(\S+)$")
TOTAL = re.compile(r"median ([\d.]+) us, min ([\d.]+) us")


def profile(kiln):
    """({kernel: µs}, (median, fastest)) of one `kiln bench --profile` run."""
    args = [kiln, "bench", OPTS.model, "--input", OPTS.input, "--threads", str(OPTS.threads),
            "--runs", str(OPTS.runs), "--profile"] + (["--target", OPTS.target] if OPTS.target else [])
    p = subprocess.run(args, capture_output=True, text=True, check=True)
    kernels, total = {}, (float("nan"), float("nan"))
    for line in (p.stdout + p.stderr).splitlines():
        if m := KERNEL.match(line):
            kernels[m[2]] = float(m[1])
        elif m := TOTAL.search(line):
            total = (float(m[1]), float(m[2]))
    return kernels, total


# One kernel's assembly, from its label to LLVM's end-of-function label.
ASM_FUNCTION = re.compile(r"^(\w+):\n(.*?)^\.Lfunc_end", re.S | re.M)
# Local labels and constant-pool names differ with a kernel's position in the file.
ASM_LABEL = re.compile(r"\.(LBB|LCPI|Ltmp)\d+_\d+")


def assembly(kiln):
    """{kernel: its assembly with local labels renamed} of MODEL built by `kiln`."""
    name, path = OPTS.input.split("=", 1)
    with tempfile.TemporaryDirectory() as out:
        args = [kiln, "build", OPTS.model, "--emit", "asm", "-o", out]
        args += ["--target", OPTS.target] if OPTS.target else []
        if OPTS.model.endswith(".onnx"):
            import numpy as np  # only here: the shape fixes an ONNX input's symbolic dimensions

            shape = "x".join(str(d) for d in np.load(path, mmap_mode="r").shape)
            args += ["--input-shape", f"{name}={shape}"]
        subprocess.run(args, capture_output=True, text=True, check=True)
        text = "".join(open(f).read() for f in sorted(glob.glob(os.path.join(out, "*.s"))))
    return {m[1]: ASM_LABEL.sub(r".\1", m[2]) for m in ASM_FUNCTION.finditer(text)}


def changed_kernels():
    """The kernels whose assembly differs between BASE and NEW (or exists in one only)."""
    a, b = assembly(OPTS.base), assembly(OPTS.new)
    return {k for k in set(a) | set(b) if a.get(k) != b.get(k)}


def main():
    auto = changed_kernels() if OPTS.changed == "auto" else None
    if auto is not None:
        print(f"kernels whose assembly differs: {', '.join(sorted(auto)) or 'none'}")
    rounds = {"base": [], "new": []}
    for _ in range(OPTS.rounds):
        for tag, kiln in (("base", OPTS.base), ("new", OPTS.new)):
            rounds[tag].append(profile(kiln))
    base = [k for k, _ in rounds["base"]]
    new = [k for k, _ in rounds["new"]]
    names = sorted(set(base[0]) & set(new[0]), key=lambda k: -min(r[k] for r in base))
    lowest = {k: (min(r[k] for r in base), min(r[k] for r in new)) for k in names}
    if auto is not None:
        changed = auto & set(names)
    elif OPTS.changed:
        changed = set(OPTS.changed.split(",")) & set(names)
    else:
        changed = {k for k, (b, n) in lowest.items() if abs(n / b - 1) > 0.07}

    def normalized(r, k):
        rest = sum(v for name, v in r.items() if name not in changed and name in lowest)
        return r[k] / rest if rest else float("nan")

    print(f"{'kernel':60s} {'base':>9s} {'new':>9s}  new/base (normalized)")
    for k in names:
        b, n = lowest[k]
        ratio = ""
        if k in changed:
            nb = statistics.median(normalized(r, k) for r in base)
            nn = statistics.median(normalized(r, k) for r in new)
            ratio = f"{nn / nb:.2f}"
        print(f"{k:60s} {b:9.1f} {n:9.1f}  {ratio}")
    for tag in ("base", "new"):
        runs = " ".join(f"{m:.0f}/{f:.0f}" for _, (m, f) in rounds[tag])
        print(f"{tag}: median/fastest µs per round: {runs}")


if __name__ == "__main__":
    main()
