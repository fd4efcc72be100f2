#!/usr/bin/env python3
"""Build libws_gemm.so from ws_gemm.cu with nvcc (no GPU needed) and print ptxas's report.

    python examples/ctypes_library/build.py

The command it runs (gemmtrace's headers come from the installed package, `gemmtrace includes`):

    nvcc -O3 -std=c++17 -shared -Xcompiler -fPIC -gencode=arch=compute_90a,code=sm_90a \\
         $(gemmtrace includes) -I examples/ctypes_library -Xptxas -v \\
         examples/ctypes_library/ws_gemm.cu -o libws_gemm.so

The library lands in build/ beside this file, named by a hash of its sources, gemmtrace's headers,
the flags and the nvcc version, so a changed source rebuilds and an unchanged one does not.
"""
from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import gemmtrace as gt

HERE = Path(__file__).resolve().parent
SOURCE = HERE / "ws_gemm.cu"
TAGS = HERE / "ws_gemm_tags.h"
ARCH = "90a"
FLAGS = ("-O3", "-std=c++17", "-shared", "-Xcompiler", "-fPIC", f"-gencode=arch=compute_{ARCH},code=sm_{ARCH}",
         "-Xptxas", "-v")


class BuildError(Exception):
    """The build failed; the message is one sentence (plus the compiler's output where it has one)."""


def nvcc() -> str:
    """$NVCC, $CUDA_HOME/bin/nvcc, nvcc on the PATH, or the toolkit's usual place."""
    for cand in (os.environ.get("NVCC"), os.environ.get("CUDA_HOME") and f"{os.environ['CUDA_HOME']}/bin/nvcc",
                 shutil.which("nvcc"), "/usr/local/cuda/bin/nvcc"):
        if cand and Path(cand).is_file():
            return cand
    raise BuildError("nvcc was not found: install the CUDA toolkit (12.8 or newer) or set NVCC to its path.")


def command(compiler: str, output: Path) -> list[str]:
    return [compiler, *FLAGS, f"-I{gt.INCLUDE_DIR}", f"-I{HERE}", str(SOURCE), "-o", str(output)]


def _key(compiler: str) -> str:
    h = hashlib.sha256()
    headers = sorted((Path(gt.INCLUDE_DIR) / "gemmtrace").glob("*"))
    for f in (SOURCE, TAGS, *headers):
        h.update(f.name.encode() + b"\0" + f.read_bytes())
    h.update("\0".join(FLAGS).encode())
    h.update(subprocess.run([compiler, "--version"], capture_output=True, text=True).stdout.encode())
    return h.hexdigest()[:16]


def build(out_dir: Path | None = None, force: bool = False) -> Path:
    """The library's path, compiling it first unless an identical build is already there. ptxas's
    report is kept beside it (same name, .log)."""
    compiler = nvcc()
    out_dir = Path(out_dir) if out_dir is not None else HERE / "build"
    lib = out_dir / f"libws_gemm-{_key(compiler)}.so"
    if lib.is_file() and not force:
        return lib
    out_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=out_dir) as tmp:
        tmp_lib = Path(tmp) / lib.name
        proc = subprocess.run(command(compiler, tmp_lib), capture_output=True, text=True)
        if proc.returncode != 0:
            raise BuildError(f"nvcc failed to compile {SOURCE.name}:\n{(proc.stderr + proc.stdout).strip()}")
        lib.with_suffix(".log").write_text(proc.stderr + proc.stdout)
        os.replace(tmp_lib, lib)  # atomic: a concurrent reader never sees half a library
    return lib


def resources(lib: Path) -> list[tuple[str, int, int]]:
    """(kernel, registers, spill bytes) per kernel, from the ptxas report kept beside the library."""
    out, name, spills = [], None, 0
    for line in lib.with_suffix(".log").read_text().splitlines():
        m = re.search(r"Compiling entry function '(\w+)'", line)
        if m:
            name = "ws_gemm_kernel<true>" if "ILb1E" in m.group(1) else "ws_gemm_kernel<false>"
        m = re.search(r"(\d+) bytes spill stores, (\d+) bytes spill loads", line)
        if m and name:
            spills = int(m.group(1)) + int(m.group(2))
        m = re.search(r"Used (\d+) registers", line)
        if m and name:
            out.append((name, int(m.group(1)), spills))
            name = None
    return out


def main() -> int:
    try:
        lib = build(force="--force" in sys.argv[1:])
    except BuildError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    print(lib)
    for name, regs, spills in resources(lib):
        print(f"  {name}: {regs} registers, {spills} bytes of spills")
    return 0


if __name__ == "__main__":
    sys.exit(main())
