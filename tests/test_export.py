"""Trace export: every written file is parsed back (protobuf, JSON) and matched span by span."""
import gzip
import json
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as pb

from gemmtrace import GemmtraceError, Run
from gemmtrace.export import PID_BASE, export, flatten_metadata, layout_tracks
from gemmtrace.tags import role_names, tag_names
from gemmtrace.trace import spans_frame

ROOT = Path(__file__).resolve().parent.parent
META = {"kernel": "synthetic", "shape": {"M": 256, "N": 512, "K": 64}, "scheduler": "static", "order": "row",
        "device": {"name": "test GPU", "sm_count": 8, "sm_clock_mhz": "1980"},
        "timings": {"kernel_ms": 0.5, "tflops": 123.4}, "profiler": {"dropped": 3}, "launch": {"tile": [128, 128, 64]}}


def pipelined_run(sms=(5, 0, 3), tiles=4, kblocks=6, seed=0) -> Run:
    """A persistent-kernel-like run: per SM a producer, two consumer warps whose MMAs cross (as
    wgmma pipelining makes them), a scheduler; 32 ns ticks, so zero-length and touching spans."""
    rng = np.random.default_rng(seed)
    rows = []
    for cta, sm in enumerate(sms):
        t = int(rng.integers(0, 10)) * 32
        for j in range(tiles):
            tile = j * len(sms) + cta
            warp = 4 if j % 2 == 0 else 8
            rows.append((sm, cta, 1, "scheduler", "sched_claim", tile, -1, t, t + 32 * int(rng.integers(0, 2))))
            mma_prev = None
            for kb in range(kblocks):
                q = 32 * int(rng.integers(0, 3))
                rows.append((sm, cta, 0, "producer", "wait_empty", tile, kb, t, t + q))
                rows.append((sm, cta, 0, "producer", "tma_issue", tile, kb, t + q, t + q + 32))
                rows.append((sm, cta, warp, "consumer", "wait_full", tile, kb, t + 64, t + 64 + q))
                mma = [t + 64 + q, 0]
                if mma_prev is not None:
                    mma_prev[1] = t + 64 + q + 64  # retires after the next one is issued: crossing
                    rows.append((sm, cta, warp, "consumer", "mma", tile, kb - 1, *mma_prev))
                mma_prev = mma
                t += 32 * int(rng.integers(8, 12))
            mma_prev[1] = t + 96
            rows.append((sm, cta, warp, "consumer", "mma", tile, kblocks - 1, *mma_prev))
            epilogue = 32 * int(rng.integers(5, 9))
            rows.append((sm, cta, warp, "consumer", "epilogue", tile, -1, t + 96, t + 96 + epilogue))
    df = pd.DataFrame(rows, columns=["sm", "cta", "warp", "role", "tag", "tile", "kblock", "start", "end"])
    df = df.sample(frac=1.0, random_state=seed)  # stored order must not matter
    return Run(spans_frame(sm=df.sm, cta=df.cta, warp=df.warp, role=df.role, tag=df.tag, tile=df.tile, kblock=df.kblock,
                           start_ns=df.start - df.start.min(), end_ns=df.end - df.start.min()), dict(META))


def random_run(n=3000, seed=1) -> Run:
    """Random spans: several CTAs per SM, overlaps of every kind, equal and zero-length times."""
    rng = np.random.default_rng(seed)
    start = rng.integers(0, 400, n) * 32
    return Run(spans_frame(
        sm=rng.choice([0, 7, 131], n), cta=rng.integers(0, 4, n), warp=rng.choice([0, 4, 8], n),
        role=rng.integers(0, len(role_names()), n), tag=rng.integers(1, len(tag_names()), n),
        tile=rng.integers(-1, 100, n), kblock=rng.integers(-1, 70000, n), start_ns=start,
        end_ns=start + rng.integers(0, 5, n) * 32), dict(META))


