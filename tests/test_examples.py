"""The examples (examples/*): every kernel and program compiles with nvcc (no GPU needed) for the
architectures it claims, without spills; their tag headers parse and match the enums the kernels
compile; the staged recorder refuses sm_80 in one sentence; the run scripts fail in one sentence.
The gpu tests run each example end to end and analyze the run folder it writes."""
from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

import gemmtrace as gt
from gemmtrace.build import nvcc_path

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples"
TORCH_EXT = EXAMPLES / "torch_extension"
CTYPES_LIB = EXAMPLES / "ctypes_library"
CPP_ONLY = EXAMPLES / "cpp_only"
TAG_HEADERS = {
    "torch_extension": (TORCH_EXT / "wsmma_gemm_tags.h", "WSMMA_ROLES", "WSMMA_TAGS"),
    "ctypes_library": (CTYPES_LIB / "ws_gemm_tags.h", "WS_GEMM_ROLES", "WS_GEMM_TAGS"),
}
INCLUDE = f"-I{gt.INCLUDE_DIR}"

STAGED_TU = r"""
#include "gemmtrace/profiler.cuh"
// The staged recorder (a ring in shared memory, flushed with cp.async.bulk) exists from sm_90 on.
__global__ void staged(gemmtrace::ProfileBuffer prof) {
  extern __shared__ __align__(16) uint8_t ring[];
  gemmtrace::Recorder<true, 32> rec;
  rec.init(prof, 0, gemmtrace::Role::CONSUMER, static_cast<uint32_t>(__cvta_generic_to_shared(ring)));
  const uint32_t t = rec.now();
  rec.record(gemmtrace::Tag::MMA, t, 0, 0);
  rec.finish();
}
"""

HARNESS_TU = r"""
// examples/cpp_only/main.cu with its main() renamed, to run its host helpers without a GPU.
#define main ws_gemm_cpp_main
#include "main.cu"
#undef main
int main(int, char** argv) {
  std::ofstream(argv[1]) << kTagsHeader;
  std::ofstream(argv[2]) << "{\n  \"format\": \"gemmtrace-raw\",\n  \"version\": 1,\n  \"tags_header\": \"x.tags.h\"\n}\n";
  add_timings(argv[2], 2.0, 2.02, 4e12, 20);
  return 0;
}
"""


def _vocabulary_tu() -> str:
    """Both example vocabularies as enums, with a static_assert per id that Python parsed."""
    lines = ['#include "gemmtrace/profiler.cuh"']
    for ns, (header, roles, tags) in TAG_HEADERS.items():
        vocab = gt.Tags.from_header(header)
        lines += [f'#include "{header}"', f"namespace {ns} {{ GEMMTRACE_DEFINE_VOCABULARY({roles}, {tags}); }}"]
        lines += [f'static_assert(uint32_t({ns}::Role::{r.enum}) == {r.id}, "{ns} role {r.name}");' for r in vocab.roles]
        lines += [f'static_assert(uint32_t({ns}::Tag::{t.enum}) == {t.id}, "{ns} tag {t.name}");' for t in vocab.tags]
    return "\n".join(lines) + "\n"


def _nvcc(args: list[str]) -> subprocess.CompletedProcess:
    return subprocess.run([nvcc_path(), *args], capture_output=True, text=True, timeout=600)


def _gencode(arch: str) -> str:
    return f"-gencode=arch=compute_{arch},code=sm_{arch}"


