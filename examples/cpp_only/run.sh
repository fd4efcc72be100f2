#!/usr/bin/env bash
# Build the C++ example, run it, import its capture into a run folder and analyze it.
#
#   examples/cpp_only/run.sh [--shape 4096 | MxNxK] [--out runs/cpp_only]
#
# Writes OUT/raw/ws_gemm.{bin,json,tags.h} (the program's capture) and OUT/run (the run folder).
# Needs nvcc (or $NVCC), the gemmtrace command, and an sm_90 GPU to run.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
shape=4096
out=runs/cpp_only
while [ $# -gt 0 ]; do
  case "$1" in
    --shape) shape="${2:?--shape needs a value}"; shift 2 ;;
    --out) out="${2:?--out needs a value}"; shift 2 ;;
    -h|--help) sed -n '2,8p' "$0"; exit 0 ;;
    *) echo "error: unknown argument $1 (use --shape and --out)." >&2; exit 2 ;;
  esac
done
IFS=x read -r m n k <<< "${shape//,/x}"
n="${n:-$m}"; k="${k:-$m}"

nvcc="${NVCC:-nvcc}"
command -v "$nvcc" > /dev/null || { echo "error: nvcc was not found: install the CUDA toolkit or set NVCC." >&2; exit 1; }
# $GEMMTRACE overrides the command (e.g. "python3 -m gemmtrace" where the console script is not on PATH).
read -r -a gemmtrace <<< "${GEMMTRACE:-gemmtrace}"
command -v "${gemmtrace[0]}" > /dev/null || { echo "error: the gemmtrace command was not found: pip install gemmtrace." >&2; exit 1; }

# The kernel is examples/ctypes_library/ws_gemm.cu, #included by main.cu; gemmtrace's headers come
# from the installed package.
mkdir -p "$here/build"
"$nvcc" -O3 -std=c++17 -gencode=arch=compute_90a,code=sm_90a $("${gemmtrace[@]}" includes) -I"$here/../ctypes_library" \
  "$here/main.cu" -o "$here/build/ws_gemm_cpp"

"$here/build/ws_gemm_cpp" "$m" "$n" "$k" "$out/raw/ws_gemm"
"${gemmtrace[@]}" import "$out/raw/ws_gemm.json" -o "$out/run"
"${gemmtrace[@]}" analyze "$out/run"
