"""Every kernel compiles for its architecture with nvcc (no GPU needed), without spills, and the
registry's description of each kernel matches what its library's gt_plan() says."""
import re
import subprocess
import sys
import time

import pytest

from gemmtrace import registry
from gemmtrace.build import _flags, build, nvcc_path, parse_ptxas
from gemmtrace.launch import KernelLibrary

ALL = sorted(registry.KERNELS)


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    """A fresh cache, so the kernels really compile here rather than come from an earlier run."""
    import os

    d = tmp_path_factory.mktemp("gtcache")
    old = os.environ.get("GEMMTRACE_CACHE")
    os.environ["GEMMTRACE_CACHE"] = str(d)
    yield d
    if old is None:
        del os.environ["GEMMTRACE_CACHE"]
    else:
        os.environ["GEMMTRACE_CACHE"] = old


# The one known exception, bounded: v10's profiled 192x192/c2 build. Its consumers hold 144
# accumulators a thread (three m64n96 row groups) and the previous tile's 72 packed registers, and
# the recording tips the profiled build over the 232 registers a consumer may have: ptxas keeps the
# epilogue span's start and the recording lane's index in local memory (L1), loaded only where a
# record is stored (once a tile, and in a wait that is recorded), never on the k-loop's path that does
# not wait. 52 bytes while the stage's release tested lane 0 (which ptxas then recomputed from %tid
# every k-block instead), 232 and a 32-byte stack while the recorder held its count and a base cycle
# count in registers. Its plain build does not spill (bench/NOTES.md, "v10: 192x192 tiles", "A
# recorder without registers of its own" and "The stage's release by elect.sync").
KNOWN_SPILLS = {("v10", "gemm_persistent<profiled> 192x192/c2"): (52, 24)}  # (spill bytes, stack bytes) at most


def test_build_all_cli_compiles_every_kernel_without_spills(cache):
    seen = set()
    for arch in registry.ARCHS:
        kernels = registry.for_arch(arch)
        out = subprocess.run([sys.executable, "-m", "gemmtrace", "build", "--all", "--arch", arch],
                             capture_output=True, text=True, timeout=900)
        assert out.returncode == 0, out.stdout + out.stderr
        for k in kernels:
            r = build(k.name, arch)
            assert r.cached, f"{k.name} was not cached by the CLI build"
            assert r.resources, f"no ptxas report parsed for {k.name}"
            log = (r.library.parent / "ptxas.log").read_text()
            assert "C7515" not in log, f"ptxas serializes {k.name}'s wgmma pipeline:\n{log}"
            for res in r.resources:
                seen.add((k.name, res.function))
                assert not res.wgmma_serialized, f"ptxas serializes {k.name} {res.function}'s wgmma: {res.wgmma_serialized}"
                spills, stack = KNOWN_SPILLS.get((k.name, res.function), (0, 0))
                assert res.spills <= spills, f"{k.name} {res.function} spills {res.spills} bytes"
                assert res.stack_bytes <= stack, f"{k.name} {res.function} uses a {res.stack_bytes}-byte stack frame"
            assert k.name in out.stdout
    assert set(KNOWN_SPILLS) <= seen, f"an exception names no function: {set(KNOWN_SPILLS) - seen}"


def test_profiled_and_plain_instantiations_are_reported(cache):
    for name in ALL:
        r = build(name)
        kinds = {res.profiled for res in r.resources}
        assert kinds == {True, False}, f"{name}: expected a profiled and a plain kernel, got {r.resources}"


def test_cached_build_is_fast(cache):
    build("v1")
    t = time.perf_counter()
    r = build("v1")
    assert r.cached and time.perf_counter() - t < 1.0


@pytest.mark.parametrize("name", ALL)
def test_registry_matches_the_kernels_own_plan(cache, name):
    spec = registry.get(name)
    lib = KernelLibrary(build(name).library, name)
    p = lib.plan(lib.args(4096, 4096, 4096, num_sms=132))
    assert (p.tile_m, p.tile_n, p.tile_k) == spec.tile
    assert p.stages == spec.stages and p.block_threads == spec.threads and p.cluster == spec.cluster
    assert p.regions_per_cta >= 1 and p.records_per_region >= 1


