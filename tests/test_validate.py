"""gemmtrace validate: the trace against Nsight Compute. On the CPU a fake `ncu` (a script that
records how it was called and prints CSV as ncu does) checks the command, the parsing of both CSV
layouts, the tolerances, the stored result and the one-sentence errors; on an sm_90a GPU with ncu,
v8 at 4096 is validated for real."""
import glob
import json
import os
import stat
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from gemmtrace import GemmtraceError, Run
from gemmtrace import validate as validate_mod
from gemmtrace.analysis import compute_metrics
from gemmtrace.analysis.findings import VALIDATION_BUSY_POINTS, VALIDATION_D_TOLERANCE, find
from gemmtrace.analysis.synthetic import synthetic_run
from gemmtrace.validate import NCU_METRICS, find_ncu, parse_ncu_csv, validate
from cli_helpers import assert_one_sentence_error, gt

FAKE_NCU = textwrap.dedent("""\
    #!{python}
    # A stand-in for Nsight Compute's ncu: records its argv, writes ncu-like CSV to --log-file.
    import json, os, sys
    argv = sys.argv[1:]
    with open(os.environ["FAKE_NCU_ARGV"], "w") as f:
        json.dump(argv, f)
    if os.environ.get("FAKE_NCU_FAIL"):
        print("==ERROR== ERR_NVGPUCTRPERM - The user does not have permission to access NVIDIA GPU Performance Counters.", file=sys.stderr)
        sys.exit(1)
    log = argv[argv.index("--log-file") + 1]
    out = ["==PROF== Connected to process 4242 (python3)"]
    if os.environ.get("FAKE_NCU_NO_KERNEL"):
        out.append("==WARNING== No kernels were profiled.")
    else:
        d, active, elapsed = os.environ["FAKE_NCU_NS"], os.environ["FAKE_NCU_ACTIVE"], os.environ["FAKE_NCU_ELAPSED"]
        out.append('"ID","Process ID","Process Name","Host Name","Kernel Name","Context","Stream","Section Name","Metric Name","Metric Unit","Metric Value"')
        rows = [("gpu__time_duration.sum", "usecond", "%.3f" % (float(d) / 1e3)),
                ("sm__cycles_elapsed.avg.per_second", "cycle/nsecond", "1.62"),
                ("sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_elapsed", "%",
                 "%.4f" % (100 * float(active) / float(elapsed)))]
        for name, unit, value in rows:
            out.append('"0","4242","python3","host","void gemm_persistent<true, StaticScheduler>(...)","1","7",'
                       '"Command line profiler metrics","%s","%s","%s"' % (name, unit, value))
        out.append('"1","4242","python3","host","gemm_persistent","1","7","Command line profiler metrics","gpu__time_duration.sum","nsecond","1"')
        out.append("==PROF== Disconnected from process 4242")
    if os.environ.get("FAKE_NCU_STDOUT"):
        print("launch output of the application")
        print("\\n".join(out))
    else:
        open(log, "w").write("\\n".join(out) + "\\n")
""")


@pytest.fixture()
def fake_ncu(tmp_path, monkeypatch):
    path = tmp_path / "bin" / "ncu"
    path.parent.mkdir()
    path.write_text(FAKE_NCU.format(python=sys.executable))
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("GEMMTRACE_NCU", str(path))
    monkeypatch.setenv("FAKE_NCU_ARGV", str(tmp_path / "argv.json"))
    return path


def v8_like_run(folder: Path) -> Run:
    """A saved run that names a registered kernel (its spans are synthetic: nothing is launched)."""
    run = synthetic_run(sms=16, tiles=64, kblocks=8, timer_step_ns=32)
    run.meta.update(kernel="v8", source="registry", shape={"M": 512, "N": 1024, "K": 768}, scheduler="dynamic",
                    order="hilbert")
    run.save(folder)
    return Run.load(folder)


def set_ncu_figures(monkeypatch, run: Run, d_diff: float, busy_points: float) -> None:
    """Make the fake report D / ncu - 1 = d_diff and trace busy - ncu busy = busy_points."""
    m = compute_metrics(run)
    elapsed = 132 * 10_000_000
    monkeypatch.setenv("FAKE_NCU_NS", str(m.duration_ns / (1 + d_diff)))
    monkeypatch.setenv("FAKE_NCU_ELAPSED", str(elapsed))
    monkeypatch.setenv("FAKE_NCU_ACTIVE", str(round((m.tensor_core.busy_fraction - busy_points / 100) * elapsed)))


