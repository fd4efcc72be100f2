"""Several runs side by side: kernel time, TFLOP/s and every metric, with deltas to the first run.

What is read from run.meta (docs/metrics.md, "Comparing runs"):
  timings.kernel_ms (else kernel_ms_median, else median_ms): the kernel time, ms (a median).
  Its run-to-run spread, the first of: timings.kernel_ms_iqr; kernel_ms_p75 - kernel_ms_p25 (what
  `gemmtrace run` records); kernel_ms_q75 - kernel_ms_q25; kernel_ms_max - kernel_ms_min. None when
  none is recorded.
  timings.tflops, else 2 * M * N * K / kernel time from meta.shape.
A delta is flagged "within spread" when |delta| <= the larger of the two runs' recorded spreads
(TFLOP/s spreads are the time spread carried through: tflops * spread_ms / kernel_ms). Trace
metrics have no recorded spread, so their flag is None ("n/a").
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pandas as pd

from ..paths import GemmtraceError
from .metrics import Metrics, _jsonable, _label, compute_metrics, scalar_specs

KERNEL_MS_KEYS = ("kernel_ms", "kernel_ms_median", "median_ms")
# (name, how to read the spread from timings): the first one present wins.
SPREAD_SOURCES = (
    ("iqr", ("kernel_ms_iqr",)),
    ("p75-p25", ("kernel_ms_p25", "kernel_ms_p75")),  # what gemmtrace run records
    ("q75-q25", ("kernel_ms_q25", "kernel_ms_q75")),
    ("max-min", ("kernel_ms_min", "kernel_ms_max")),
)


@dataclass(frozen=True)
class Timing:
    """A run's kernel timing as recorded in meta (None where it is not)."""

    kernel_ms: float | None
    spread_ms: float | None
    spread_kind: str | None  # which SPREAD_SOURCES entry gave spread_ms
    tflops: float | None
    tflops_spread: float | None


@dataclass(frozen=True)
class ComparisonRow:
    key: str
    label: str
    unit: str  # as in metrics.ScalarSpec, plus "ms" and "tflops"
    values: tuple[float | int | None, ...]  # one per run
    deltas: tuple[float | None, ...]  # values[i] - values[0]; None for the first run or a missing value
    relative: tuple[float | None, ...]  # deltas[i] / |values[0]|; None when values[0] is 0 or missing
    spreads: tuple[float | None, ...]  # each run's recorded run-to-run spread (timing rows only)
    within_spread: tuple[bool | None, ...]  # |delta| <= spread; None ("n/a") when no spread applies


@dataclass(frozen=True, eq=False)
class Comparison:
    labels: tuple[str, ...]
    timings: tuple[Timing, ...]
    metrics: tuple[Metrics, ...]
    rows: tuple[ComparisonRow, ...]

    def row(self, key: str) -> ComparisonRow:
        for r in self.rows:
            if r.key == key:
                return r
        raise GemmtraceError(f"the comparison has no row {key!r}.")

    def to_frame(self) -> pd.DataFrame:
        """One row per (quantity, run): value, delta, relative delta, spread, within_spread."""
        records = []
        for r in self.rows:
            for i, label in enumerate(self.labels):
                records.append(
                    {
                        "key": r.key,
                        "label": r.label,
                        "unit": r.unit,
                        "run": i,
                        "run_label": label,
                        "value": r.values[i],
                        "delta": r.deltas[i],
                        "relative": r.relative[i],
                        "spread": r.spreads[i],
                        "within_spread": r.within_spread[i],
                    }
                )
        return pd.DataFrame.from_records(records)

    def to_dict(self) -> dict[str, Any]:
        return {
            "labels": list(self.labels),
            "rows": [
                {
                    "key": r.key,
                    "label": r.label,
                    "unit": r.unit,
                    "values": _jsonable(list(r.values)),
                    "deltas": _jsonable(list(r.deltas)),
                    "relative": _jsonable(list(r.relative)),
                    "spreads": _jsonable(list(r.spreads)),
                    "within_spread": list(r.within_spread),
                }
                for r in self.rows
            ],
        }


