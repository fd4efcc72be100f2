#!/usr/bin/env bash
# Record the benchmark tables committed under bench/results/ (run on the GPU box through
# bench/device.sh; results land in $OUT, then are copied into bench/results/ by hand).
#   bash bench/device.sh bash bench/record_all.sh
set -o pipefail
out=${OUT:-bench/results}
gt() { timeout 400 python3 -m gemmtrace "$@" 2>&1 | grep -vE "^\s*$" | tail -60; }
gt bench --kernels v1,v2,v3 --shape 4096 --shape 8192 -o "$out/bench-v1-v3.json"
gt bench --kernels v4,v5,v6 -o "$out/bench-v4-v6.json"            # the default shape list
gt bench --kernels v7 --order snake -o "$out/bench-v7-snake.json"
gt bench --kernels v7 --order hilbert -o "$out/bench-v7-hilbert.json"
gt bench --kernels v8 --sched static,dynamic --order hilbert -o "$out/bench-v8-hilbert.json"
