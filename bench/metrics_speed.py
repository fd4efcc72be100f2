"""How long the metrics of DESIGN.md section 4 take on a large synthetic trace (one core).

    python bench/metrics_speed.py                 # 10 million spans, best of 3
    python bench/metrics_speed.py --spans 1000000 --repeat 1 --shuffle
    python bench/metrics_speed.py --shuffle --output bench/results/<date>-cpu-metrics-speed.json

The trace is gemmtrace.analysis.synthetic's persistent dynamic-scheduled kernel on 132 SMs, 64
k-blocks a tile, %globaltimer's 32 ns steps, rows in the order a decoded buffer holds them (region
by region, each in time order); --shuffle times rows in random order too. Prints the time and
checks the invariants (idle = head + gaps + tail, 0 <= overlap <= 1, ∫a <= P·D); exits 1 if one
fails. numpy runs these operations on one core.
"""
from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import numpy as np  # noqa: E402

from gemmtrace import Run, __version__  # noqa: E402
from gemmtrace.bench import cpu_name  # noqa: E402
from gemmtrace.analysis import compute_metrics  # noqa: E402
from gemmtrace.analysis.synthetic import synthetic_run  # noqa: E402

SPANS_PER_TILE = 4 * 64 + 2  # 64 k-blocks x (wait_full, mma, wait_empty, tma_issue) + claim + epilogue


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--spans", type=int, default=10_000_000, help="about how many spans (default 10 million)")
    ap.add_argument("--repeat", type=int, default=3, help="timed repetitions; the best is reported")
    ap.add_argument("--shuffle", action="store_true", help="also time the rows in random order")
    ap.add_argument("--output", type=Path, default=None, help="write the result as JSON here")
    args = ap.parse_args()
    result = {
        "benchmark": "compute_metrics on a synthetic persistent GEMM trace (bench/metrics_speed.py)",
        "date": dt.date.today().isoformat(),
        "machine": {"cpu": cpu_name(), "cpus_visible": os.cpu_count(), "python": platform.python_version(),
                    "numpy": np.__version__},
        "gemmtrace": __version__,
        "cases": [],
    }

    t = time.perf_counter()
    run = synthetic_run(sms=132, tiles=max(1, args.spans // SPANS_PER_TILE), kblocks=64, scheduler="dynamic",
                        timer_step_ns=32, seed=0)
    print(f"generated {len(run.spans):,} spans in {time.perf_counter() - t:.1f} s")
    cases = [("decoded order", run)]
    if args.shuffle:
        shuffled = run.spans.sample(frac=1.0, random_state=0).reset_index(drop=True)
        cases.append(("shuffled rows", Run(shuffled, run.meta)))
    ok = True
    for name, r in cases:
        best = float("inf")
        for _ in range(max(1, args.repeat)):
            t = time.perf_counter()
            m = compute_metrics(r)
            best = min(best, time.perf_counter() - t)
        print(f"compute_metrics on {len(r.spans):,} spans ({name}): {best:.3f} s (best of {args.repeat}) "
              f"on {cpu_name()}, {os.cpu_count()} CPUs visible")
        tc = m.tensor_core
        checks = {
            "idle = head + gaps + tail": tc.head_ns + tc.gap_ns + tc.tc_tail_ns == tc.idle_ns,
            "gap attribution sums to gaps": sum(tc.gap_attribution_ns.values()) == tc.gap_ns,
            "0 <= epilogue overlap <= 1": m.epilogue.overlap is not None and 0.0 <= m.epilogue.overlap <= 1.0,
            "∫a(t) <= P·D": m.occupancy.integral_sm_ns <= m.P * m.D,
            "every tile counted": m.tail_wave.tiles == int(run.meta["launch"]["tiles"]),
        }
        bad = [k for k, v in checks.items() if not v]
        ok &= not bad
        print("  invariants hold" if not bad else f"  FAILED: {', '.join(bad)}")
        result["cases"].append({"rows": name, "spans": len(r.spans), "seconds_best": round(best, 4),
                                "repeat": args.repeat, "invariants_hold": not bad})
    if args.output:
        args.output.parent.mkdir(parents=True, exist_ok=True)
        args.output.write_text(json.dumps(result, indent=2) + "\n")
        print(f"wrote {args.output}")
    return 0 if ok else 1



if __name__ == "__main__":
    sys.exit(main())
