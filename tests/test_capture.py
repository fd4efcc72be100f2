"""Profiling a user's own kernel without a GPU: its vocabulary, buffer sizing, decoding, and the
C++-only raw format through `gemmtrace import`. (The examples' GPU tests run real kernels.)"""
import json
from pathlib import Path

import numpy as np
import pytest

import gemmtrace as gt
from gemmtrace import GemmtraceError, Tags
from gemmtrace.analysis import compute_metrics
from gemmtrace.capture import RECORD_SLACK, records_per_warp
from gemmtrace.runner import gpu_available
from gemmtrace.trace import HEADER_WORDS, MAGIC, RECORD_WORDS, BufferLayout, decode, trust_warnings

from cli_helpers import assert_one_sentence_error, gt as gt_cli

USER_HEADER = """// a user's kernel vocabulary
#pragma once
#define WSG_ROLES(X)        \\
  X(TMA, 0, "tma")          \\
  X(MATH, 1, "math")
#define WSG_TAGS(X)                        \\
  X(LOAD, 1, "load", "issue")              \\
  X(WAIT_STAGE, 2, "wait_stage", "wait")   \\
  X(HGMMA, 3, "hgmma", "mma")              \\
  X(STORE, 4, "store", "epilogue")
"""


@pytest.fixture
def header(tmp_path):
    p = tmp_path / "wsg_tags.h"
    p.write_text(USER_HEADER)
    return p


def user_buffer(layout, regions):
    """regions: (sm, warp, role id, [(start, end, tile, tag id)], count or None) per region, or None."""
    buf = np.zeros((layout.num_regions, layout.words_per_region), np.uint32)
    for i, reg in enumerate(regions):
        if reg is None:
            continue
        sm, warp, role, recs, count = reg
        base, clk0 = 10_000 + i, 5_000
        buf[i, :HEADER_WORDS] = [base, 0, MAGIC, sm, i, warp | (role << 16), len(recs) if count is None else count,
                                 layout.capacity, clk0, 0, clk0 + 10**6, 0, base + 10**6, 0, 0, 0]
        for j, (s, e, tile, tag) in enumerate(recs[: layout.capacity]):
            buf[i, HEADER_WORDS + j * RECORD_WORDS: HEADER_WORDS + (j + 1) * RECORD_WORDS] = [s, e, tile, tag | (7 << 8)]
    return buf.reshape(-1)


# -- vocabulary ---------------------------------------------------------------------------------
def test_user_header_parses_with_ids_names_and_groups(header):
    t = Tags.from_header(header)
    assert [r.name for r in t.roles] == ["tma", "math"]
    assert t.tag_names() == ["none", "load", "wait_stage", "hgmma", "store"]
    assert t.groups == {"load": "issue", "wait_stage": "wait", "hgmma": "mma", "store": "epilogue"}
    assert t.to_meta()["source"] == "wsg_tags.h"  # the file's name, never the path it was read from


def test_builtin_vocabulary_is_gemmtraces_tags_h():
    t = Tags.from_header(gt.INCLUDE_DIR / "gemmtrace" / "tags.h")
    assert "mma" in t.groups and t.groups["mma"] == "mma"
    assert gt.tags.builtin().source == "gemmtrace/tags.h"


def test_tags_only_header_takes_gemmtraces_roles(tmp_path):
    p = tmp_path / "only.h"
    p.write_text('#define ONLY_TAGS(X) \\\n  X(WORK, 1, "work", "mma")\n')
    t = Tags.from_header(p)
    assert t.role_names()[:2] == ["producer", "consumer"] and t.tag_names() == ["none", "work"]


