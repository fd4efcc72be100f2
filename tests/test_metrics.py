"""The metrics of DESIGN.md section 4 on synthetic traces with hand-computed answers, a brute-force
reference on random traces, the invariants, edge cases, errors, and the trace-metadata dict."""
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from gemmtrace import GemmtraceError, Run, load
from gemmtrace.analysis import GAP_PRIORITY, UNATTRIBUTED, compute_metrics, occupancy_curve
from gemmtrace.analysis.metrics import metrics_metadata, scalar_specs
from gemmtrace.analysis.synthetic import synthetic_run
from gemmtrace.tags import tag_groups
from gemmtrace.trace import spans_frame

ROOT = Path(__file__).resolve().parent.parent


def make_run(rows, P=None, **meta):
    """rows: (sm, role, tag, tile, start, end[, cta]); P: the device's SM count (meta)."""
    cols = list(zip(*rows))
    cta = cols[6] if len(cols) > 6 else None
    run_meta = {"kernel": "hand", **meta}
    if P is not None:
        run_meta["device"] = {"sm_count": P}
    return Run(spans_frame(sm=cols[0], role=cols[1], tag=cols[2], tile=cols[3], start_ns=cols[4], end_ns=cols[5],
                           cta=cta), run_meta)


# -- hand-computed answers ------------------------------------------------------------------------
def test_single_sm_with_overlapping_mma_spans():
    m = compute_metrics(make_run([
        (0, "consumer", "wait_full", 0, 0, 10),
        (0, "consumer", "mma", 0, 10, 30),
        (0, "consumer", "mma", 0, 25, 40),  # overlaps the previous MMA: the union is [10, 40)
        (0, "consumer", "wait_full", 0, 40, 50),
        (0, "consumer", "mma", 0, 50, 60),
        (0, "consumer", "epilogue", 0, 60, 80),
    ]))
    assert (m.T0, m.T1, m.D, m.P, m.S) == (0, 80, 80, 1, 1)
    tc = m.tensor_core
    assert (tc.capacity_ns, tc.busy_ns, tc.head_ns, tc.gap_ns, tc.tc_tail_ns, tc.idle_ns) == (80, 40, 10, 10, 20, 40)
    assert tc.busy_fraction == 0.5 and tc.idle_fraction == 0.5
    assert tc.gap_attribution_ns["wait"] == 10 and tc.gap_attribution_ns[UNATTRIBUTED] == 0
    assert m.epilogue.overlap == 0.0 and m.epilogue.epilogue_ns == 20 and m.epilogue.spans == 1
    assert list(m.occupancy.t_ns) == [0, 80] and list(m.occupancy.a) == [1, 0]
    assert m.occupancy.integral_sm_ns == 80 and m.occupancy.mean == 1.0
    tw = m.tail_wave
    assert (tw.tiles, tw.waves, tw.wave_quantization_bound) == (1, 1.0, 0.0)
    assert (tw.t_first_idle_ns, tw.length_ns, tw.fraction, tw.occupancy) == (80, 0, 0.0, None)  # no tail
    lb = m.load_balance
    assert (lb.tiles_min, lb.tiles_median, lb.tiles_max, lb.finish_spread_ns) == (1, 1.0, 1, 0)


ROWS_B = [
    # SM 0: CTA 0 serves tile 0, CTA 1 (also on SM 0) serves tile 1; the epilogue role overlaps tile 1's MMA.
    (0, "consumer", "mma", 0, 0, 100, 0),
    (0, "epilogue", "epilogue", 0, 100, 150, 0),
    (0, "consumer", "wait_full", 1, 100, 120, 1),
    (0, "consumer", "mma", 1, 120, 200, 1),
    (0, "epilogue", "epilogue", 1, 200, 230, 1),
    # SM 3: a zero-length MMA span, a setup span with no tile, the epilogue on the consumer warp.
    (3, "consumer", "setup", -1, 40, 50, 2),
    (3, "consumer", "mma", 2, 50, 60, 2),
    (3, "consumer", "mma", 2, 70, 70, 2),
    (3, "consumer", "epilogue", 2, 60, 90, 2),
]