@pytest.mark.parametrize("name", ALL)
def test_kernels_reject_bad_shapes_before_launch(cache, name):
    from gemmtrace import GemmtraceError

    lib = KernelLibrary(build(name).library, name)
    with pytest.raises(GemmtraceError, match="multiple of 8"):
        lib.plan(lib.args(256, 256, 100))
    with pytest.raises(GemmtraceError, match="positive"):
        lib.plan(lib.args(0, 256, 64))


ORDERED = [(k, s) for k in ALL if "snake" in registry.get(k).orders for s in registry.get(k).schedulers]


@pytest.mark.parametrize("name,sched", ORDERED)
def test_an_order_without_its_table_is_refused_before_launch(cache, name, sched):
    # A tile order reaches the kernel as a table the host builds; without it the kernel would walk
    # row order under a plan made for the order asked for. The refusal comes from the scheduler's
    # parameters, before any CUDA call, so it shows without a GPU. (A shape of whole waves: where
    # stream-K splits, the launch asks the runtime about residency first.)
    from gemmtrace import GemmtraceError

    lib = KernelLibrary(build(name).library, name)
    args = lib.args(1536, 2816, 4096, sched=sched, order="snake", num_sms=132)
    assert lib.plan(args).workspace_bytes == 0
    with pytest.raises(GemmtraceError, match=r"tile order snake needs its table"):
        lib.launch(args)


def _ptx_entries(ptx: str) -> dict[str, tuple[list[str], str]]:
    """entry name -> (parameter names, body)."""
    out = {}
    for m in re.finditer(r"\.entry\s+(\S+)\(([^)]*)\)(.*?)(?=\.entry|\Z)", ptx, re.S):
        params = re.findall(r"\.param\s+[^\n,]*?\s(\S+?)(?:\[\d+\])?\s*(?:,|$)", m.group(2), re.M)
        out[m.group(1)] = (params, m.group(3))
    return out


@pytest.mark.parametrize("name", ALL)
def test_profiler_off_leaves_no_trace_in_the_code(tmp_path, name):
    """The plain instantiation reads no timer (%globaltimer, %clock64) and never touches its ProfileBuffer."""
    spec = registry.get(name)
    flags = [f for f in _flags(spec, spec.arch, False) if f not in ("-shared", "-Xcompiler", "-fPIC", "-Xptxas", "-v")]
    ptx_path = tmp_path / "k.ptx"
    subprocess.run([nvcc_path(), *flags, "-ptx", str(spec.path), "-o", str(ptx_path)], check=True, capture_output=True)
    entries = _ptx_entries(ptx_path.read_text())
    # The kernel's first template argument is kProfile (later ones, e.g. a scheduler's, may be bools too).
    kind = {n: re.search(r"ILb([01])E", n).group(1) for n in entries if re.search(r"ILb([01])E", n)}
    plain = {n: e for n, e in entries.items() if kind.get(n) == "0"}
    profiled = {n: e for n, e in entries.items() if kind.get(n) == "1"}
    assert plain and profiled
    for n, (params, body) in plain.items():
        assert "%globaltimer" not in body and "%clock" not in body, n
        assert params[-1] not in body, f"{n} reads its profiler parameter {params[-1]}"
    for n, (params, body) in profiled.items():
        assert "%globaltimer" in body and "%clock64" in body and params[-1] in body, n


def test_ptxas_parser_reads_spills():
    log = (
        "ptxas info    : Compiling entry function '_Z7gemm_v9ILb1EEvv' for 'sm_90a'\n"
        "ptxas info    : Function properties for _Z7gemm_v9ILb1EEvv\n"
        "    16 bytes stack frame, 8 bytes spill stores, 12 bytes spill loads\n"
        "ptxas info    : Used 168 registers, used 1 barriers, 1024 bytes smem\n"
    )
    (r,) = parse_ptxas(log)
    assert (r.registers, r.smem_bytes, r.stack_bytes, r.spills, r.profiled) == (168, 1024, 16, 20, True)
    assert r.wgmma_serialized == ""


