"""A regular install works like a checkout: build the wheel, install it into a fresh venv, and run
`gemmtrace includes`, `build --kernel v1`, `analyze --sample` and an import from outside the checkout."""
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def wheel_venv(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("wheel")
    out = subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation",
                          "-w", str(tmp / "dist"), str(ROOT)], capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr
    wheel = next((tmp / "dist").glob("gemmtrace-*.whl"))
    # The venv sees this interpreter's packages (numpy, pandas, typer, ...) but gets gemmtrace only
    # from the wheel: its own site-packages come first on sys.path.
    subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", str(tmp / "venv")], check=True, timeout=300)
    py = tmp / "venv" / "bin" / "python"
    out = subprocess.run([str(py), "-m", "pip", "install", "-q", "--no-deps", "--no-index", str(wheel)],
                         capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr
    return wheel, py, tmp


def _gt(py, *args, cwd, env=None):
    return subprocess.run([str(py), "-m", "gemmtrace", *map(str, args)], capture_output=True, text=True, timeout=600,
                          cwd=cwd, env={**os.environ, **(env or {})})


def test_wheel_ships_the_header_kernels_and_samples(wheel_venv):
    wheel, _, _ = wheel_venv
    names = set(zipfile.ZipFile(wheel).namelist())
    for required in ("gemmtrace/include/gemmtrace/profiler.cuh", "gemmtrace/include/gemmtrace/tags.h",
                     "gemmtrace/include/gemmtrace/capture_host.h", "gemmtrace/kernels/sm90/v1_tma_wgmma.cu",
                     "gemmtrace/kernels/sm90/persistent_gemm.cuh", "gemmtrace/samples/v8-static/meta.json"):
        assert required in names, f"{required} is not in {wheel.name}"


def test_installed_package_is_the_wheel_not_the_checkout(wheel_venv):
    _, py, tmp = wheel_venv
    out = subprocess.run([str(py), "-c", "import gemmtrace; print(gemmtrace.__file__)"], capture_output=True, text=True,
                         cwd=tmp, timeout=120)
    assert out.returncode == 0, out.stderr
    assert str(tmp / "venv") in out.stdout and str(ROOT) not in out.stdout, out.stdout


def test_includes_build_and_analyze_from_the_wheel(wheel_venv):
    _, py, tmp = wheel_venv
    out = _gt(py, "includes", cwd=tmp)
    assert out.returncode == 0, out.stderr
    flag = out.stdout.strip()
    assert flag.startswith("-I") and str(tmp / "venv") in flag
    assert (Path(flag[2:]) / "gemmtrace" / "profiler.cuh").is_file()
    out = _gt(py, "build", "--kernel", "v1", cwd=tmp, env={"GEMMTRACE_CACHE": str(tmp / "cache")})
    assert out.returncode == 0, out.stdout + out.stderr
    assert "gemm_v1<profiled>" in out.stdout and "gemm_v1<plain>" in out.stdout
    out = _gt(py, "analyze", "--sample", "v8-static", cwd=tmp)
    assert out.returncode == 0, out.stderr
    assert "tensor-core busy" in out.stdout


def test_user_kernel_compiles_against_the_installed_header(wheel_venv):
    """nvcc $(gemmtrace includes) -c my_kernel.cu, as the README says, for a kernel with its own tags."""
    _, py, tmp = wheel_venv
    flag = _gt(py, "includes", cwd=tmp).stdout.strip()
    (tmp / "my_tags.h").write_text(
        '#pragma once\n#define MY_ROLES(X) \\\n  X(MATH, 0, "math")\n'
        '#define MY_TAGS(X) \\\n  X(WORK, 1, "work", "mma")\n')
    (tmp / "my_kernel.cu").write_text(
        '#include "gemmtrace/profiler.cuh"\n#include "my_tags.h"\n'
        "namespace my { GEMMTRACE_DEFINE_VOCABULARY(MY_ROLES, MY_TAGS); }\n"
        "__global__ void k(gemmtrace::ProfileBuffer prof) {\n"
        "  gemmtrace::Recorder<true> rec;\n  rec.init(prof, 0, my::Role::MATH);\n"
        "  uint32_t t = rec.now();\n  rec.record(my::Tag::WORK, t, blockIdx.x);\n  rec.finish();\n}\n")
    from gemmtrace.build import nvcc_path

    out = subprocess.run([nvcc_path(), "-gencode=arch=compute_80,code=sm_80", flag, f"-I{tmp}", "-c", "my_kernel.cu",
                          "-o", "my_kernel.o"], capture_output=True, text=True, cwd=tmp, timeout=300)
    assert out.returncode == 0, out.stderr
