"""Check the what-if model against real runs: predict each run from another and compare.

Records one traced run per (scheduler, CTA count) of a kernel and shape on the GPU, then replays
each recorded run under every scheduler and CTA count and prints predicted against measured traced
duration (D) and kernel time. With saved runs instead (--runs), no GPU is needed.

    python bench/simulate_check.py --kernel v6 --shape 8192 --sched static --ctas 0,100,66
    python bench/simulate_check.py --runs runs/v8-static runs/v8-dynamic --output check.json

--ctas 0 means the kernel's default grid (one CTA per SM); other values cap the grid (max_ctas).
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from gemmtrace import load  # noqa: E402
from gemmtrace.analysis import compute_metrics, simulate  # noqa: E402
from gemmtrace.analysis.compare import read_timing  # noqa: E402


def record(kernel: str, shape: tuple[int, int, int], scheds: list[str], ctas: list[int], out: Path) -> list[Path]:
    from gemmtrace.runner import RunOptions, run_kernel

    folders = []
    for cap in ctas:
        results = run_kernel(RunOptions(kernel=kernel, shape=shape, schedulers=tuple(scheds), max_ctas=cap, iters=20))
        for r in results:
            folder = out / f"{kernel}-{'x'.join(map(str, shape))}-{r.scheduler}-ctas{r.run.meta['launch']['grid_ctas']}"
            r.run.save(folder)
            folders.append(folder)
            print(f"recorded {folder.name}: {len(r.run.spans):,} spans, kernel {r.kernel_ms:.4f} ms")
    return folders


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--kernel", default="v6")
    ap.add_argument("--shape", default="8192")
    ap.add_argument("--sched", default="static")
    ap.add_argument("--ctas", default="0")
    ap.add_argument("--runs", nargs="*", type=Path, help="saved runs to cross-check instead of recording")
    ap.add_argument("--save", type=Path, default=Path("runs/simulate-check"), help="where recorded runs go")
    ap.add_argument("--output", type=Path, default=None, help="write the table as JSON here")
    args = ap.parse_args()

    if args.runs:
        folders = list(args.runs)
    else:
        dims = [int(x) for x in args.shape.replace(",", "x").split("x")]
        shape = tuple(dims * 3 if len(dims) == 1 else dims)
        folders = record(args.kernel, shape, args.sched.split(","), [int(c) for c in args.ctas.split(",")], args.save)
    runs = [load(f) for f in folders]
    heads = ("D µs", "traced launch ms", "kernel ms", "profiled ms", "replay error")
    print(f"{'run':<40} " + " ".join(f"{h:>{max(9, len(h) + 1)}}" for h in heads))
    for r in runs:
        t, prof = r.meta.get("timings", {}), r.meta.get("profiler", {})
        sim = simulate(r, schedulers=[r.meta.get("scheduler", "static")])
        nan = float("nan")
        print(f"{r.path.name:<40} {sim.measured_makespan_ns / 1e3:>9.1f} {prof.get('traced_launch_ms', nan):>17.4f} "
              f"{t.get('kernel_ms', nan):>10.4f} {t.get('profiled_ms', nan):>12.4f} {100 * sim.replay_error:>+12.2f}%")
    rows = []
    print(f"{'from':<40} {'to':<40} {'pred D µs':>10} {'meas D µs':>10} {'err D':>7} "
          f"{'pred ms':>9} {'meas ms':>9} {'err':>7}")
    for src in runs:
        for dst in runs:
            cluster = int(dst.meta["launch"].get("cluster") or 1)
            ctas = int(dst.meta["launch"]["grid_ctas"])
            sched = dst.meta.get("scheduler", "static")
            persistent = ctas < int(dst.meta["launch"].get("tiles") or ctas + 1)
            sim = simulate(src, schedulers=[sched], workers=ctas if persistent and ctas % cluster == 0 else None)
            s = sim.schedule(sched)
            d_meas = compute_metrics(dst).duration_ns
            ms_meas = read_timing(dst.meta).kernel_ms
            row = {
                "from": src.path.name, "to": dst.path.name, "scheduler": sched, "ctas": ctas,
                "predicted_d_ns": s.makespan_ns, "measured_d_ns": d_meas, "error_d": s.makespan_ns / d_meas - 1,
                "predicted_kernel_ms": s.kernel_ms, "measured_kernel_ms": ms_meas,
                "error_kernel": (s.kernel_ms / ms_meas - 1) if (s.kernel_ms and ms_meas) else None,
                "replay_error_of_source": sim.replay_error,
            }
            rows.append(row)
            ek = "—" if row["error_kernel"] is None else f"{100 * row['error_kernel']:+.2f}%"
            print(f"{src.path.name:<40} {dst.path.name:<40} {s.makespan_ns / 1e3:>10.1f} {d_meas / 1e3:>10.1f} "
                  f"{100 * row['error_d']:+6.2f}% {s.kernel_ms or 0:>9.4f} {ms_meas or 0:>9.4f} {ek:>7}")
    if args.output:
        args.output.parent.mkdir(parents=True, exist_ok=True)
        device = (runs[0].meta.get("device") or {}).get("name") if runs else None
        result = {"model": "gemmtrace.analysis.simulate", "device": device, "command": " ".join(sys.argv), "rows": rows}
        args.output.write_text(json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
