"""Findings in words: synthetic runs built to show one cause each (and a healthy one with none), each
checked for the right top finding and for no false alarm; trust warnings; estimates that come from
the what-if model or the metrics (they move when the run does); two-run explanations with a known
answer; runs that lack metadata or use their own tag vocabulary; the CLI and the report."""
import json
import re

import numpy as np
import pandas as pd
import pytest

from gemmtrace import GemmtraceError, Run
from gemmtrace.analysis import compute_metrics, simulate, synthetic
from gemmtrace.analysis import findings as findings_mod
from gemmtrace.analysis.findings import (PERFORMANCE, TRUST, explain, explain_pair, explain_runs, find)
from gemmtrace.analysis.synthetic import synthetic_run
from gemmtrace.samples import load_sample, sample_names
from cli_helpers import assert_one_sentence_error, gt

# A persistent, static kernel on 16 SMs whose every measure is small: the healthy baseline.
BASE = dict(sms=16, device_sms=16, kblocks=16, timer_step_ns=32, jitter=0.02, wait_fraction=0.02)


def performance(run) -> list[str]:
    return [f.cause for f in find(run) if f.kind == PERFORMANCE]


def trust(run) -> list[str]:
    return [f.cause for f in find(run) if f.kind == TRUST]


@pytest.fixture()
def slow_tiles(monkeypatch):
    """Patch the synthetic tile durations: fn(k-block durations) changes them in place."""
    original = synthetic.tile_durations

    def use(fn):
        def durations(tiles, kblocks, **kw):
            kb, epi = original(tiles, kblocks, **kw)
            kb = kb.copy()
            fn(kb)
            return kb, epi

        monkeypatch.setattr(synthetic, "tile_durations", durations)

    return use


def memory_starved_run() -> Run:
    run = synthetic_run(tiles=64, **{**BASE, "wait_fraction": 0.3})
    sp = run.spans
    # The producers wait for a free stage all through the consumers' wait: every stage is in flight.
    we = sp["tag"] == "wait_empty"
    sp.loc[we, "end_ns"] = sp.loc[we, "start_ns"] + 2 * (sp.loc[we, "end_ns"] - sp.loc[we, "start_ns"]) + 32
    return run


def producer_starved_run() -> Run:
    run = synthetic_run(tiles=64, **{**BASE, "wait_fraction": 0.3})
    run.spans = run.spans[run.spans["tag"] != "wait_empty"].reset_index(drop=True)  # a stage was always free
    return run


# -- one cause each ----------------------------------------------------------------------------
def test_healthy_run_raises_nothing():
    run = synthetic_run(tiles=64, **BASE)
    e = explain(run)
    assert e.findings == () and e.healthy
    assert "looks healthy" in e.headline and "the nearest:" in e.headline
    fired = [c.cause for c in e.checks if c.fired]
    assert fired == []
    measured = {c.cause: c for c in e.checks if c.value is not None}
    for cause in ("too_few_tiles", "tail_wave", "serialized_epilogue", "long_head", "uneven_tiles"):
        assert measured[cause].value < measured[cause].threshold  # measured, and under its threshold


@pytest.mark.parametrize("name, build, top, allowed", [
    ("too few tiles", lambda: synthetic_run(tiles=4, persistent=False, **BASE), "too_few_tiles", set()),
    ("grid smaller than the device", lambda: synthetic_run(tiles=48, **{**BASE, "sms": 12}), "idle_sms", set()),
    ("partial last wave", lambda: synthetic_run(tiles=18, **BASE), "tail_wave", set()),
    ("serialized epilogue", lambda: synthetic_run(tiles=64, persistent=False, epilogue_ns=3000, **BASE),
     "serialized_epilogue", set()),
    ("long head", lambda: synthetic_run(tiles=32, setup_ns=3000, **{**BASE, "kblocks": 8}), "long_head", set()),
    ("dynamic claims", lambda: synthetic_run(tiles=128, scheduler="dynamic", claim_ns=1000, **BASE),
     "scheduler_overhead", set()),
    ("memory-starved", memory_starved_run, "memory_starved", set()),
    ("producer-starved", producer_starved_run, "producer_starved", set()),
])
def test_each_cause_tops_its_run(name, build, top, allowed):
    run = build()
    found = find(run)
    perf = [f.cause for f in found if f.kind == PERFORMANCE]
    assert perf and perf[0] == top, (name, perf)
    assert set(perf) - {top} <= allowed, (name, perf)  # no false alarm
    assert trust(run) == []
    f = found[0]
    assert 0 < f.lost_fraction <= 1 and f.lost_ns == pytest.approx(f.lost_fraction * compute_metrics(run).D, abs=1)
    for part in (f.what, f.where.text, f.why, f.remedy):
        assert part and "None" not in part and "nan" not in part
    assert f.text().startswith(f.title) and f.short().startswith(f.title)