@pytest.mark.parametrize("text, needle", [
    ('#define A_TAGS(X) \\\n  X(WORK, 1, "work", "mma") \\\n  X(BROKEN 2 "x")\n', ":3: cannot read"),
    ('#define A_TAGS(X) \\\n  X(WORK, 1, "work", "tensor")\n', "group 'tensor'"),
    ('#define A_TAGS(X) \\\n  X(WORK, 1, "work", "mma") \\\n  X(MORE, 1, "more", "wait")\n', "share the id 1"),
    ('#define A_TAGS(X) \\\n  X(WORK, 300, "work", "mma")\n', "ids run from 1 to 255"),
    ('#define A_TAGS(X) \\\n  X(WORK, 0, "work", "mma")\n', "ids run from 1 to 255"),
    ("// nothing here\n", "declares no tags"),
    ('#define A_TAGS(X) \\\n  X(W, 1, "w", "mma")\n#define B_TAGS(X) \\\n  X(V, 2, "v", "mma")\n', ":3: a second TAGS list"),
])
def test_bad_tag_headers_are_one_sentence_naming_file_and_line(tmp_path, text, needle):
    p = tmp_path / "bad.h"
    p.write_text(text)
    with pytest.raises(GemmtraceError, match=None) as e:
        Tags.from_header(p)
    assert needle in str(e.value) and "bad.h" in str(e.value) and "\n" not in str(e.value)


def test_missing_header_is_one_sentence(tmp_path):
    with pytest.raises(GemmtraceError, match="cannot read the tag header"):
        Tags.from_header(tmp_path / "nope.h")


# -- decoding and analysis with a user vocabulary ------------------------------------------------
def _user_run(header, regions=None, capacity=8):
    lay = BufferLayout(num_regions=2, capacity=capacity)
    regions = regions or [
        (4, 0, 0, [(0, 100, 0, 1), (100, 300, 1, 1)], None),  # tma: loads
        (4, 4, 1, [(0, 120, 0, 2), (120, 400, 0, 3), (400, 420, 0, 4), (420, 700, 1, 3), (700, 760, 1, 4)], None),
    ]
    d = decode(user_buffer(lay, regions), lay, Tags.from_header(header))
    meta = {"kernel": "wsg", "device": {"sm_count": 2}, "vocabulary": Tags.from_header(header).to_meta(),
            "profiler": d.profiler_meta(lay, 2)}
    return gt.Run(d.spans, meta, d.regions), d


def test_decode_names_spans_with_the_kernels_own_tags(header):
    run, d = _user_run(header)
    assert list(run.spans["tag"]) == ["load", "load", "wait_stage", "hgmma", "store", "hgmma", "store"]
    assert list(run.spans["role"].unique()) == ["tma", "math"]
    assert d.dropped == 0 and d.incomplete_regions == 0


def test_metrics_read_groups_from_the_run_so_any_vocabulary_analyzes(header, tmp_path):
    run, _ = _user_run(header)
    folder = run.save(tmp_path / "run")
    loaded = gt.load(folder)
    assert loaded.tag_groups["hgmma"] == "mma"
    m = compute_metrics(loaded)
    # busy = the union of 'hgmma' spans on SM 4: 280 + 280 ns; D = 761 ns (the math warp's clock
    # base is 1 ns after the tma warp's), on P = 2 SMs
    assert m.tensor_core.busy_ns == 560 and m.duration_ns == 761
    # the 'math' role records the MMAs, so its 'store' span (group epilogue) explains the gap between them
    assert m.tensor_core.gap_attribution_ns.get("epilogue") == 20
    assert m.epilogue.spans == 2


def test_runs_saved_without_a_vocabulary_still_load(tmp_path):
    """A run folder as earlier versions wrote it: no vocabulary in meta.json."""
    import shutil

    from gemmtrace.samples import sample_path

    shutil.copytree(sample_path("v8-static"), tmp_path / "old")
    meta = json.loads((tmp_path / "old" / "meta.json").read_text())
    del meta["vocabulary"]
    (tmp_path / "old" / "meta.json").write_text(json.dumps(meta))
    run = gt.load(tmp_path / "old")
    assert run.tag_groups["mma"] == "mma" and run.vocabulary.source == "gemmtrace/tags.h"
    assert compute_metrics(run).tensor_core.busy_fraction > 0.5


def test_unknown_tag_or_role_id_is_one_sentence(header):
    with pytest.raises(GemmtraceError, match="unknown tag id 9") as e:
        _user_run(header, [(1, 0, 0, [(0, 5, 0, 9)], None), None])
    assert "wsg_tags.h" in str(e.value)
    with pytest.raises(GemmtraceError, match="unknown role id 5"):
        _user_run(header, [(1, 0, 5, [(0, 5, 0, 1)], None), None])


