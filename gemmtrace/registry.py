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
    n_multiple: int = 1  # TMA-store epilogues need 16-byte rows of C: N a multiple of 8
    schedulers: tuple[str, ...] = ("static",)
    orders: tuple[str, ...] = ("row",)
    cluster: int = 1
    notes: str = ""
    extra_flags: tuple[str, ...] = field(default=())
    # True: MMA and tma_issue spans per k-block. False (the persistent kernels, v6 on): one of each per
    # unit (a tile or a stream-K segment), with a wait span per k-block where a wait outlasted
    # mbarrier.try_wait's own suspension; per-k-block records cost the 128x128 tiles up to 14 %.
    kblock_spans: bool = True
    # A family of tiles compiled into one library (v10), as "BMxBN/cN" (N CTAs a cluster along M) or
    # "BMxBN/kN" (N CTAs a cluster splitting each tile's k-loop), in the
    # library's order; `tile`, `stages` and `cluster` then describe the first, the rule's choice on
    # large shapes. Empty: one tile.
    tiles: tuple[str, ...] = ()
    rule: str = ""  # how the kernel picks among `tiles`, in words

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
        KernelSpec(
            name="v2",
            source="sm90/v2_swizzle.cu",
            arch="sm90a",
            idea="128-byte swizzled TMA tiles and matching wgmma descriptors, BK=128 (two swizzle atoms)",
            tile=(128, 128, 128),
            stages=1,
            threads=128,
            roles=("consumer",),
        ),
        KernelSpec(
            name="v3",
            source="sm90/v3_pipeline.cu",
            arch="sm90a",
            idea="multi-stage shared-memory pipeline: full/empty mbarriers per stage, loads run ahead, wgmma one k-block deep",
            tile=(128, 128, 64),
            stages=3,
            threads=128,
            roles=("consumer",),
        ),
        KernelSpec(
            name="v4",
            source="sm90/v4_warp_specialized.cu",
            arch="sm90a",
            idea="warp specialization: a TMA producer warp, two consumer warpgroups on a 128x256 tile, setmaxnreg",
            tile=(128, 256, 64),
            stages=4,
            threads=384,
            roles=("producer", "consumer"),
        ),
        KernelSpec(
            name="v5",
            source="sm90/v5_cluster_tma_store.cu",
            arch="sm90a",
            idea="2-CTA clusters sharing B by TMA multicast, TMA-store epilogue through swizzled shared memory",
            tile=(128, 256, 64),
            stages=4,
            threads=384,
            roles=("producer", "consumer"),
            cluster=2,
            n_multiple=8,
        ),
        KernelSpec(
            name="v6",
            source="sm90/v6_persistent.cu",
            arch="sm90a",
            idea="persistent clusters with a static schedule; each tile's epilogue is stored under the next tile's first k-blocks",
            tile=(128, 256, 64),
            stages=4,
            threads=384,
            roles=("producer", "consumer"),
            cluster=2,
            n_multiple=8,
            kblock_spans=False,
        ),
        KernelSpec(
            name="v7",
            source="sm90/v7_tile_order.cu",
            arch="sm90a",
            idea="tile order for L2 reuse: row, snake (banded column walk) or a generalized Hilbert curve",
            tile=(128, 256, 64),
            stages=4,
            threads=384,
            roles=("producer", "consumer"),
            orders=("row", "snake", "hilbert"),
            cluster=2,
            n_multiple=8,
            kblock_spans=False,
        ),
        KernelSpec(
            name="v8",
            source="sm90/v8_dynamic.cu",
            arch="sm90a",
            idea="dynamic scheduling: clusters claim tiles from a global atomic counter (Hopper's stand-in for CLC)",
            tile=(128, 256, 64),
            stages=4,
            threads=384,
            roles=("producer", "consumer"),
            schedulers=("static", "dynamic"),
            orders=("row", "snake", "hilbert"),
            cluster=2,
            n_multiple=8,
            kblock_spans=False,
        ),
        KernelSpec(
            name="v9",
            source="sm90/v9_stream_k.cu",
            arch="sm90a",
            idea=(
                "stream-K: whole tiles for the full waves, then the last (tiles mod clusters) + one wave of tiles split "
                "into equal k-block ranges, one per cluster (fewer clusters when tiles are few, at most sqrt(K_b/2) "
                "segments a tile); the CTA holding a tile's k-block 0 adds the others' fp32 partials from a workspace "
                "in k order, so results are bitwise reproducible"
            ),
            tile=(128, 256, 64),
            stages=4,
            threads=384,
            roles=("producer", "consumer"),
            orders=("row", "snake", "hilbert"),
            cluster=2,
            n_multiple=8,
            kblock_spans=False,
        ),
        KernelSpec(
            name="v10",
            source="sm90/v10_tile_family.cu",
            arch="sm90a",
            idea=(
                "the tile shape chosen per problem from a family compiled once (192x192, 128x256, 256x128, 128x192, 128x128, 64x256, 64x128, 64x64; "
                "clusters of one or two along M, or of two splitting K and summing in shared memory), with v9's stream-K where it pays"
            ),
            tile=(128, 256, 64),
            stages=4,
            threads=384,
            roles=("producer", "consumer"),
            orders=("row", "snake", "hilbert"),
            cluster=2,
            n_multiple=8,
            kblock_spans=False,
            tiles=("128x256/c2", "256x128/c2", "128x192/c2", "128x128/c2", "128x128/c1", "64x256/c1", "64x128/c1",
                   "128x128/k2", "64x64/c1", "64x64/c2", "64x128/c2", "192x192/c2"),
            rule=(
                "tiles taller than M or wider than N (rounded up to 64) are not weighed, nor tiles of 128 rows or more in clusters of two where "
                "M <= their rows (the second CTA would have none), nor 64x64/c2 where M <= 64 and its tiles split (64x64/c1 then weighs "
                "no more than it would), nor 64x128/c2 where M <= 64 or K is outside 2048-8192 "
                "(where it was measured); for each other tile, partition the work as the stream-K scheduler would (whole tiles for full waves, the "
                "rest split only where that promises at least 10 % fewer k-blocks on the busiest cluster, and never where a tile's whole k-loop "
                "is under 2.5 k-blocks of 128x256 work) and take "
                "the k-blocks of the busiest cluster, counting 2 per partial tile it moves and every split k-block "
                "2 times (split ranges stop sharing operands in L2); multiply by the tile's area over 128x256 and "
                "divide by its measured throughput relative to 128x256 (and by 2 for 128x128/k2, whose two CTAs share "
                "each k-loop); where every tile is cut on its own for the parallel fix-up (fewer tiles than clusters, "
                "at most (BM + BN) / (M + N) x 35 segments a tile, as many as HBM can feed; taken over the serial split "
                "where it leaves the busiest cluster fewer k-blocks, the serial split's counted 2 times where K >= 16384, "
                "1.2 times where K >= 8192, and each segment keeps its own slice), count split k-blocks once "
                "and add the fix-up: 8 k-block times, and 1 more for each 1.3 MB of partials its CTAs write and read "
                "back (less each segment's own slice where it keeps it); add 3 k-block times a tile for 128x128/k2's exchange; the smallest cost wins, and a tile "
                "within 2 % of one earlier in the order of preference (192x192/c2 first, then the list) loses to it (docs/kernels.md)"
            ),
        ),
    ]
}


def tile_name(bm: int, bn: int, cluster: int, split_k: int = 1) -> str:
    """"BMxBN/cN" (N CTAs a cluster along M, sharing B), or "BMxBN/kN" (N CTAs a cluster, each a
    share of every tile's k-loop, summed in distributed shared memory): how `tiles` names a tile."""
    return f"{bm}x{bn}/k{split_k}" if split_k > 1 else f"{bm}x{bn}/c{cluster}"


# `--kernel best`: not a kernel of its own but a choice among them (gemmtrace/choose.py).
BEST = "best"


def get(name: str) -> KernelSpec:
    try:
        return KERNELS[name]
    except KeyError:
        raise GemmtraceError(f"unknown kernel {name!r}; known kernels: {', '.join(KERNELS)}.") from None


def for_arch(arch: str) -> list[KernelSpec]:
    if arch not in ARCHS:
        raise GemmtraceError(f"unknown architecture {arch!r}; choose one of {', '.join(ARCHS)}.")
    return [k for k in KERNELS.values() if k.arch == arch]
