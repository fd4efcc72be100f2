#!/usr/bin/env bash
# One lease, one call (through bench/device.sh): GPU tests of the persistent kernels, then v5-v8 timed
# against cuBLAS at 4096^3 and 8192^3 (median of 50), and one traced v8 run per scheduler.
#   bash bench/device.sh bash bench/epilogue_session.sh [tests-filter]
set -o pipefail
filter=${1:-"v5 or v6 or v7 or v8"}
timeout 240 python3 -m pytest -q -x tests/test_gpu_kernels.py -k "$filter" 2>&1 | tail -8 | tee "$OUT/gpu_tests.log"
b() { timeout 120 python3 -m gemmtrace bench --shape 4096 --shape 8192 --iters 50 "$@" 2>&1 | grep -vE "^\s*$" | tail -12; }
b --kernels v5 -o "$OUT/bench-v5.json"
b --kernels v6 -o "$OUT/bench-v6.json"
b --kernels v7 --order snake -o "$OUT/bench-v7-snake.json"
b --kernels v8 --order hilbert --sched static,dynamic -o "$OUT/bench-v8-hilbert.json"
timeout 120 python3 -m gemmtrace run --kernel v8 --shape 4096 --sched static,dynamic --order hilbert --no-export --out runs 2>&1 | tail -30
tar czf "$OUT/runs.tgz" runs
