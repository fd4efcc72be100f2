#!/usr/bin/env python3
"""Build the warp-specialized mma.sync GEMM as a torch extension, check it, time it and trace it.

    python examples/torch_extension/run.py --shape 4096            # or MxNxK, e.g. 4000x3000x1032
    python examples/torch_extension/run.py --shape 4096 --out runs/wsmma

Steps: JIT-build binding.cpp + wsmma_gemm.cu for this GPU (torch.utils.cpp_extension, cached after
the first build); check the plain and the profiled build against an fp32 torch reference on the
shape and on shapes that are not multiples of the 128x96 tile; time plain, profiled and torch.mm
with gemmtrace.benchmark; capture one profiled launch with gemmtrace.capture; save the run folder
and print its metrics (what `gemmtrace analyze` prints) and the profiler's overhead.
"""
from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

import gemmtrace as gt

HERE = Path(__file__).resolve().parent
TAGS = HERE / "wsmma_gemm_tags.h"  # the kernel's roles and tags, read by the kernel and by gemmtrace
NAME = "wsmma"
TILE = (128, 96, 32)  # BM, BN, BK (wsmma_gemm.h)
TOLERANCE = 1e-2  # relative Frobenius error against the fp32 reference
# Shapes that are not multiples of the tile: partial row and column blocks, a K tail, odd N.
EDGE_SHAPES = ((1, 1, 8), (200, 300, 264), (259, 97, 1000), (131, 1001, 40))


class ExampleError(Exception):
    """A failure the user can act on, printed as one sentence."""


def parse_shape(text: str) -> tuple[int, int, int]:
    parts = text.lower().replace(",", "x").split("x")
    try:
        dims = [int(p) for p in parts]
    except ValueError:
        raise ExampleError(f"--shape {text!r} is not N or MxNxK with positive integers.") from None
    dims = dims * 3 if len(dims) == 1 else dims
    if len(dims) != 3 or min(dims) < 1:
        raise ExampleError(f"--shape {text!r} is not N or MxNxK with positive integers.")
    if dims[2] % 8:
        raise ExampleError(f"K must be a multiple of 8 (rows of A and B are copied 16 bytes at a time); got K={dims[2]}.")
    return dims[0], dims[1], dims[2]


def cuda_torch():
    """torch with a GPU of compute capability 8.0 or newer, and that capability."""
    try:
        import torch
    except ImportError:
        raise ExampleError("this example needs PyTorch with CUDA, and PyTorch is not installed.") from None
    if not torch.cuda.is_available():
        raise ExampleError("no CUDA GPU is visible (torch.cuda.is_available() is False).")
    cap = torch.cuda.get_device_capability()
    if cap < (8, 0):
        name = torch.cuda.get_device_name()
        raise ExampleError(f"the kernel needs sm_80 or newer (cp.async, bf16 mma.sync); {name} is sm_{cap[0]}{cap[1]}.")
    return torch, cap


def arch_of(cap: tuple[int, int]) -> str:
    """The nvcc architecture for this GPU: the kernel uses nothing arch-specific, but Hopper and
    Blackwell datacenter parts are usually built as sm_90a / sm_100a, so the example does too."""
    arch = f"{cap[0]}{cap[1]}"
    return arch + "a" if arch in ("90", "100", "103") else arch


def build(cap: tuple[int, int], verbose: bool):
    from torch.utils import cpp_extension

    if not cpp_extension.is_ninja_available():
        raise ExampleError("torch's JIT extension builder needs ninja: pip install ninja.")
    arch = arch_of(cap)
    try:
        return cpp_extension.load(
            name=f"gemmtrace_example_wsmma_sm{arch}",  # one cached build per architecture
            sources=[str(HERE / "binding.cpp"), str(HERE / "wsmma_gemm.cu")],
            extra_include_paths=[str(gt.INCLUDE_DIR), str(HERE)],
            extra_cflags=["-O3"],
            # An -gencode flag here replaces torch's own choice of architectures.
            extra_cuda_cflags=["-O3", f"-gencode=arch=compute_{arch},code=sm_{arch}"],
            verbose=verbose,
        )
    except (RuntimeError, OSError) as e:
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise ExampleError(f"building the extension for sm_{arch} failed ({first}); rerun with --verbose to see "
                           "the compiler's output.") from None


def rel_error(torch, c, a, b) -> float:
    ref = a.float() @ b.float().t()
    return float((c.float() - ref).norm() / ref.norm().clamp_min(1e-30))


def check(torch, ext, shape: tuple[int, int, int]) -> tuple[float, float]:
    """Relative errors of the plain and the profiled build on fresh random normal inputs; the
    output starts as NaN, so an element the kernel never writes fails the check."""
    m, n, k = shape
    a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(n, k, device="cuda", dtype=torch.bfloat16)
    errors = []
    for profiled in (False, True):
        c = torch.full((m, n), float("nan"), device="cuda", dtype=torch.bfloat16)
        if profiled:
            ctas, regions, capacity = ext.plan(m, n, k)
            with gt.capture(ctas=ctas, regions_per_cta=regions, capacity=capacity, tags=TAGS) as prof:
                ext.gemm(a, b, c, *prof.fields())
        else:
            ext.gemm(a, b, c)
        err = rel_error(torch, c, a, b)
        if not err < TOLERANCE:  # also catches NaN
            build_name = "profiled" if profiled else "plain"
            raise ExampleError(f"the {build_name} build is wrong at {m}x{n}x{k}: relative error {err:.3g} "
                               f"(tolerance {TOLERANCE:g}).")
        errors.append(err)
    return errors[0], errors[1]


