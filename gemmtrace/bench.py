"""`gemmtrace bench`: a kernel list over a shape list, timed against cuBLAS in one process, saved as JSON.

The shape lists are named suites (`SUITES`, the one source of truth): "default" for the headline
sizes, "shapes" for a wider set with small, skinny and odd shapes as well. A shape a kernel cannot do
(its own launch plan refuses it, e.g. N not a multiple of 8 for a TMA-store epilogue) is skipped with
one line saying why; every other error stops the run.
"""
from __future__ import annotations

import datetime as _dt
import json
import platform
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from . import registry
from .build import build
from .launch import KernelLibrary
from .paths import ROOT, GemmtraceError
from .runner import RunOptions, RunResult, device_meta, require_gpu, run_kernel, versions_meta

# Square sizes plus non-square shapes from real models (Llama-3 8B MLP projections at 4096 tokens,
# and a K=4096 half-depth GEMM). One source of truth for the default list.
DEFAULT_SHAPES: tuple[tuple[int, int, int], ...] = (
    (4096, 4096, 4096),
    (8192, 8192, 8192),
    (16384, 16384, 16384),
    (8192, 8192, 4096),
    (4096, 14336, 4096),
    (4096, 4096, 14336),
)
# The wider suite: small and skinny GEMMs (decode-like M of 64 to 512, N of 128), sizes that are not
# multiples of the tiles (3072, 4160, K=1096), a large MLP projection, then the default list.
SHAPES_SUITE: tuple[tuple[int, int, int], ...] = (
    (256, 256, 16384),
    (512, 1024, 8192),
    (64, 8192, 4096),
    (256, 14336, 4096),
    (8192, 128, 8192),
    (2048, 2048, 2048),
    (3072, 3072, 3072),
    (4160, 4160, 4160),
    (6144, 6144, 1096),
    (4096, 28672, 8192),
) + DEFAULT_SHAPES
SUITES: dict[str, tuple[tuple[int, int, int], ...]] = {"default": DEFAULT_SHAPES, "shapes": SHAPES_SUITE}
# A checkout saves into its bench/results; an installed gemmtrace into ./bench-results.
RESULTS_DIR = ROOT / "bench" / "results" if ROOT else Path("bench-results")


def cpu_name() -> str:
    """The host CPU's model, for benchmark records of the tooling (export, metrics) that runs there."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


@dataclass
class BenchRow:
    kernel: str
    shape: tuple[int, int, int]
    scheduler: str
    order: str
    result: RunResult
    chosen: str | None = None  # `best`: what the rule ran and why

    def to_dict(self) -> dict:
        r = self.result
        t = r.run.meta["timings"]
        return {
            "kernel": self.kernel, "M": self.shape[0], "N": self.shape[1], "K": self.shape[2],
            "scheduler": self.scheduler, "order": self.order,
            "kernel_ms": t["kernel_ms"], "kernel_ms_p25": t["kernel_ms_p25"], "kernel_ms_p75": t["kernel_ms_p75"],
            "profiled_ms": t["profiled_ms"], "cublas_ms": t["reference_ms"],
            "tflops": t["tflops"], "cublas_tflops": t["reference_tflops"], "profiled_tflops": t["profiled_tflops"],
            "pct_of_cublas": t["pct_of_reference"], "profiler_overhead": t["profiler_overhead"],
            "rel_error": r.rel_error_plain, "rel_error_profiled": r.rel_error_profiled,
            "spans": int(len(r.run.spans)), "dropped": r.dropped,
            **({"tile": r.run.meta["launch"]["tile"][:2], "cluster": r.run.meta["launch"]["cluster"]}
               if "launch" in r.run.meta else {}),
            **({"chosen": self.chosen} if self.chosen else {}),
        }


def suite_shapes(suite: str) -> list[tuple[int, int, int]]:
    """The shapes of a named suite; one sentence for an unknown name."""
    if suite not in SUITES:
        raise GemmtraceError(f"unknown suite {suite!r}; choose one of {', '.join(SUITES)}.")
    return list(SUITES[suite])


def _shape_str(shape: tuple[int, int, int]) -> str:
    return "x".join(map(str, shape))


def _library(kernel: str, libs: dict) -> KernelLibrary:
    """The kernel's loaded library, built and loaded once per bench (`libs` caches them)."""
    if kernel not in libs:
        libs[kernel] = KernelLibrary(build(kernel).library, kernel)
    return libs[kernel]