def test_split_k_runs_get_no_whole_tile_schedule_advice(slow_tiles):
    """A stream-K run's units are parts of tiles: the replay of whole tiles, and its remedy (claim
    whole tiles dynamically), do not apply, so the schedule findings are skipped with the reason."""
    slow_tiles(lambda kb: kb.__setitem__(np.arange(kb.size) % 16 < 4, kb[np.arange(kb.size) % 16 < 4] * 2))
    run = synthetic_run(tiles=128, **BASE)
    assert performance(run)[0] == "static_imbalance"
    spans = run.spans.copy()
    tags = spans["tag"].astype(str)
    epi = tags.index[tags == "epilogue"][:3]
    tags.loc[epi] = "partial_store"  # three epilogues become partial-tile stores
    spans["tag"] = pd.Categorical(tags)
    e = explain(Run(spans, run.meta))
    assert "static_imbalance" not in [f.cause for f in e.findings]
    why = {c.cause: c.skipped for c in e.checks if c.skipped}
    assert "split-K" in why["static_imbalance"] and "split-K" in why["scheduler_overhead"]


def with_fixup(run, store_ns=300, wait_ns=1000, reduce_ns=800) -> Run:
    """The run with a stream-K fix-up at the end of every SM: its consumer stores a partial tile,
    waits for the tile's other segments and adds their partials."""
    spans = run.spans
    last = spans.sort_values("end_ns", kind="stable").groupby("sm", sort=True).tail(1)
    rows = []
    for _, r in last.iterrows():
        t = int(r["end_ns"])
        for tag, d in (("partial_store", store_ns), ("wait_partial", wait_ns), ("reduce", reduce_ns)):
            rows.append(dict(r, role="consumer", tag=tag, warp=0, kblock=-1, start_ns=t, end_ns=t + d))
            t += d
    extra = pd.DataFrame(rows, columns=spans.columns)
    for col in ("role", "tag"):
        extra[col] = pd.Categorical(extra[col], categories=spans[col].cat.categories)
    return Run(pd.concat([spans, extra.astype(spans.dtypes.to_dict())], ignore_index=True), run.meta)


def test_stream_k_fixup_after_the_last_mma():
    """Time a split tile's CTA spends storing, awaiting and adding partials after its last MMA is
    named with its three parts, and its upper-bound saving is at least the fix-up itself; a run that
    passes no partial tiles skips the rule with the reason."""
    run = synthetic_run(tiles=16, **BASE)
    e = explain(run)
    assert "stream_k_fixup" not in [f.cause for f in e.findings]
    assert "no partial tiles" in {c.cause: c.skipped for c in e.checks if c.skipped}["stream_k_fixup"]
    f = next(x for x in find(with_fixup(run)) if x.cause == "stream_k_fixup")
    assert f.kind == PERFORMANCE and f.where.sm_count == 16
    assert "partial stores 300 ns" in f.what and "waits for the other segments 1.00 µs" in f.what
    assert "adds (reduce) 800 ns" in f.what and "2.10 µs on average" in f.what
    assert set(f.why_tags) == {"partial_store", "wait_partial", "reduce"} and "smaller tile" in f.remedy
    assert f.estimate["source"] == "metrics" and f.estimate["saving_ns"] >= 2100
    assert "stream_k_fixup" not in performance(with_fixup(run, 30, 60, 40))  # a short fix-up: under the threshold


