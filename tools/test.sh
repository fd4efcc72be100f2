#!/usr/bin/env bash
# The project's test command (README quick start); .ci/run runs exactly this.
# Without a GPU the GPU tests skip and everything else runs: decoding, export, metrics, reports in
# a real browser, the CLI, and compiling every kernel with nvcc for its architecture.
set -euo pipefail
cd "$(dirname "$0")/.."
pip_args=(-e '.[test]')
if [ -n "${GEMMTRACE_WHEELS:-}" ]; then  # an offline machine: install from a folder of wheels only
  pip_args=(--no-index --find-links "$GEMMTRACE_WHEELS" --no-build-isolation "${pip_args[@]}")
fi
python3 -m pip install -q "${pip_args[@]}"
# The report test opens the HTML report in Debian's chromium; install it where we can.
if [ -z "${GEMMTRACE_WHEELS:-}" ] && ! command -v chromium >/dev/null 2>&1 && command -v apt-get >/dev/null 2>&1 && [ "$(id -u)" = 0 ]; then
  { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; } ||
    echo "tools/test.sh: chromium could not be installed; the browser test will say so and skip"
fi
# In CI the browser test must run, not skip (tests/test_report.py).
if [ -n "${CI:-}" ]; then export GEMMTRACE_REQUIRE_BROWSER=1; fi
python3 -m pytest -q
