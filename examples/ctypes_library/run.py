#!/usr/bin/env python3
"""Build the warp-specialized Hopper GEMM as a plain .so, launch it through ctypes, check it, time
it and trace it with its own tag header.

    python examples/ctypes_library/run.py --shape 4096            # or MxNxK, e.g. 4000x3000x1032
    python examples/ctypes_library/run.py --shape 4096 --out runs/ws_gemm

Steps: build libws_gemm.so with nvcc (build.py, cached); check the plain and the profiled build
against an fp32 torch reference on the shape and on shapes that are not multiples of the 128x128
tile; time plain, profiled and torch.mm with gemmtrace.benchmark; capture one profiled launch with
gemmtrace.capture(tags="ws_gemm_tags.h"); save the run folder and print its metrics (what
`gemmtrace analyze` prints) and the profiler's overhead. torch only allocates the operands and
provides the reference: the kernel sees raw pointers.
"""
from __future__ import annotations

import argparse
import ctypes
import math
import sys
from pathlib import Path

import gemmtrace as gt

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from build import BuildError, build  # noqa: E402  (build.py beside this file)

TAGS = HERE / "ws_gemm_tags.h"  # the kernel's roles and tags, read by the kernel and by gemmtrace
NAME = "ws_gemm"
TILE = (128, 128, 64)  # BM, BN, BK (ws_gemm.cu)
TOLERANCE = 1e-2  # relative Frobenius error against the fp32 reference
# Shapes that are not multiples of the tile: partial row and column blocks, a K tail, odd N.
EDGE_SHAPES = ((1, 1, 8), (200, 300, 264), (259, 97, 1000), (131, 1001, 40))


class ExampleError(Exception):
    """A failure the user can act on, printed as one sentence."""


class WsGemm:
    """ctypes bindings of libws_gemm.so: ws_gemm_plan and ws_gemm_launch (see ws_gemm.cu)."""

    def __init__(self, path: Path):
        self.lib = ctypes.CDLL(str(path))
        i64, i32, u32, vp = ctypes.c_int64, ctypes.c_int32, ctypes.c_uint32, ctypes.c_void_p
        self.lib.ws_gemm_plan.argtypes = [i64, i64, i64, ctypes.POINTER(i64), ctypes.POINTER(i32), ctypes.POINTER(i32),
                                          ctypes.c_char_p, ctypes.c_int]
        self.lib.ws_gemm_launch.argtypes = [vp, vp, vp, i64, i64, i64, vp, vp, u32, u32, ctypes.c_char_p, ctypes.c_int]
        self.lib.ws_gemm_plan.restype = self.lib.ws_gemm_launch.restype = ctypes.c_int
        self.err = ctypes.create_string_buffer(256)

    def _fail(self):
        raise ExampleError(self.err.value.decode())

    def plan(self, m: int, n: int, k: int) -> tuple[int, int, int]:
        """(CTAs, regions per CTA, records per region): what gemmtrace.capture needs."""
        ctas, regions, capacity = ctypes.c_int64(), ctypes.c_int32(), ctypes.c_int32()
        if self.lib.ws_gemm_plan(m, n, k, ctypes.byref(ctas), ctypes.byref(regions), ctypes.byref(capacity),
                                 self.err, len(self.err)):
            self._fail()
        return ctas.value, regions.value, capacity.value

    def __call__(self, a, b, c, prof_data: int = 0, prof_capacity: int = 0, prof_regions_per_cta: int = 0) -> None:
        """C = A·Bᵀ on torch's current stream; with a profiler buffer's fields, the profiled build."""
        import torch

        m, k = a.shape
        n = b.shape[0]
        stream = torch.cuda.current_stream().cuda_stream
        if self.lib.ws_gemm_launch(a.data_ptr(), b.data_ptr(), c.data_ptr(), m, n, k, stream, prof_data or None,
                                   prof_capacity, prof_regions_per_cta, self.err, len(self.err)):
            self._fail()


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
        raise ExampleError(f"K must be a multiple of 8 (TMA needs 16-byte row strides); got K={dims[2]}.")
    return dims[0], dims[1], dims[2]