def test_drops_and_unfinished_regions_are_worded_with_the_capacity_needed(header):
    lay = BufferLayout(num_regions=3, capacity=2)
    buf = user_buffer(lay, [(0, 0, 1, [(0, 5, 0, 3), (5, 9, 0, 3)], 7), None, None])
    # region 1: the direct recorder's init wrote the header, but finish() never wrote the magic word
    buf.reshape(3, -1)[1, :HEADER_WORDS] = [123, 0, 0, 9, 1, 4 | (1 << 16), 0, 2, 0, 0, 0, 0, 0, 0, 0, 0]
    d = decode(buf, lay, Tags.from_header(header))
    prof = d.profiler_meta(lay, 3)
    assert prof["dropped"] == 5 and prof["needed_capacity"] == 7
    assert prof["unfinished_regions"] == ["SM 9 CTA 1 warp 4 (math)"]
    msgs = trust_warnings("wsg", prof)
    assert "5 profiler records were dropped" in msgs[0] and "at least 7 records per warp" in msgs[0]
    assert "SM 9 CTA 1 warp 4 (math)" in msgs[1] and "finish()" in msgs[1]


# -- sizing the buffer ---------------------------------------------------------------------------
def test_capacity_from_spans_per_tile_and_tiles():
    assert records_per_warp(capacity=100) == 100
    assert records_per_warp(spans_per_tile=10) == 10 + RECORD_SLACK
    assert records_per_warp(spans_per_tile=10, tiles=1000, ctas=132) == 10 * 8 + RECORD_SLACK  # ceil(1000 / 132)
    c = gt.capture(ctas=(8, 4, 2), regions_per_cta=3, spans_per_tile=4, tiles=128)
    assert c.ctas == 64 and c.capacity == 4 * 2 + RECORD_SLACK
    assert c.layout.nbytes == 64 * 3 * (HEADER_WORDS + c.capacity * RECORD_WORDS) * 4


@pytest.mark.parametrize("kwargs, needle", [
    ({"ctas": 0, "regions_per_cta": 1, "capacity": 4}, "ctas must be"),
    ({"ctas": (2, 2, 2, 2), "regions_per_cta": 1, "capacity": 4}, "ctas must be"),
    ({"ctas": 4, "regions_per_cta": 0, "capacity": 4}, "regions_per_cta"),
    ({"ctas": 4, "regions_per_cta": 1}, "capacity="),
    ({"ctas": 4, "regions_per_cta": 1, "capacity": 4, "spans_per_tile": 2}, "not both"),
    ({"ctas": 4, "regions_per_cta": 1, "capacity": 4, "tags": 7}, "tags must be"),
    ({"ctas": 4, "regions_per_cta": 1, "spans_per_tile": 2, "tiles": "many"}, "tiles must be"),
])
def test_bad_capture_arguments_are_one_sentence(kwargs, needle):
    with pytest.raises(GemmtraceError, match=needle):
        gt.capture(**kwargs)


@pytest.mark.skipif(gpu_available(), reason="checks the sentence a machine without a GPU gets")
def test_capture_without_a_gpu_is_one_sentence():
    with pytest.raises(GemmtraceError, match="needs (a CUDA GPU|PyTorch)"):
        with gt.capture(ctas=4, regions_per_cta=1, capacity=8):
            pass


def test_profile_buffer_struct_has_the_device_layout():
    import ctypes

    assert ctypes.sizeof(gt.ProfileBufferStruct) == 16  # {uint32_t* data; uint32_t capacity; uint32_t regions_per_cta}
    assert gt.ProfileBufferStruct.capacity.offset == 8 and gt.ProfileBufferStruct.regions_per_cta.offset == 12


