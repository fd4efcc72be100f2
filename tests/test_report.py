"""The HTML report: self-contained, every figure rendered in a real (headless Chromium) browser with
no console errors, PNG export; a screenshot is kept under test-artifacts/ (git-ignored)."""
import json
import os
import re
import shutil
import struct
import sys
from pathlib import Path

import numpy as np
import pytest

from gemmtrace import GemmtraceError, Run
from gemmtrace.analysis import compute_metrics
from gemmtrace.analysis.synthetic import synthetic_run
from gemmtrace.analysis.timeline import role_timeline
from gemmtrace.report import (STATUS_ID, _downsample_step, figure_png, find_chromium, render_html, run_chromium,
                              write_report)
from gemmtrace.trace import spans_frame

ROOT = Path(__file__).resolve().parent.parent
ARTIFACTS = ROOT / "test-artifacts"
# CI installs Debian's chromium and sets GEMMTRACE_REQUIRE_BROWSER=1, so a missing browser fails there.
if find_chromium() is None and os.environ.get("GEMMTRACE_REQUIRE_BROWSER"):
    raise RuntimeError("GEMMTRACE_REQUIRE_BROWSER is set but no Chromium was found (apt-get install chromium)")
needs_chromium = pytest.mark.skipif(find_chromium() is None, reason="no Chromium (CI installs Debian's chromium)")


@pytest.fixture(scope="module")
def static_dynamic():
    kw = dict(sms=32, tiles=150, kblocks=8, timer_step_ns=32, device_sms=36)
    return [synthetic_run(scheduler="static", **kw), synthetic_run(scheduler="dynamic", **kw)]


@pytest.fixture(scope="module")
def comparison_report(static_dynamic, tmp_path_factory):
    path = tmp_path_factory.mktemp("report") / "static-vs-dynamic.html"
    return write_report(static_dynamic, path)


def test_the_page_is_self_contained(comparison_report):
    page = comparison_report.path.read_text()
    external = re.findall(r"<(?:script|link)[^>]+(?:src|href)=[^>]*>", page)
    assert external == []  # nothing loaded from elsewhere: no CDN, no file next to it
    assert page.count("<script") >= 2 + len(comparison_report.figures)
    assert len(page) > 3_000_000  # plotly.js itself, inlined (several MB)
    keys = [f.key for f in comparison_report.figures]
    assert keys == ["occupancy", "timeline-1", "timeline-2", "tensor-core", "tile-durations", "finish-times"]
    for key in keys:
        assert f'id="gt-fig-{key}"' in page
    assert "within run-to-run spread" in page  # the comparison table


def test_one_run_report_has_a_metrics_table(tmp_path):
    report = write_report([synthetic_run(sms=4, tiles=9, kblocks=2)], tmp_path / "one.html", title="one run")
    page = report.path.read_text()
    assert "<title>one run</title>" in page and "tensor-core busy" in page
    assert [f.key for f in report.figures][:2] == ["occupancy", "timeline-1"]


def test_report_errors(tmp_path, monkeypatch):
    run = synthetic_run(sms=4, tiles=9, kblocks=2)
    with pytest.raises(GemmtraceError, match="ending in .html"):
        write_report([run], tmp_path / "r.pdf")
    with pytest.raises(GemmtraceError, match="at least one run"):
        render_html([])
    monkeypatch.setitem(sys.modules, "plotly", None)
    monkeypatch.setitem(sys.modules, "plotly.graph_objects", None)
    with pytest.raises(GemmtraceError, match=r"pip install 'gemmtrace\[report\]'"):
        write_report([run], tmp_path / "r.html")


def test_long_occupancy_curves_are_binned_keeping_their_integral():
    rng = np.random.default_rng(0)
    t = np.cumsum(rng.integers(1, 50, 50_000))
    t[0] = 0
    a = rng.integers(0, 132, t.size)
    duration = int(t[-1]) + 10
    tb, ab = _downsample_step(t, a, duration)
    assert tb.size <= 20_000 + 1
    exact = (np.diff(np.append(t, duration)) * a).sum()
    assert (np.diff(np.append(tb, duration)) * ab).sum() == pytest.approx(exact)


