"""The analysis commands: analyze, compare, report, simulate on saved runs and bundled samples, and
one-sentence errors (exit 1, no traceback) for missing, corrupt and incomplete runs."""
import json

import numpy as np
import pytest

from gemmtrace import Run
from gemmtrace.analysis.synthetic import synthetic_run
from cli_helpers import assert_one_sentence_error, gt


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    base = tmp_path_factory.mktemp("runs")
    kw = dict(sms=12, tiles=40, kblocks=4, timer_step_ns=32, device_sms=16)
    static = synthetic_run(scheduler="static", **kw).save(base / "static")
    dynamic = synthetic_run(scheduler="dynamic", **kw).save(base / "dynamic")
    return static, dynamic


@pytest.mark.parametrize("cmd", ["analyze", "compare", "report", "simulate"])
def test_help(cmd):
    out = gt(cmd, "--help")
    assert out.returncode == 0 and "Usage" in out.stdout and "--sample" in out.stdout


def test_analyze_tables_and_json(runs):
    out = gt("analyze", runs[0], "--per-sm")
    assert out.returncode == 0, out.stderr
    for text in ("tensor-core busy", "epilogue overlap", "mean occupancy", "tail wave length",
                 "wave-quantization bound", "finish-time spread", "per SM"):
        assert text in out.stdout
    data = json.loads(gt("analyze", runs[0], "--json").stdout)
    t = data["tensor_core"]
    assert t["head_ns"] + t["gap_ns"] + t["tc_tail_ns"] == t["idle_ns"] and "a" not in data["occupancy"]
    full = json.loads(gt("analyze", runs[0], runs[1], "--json", "--tables").stdout)
    assert len(full) == 2 and len(full[0]["occupancy"]["a"]) == len(full[0]["occupancy"]["t_ns"])


def test_compare_static_vs_dynamic(runs):
    out = gt("compare", *runs)
    assert out.returncode == 0, out.stderr
    assert "within spread" in out.stdout and "kernel time" in out.stdout and "mean occupancy" in out.stdout
    data = json.loads(gt("compare", *runs, "--json").stdout)
    assert [r["key"] for r in data["rows"]][:2] == ["kernel_ms", "tflops"]
    assert_one_sentence_error(gt("compare", runs[0]), "at least 2 runs", "got 1 run folder")


def test_report_and_simulate(runs, tmp_path):
    out = gt("report", *runs, "-o", tmp_path / "r.html")
    assert out.returncode == 0, out.stderr
    assert (tmp_path / "r.html").stat().st_size > 3_000_000 and "6 figures" in out.stdout
    out = gt("simulate", runs[0], "--sms", 20, "--sched", "static,dynamic")
    assert out.returncode == 0, out.stderr
    assert "not a measurement" in out.stdout and "model: dynamic" in out.stdout and "model check" in out.stdout
    data = json.loads(gt("simulate", runs[1], "--json").stdout)
    assert data["replay_error"] == pytest.approx(0.0, abs=1e-3) and "not a measurement" in data["model"]
    assert_one_sentence_error(gt("simulate", runs[0], "--sched", "fifo"), "unknown scheduler 'fifo'")
    assert_one_sentence_error(gt("report", runs[0], "-o", tmp_path / "r.txt"), "ending in .html")


def test_sample_runs(runs, tmp_path):
    empty = tmp_path / "no-samples"
    empty.mkdir()
    for cmd in ("analyze", "compare", "report", "simulate"):
        out = gt(cmd, "--sample", env={"GEMMTRACE_SAMPLES": str(empty)})
        assert_one_sentence_error(out, "no sample runs are bundled")
    samples = tmp_path / "samples"
    for name, path in (("vX-static", runs[0]), ("vX-dynamic", runs[1])):
        Run.load(path).save(samples / name)
    env = {"GEMMTRACE_SAMPLES": str(samples)}
    out = gt("report", "--sample", "-o", tmp_path / "s.html", env=env)
    assert out.returncode == 0, out.stderr
    out = gt("compare", "--sample", env=env)
    assert out.returncode == 0 and out.stdout.index("static") < out.stdout.index("dynamic")  # static is the baseline
    assert gt("analyze", "--sample", "vX-dynamic", "--json", env=env).returncode == 0
    assert_one_sentence_error(gt("analyze", "--sample", "v9", env=env), "no bundled sample 'v9'", "vX-static")


def corrupt_runs(base, good):
    """Folders that are broken in each way a run can be, with the words their error should say."""
    cases = {}
    cases["missing"] = (base / "missing", "no such directory")
    (base / "no-meta").mkdir()
    (base / "no-meta" / "spans.npz").write_bytes((good / "spans.npz").read_bytes())
    cases["no-meta"] = (base / "no-meta", "meta.json is missing")
    bad = Run.load(good).save(base / "bad-npz")
    (bad / "spans.npz").write_bytes(b"PK\x03\x04 truncated")
    cases["bad-npz"] = (bad, "corrupt or truncated")
    bad = Run.load(good).save(base / "bad-json")
    (bad / "meta.json").write_text('{"format_version": 1,')
    cases["bad-json"] = (bad, "not valid JSON")
    bad = Run.load(good).save(base / "short")
    meta = json.loads((bad / "meta.json").read_text())
    meta["span_count"] += 5
    (bad / "meta.json").write_text(json.dumps(meta))
    cases["short"] = (bad, "incomplete")
    run = Run.load(good)
    spans = run.spans.copy()
    spans.loc[3, "end_ns"] = spans.loc[3, "start_ns"] - 100
    cases["backwards"] = (Run(spans, run.meta).save(base / "backwards"), "end before they start")
    empty = Run(run.spans.iloc[:0], run.meta).save(base / "empty")
    cases["empty"] = (empty, "no spans")
    return cases


def test_broken_runs_are_one_sentence_errors(runs, tmp_path):
    cases = corrupt_runs(tmp_path, runs[0])
    for name, (folder, words) in cases.items():
        assert_one_sentence_error(gt("analyze", folder), words)
    folder, words = cases["backwards"]
    assert_one_sentence_error(gt("compare", runs[0], folder), "run 2", words)
    assert_one_sentence_error(gt("report", folder, "-o", tmp_path / "x.html"), words)
    assert_one_sentence_error(gt("simulate", cases["bad-npz"][0]), cases["bad-npz"][1])
    assert_one_sentence_error(gt("analyze"), "needs a run", "--sample")


def test_cli_library_agree(runs):
    from gemmtrace import load

    data = json.loads(gt("analyze", runs[1], "--json").stdout)
    m = load(runs[1]).metrics()
    assert data["occupancy"]["mean"] == m.occupancy.mean
    assert data["tail_wave"]["length_ns"] == m.tail_wave.length_ns
    assert np.isclose(data["epilogue"]["overlap"], m.epilogue.overlap)
