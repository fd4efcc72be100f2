"""Capture the trace of any CUDA kernel that records with gemmtrace's profiler header.

    import gemmtrace as gt
    with gt.capture(ctas=grid, regions_per_cta=3, capacity=4096, tags="my_tags.h") as prof:
        my_ext.launch(a, b, c, prof.buffer)          # any launcher: the struct, the fields or the tensor
    run = prof.run(name="my_gemm", shape=(M, N, K))  # decoded, device and versions filled in
    run.save("runs/my_gemm")                         # gemmtrace analyze | explain | report | export

The buffer is sized from the launch, as gemmtrace's own kernels size theirs: one region per
recording warp (CTAs x regions_per_cta), each a 64-byte header and `capacity` 16-byte records
(docs/trace-format.md). `gemmtrace run` takes the same path after its launch (runner.py).
"""
from __future__ import annotations

import ctypes
import datetime as _dt
import math
import platform
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

from . import tags as tagdefs
from .paths import GemmtraceError
from .trace import BufferLayout, Decoded, Run, decode, trust_warnings

RECORD_SLACK = 8  # records beyond a spans_per_tile estimate: setup, finish and a margin


class GemmtraceWarning(UserWarning):
    """Something a trace lacks (dropped records, unfinished regions): the numbers may mislead."""


class ProfileBufferStruct(ctypes.Structure):
    """gemmtrace::ProfileBuffer as ctypes (profiler.cuh): pass it by value to a kernel launcher."""

    _fields_ = [("data", ctypes.c_void_p), ("capacity", ctypes.c_uint32), ("regions_per_cta", ctypes.c_uint32)]


def _count_ctas(ctas: int | Sequence[int]) -> int:
    dims = [ctas] if isinstance(ctas, int) else list(ctas)
    if not dims or len(dims) > 3 or any(not isinstance(d, int) or d < 1 for d in dims):
        raise GemmtraceError(f"ctas must be a positive CTA count or a grid of up to three positive ints, not {ctas!r}.")
    return math.prod(dims)


def records_per_warp(*, capacity: int | None = None, spans_per_tile: int | None = None,
                     tiles: int | None = None, ctas: int = 1) -> int:
    """A region's capacity: given, or spans_per_tile x the most tiles one CTA does (+ slack)."""
    if capacity is not None:
        if spans_per_tile is not None:
            raise GemmtraceError("give either capacity or spans_per_tile, not both.")
        if not isinstance(capacity, int) or capacity < 1:
            raise GemmtraceError(f"capacity must be a positive number of records per warp, not {capacity!r}.")
        return capacity
    if spans_per_tile is None:
        raise GemmtraceError("size the buffer with capacity= (records per recording warp) or spans_per_tile= "
                             "(spans one warp records per tile, with tiles= for a persistent kernel).")
    if not isinstance(spans_per_tile, int) or spans_per_tile < 1:
        raise GemmtraceError(f"spans_per_tile must be a positive int, not {spans_per_tile!r}.")
    if tiles is not None and (not isinstance(tiles, int) or tiles < 1):
        raise GemmtraceError(f"tiles must be a positive int, not {tiles!r}.")
    tiles_per_cta = 1 if tiles is None else math.ceil(tiles / ctas)
    return spans_per_tile * tiles_per_cta + RECORD_SLACK


def _torch():
    try:
        import torch
    except ImportError:
        raise GemmtraceError("capturing a trace needs PyTorch with CUDA, and PyTorch is not installed.") from None
    if not torch.cuda.is_available():
        raise GemmtraceError("capturing a trace needs a CUDA GPU, and PyTorch sees none.")
    return torch


