"""Metrics and comparisons as rich Tables. Nothing here prints: callers render the tables."""
from __future__ import annotations

import pandas as pd
from rich.table import Table

from .compare import Comparison
from .metrics import UNATTRIBUTED, Metrics, scalar_specs
from .simulate import Simulation

_SECTION_STARTS = {"tc_busy_fraction", "epilogue_overlap", "tail_wave_ns", "tiles_per_sm_min"}
# The timings worth a row (run meta holds many more: min, max, quartiles, sample counts).
_TIMING_ROWS = (
    ("kernel_ms", "kernel time", lambda v: f"{v:.4f} ms"),
    ("tflops", "TFLOP/s", lambda v: f"{v:.1f}"),
    ("pct_of_reference", "of the reference", lambda v: f"{100 * v:.1f} %"),
    ("pct_of_cublas", "of cuBLAS", lambda v: f"{100 * v:.1f} %"),  # runs saved before reference_* keys
    ("profiler_overhead", "profiler overhead", lambda v: f"{100 * v:+.2f} %"),
)


def format_value(value, unit: str) -> str:
    """A number for a table cell: fractions as percentages, ns scaled to µs or ms."""
    if value is None:
        return "—"
    if unit == "fraction":
        return f"{100.0 * value:.2f} %"
    if unit == "ns":
        return format_ns(value)
    if unit == "ms":
        return f"{value:.4f} ms"
    if unit == "tflops":
        return f"{value:.1f}"
    if unit == "count":
        return f"{value:.0f}" if float(value).is_integer() else f"{value:.1f}"
    return f"{value:.3f}"


def format_ns(ns) -> str:
    a = abs(ns)
    if a >= 1_000_000:
        return f"{ns / 1e6:.3f} ms"
    if a >= 1_000:
        return f"{ns / 1e3:.2f} µs"
    return f"{ns:.0f} ns"


def format_delta(delta, unit: str) -> str:
    if delta is None:
        return "—"
    if unit == "fraction":
        return f"{100.0 * delta:+.2f} pp"  # percentage points
    sign = "+" if delta >= 0 else "-"
    return sign + format_value(abs(delta), unit)


def metrics_table(metrics: Metrics) -> Table:
    """One run's metrics: the run, its timing, then every scalar of Metrics.scalars()."""
    m = metrics
    table = Table(title=f"gemmtrace metrics: {m.label}", title_justify="left")
    table.add_column("metric")
    table.add_column("value", justify="right")
    table.add_column("note", style="dim")
    table.add_row("traced span T0 → T1", format_ns(m.duration_ns), f"T0 = {m.t0_ns} ns")
    table.add_row("SMs: device P / recorded S", f"{m.sm_count} / {m.sms_recorded}", f"{m.span_count:,} spans")
    for key, label, fmt in _TIMING_ROWS:
        value = m.timings.get(key)
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            note = "from run meta (timed, unprofiled)" if key == "kernel_ms" else "from run meta"
            if key == "pct_of_reference":
                label = f"of {m.timings.get('reference_name') or 'the reference'}"
            table.add_row(label, fmt(value), note)
    tc = m.tensor_core
    notes = {
        "tc_busy_fraction": f"{format_ns(tc.busy_ns)} of P·D = {format_ns(tc.capacity_ns)}",
        "tc_idle_fraction": "head + gaps + tc tail",
        "epilogue_overlap": f"{format_ns(m.epilogue.overlapped_ns)} of {format_ns(m.epilogue.epilogue_ns)} epilogue",
        "mean_occupancy": "∫a(t)dt / (P·D)",
        "tail_wave_ns": _tail_note(m),
        "wave_quantization_bound": "(⌈waves⌉ − waves) / ⌈waves⌉",
        "finish_spread_ns": "max − min of the SMs' last tile ends",
    }
    if tc.gap_ns:
        for group, ns in tc.gap_attribution_ns.items():
            notes[f"gap_{group}_fraction"] = f"{100.0 * ns / tc.gap_ns:.1f} % of gaps"
    scalars = m.scalars()
    for spec in scalar_specs(list(tc.gap_attribution_ns)):
        if spec.key == "duration_ns":
            continue
        if spec.key in _SECTION_STARTS:
            table.add_section()
        value = scalars[spec.key]
        if spec.key.startswith("gap_") and not value and not spec.key.endswith(f"{UNATTRIBUTED}_fraction"):
            continue  # a group that took no gap time
        table.add_row(spec.label, format_value(value, spec.unit), notes.get(spec.key, ""))
    return table


def _tail_note(m: Metrics) -> str:
    t = m.tail_wave.t_first_idle_ns
    return "no tiles" if t is None else f"from the first SM to finish, T0 + {format_ns(t - m.t0_ns)}"


def per_sm_table(metrics: Metrics, max_rows: int | None = None) -> Table:
    """The per-SM load-balance table (busy time, tiles, finish time), in SM order."""
    df = metrics.load_balance.per_sm
    table = Table(title=f"per SM: {metrics.label}", title_justify="left")
    for col in ("SM", "tc busy", "head", "gaps", "tc tail", "tiles", "finish (from T0)"):
        table.add_column(col, justify="right")
    rows = df if max_rows is None else df.head(max_rows)
    for r in rows.itertuples(index=False):  # one row per SM (at most a few hundred)
        finish = "—" if pd.isna(r.finish_ns) else format_ns(int(r.finish_ns) - metrics.t0_ns)
        table.add_row(str(r.sm), format_ns(r.busy_ns), format_ns(r.head_ns), format_ns(r.gap_ns),
                      format_ns(r.tc_tail_ns), str(r.tiles), finish)
    if max_rows is not None and len(df) > max_rows:
        table.caption = f"{len(df) - max_rows} more SMs not shown"
    return table