def test_too_few_tiles_when_the_run_already_splits():
    """A stream-K run on too few tiles is told to use smaller tiles or more segments, not to split K,
    and gets no split-K estimate (it has no unsplit mainloop to divide)."""
    run = synthetic_run(tiles=4, **BASE)
    plain = next(x for x in find(run) if x.cause == "too_few_tiles")
    assert plain.remedy.startswith("split the K dimension") and "split-K by 4" in plain.estimate["change"]
    split = next(x for x in find(with_fixup(run)) if x.cause == "too_few_tiles")
    assert "split already" in split.what and split.estimate is None
    assert split.remedy.startswith("use smaller tiles") and "more segments" in split.remedy


def test_static_imbalance(slow_tiles):
    # The tiles the static rule gives SMs 0-3 take twice as long: dynamic scheduling spreads them.
    slow_tiles(lambda kb: kb.__setitem__(np.arange(kb.size) % 16 < 4, kb[np.arange(kb.size) % 16 < 4] * 2))
    run = synthetic_run(tiles=128, **BASE)
    perf = performance(run)
    assert perf[0] == "static_imbalance"
    assert set(perf) <= {"static_imbalance", "uneven_tiles", "tail_wave"}  # the slow tiles are uneven, too
    f = find(run)[0]
    sim = simulate(run, schedulers=("static", "dynamic"))
    dyn = sim.schedule("dynamic")
    # The estimate is the replay's, exactly: against the run's own replay, so model error cancels.
    assert f.estimate["source"] == "model" and f.estimate["text"].endswith("(model)")
    assert f.estimate["makespan_ns"] == [sim.replay.makespan_ns, dyn.makespan_ns]
    assert f.estimate["kernel_change"] == pytest.approx(dyn.makespan_ns / sim.replay.makespan_ns - 1)
    assert f.estimate["tail_ns"][1] == dyn.tail_ns
    assert "dynamic scheduling: tail" in f.estimate["text"]
    slow_sms = set(f.where.sms)
    assert slow_sms  # the last to finish are the SMs with the slow lists
    per_sm = compute_metrics(run).load_balance.per_sm.set_index("sm")
    assert all(per_sm.loc[s, "finish_ns"] >= per_sm["finish_ns"].median() for s in slow_sms)


def test_uneven_tiles_names_the_slow_ones(slow_tiles):
    slow = [0, 3, 6, 9, 12]
    slow_tiles(lambda kb: kb.__setitem__(slow, kb[slow] * 4))
    run = synthetic_run(tiles=128, scheduler="dynamic", **BASE)
    found = [f for f in find(run) if f.kind == PERFORMANCE]
    assert found[0].cause == "uneven_tiles", [f.cause for f in found]
    assert set(f.cause for f in found) <= {"uneven_tiles", "tail_wave"}
    f = found[0]
    assert set(f.where.tiles) == set(slow) and f.where.tile_count == len(slow)
    tiles = compute_metrics(run).tiles
    med = tiles["duration_ns"].median()
    excess = (tiles["duration_ns"][tiles["duration_ns"] >= 1.5 * med] - med).sum()
    assert f.lost_fraction == pytest.approx(excess / compute_metrics(run).tensor_core.capacity_ns)


def test_sizes_are_the_metrics():
    run = synthetic_run(tiles=64, persistent=False, epilogue_ns=3000, **BASE)
    m = compute_metrics(run)
    f = find(run)[0]
    assert f.cause == "serialized_epilogue"
    assert f.lost_fraction == pytest.approx(m.tensor_core.gap_attribution_ns["epilogue"] / m.tensor_core.capacity_ns)
    assert f.why_tags == {"epilogue": "epilogue"} and f.figure == "tensor-core"
    run = memory_starved_run()
    m = compute_metrics(run)
    f = find(run)[0]
    assert f.lost_fraction == pytest.approx(m.tensor_core.gap_attribution_ns["wait"] / m.tensor_core.capacity_ns)
    assert f.details["producer_waiting_share"] >= 0.9 and "wait_empty" in f.why_tags and "wait_full" in f.why_tags
    assert find(producer_starved_run())[0].details["producer_waiting_share"] == 0