def test_within_tolerance_is_stored_in_meta_only(fake_ncu, tmp_path, monkeypatch):
    run = v8_like_run(tmp_path / "run")
    set_ncu_figures(monkeypatch, run, -0.012, 3.5)  # as measured on the H100: D shorter, busy higher
    spans_before = (tmp_path / "run" / "spans.npz").read_bytes()
    result = validate(tmp_path / "run")
    assert result["ok"] and result["duration_ok"] and result["busy_ok"]
    assert result["duration_diff"] == pytest.approx(-0.012, abs=2e-5)
    assert result["busy_diff_points"] == pytest.approx(3.5, abs=1e-4)
    assert result["sm_clock_hz"] == pytest.approx(1.62e9)
    assert "gemm_persistent" in result["kernel_name"]
    assert result["tolerance"] == {"duration": VALIDATION_D_TOLERANCE, "busy_points": VALIDATION_BUSY_POINTS}
    stored = json.loads((tmp_path / "run" / "meta.json").read_text())["validation"]
    assert stored["ok"] is True and stored["ncu_duration_ns"] == pytest.approx(result["ncu_duration_ns"])
    assert (tmp_path / "run" / "spans.npz").read_bytes() == spans_before  # only meta.json is rewritten
    assert Run.load(tmp_path / "run").meta["validation"]["busy_ok"] is True

    # How ncu was called: clocks left alone, the GEMM only, one launch, the metrics, and the run's launch.
    argv = json.loads((tmp_path / "argv.json").read_text())
    assert argv[argv.index("--clock-control") + 1] == "none"
    assert argv[argv.index("--kernel-name") + 1] == "regex:gemm"
    assert argv[argv.index("--launch-count") + 1] == "1"
    assert argv[argv.index("--metrics") + 1].split(",") == list(NCU_METRICS)
    launch = argv[argv.index(sys.executable):]
    assert launch[1:4] == ["-m", "gemmtrace", "_launch-once"]
    for flag, value in (("--kernel", "v8"), ("--shape", "512x1024x768"), ("--sched", "dynamic"), ("--order", "hilbert")):
        assert launch[launch.index(flag) + 1] == value

    # analyze shows it; the findings raise no validation warning; the sm clock warning reads ncu's clock.
    out = gt("analyze", tmp_path / "run")
    assert out.returncode == 0, out.stderr
    assert "validated against Nsight Compute" in out.stdout and "within tolerance" in out.stdout
    causes = [f.cause for f in find(Run.load(tmp_path / "run"))]
    assert "validation_mismatch" not in causes


@pytest.mark.parametrize("d_diff, busy_points, bad", [(-0.06, 3.0, "duration"), (-0.01, 7.5, "busy"),
                                                      (0.055, -6.5, "both")])
def test_outside_tolerance(fake_ncu, tmp_path, monkeypatch, d_diff, busy_points, bad):
    run = v8_like_run(tmp_path / "run")
    set_ncu_figures(monkeypatch, run, d_diff, busy_points)
    out = gt("validate", tmp_path / "run")
    assert out.returncode == 3, (out.stdout, out.stderr)  # validated, but a figure is outside its tolerance
    assert "OUTSIDE tolerance" in out.stdout
    stored = json.loads((tmp_path / "run" / "meta.json").read_text())["validation"]
    assert stored["ok"] is False
    assert stored["duration_ok"] is (bad == "busy") and stored["busy_ok"] is (bad == "duration")
    findings = find(Run.load(tmp_path / "run"))
    assert findings[0].kind == "trust" and "validation_mismatch" in [f.cause for f in findings]


def test_json_output_and_the_boundary(fake_ncu, tmp_path, monkeypatch):
    run = v8_like_run(tmp_path / "run")
    set_ncu_figures(monkeypatch, run, -0.049, -5.9)  # just inside both tolerances
    monkeypatch.setenv("FAKE_NCU_STDOUT", "1")  # results printed among the application's output, not logged
    out = gt("validate", tmp_path / "run", "--json")
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    assert data["ok"] is True and data["busy_diff_points"] == pytest.approx(-5.9, abs=1e-3)


def test_parse_both_csv_layouts():
    details = ('==PROF== Connected to process 1\n'
               '"ID","Kernel Name","Metric Name","Metric Unit","Metric Value"\n'
               '"0","gemm_v4","gpu__time_duration.sum","msecond","1.25"\n'
               '"0","gemm_v4","sm__cycles_elapsed.sum","cycle","1,234,567"\n'
               '"1","gemm_v4","gpu__time_duration.sum","msecond","9"\n')
    parsed = parse_ncu_csv(details)
    assert parsed["kernel"] == "gemm_v4"
    assert parsed["metrics"]["gpu__time_duration.sum"] == (1.25, "msecond")  # the first kernel only
    assert parsed["metrics"]["sm__cycles_elapsed.sum"] == (1234567.0, "cycle")
    raw = ('"ID","Kernel Name","gpu__time_duration.sum","sm__pipe_tensor_op_hmma_cycles_active.sum"\n'
           '"","","nsecond","cycle"\n'
           '"0","gemm_v6","52,123","7,000"\n')
    parsed = parse_ncu_csv(raw)
    assert parsed["kernel"] == "gemm_v6"
    assert parsed["metrics"]["gpu__time_duration.sum"] == (52123.0, "nsecond")
    assert parsed["metrics"]["sm__pipe_tensor_op_hmma_cycles_active.sum"] == (7000.0, "cycle")
    with pytest.raises(GemmtraceError, match="profiled no kernel"):
        parse_ncu_csv("==PROF== Connected\n==WARNING== No kernels were profiled.\n")