def test_role_timeline_bins_by_dominant_group():
    spans = spans_frame(sm=[0, 0, 0, 5], role=["consumer", "consumer", "producer", "consumer"],
                        tag=["mma", "wait_full", "tma_issue", "mma"], tile=[0, 0, 0, 1],
                        start_ns=[0, 60, 0, 0], end_ns=[60, 100, 10, 40])
    tl = role_timeline(spans, bins=2)  # bins [0, 50) and [50, 100)
    assert tl.row_labels == ["SM 0 producer", "SM 0 consumer", "SM 5 consumer"]
    names = [[tl.states[k] for k in row] for row in tl.state]
    assert names == [["idle", "idle"], ["mma", "wait"], ["mma", "idle"]]
    assert tl.busy[1].tolist() == [1.0, 1.0] and tl.busy[0].tolist() == pytest.approx([0.2, 0.0])
    big = role_timeline(synthetic_run(sms=4, tiles=9, kblocks=2).spans, bins=10_000)
    assert big.state.shape[1] <= 10_000 and big.state.shape[0] == 12


def browse(page: Path, tmp_path: Path) -> tuple[dict, str]:
    """Open the page in headless Chromium: the page's own status line, and Chromium's log."""
    out = run_chromium(["--enable-logging=stderr", "--v=0", "--virtual-time-budget=20000", "--dump-dom"],
                       page.resolve().as_uri(), timeout=120)
    found = re.search(rf'<pre id="{STATUS_ID}"[^>]*>(.*?)</pre>', out.stdout, re.S)
    assert found and found.group(1).strip(), f"the page never reported its status: {out.stderr[-2000:]}"
    return json.loads(found.group(1)), out.stderr


@needs_chromium
def test_every_figure_renders_in_chromium_with_no_console_errors(comparison_report, tmp_path):
    status, log = browse(comparison_report.path, tmp_path)
    ids = [f"gt-fig-{f.key}" for f in comparison_report.figures]
    assert status["figures"] == len(ids) and sorted(status["rendered"]) == sorted(ids), status
    assert status["errors"] == [], status["errors"]
    assert "Uncaught" not in log, [line for line in log.splitlines() if "CONSOLE" in line]
    # Keep the report and a screenshot of it as test artifacts.
    ARTIFACTS.mkdir(exist_ok=True)
    shutil.copy(comparison_report.path, ARTIFACTS / "report-static-vs-dynamic.html")
    height = 700 + sum(f.height + 90 for f in comparison_report.figures)
    shot = ARTIFACTS / "report-static-vs-dynamic.png"
    shot.unlink(missing_ok=True)
    run_chromium([f"--screenshot={shot}", f"--window-size=1200,{height}", "--virtual-time-budget=20000"],
                 comparison_report.path.resolve().as_uri(), timeout=120)
    assert png_size(shot) == (1200, height)


@needs_chromium
def test_the_browser_check_catches_a_figure_that_fails(comparison_report, tmp_path):
    page = comparison_report.path.read_text()
    broken = tmp_path / "broken.html"
    # Break one figure's data so plotly throws while drawing it.
    broken.write_text(page.replace('Plotly.newPlot(                        "gt-fig-tensor-core"',
                                   'Plotly.newPlotX(                        "gt-fig-tensor-core"', 1))
    assert broken.read_text() != page
    status, _ = browse(broken, tmp_path)
    assert "gt-fig-tensor-core" not in status["rendered"] and status["errors"], status


def png_size(path: Path) -> tuple[int, int]:
    data = path.read_bytes()[:24]
    assert data[:8] == b"\x89PNG\r\n\x1a\n", f"{path} is not a PNG"
    return struct.unpack(">II", data[16:24])


@needs_chromium
def test_png_export_of_figures(comparison_report, tmp_path):
    fig = comparison_report.figures[0]
    path = figure_png(fig.figure, tmp_path / "occupancy.png", 800, 400)
    assert png_size(path) == (800, 400)
    # Not blank: a rendered plot has many colors.
    assert path.stat().st_size > 10_000


def test_png_export_without_any_browser_says_what_to_install(comparison_report, tmp_path, monkeypatch):
    monkeypatch.setenv("GEMMTRACE_CHROMIUM", str(tmp_path / "no-such-chromium"))
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setitem(sys.modules, "kaleido", None)
    with pytest.raises(GemmtraceError, match="apt-get install chromium"):
        figure_png(comparison_report.figures[0].figure, tmp_path / "x.png")


def test_report_on_bundled_samples_when_present(tmp_path):
    from gemmtrace.samples import load_samples, sample_names

    if not sample_names():
        pytest.skip("no sample runs are bundled in gemmtrace/samples/ yet")
    report = write_report(load_samples(), tmp_path / "samples.html")
    assert report.path.stat().st_size > 3_000_000


def test_metrics_used_by_the_report_match_the_library(static_dynamic):
    page, figures = render_html(static_dynamic[:1])
    m = compute_metrics(static_dynamic[0])
    assert f"mean {100 * m.occupancy.mean:.1f} %" in page
    assert isinstance(static_dynamic[0], Run) and len(figures) == 5