# ------------------------------------------------------------------------------------------
# Reading traces back
# ------------------------------------------------------------------------------------------
def read_perfetto(path):
    """Parse a .perfetto-trace with the protos: slices (per track, in file order), tracks,
    counters, metadata, resolving interned names as trace processor does."""
    trace = pb.Trace()
    trace.ParseFromString(Path(path).read_bytes())
    names, ann_names, tracks, open_, out = {}, {}, {}, defaultdict(list), defaultdict(list)
    counters, metadata, last_ts = defaultdict(list), {}, {}
    cleared = False
    for p in trace.packet:
        if p.HasField("interned_data"):
            assert p.sequence_flags & pb.TracePacket.SEQ_INCREMENTAL_STATE_CLEARED
            cleared = True
            names.update({e.iid: e.name for e in p.interned_data.event_names})
            ann_names.update({e.iid: e.name for e in p.interned_data.debug_annotation_names})
        if p.HasField("track_descriptor"):
            tracks[p.track_descriptor.uuid] = p.track_descriptor
        if p.HasField("chrome_events"):
            metadata.update({m.name: m.string_value for m in p.chrome_events.metadata})
        if not p.HasField("track_event"):
            continue
        ev = p.track_event
        assert ev.track_uuid in tracks, "a track event before its track's descriptor"
        # Trace processor sorts packets by (timestamp, file order): per track, file order must
        # already be time order for that sort to keep each END before the next BEGIN.
        assert p.timestamp >= last_ts.get(ev.track_uuid, 0)
        last_ts[ev.track_uuid] = p.timestamp
        if ev.type == pb.TrackEvent.TYPE_COUNTER:
            counters[ev.track_uuid].append((p.timestamp, ev.double_counter_value))
        elif ev.type == pb.TrackEvent.TYPE_SLICE_BEGIN:
            if ev.HasField("name_iid"):
                assert cleared and p.trusted_packet_sequence_id == 1
                assert p.sequence_flags & pb.TracePacket.SEQ_NEEDS_INCREMENTAL_STATE
            args = {(ann_names[a.name_iid] if a.HasField("name_iid") else a.name):
                    (a.int_value if a.HasField("int_value") else a.string_value) for a in ev.debug_annotations}
            open_[ev.track_uuid].append((names[ev.name_iid] if ev.HasField("name_iid") else ev.name, p.timestamp, args))
        elif ev.type == pb.TrackEvent.TYPE_SLICE_END:
            name, begin, args = open_[ev.track_uuid].pop()
            assert not open_[ev.track_uuid], "slices on a track must not nest or cross"
            out[ev.track_uuid].append((name, begin, p.timestamp, args))
    assert not any(open_.values()), "a slice was never closed"
    return {"tracks": tracks, "slices": out, "counters": counters, "metadata": metadata}


def perfetto_spans(tr) -> pd.DataFrame:
    """One row per span slice: SM (from the process), track name, tag, times, tile, kblock."""
    rows = []
    for uuid, slices in tr["slices"].items():
        t = tr["tracks"][uuid]
        if not t.HasField("parent_uuid"):
            continue  # the launch metadata track
        proc = tr["tracks"][t.parent_uuid].process
        assert proc.process_name == f"SM {proc.pid - PID_BASE}"
        for name, b, e, args in slices:
            rows.append((proc.pid - PID_BASE, t.name, name, b, e, args.get("tile", -1), args.get("kblock", -1),
                         args.get("cta", -1)))
    return pd.DataFrame(rows, columns=["sm", "track", "tag", "start_ns", "end_ns", "tile", "kblock", "cta"])


def expected(run) -> pd.DataFrame:
    """The spans as slices should show them; the CTA is an argument only on SMs that ran several."""
    s = run.spans
    several = s.groupby("sm").cta.transform("nunique") > 1
    return pd.DataFrame({"sm": s.sm.astype(int), "role": s.role.astype(str), "tag": s.tag.astype(str),
                         "start_ns": s.start_ns - s.start_ns.min(), "end_ns": s.end_ns - s.start_ns.min(),
                         "tile": s.tile.astype(int), "kblock": s.kblock.astype(int),
                         "cta": np.where(several, s.cta, -1)})


def same_spans(got: pd.DataFrame, want: pd.DataFrame) -> None:
    cols = ["sm", "tag", "start_ns", "end_ns", "tile", "kblock", "cta"]
    got = got.assign(role=got.track.str.split(" ").str[0])
    a = got[cols + ["role"]].astype({c: "int64" for c in cols if c != "tag"}).sort_values(cols + ["role"])
    b = want[cols + ["role"]].astype({c: "int64" for c in cols if c != "tag"}).sort_values(cols + ["role"])
    assert len(a) == len(b)
    assert (a.to_numpy() == b.to_numpy()).all()


