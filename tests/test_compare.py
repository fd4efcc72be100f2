"""Comparing runs: timings read from meta, deltas to the first run, and the within-spread flags."""
import json

import pytest
from rich.console import Console

from gemmtrace import GemmtraceError, Run
from gemmtrace.analysis import compare, compute_metrics
from gemmtrace.analysis.compare import read_timing
from gemmtrace.analysis.synthetic import synthetic_run
from gemmtrace.analysis.tables import compare_table, metrics_table, per_sm_table


def test_read_timing_prefers_the_interquartile_spread_gemmtrace_run_records():
    meta = {"shape": {"M": 1000, "N": 1000, "K": 1000},
            "timings": {"kernel_ms": 2.0, "kernel_ms_p25": 1.9, "kernel_ms_p75": 2.2,
                        "kernel_ms_min": 1.0, "kernel_ms_max": 9.0}}
    t = read_timing(meta)
    assert t.kernel_ms == 2.0 and t.spread_kind == "p75-p25" and t.spread_ms == pytest.approx(0.3)
    assert t.tflops == pytest.approx(2e9 / 2e-3 / 1e12)  # from the shape when tflops is not recorded
    assert t.tflops_spread == pytest.approx(t.tflops * 0.3 / 2.0)
    iqr = {"kernel_ms": 1.0, "kernel_ms_iqr": 0.1, "kernel_ms_p25": 0, "kernel_ms_p75": 5}
    assert read_timing({"timings": iqr}).spread_kind == "iqr"
    t = read_timing({"timings": {"kernel_ms_median": 1.0, "kernel_ms_min": 0.5, "kernel_ms_max": 1.5, "tflops": 7}})
    assert (t.kernel_ms, t.spread_ms, t.spread_kind, t.tflops) == (1.0, 1.0, "max-min", 7.0)
    t = read_timing({"timings": {"kernel_ms": float("nan")}})
    assert t.kernel_ms is None and t.spread_ms is None and t.tflops is None
    assert read_timing({}).kernel_ms is None and read_timing({"timings": "junk"}).kernel_ms is None
    with pytest.raises(GemmtraceError, match="negative"):
        read_timing({"timings": {"kernel_ms": 1.0, "kernel_ms_p25": 2.0, "kernel_ms_p75": 1.0}})


def timed(run, ms, spread):
    meta = dict(run.meta)
    meta["timings"] = {"kernel_ms": ms, "kernel_ms_p25": ms - spread / 2, "kernel_ms_p75": ms + spread / 2}
    return Run(run.spans, meta)


def test_static_vs_dynamic_rows_deltas_and_flags():
    static = timed(synthetic_run(sms=8, tiles=30, kblocks=4, scheduler="static"), 1.00, 0.02)
    dynamic = timed(synthetic_run(sms=8, tiles=30, kblocks=4, scheduler="dynamic"), 0.99, 0.02)
    slow = timed(synthetic_run(sms=8, tiles=30, kblocks=4, scheduler="dynamic", seed=5), 1.20, 0.02)
    c = compare([static, dynamic, slow])
    assert c.labels[0].endswith("static") and c.labels[1].endswith("dynamic")
    row = c.row("kernel_ms")
    assert row.values == (1.00, 0.99, 1.20)
    assert row.deltas[0] is None and row.deltas[1] == pytest.approx(-0.01) and row.deltas[2] == pytest.approx(0.20)
    assert row.relative[2] == pytest.approx(0.20)
    assert row.within_spread == (None, True, False)  # 0.01 ms is within the 0.02 ms IQR; 0.2 ms is not
    assert c.row("tflops").within_spread[1] is True
    occ = c.row("mean_occupancy")
    ms = [compute_metrics(r) for r in (static, dynamic, slow)]
    assert occ.values == tuple(m.occupancy.mean for m in ms)
    assert occ.deltas[1] == pytest.approx(ms[1].occupancy.mean - ms[0].occupancy.mean)
    assert occ.within_spread == (None, None, None)  # a single trace has no run-to-run spread
    for key in ("tail_wave_ns", "tail_wave_fraction", "finish_spread_ns", "epilogue_overlap", "tc_idle_fraction"):
        assert c.row(key).values[0] == ms[0].scalars()[key]
    with pytest.raises(GemmtraceError, match="no row"):
        c.row("nope")


def test_frames_json_and_tables():
    a = timed(synthetic_run(sms=4, tiles=10, kblocks=2), 1.0, 0.1)
    b = timed(synthetic_run(sms=4, tiles=10, kblocks=2, scheduler="dynamic"), 1.5, 0.1)
    c = compare([a, b])
    df = c.to_frame()
    assert set(df["run"]) == {0, 1} and len(df) == 2 * len(c.rows)
    d = json.loads(json.dumps(c.to_dict(), allow_nan=False))
    assert d["labels"] == list(c.labels) and d["rows"][0]["key"] == "kernel_ms"
    console = Console(width=250, record=True)
    console.print(compare_table(c))
    console.print(metrics_table(c.metrics[0]))
    console.print(per_sm_table(c.metrics[0], max_rows=2))
    text = console.export_text()
    assert "within spread" in text and "+50.0 %" in text and "mean occupancy" in text and "2 more SMs" in text


def test_one_run_is_its_own_baseline_and_errors_name_the_run():
    c = compare([synthetic_run(sms=4, tiles=10, kblocks=2)])
    assert len(c.labels) == 1 and c.row("kernel_ms").deltas == (None,)
    with pytest.raises(GemmtraceError, match="at least one run"):
        compare([])
    bad = synthetic_run(sms=4, tiles=10, kblocks=2)
    bad = Run(bad.spans.assign(end_ns=bad.spans["start_ns"] - 1), bad.meta)
    with pytest.raises(GemmtraceError, match=r"run 2 \(.*\): .*end before they start"):
        compare([synthetic_run(sms=4, tiles=10, kblocks=2), bad])