@pytest.fixture(scope="module")
def compiled(tmp_path_factory):
    """Every compile of this module, once, all in parallel: {name: (CompletedProcess, output path)}."""
    tmp = tmp_path_factory.mktemp("examples")
    (tmp / "staged.cu").write_text(STAGED_TU)
    (tmp / "vocabulary.cu").write_text(_vocabulary_tu())
    (tmp / "harness.cu").write_text(HARNESS_TU)
    base = ["-O3", "-std=c++17", INCLUDE, "-Xptxas", "-v"]
    jobs = {
        **{f"wsmma-{arch}": (["-c", *base, _gencode(arch), f"-I{TORCH_EXT}", str(TORCH_EXT / "wsmma_gemm.cu")], f"wsmma-{arch}.o")
           for arch in ("80", "90a", "100a")},
        # the command examples/cpp_only/run.sh runs
        "cpp_only": ([*base, _gencode("90a"), f"-I{CTYPES_LIB}", str(CPP_ONLY / "main.cu")], "ws_gemm_cpp"),
        "cpp_harness": (["-O1", "-std=c++17", INCLUDE, _gencode("90a"), f"-I{CTYPES_LIB}", f"-I{CPP_ONLY}",
                         str(tmp / "harness.cu")], "harness"),
        "staged-80": (["-c", "-std=c++17", INCLUDE, _gencode("80"), str(tmp / "staged.cu")], "staged-80.o"),
        "staged-90a": (["-c", "-std=c++17", INCLUDE, _gencode("90a"), str(tmp / "staged.cu")], "staged-90a.o"),
        "vocabulary": (["-c", "-std=c++17", INCLUDE, _gencode("90a"), str(tmp / "vocabulary.cu")], "vocabulary.o"),
        "wsmma-ptx": (["-ptx", "-O3", "-std=c++17", INCLUDE, _gencode("80"), f"-I{TORCH_EXT}",
                       str(TORCH_EXT / "wsmma_gemm.cu")], "wsmma.ptx"),
        "ws_gemm-ptx": (["-ptx", "-O3", "-std=c++17", INCLUDE, _gencode("90a"), f"-I{CTYPES_LIB}",
                         str(CTYPES_LIB / "ws_gemm.cu")], "ws_gemm.ptx"),
    }

    def run(item):
        name, (args, out) = item
        return name, (_nvcc([*args, "-o", str(tmp / out)]), tmp / out)

    def build_library():  # through the example's own build script, into this session's folder
        spec = importlib.util.spec_from_file_location("ws_gemm_build", CTYPES_LIB / "build.py")
        ws_build = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(ws_build)
        lib = ws_build.build(out_dir=tmp / "ctypes_build", force=True)
        return "ctypes_library", (ws_build, lib)

    with ThreadPoolExecutor(max_workers=max(2, os.cpu_count() or 2)) as pool:
        futures = [pool.submit(build_library)] + [pool.submit(run, item) for item in jobs.items()]
        return dict(f.result() for f in futures)