def launch_meta() -> dict:
    """Device, clocks and versions of the current process's GPU (the fields every run carries)."""
    from .runner import device_meta, versions_meta

    torch = _torch()
    return {"device": device_meta(torch), "versions": versions_meta(torch),
            "created": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"), "host": platform.node()}


@dataclass
class Capture:
    """A profiler buffer for one kernel's launches (see the module docstring).

    After `with capture(...) as prof:` the kernel receives `prof.buffer` (a ProfileBufferStruct), or
    `prof.data_ptr`, `prof.capacity`, `prof.regions_per_cta` separately, or the tensor `prof.tensor`.
    """

    ctas: int
    regions_per_cta: int
    capacity: int
    tags: tagdefs.Tags
    device: Any = None
    tensor: Any = None  # torch.int32 on the GPU, zeroed; allocated on entry
    _decoded: Decoded | None = None

    @property
    def layout(self) -> BufferLayout:
        return BufferLayout(self.ctas * self.regions_per_cta, self.capacity)

    @property
    def nbytes(self) -> int:
        return self.layout.nbytes

    def allocate(self) -> "Capture":
        torch = _torch()
        try:
            self.tensor = torch.zeros(self.layout.total_words, dtype=torch.int32,
                                      device=self.device if self.device is not None else "cuda")
        except torch.OutOfMemoryError:
            raise GemmtraceError(f"the profiler buffer ({self.nbytes / 2**20:.1f} MiB) does not fit in GPU memory; "
                                 "lower capacity or regions_per_cta.") from None
        self._decoded = None
        return self

    def _need(self):
        if self.tensor is None:
            raise GemmtraceError("the profiler buffer is not allocated yet: use it inside `with gemmtrace.capture(...)`.")
        return self.tensor

    @property
    def data_ptr(self) -> int:
        return int(self._need().data_ptr())

    @property
    def buffer(self) -> ProfileBufferStruct:
        return ProfileBufferStruct(self.data_ptr, self.capacity, self.regions_per_cta)

    def fields(self) -> tuple[int, int, int]:
        """(data pointer, capacity, regions_per_cta): ProfileBuffer's fields, for launchers that take ints."""
        return self.data_ptr, self.capacity, self.regions_per_cta

    def reset(self) -> None:
        """Clear the buffer for another launch (each decoded launch needs a clean buffer)."""
        self._need().zero_()
        self._decoded = None

    def __enter__(self) -> "Capture":
        return self.allocate()

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is None:
            _torch().cuda.synchronize()  # the launch is done: the buffer can be read

    def decode(self) -> Decoded:
        if self._decoded is None:
            torch = _torch()
            torch.cuda.synchronize()
            self._decoded = decode(self._need().cpu().numpy(), self.layout, self.tags)
        return self._decoded

    def run(self, name: str, shape: Sequence[int] | None = None, *, flops: float | None = None,
            timings: dict | None = None, meta: dict | None = None, warn: bool = True) -> Run:
        """The captured launch as a Run: spans plus name, shape, FLOPs, device, clocks, versions,
        the profiler's buffer and drop counts, the vocabulary, and `timings` (from gemmtrace.benchmark)."""
        if not name or not isinstance(name, str):
            raise GemmtraceError("a captured run needs a name (the kernel's), e.g. prof.run(name='my_gemm').")
        d = self.decode()
        run_meta: dict = {"kernel": name, "source": "capture"}
        if shape is not None:
            dims = list(shape)
            if len(dims) != 3 or any(not isinstance(x, int) or x < 1 for x in dims):
                raise GemmtraceError(f"shape must be three positive ints (M, N, K), not {shape!r}.")
            run_meta["shape"] = dict(zip("MNK", dims))
            flops = 2.0 * math.prod(dims) if flops is None else flops
        if flops is not None:
            run_meta["flops"] = float(flops)
        run_meta.update(launch_meta())
        run_meta["launch"] = {"grid_ctas": self.ctas}
        run_meta["timings"] = dict(timings or {})
        run_meta["profiler"] = d.profiler_meta(self.layout, self.regions_per_cta)
        run_meta["vocabulary"] = self.tags.to_meta()
        run_meta.update(meta or {})
        run = Run(d.spans, run_meta, d.regions)
        if warn:
            for msg in trust_warnings(name, run_meta["profiler"]):
                warnings.warn(GemmtraceWarning(msg), stacklevel=2)
        return run


def capture(ctas: int | Sequence[int], regions_per_cta: int, capacity: int | None = None, *,
            spans_per_tile: int | None = None, tiles: int | None = None,
            tags: "tagdefs.Tags | str | Path | None" = None, device: Any = None) -> Capture:
    """A profiler buffer sized from a launch: `ctas` (a count or the grid), the recording warps of
    each CTA (`regions_per_cta`, the slots a kernel passes to Recorder::init), and the records each
    warp may write (`capacity`, or `spans_per_tile` with the tile count of a persistent kernel).
    `tags`: the kernel's vocabulary (a Tags or its header; default gemmtrace's own tags.h).
    Use it as a context manager: the buffer is allocated (zeroed) on entry."""
    n = _count_ctas(ctas)
    if not isinstance(regions_per_cta, int) or regions_per_cta < 1:
        raise GemmtraceError(f"regions_per_cta must be a positive int (recording warps per CTA), not {regions_per_cta!r}.")
    cap = records_per_warp(capacity=capacity, spans_per_tile=spans_per_tile, tiles=tiles, ctas=n)
    return Capture(n, regions_per_cta, cap, tagdefs.resolve(tags), device)
