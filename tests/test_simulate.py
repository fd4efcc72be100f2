"""What-if scheduling: hand-checked replays, and synthetic runs whose other-scheduler answer is known
(a static and a dynamic run generated from the same tile durations)."""
import json

import numpy as np
import pytest

from gemmtrace import GemmtraceError, Run
from gemmtrace.analysis.simulate import MODEL_NOTE, replay, simulate, tile_services, workers_for
from gemmtrace.analysis.synthetic import synthetic_run
from gemmtrace.trace import spans_frame


def one_span_tiles(rows, P, scheduler="static", grid=None, cluster=1):
    """rows: (cta, sm, tile, start, end): one MMA span per tile."""
    cta, sm, tile, start, end = (list(c) for c in zip(*rows))
    meta = {"kernel": "hand", "scheduler": scheduler, "device": {"sm_count": P},
            "launch": {"grid_ctas": grid or len(set(cta)), "cluster": cluster, "tiles": len(rows)}}
    return Run(spans_frame(sm=sm, cta=cta, role=["consumer"] * len(rows), tag=["mma"] * len(rows), tile=tile,
                           start_ns=start, end_ns=end), meta)


def test_dynamic_fixes_a_long_tile_that_static_doubles_up_on():
    # Static: CTA 0 runs tiles 0 (100 ns) and 2, CTA 1 tiles 1 and 3 (10 ns each).
    run = one_span_tiles([(0, 0, 0, 0, 100), (1, 1, 1, 0, 10), (0, 0, 2, 100, 110), (1, 1, 3, 10, 20)], P=2)
    sim = simulate(run)
    assert sim.recorded_scheduler == "static" and sim.persistent
    assert sim.measured_makespan_ns == 110 and sim.replay.makespan_ns == 110 and sim.replay_error == 0.0
    assert sim.schedule("static").makespan_ns == 110
    dyn = sim.schedule("dynamic")  # CTA 1 takes tiles 1, 2 and 3 while CTA 0 runs tile 0
    assert dyn.makespan_ns == 100
    assert sorted(dyn.tiles.loc[dyn.tiles["worker"] == 1, "tile"]) == [1, 2, 3]
    assert (dyn.tiles_per_worker_min, dyn.tiles_per_worker_max) == (1, 3)
    assert dyn.tail_t_first_idle_ns == 30 and dyn.tail_ns == 70 and dyn.finish_spread_ns == 70
    assert dyn.mean_occupancy == pytest.approx((100 + 30) / (2 * 100))
    assert dyn.tail_occupancy == pytest.approx(70 / (2 * 70))
    assert list(dyn.occupancy_t_ns) == [0, 30, 100] and list(dyn.occupancy_a) == [2, 1, 0]
    # On three SMs tile 3 still waits for tile 0 (3 mod 3 = 0); on four each tile has a CTA of its own.
    assert simulate(run, sms=3, schedulers=["static"]).schedule("static").makespan_ns == 110
    four = simulate(run, sms=4, schedulers=["static"]).schedule("static")
    assert four.workers == 4 and four.makespan_ns == 100


def test_the_tile_order_of_a_static_run_is_cta_plus_k_times_grid():
    run = one_span_tiles([(0, 0, 0, 0, 100), (1, 1, 1, 0, 10), (0, 0, 2, 100, 110), (1, 1, 3, 10, 20)], P=2)
    svc = tile_services(run)
    assert list(svc.tiles["tile"]) == [0, 1, 2, 3]
    assert list(svc.units["pace_ns"]) == [100, 10, 10, 10]  # measured, measured, then estimated
    assert list(svc.units["pace_measured"]) == [True, True, False, False]
    assert list(svc.ready_ns) == [0, 0] and svc.trailer_ns == 0


@pytest.mark.parametrize("kw", [
    dict(sms=8, tiles=21, kblocks=4),
    dict(sms=16, tiles=150, kblocks=6, epilogue_ns=4000),
    dict(sms=16, tiles=101, kblocks=6, cluster=2),
    dict(sms=132, tiles=700, kblocks=8, cluster=2),
])
def test_each_rule_predicts_the_run_made_with_it(kw):
    static, dynamic = synthetic_run(scheduler="static", **kw), synthetic_run(scheduler="dynamic", **kw)
    s, d = simulate(static, claim_ns=100), simulate(dynamic)  # the generator's claims cost 100 ns
    # Replaying a run under its own rule gives back its makespan.
    assert s.replay_error == 0.0 and d.replay_error == 0.0
    assert s.replay.makespan_ns == s.measured_makespan_ns and d.replay.makespan_ns == d.measured_makespan_ns
    assert s.replay.mean_occupancy == pytest.approx(s.measured["mean_occupancy"])
    assert d.replay.mean_occupancy == pytest.approx(d.measured["mean_occupancy"])
    # And each run predicts the other exactly: the tile durations are the same, only the rule differs.
    assert s.schedule("dynamic").makespan_ns == d.measured_makespan_ns
    assert d.schedule("static").makespan_ns == s.measured_makespan_ns
    assert s.schedule("dynamic").mean_occupancy == pytest.approx(d.measured["mean_occupancy"])
    assert s.schedule("dynamic").tail_ns == d.measured["tail_wave_ns"]


