#!/usr/bin/env python3
"""Two kiln binaries' per-kernel times on one model, batch by batch, robust to a noisy machine.

Usage: scripts/ab_kernels.py BASE NEW MODEL NAME=INPUT.npy [--rounds N] [--threads T] [--runs R] [--target T]
  BASE, NEW  two `kiln` binaries (e.g. a copy of target/release/kiln from before a change, and after)
  Runs one `kiln bench MODEL --profile --paced` process per binary (each compiles the model once)
  and has them time a batch in turn, N pairs of batches (default 9; the order swaps pair by pair),
  each batch R runs of the model and min(R, 50) more timed kernel by kernel (default R 20). Prints
  per kernel: the median over the batches of each binary's time and, for kernels whose time moved,
  NEW / BASE: per pair, the kernel's ratio divided by the ratio of the summed kernels that did not
  move (this VM's phases last seconds and move every kernel by 15-50 %, a neighbour's thread on the
  same core among them; the pair meets one phase, the unchanged kernels measure what is left), the
  median over the pairs, and the range of the middle half. A kernel "moved" when its medians
  differ by more than 7 %; name them instead with --changed a,b,c, or let --changed auto find them:
  the kernels whose assembly differs between the two binaries (`kiln build MODEL --emit asm` with
  each, labels ignored).
Prints the model's median and fastest run per batch too.
"""
import argparse
import glob
import os
import re
import statistics
import subprocess
import tempfile
import time

from kiln_paced import PacedKiln

ARGS = argparse.ArgumentParser(description=__doc__.split("\n")[0])
ARGS.add_argument("base")
ARGS.add_argument("new")
ARGS.add_argument("model")
ARGS.add_argument("input", help="NAME=PATH.npy")
ARGS.add_argument("--rounds", type=int, default=9)
ARGS.add_argument("--threads", type=int, default=1)
ARGS.add_argument("--runs", type=int, default=20)
ARGS.add_argument("--changed", help="comma-separated kernel names known to differ, or `auto` (assembly diff)")
ARGS.add_argument("--target", help='build for this target, e.g. "llvm -mcpu=znver3" (the AVX2 path on any x86 CPU)')
OPTS = ARGS.parse_args()

def paced(kiln):
    """A `kiln bench MODEL --profile --paced` process of `kiln`."""
    return PacedKiln([kiln, "bench", OPTS.model, "--input", OPTS.input, "--threads", str(OPTS.threads),
                      "--runs", str(OPTS.runs), "--profile"] + (["--target", OPTS.target] if OPTS.target else []))


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
    sides = [paced(OPTS.base), paced(OPTS.new)]
    batches = [[], []]
    try:
        for i in range(OPTS.rounds):
            for k in ((0, 1) if i % 2 == 0 else (1, 0)):
                time.sleep(0.005)  # kiln's idle workers spin for 200 µs
                median, fastest, kernels = sides[k].batch()
                batches[k].append((kernels, (median, fastest)))
    except RuntimeError as e:
        raise SystemExit(str(e))
    finally:
        for side in sides:
            side.close()
    base, new = ([k for k, _ in b] for b in batches)
    names = sorted(set(base[0]) & set(new[0]), key=lambda k: -statistics.median(r[k] for r in base))
    medians = {k: (statistics.median(r[k] for r in base), statistics.median(r[k] for r in new)) for k in names}
    if auto is not None:
        changed = auto & set(names)
    elif OPTS.changed:
        changed = set(OPTS.changed.split(",")) & set(names)
    else:
        changed = {k for k, (b, n) in medians.items() if abs(n / b - 1) > 0.07}
    unchanged = [k for k in names if k not in changed]

    def pair_ratios(k):
        """Per pair of batches, NEW / BASE for kernel `k` over the same for the unchanged kernels."""
        ratios = []
        for b, n in zip(base, new):
            rest_b, rest_n = sum(b[u] for u in unchanged), sum(n[u] for u in unchanged)
            if b[k] > 0 and rest_b > 0 and rest_n > 0:
                ratios.append((n[k] / b[k]) / (rest_n / rest_b))
        return sorted(ratios)

    print(f"{'kernel':60s} {'base':>9s} {'new':>9s}  new/base (normalized; middle half of the pairs)")
    for k in names:
        b, n = medians[k]
        ratio = ""
        if k in changed and (r := pair_ratios(k)):
            ratio = f"{statistics.median(r):.2f} ({r[len(r) // 4]:.2f}-{r[(3 * len(r)) // 4]:.2f})"
        print(f"{k:60s} {b:9.1f} {n:9.1f}  {ratio}")
    for tag, side in (("base", batches[0]), ("new", batches[1])):
        runs = " ".join(f"{m:.0f}/{f:.0f}" for _, (m, f) in side)
        print(f"{tag}: median/fastest µs per batch: {runs}")


if __name__ == "__main__":
    main()