def input_sets(torch, shape: tuple[int, int, int]) -> list:
    """Several (A, B, C) sets to rotate through while timing, so that a launch does not find its
    operands in L2 from the launch before (about 200 MB in all, 1 to 8 sets)."""
    m, n, k = shape
    count = max(1, min(8, math.ceil(200e6 / (2 * (m * k + n * k + m * n)))))
    return [(torch.randn(m, k, device="cuda", dtype=torch.bfloat16),
             torch.randn(n, k, device="cuda", dtype=torch.bfloat16),
             torch.empty(m, n, device="cuda", dtype=torch.bfloat16)) for _ in range(count)]


def ms(timings: dict, key: str) -> float | None:
    v = timings.get(key)
    if isinstance(v, dict):
        v = v.get("median")
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--shape", default="4096", help="N (square) or MxNxK; K a multiple of 8 (default 4096)")
    ap.add_argument("--out", default="runs/torch_extension", help="run folder to write (default runs/torch_extension)")
    ap.add_argument("--verbose", action="store_true", help="show the extension's build")
    args = ap.parse_args(argv)
    try:
        shape = parse_shape(args.shape)
        torch, cap = cuda_torch()
        torch.backends.cuda.matmul.allow_tf32 = False  # the reference is plain fp32
        ext = build(cap, args.verbose)
        m, n, k = shape

        # 1. Correct on the shape and on shapes that are not multiples of the tile.
        for s in (shape, *EDGE_SHAPES):
            err_plain, err_prof = check(torch, ext, s)
            print(f"check {s[0]}x{s[1]}x{s[2]}: relative error plain {err_plain:.2e}, profiled {err_prof:.2e}")
            if s == shape:
                errors = (err_plain, err_prof)

        # 2. Time plain vs profiled vs torch.mm, then 3. capture one profiled launch.
        sets = input_sets(torch, shape)
        ctas, regions, capacity = ext.plan(m, n, k)
        with gt.capture(ctas=ctas, regions_per_cta=regions, capacity=capacity, tags=TAGS) as prof:
            fields = prof.fields()  # (data pointer, capacity, regions per CTA): ProfileBuffer's fields

            def reference(i):  # cuBLAS, through torch
                a, b, c = sets[i % len(sets)]
                torch.mm(a, b.t(), out=c)

            # Each callable enqueues one launch on torch's current stream; i rotates the input sets.
            timings = gt.benchmark(
                plain=lambda i: ext.gemm(*sets[i % len(sets)]),
                profiled=lambda i: ext.gemm(*sets[i % len(sets)], *fields),
                reference=reference,
                reference_name="torch.mm",
                flops=2 * m * n * k,
            )
            prof.reset()  # the timed launches wrote into the buffer too: trace one launch alone
            ext.gemm(*sets[0], *fields)
        arch = arch_of(cap)
        run = prof.run(name=NAME, shape=shape, timings=timings, meta={
            "arch": f"sm_{arch}",
            "idea": "warp-specialized mma.sync: a cp.async loader warp, four math warps, named barriers",
            "launch": {"grid_ctas": ctas, "block_threads": 160, "smem_bytes": 5 * (128 + 96) * 32 * 2, "cluster": 1,
                       "tile": list(TILE), "stages": 5, "tiles": ctas},
            "check": {"rel_error_plain": errors[0], "rel_error_profiled": errors[1], "tolerance": TOLERANCE,
                      "reference": "torch fp32 matmul"},
        })
        out = run.save(args.out)

        # 4. What `gemmtrace analyze OUT` prints, and the overhead.
        from rich.console import Console

        from gemmtrace.analysis import compute_metrics
        from gemmtrace.analysis.tables import metrics_table

        Console().print(metrics_table(compute_metrics(run)))
        plain, profiled, ref = ms(timings, "kernel_ms"), ms(timings, "profiled_ms"), ms(timings, "reference_ms")
        if plain and profiled:
            line = f"plain {plain:.4f} ms, profiled {profiled:.4f} ms: profiler overhead {100 * (profiled / plain - 1):+.2f} %"
            if ref:
                line += f"; torch.mm {ref:.4f} ms (wsmma runs at {100 * ref / plain:.1f} % of its speed)"
            print(line)
        print(f"saved {out}: gemmtrace analyze {out} | gemmtrace explain {out} | gemmtrace export {out}")
        return 0
    except (ExampleError, gt.GemmtraceError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    except Exception as e:  # out of GPU memory: one sentence too
        if type(e).__name__ == "OutOfMemoryError":
            print(f"error: the shape {args.shape} does not fit in GPU memory.", file=sys.stderr)
            return 1
        raise


if __name__ == "__main__":
    sys.exit(main())