def hopper_torch():
    """torch with an sm_90 GPU (the library holds sm_90a code: TMA, wgmma)."""
    try:
        import torch
    except ImportError:
        raise ExampleError("this example needs PyTorch with CUDA (for the operands and the reference), "
                           "and PyTorch is not installed.") from None
    if not torch.cuda.is_available():
        raise ExampleError("no CUDA GPU is visible (torch.cuda.is_available() is False).")
    cap = torch.cuda.get_device_capability()
    if cap != (9, 0):
        name = torch.cuda.get_device_name()
        raise ExampleError(f"the kernel is built for sm_90a (Hopper: TMA and wgmma); {name} is sm_{cap[0]}{cap[1]}.")
    return torch


def rel_error(torch, c, a, b) -> float:
    ref = a.float() @ b.float().t()
    return float((c.float() - ref).norm() / ref.norm().clamp_min(1e-30))


def check(torch, gemm: WsGemm, shape: tuple[int, int, int]) -> tuple[float, float]:
    """Relative errors of the plain and the profiled build on fresh random normal inputs; the
    output starts as NaN, so an element the kernel never writes fails the check."""
    m, n, k = shape
    a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(n, k, device="cuda", dtype=torch.bfloat16)
    errors = []
    for profiled in (False, True):
        c = torch.full((m, n), float("nan"), device="cuda", dtype=torch.bfloat16)
        if profiled:
            ctas, regions, capacity = gemm.plan(m, n, k)
            with gt.capture(ctas=ctas, regions_per_cta=regions, capacity=capacity, tags=TAGS) as prof:
                gemm(a, b, c, *prof.fields())
        else:
            gemm(a, b, c)
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
    ap.add_argument("--out", default="runs/ctypes_library", help="run folder to write (default runs/ctypes_library)")
    args = ap.parse_args(argv)
    try:
        shape = parse_shape(args.shape)
        torch = hopper_torch()
        torch.backends.cuda.matmul.allow_tf32 = False  # the reference is plain fp32
        gemm = WsGemm(build())
        m, n, k = shape

        # 1. Correct on the shape and on shapes that are not multiples of the tile.
        for s in (shape, *EDGE_SHAPES):
            err_plain, err_prof = check(torch, gemm, s)
            print(f"check {s[0]}x{s[1]}x{s[2]}: relative error plain {err_plain:.2e}, profiled {err_prof:.2e}")
            if s == shape:
                errors = (err_plain, err_prof)

        # 2. Time plain vs profiled vs torch.mm, then 3. capture one profiled launch.
        sets = input_sets(torch, shape)
        ctas, regions, capacity = gemm.plan(m, n, k)
        with gt.capture(ctas=ctas, regions_per_cta=regions, capacity=capacity, tags=TAGS) as prof:
            fields = prof.fields()  # (data pointer, capacity, regions per CTA): ProfileBuffer's fields

            def reference(i):  # cuBLAS, through torch
                a, b, c = sets[i % len(sets)]
                torch.mm(a, b.t(), out=c)

            # Each callable enqueues one launch on torch's current stream; i rotates the input sets.
            timings = gt.benchmark(
                plain=lambda i: gemm(*sets[i % len(sets)]),
                profiled=lambda i: gemm(*sets[i % len(sets)], *fields),
                reference=reference,
                reference_name="torch.mm",
                flops=2 * m * n * k,
            )
            prof.reset()  # the timed launches wrote into the buffer too: trace one launch alone
            gemm(*sets[0], *fields)
        run = prof.run(name=NAME, shape=shape, timings=timings, meta={
            "arch": "sm_90a",
            "idea": "warp-specialized TMA + wgmma: one producer lane, one math warpgroup, mbarrier full/empty ring",
            "launch": {"grid_ctas": ctas, "block_threads": 256, "smem_bytes": 1024 + 4 * 2 * 128 * 64 * 2 + 64,
                       "cluster": 1, "tile": list(TILE), "stages": 4, "tiles": ctas},
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
                line += f"; torch.mm {ref:.4f} ms (ws_gemm runs at {100 * ref / plain:.1f} % of its speed)"
            print(line)
        print(f"saved {out}: gemmtrace analyze {out} | gemmtrace explain {out} | gemmtrace export {out}")
        return 0
    except BuildError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    except (ExampleError, gt.GemmtraceError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    except Exception as e:  # out of GPU memory: one sentence too
        if type(e).__name__ == "OutOfMemoryError":
            print(f"error: the shape {args.shape} does not fit in GPU memory.", file=sys.stderr)
            return 1
        raise


if __name__ == "__main__":
    sys.exit(main())
