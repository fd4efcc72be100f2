"""The command line: help for every command, and one-sentence errors (exit 1, no traceback)."""

import pytest

from gemmtrace.cli import parse_shape
from gemmtrace import GemmtraceError

from conftest import HAVE_SM90
from cli_helpers import assert_one_sentence_error, gt


@pytest.mark.parametrize("cmd", ["", "run", "build", "list", "export"])
def test_help(cmd):
    out = gt(*([cmd] if cmd else []), "--help")
    assert out.returncode == 0, out.stderr
    assert "Usage" in out.stdout


def test_run_help_names_the_options():
    out = gt("run", "--help").stdout
    for opt in ("--kernel", "--shape", "--sched", "--iters", "--out", "--buffer-scale"):
        assert opt in out


def test_unknown_kernel():
    assert_one_sentence_error(gt("run", "--kernel", "v99"), "unknown kernel 'v99'")


def test_bad_shape():
    assert_one_sentence_error(gt("run", "--shape", "12x-3"), "shape")


def test_build_needs_kernel_or_all():
    assert_one_sentence_error(gt("build"), "--kernel NAME or --all")


def test_unknown_arch():
    assert_one_sentence_error(gt("build", "--all", "--arch", "sm75"), "unknown architecture")


def test_export_of_missing_and_corrupt_runs(tmp_path):
    assert_one_sentence_error(gt("export", str(tmp_path / "none")), "no such directory")
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / "meta.json").write_text("{}")
    (tmp_path / "bad" / "spans.npz").write_bytes(b"\x00" * 10)
    assert_one_sentence_error(gt("export", str(tmp_path / "bad")), "format_version")


def test_unsupported_scheduler_is_refused_before_any_gpu_work():
    assert_one_sentence_error(gt("run", "--kernel", "v1", "--sched", "dynamic"), "no dynamic scheduler")


@pytest.mark.skipif(HAVE_SM90, reason="this machine has a GPU")
def test_run_without_gpu_says_so():
    assert_one_sentence_error(gt("run", "--kernel", "v1", "--shape", "256"), "GPU")


def test_list_shows_every_kernel():
    from gemmtrace import registry

    out = gt("list")
    assert out.returncode == 0
    for name, spec in registry.KERNELS.items():
        assert name in out.stdout and spec.tile_str in out.stdout


def test_parse_shape():
    assert parse_shape("4096") == (4096, 4096, 4096)
    assert parse_shape("8192x8192x4096") == (8192, 8192, 4096)
    assert parse_shape("1,2,3") == (1, 2, 3)
    for bad in ("", "0", "1x2", "axbxc", "1x2x3x4"):
        with pytest.raises(GemmtraceError):
            parse_shape(bad)


def test_best_picks_its_own_scheduler_order_and_tile():
    for extra in (["--sched", "dynamic"], ["--order", "hilbert"], ["--tile", "2"]):
        assert_one_sentence_error(gt("run", "--kernel", "best", "--shape", "256", *extra), "--kernel best picks")


def test_a_tile_the_family_lacks_is_refused():
    assert_one_sentence_error(gt("run", "--kernel", "v10", "--tile", "13", "--shape", "256"), "kernel v10 has no tile 13")
    assert_one_sentence_error(gt("run", "--kernel", "v8", "--tile", "2", "--shape", "256"), "it has one tile")


def test_list_states_v10s_rule_and_best():
    out = gt("list").stdout
    assert "v10's rule:" in out and "best:" in out and "64x256/c1" in out


@pytest.mark.skipif(HAVE_SM90, reason="this machine has a GPU")
def test_best_without_gpu_says_so_before_building():
    out = gt("run", "--kernel", "best", "--shape", "256")
    assert_one_sentence_error(out, "GPU")
    assert "best at" not in out.stdout


def test_error_sentences_print_brackets_as_written(monkeypatch, capsys):
    """An error naming an extra (`pip install 'gemmtrace[report]'`) prints it whole: rich would read
    "[report]" as markup and drop it."""
    from gemmtrace import cli

    def fail():
        raise GemmtraceError("reports need plotly, which is not installed (pip install 'gemmtrace[report]').")

    monkeypatch.setattr(cli, "app", fail)
    with pytest.raises(SystemExit) as exit_info:
        cli.main()
    assert exit_info.value.code == 1
    assert "pip install 'gemmtrace[report]'" in capsys.readouterr().err