def plan_refusal(kernel: str, shape: tuple[int, int, int], schedulers: tuple[str, ...], order: str,
                 libs: dict) -> str | None:
    """Why `kernel` cannot run `shape`, as its own launch plan says (the check run_kernel makes
    before allocating anything), or None when it can. `libs` caches the loaded libraries."""
    lib = _library(kernel, libs)
    for sched in schedulers:
        try:
            lib.plan(lib.args(*shape, sched=sched, order=order))
        except GemmtraceError as e:
            return str(e)
    return None


def run_bench(kernels: list[str], shapes: list[tuple[int, int, int]], schedulers: tuple[str, ...] = ("static",),
              order: str = "row", iters: int = 30, warmup: int = 5,
              progress: Callable[[str], None] | None = None,
              status: Callable[[str, int, int], None] | None = None,
              suite: str | None = None) -> tuple[list[BenchRow], dict]:
    """Run every kernel at every shape. `progress` gets one line per finished or skipped shape,
    `status` (what runs now, how many are done, how many in all) before each."""
    say = progress or (lambda _msg: None)
    for kernel in kernels:  # no GPU, or the wrong one: one sentence before anything is built
        require_gpu(registry.get("v10" if kernel == registry.BEST else kernel))
    rows: list[BenchRow] = []
    skipped: list[dict] = []
    libs: dict = {}
    total, done = len(kernels) * len(shapes), 0
    for kernel in kernels:
        for shape in shapes:
            tag = f"[{done + 1}/{total}] {kernel} {_shape_str(shape)}"
            if status:
                status(f"{kernel} {_shape_str(shape)}", done, total)
            chosen = None
            if kernel == registry.BEST:
                from .choose import FAMILY_KERNEL, best_options

                try:
                    opts, choice = best_options(shape, lib=_library(FAMILY_KERNEL, libs), iters=iters, warmup=warmup)
                    reason, chosen = None, choice.label()
                except GemmtraceError as e:
                    reason = str(e)
            else:
                reason = plan_refusal(kernel, shape, schedulers, order, libs)
                opts = RunOptions(kernel=kernel, shape=shape, schedulers=schedulers, order=order, iters=iters, warmup=warmup)
            if reason:
                skipped.append({"kernel": kernel, "M": shape[0], "N": shape[1], "K": shape[2], "reason": reason})
                say(f"{tag}: skipped ({reason.rstrip('.')})")
            else:
                for res in run_kernel(opts):
                    row = BenchRow(kernel, shape, res.scheduler, opts.order, res, chosen)
                    rows.append(row)
                    d = row.to_dict()
                    say(f"{tag} {chosen or res.scheduler}: {d['kernel_ms']:.4f} ms, {d['tflops']:.0f} TFLOP/s, "
                        f"{100 * d['pct_of_cublas']:.1f}% of cuBLAS ({d['cublas_tflops']:.0f}), "
                        f"profiler {100 * d['profiler_overhead']:+.1f}%")
            done += 1
    if status:
        status("done", done, total)
    import torch

    header = {
        "date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "device": device_meta(torch),
        "versions": versions_meta(torch),
        "suite": suite,
        "method": rows[0].result.run.meta["timings"]["method"] if rows else None,
        "skipped": skipped,
    }
    return rows, header


def save_bench(rows: list[BenchRow], header: dict, out: Path | None = None, name: str | None = None) -> Path:
    RESULTS_DIR.mkdir(parents=True, exist_ok=True)
    if out is None:
        dev = re.sub(r"[^A-Za-z0-9]+", "-", header["device"]["name"]).strip("-").lower()
        stamp = header["date"][:19].replace(":", "").replace("-", "")
        kernels = "-".join(sorted({r.kernel for r in rows}))
        suite = header.get("suite")
        out = RESULTS_DIR / f"{stamp}-{dev}-{name or kernels + (f'-{suite}' if suite and suite != 'default' else '')}.json"
    out.write_text(json.dumps({**header, "rows": [r.to_dict() for r in rows]}, indent=2) + "\n")
    return out