def test_places():
    run = synthetic_run(tiles=48, **{**BASE, "sms": 12})
    f = find(run)[0]
    assert f.cause == "idle_sms" and f.where.sm_count == 4
    idle = set(range(16)) - set(run.spans["sm"].unique().tolist())
    assert set(f.where.sms) == idle
    run = synthetic_run(tiles=4, persistent=False, **BASE)
    f = find(run)[0]
    assert f.where.sm_count == 12 and f.where.tile_count == 4 and "split-K or stream-K by 4" in f.remedy
    assert "64×64: 16 tiles" in f.remedy  # a tile shape whose tiles fill the 16 SMs
    run = synthetic_run(tiles=18, **BASE)
    m = compute_metrics(run)
    f = find(run)[0]
    assert f.where.window_ns == (m.tail_wave.t_first_idle_ns - m.t0_ns, m.duration_ns)
    run = synthetic_run(tiles=32, setup_ns=3000, **{**BASE, "kblocks": 8})
    f = find(run)[0]
    assert f.details["setup_ns"] == pytest.approx(3000, abs=64) and f.remedy.startswith("shorten the setup")


# -- estimates come from the model or the metrics ----------------------------------------------
def test_estimates_move_with_their_inputs():
    # Split-K: the measured mainloop divided by the split.
    short, long_ = (synthetic_run(tiles=4, persistent=False, **{**BASE, "kblocks": k}) for k in (8, 32))
    e_short, e_long = (find(r)[0].estimate for r in (short, long_))
    assert e_short["change"] == e_long["change"] == "split-K by 4"
    assert e_long["saving_ns"] > 3 * e_short["saving_ns"]
    run = synthetic_run(tiles=4, persistent=False, **BASE)
    spans = run.spans
    mma = spans[spans["tag"] == "mma"].groupby("tile").agg(s=("start_ns", "min"), e=("end_ns", "max"))
    assert find(run)[0].estimate["saving_ns"] == int(int(np.median(mma["e"] - mma["s"])) * (1 - 1 / 4))
    # The tail's stream-K bound and the grid what-if, from the replay.
    a, b = (synthetic_run(tiles=18, **{**BASE, "kblock_ns": k}) for k in (400, 700))
    sa, sb = (find(r)[0].estimate for r in (a, b))
    assert sa["source"] == sb["source"] == "model" and sb["saving_ns"] > 1.5 * sa["saving_ns"]
    run = synthetic_run(tiles=48, **{**BASE, "sms": 12})
    est = find(run)[0].estimate
    wider = simulate(run, schedulers=("static",), workers=16)
    assert est["kernel_change"] == pytest.approx(wider.schedules[0].makespan_ns / wider.replay.makespan_ns - 1)
    assert est["kernel_change"] < 0
    # Claims: a dearer claim, a larger saving from the static replay.
    c1, c2 = (find(synthetic_run(tiles=128, scheduler="dynamic", claim_ns=c, **BASE))[0] for c in (1000, 2000))
    assert c1.cause == c2.cause == "scheduler_overhead" and c2.estimate["saving_ns"] > 1.5 * c1.estimate["saving_ns"]
    for r in (short, a, run):
        for f in find(r):
            if f.estimate:
                assert f.estimate["source"] in ("model", "metrics")
                assert ("(model" if f.estimate["source"] == "model" else "(from the metrics") in f.estimate["text"]


def test_an_estimate_within_the_spread_says_so():
    run = synthetic_run(tiles=18, **BASE)
    f = find(run)[0]
    run.meta["timings"]["kernel_ms_p75"] = run.meta["timings"]["kernel_ms"] * 2  # a spread wider than any saving
    g = [x for x in find(run) if x.cause == f.cause][0]
    assert g.estimate["within_spread"] and "a timing cannot confirm it" in g.estimate["text"]
    assert "within_spread" not in f.estimate