def check_b(m):
    # T0 = 0, T1 = 230, D = 230, P = 4 (SMs 1 and 2 recorded nothing), S = 2.
    assert (m.T0, m.T1, m.D, m.P, m.S) == (0, 230, 230, 4, 2)
    tc = m.tensor_core
    assert tc.capacity_ns == 920
    assert tc.busy_ns == 180 + 10  # SM 0: [0,100) + [120,200); SM 3: [50,60) (the empty MMA adds nothing)
    assert tc.head_ns == 0 + 50 + 2 * 230  # SM 3 starts at 50; SMs without MMAs count all of D as head
    assert tc.gap_ns == 20  # SM 0: [100, 120), covered by a consumer wait
    assert tc.tc_tail_ns == 30 + 170  # SM 0 after 200; SM 3 after 60 (not after the empty span at 70)
    assert tc.head_ns + tc.gap_ns + tc.tc_tail_ns == tc.idle_ns == 920 - 190
    assert tc.gap_attribution_ns["wait"] == 20
    # Epilogue overlap: [100,150) meets tile 1's MMA on [120,150): 30 of 50 + 30 + 30 epilogue ns.
    assert (m.epilogue.overlapped_ns, m.epilogue.epilogue_ns) == (30, 110)
    assert m.epilogue.overlap == pytest.approx(30 / 110)
    # a(t): SM 0 has a tile in flight on [0, 230) (tiles 0 and 1 overlap), SM 3 on [50, 90).
    assert list(m.occupancy.t_ns) == [0, 50, 90, 230] and list(m.occupancy.a) == [1, 2, 1, 0]
    assert m.occupancy.integral_sm_ns == 270 and m.occupancy.mean == pytest.approx(270 / 920)
    tw = m.tail_wave
    assert (tw.tiles, tw.waves, tw.wave_quantization_bound) == (3, 0.75, 0.25)
    assert (tw.t_first_idle_ns, tw.length_ns) == (90, 140)
    assert tw.fraction == pytest.approx(140 / 230) and tw.occupancy == pytest.approx(140 / (4 * 140))
    lb = m.load_balance
    assert (lb.tiles_min, lb.tiles_median, lb.tiles_max, lb.sms_with_tiles) == (0, 0.5, 2, 2)  # [2, 0, 0, 1]
    assert (lb.finish_min_ns, lb.finish_max_ns, lb.finish_spread_ns) == (90, 230, 140)
    assert list(lb.per_sm["sm"]) == [0, 3] and list(lb.per_sm["tiles"]) == [2, 1]
    assert list(m.tiles["tile"]) == [0, 1, 2] and list(m.tiles["duration_ns"]) == [150, 130, 40]


def test_several_ctas_on_one_sm_zero_length_spans_and_silent_sms():
    check_b(compute_metrics(make_run(ROWS_B, P=4)))


def test_unsorted_input_gives_the_same_answers():
    rng = np.random.default_rng(1)
    for _ in range(3):
        check_b(compute_metrics(make_run([ROWS_B[i] for i in rng.permutation(len(ROWS_B))], P=4)))


def test_times_need_not_start_at_zero():
    shifted = [(r[0], r[1], r[2], r[3], r[4] + 10**12, r[5] + 10**12, r[6]) for r in ROWS_B]
    m = compute_metrics(make_run(shifted, P=4))
    assert m.T0 == 10**12 and m.D == 230 and m.tensor_core.busy_ns == 190
    assert m.occupancy.t_ns[0] == 10**12 and m.tail_wave.t_first_idle_ns == 10**12 + 90


def test_gap_attribution_follows_the_priority_and_only_the_consumer_role():
    m = compute_metrics(make_run([
        (0, "consumer", "mma", 0, 0, 10),
        (0, "consumer", "wait_full", 0, 10, 30),   # [10, 30): wait ...
        (0, "consumer", "epilogue", 0, 20, 40),    # ... wins over epilogue on [20, 30); epilogue gets [30, 40)
        (0, "producer", "tma_issue", 0, 40, 50),   # the producer does not explain tensor-core gaps
        (0, "consumer", "mma", 0, 60, 70),         # gap [10, 60): wait 20, epilogue 10, unattributed 20
    ]))
    att = m.tensor_core.gap_attribution_ns
    assert att["wait"] == 20 and att["epilogue"] == 10 and att[UNATTRIBUTED] == 20
    assert sum(att.values()) == m.tensor_core.gap_ns == 50
    assert list(att) == [g for g in GAP_PRIORITY if g in att] + [UNATTRIBUTED]
    assert m.tensor_core.gap_attribution["wait"] == pytest.approx(20 / 70)