def test_units_are_converted(tmp_path):
    run = synthetic_run(sms=4, tiles=8, kblocks=2)
    d = compute_metrics(run).duration_ns
    metrics = {"gpu__time_duration.sum": (d / 1e6, "msecond"),
               "sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_elapsed": (50.0, "%"),
               "sm__cycles_elapsed.avg.per_second": (1.5, "GHz")}
    result = validate_mod.compare_with_ncu(run, {"kernel": "gemm", "metrics": metrics})
    assert result["duration_diff"] == pytest.approx(0.0, abs=1e-9) and result["ncu_tc_busy"] == 0.5
    assert result["sm_clock_hz"] == pytest.approx(1.5e9)
    with pytest.raises(GemmtraceError, match="unit"):
        validate_mod.compare_with_ncu(run, {"kernel": "gemm", "metrics": {**metrics, "gpu__time_duration.sum": (1, "fortnight")}})


def test_ncu_failure_and_no_kernel_are_one_sentence(fake_ncu, tmp_path, monkeypatch):
    v8_like_run(tmp_path / "run")
    monkeypatch.setenv("FAKE_NCU_FAIL", "1")
    assert_one_sentence_error(gt("validate", tmp_path / "run"), "ncu failed (exit 1)", "ERR_NVGPUCTRPERM")
    monkeypatch.delenv("FAKE_NCU_FAIL")
    monkeypatch.setenv("FAKE_NCU_NO_KERNEL", "1")
    assert_one_sentence_error(gt("validate", tmp_path / "run"), "profiled no kernel matching 'regex:gemm'")
    assert "validation" not in json.loads((tmp_path / "run" / "meta.json").read_text())


def test_a_run_of_an_unregistered_kernel_cannot_be_relaunched(fake_ncu, tmp_path):
    synthetic_run(sms=4, tiles=8, kblocks=2).save(tmp_path / "mine")  # kernel "synthetic": a user's own
    assert_one_sentence_error(gt("validate", tmp_path / "mine"), "(synthetic) is not one gemmtrace builds",
                              "profile your own launch under ncu")
    captured = synthetic_run(sms=4, tiles=8, kblocks=2)
    captured.meta.update(kernel="v8", source="capture")  # named like a registered kernel, but captured
    with pytest.raises(GemmtraceError, match="not one gemmtrace builds"):
        validate(captured)
    assert not (tmp_path / "argv.json").exists()  # ncu was never started


def test_absent_ncu(tmp_path, monkeypatch):
    monkeypatch.delenv("GEMMTRACE_NCU", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setattr(validate_mod, "NCU_PLACES", ())
    with pytest.raises(GemmtraceError, match="needs Nsight Compute's ncu, which was not found"):
        find_ncu()
    run = v8_like_run(tmp_path / "run")
    with pytest.raises(GemmtraceError, match="was not found"):
        validate(run)
    monkeypatch.setenv("GEMMTRACE_NCU", str(tmp_path / "no-such-ncu"))
    with pytest.raises(GemmtraceError, match="not an executable"):
        find_ncu()


@pytest.mark.skipif(any(glob.glob(p) for p in validate_mod.NCU_PLACES), reason="ncu is installed in a default place")
def test_absent_ncu_cli(tmp_path):
    v8_like_run(tmp_path / "run")
    env = {"PATH": os.path.dirname(sys.executable), "GEMMTRACE_NCU": ""}
    assert_one_sentence_error(gt("validate", tmp_path / "run", env=env), "needs Nsight Compute's ncu")


def test_launch_once_needs_a_gpu():
    from gemmtrace.runner import gpu_available

    if gpu_available():
        pytest.skip("a GPU is visible: _launch-once would launch")
    assert_one_sentence_error(gt("_launch-once", "--kernel", "v8", "--shape", "256"))
    assert "_launch-once" not in gt("--help").stdout  # hidden


@pytest.mark.gpu
def test_validate_v8_for_real(tmp_path):
    """v8 at 4096 on the H100, under the real ncu: D and busy within the documented tolerances."""
    from gemmtrace.runner import RunOptions, run_kernel, save_and_export

    try:
        find_ncu()
    except GemmtraceError as e:
        pytest.skip(str(e))
    [result] = run_kernel(RunOptions(kernel="v8", shape=(4096, 4096, 4096), schedulers=("static",), iters=20))
    save_and_export(result, tmp_path / "v8", formats=())
    v = validate(tmp_path / "v8")
    print(json.dumps({k: v[k] for k in ("duration_diff", "busy_diff_points", "sm_clock_hz", "kernel_name")}))
    assert "gemm" in v["kernel_name"]
    assert abs(v["duration_diff"]) <= VALIDATION_D_TOLERANCE
    assert abs(v["busy_diff_points"]) <= VALIDATION_BUSY_POINTS
    assert v["ok"] and json.loads((tmp_path / "v8" / "meta.json").read_text())["validation"]["ok"]
    assert np.isfinite(v["sm_clock_hz"])