def read_chrome(path):
    with gzip.open(path, "rb") as f:
        return json.loads(f.read())


# ------------------------------------------------------------------------------------------
# Perfetto
# ------------------------------------------------------------------------------------------
@pytest.mark.parametrize("make", [pipelined_run, random_run])
def test_perfetto_slices_match_the_spans_exactly(tmp_path, make):
    run = make()
    path = export(run, tmp_path / "t.perfetto-trace", "perfetto")
    assert path == tmp_path / "t.perfetto-trace"
    same_spans(perfetto_spans(read_perfetto(path)), expected(run))


def test_perfetto_layout_names_and_order(tmp_path):
    run = pipelined_run()
    tr = read_perfetto(export(run, tmp_path / "t.perfetto-trace", "perfetto"))
    procs = {u: t for u, t in tr["tracks"].items() if t.HasField("process")}
    # One process per SM, ranked by SM id; the root track asks for that explicit order.
    by_rank = sorted(procs.values(), key=lambda t: t.sibling_order_rank)
    assert [t.process.process_name for t in by_rank] == ["SM 0", "SM 3", "SM 5"]
    assert tr["tracks"][0].process_ordering == pb.TrackDescriptor.PROCESS_ORDERING_EXPLICIT
    for uuid, proc in procs.items():
        assert proc.child_ordering == pb.TrackDescriptor.EXPLICIT
        kids = sorted((t for t in tr["tracks"].values() if t.parent_uuid == uuid), key=lambda t: t.sibling_order_rank)
        # Two consumer warps: a track each; their crossing MMAs need a second track each.
        assert [t.name for t in kids] == ["producer", "consumer w4 #1", "consumer w4 #2", "consumer w8 #1",
                                          "consumer w8 #2", "scheduler"]
    launch = [t for t in tr["tracks"].values() if t.name == "launch metadata"]
    assert len(launch) == 1


def test_perfetto_counter_and_metadata(tmp_path):
    run = pipelined_run()
    t = np.array([0, 100, 250, 4000])
    a = np.array([1.0, 3.0, 2.5, 0.0])
    tr = read_perfetto(export(run, tmp_path / "t.perfetto-trace", "perfetto",
                              counters={"SMs with a tile in flight": (t, a)}, metadata={"note": "hello"}))
    (uuid,) = [u for u, d in tr["tracks"].items() if d.name == "SMs with a tile in flight"]
    assert tr["tracks"][uuid].HasField("counter")
    assert tr["counters"][uuid] == list(zip(t.tolist(), a.tolist()))
    md = tr["metadata"]
    assert md["kernel"] == "synthetic" and md["shape.M"] == "256" and md["device.name"] == "test GPU"
    assert md["timings.tflops"] == "123.4" and md["profiler.dropped"] == "3" and md["launch.tile"] == "[128, 128, 64]"
    assert md["note"] == "hello" and md["export.spans"] == str(len(run.spans))
    # The same keys as arguments of the launch slice, which spans the whole launch.
    (launch,) = [u for u, d in tr["tracks"].items() if d.name == "launch metadata"]
    ((name, b, e, args),) = tr["slices"][launch]
    assert name == run.label and b == 0 and e == int(run.spans.end_ns.max() - run.spans.start_ns.min())
    assert args == md


def test_times_are_relative_to_the_first_span(tmp_path):
    run = pipelined_run()
    run.spans["start_ns"] += 10**12
    run.spans["end_ns"] += 10**12
    tr = read_perfetto(export(run, tmp_path / "t.perfetto-trace", "perfetto"))
    got = perfetto_spans(tr)
    assert got.start_ns.min() == 0
    same_spans(got, expected(run))


def test_slices_on_a_track_never_overlap():
    long = random_run(20000, seed=5)  # times too wide to pack with an index: the fallback sorts
    long.spans["start_ns"] *= 2**36
    long.spans["end_ns"] *= 2**36
    for run in (pipelined_run(), random_run(), random_run(20000, seed=5), long):
        L = layout_tracks(run.spans)
        by = np.argsort(L.track, kind="stable")  # each track's spans, in emission order
        t, s, e = L.track[by], L.start[by], L.end[by]
        same = t[1:] == t[:-1]
        assert not np.any(same & (s[1:] < e[:-1]))  # disjoint, and emitted in time order
        assert np.array_equal(np.sort(L.order), np.arange(len(run.spans)))  # every span once
        names = L.tracks.groupby("sm")["name"].agg(lambda s: s.is_unique)
        assert names.all()


