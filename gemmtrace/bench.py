"""`gemmtrace bench`: a kernel list over a shape list, timed against cuBLAS in one process, saved as JSON."""
from __future__ import annotations

import datetime as _dt
import json
import platform
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from .paths import ROOT
from .runner import RunOptions, RunResult, device_meta, run_kernel, versions_meta

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

    def to_dict(self) -> dict:
        r = self.result
        t = r.run.meta["timings"]
        return {
            "kernel": self.kernel, "M": self.shape[0], "N": self.shape[1], "K": self.shape[2],
            "scheduler": self.scheduler, "order": self.order,
            "kernel_ms": t["kernel_ms"], "kernel_ms_p25": t["kernel_ms_p25"], "kernel_ms_p75": t["kernel_ms_p75"],
            "profiled_ms": t["profiled_ms"], "cublas_ms": t["cublas_ms"],
            "tflops": t["tflops"], "cublas_tflops": t["cublas_tflops"], "profiled_tflops": t["profiled_tflops"],
            "pct_of_cublas": t["pct_of_cublas"], "profiler_overhead": t["profiler_overhead"],
            "rel_error": r.rel_error_plain, "rel_error_profiled": r.rel_error_profiled,
            "spans": int(len(r.run.spans)), "dropped": r.dropped,
        }


def run_bench(kernels: list[str], shapes: list[tuple[int, int, int]], schedulers: tuple[str, ...] = ("static",),
              order: str = "row", iters: int = 30, warmup: int = 5,
              progress: Callable[[str], None] | None = None) -> tuple[list[BenchRow], dict]:
    rows: list[BenchRow] = []
    for kernel in kernels:
        for shape in shapes:
            if progress:
                progress(f"{kernel} {shape[0]}x{shape[1]}x{shape[2]}")
            opts = RunOptions(kernel=kernel, shape=shape, schedulers=schedulers, order=order, iters=iters, warmup=warmup)
            for res in run_kernel(opts):
                rows.append(BenchRow(kernel, shape, res.scheduler, order, res))
    import torch

    header = {
        "date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "device": device_meta(torch),
        "versions": versions_meta(torch),
        "method": rows[0].result.run.meta["timings"]["method"] if rows else None,
    }
    return rows, header


def save_bench(rows: list[BenchRow], header: dict, out: Path | None = None, name: str | None = None) -> Path:
    RESULTS_DIR.mkdir(parents=True, exist_ok=True)
    if out is None:
        dev = re.sub(r"[^A-Za-z0-9]+", "-", header["device"]["name"]).strip("-").lower()
        stamp = header["date"][:19].replace(":", "").replace("-", "")
        kernels = "-".join(sorted({r.kernel for r in rows}))
        out = RESULTS_DIR / f"{stamp}-{dev}-{name or kernels}.json"
    out.write_text(json.dumps({**header, "rows": [r.to_dict() for r in rows]}, indent=2) + "\n")
    return out
