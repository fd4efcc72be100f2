#!/usr/bin/env bash
# Record the benchmark tables of bench/NOTES.md on this machine's GPU (an H100 or another sm_90a GPU):
# v1-v7 at 4096^3 and 8192^3, v7 in snake order and v8 under both schedulers there, and v8, v9, v10
# and best over the wider "shapes" suite. One JSON per line below, into the folder given
# (default bench/results/), named <date>-<gpu>-<what>.json.
#   bash bench/record_tables.sh [folder]
set -euo pipefail
out=${1:-$(dirname "$0")/results}
mkdir -p "$out" && out=$(cd "$out" && pwd)  # a folder given relative to where the script was started
cd "$(dirname "$0")/.."
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader -i 0 | head -1 | tr -cs 'A-Za-z0-9' '-' | tr 'A-Z' 'a-z' | sed 's/-$//')
name() { echo "$out/$(date -u +%Y%m%d)-$gpu-$1.json"; }
gt() { python3 -m gemmtrace "$@"; }
gt bench --kernels v1,v2,v3,v4,v5,v6,v7 --shape 4096 --shape 8192 --iters 30 -o "$(name bench-v1-v7-4096-8192)"
gt bench --kernels v7 --order snake --shape 4096 --shape 8192 --iters 30 -o "$(name bench-v7-snake-4096-8192)"
gt bench --kernels v8 --sched static,dynamic --shape 4096 --shape 8192 --iters 30 -o "$(name bench-v8-static-dynamic-4096-8192)"
gt bench --kernels v8,v9,v10,best --suite shapes --iters 30 -o "$(name bench-v8-v9-v10-best-shapes)"