def test_the_replay_reads_merged_spans_exactly(monkeypatch):
    monkeypatch.setattr(findings_mod, "_REDUCE_MIN_SPANS", 0)
    runs = [synthetic_run(sms=32, tiles=200, kblocks=8, scheduler="dynamic", jitter=0.5, cluster=2, seed=3),
            synthetic_run(sms=16, tiles=70, kblocks=8, persistent=False),
            *[load_sample(n) for n in sample_names()]]
    for run in runs:
        m = compute_metrics(run)
        merged = findings_mod._Trace(run, m).tile_level_run(run)
        assert len(merged.spans) < len(run.spans) / 3
        full, small = simulate(run, metrics=m).to_dict(), simulate(merged, metrics=m).to_dict()
        assert full == small


# -- trust warnings ----------------------------------------------------------------------------
@pytest.mark.parametrize("cause, edit", [
    ("profiler_overhead", lambda meta: meta["timings"].update(profiler_overhead=0.035)),
    ("sm_clock", lambda meta: meta["device"].update(sm_clock_mhz="1600", sm_clock_max_mhz="1980")),
    ("timing_spread", lambda meta: meta["timings"].update(kernel_ms_p25=meta["timings"]["kernel_ms"] * 0.95,
                                                          kernel_ms_p75=meta["timings"]["kernel_ms"] * 1.03)),
    ("dropped_records", lambda meta: meta.update(profiler={"dropped": 12, "incomplete_regions": 0})),
    ("incomplete_regions", lambda meta: meta.update(profiler={"dropped": 0, "incomplete_regions": 2, "num_regions": 48})),
    ("validation_mismatch", lambda meta: meta.update(validation={"ok": False, "duration_diff": -0.05,
                                                                "busy_diff_points": 2.0, "ncu_duration_ns": 1})),
])
def test_trust_warnings(cause, edit):
    run = synthetic_run(tiles=64, **BASE)
    edit(run.meta)
    assert trust(run) == [cause] and performance(run) == []
    e = explain(run)
    assert e.healthy and "trust warning" in e.headline


def test_validation_mismatch_on_a_short_launch_names_the_launch_edges():
    """ncu's duration holds a launch's fixed cost outside any span: on a 16 µs launch that is a quarter of
    it (measured on the H100 at 256x256x16384), on a long one the same share means the spans miss work."""
    run = synthetic_run(tiles=64, **BASE)
    tol = {"duration": 0.05, "busy_points": 6.0}

    def mismatch(trace_ns, ncu_ns, busy_points):
        run.meta["validation"] = {"ok": False, "duration_diff": trace_ns / ncu_ns - 1, "busy_diff_points": busy_points,
                                  "trace_duration_ns": trace_ns, "ncu_duration_ns": ncu_ns, "tolerance": tol}
        [f] = [f for f in find(run) if f.cause == "validation_mismatch"]
        return f

    f = mismatch(12172, 16480, 37.4)
    assert f.details["launch_edges"] and "launch is short" in f.why and "4.3 µs longer" in f.why and "26 %" in f.why
    assert "wgmma" in f.why and "longer shape" in f.remedy
    f = mismatch(12172, 16480, 2.0)  # busy within its tolerance: nothing said about MMA spans
    assert f.details["launch_edges"] and "wgmma" not in f.why
    for trace_ns, ncu_ns in ((120_000, 162_000), (17_000, 16_000)):  # spans missing work; D longer than ncu's
        f = mismatch(trace_ns, ncu_ns, 2.0)
        assert not f.details["launch_edges"] and "do not cover" in f.why and "re-run" in f.remedy


def test_trust_thresholds_hold():
    run = synthetic_run(tiles=64, **BASE)
    run.meta["timings"]["profiler_overhead"] = 0.015
    run.meta["device"].update(sm_clock_mhz="1950", sm_clock_max_mhz="1980")
    run.meta["profiler"] = {"dropped": 0, "incomplete_regions": 0}
    run.meta["validation"] = {"ok": True}
    assert find(run) == []
    run.meta["validation"] = {"ok": True, "sm_clock_hz": 1.55e9}  # ncu's clock under load wins over nvidia-smi's
    assert trust(run) == ["sm_clock"]