def test_an_sm_without_mma_spans_is_all_head():
    m = compute_metrics(make_run([(0, "consumer", "mma", 0, 0, 100), (1, "producer", "tma_issue", 1, 0, 100)]))
    assert m.tensor_core.head_ns == 100 and m.tensor_core.busy_ns == 100 and m.tensor_core.tc_tail_ns == 0


def test_epilogue_fully_overlapped_and_runs_without_epilogues():
    m = compute_metrics(make_run([(0, "consumer", "mma", 0, 0, 100), (0, "epilogue", "epilogue", 0, 10, 60)]))
    assert m.epilogue.overlap == 1.0
    m = compute_metrics(make_run([(0, "consumer", "mma", 0, 0, 100)]))
    assert m.epilogue.overlap is None and m.epilogue.epilogue_ns == 0


def test_a_run_with_no_tile_tagged_spans():
    m = compute_metrics(make_run([(0, "consumer", "mma", -1, 0, 100)], P=2))
    tw = m.tail_wave
    assert tw.tiles == 0 and tw.t_first_idle_ns is None and tw.wave_quantization_bound is None
    assert m.occupancy.mean == 0.0 and m.load_balance.finish_spread_ns is None and m.load_balance.tiles_max == 0


def test_no_tail_when_every_sm_finishes_together():
    m = compute_metrics(make_run([(s, "consumer", "mma", s, 0, 100) for s in range(4)]))
    assert m.tail_wave.length_ns == 0 and m.tail_wave.fraction == 0.0 and m.tail_wave.occupancy is None
    assert m.occupancy.mean == 1.0 and m.tail_wave.wave_quantization_bound == 0.0


