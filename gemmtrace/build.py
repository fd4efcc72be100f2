"""Compile a kernel into a shared library with nvcc, cached by source hash, flags and architecture.

Each kernel file builds into one .so holding both its profiled and unprofiled instantiations and the
C entry points gt_plan/gt_launch (see gemmtrace/include/gemmtrace/host.cuh). Nothing links -lcuda: driver entry
points come through the runtime, so building needs no GPU and no driver.
"""
from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from . import registry
from .paths import INCLUDE_DIR, GemmtraceError

BASE_FLAGS = ("-O3", "-std=c++17", "-shared", "-Xcompiler", "-fPIC", "-Xptxas", "-v", "--expt-relaxed-constexpr")
DEBUG_FLAGS = ("-DGEMMTRACE_DEBUG", "-lineinfo")


@dataclass(frozen=True)
class KernelResources:
    """ptxas's report for one __global__ function of a library."""

    function: str
    profiled: bool | None  # None when the function is not a profiler-templated kernel
    registers: int
    smem_bytes: int
    stack_bytes: int
    spill_store_bytes: int
    spill_load_bytes: int
    # ptxas's reason where it serialized the function's wgmma (warnings C7514, C7515, ...), else "":
    # the tensor cores then wait for each wgmma before the next, whatever the source says.
    wgmma_serialized: str = ""

    @property
    def spills(self) -> int:
        return self.spill_store_bytes + self.spill_load_bytes


@dataclass(frozen=True)
class BuildResult:
    kernel: str
    arch: str
    debug: bool
    library: Path
    cached: bool
    seconds: float
    resources: tuple[KernelResources, ...]


def cache_dir() -> Path:
    d = os.environ.get("GEMMTRACE_CACHE")
    return Path(d) if d else Path.home() / ".cache" / "gemmtrace"


def nvcc_path() -> str:
    nvcc = os.environ.get("GEMMTRACE_NVCC") or shutil.which("nvcc")
    if not nvcc:
        for cand in ("/usr/local/cuda/bin/nvcc", "/usr/local/bin/nvcc"):
            if Path(cand).exists():
                return cand
        raise GemmtraceError("nvcc was not found: install the CUDA toolkit (12.8 or newer) or set GEMMTRACE_NVCC.")
    return nvcc


_NVCC_VERSION: dict[str, str] = {}


def nvcc_version(nvcc: str | None = None) -> str:
    nvcc = nvcc or nvcc_path()
    if nvcc not in _NVCC_VERSION:
        out = subprocess.run([nvcc, "--version"], capture_output=True, text=True).stdout
        m = re.search(r"release ([\d.]+), (V[\d.]+)", out)
        _NVCC_VERSION[nvcc] = m.group(2) if m else out.strip().splitlines()[-1]
    return _NVCC_VERSION[nvcc]


def _flags(spec: registry.KernelSpec, arch: str, debug: bool) -> list[str]:
    gencode = registry.ARCHS[arch][0]
    return [f"-gencode={gencode}", *BASE_FLAGS, f"-I{INCLUDE_DIR}", *spec.extra_flags, *(DEBUG_FLAGS if debug else ())]


def _source_hash(spec: registry.KernelSpec, flags: list[str], nvcc_ver: str) -> str:
    h = hashlib.sha256()
    h.update(spec.path.read_bytes())
    # The shared headers, and the kernel bodies its directory shares (gemmtrace/kernels/sm90/*.cuh).
    for header in sorted((INCLUDE_DIR / "gemmtrace").glob("*")) + sorted(spec.path.parent.glob("*.cuh")):
        h.update(header.name.encode())
        h.update(header.read_bytes())
    # The include flag names this checkout's path: leave it out, so that a cache built in one checkout
    # is valid in another (a copy of the repo on another machine with the same nvcc).
    h.update("\0".join(f.replace(str(INCLUDE_DIR), "<include>") for f in flags).encode())
    h.update(nvcc_ver.encode())
    return h.hexdigest()[:20]