def test_trust_comes_first():
    run = synthetic_run(tiles=18, **BASE)
    run.meta["timings"]["profiler_overhead"] = 0.05
    run.meta["profiler"] = {"dropped": 3, "incomplete_regions": 0}
    kinds = [f.kind for f in find(run)]
    assert kinds[:2] == [TRUST, TRUST] and kinds[2:] == [PERFORMANCE] * (len(kinds) - 2) and len(kinds) > 2
    assert [f.cause for f in find(run)][:2] == ["dropped_records", "profiler_overhead"]


# -- runs with less to go on -------------------------------------------------------------------
def test_runs_without_metadata_degrade():
    for run, top in ((synthetic_run(tiles=18, **BASE), "tail_wave"),
                     (synthetic_run(tiles=32, setup_ns=3000, **{**BASE, "kblocks": 8}), "long_head"),
                     # Without device.sm_count, P is the SMs that recorded: idle SMs cannot be seen.
                     (synthetic_run(tiles=4, persistent=False, **BASE), None)):
        bare = Run(run.spans, {})  # no device, launch, timings, scheduler or kernel
        e = explain(bare)
        assert [f.cause for f in e.findings][:1] == ([top] if top else [])
        skipped = {c.cause for c in e.checks if c.skipped}
        assert {"profiler_overhead", "sm_clock", "timing_spread", "validation_mismatch"} <= skipped
        assert json.loads(json.dumps(e.to_dict()))["label"] and e.text()


def test_a_runs_own_vocabulary():
    """Tags and roles that gemmtrace's tags.h does not know, with groups from the run."""
    run = producer_starved_run()
    sp = run.spans.copy()
    rename_tag = {"mma": "hmma_block", "wait_full": "stall_operands", "setup": "prologue", "epilogue": "store_c",
                  "tma_issue": "copy_async", "wait_empty": "stall_slot"}
    rename_role = {"consumer": "math", "producer": "loader", "epilogue": "writer", "scheduler": "sched"}
    sp["tag"] = pd.Categorical(sp["tag"].astype(str).map(rename_tag))
    sp["role"] = pd.Categorical(sp["role"].astype(str).map(rename_role))
    groups = {"prologue": "setup", "stall_slot": "wait", "copy_async": "issue", "stall_operands": "wait",
              "hmma_block": "mma", "store_c": "epilogue", "sched_claim": "schedule"}
    vocabulary = {"source": "test", "roles": [{"enum": r.upper(), "id": i, "name": r}
                                              for i, r in enumerate(("loader", "math", "writer", "sched"))],
                  "tags": [{"enum": t.upper(), "id": i + 1, "name": t, "group": g}
                           for i, (t, g) in enumerate(groups.items())]}
    own = Run(sp, {**run.meta, "vocabulary": vocabulary})
    assert own.tag_groups["hmma_block"] == "mma"
    f = find(own)[0]
    assert f.cause == "producer_starved" and f.why_tags == {"stall_operands": "wait"}
    assert find(own)[0].lost_fraction == pytest.approx(find(run)[0].lost_fraction)


# -- two runs ----------------------------------------------------------------------------------
def epilogue_pair():
    kw = dict(tiles=64, persistent=False, **BASE)
    return synthetic_run(epilogue_ns=100, **kw), synthetic_run(epilogue_ns=3000, **kw)


def test_pair_with_a_known_answer():
    a, b = epilogue_pair()
    p = explain_pair(a, b)
    ma, mb = compute_metrics(a), compute_metrics(b)
    assert p.verdict.startswith("B is ") and "slower than A" in p.verdict and "outside" in p.verdict
    assert p.within_spread is False and p.change == pytest.approx(mb.D / ma.D - 1, rel=1e-6)
    assert p.movers[0].key == "gap_epilogue" and p.movers[0].delta_ns > 0
    assert sum(mv.delta_ns for mv in p.movers) == pytest.approx(mb.D - ma.D, abs=1e-3)  # the parts sum to ΔD
    assert "gaps covered by epilogue +" in p.sentences[0]
    assert any(s.startswith("Only B: serialized epilogue") for s in p.sentences), p.sentences
    back = explain_pair(b, a)
    assert "faster than A" in back.verdict and back.movers[0].delta_ns < 0
    assert any(s.startswith("Only A: serialized epilogue") for s in back.sentences)
    text = p.text()
    assert text.startswith("A = ") and "B = " in text