def test_wave_quantization_bound():
    # 5 tiles on P = 4: waves 1.25, ceil 2, bound (2 - 1.25) / 2.
    rows = [(t % 4, "consumer", "mma", t, 100 * (t // 4), 100 * (t // 4) + 90) for t in range(5)]
    m = compute_metrics(make_run(rows, P=4))
    assert m.tail_wave.waves == 1.25 and m.tail_wave.wave_quantization_bound == pytest.approx(0.375)
    assert m.tail_wave.t_first_idle_ns == 90 and m.tail_wave.length_ns == 100
    assert m.tail_wave.occupancy == pytest.approx(90 / (4 * 100))  # over [90, 190) only tile 4 is in flight, 90 ns


# -- a brute-force reference on random traces ----------------------------------------------------
def brute_force(rows, P):
    """Every metric by walking each nanosecond of each SM (only for tiny traces)."""
    start = min(r[4] for r in rows)
    T1 = max(r[5] for r in rows)
    D = T1 - start
    sms = sorted({r[0] for r in rows})
    groups = tag_groups()
    busy = {s: np.zeros(D, bool) for s in sms}
    for s, role, tag, tile, a, b in rows:
        if groups[tag] == "mma":
            busy[s][a - start:b - start] = True
    out = {"busy": 0, "head": (P - len(sms)) * D, "gap": 0, "tail": 0, "att": {}}
    for s in sms:
        idx = np.flatnonzero(busy[s])
        out["busy"] += idx.size
        if idx.size == 0:
            out["head"] += D
            continue
        out["head"] += idx[0]
        out["tail"] += D - idx[-1] - 1
        for t in range(idx[0], idx[-1] + 1):
            if busy[s][t]:
                continue
            out["gap"] += 1
            covering = {groups[r[2]] for r in rows if r[0] == s and r[1] == "consumer" and r[4] <= t + start < r[5]}
            covering.discard("mma")
            order = [g for g in GAP_PRIORITY] + sorted(covering - set(GAP_PRIORITY))
            who = next((g for g in order if g in covering), UNATTRIBUTED)
            out["att"][who] = out["att"].get(who, 0) + 1
    epi = [r for r in rows if groups[r[2]] == "epilogue"]
    out["epi_total"] = sum(r[5] - r[4] for r in epi)
    out["epi_over"] = sum(int(busy[r[0]][r[4] - start:r[5] - start].sum()) for r in epi)
    flight = {s: np.zeros(D, bool) for s in sms}
    finish = {}
    for s in sms:
        for tile in {r[3] for r in rows if r[0] == s and r[3] >= 0}:
            mine = [r for r in rows if r[0] == s and r[3] == tile]
            a, b = min(r[4] for r in mine), max(r[5] for r in mine)
            flight[s][a - start:b - start] = True
            finish[s] = max(finish.get(s, a), b)
    a_t = sum(flight[s].astype(int) for s in sms)
    out["integral"] = int(a_t.sum())
    if finish:
        tfi = min(finish.values())
        out["t_first_idle"] = tfi
        out["tail_wave"] = T1 - tfi
        out["tail_occ"] = a_t[tfi - start:].sum() / (P * (T1 - tfi)) if T1 > tfi else None
        out["spread"] = max(finish.values()) - tfi
    out["D"] = D
    return out


@pytest.mark.parametrize("seed", range(12))
def test_random_traces_match_the_brute_force_reference(seed):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 60))
    roles = ["producer", "consumer", "epilogue", "scheduler"]
    tags = ["setup", "wait_empty", "tma_issue", "wait_full", "mma", "epilogue", "sched_claim", "wait_accum"]
    n_sms = int(rng.integers(1, 5))
    rows = []
    for _ in range(n):
        a = int(rng.integers(0, 150))
        rows.append((int(rng.integers(0, n_sms)) * 3, roles[rng.integers(0, 4)], tags[rng.integers(0, len(tags))],
                     int(rng.integers(-1, 6)), a, a + int(rng.integers(0, 40))))
    if max(r[5] for r in rows) == min(r[4] for r in rows):
        rows.append((0, "consumer", "mma", 0, 0, 5))
    P = 3 * n_sms + 1
    m = compute_metrics(make_run(rows, P=P))
    ref = brute_force(rows, P)
    tc = m.tensor_core
    assert m.D == ref["D"]
    assert (tc.busy_ns, tc.head_ns, tc.gap_ns, tc.tc_tail_ns) == (ref["busy"], ref["head"], ref["gap"], ref["tail"])
    assert {k: v for k, v in tc.gap_attribution_ns.items() if v} == ref["att"]
    assert (m.epilogue.epilogue_ns, m.epilogue.overlapped_ns) == (ref["epi_total"], ref["epi_over"])
    assert m.occupancy.integral_sm_ns == ref["integral"]
    if "t_first_idle" in ref:
        assert m.tail_wave.t_first_idle_ns == ref["t_first_idle"] and m.tail_wave.length_ns == ref["tail_wave"]
        assert m.load_balance.finish_spread_ns == ref["spread"]
        if ref["tail_occ"] is None:
            assert m.tail_wave.occupancy is None
        else:
            assert m.tail_wave.occupancy == pytest.approx(ref["tail_occ"])
    # The step function integrates to the same number.
    t = np.append(m.occupancy.t_ns, m.T1)
    assert int((np.diff(t) * m.occupancy.a).sum()) == ref["integral"]


# -- invariants on realistic synthetic runs --------------------------------------------------------
@pytest.mark.parametrize("kw", [
    dict(scheduler="static"), dict(scheduler="dynamic"), dict(persistent=False, scheduler="dynamic"),
    dict(scheduler="dynamic", timer_step_ns=32, producer_lead_ns=300, device_sms=12),
])
def test_invariants(kw):
    m = compute_metrics(synthetic_run(sms=8, tiles=37, kblocks=6, **kw))
    tc = m.tensor_core
    assert tc.head_ns + tc.gap_ns + tc.tc_tail_ns == tc.idle_ns
    assert tc.busy_fraction + tc.idle_fraction == pytest.approx(1.0)
    assert tc.head_fraction + tc.gap_fraction + tc.tc_tail_fraction == pytest.approx(tc.idle_fraction)
    assert sum(tc.gap_attribution_ns.values()) == tc.gap_ns
    assert 0.0 <= m.epilogue.overlap <= 1.0
    assert m.occupancy.integral_sm_ns <= m.P * m.D and 0 <= m.occupancy.a.min() and m.occupancy.a.max() <= m.P
    assert 0.0 <= m.occupancy.mean <= 1.0 and m.tail_wave.tiles == 37
    assert m.load_balance.per_sm["tiles"].sum() == 37


def test_occupancy_curve_function_matches_the_metrics():
    run = synthetic_run(sms=8, tiles=30, kblocks=4, scheduler="dynamic")
    t, a = occupancy_curve(run.spans, 8)
    m = compute_metrics(run)
    assert np.array_equal(t, m.occupancy.t_ns) and np.array_equal(a, m.occupancy.a)
    with pytest.raises(GemmtraceError, match="more than P"):
        occupancy_curve(run.spans, 4)


# -- the library surface ---------------------------------------------------------------------------
def test_saved_run_metrics_and_json(tmp_path):
    run = synthetic_run(sms=6, tiles=20, kblocks=3)
    run.save(tmp_path / "r")
    m = load(tmp_path / "r").metrics()
    assert m.scalars() == compute_metrics(run).scalars()
    assert set(m.scalars()) == {s.key for s in scalar_specs(list(m.tensor_core.gap_attribution_ns))}
    d = json.loads(json.dumps(m.to_dict(tables=True), allow_nan=False))
    assert d["tensor_core"]["busy_ns"] == m.tensor_core.busy_ns and len(d["occupancy"]["a"]) == m.occupancy.a.size
    assert len(d["tiles"]["tile"]) == 20


def test_metrics_metadata_is_flat_numbers_and_strings():
    m = compute_metrics(make_run(ROWS_B, P=4))
    md = metrics_metadata(m)
    assert all(isinstance(v, (int, float, str)) for v in md.values())
    assert md["metrics.tc_idle_fraction"] == m.tensor_core.idle_fraction
    assert md["metrics.mean_occupancy"] == m.occupancy.mean and md["metrics.sm_count"] == 4
    assert md["metrics.label"] == m.label
    assert "metrics.tail_wave_occupancy" in md
    untiled = metrics_metadata(compute_metrics(make_run([(0, "consumer", "mma", -1, 0, 5)])))
    assert "metrics.tail_wave_ns" not in untiled and not any(v is None for v in untiled.values())


# -- errors ----------------------------------------------------------------------------------------
def test_bad_traces_are_one_sentence_errors():
    empty = Run(spans_frame(sm=[], role=[], tag=[], tile=[], start_ns=[], end_ns=[]), {})
    cases = [
        (empty, "no spans"),
        (make_run([(0, "consumer", "mma", 0, 10, 5)]), "end before they start"),
        (make_run([(0, "consumer", "mma", 0, 5, 5)]), "cover no time"),
        (make_run([(0, "consumer", "mma", 0, 0, 5), (1, "consumer", "mma", 0, 0, 5)], P=1), "device has only"),
    ]
    run = make_run([(0, "consumer", "mma", 0, 0, 5)])
    cases += [
        (Run(run.spans.drop(columns=["tile"]), {}), "lacks the column"),
        (Run(run.spans, {"device": {"sm_count": "many"}}), "not a number"),
        (Run(run.spans.assign(sm=-1), {}), "negative SM"),
    ]
    for bad, message in cases:
        with pytest.raises(GemmtraceError, match=message) as e:
            compute_metrics(bad)
        assert str(e.value).endswith(".") and "\n" not in str(e.value)


# -- bundled samples and speed ---------------------------------------------------------------------
def test_bundled_samples_load_and_measure():
    from gemmtrace.samples import load_samples, sample_names

    if not sample_names():
        pytest.skip("no sample runs are bundled in gemmtrace/samples/ yet")
    for run in load_samples():
        m = run.metrics()
        tc = m.tensor_core
        assert tc.head_ns + tc.gap_ns + tc.tc_tail_ns == tc.idle_ns and m.tail_wave.tiles > 0
        assert m.P >= m.S and m.occupancy.integral_sm_ns <= m.P * m.D


def test_speed_benchmark_script_on_a_million_spans():
    """bench/metrics_speed.py on 1M spans: prints its time, asserts only that the metrics hold."""
    script = ROOT / "bench" / "metrics_speed.py"
    out = subprocess.run([sys.executable, str(script), "--spans", "1000000", "--repeat", "1"],
                         capture_output=True, text=True, timeout=300, cwd=ROOT)
    print(out.stdout)
    assert out.returncode == 0, out.stderr
    assert "spans" in out.stdout and "invariants hold" in out.stdout


def test_json_of_an_sm_without_tiles_has_null_finish():
    m = compute_metrics(make_run([(0, "consumer", "mma", 0, 0, 10), (1, "consumer", "mma", -1, 0, 20)]))
    per_sm = json.loads(json.dumps(m.to_dict(tables=True), allow_nan=False))["load_balance"]["per_sm"]
    assert per_sm["tiles"] == [1, 0] and per_sm["finish_ns"] == [10, None]