def compare_table(comparison: Comparison) -> Table:
    """Runs side by side: a value column per run, and for each run after the first its delta to
    the first and whether that delta is within the recorded run-to-run spread."""
    c = comparison
    table = Table(title="gemmtrace compare (deltas relative to run 1)", title_justify="left")
    table.add_column("metric")
    for i, label in enumerate(c.labels):
        table.add_column(f"{i + 1}: {label}", justify="right")
        if i:
            table.add_column(f"Δ {i + 1} vs 1", justify="right")
            table.add_column("within spread", justify="center")
    for row in c.rows:
        if row.key in _SECTION_STARTS:
            table.add_section()
        if row.key.startswith("gap_") and not any(row.values):
            continue
        cells = [row.label]
        for i, value in enumerate(row.values):
            cells.append(format_value(value, row.unit))
            if i:
                d = format_delta(row.deltas[i], row.unit)
                if row.relative[i] is not None and row.unit != "fraction":
                    d += f" ({100.0 * row.relative[i]:+.1f} %)"
                cells += [d, _flag(row.within_spread[i])]
        table.add_row(*cells)
    return table


def _flag(within: bool | None) -> str:
    if within is None:
        return "n/a"
    return "yes" if within else "no"


def simulation_table(sim: Simulation) -> Table:
    """The what-if schedules next to the measured run, with the model named in the title."""
    table = Table(title=f"gemmtrace simulate: {sim.label} (a model, not a measurement)", title_justify="left",
                  caption=sim.model + ".", caption_justify="left")
    for col in ("schedule", "SMs", "CTAs" if sim.persistent else "SM slots", "makespan", "kernel time",
                "Δ vs measured", "mean occupancy", "tail wave", "tail fraction", "tail occupancy",
                "finish spread", "tiles per CTA"):
        table.add_column(col, justify="right" if col != "schedule" else "left")
    base = sim.measured["makespan_ns"]

    def row(name, sms, workers, v, delta=True):
        ms = v.get("kernel_ms")
        d = v["makespan_ns"] / base - 1 if delta and base else None
        table.add_row(name, str(sms), str(workers), format_ns(v["makespan_ns"]),
                      "—" if ms is None else f"{ms:.4f} ms", "—" if d is None else f"{100 * d:+.2f} %",
                      format_value(v["mean_occupancy"], "fraction"), format_value(v["tail_wave_ns"], "ns"),
                      format_value(v["tail_wave_fraction"], "fraction"),
                      format_value(v["tail_wave_occupancy"], "fraction"), format_value(v["finish_spread_ns"], "ns"),
                      f"{v['tiles_per_worker_min']}–{v['tiles_per_worker_max']}")

    row(f"measured ({sim.recorded_scheduler})", sim.recorded_sm_count, sim.recorded_workers, sim.measured, delta=False)
    own = "static" if sim.recorded_scheduler == "static" else "dynamic"
    row(f"model check: {own} replayed", sim.replay.sm_count, sim.replay.workers, sim.replay.scalars())
    table.add_section()
    for s in sim.schedules:
        row(f"model: {s.scheduler}", s.sm_count, s.workers, s.scalars())
    return table


def validation_rows(validation) -> list[tuple[str, str, str, str]]:
    """(quantity, trace, ncu, difference and verdict) rows of a run's meta["validation"] (see
    gemmtrace.validate); empty when the run was not validated."""
    v = validation
    if not isinstance(v, dict) or not isinstance(v.get("ncu_duration_ns"), (int, float)):
        return []
    tol = v.get("tolerance") if isinstance(v.get("tolerance"), dict) else {}

    def verdict(ok) -> str:
        return "within tolerance" if ok else "OUTSIDE tolerance"

    rows = [
        ("duration D vs gpu__time_duration", format_ns(v["trace_duration_ns"]), format_ns(v["ncu_duration_ns"]),
         f"{100 * v['duration_diff']:+.2f} % ({verdict(v.get('duration_ok'))}: ±{100 * tol.get('duration', 0):.1f} %)"),
        ("tensor-core busy vs tensor pipe active", f"{100 * v['trace_tc_busy']:.1f} %", f"{100 * v['ncu_tc_busy']:.1f} %",
         f"{v['busy_diff_points']:+.1f} points ({verdict(v.get('busy_ok'))}: ±{tol.get('busy_points', 0):g})"),
    ]
    if v.get("sm_clock_hz"):
        rows.append(("SM clock during the ncu launch", "—", f"{v['sm_clock_hz'] / 1e9:.2f} GHz", ""))
    return rows


def validation_table(validation, label: str = "") -> Table | None:
    """The trace against Nsight Compute, or None when the run was not validated."""
    rows = validation_rows(validation)
    if not rows:
        return None
    ok = validation.get("ok")
    table = Table(title=f"validated against Nsight Compute{': ' + label if label else ''} "
                        f"({'within tolerance' if ok else 'OUTSIDE tolerance'})", title_justify="left")
    for col in ("quantity", "trace", "ncu", "difference"):
        table.add_column(col, justify="left" if col == "quantity" else "right")
    for row in rows:
        table.add_row(*row)
    return table
