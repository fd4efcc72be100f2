#!/usr/bin/env bash
# Run on the lent GPU machine (see /work/.library/device): installs carried wheels, then runs
# whatever is passed as arguments with the repo on PYTHONPATH. Logs go under $OUT.
set -uo pipefail
if ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
  export PYTHONPATH=/tmp/site
fi
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1 GEMMTRACE_CACHE=/tmp/gtcache
# Kernels built on the CPU box with the same nvcc (carried as .gtcache) are valid here: no rebuild.
[ -d .gtcache ] && mkdir -p "$GEMMTRACE_CACHE" && cp -r .gtcache/. "$GEMMTRACE_CACHE"/ 2>/dev/null
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,clocks.mem,driver_version,temperature.gpu --format=csv
"$@"
