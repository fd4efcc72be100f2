#!/usr/bin/env bash
# One lease, one call: GPU tests, a benchmark and saved traces (run through bench/device.sh).
#   bash bench/device.sh bash bench/gpu_session.sh "v2,v3,v4,v5,v6" "4096 8192" "v4 v5 v6"
set -o pipefail
kernels=${1:-v1,v2,v3,v4,v5,v6}; shapes=${2:-"4096 8192"}; traced=${3:-}
shape_args=(); for s in $shapes; do shape_args+=(--shape "$s"); done
timeout 300 python3 -m pytest -q -x tests/test_gpu_kernels.py 2>&1 | tail -15 | tee "$OUT/gpu_tests.log"
timeout 200 python3 -m gemmtrace bench --kernels "$kernels" "${shape_args[@]}" -o "$OUT/bench.json" 2>&1 | tail -25
for k in $traced; do timeout 60 python3 -m gemmtrace run --kernel "$k" --shape 4096 --no-export --out runs 2>&1 | tail -3; done
[ -n "$traced" ] && tar czf "$OUT/runs.tgz" runs