_ENTRY_RE = re.compile(r"Compiling entry function '([^']+)' for '(sm_\w+)'")
_STACK_RE = re.compile(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")
_REGS_RE = re.compile(r"Used (\d+) registers")
_SMEM_RE = re.compile(r"(\d+) bytes smem")
_TILE_RE = re.compile(r"TileILi(\d+)ELi(\d+)ELi(\d+)ELi(\d+)ELi(\d+)E")
_SERIALIZED_RE = re.compile(r"wgmma\.mma_async instructions are serialized due to (.+?) in the function '([^']+)'")


def parse_ptxas(log: str) -> tuple[KernelResources, ...]:
    """Read registers, shared memory, stack, spills and serialized wgmma per entry function from
    `-Xptxas -v` output."""
    out = []
    serialized = {name: " ".join(reason.split()) for reason, name in _SERIALIZED_RE.findall(log)}
    blocks = _ENTRY_RE.split(log)
    # split gives [pre, name1, arch1, body1, name2, arch2, body2, ...]
    for i in range(1, len(blocks) - 2, 3):
        name, body = blocks[i], blocks[i + 2]
        stack, regs, smem = _STACK_RE.search(body), _REGS_RE.search(body), _SMEM_RE.search(body)
        if not (stack and regs):
            continue
        profiled = None
        m = re.search(r"ILb([01])E", name)
        if m:
            profiled = m.group(1) == "1"
        short = re.search(r"(gemm_\w+?)I", name) or re.search(r"(gemm_\w+)", name)
        # A tile family's instantiations (persistent::Tile<BM, BN, cluster, stages, k split>) are told
        # apart by their tile, named as `gemmtrace list` names it.
        tile = _TILE_RE.search(name)
        tile_label = ""
        if tile:
            bm, bn, cluster, _stages, split_k = map(int, tile.groups())
            tile_label = " " + registry.tile_name(bm, bn, cluster, split_k)
        out.append(
            KernelResources(
                function=(short.group(1) if short else name) + ("" if profiled is None else f"<{'profiled' if profiled else 'plain'}>")
                + tile_label,
                profiled=profiled,
                registers=int(regs.group(1)),
                smem_bytes=int(smem.group(1)) if smem else 0,
                stack_bytes=int(stack.group(1)),
                spill_store_bytes=int(stack.group(2)),
                spill_load_bytes=int(stack.group(3)),
                wgmma_serialized=serialized.get(name, ""),
            )
        )
    return tuple(out)


def build(kernel: str, arch: str | None = None, debug: bool = False, force: bool = False) -> BuildResult:
    """Build (or fetch from the cache) the shared library of `kernel` for `arch`."""
    spec = registry.get(kernel)
    arch = arch or spec.arch
    if arch not in registry.ARCHS:
        raise GemmtraceError(f"unknown architecture {arch!r}; choose one of {', '.join(registry.ARCHS)}.")
    if arch != spec.arch:
        raise GemmtraceError(f"kernel {kernel} is written for {spec.arch}, not {arch}.")
    if not spec.path.is_file():
        raise GemmtraceError(f"the source of kernel {kernel} ({spec.path}) is missing.")
    nvcc = nvcc_path()
    flags = _flags(spec, arch, debug)
    key = _source_hash(spec, flags, nvcc_version(nvcc))
    folder = cache_dir() / f"{kernel}-{arch}{'-debug' if debug else ''}-{key}"
    lib, log_path = folder / "libkernel.so", folder / "ptxas.log"
    t0 = time.perf_counter()
    if lib.is_file() and log_path.is_file() and not force:
        return BuildResult(kernel, arch, debug, lib, True, time.perf_counter() - t0, parse_ptxas(log_path.read_text()))
    folder.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=folder) as tmp:
        tmp_lib = Path(tmp) / "libkernel.so"
        cmd = [nvcc, *flags, str(spec.path), "-o", str(tmp_lib)]
        proc = subprocess.run(cmd, capture_output=True, text=True)
        if proc.returncode != 0:
            errors = "\n".join(l for l in (proc.stderr + proc.stdout).splitlines() if "ptxas info" not in l and "Function properties" not in l and "bytes stack frame" not in l)
            raise GemmtraceError(f"nvcc failed to compile kernel {kernel} ({spec.source}) for {arch}:\n{errors.strip()}")
        log = proc.stderr + proc.stdout
        log_path.write_text(log)
        os.replace(tmp_lib, lib)  # atomic: a concurrent reader never sees half a library
    return BuildResult(kernel, arch, debug, lib, False, time.perf_counter() - t0, parse_ptxas(log))


# Support libraries: CUDA sources inside the package that are not registered kernels (the timing
# harness's stream hold). Built for compute_80 as cubin and PTX, so they run on every GPU from sm_80
# (newer ones JIT the PTX), plus sm_90a; cached like the kernels, by source, flags and nvcc version.
SUPPORT_GENCODES = ("arch=compute_80,code=[sm_80,compute_80]", "arch=compute_90a,code=sm_90a")
SUPPORT_FLAGS = ("-O3", "-std=c++17", "-shared", "-Xcompiler", "-fPIC")


def build_support(name: str, source: Path, gencodes: tuple[str, ...] = SUPPORT_GENCODES, force: bool = False) -> Path:
    """Build (or fetch from the cache) the shared library `lib<name>.so` of one support source."""
    source = Path(source)
    if not source.is_file():
        raise GemmtraceError(f"the source of the {name} support library ({source}) is missing.")
    nvcc = nvcc_path()
    flags = [*(f"-gencode={g}" for g in gencodes), *SUPPORT_FLAGS]
    h = hashlib.sha256(source.read_bytes())
    h.update("\0".join(flags).encode())
    h.update(nvcc_version(nvcc).encode())
    folder = cache_dir() / f"support-{name}-{h.hexdigest()[:20]}"
    lib = folder / f"lib{name}.so"
    if lib.is_file() and not force:
        return lib
    folder.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=folder) as tmp:
        tmp_lib = Path(tmp) / lib.name
        proc = subprocess.run([nvcc, *flags, str(source), "-o", str(tmp_lib)], capture_output=True, text=True)
        if proc.returncode != 0:
            raise GemmtraceError(f"nvcc failed to compile the {name} support library ({source.name}):\n{(proc.stderr + proc.stdout).strip()}")
        os.replace(tmp_lib, lib)  # atomic: a concurrent reader never sees half a library
    return lib