def test_ptxas_parser_names_a_family_tile():
    """A tile family's instantiations are told apart by their tile (v10 has 24 gemm_persistent entries)."""
    name = ("_ZN10persistent15gemm_persistentILb1ENS_4TileILi192ELi192ELi2ELi4ELi1EEEN8stream_k9SchedulerIS2_Li10ELb0ELb1EEEEEv"
            "14CUtensorMap_stS6_S6_NT1_6ParamsEiiiN9gemmtrace13ProfileBufferE")
    k2 = name.replace("ILb1ENS_4TileILi192ELi192ELi2ELi4ELi1EE", "ILb0ENS_4TileILi128ELi128ELi1ELi5ELi2EE")
    log = "".join(f"ptxas info    : Compiling entry function '{n}' for 'sm_90a'\n"
                  "    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads\n"
                  "ptxas info    : Used 168 registers, used 16 barriers\n" for n in (name, k2))
    assert [r.function for r in parse_ptxas(log)] == ["gemm_persistent<profiled> 192x192/c2", "gemm_persistent<plain> 128x128/k2"]


def test_ptxas_parser_names_serialized_wgmma(tmp_path, monkeypatch):
    """ptxas's C7514 names the function whose wgmma it serialized, wherever the line falls in the log
    (here before that function's own report); the parser gives the reason and `build` warns."""
    from gemmtrace.build import BuildResult
    from gemmtrace import build as build_mod

    other, mine = "_Z7gemm_v9ILb0EEvv", "_Z7gemm_v9ILb1EEvv"
    log = (
        f"ptxas info    : Compiling entry function '{other}' for 'sm_90a'\n"
        f"ptxas info    : Function properties for {other}\n"
        "    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads\n"
        "ptxas info    : Used 168 registers, used 1 barriers, 1024 bytes smem\n"
        "ptxas info    : (C7514) Potential Performance Loss: wgmma.mma_async instructions are serialized due to non "
        "wgmma instructions reading accumulator registers of  a wgmma between start and end of the pipeline stage in "
        f"the function '{mine}'\n"
        f"ptxas info    : Compiling entry function '{mine}' for 'sm_90a'\n"
        f"ptxas info    : Function properties for {mine}\n"
        "    128 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads\n"
        "ptxas info    : Used 168 registers, used 1 barriers, 1024 bytes smem\n"
    )
    plain, profiled = parse_ptxas(log)
    assert plain.wgmma_serialized == "" and profiled.stack_bytes == 128
    assert profiled.wgmma_serialized.startswith("non wgmma instructions reading accumulator registers")
    result = BuildResult("v9", "sm90a", False, tmp_path / "libkernel.so", True, 0.0, (plain, profiled))
    monkeypatch.setattr(build_mod, "build", lambda *a, **k: result)
    from typer.testing import CliRunner

    from gemmtrace.cli import app

    out = CliRunner().invoke(app, ["build", "--kernel", "v9"])
    assert out.exit_code == 0, out.output
    assert "ptxas serialized the wgmma of v9 gemm_v9<profiled> (non wgmma instructions reading" in " ".join(out.output.split())
    assert "gemm_v9<plain> (" not in out.output


@pytest.mark.parametrize("sites", [1, 3])
def test_staged_recorder_poll_is_one_bulk_copy_a_call_site(tmp_path, sites):
    """poll() keeps its copy loop rolled: one cp.async.bulk per call site (finish() adds none: it stores
    the last records and the header with plain global stores). Unrolled, each site took four copies
    and some 150 instructions, and that code, never run, reshaped the persistent kernels' loops
    (bench/NOTES.md)."""
    from gemmtrace.paths import INCLUDE_DIR

    polls = "\n".join(f"    if (i % {sites} == {j}) rec.poll();" for j in range(sites))
    src = tmp_path / "k.cu"
    src.write_text(f"""#include "gemmtrace/profiler.cuh"
__global__ void k(gemmtrace::ProfileBuffer prof, int n) {{
  extern __shared__ __align__(16) unsigned char smem[];
  gemmtrace::Recorder<true, 32> rec;
  rec.init(prof, 0, gemmtrace::Role::CONSUMER, static_cast<uint32_t>(__cvta_generic_to_shared(smem)));
  uint32_t t = rec.now();
  for (int i = 0; i < n; ++i) {{
    t = rec.record(gemmtrace::Tag::MMA, t, i);
{polls}
  }}
  rec.finish();
}}
""")
    ptx = tmp_path / "k.ptx"
    subprocess.run([nvcc_path(), "-arch=sm_90a", f"-I{INCLUDE_DIR}", "-ptx", str(src), "-o", str(ptx)], check=True,
                   capture_output=True)
    text = ptx.read_text()
    assert text.count("cp.async.bulk.global.shared") == sites
    assert text.count("st.global.v4.u32") >= 4 + 4  # finish(): the last records, four at a time, and the header
