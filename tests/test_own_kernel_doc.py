"""docs/own-kernel.md's example is code that works: its tag header parses, its kernel compiles for
sm_80, sm_90a and sm_100a against the packaged header, and on a GPU its Python block captures a run
that analyzes."""
import re
import subprocess
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

import gemmtrace as gt
from gemmtrace.build import nvcc_path

DOC = Path(__file__).resolve().parent.parent / "docs" / "own-kernel.md"


def blocks(lang: str) -> list[str]:
    return re.findall(rf"```{lang}\n(.*?)```", DOC.read_text(), re.S)


@pytest.fixture(scope="module")
def example(tmp_path_factory):
    d = tmp_path_factory.mktemp("own_kernel_doc")
    tags = next(b for b in blocks("c") if "TOY_TAGS" in b)
    kernel = next(b for b in blocks("cuda") if "toy_launch" in b)
    (d / "toy_tags.h").write_text(tags)
    (d / "toy_gemm.cu").write_text(kernel)
    return d


def test_the_docs_tag_header_parses(example):
    t = gt.Tags.from_header(example / "toy_tags.h")
    assert t.groups == {"load": "issue", "fma": "mma", "store": "epilogue"}


def test_the_docs_kernel_is_about_twenty_lines_of_profiler(example):
    src = (example / "toy_gemm.cu").read_text()
    added = [l for l in src.splitlines() if re.search(r"rec\.|Recorder|gemmtrace::|GEMMTRACE_|toy_tags|kProfile", l)]
    assert 8 <= len(added) <= 24, added


@pytest.mark.parametrize("arch", ["compute_80,code=sm_80", "compute_90a,code=sm_90a", "compute_100a,code=sm_100a"])
def test_the_docs_kernel_compiles_for_each_architecture(example, arch):
    out = subprocess.run([nvcc_path(), f"-gencode=arch={arch}", "-std=c++17", "-O3", f"-I{gt.INCLUDE_DIR}",
                          f"-I{example}", "-c", str(example / "toy_gemm.cu"), "-o", str(example / f"{arch[8:11]}.o")],
                         capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr


def test_the_staged_recorder_refuses_sm80_with_a_clear_message(tmp_path):
    (tmp_path / "staged.cu").write_text(
        '#include "gemmtrace/profiler.cuh"\n__global__ void k(gemmtrace::ProfileBuffer p) {\n'
        "  __shared__ alignas(16) uint8_t ring[gemmtrace::Recorder<true, 8>::kSmemBytes];\n"
        "  gemmtrace::Recorder<true, 8> rec;\n"
        "  rec.init(p, 0, gemmtrace::Role::CONSUMER, uint32_t(__cvta_generic_to_shared(ring)));\n  rec.finish();\n}\n")

    def compile_for(arch):
        return subprocess.run([nvcc_path(), f"-gencode=arch={arch}", "-std=c++17", f"-I{gt.INCLUDE_DIR}", "-c",
                               str(tmp_path / "staged.cu"), "-o", str(tmp_path / f"s{arch[8:11]}.o")],
                              capture_output=True, text=True, timeout=600)

    with ThreadPoolExecutor(2) as pool:
        old, new = pool.map(compile_for, ["compute_80,code=sm_80", "compute_90a,code=sm_90a"])
    assert old.returncode != 0 and "needs sm_90 or newer" in old.stderr, old.stderr
    assert new.returncode == 0, new.stderr


@pytest.mark.gpu
def test_the_docs_python_block_captures_a_run_that_analyzes(example, monkeypatch):
    lib = example / "libtoy.so"
    out = subprocess.run([nvcc_path(), "-gencode=arch=compute_90a,code=sm_90a", "-O3", "-shared", "-Xcompiler", "-fPIC",
                          f"-I{gt.INCLUDE_DIR}", f"-I{example}", str(example / "toy_gemm.cu"), "-o", str(lib)],
                         capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr
    code = next(b for b in blocks("python") if "gt.capture(" in b)
    monkeypatch.chdir(example)
    scope: dict = {}
    exec(compile(code, str(DOC), "exec"), scope)  # the doc's block, as written
    import torch

    a, b, c = scope["a"], scope["b"], scope["c"]
    ref = a @ b.t()
    assert torch.linalg.vector_norm(c - ref) / torch.linalg.vector_norm(ref) < 1e-4
    run = gt.load(example / "runs" / "toy_gemm")
    assert run.meta["profiler"]["dropped"] == 0 and run.meta["profiler"]["incomplete_regions"] == 0
    m = run.metrics()
    assert m.tensor_core.busy_fraction > 0 and m.epilogue.spans == 32 * 32
