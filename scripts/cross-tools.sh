#!/usr/bin/env bash
# The cross tools the emulation tests use (they skip with a printed reason
# when these are absent; CI runs this script first):
# - gcc-aarch64-linux-gnu: links the C harness around a model compiled for
#   AArch64 Linux; qemu-user (qemu-aarch64) runs it.
# - gcc-arm-none-eabi + libnewlib-arm-none-eabi: links a bare-metal Cortex-M4
#   program (newlib's semihosting `rdimon` for stdio and exit);
#   qemu-system-arm (`-M mps2-an386`) runs it.
set -euo pipefail
need=()
command -v aarch64-linux-gnu-gcc >/dev/null || need+=(gcc-aarch64-linux-gnu libc6-dev-arm64-cross)
command -v qemu-aarch64 >/dev/null || need+=(qemu-user)
command -v arm-none-eabi-gcc >/dev/null || need+=(gcc-arm-none-eabi libnewlib-arm-none-eabi)
command -v qemu-system-arm >/dev/null || need+=(qemu-system-arm)
if [ ${#need[@]} -gt 0 ]; then
    sudo_cmd=""
    [ "$(id -u)" -eq 0 ] || sudo_cmd="sudo"
    $sudo_cmd apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -qq --no-install-recommends "${need[@]}"
fi
