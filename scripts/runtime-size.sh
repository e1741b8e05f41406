#!/usr/bin/env bash
# Measure the runtime code of the MLP example binary: the `.text` bytes of
# kiln-runtime and of the generated glue (the `mlp` module), excluding the
# kernels (`fused_*`, `copy_*`) and the weights (`kiln_mlp_c*`, read-only data).
# Usage: scripts/runtime-size.sh   (prints the total; fails above 10 KiB)
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release -q -p kiln-example-mlp
bin=target/release/kiln-example-mlp
# Text symbols (t/T) with sizes, demangled.
total=0
while read -r _addr size kind name; do
  case "$kind" in t|T) ;; *) continue ;; esac
  case "$name" in
    kiln_runtime::*|*"<kiln_runtime::"*|kiln_example_mlp::mlp::*|*"kiln_example_mlp::mlp::"*)
      total=$((total + 16#$size))
      printf '%8d  %s\n' "$((16#$size))" "$name" ;;
  esac
done < <(nm --print-size --size-sort -C "$bin")
echo "runtime code: $total bytes of .text (limit 10240)"
[ "$total" -le 10240 ]
