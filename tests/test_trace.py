"""Decoding synthetic profiler buffers (overflow included), and the saved-run round trip."""
import json

import numpy as np
import pytest

from gemmtrace import GemmtraceError, Run, load
from gemmtrace.tags import role_names, tag_names
from gemmtrace.trace import (FLAGS_WORD, HEADER_WORDS, MAGIC, NO_KBLOCK, NO_TILE, RAW_CLOCKS, RECORD_WORDS,
                             BufferLayout, decode, spans_frame)

TAG = {n: i for i, n in enumerate(tag_names())}
ROLE = {n: i for i, n in enumerate(role_names())}


def make_buffer(layout, regions):
    """regions: list of (header fields dict, list of (start, end, tile, tag, kblock)) or None (unfinished).
    start and end are cycles since the base; with {"raw": True} the region stores them as the recorder
    does now (%clock64's low words, flag RAW_CLOCKS), otherwise as offsets (earlier builds)."""
    buf = np.zeros((layout.num_regions, layout.words_per_region), np.uint32)
    for i, reg in enumerate(regions):
        if reg is None:
            continue
        hdr, recs = reg
        count = hdr.get("count", len(recs))
        clk, ns = hdr.get("clk_span", 10**6), hdr.get("ns_span", 10**6)  # default: 1 ns per cycle
        clk0 = hdr.get("base_clk", 123_456_789_000)  # any cycle count: only differences matter
        end_clk, end_ns = clk0 + clk, hdr["base"] + ns
        buf[i, :HEADER_WORDS] = [hdr["base"] & 0xFFFFFFFF, hdr["base"] >> 32, MAGIC, hdr["sm"], hdr["cta"],
                                 hdr["warp"] | (ROLE[hdr["role"]] << 16), count, layout.capacity,
                                 clk0 & 0xFFFFFFFF, clk0 >> 32, end_clk & 0xFFFFFFFF, end_clk >> 32,
                                 end_ns & 0xFFFFFFFF, end_ns >> 32, RAW_CLOCKS if hdr.get("raw") else 0, 0]
        origin = clk0 if hdr.get("raw") else 0
        for j, (s, e, tile, tag, kb) in enumerate(recs[: layout.capacity]):
            o = HEADER_WORDS + j * RECORD_WORDS
            buf[i, o:o + 4] = [(origin + s) & 0xFFFFFFFF, (origin + e) & 0xFFFFFFFF, NO_TILE if tile is None else tile,
                               TAG[tag] | ((NO_KBLOCK if kb is None else kb) << 8)]
    return buf.reshape(-1)


def test_decode_two_regions_times_relative_to_earliest_start():
    lay = BufferLayout(num_regions=2, capacity=4)
    base0, base1 = 5_000_000_000_000, 5_000_000_000_100  # ns; needs the high word
    buf = make_buffer(lay, [
        ({"base": base0, "sm": 3, "cta": 0, "warp": 0, "role": "consumer"},
         [(0, 64, 0, "wait_full", 0), (64, 160, 0, "mma", 0), (160, 200, 0, "epilogue", None)]),
        ({"base": base1, "sm": 7, "cta": 1, "warp": 4, "role": "producer"}, [(20, 40, None, "tma_issue", 2)]),
    ])
    d = decode(buf, lay)
    s = d.spans
    assert d.t0_ns == base0
    assert list(s["tag"]) == ["wait_full", "mma", "epilogue", "tma_issue"]
    assert list(s["role"]) == ["consumer"] * 3 + ["producer"]
    assert list(s["sm"]) == [3, 3, 3, 7] and list(s["cta"]) == [0, 0, 0, 1] and list(s["warp"]) == [0, 0, 0, 4]
    assert list(s["start_ns"]) == [0, 64, 160, 120] and list(s["end_ns"]) == [64, 160, 200, 140]
    assert list(s["tile"]) == [0, 0, 0, -1] and list(s["kblock"]) == [0, 0, -1, 2]
    assert d.dropped == 0 and d.incomplete_regions == 0


