"""`--kernel best`: which kernel, scheduler and tile to run for a shape, and why, in one sentence
(the rule in words: RULE, which `gemmtrace list` prints)."""
from __future__ import annotations

from dataclasses import dataclass

from . import registry
from .registry import tile_name
from .build import build
from .launch import KernelLibrary

RULE = (
    "v10's rule (its tile family and stream-K partition, computed by the kernel library's own "
    "gt_tile_family/gt_plan so that the sentence and the launch cannot disagree) with the snake tile order "
    "(v7), which keeps the tiles in flight on a compact block of C so that they share A and B in L2 (measured "
    "on the H100: v8 at 4096x14336x4096 went from 90 % to 100 % of cuBLAS), and is row order on grids of one "
    "band; under that order a grid of three or more whole waves of 128x256/c2 or 192x192/c2 tiles splits only its "
    "last partial wave where its operands fit in L2 (or nearly) and the split gains at least 1 % by its measured estimate. "
    "Where the rule keeps 128x256/c2 whole tiles, v8 runs them (the same tile and kernel body) with its dynamic "
    "scheduler, whose clusters claim their next tile when they are ready for it: on the H100 that ran 0.35 % "
    "faster than v10's static schedule by the median of two samples of 30 and 24 such shapes. "
    "Nothing here names a shape."
)
FAMILY_KERNEL = "v10"
# Its tile is v10's first and its kernel body (persistent_gemm.cuh) v10's: where the rule keeps that tile
# whole, this kernel runs it with its dynamic scheduler.
DYNAMIC_KERNEL = "v8"
# Snake (8-row bands walked column by column, v7): the grid's concurrent tiles share A and B panels
# in L2 on large grids, and it is row order on grids of a band or less.
ORDER = "snake"


@dataclass(frozen=True)
class Choice:
    kernel: str
    scheduler: str
    variant: int  # the kernel's tile (1-based) for kernels with a family, else 0
    order: str  # tile order
    tile: str  # "BMxBN/cN" or "BMxBN/kN" (tile_name)
    split: bool  # stream-K splits some tiles' k-loops
    reason: str  # one sentence

    def label(self) -> str:
        return ", ".join([self.kernel, f"tile {self.tile}", "stream-K" if self.split else "whole tiles",
                          f"{self.order} order"] + ([f"{self.scheduler} scheduling"] if self.scheduler != "static" else []))


def choose(shape: tuple[int, int, int], num_sms: int = 132, lib: KernelLibrary | None = None) -> Choice:
    """The kernel `--kernel best` runs at `shape` on a GPU with `num_sms` SMs. Builds v10 if needed
    (no GPU needed: the rule runs on the host)."""
    m, n, k = shape
    lib = lib or KernelLibrary(build(FAMILY_KERNEL).library, FAMILY_KERNEL)
    args = lib.args(m, n, k, order=ORDER, num_sms=num_sms)
    plan = lib.plan(args)  # one sentence for a shape v10 cannot do
    family = lib.tile_family(args)
    names = [tile_name(bm, bn, c, s) for (bm, bn, c, _stages, s), _cost in family]
    costs = [cost for _tile, cost in family]
    i = plan.variant - 1
    split = plan.workspace_bytes > 0
    first = names[0]
    if i == 0:
        why = f"the rule keeps {first} (cost {costs[0]:.0f} k-block times; next best " + (
            f"{names[min(range(1, len(costs)), key=costs.__getitem__)]} at {min(costs[1:]):.0f})")
    else:
        why = f"the rule picks {names[i]} (cost {costs[i]:.0f} k-block times against {costs[0]:.0f} for {first})"
    dynamic = registry.get(DYNAMIC_KERNEL)
    if names[i] == tile_name(dynamic.tile[0], dynamic.tile[1], dynamic.cluster) and not split:
        return Choice(DYNAMIC_KERNEL, "dynamic", 0, ORDER, names[i], False,
                      f"{why}, whole tiles, which {DYNAMIC_KERNEL} runs with its dynamic scheduler.")
    return Choice(FAMILY_KERNEL, "static", plan.variant, ORDER, names[i], split,
                  f"{why}" + (", stream-K splits the last tiles' k-loops." if split else ", whole tiles."))


def num_sms() -> int:
    """SMs of GPU 0 (what the kernels size their grids by), or an H100's 132 without a GPU."""
    try:
        import torch

        if torch.cuda.is_available():
            return torch.cuda.get_device_properties(0).multi_processor_count
    except ImportError:
        pass
    return 132


def best_options(shape: tuple[int, int, int], lib: KernelLibrary | None = None, **run_options):
    """RunOptions for `--kernel best` at `shape` (the rest of the options as given), and the Choice.
    `lib`: v10's library when the caller has it loaded already."""
    from .runner import RunOptions, require_gpu

    require_gpu(registry.get(FAMILY_KERNEL))  # no GPU: one sentence before v10 is built for the rule
    c = choose(shape, num_sms(), lib)
    opts = RunOptions(kernel=c.kernel, shape=shape, schedulers=(c.scheduler,), order=c.order, variant=c.variant,
                      chosen=f"{c.label()}: {c.reason}", **run_options)
    return opts, c
