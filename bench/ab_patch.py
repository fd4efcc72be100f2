"""A/B a kernel patch on the GPU: the committed kernels against the same kernels with a patch applied,
in one process, alternating A B B A so that drift in clocks and power falls on both.

    python3 bench/ab_patch.py bench/pending/consumer-skew.patch --kernel v7:snake --kernel v8:hilbert \
        --sched static,dynamic --shape 4096 --shape 8192 -o "$OUT/ab-skew.json"

Only the patch's hunks under kernels/ are applied, to a copy of kernels/sm90 in a temporary folder;
the copy is registered as kernel "<name>+" beside each kernel named, so both build, check against
torch and time with the ordinary harness
(gemmtrace.runner: each run times cuBLAS, the plain and the profiled build round by round).
Ratios to cuBLAS are compared, never raw times from different calls.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from gemmtrace import registry  # noqa: E402
from gemmtrace.cli import parse_shape  # noqa: E402
from gemmtrace.paths import KERNELS_DIR  # noqa: E402
from gemmtrace.runner import RunOptions, device_meta, run_kernel, versions_meta  # noqa: E402


def kernel_hunks(patch_text: str) -> str:
    """The parts of a git diff that change files under kernels/ (the rest is Python and tests)."""
    blocks = ("\n" + patch_text).split("\ndiff --git ")[1:]
    return "".join("diff --git " + b + "\n" for b in blocks if b.startswith("a/kernels/"))


def patched_copy(patch: Path, dest: Path) -> Path:
    """Copy kernels/sm90's files into `dest` and apply the patch's kernel hunks there. Raises
    ValueError, with patch's own words, when the patch does not apply."""
    dest.mkdir(parents=True, exist_ok=True)
    for f in (KERNELS_DIR / "sm90").iterdir():
        if f.is_file():
            shutil.copy2(f, dest / f.name)
    hunks = kernel_hunks(patch.read_text())
    if not hunks:
        raise ValueError(f"{patch} changes nothing under kernels/.")
    # Paths in the patch are a/kernels/sm90/<file>: strip three components inside the copy.
    out = subprocess.run(["patch", "-p3", "--batch", "--forward", "-d", str(dest)], input=hunks, text=True,
                         capture_output=True)
    if out.returncode != 0:
        raise ValueError(f"{patch} does not apply to the committed kernels:\n{out.stdout}{out.stderr}")
    return dest


def register_patched(base: str, folder: Path) -> str:
    """Register the patched copy of kernel `base` as "<base>+" (the registry takes an absolute source)."""
    spec = registry.get(base)
    variant = f"{base}+"
    registry.KERNELS[variant] = dataclasses.replace(spec, name=variant, source=str(folder / Path(spec.source).name))
    return variant


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("patch", type=Path)
    ap.add_argument("--kernel", action="append", required=True, help="KERNEL or KERNEL:ORDER (repeatable)")
    ap.add_argument("--sched", default="static", help="schedulers, comma-separated (kernels that lack one use theirs)")
    ap.add_argument("--shape", action="append", required=True, help="N or MxNxK (repeatable)")
    ap.add_argument("--iters", type=int, default=30)
    ap.add_argument("--repeats", type=int, default=2, help="A B pairs per case, alternating A B, B A, ...")
    ap.add_argument("-o", "--output", type=Path, required=True)
    args = ap.parse_args()

    try:
        folder = patched_copy(args.patch, Path(tempfile.mkdtemp(prefix="gemmtrace-ab-")))
    except ValueError as e:
        sys.exit(str(e))
    import datetime as dt

    import torch

    record = {
        "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "device": device_meta(torch), "versions": versions_meta(torch),
        "patch": args.patch.name,
        "method": f"gemmtrace.runner per call (cuBLAS, plain and profiled timed round by round, median of {args.iters}); "
                  f"{args.repeats} calls per variant alternating A B / B A; values listed per call",
        "rows": [],
    }
    rows = record["rows"]
    cases = []  # (kernel, its patched variant, tile order, schedulers)
    for item in args.kernel:
        base, _, order = item.partition(":")
        spec = registry.get(base)
        scheds = tuple(s for s in args.sched.split(",") if s in spec.schedulers) or spec.schedulers[:1]
        cases.append((base, register_patched(base, folder), order or spec.orders[0], scheds))
    for shape_text in args.shape:
        shape = parse_shape(shape_text)
        for base, variant, order, scheds in cases:
            samples: dict[tuple[str, str], list] = {}
            for rep in range(args.repeats):
                for k in ((base, variant) if rep % 2 == 0 else (variant, base)):
                    opts = RunOptions(kernel=k, shape=shape, schedulers=scheds, order=order, iters=args.iters)
                    for r in run_kernel(opts):
                        samples.setdefault((k, r.scheduler), []).append(r)
            for sched in scheds:
                a, b = samples[(base, sched)], samples[(variant, sched)]
                pa = statistics.median(r.pct_of_cublas for r in a)
                pb = statistics.median(r.pct_of_cublas for r in b)
                row = {
                    "kernel": base, "order": order, "scheduler": sched, "M": shape[0], "N": shape[1], "K": shape[2],
                    "base_pct_of_cublas": [r.pct_of_cublas for r in a], "patched_pct_of_cublas": [r.pct_of_cublas for r in b],
                    "base_overhead": [r.overhead for r in a], "patched_overhead": [r.overhead for r in b],
                    "base_tflops": [r.tflops(r.kernel_ms) for r in a], "patched_tflops": [r.tflops(r.kernel_ms) for r in b],
                    "cublas_tflops": [r.tflops(r.cublas_ms) for r in a + b],
                    "rel_error": max(max(r.rel_error_plain, r.rel_error_profiled) for r in a + b),
                    "delta_pct_points": 100 * (pb - pa),
                }
                rows.append(row)
                args.output.write_text(json.dumps(record, indent=1) + "\n")  # after every case: a timeout keeps the rest
                print(f"{base:3s} {order:7s} {sched:7s} {shape[0]}x{shape[1]}x{shape[2]:<6d} base {100 * pa:6.1f}% "
                      f"patched {100 * pb:6.1f}% of cuBLAS ({row['delta_pct_points']:+.1f} points); overhead "
                      f"{100 * statistics.median(r.overhead for r in a):+.2f}% / {100 * statistics.median(r.overhead for r in b):+.2f}%",
                      flush=True)


if __name__ == "__main__":
    main()