# -- the C++-only path: raw buffer + JSON -> gemmtrace import -------------------------------------
def _write_raw(folder: Path, header: Path, regions, capacity=8, **overrides):
    lay = BufferLayout(num_regions=len(regions), capacity=capacity)
    user_buffer(lay, regions).astype("<u4").tofile(folder / "wsg.bin")
    raw = {"format": "gemmtrace-raw", "version": 1, "buffer": "wsg.bin", "num_regions": len(regions),
           "capacity": capacity, "regions_per_cta": 2, "grid_ctas": len(regions) // 2, "name": "wsg",
           "shape": [256, 256, 128], "tags_header": header.name,
           "device": {"name": "NVIDIA H100 80GB HBM3", "sm_count": 132}}
    if "buffer_bytes" in overrides:  # cut the buffer file short
        data = (folder / "wsg.bin").read_bytes()[: overrides.pop("buffer_bytes")]
        (folder / "wsg.bin").write_bytes(data)
    raw.update(overrides)
    (folder / "wsg.json").write_text(json.dumps(raw))
    return folder / "wsg.json"


REGIONS = [(4, 0, 0, [(0, 100, 0, 1)], None), (4, 4, 1, [(0, 120, 0, 2), (120, 400, 0, 3), (400, 420, 0, 4)], None)]


def test_import_cli_makes_a_run_folder_that_analyzes(tmp_path, header):
    raw = _write_raw(tmp_path, header, REGIONS)
    out = gt_cli("import", raw, "-o", tmp_path / "run")
    assert out.returncode == 0, out.stderr
    assert (tmp_path / "run" / "trace.perfetto-trace").is_file()
    run = gt.load(tmp_path / "run")
    assert run.kernel == "wsg" and run.sm_count == 132 and run.meta["shape"] == {"M": 256, "N": 256, "K": 128}
    assert run.tag_groups["hgmma"] == "mma" and len(run.spans) == 4
    out = gt_cli("analyze", tmp_path / "run")
    assert out.returncode == 0 and "tensor-core busy" in out.stdout, out.stderr


def test_import_by_prefix_and_warns_on_drops(tmp_path, header):
    regions = [(4, 0, 0, [(0, 100, 0, 1)] * 3, 12), (4, 4, 1, [(0, 120, 0, 3)], None)]
    _write_raw(tmp_path, header, regions, capacity=3)
    out = gt_cli("import", tmp_path / "wsg", "-o", tmp_path / "run", "--no-export")
    assert out.returncode == 0, out.stderr
    assert "9 profiler records were dropped" in out.stderr and "at least 12" in out.stderr


@pytest.mark.parametrize("override, needle", [
    ({"format": "something"}, "not a gemmtrace raw capture"),
    ({"version": 2}, "raw format version 2"),
    ({"buffer_bytes": 100}, "truncated"),
    ({"device": {"name": "x"}}, "sm_count"),
    ({"num_regions": 3}, "multiple of regions_per_cta"),
    ({"tags_header": "missing.h"}, "cannot read the tag header"),
])
def test_import_errors_are_one_sentence(tmp_path, header, override, needle):
    raw = _write_raw(tmp_path, header, REGIONS, **override)
    assert_one_sentence_error(gt_cli("import", raw, "-o", tmp_path / "run"), needle)


def test_import_of_a_missing_file_is_one_sentence(tmp_path):
    assert_one_sentence_error(gt_cli("import", tmp_path / "none.json", "-o", tmp_path / "run"), "does not exist")


def test_includes_prints_the_packaged_header_folder():
    out = gt_cli("includes")
    assert out.returncode == 0
    folder = Path(out.stdout.strip()[2:])
    assert out.stdout.startswith("-I") and (folder / "gemmtrace" / "profiler.cuh").is_file()
    assert (folder / "gemmtrace" / "capture_host.h").is_file()


def test_capture_host_header_compiles(tmp_path):
    """The C++ helper compiles in a plain host program (nvcc, no GPU needed)."""
    import subprocess

    from gemmtrace.build import nvcc_path

    (tmp_path / "main.cu").write_text(
        '#include "gemmtrace/capture_host.h"\nint main() {\n  gemmtrace::HostCapture cap;\n'
        '  static_assert(sizeof(gemmtrace::ProfileBuffer) == 16, "layout");\n'
        '  return gemmtrace::profile_buffer_bytes(2, 3, 4) == 2 * 3 * (16 + 4 * 4) * 4 ? 0 : 1;\n}\n')
    out = subprocess.run([nvcc_path(), "-std=c++17", f"-I{gt.INCLUDE_DIR}", "main.cu", "-o", "main"], cwd=tmp_path,
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert subprocess.run([str(tmp_path / "main")], timeout=60).returncode == 0