@pytest.mark.parametrize("cluster", [1, 2])
def test_predictions_hold_with_the_timer_resolution(cluster):
    kw = dict(sms=132, tiles=1000, kblocks=16, timer_step_ns=32, producer_lead_ns=400, cluster=cluster, seed=3)
    static, dynamic = synthetic_run(scheduler="static", **kw), synthetic_run(scheduler="dynamic", **kw)
    s, d = simulate(static, claim_ns=100), simulate(dynamic)
    assert s.replay_error == 0.0 and abs(d.replay_error) < 1e-3
    assert s.schedule("dynamic").makespan_ns == pytest.approx(d.measured_makespan_ns, rel=0.005)
    assert d.schedule("static").makespan_ns == pytest.approx(s.measured_makespan_ns, rel=0.005)


def test_one_tile_per_cta_kernels_are_scheduled_like_the_hardware():
    run = synthetic_run(sms=8, tiles=30, kblocks=4, persistent=False, scheduler="dynamic")
    sim = simulate(run, sms=16)
    assert not sim.persistent and sim.recorded_scheduler == "hardware" and sim.cluster == 1
    assert sim.replay_error == 0.0 and sim.recorded_workers == 8
    more = sim.schedule("dynamic")
    assert more.workers == 16 and more.makespan_ns < sim.measured_makespan_ns


def test_more_sms_and_the_grid_rule():
    run = synthetic_run(sms=8, tiles=40, kblocks=4)
    svc = tile_services(run)
    assert workers_for(svc, 8, 12) == 12 and workers_for(svc, 8, 4) == 4
    limited = synthetic_run(sms=4, tiles=40, kblocks=4, device_sms=8)  # a grid cut to 4 CTAs by the user
    assert workers_for(tile_services(limited), 8, 12) == 4
    sim = simulate(run, sms=16)
    assert sim.schedule("static").makespan_ns < sim.measured_makespan_ns
    assert sim.schedule("static").kernel_ms == pytest.approx(
        sim.measured_kernel_ms * sim.schedule("static").makespan_ns / sim.measured_makespan_ns)
    pair = synthetic_run(sms=8, tiles=40, kblocks=4, cluster=2)
    assert simulate(pair, sms=11).schedule("static").workers == 10  # whole clusters only


def test_replay_returns_every_tile_once():
    svc = tile_services(synthetic_run(sms=6, tiles=25, kblocks=3, cluster=2))
    for rule in ("static", "dynamic"):
        placed = replay(svc, rule, 3)
        assert sorted(placed["tile"]) == list(range(25))
        assert (placed["end_ns"] >= placed["start_ns"]).all() and placed["slot"].max() < 6


def test_the_output_says_it_is_a_model():
    sim = simulate(synthetic_run(sms=4, tiles=9, kblocks=2), sms=6)
    d = json.loads(json.dumps(sim.to_dict(curves=True), allow_nan=False))
    assert d["model"] == MODEL_NOTE and "not a measurement" in d["model"]
    assert [s["scheduler"] for s in d["schedules"]] == ["static", "dynamic"]
    assert len(d["schedules"][0]["occupancy"]["t_ns"]) == len(d["schedules"][0]["occupancy"]["a"])


def test_errors_are_one_sentence():
    run = synthetic_run(sms=4, tiles=9, kblocks=2, cluster=2)
    for kwargs, message in [
        (dict(schedulers=["fifo"]), "unknown scheduler 'fifo'"),
        (dict(sms=0), "must be positive"),
        (dict(workers=3), "multiple of the cluster size 2"),
        (dict(sms=4, workers=6), "do not fit"),
        (dict(claim_ns=-5), "must not be negative"),
    ]:
        with pytest.raises(GemmtraceError, match=message):
            simulate(run, **kwargs)
    untiled = Run(spans_frame(sm=[0], role=["consumer"], tag=["mma"], tile=[-1], start_ns=[0], end_ns=[10]), {})
    with pytest.raises(GemmtraceError, match="no spans tagged with a tile"):
        simulate(untiled)


def test_claims_past_the_last_tile_are_not_tiles():
    run = synthetic_run(sms=4, tiles=12, kblocks=2, scheduler="dynamic")
    extra = spans_frame(sm=[0], cta=[0], role=["scheduler"], tag=["sched_claim"], tile=[12], start_ns=[0], end_ns=[5])
    import pandas as pd

    with_sentinel = Run(pd.concat([run.spans, extra], ignore_index=True), run.meta)
    assert len(tile_services(with_sentinel).tiles) == 12
    assert np.isclose(simulate(with_sentinel).replay_error, 0.0)


def test_the_validation_script_cross_checks_saved_runs(tmp_path):
    """bench/simulate_check.py (used on the GPU to check the model against real runs) on saved runs."""
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parent.parent
    folders = [synthetic_run(sms=s, tiles=64, kblocks=4, cluster=2, device_sms=16).save(tmp_path / f"ctas{s}")
               for s in (16, 8)]
    out = subprocess.run([sys.executable, str(root / "bench" / "simulate_check.py"), "--runs", *map(str, folders),
                          "--output", str(tmp_path / "check.json")], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    rows = json.loads((tmp_path / "check.json").read_text())["rows"]
    assert len(rows) == 4 and all(abs(r["error_d"]) < 0.01 for r in rows)