def test_fewest_tracks_for_sequential_and_coresident_ctas():
    # SM 0 runs CTAs 0 and 1 together, then CTA 2 after CTA 0: two tracks, CTA ids as arguments.
    run = Run(spans_frame(sm=[0, 0, 0, 0], cta=[0, 0, 1, 2], role=["consumer"] * 4, tag=["mma"] * 4,
                          tile=[0, 1, 2, 3], start_ns=[0, 10, 5, 20], end_ns=[10, 20, 40, 30]))
    L = layout_tracks(run.spans)
    assert list(L.tracks.name) == ["consumer #1", "consumer cta1"]
    assert L.tracks.cta_arg.all()


# ------------------------------------------------------------------------------------------
# Chrome
# ------------------------------------------------------------------------------------------
@pytest.mark.parametrize("make", [pipelined_run, random_run])
def test_chrome_events_match_the_spans_exactly(tmp_path, make):
    run = make()
    counters = {"SMs with a tile in flight": (np.array([0, 64, 640]), np.array([2.0, 3.0, 0.0])),
                "fraction": (np.array([0, 32]), np.array([0.25, -1.5]))}
    doc = read_chrome(export(run, tmp_path / "t.json.gz", "chrome", counters=counters))
    events = doc["traceEvents"]
    for e in events:
        assert {"name", "ph", "ts", "pid", "tid"} <= e.keys(), e
    procs = {e["pid"]: e["args"]["name"] for e in events if e["ph"] == "M" and e["name"] == "process_name"}
    threads = {e["tid"]: (e["pid"], e["args"]["name"]) for e in events if e["ph"] == "M" and e["name"] == "thread_name"}
    assert len(threads) == len({e["tid"] for e in events})  # every tid named, tids unique across processes
    sort_index = {e["pid"]: e["args"]["sort_index"] for e in events if e["name"] == "process_sort_index"}
    sms = sorted(int(s) for s in run.spans.sm.unique())
    ranked = sorted((sort_index[p], n) for p, n in procs.items() if sort_index[p] >= 0)
    assert ranked == list(enumerate(f"SM {s}" for s in sms))  # one process per SM, in SM order
    rows, launch = [], []
    for e in events:
        if e["ph"] == "X":
            assert e["dur"] >= 0
            if procs[e["pid"]] == "launch":
                launch.append(e)
                continue
            pid, track = threads[e["tid"]]
            assert pid == e["pid"]
            begin, end = round(e["ts"] * 1000), round((e["ts"] + e["dur"]) * 1000)
            rows.append((int(procs[pid].split()[1]), track, e["name"], begin, end,
                         e["args"].get("tile", -1), e["args"].get("kblock", -1), e["args"].get("cta", -1)))
    got = pd.DataFrame(rows, columns=["sm", "track", "tag", "start_ns", "end_ns", "tile", "kblock", "cta"])
    same_spans(got, expected(run))
    c = defaultdict(list)
    for e in events:
        if e["ph"] == "C":
            c[e["name"]].append((round(e["ts"] * 1000), e["args"]["value"]))
    assert c == {k: list(zip(t.tolist(), v.tolist())) for k, (t, v) in counters.items()}
    assert doc["metadata"] == launch[0]["args"]
    assert doc["metadata"]["kernel"] == "synthetic" and doc["metadata"]["device.sm_clock_mhz"] == "1980"


def test_chrome_durations_keep_nanoseconds(tmp_path):
    run = Run(spans_frame(sm=[0, 0], role=["producer"] * 2, tag=["tma_issue"] * 2, tile=[1, 2],
                          start_ns=[0, 1_234_567], end_ns=[1, 1_234_599]))
    doc = read_chrome(export(run, tmp_path / "t.json.gz", "chrome"))
    x = [e for e in doc["traceEvents"] if e["ph"] == "X" and e["pid"] != 1]
    assert [(e["ts"], e["dur"]) for e in x] == [(0.0, 0.001), (1234.567, 0.032)]


# ------------------------------------------------------------------------------------------
# Errors, metadata, CLI, speed script
# ------------------------------------------------------------------------------------------
def one_sentence(e: Exception) -> str:
    msg = str(e)
    assert msg.endswith(".") and "\n" not in msg and msg.count(". ") == 0, msg
    return msg