def test_pair_within_spread_and_without_timings():
    a = synthetic_run(tiles=64, **BASE)
    b = synthetic_run(tiles=64, **BASE)
    b.meta["timings"] = dict(a.meta["timings"], kernel_ms=a.meta["timings"]["kernel_ms"] * 1.003)
    p = explain_pair(a, b)
    assert p.within_spread is True and "within the recorded run-to-run spread" in p.verdict
    b.meta["timings"]["kernel_ms"] = a.meta["timings"]["kernel_ms"] * 1.05
    assert explain_pair(a, b).within_spread is False
    x, y = epilogue_pair()
    x.meta.pop("timings"), y.meta.pop("timings")
    assert explain_pair(x, y).verdict.startswith("No timings to compare")


def test_explain_runs_counts():
    run = synthetic_run(tiles=18, **BASE)
    assert explain_runs([run]).findings
    with pytest.raises(GemmtraceError, match="one run or two"):
        explain_runs([run, run, run])


# -- samples, CLI, report ----------------------------------------------------------------------
def test_samples_read_like_a_diagnosis():
    names = sample_names()
    if not names:
        pytest.skip("no bundled samples")
    for name in names:
        e = explain(load_sample(name))
        assert e.headline.startswith(e.label)
        for f in e.findings:
            assert re.search(r"\d", f.what) and f.remedy
    if {"v8-static", "v8-dynamic"} <= set(names):  # the pair where the dynamic scheduler wins
        p = explain_pair(load_sample("v8-static"), load_sample("v8-dynamic"))
        assert re.match(r"B is \d+\.\d % faster than A", p.verdict), p.verdict


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    base = tmp_path_factory.mktemp("runs")
    a, b = epilogue_pair()
    return a.save(base / "a"), b.save(base / "b"), synthetic_run(tiles=64, **BASE).save(base / "healthy")


def test_cli_explain(saved):
    a, b, healthy = saved
    out = gt("explain", b)
    assert out.returncode == 0, out.stderr
    assert "1. Serialized epilogue" in out.stdout and "   try    " in out.stdout
    data = json.loads(gt("explain", b, "--json").stdout)
    assert data["findings"][0]["cause"] == "serialized_epilogue" and data["healthy"] is False
    assert "looks healthy" in gt("explain", healthy).stdout
    pair = gt("explain", a, b)
    assert pair.returncode == 0 and "B is " in pair.stdout and "slower than A" in pair.stdout
    assert json.loads(gt("explain", a, b, "--json").stdout)["movers"][0]["key"] == "gap_epilogue"
    assert_one_sentence_error(gt("explain", a, b, healthy), "one run or two")
    assert_one_sentence_error(gt("explain"), "needs a run")
    out = gt("analyze", b)
    assert out.stdout.index("1. Serialized epilogue") < out.stdout.index("gemmtrace metrics")  # findings first
    out = gt("explain", "--sample")
    if sample_names():
        assert out.returncode == 0 and "A = " in out.stdout


def test_report_opens_with_linked_findings(tmp_path):
    pytest.importorskip("plotly")
    from gemmtrace.report import render_html

    a, b = epilogue_pair()
    for runs in ([b], [a, b]):
        page, figures = render_html(runs)
        first_figure = page.index('<h2 id="fig-')
        assert page.index('id="findings"') < first_figure < page.index("gt-fig-")
        links = re.findall(r'href="#(fig-[^"]+)"', page)
        assert links, "each finding links to its figure"
        for target in links:
            assert f'<h2 id="{target}"' in page
        assert "Serialized epilogue" in page[:first_figure]
    assert "B is " in page[:first_figure]  # the two-run explanation
