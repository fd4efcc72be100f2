"""Check a run's trace against Nsight Compute: launch the traced kernel once more under `ncu` and
compare the trace's duration and tensor-core busy with the hardware's own counters.

What is compared (docs/findings.md, "Validation"):
  D, the trace's T1 - T0        against  gpu__time_duration.sum (the launch, start to end on the GPU)
  busy = ΣB / (P·D)             against  sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_elapsed
                                         (the tensor pipe's active cycles as a share of what it could do
                                         over the launch, averaged over the SMs: the same share of P·D,
                                         counted by the hardware; the .sum form counts each SM's four
                                         sub-partitions' pipes and reads 4x too high against cycles)
  and the SM clock during the launch (sm__cycles_elapsed.avg.per_second), which the findings use.
ncu runs with --clock-control none, so the GPU keeps the clock it would have without ncu, and with
its default cache control (caches flushed before the launch: the traced launch, too, found its
operands cold). It launches `python -m gemmtrace _launch-once`, which builds the kernel (cached)
and makes exactly one profiled launch of the run's kernel, shape, scheduler and tile order; the
kernel-name filter keeps ncu to that GEMM launch (gemmtrace's kernels are named gemm_*).

The trace is expected to read a little short on D (it starts at the first span and ends at the last,
inside the launch) and a little high on busy (an MMA span runs from the first wgmma's issue to the
wait that retires it, the pipe is active for part of that). The tolerances hold what was measured
on an H100 (v4, v6, v8 on 2026-11-23: D -1.7 %, +1.0 %, -2.5 %; v8 at 4096^3 with the traced launch
on operands out of L2, -3.2 to +3.6 % in five runs; docs/findings.md) with room for launch-to-launch
variation: the ncu launch is another launch than the traced one, after a cache flush.
"""
from __future__ import annotations

import csv
import datetime as _dt
import glob
import io
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from . import registry
from .analysis.findings import VALIDATION_BUSY_POINTS, VALIDATION_D_TOLERANCE
from .analysis.metrics import compute_metrics
from .paths import GemmtraceError
from .trace import Run, load

DURATION_METRIC = "gpu__time_duration.sum"
TENSOR_ACTIVE_METRIC = "sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_elapsed"
CLOCK_METRIC = "sm__cycles_elapsed.avg.per_second"
NCU_METRICS = (DURATION_METRIC, TENSOR_ACTIVE_METRIC, CLOCK_METRIC)
KERNEL_FILTER = "regex:gemm"  # the GEMM launch only (not the input generation's kernels)
NCU_ENV = "GEMMTRACE_NCU"
NCU_PLACES = ("/usr/local/cuda/bin/ncu", "/opt/nvidia/nsight-compute/*/ncu")
TIMEOUT_S = 900

_TIME_UNITS = {"nsecond": 1.0, "ns": 1.0, "usecond": 1e3, "us": 1e3, "msecond": 1e6, "ms": 1e6, "second": 1e9, "s": 1e9}
_RATE_UNITS = {"cycle/second": 1.0, "hz": 1.0, "cycle/usecond": 1e6, "khz": 1e3, "cycle/msecond": 1e3,
               "cycle/nsecond": 1e9, "mhz": 1e6, "ghz": 1e9}


def find_ncu(ncu: str | os.PathLike | None = None) -> str:
    """The ncu binary: `ncu` if given, else $GEMMTRACE_NCU, PATH, /usr/local/cuda/bin, the newest
    /opt/nvidia/nsight-compute/*/ncu; one sentence when there is none."""
    if ncu is not None:
        found = _executable(str(ncu))
        if found is None:
            raise GemmtraceError(f"{ncu} is not an ncu executable.")
        return found
    env = os.environ.get(NCU_ENV)
    if env:
        found = _executable(env)
        if found is None:
            raise GemmtraceError(f"${NCU_ENV} names {env}, which is not an executable.")
        return found
    found = shutil.which("ncu")
    if found:
        return found
    for place in NCU_PLACES:
        for path in sorted(glob.glob(place), key=_version_key, reverse=True):
            if os.access(path, os.X_OK):
                return path
    raise GemmtraceError(f"validate needs Nsight Compute's ncu, which was not found (put ncu on PATH or set ${NCU_ENV}).")


def _executable(name: str) -> str | None:
    if os.path.isfile(name) and os.access(name, os.X_OK):
        return name
    return shutil.which(name)


def _version_key(path: str) -> tuple:
    return tuple(int(x) for x in re.findall(r"\d+", path))


