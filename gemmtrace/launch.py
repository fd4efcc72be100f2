"""Load a built kernel library with ctypes and call its C entry points (gt_plan, gt_launch).

The argument structs mirror gemmtrace/include/gemmtrace/host.cuh; `KernelLibrary` checks their sizes against
the library's own gt_abi_sizes() on load, so a mismatch is an error, not memory corruption.
"""
from __future__ import annotations

import ctypes
from dataclasses import dataclass
from pathlib import Path

from .paths import GemmtraceError

SCHEDULERS = {"static": 0, "dynamic": 1}
ORDERS = {"row": 0, "snake": 1, "hilbert": 2}


class GtArgs(ctypes.Structure):
    _fields_ = [
        ("a", ctypes.c_void_p),
        ("b", ctypes.c_void_p),
        ("c", ctypes.c_void_p),
        ("m", ctypes.c_int64),
        ("n", ctypes.c_int64),
        ("k", ctypes.c_int64),
        ("prof_data", ctypes.c_void_p),
        ("prof_capacity", ctypes.c_uint32),
        ("profile", ctypes.c_int32),
        ("sched", ctypes.c_int32),
        ("order", ctypes.c_int32),
        ("tile_counter", ctypes.c_void_p),
        ("hang_report", ctypes.c_void_p),
        ("stream", ctypes.c_void_p),
        ("num_sms", ctypes.c_int32),
        ("max_ctas", ctypes.c_int32),
        ("tile_order", ctypes.c_void_p),
        ("debug_fault", ctypes.c_int32),
        ("variant", ctypes.c_int32),
        ("workspace", ctypes.c_void_p),
    ]


class GtPlan(ctypes.Structure):
    _fields_ = [
        (name, ctypes.c_int32)
        for name in (
            "grid_ctas", "regions_per_cta", "records_per_region", "block_threads", "smem_bytes",
            "tile_m", "tile_n", "tile_k", "stages", "cluster", "tiles", "variant",
        )
    ] + [("workspace_bytes", ctypes.c_int64), ("split_k", ctypes.c_int32)]


@dataclass(frozen=True)
class Plan:
    grid_ctas: int
    regions_per_cta: int
    records_per_region: int
    block_threads: int
    smem_bytes: int
    tile_m: int
    tile_n: int
    tile_k: int
    stages: int
    cluster: int
    tiles: int
    # Device memory the kernel needs as GtArgs.workspace, zeroed once before its first launch (the
    # kernel leaves it as it found it); 0 for kernels that need none.
    workspace_bytes: int = 0
    # Kernels with several builds of one idea (v10's tile family): the one that runs, 1-based; else 0.
    variant: int = 0
    # CTAs of a cluster that split each tile's k-loop and sum their shares in shared memory (v10's
    # /kN tiles); 1: each tile's k-loop runs in one CTA (or is split by stream-K across clusters).
    split_k: int = 1

    @classmethod
    def from_c(cls, p: GtPlan) -> "Plan":
        fields = {f: int(getattr(p, f)) for f in cls.__dataclass_fields__}
        fields["split_k"] = max(1, fields["split_k"])  # kernels that predate the field leave it 0
        return cls(**fields)


class KernelLibrary:
    """One kernel's shared library: plan a shape, launch the profiled or plain build."""

    def __init__(self, path: Path, kernel: str):
        self.kernel = kernel
        try:
            self._lib = ctypes.CDLL(str(path))
        except OSError as e:
            raise GemmtraceError(f"could not load the library of kernel {kernel} ({e}).") from None
        self._lib.gt_plan.argtypes = [ctypes.POINTER(GtArgs), ctypes.POINTER(GtPlan), ctypes.c_char_p, ctypes.c_int]
        self._lib.gt_launch.argtypes = [ctypes.POINTER(GtArgs), ctypes.c_char_p, ctypes.c_int]
        a, p = ctypes.c_int(), ctypes.c_int()
        self._lib.gt_abi_sizes(ctypes.byref(a), ctypes.byref(p))
        if (a.value, p.value) != (ctypes.sizeof(GtArgs), ctypes.sizeof(GtPlan)):
            raise GemmtraceError(
                f"kernel {kernel}'s library was built with another argument layout (GtArgs {a.value} vs {ctypes.sizeof(GtArgs)} bytes); rebuild it."
            )
        self._err = ctypes.create_string_buffer(1024)

    @staticmethod
    def args(m: int, n: int, k: int, sched: str = "static", order: str = "row", **kw) -> GtArgs:
        if sched not in SCHEDULERS:
            raise GemmtraceError(f"unknown scheduler {sched!r}; choose one of {', '.join(SCHEDULERS)}.")
        if order not in ORDERS:
            raise GemmtraceError(f"unknown tile order {order!r}; choose one of {', '.join(ORDERS)}.")
        return GtArgs(m=m, n=n, k=k, sched=SCHEDULERS[sched], order=ORDERS[order], **kw)

    def plan(self, args: GtArgs) -> Plan:
        out = GtPlan()
        if self._lib.gt_plan(ctypes.byref(args), ctypes.byref(out), self._err, len(self._err)) != 0:
            raise GemmtraceError(f"kernel {self.kernel} cannot run M={args.m}, N={args.n}, K={args.k}: {self._err.value.decode()}.")
        return Plan.from_c(out)

    def tile_family(self, args: GtArgs | None = None) -> list[tuple[tuple[int, int, int, int, int], float]]:
        """A kernel with a family of tiles (v10): each tile as (BM, BN, cluster, stages, split_k)
        with its rule's cost for `args`' shape (0.0 without a shape), in family order. cluster:
        CTAs along M sharing B; split_k: CTAs of a cluster splitting each tile's k-loop (1: none)."""
        fn = getattr(self._lib, "gt_tile_family", None)
        if fn is None:
            raise GemmtraceError(f"kernel {self.kernel} has no tile family.")
        fn.argtypes = [ctypes.POINTER(GtArgs), ctypes.POINTER(ctypes.c_int32), ctypes.POINTER(ctypes.c_double)]
        out, costs = (ctypes.c_int32 * (5 * 32))(), (ctypes.c_double * 32)()
        n = fn(ctypes.byref(args) if args is not None else None, out, costs)
        return [(tuple(out[5 * i:5 * i + 5]), float(costs[i])) for i in range(n)]

    def launch(self, args: GtArgs) -> None:
        if self._lib.gt_launch(ctypes.byref(args), self._err, len(self._err)) != 0:
            raise GemmtraceError(f"kernel {self.kernel}: {self._err.value.decode()}.")
