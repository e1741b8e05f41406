#!/usr/bin/env bash
# System packages the tests need, installed when missing (CI machines start
# without what a session installed by hand):
# - LLVM 14 with its development files: the default code generator (inkwell
#   `llvm14-0-prefer-dynamic`; Polly's library because Debian's llvm-config
#   lists it among the system libraries).
# - LLVM 19 development files: `cargo test -p kiln --no-default-features
#   --features llvm19,cli` checks the opaque-pointer code path.
# - chromium: `compiler/tests/viz.rs` renders the reference models' graph and
#   memory-plan SVGs to PNG headless (a browser opens them).
set -euo pipefail
need=()
[ -x /usr/lib/llvm-14/bin/llvm-config ] || need+=(llvm-14-dev libpolly-14-dev)
[ -x /usr/lib/llvm-19/bin/llvm-config ] || need+=(llvm-19-dev)
command -v chromium >/dev/null || need+=(chromium)
if [ ${#need[@]} -gt 0 ]; then
    sudo_cmd=""
    [ "$(id -u)" -eq 0 ] || sudo_cmd="sudo"
    $sudo_cmd apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -qq "${need[@]}"
fi