def _kernels(ptxas_log: str) -> list[tuple[str, int, int, int]]:
    """(mangled name, registers, spill bytes, stack bytes) per kernel in a ptxas -v log."""
    out, name, spill, stack = [], None, 0, 0
    for line in ptxas_log.splitlines():
        if m := re.search(r"Compiling entry function '(\w+)'", line):
            name = m.group(1)
        if m := re.search(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads", line):
            stack, spill = int(m.group(1)), int(m.group(2)) + int(m.group(3))
        if (m := re.search(r"Used (\d+) registers", line)) and name:
            out.append((name, int(m.group(1)), spill, stack))
            name = None
    return out


def _assert_profiled_and_plain_without_spills(log: str, what: str, kernel: str) -> None:
    kernels = [k for k in _kernels(log) if kernel in k[0]]
    assert {("ILb1E" in k[0]) for k in kernels} == {True, False}, f"{what}: expected a profiled and a plain {kernel}:\n{log}"
    for name, regs, spill, stack in kernels:
        assert spill == 0 and stack == 0, f"{what}: {name} spills {spill} bytes ({stack}-byte stack), {regs} registers"
    assert "C7515" not in log, f"{what}: ptxas serializes a wgmma pipeline:\n{log}"


# -- compiling ---------------------------------------------------------------------------------
@pytest.mark.parametrize("arch", ["80", "90a", "100a"])
def test_torch_extension_kernel_compiles_for_each_architecture_without_spills(compiled, arch):
    proc, obj = compiled[f"wsmma-{arch}"]
    assert proc.returncode == 0, proc.stderr
    assert obj.is_file()
    _assert_profiled_and_plain_without_spills(proc.stderr, f"wsmma_gemm.cu for sm_{arch}", "wsmma")
    # Immediate barrier ids: ptxas counts 11 named barriers (a register id would make it 16, which
    # can cost the second CTA per SM the kernel is sized for).
    barriers = [int(b) for b in re.findall(r"used (\d+) barriers", proc.stderr)]
    assert barriers and max(barriers) <= 11, proc.stderr


def test_ctypes_library_builds_for_sm90a_through_its_build_script(compiled):
    ws_build, lib = compiled["ctypes_library"]
    assert lib.is_file() and lib.suffix == ".so"
    _assert_profiled_and_plain_without_spills(lib.with_suffix(".log").read_text(), "libws_gemm.so", "ws_gemm_kernel")
    kernels = ws_build.resources(lib)
    assert sorted(k for k, _, _ in kernels) == ["ws_gemm_kernel<false>", "ws_gemm_kernel<true>"]
    assert ws_build.build(out_dir=lib.parent) == lib, "an unchanged source must not rebuild"
    symbols = subprocess.run(["nm", "-D", "--defined-only", str(lib)], capture_output=True, text=True).stdout
    assert re.search(r"\bws_gemm_launch\b", symbols) and re.search(r"\bws_gemm_plan\b", symbols)


def test_cpp_only_program_compiles_for_sm90a(compiled):
    proc, exe = compiled["cpp_only"]
    assert proc.returncode == 0, proc.stderr
    assert exe.is_file()
    _assert_profiled_and_plain_without_spills(proc.stderr, "examples/cpp_only/main.cu", "ws_gemm_kernel")


def test_cpp_only_program_checks_its_arguments_before_any_gpu_work(compiled):
    _, exe = compiled["cpp_only"]
    for args, words in ((["64", "64", "12"], "K must be a multiple of 8"), (["1", "2"], "usage: ws_gemm_cpp"),
                        (["x", "2", "8"], "must be integers")):
        out = subprocess.run([str(exe), *args], capture_output=True, text=True, timeout=60)
        assert out.returncode == 1 and words in out.stderr, out.stderr
        assert out.stderr.count("\n") == 1, f"not one sentence: {out.stderr!r}"


def test_cpp_only_capture_carries_its_vocabulary_and_timings(compiled, tmp_path):
    """The program writes the kernel's tag header beside its capture (from the macros it compiled
    with) and adds its timings to HostCapture's JSON: both must read back as gemmtrace reads them."""
    proc, exe = compiled["cpp_harness"]
    assert proc.returncode == 0, proc.stderr
    header, raw = tmp_path / "x.tags.h", tmp_path / "x.json"
    out = subprocess.run([str(exe), str(header), str(raw)], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    written, source = gt.Tags.from_header(header), gt.Tags.from_header(TAG_HEADERS["ctypes_library"][0])
    assert written.roles == source.roles and written.tags == source.tags
    meta = json.loads(raw.read_text())
    assert meta["tags_header"] == "x.tags.h"
    assert meta["timings"]["kernel_ms"] == pytest.approx(2.0) and meta["timings"]["profiler_overhead"] == pytest.approx(0.01)
    assert meta["timings"]["tflops"] == pytest.approx(2000.0)


def test_staged_recorder_refuses_sm80_in_one_sentence(compiled):
    proc, _ = compiled["staged-80"]
    assert proc.returncode != 0
    assert "needs sm_90" in proc.stderr, proc.stderr
    ok, _ = compiled["staged-90a"]
    assert ok.returncode == 0, f"the same translation unit must compile for sm_90a:\n{ok.stderr}"


def _ptx_entries(ptx: str) -> dict[str, tuple[list[str], str]]:
    """entry name -> (parameter names, body)."""
    out = {}
    for m in re.finditer(r"\.entry\s+(\S+)\(([^)]*)\)(.*?)(?=\.entry|\Z)", ptx, re.S):
        params = re.findall(r"\.param\s+[^\n,]*?\s(\S+?)(?:\[\d+\])?\s*(?:,|$)", m.group(2), re.M)
        out[m.group(1)] = (params, m.group(3))
    return out


@pytest.mark.parametrize("job", ["wsmma-ptx", "ws_gemm-ptx"])
def test_plain_build_has_no_profiler_code(compiled, job):
    """kProfile = false: no timer read and the ProfileBuffer parameter never touched, as in
    gemmtrace's own kernels; kProfile = true reads both."""
    proc, ptx = compiled[job]
    assert proc.returncode == 0, proc.stderr
    entries = _ptx_entries(ptx.read_text())
    kind = {n: re.search(r"ILb([01])E", n).group(1) for n in entries if re.search(r"ILb([01])E", n)}
    assert sorted(kind.values()) == ["0", "1"], list(entries)
    for name, (params, body) in entries.items():
        if kind.get(name) == "0":
            assert "%globaltimer" not in body and "%clock" not in body, name
            assert params[-1] not in body, f"{name} reads its profiler parameter {params[-1]}"
        elif kind.get(name) == "1":
            assert "%globaltimer" in body and "%clock64" in body and params[-1] in body, name


# -- vocabularies ------------------------------------------------------------------------------
@pytest.mark.parametrize("example", sorted(TAG_HEADERS))
def test_tag_header_parses_with_an_mma_tag_and_two_roles(example):
    vocab = gt.Tags.from_header(TAG_HEADERS[example][0])
    assert len(vocab.roles) >= 2
    assert "mma" in {t.group for t in vocab.tags}
    assert all(1 <= t.id <= 255 for t in vocab.tags)


def test_tag_header_ids_match_the_enums_the_kernels_compile(compiled):
    proc, _ = compiled["vocabulary"]
    assert proc.returncode == 0, f"an enum id differs from what gemmtrace.Tags parsed:\n{proc.stderr}"


# -- no checkout needed, one-sentence failures ---------------------------------------------------
def test_examples_find_gemmtrace_through_the_installed_package():
    """The lead's wheel test runs them against a wheel: no path into the repository."""
    for path in EXAMPLES.rglob("*"):
        if path.suffix not in {".py", ".sh", ".cu", ".h", ".cpp"} or "build" in path.parts:
            continue
        text = path.read_text()
        assert "gemmtrace/include" not in text and "parents[" not in text, f"{path} reaches into the checkout"
    assert "gt.INCLUDE_DIR" in (TORCH_EXT / "run.py").read_text()
    assert "gt.INCLUDE_DIR" in (CTYPES_LIB / "build.py").read_text()
    script = (CPP_ONLY / "run.sh").read_text()  # the installed command (or $GEMMTRACE) gives the -I flag
    assert '$("${gemmtrace[@]}" includes)' in script and '"${GEMMTRACE:-gemmtrace}"' in script


@pytest.mark.parametrize("script", [TORCH_EXT / "run.py", CTYPES_LIB / "run.py"], ids=lambda p: p.parent.name)
def test_run_script_rejects_a_bad_shape_in_one_sentence(script):
    for shape, words in (("256x256x12", "K must be a multiple of 8"), ("12x", "is not N or MxNxK")):
        out = subprocess.run([sys.executable, str(script), "--shape", shape], capture_output=True, text=True, timeout=120)
        assert out.returncode == 1, out.stdout + out.stderr
        assert out.stderr.startswith("error: ") and words in out.stderr and out.stderr.count("\n") == 1, out.stderr


# -- end to end on a GPU -------------------------------------------------------------------------
def _analyzes(folder: Path) -> None:
    from gemmtrace.analysis import compute_metrics

    run = gt.load(folder)
    m = compute_metrics(run)
    assert m.tensor_core.busy_ns > 0, "no MMA spans in the trace"
    assert run.meta["profiler"]["dropped"] == 0 and run.meta["profiler"]["incomplete_regions"] == 0
    assert {"mma"} <= set(run.tag_groups.values())


@pytest.mark.gpu
@pytest.mark.parametrize("script", [TORCH_EXT / "run.py", CTYPES_LIB / "run.py"], ids=lambda p: p.parent.name)
def test_run_script_end_to_end(script, tmp_path):
    out = subprocess.run([sys.executable, str(script), "--shape", "1000x520x264", "--out", str(tmp_path / "run")],
                         capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "profiler overhead" in out.stdout
    _analyzes(tmp_path / "run")


@pytest.mark.gpu
def test_cpp_only_end_to_end(tmp_path):
    out = subprocess.run(["bash", str(CPP_ONLY / "run.sh"), "--shape", "1000x520x264", "--out", str(tmp_path)],
                         capture_output=True, text=True, timeout=600,
                         env={**os.environ, "GEMMTRACE": f"{sys.executable} -m gemmtrace"})
    assert out.returncode == 0, out.stdout + out.stderr
    assert "max abs error" in out.stdout and "profiler overhead" in out.stdout
    _analyzes(tmp_path / "run")
