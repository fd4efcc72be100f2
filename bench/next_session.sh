#!/usr/bin/env bash
# The GPU work that issues 3 and 4 still need, in four calls of under 10 minutes each (through
# bench/device.sh; carry .gtcache, built here with `GEMMTRACE_CACHE=.gtcache gemmtrace build --all`,
# and .whl). Results land in $OUT; copy the JSON into bench/results/ and the numbers into NOTES.
#   bash bench/device.sh bash bench/next_session.sh tests     # the committed kernels, correct
#   bash bench/device.sh bash bench/next_session.sh bench     # ... and timed
#   bash bench/device.sh bash bench/next_session.sh pending-tests   # bench/pending/*.patch, correct?
#   bash bench/device.sh bash bench/next_session.sh pending-ab      # ... and what they are worth
set -o pipefail
gt() { timeout "$1" python3 -m gemmtrace "${@:2}" 2>&1 | grep -vE "^\s*$" | tail -40; }
case "${1:-}" in
tests)
  # Every kernel correct on the GPU (square, non-square, non-multiple shapes, both builds, every
  # scheduler and order; debug-build hang reports; no drops at 16384^3).
  timeout 540 python3 -m pytest -q tests/test_gpu_kernels.py 2>&1 | tail -15 | tee "$OUT/gpu_tests.log"
  ;;
bench)
  # The series at 4096^3 and 8192^3 with the current method (rotating order and input sets): the
  # profiler-overhead target at 8192^3 for v1-v4 was last measured with a fixed order.
  gt 150 bench --kernels v1,v2,v3,v4,v5,v6 --shape 4096 --shape 8192 --iters 50 -o "$OUT/bench-v1-v6.json"
  # v7 and v8 over the whole default list (16384^3 and the non-square shapes were last measured
  # before the deferred epilogue and the staged recorder).
  gt 150 bench --kernels v7 --order snake --iters 30 -o "$OUT/bench-v7-snake.json"
  gt 200 bench --kernels v8 --order hilbert --sched static,dynamic --iters 30 -o "$OUT/bench-v8-hilbert.json"
  ;;
pending-tests)
  for p in consumer-skew scheduler-warp; do  # GPU tests of the persistent kernels on a patched copy
    rm -rf /tmp/patched && cp -r . /tmp/patched && patch -d /tmp/patched -p1 --batch -s < "bench/pending/$p.patch" &&
      (cd /tmp/patched && PYTHONPATH="/tmp/patched:${PYTHONPATH#*:}" timeout 260 python3 -m pytest -q -x \
        tests/test_gpu_kernels.py -k "v6 or v7 or v8" 2>&1 | tail -6 | tee "$OUT/gpu_tests-$p.log")
  done
  ;;
pending-ab)
  timeout 300 python3 bench/ab_patch.py bench/pending/consumer-skew.patch --kernel v6 --kernel v7:snake \
    --kernel v8:hilbert --shape 4096 --shape 8192 --shape 8192x8192x4096 -o "$OUT/ab-consumer-skew.json"
  timeout 240 python3 bench/ab_patch.py bench/pending/scheduler-warp.patch --kernel v8:hilbert --sched static,dynamic \
    --shape 4096 --shape 8192x8192x4096 --shape 6144x6144x2048 -o "$OUT/ab-scheduler-warp.json"
  ;;
*) echo "usage: bench/next_session.sh tests|bench|pending-tests|pending-ab" >&2; exit 2 ;;
esac
ls -la "$OUT"
