#!/usr/bin/env bash
# The GPU checks of issue 8, split so that the GPU machine needs neither Rust
# nor LLVM (the device tool's machines have CUDA and PyTorch, not LLVM 14).
#
#   scripts/gpu_session.sh prepare       # here, on the machine with LLVM
#   scripts/gpu_session.sh run [MODELS]  # there, in the repository root
#
# `prepare` writes .gpu/ (git-ignored):
#   .gpu/ptx/      PTX of every corpus program (<name>_o<level>.ptx) and of the
#                  reference models (<model>.ptx), from the tests' own plans;
#   .gpu/cli/      PTX of the reference models as `kiln bench` plans them;
#   .gpu/gpu_run   the GPU test binary, built without LLVM (feature cuda only);
#   .gpu/kiln      the kiln CLI, built without LLVM (feature cuda only);
#   .gpu/models/   the reference models of ../shared/models except resnet18
#                  (47 MB: with it the tree passes the device tool's 64 MiB),
#                  and gpt_tiny (checked by gpu_run, not benchmarked: the
#                  PyTorch side of bench_torch_cuda.py runs the CNN ops only).
#   .gpu-resnet18/ resnet18 alone, to carry in a call of its own.
# Carry `.gpu` (with `.gpu-resnet18` for resnet18) in the device call:
#   run(command="bash scripts/gpu_session.sh run", carry=[".gpu"])
#   run(command="bash scripts/gpu_session.sh run resnet18", carry=[".gpu", ".gpu-resnet18"])
# `run` prints the GPU's name, runs the GPU tests (every operator against the
# interpreter; the models against ONNX Runtime's outputs, kernel by kernel
# and as a CUDA graph) and the benchmark next to PyTorch
# (scripts/bench_torch_cuda.py, a markdown table for the README).
set -euo pipefail
cd "$(dirname "$0")/.."
MODELS_SRC=${KILN_MODELS:-../shared/models}

prepare() {
    rm -rf .gpu .gpu-resnet18
    mkdir -p .gpu/ptx .gpu/cli .gpu/models .gpu-resnet18
    # PTX from the tests' plans (LLVM here).
    KILN_PTX_OUT="$PWD/.gpu/ptx" cargo test -p kiln --test gpu_ptx
    # The GPU test binary and the CLI without LLVM.
    exe=$(cargo test -p kiln --no-default-features --features cuda,cli --test gpu_run --no-run \
        --message-format=json 2>/dev/null | python3 -c '
import json, sys
for line in sys.stdin:
    m = json.loads(line)
    if m.get("reason") == "compiler-artifact" and m.get("executable") and m["target"]["name"] == "gpu_run":
        print(m["executable"])')
    strip -o .gpu/gpu_run "$exe"
    cargo build --release -p kiln --no-default-features --features cuda,cli --bin kiln --target-dir target/gpu
    strip -o .gpu/kiln target/gpu/release/kiln
    # PTX of the CLI's own plans, from the CLI built with LLVM.
    cargo build --release -p kiln --bin kiln
    for m in mlp lenet mobilenetv2 resnet18; do
        [ -f "$MODELS_SRC/$m.onnx" ] || continue
        target/release/kiln build "$MODELS_SRC/$m.onnx" --target cuda --emit ptx -o .gpu/cli
        if [ "$m" = resnet18 ]; then dest=.gpu-resnet18; else dest=.gpu/models; fi
        cp "$MODELS_SRC/$m".onnx "$MODELS_SRC/$m".input.npy "$MODELS_SRC/$m".output.npy "$dest"/
    done
    if [ -f "$MODELS_SRC/gpt_tiny.onnx" ]; then
        cp "$MODELS_SRC"/gpt_tiny.onnx "$MODELS_SRC"/gpt_tiny.input.npy "$MODELS_SRC"/gpt_tiny.output.npy .gpu/models/
    fi
    du -sh .gpu .gpu-resnet18
}

run() {
    nvidia-smi -L || true
    local models=.gpu/models
    if [ "${1:-}" = resnet18 ]; then models=.gpu-resnet18; fi
    export KILN_PTX_DIR="$PWD/.gpu/ptx" KILN_MODELS="$PWD/$models" KILN_MANIFEST_DIR="$PWD/compiler"
    if [ "${1:-}" != resnet18 ]; then
        .gpu/gpu_run --nocapture --test-threads 1
    else
        .gpu/gpu_run --nocapture reference_models
    fi
    python3 scripts/bench_torch_cuda.py "$models" .gpu/kiln .gpu/cli
}

case "${1:-}" in
    prepare) prepare ;;
    run) shift; run "$@" ;;
    *) echo "usage: $0 prepare | run [resnet18]" >&2; exit 2 ;;
esac
