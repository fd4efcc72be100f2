"""The kernel registry: the one list of kernels, what idea each adds, and how it is laid out.

The numbers here (tile, stages, threads, recording roles) describe the kernel for `gemmtrace list`
without compiling anything; tests/test_build.py checks them against each built library's own
gt_plan(), so the C++ stays the authority and this list cannot drift from it.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from .paths import KERNELS_DIR, GemmtraceError

ARCHS = {
    # name: (nvcc -gencode value, compute capability the kernel runs on)
    "sm90a": ("arch=compute_90a,code=sm_90a", (9, 0)),
    "sm100a": ("arch=compute_100a,code=sm_100a", (10, 0)),
}


@dataclass(frozen=True)
class KernelSpec:
    name: str
    source: str  # relative to kernels/
    arch: str
    idea: str
    tile: tuple[int, int, int]  # BM, BN, BK
    stages: int
    threads: int
    roles: tuple[str, ...]  # roles that record spans
    k_multiple: int = 8
    schedulers: tuple[str, ...] = ("static",)
    orders: tuple[str, ...] = ("row",)
    cluster: int = 1
    notes: str = ""
    extra_flags: tuple[str, ...] = field(default=())

    @property
    def path(self):
        return KERNELS_DIR / self.source

    @property
    def warps(self) -> int:
        return self.threads // 32

    @property
    def tile_str(self) -> str:
        return "x".join(map(str, self.tile))


KERNELS: dict[str, KernelSpec] = {
    k.name: k
    for k in [
        KernelSpec(
            name="v1",
            source="sm90/v1_tma_wgmma.cu",
            arch="sm90a",
            idea="TMA loads completing on an mbarrier, wgmma from shared memory, one tile per CTA, no pipelining",
            tile=(128, 128, 64),
            stages=1,
            threads=128,
            roles=("consumer",),
        ),
    ]
}


def get(name: str) -> KernelSpec:
    try:
        return KERNELS[name]
    except KeyError:
        raise GemmtraceError(f"unknown kernel {name!r}; known kernels: {', '.join(KERNELS)}.") from None


def for_arch(arch: str) -> list[KernelSpec]:
    if arch not in ARCHS:
        raise GemmtraceError(f"unknown architecture {arch!r}; choose one of {', '.join(ARCHS)}.")
    return [k for k in KERNELS.values() if k.arch == arch]
