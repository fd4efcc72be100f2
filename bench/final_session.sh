#!/usr/bin/env bash
# The closing GPU session: the README's test command on the GPU box, then the runs the analysis
# issue needs (bundled samples, static vs dynamic for the what-if check), saved under $OUT.
#   bash bench/device.sh bash bench/final_session.sh
set -o pipefail
# (The README's test command runs in a call of its own: GEMMTRACE_WHEELS=.whl bash tools/test.sh)
gt() { timeout 120 python3 -m gemmtrace "$@" 2>&1 | grep -vE "^\s*$" | tail -40; }
# Bundled samples: small runs of v8 under both schedulers, with their traces.
gt run --kernel v8 --shape 4096x4096x1024 --sched static,dynamic --order hilbert --out samples
# The what-if check and the scheduling study: both schedulers at shapes with partial last waves.
for shape in 4096 8192x8192x4096 6144x6144x2048; do
  gt run --kernel v8 --shape "$shape" --sched static,dynamic --order hilbert --no-export --out study
done
# Issue 2's main job, with its traces.
gt run --kernel v1 --shape 4096 --out main
tar czf "$OUT/samples.tgz" samples && tar czf "$OUT/study.tgz" study && tar czf "$OUT/main.tgz" main
ls -la "$OUT"