def test_cycles_map_to_nanoseconds_per_warp():
    """Records hold SM cycles; each warp's init-to-finish (cycles, ns) pair maps them to ns."""
    lay = BufferLayout(num_regions=2, capacity=2)
    buf = make_buffer(lay, [
        ({"base": 7_000, "sm": 0, "cta": 0, "warp": 0, "role": "consumer", "clk_span": 2_000_000, "ns_span": 1_000_000},
         [(0, 200, 0, "mma", 0), (201, 4001, 0, "epilogue", None)]),  # 2 cycles per ns (2 GHz)
        ({"base": 7_500, "sm": 1, "cta": 1, "warp": 0, "role": "consumer", "clk_span": 3 * 2**32, "ns_span": 2**33},
         [(300, 600, 1, "mma", 0)]),  # a span longer than 2^32 cycles: the 64-bit pair still maps
    ])
    d = decode(buf, lay)
    assert list(d.spans["start_ns"]) == [0, 100, 700] and list(d.spans["end_ns"]) == [100, 2000, 900]


@pytest.mark.parametrize("base_clk", [123_456_789_000, 2**32 - 150, 2**33 + 7])
def test_raw_clock_words_decode_as_offsets(base_clk):
    """The recorder stores %clock64's low words and flags it; the decoder takes them from the base
    cycles modulo 2^32, also where the low word wraps inside the kernel (base_clk 2^32 - 150), and
    gives the same spans as a buffer of offsets. Without the flag the words are offsets."""
    lay = BufferLayout(num_regions=2, capacity=3)
    recs = [(0, 100, 0, "mma", 0), (100, 400, 0, "epilogue", None), (500, 2_000_000, 1, "mma", 3)]
    hdr = {"base": 9_000, "sm": 0, "cta": 0, "warp": 0, "role": "consumer", "base_clk": base_clk,
           "clk_span": 4_000_000, "ns_span": 2_000_000}
    other = dict(hdr, sm=1, base_clk=base_clk + 1000)  # another SM's counter
    raw = make_buffer(lay, [(dict(hdr, raw=True), recs), (dict(other, raw=True), recs[:1])])
    offsets = make_buffer(lay, [(hdr, recs), (other, recs[:1])])
    assert raw.reshape(2, -1)[0, FLAGS_WORD] == RAW_CLOCKS and not np.array_equal(raw, offsets)
    a, b = decode(raw, lay).spans, decode(offsets, lay).spans
    assert list(a["start_ns"]) == [0, 50, 250, 0] and list(a["end_ns"]) == [50, 200, 1_000_000, 50]
    assert a.equals(b)
    unflagged = raw.copy()
    unflagged.reshape(2, -1)[:, FLAGS_WORD] = 0  # the same words read as offsets: the SMs misaligned
    assert not decode(unflagged, lay).spans["start_ns"].equals(a["start_ns"])


def test_overflow_counts_dropped_records_and_keeps_the_first_ones():
    lay = BufferLayout(num_regions=1, capacity=2)
    recs = [(i * 10, i * 10 + 5, i, "mma", i) for i in range(5)]
    buf = make_buffer(lay, [({"base": 1000, "sm": 0, "cta": 0, "warp": 0, "role": "consumer", "count": 5}, recs)])
    d = decode(buf, lay)
    assert len(d.spans) == 2 and list(d.spans["tile"]) == [0, 1]
    assert d.dropped == 3
    assert int(d.regions["count"][0]) == 5


def test_unfinished_region_is_reported_not_decoded():
    lay = BufferLayout(num_regions=2, capacity=2)
    buf = make_buffer(lay, [({"base": 10, "sm": 0, "cta": 0, "warp": 0, "role": "consumer"}, [(0, 1, 0, "mma", 0)]), None])
    d = decode(buf, lay)
    assert len(d.spans) == 1 and d.incomplete_regions == 1


def test_corrupt_buffers_are_clear_errors():
    lay = BufferLayout(num_regions=1, capacity=2)
    with pytest.raises(GemmtraceError, match="words"):
        decode(np.zeros(5, np.uint32), lay)
    buf = make_buffer(lay, [({"base": 10, "sm": 0, "cta": 0, "warp": 0, "role": "consumer"}, [(0, 1, 0, "mma", 0)])])
    buf[HEADER_WORDS + 3] = 0xEE  # unknown tag id
    with pytest.raises(GemmtraceError, match="unknown tag"):
        decode(buf, lay)
    buf = make_buffer(lay, [({"base": 10, "sm": 0, "cta": 0, "warp": 0, "role": "consumer", "raw": True}, [])])
    buf[FLAGS_WORD] |= 0x80  # a flag this decoder does not know
    with pytest.raises(GemmtraceError, match="flags 0x81.*corrupt"):
        decode(buf, lay)
    buf = make_buffer(lay, [({"base": 10, "sm": 0, "cta": 0, "warp": 0, "role": "consumer"}, [])])
    buf[7] = 99  # header capacity disagrees with the host
    with pytest.raises(GemmtraceError, match="corrupt"):
        decode(buf, lay)