def test_errors_are_one_sentence(tmp_path):
    run = pipelined_run()
    with pytest.raises(GemmtraceError) as e:
        export(run, tmp_path / "t", "svg")
    assert "unknown trace format 'svg'" in one_sentence(e.value)
    empty = Run(spans_frame(sm=[], role=[], tag=[], tile=[], start_ns=[], end_ns=[]))
    with pytest.raises(GemmtraceError) as e:
        export(empty, tmp_path / "t", "perfetto")
    assert "empty run" in one_sentence(e.value)
    bad = pipelined_run()
    bad.spans.loc[bad.spans.index[0], "end_ns"] = -5
    with pytest.raises(GemmtraceError) as e:
        export(bad, tmp_path / "t", "chrome")
    assert "end before they start" in one_sentence(e.value)
    with pytest.raises(GemmtraceError) as e:
        export(run, tmp_path / "t", "chrome", counters={"x": ([1, 2], [1.0])})
    assert "counter 'x'" in one_sentence(e.value)
    (tmp_path / "file").write_text("")
    with pytest.raises(GemmtraceError) as e:
        export(run, tmp_path / "file" / "t.json.gz", "chrome")
    assert "cannot write" in one_sentence(e.value)
    assert not list(tmp_path.glob("**/*.partial"))


def test_flatten_metadata():
    assert flatten_metadata({"a": {"b": 1, "c": {"d": None}}, "e": "x", "f": [1, 2], "g": True}) == {
        "a.b": "1", "a.c.d": "null", "e": "x", "f": "[1, 2]", "g": "true"}


def gt(*args):
    return subprocess.run([sys.executable, "-m", "gemmtrace", *args], capture_output=True, text=True, timeout=120,
                          cwd=ROOT)


def test_cli_exports_a_saved_run(tmp_path):
    run = pipelined_run()
    folder = run.save(tmp_path / "run")
    for fmt, name in (("perfetto", "trace.perfetto-trace"), ("chrome", "trace.json.gz")):
        out = gt("export", str(folder), "--format", fmt)
        assert out.returncode == 0, out.stderr
        assert (folder / name).is_file() and "wrote" in out.stdout
    same_spans(perfetto_spans(read_perfetto(folder / "trace.perfetto-trace")), expected(run))
    out = gt("export", str(folder), "--format", "chrome", "--output", str(tmp_path / "x" / "y.json.gz"))
    assert out.returncode == 0 and read_chrome(tmp_path / "x" / "y.json.gz")["metadata"]["kernel"] == "synthetic"


def test_speed_script_at_a_million_spans(tmp_path):
    """bench/export_speed.py runs and writes complete traces; its timing is printed, not asserted."""
    sys.path.insert(0, str(ROOT / "bench"))
    try:
        import export_speed
    finally:
        sys.path.remove(str(ROOT / "bench"))
    result = export_speed.main(["--spans", "1000000", "--repeat", "1", "--dir", str(tmp_path),
                                "--output", str(tmp_path / "r.json")])
    n = result["spans"]
    assert n > 900_000 and json.loads((tmp_path / "r.json").read_text())["spans"] == n
    trace = pb.Trace()
    trace.ParseFromString((tmp_path / "trace.perfetto-trace").read_bytes())
    head = 0  # descriptors, metadata, the launch slice and the counter come before the spans
    for p in trace.packet:
        if p.HasField("track_event") and p.track_event.HasField("name_iid"):
            break
        head += 1
    assert len(trace.packet) - head == 2 * n  # a BEGIN and an END per span
    # 132 SMs, each with a producer, a scheduler and two consumer warps whose crossing MMAs need two tracks each.
    names = [p.track_descriptor.name for p in trace.packet[:head] if p.HasField("track_descriptor")]
    assert names.count("producer") == names.count("consumer w4 #2") == names.count("consumer w8 #2") == 132
    assert len(names) == 3 + 132 * 7  # root, launch metadata, the counter; per SM a process and six tracks
    with gzip.open(tmp_path / "trace.json.gz", "rb") as f:
        text = f.read()
    assert text.count(b'"ph":"X"') == n  # every span (the launch slice is written by json.dumps)
    assert len(json.loads(text)["traceEvents"]) > n