def read_timing(meta: dict) -> Timing:
    """Kernel time, its spread and TFLOP/s from a run's meta (see the module docstring)."""
    timings = meta.get("timings") if isinstance(meta, dict) else None
    timings = timings if isinstance(timings, dict) else {}
    kernel_ms = next((_number(timings.get(k)) for k in KERNEL_MS_KEYS if _number(timings.get(k)) is not None), None)
    spread, kind = None, None
    for name, keys in SPREAD_SOURCES:
        vals = [_number(timings.get(k)) for k in keys]
        if all(v is not None for v in vals):
            spread, kind = (vals[0] if len(vals) == 1 else vals[1] - vals[0]), name
            break
    if spread is not None and spread < 0:
        raise GemmtraceError(f"the run's kernel-time spread ({kind}) is negative: {spread}.")
    tflops = _number(timings.get("tflops"))
    if tflops is None and kernel_ms:
        shape = meta.get("shape") if isinstance(meta, dict) else None
        dims = [_number(shape.get(k)) for k in "MNK"] if isinstance(shape, dict) else [None]
        if all(d is not None for d in dims):
            tflops = 2.0 * dims[0] * dims[1] * dims[2] / (kernel_ms * 1e-3) / 1e12
    tflops_spread = tflops * spread / kernel_ms if (tflops is not None and spread is not None and kernel_ms) else None
    return Timing(kernel_ms, spread, kind, tflops, tflops_spread)


def compare(runs: list) -> Comparison:
    """Compare runs side by side, deltas relative to the first (the baseline)."""
    runs = list(runs)
    if not runs:
        raise GemmtraceError("compare needs at least one run.")
    metrics = []
    for i, run in enumerate(runs):
        try:
            metrics.append(compute_metrics(run))
        except GemmtraceError as e:
            raise GemmtraceError(f"run {i + 1} ({_label(run)}): {e}") from None
    timings = tuple(read_timing(run.meta) for run in runs)
    labels = tuple(m.label for m in metrics)

    rows = [
        _row("kernel_ms", "kernel time", "ms", [t.kernel_ms for t in timings], [t.spread_ms for t in timings]),
        _row("tflops", "TFLOP/s", "tflops", [t.tflops for t in timings], [t.tflops_spread for t in timings]),
    ]
    groups: list[str] = []
    for m in metrics:
        groups += [g for g in m.tensor_core.gap_attribution_ns if g not in groups]
    scalars = [m.scalars() for m in metrics]
    for spec in scalar_specs(groups):
        rows.append(_row(spec.key, spec.label.strip(), spec.unit, [s.get(spec.key) for s in scalars], None))
    return Comparison(labels, timings, tuple(metrics), tuple(rows))


def _row(key, label, unit, values, spreads) -> ComparisonRow:
    n = len(values)
    spreads = list(spreads) if spreads is not None else [None] * n
    base = values[0]
    deltas: list[float | None] = [None]
    relative: list[float | None] = [None]
    within: list[bool | None] = [None]
    for i in range(1, n):
        v = values[i]
        d = None if (v is None or base is None) else v - base
        deltas.append(d)
        relative.append(d / abs(base) if (d is not None and base) else None)
        noise = [s for s in (spreads[0], spreads[i]) if s is not None]
        within.append(abs(d) <= max(noise) if (d is not None and noise) else None)
    return ComparisonRow(key, label, unit, tuple(values), tuple(deltas), tuple(relative), tuple(spreads), tuple(within))


def _number(v) -> float | None:
    if isinstance(v, bool) or v is None:
        return None
    try:
        f = float(v)
    except (TypeError, ValueError):
        return None
    return f if f == f else None  # NaN counts as absent