def launch_command(meta: dict) -> list[str]:
    """`python -m gemmtrace _launch-once ...` for the run's kernel, shape, scheduler and tile order."""
    kernel = meta.get("kernel") if isinstance(meta, dict) else None
    if kernel not in registry.KERNELS or meta.get("source", "registry") != "registry":
        raise GemmtraceError(
            f"the run's kernel ({kernel or 'not named'}) is not one gemmtrace builds, so validate cannot launch it "
            "again; profile your own launch under ncu instead.")
    shape = meta.get("shape") if isinstance(meta.get("shape"), dict) else {}
    try:
        dims = [int(shape[k]) for k in "MNK"]
    except (KeyError, TypeError, ValueError):
        raise GemmtraceError("the run's meta.json has no shape (M, N, K), so validate cannot launch it again.") from None
    cmd = [sys.executable, "-m", "gemmtrace", "_launch-once", "--kernel", str(kernel),
           "--shape", "x".join(map(str, dims)), "--sched", str(meta.get("scheduler") or "static"),
           "--order", str(meta.get("order") or "row")]
    if meta.get("debug_build"):
        cmd.append("--debug")
    return cmd


def ncu_command(ncu: str, log_file: Path, launch: list[str]) -> list[str]:
    return [ncu, "--clock-control", "none", "--kernel-name", KERNEL_FILTER, "--launch-count", "1",
            "--metrics", ",".join(NCU_METRICS), "--csv", "--print-units", "base", "--log-file", str(log_file), *launch]


def launch_once(kernel: str, shape: tuple[int, int, int], scheduler: str = "static", order: str = "row",
                debug: bool = False) -> None:
    """One profiled launch of a registered kernel, nothing checked, timed or saved (what ncu measures)."""
    from .runner import RunOptions, run_kernel

    run_kernel(RunOptions(kernel=kernel, shape=tuple(shape), schedulers=(scheduler,), order=order, check=False,
                          time=False, debug=debug))


# -- ncu's CSV ----------------------------------------------------------------------------------
def parse_ncu_csv(text: str) -> dict[str, Any]:
    """The first profiled kernel of ncu's --csv output: {"kernel": name, "metrics": {name: (value, unit)}}.

    Reads both of ncu's layouts: one row per metric ("Metric Name", "Metric Unit", "Metric Value"; the
    default page) and one row per kernel with a units row under the header (--page raw). Lines before
    the header (==PROF== messages) are skipped; numbers may carry thousands separators.
    """
    lines = text.splitlines()
    start = next((i for i, line in enumerate(lines) if line.startswith('"ID"')), None)
    if start is None:
        raise GemmtraceError("ncu's output holds no result table: it profiled no kernel.")
    rows = list(csv.reader(io.StringIO("\n".join(lines[start:]))))
    header = rows[0]
    metrics: dict[str, tuple[float | None, str]] = {}
    kernel = None
    if "Metric Name" in header:
        col = {name: header.index(name) for name in ("ID", "Kernel Name", "Metric Name", "Metric Unit", "Metric Value")
               if name in header}
        data = [r for r in rows[1:] if len(r) == len(header)]
        if not data:
            raise GemmtraceError("ncu's result table is empty: it profiled no kernel.")
        first_id = data[0][col["ID"]]
        for r in data:
            if r[col["ID"]] != first_id:
                continue
            kernel = r[col["Kernel Name"]] if "Kernel Name" in col else kernel
            unit = r[col["Metric Unit"]] if "Metric Unit" in col else ""
            metrics[r[col["Metric Name"]]] = (_value(r[col["Metric Value"]]), unit)
    else:
        data = [r for r in rows[1:] if len(r) == len(header)]
        units = data[0] if data and (not data[0][0] or not data[0][0].strip().isdigit()) else [""] * len(header)
        values = [r for r in data if r[0].strip().isdigit()]
        if not values:
            raise GemmtraceError("ncu's result table is empty: it profiled no kernel.")
        first = values[0]
        for i, name in enumerate(header):
            if "__" in name:
                metrics[name] = (_value(first[i]), units[i])
        if "Kernel Name" in header:
            kernel = first[header.index("Kernel Name")]
    return {"kernel": kernel, "metrics": metrics}


def _value(text: str) -> float | None:
    t = text.strip().replace(",", "")
    try:
        return float(t)
    except ValueError:
        return None


def _in_unit(metrics: dict, name: str, table: dict[str, float]) -> float | None:
    value, unit = metrics.get(name, (None, ""))
    if value is None:
        return None
    factor = table.get(unit.strip().lower(), 1.0 if not unit.strip() else None)
    if factor is None:
        raise GemmtraceError(f"ncu reported {name} in {unit!r}, a unit validate does not know.")
    return value * factor