def synthetic_run(n=1000, seed=0):
    rng = np.random.default_rng(seed)
    start = rng.integers(0, 10**6, n)
    return Run(
        spans_frame(sm=rng.integers(0, 132, n), cta=rng.integers(0, 500, n), warp=rng.integers(0, 12, n),
                    role=rng.integers(0, len(role_names()), n), tag=rng.integers(1, len(tag_names()), n),
                    tile=rng.integers(-1, 2000, n), kblock=rng.integers(-1, 64, n),
                    start_ns=start, end_ns=start + rng.integers(0, 5000, n)),
        {"kernel": "synthetic", "shape": {"M": 1, "N": 2, "K": 3}, "device": {"sm_count": 132}},
    )


def test_save_load_round_trip(tmp_path):
    run = synthetic_run()
    run.save(tmp_path / "r")
    back = load(tmp_path / "r")
    for col in run.spans.columns:
        assert np.array_equal(np.asarray(run.spans[col]), np.asarray(back.spans[col])), col
    assert back.spans["tag"].dtype == "category" and back.spans["start_ns"].dtype == np.int64
    assert back.meta["kernel"] == "synthetic" and back.sm_count == 132


def test_run_views_tolerate_odd_metadata():
    """A run whose meta lacks a device or shape dict (hand-made, or from another tool) still has a
    label and an SM count; a non-numeric sm_count is one clear error."""
    spans = synthetic_run(10).spans
    assert Run(spans, {"device": "H100", "shape": [1, 2, 3]}).label == "? ?"
    assert Run(spans, {"device": None}).sm_count == spans["sm"].nunique()
    with pytest.raises(GemmtraceError, match="sm_count"):
        Run(spans, {"device": {"sm_count": "many"}}).sm_count


def test_load_errors_are_one_sentence(tmp_path):
    with pytest.raises(GemmtraceError, match="no such directory"):
        load(tmp_path / "nope")
    run = synthetic_run(10)
    run.save(tmp_path / "r")
    (tmp_path / "r" / "spans.npz").write_bytes(b"not a zip at all")
    with pytest.raises(GemmtraceError, match="corrupt or truncated"):
        load(tmp_path / "r")
    run.save(tmp_path / "r2")
    (tmp_path / "r2" / "meta.json").write_text("{broken")
    with pytest.raises(GemmtraceError, match="not valid JSON"):
        load(tmp_path / "r2")
    run.save(tmp_path / "r3")
    (tmp_path / "r3" / "meta.json").unlink()
    with pytest.raises(GemmtraceError, match="meta.json is missing"):
        load(tmp_path / "r3")
    run.save(tmp_path / "r4")
    meta = json.loads((tmp_path / "r4" / "meta.json").read_text())
    meta["span_count"] = 11
    (tmp_path / "r4" / "meta.json").write_text(json.dumps(meta))
    with pytest.raises(GemmtraceError, match="incomplete"):
        load(tmp_path / "r4")


def test_decode_speed_is_vectorized():
    """1M records decode without a Python loop (prints the rate; asserts only the result)."""
    import time

    lay = BufferLayout(num_regions=1000, capacity=1000)
    buf = np.zeros((lay.num_regions, lay.words_per_region), np.uint32)
    buf[:, 2] = MAGIC
    buf[:, 6] = lay.capacity
    buf[:, 7] = lay.capacity
    buf[:, 10] = buf[:, 12] = 10**6  # 1 ns per cycle (base cycles and base ns are 0)
    recs = buf[:, HEADER_WORDS:].reshape(lay.num_regions, lay.capacity, 4)
    recs[:, :, 0] = np.arange(lay.capacity) * 100
    recs[:, :, 1] = np.arange(lay.capacity) * 100 + 50
    recs[:, :, 3] = TAG["mma"]
    t = time.perf_counter()
    d = decode(buf.reshape(-1), lay)
    print(f"decoded {len(d.spans)} records in {time.perf_counter() - t:.3f} s")
    assert len(d.spans) == 10**6 and (d.spans["end_ns"] - d.spans["start_ns"] == 50).all()