# -- the comparison -----------------------------------------------------------------------------
def compare_with_ncu(run: Run, parsed: dict[str, Any]) -> dict[str, Any]:
    """The trace's D and busy against ncu's, with the tolerances and whether each holds."""
    metrics = parsed["metrics"]
    ncu_ns = _in_unit(metrics, DURATION_METRIC, _TIME_UNITS)
    active_pct = metrics.get(TENSOR_ACTIVE_METRIC, (None, ""))[0]
    clock_hz = _in_unit(metrics, CLOCK_METRIC, _RATE_UNITS)
    if not ncu_ns:
        raise GemmtraceError(f"ncu's output has no {DURATION_METRIC} for the kernel it profiled.")
    if active_pct is None:
        raise GemmtraceError(f"ncu's output lacks {TENSOR_ACTIVE_METRIC} (does this ncu know it?).")
    m = compute_metrics(run)
    ncu_busy = active_pct / 100
    duration_diff = m.duration_ns / ncu_ns - 1
    busy_points = 100 * (m.tensor_core.busy_fraction - ncu_busy)
    duration_ok = abs(duration_diff) <= VALIDATION_D_TOLERANCE
    busy_ok = abs(busy_points) <= VALIDATION_BUSY_POINTS
    return {
        "tool": "ncu",
        "kernel_name": parsed.get("kernel"),
        "trace_duration_ns": m.duration_ns,
        "ncu_duration_ns": ncu_ns,
        "duration_diff": duration_diff,
        "trace_tc_busy": m.tensor_core.busy_fraction,
        "ncu_tc_busy": ncu_busy,
        "busy_diff_points": busy_points,
        "sm_clock_hz": clock_hz,
        "tolerance": {"duration": VALIDATION_D_TOLERANCE, "busy_points": VALIDATION_BUSY_POINTS},
        "duration_ok": duration_ok,
        "busy_ok": busy_ok,
        "ok": duration_ok and busy_ok,
        "metrics": {name: {"value": v, "unit": u} for name, (v, u) in metrics.items()},
    }


def validate(run: Run | str | os.PathLike, ncu: str | os.PathLike | None = None, *, timeout: float = TIMEOUT_S,
             store: bool = True) -> dict[str, Any]:
    """Launch the run's kernel once under ncu, compare with the trace, and (store=True, for a saved
    run) write the result into the run's meta.json under "validation"."""
    if not isinstance(run, Run):
        run = load(Path(run))
    meta = run.meta if isinstance(run.meta, dict) else {}
    launch = launch_command(meta)
    ncu_path = find_ncu(ncu)
    with tempfile.TemporaryDirectory(prefix="gemmtrace-ncu-") as tmp:
        log = Path(tmp) / "ncu.csv"
        cmd = ncu_command(ncu_path, log, launch)
        try:
            out = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
        except subprocess.TimeoutExpired:
            raise GemmtraceError(f"ncu did not finish within {timeout:.0f} s.") from None
        except OSError as e:
            raise GemmtraceError(f"could not start ncu at {ncu_path} ({e.strerror}).") from None
        text = log.read_text(errors="replace") if log.is_file() else ""
    if out.returncode != 0:
        raise GemmtraceError(f"ncu failed (exit {out.returncode}): {_last_message(out.stderr + out.stdout + text)}")
    if '"ID"' not in text and '"ID"' in out.stdout:
        text = out.stdout  # an ncu that printed its results rather than logging them
    if '"ID"' not in text:
        raise GemmtraceError(f"ncu profiled no kernel matching {KERNEL_FILTER!r}: {_last_message(text + out.stdout)}")
    result = compare_with_ncu(run, parse_ncu_csv(text))
    result.update({
        "ncu": ncu_path,
        "command": shlex.join(cmd[:cmd.index("--log-file")] + cmd[cmd.index("--log-file") + 2:]),
        "created": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
    })
    run.meta["validation"] = dict(result)
    if store and run.path is not None:
        store_validation(run.path, result)
        result["stored_in"] = str(Path(run.path) / "meta.json")
    return result


def _last_message(text: str) -> str:
    """ncu's last error or warning line (or its last line), as the end of one sentence."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    flagged = [line for line in lines if line.startswith(("==ERROR==", "==WARNING=="))]
    last = (flagged or lines or ["no output"])[-1]
    return last.rstrip(".") + "."


def store_validation(folder: str | os.PathLike, result: dict[str, Any]) -> Path:
    """Write `result` into the run folder's meta.json under "validation" (the spans are not touched)."""
    path = Path(folder) / "meta.json"
    try:
        meta = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as e:
        raise GemmtraceError(f"cannot read {path} to store the validation ({e}).") from None
    meta["validation"] = result
    tmp = path.with_suffix(".json.tmp")
    try:
        tmp.write_text(json.dumps(meta, indent=2, allow_nan=False) + "\n")
        tmp.replace(path)
    except OSError as e:
        raise GemmtraceError(f"cannot write the validation into {path} ({e.strerror}).") from None
    return path


__all__ = ["NCU_METRICS", "compare_with_ncu", "find_ncu", "launch_command", "launch_once", "parse_ncu_csv",
           "store_validation", "validate"]
