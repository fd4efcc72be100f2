"""The metrics of one run, computed from its spans alone (DESIGN.md section 4, docs/metrics.md).

Everything runs as whole-array numpy over the spans; the only Python loops are over tag groups
(a handful). Groups of spans (an SM, an SM and a tile) are handled together in composite
coordinates: see intervals.py.

All times are int64 ns in the spans' own time base (a decoded run starts at 0); durations and
sums of durations are exact integers, and every fraction is one of them divided by P * D.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from .. import tags as tagdefs
from ..paths import GemmtraceError
from . import intervals

MMA_GROUP = "mma"  # spans of this tag group keep the tensor cores busy (today: the tag "mma")
EPILOGUE_GROUP = "epilogue"  # spans whose overlap with the MMA union is the epilogue overlap
# The role that issues MMAs: its other spans explain tensor-core gaps. In a vocabulary without a
# role of this name, the roles that record MMA spans take its place.
MMA_ROLE = "consumer"

# When spans of several groups from the consumer role cover the same gap nanosecond, it goes to
# the first group in this order. A warp blocked on a barrier names the resource the tensor cores
# starve for, so waits win; a tile claim holds up the next mainloop; the epilogue is work that
# could have overlapped; issuing and setup come last. Groups not listed follow in tags.h order.
GAP_PRIORITY = ("wait", "schedule", "epilogue", "issue", "setup")
UNATTRIBUTED = "unattributed"

_REQUIRED_COLUMNS = ("sm", "role", "tag", "tile", "start_ns", "end_ns")
# Composite coordinates must fit in int64 with room for the radix digits.
_MAX_COMPOSITE = 1 << 62


# -- results ----------------------------------------------------------------------------------
@dataclass(frozen=True)
class TensorCoreIdle:
    """Tensor-core busy and idle time, summed over the device's P SMs (fractions of P * D).

    head + gaps + tc_tail == idle holds exactly in ns. `tc_tail` is the tensor cores' own tail
    (last MMA to T1), not the tail wave of tiles.
    """

    capacity_ns: int  # P * D
    busy_ns: int  # sum over SMs of B(sm)
    idle_ns: int  # P * D - busy
    head_ns: int
    gap_ns: int
    tc_tail_ns: int
    busy_fraction: float
    idle_fraction: float
    head_fraction: float
    gap_fraction: float
    tc_tail_fraction: float
    # gap ns by the tag group of the consumer span covering them, in GAP_PRIORITY order, then
    # UNATTRIBUTED; the values sum to gap_ns.
    gap_attribution_ns: dict[str, int] = field(default_factory=dict)

    @property
    def gap_attribution(self) -> dict[str, float]:
        """Attributed gap time as fractions of P * D (they sum to gap_fraction)."""
        return {k: v / self.capacity_ns for k, v in self.gap_attribution_ns.items()}


@dataclass(frozen=True)
class EpilogueOverlap:
    overlap: float | None  # overlapped_ns / epilogue_ns; None when there is no epilogue time
    overlapped_ns: int  # sum over epilogue spans e of |e ∩ MMA-union(sm of e)|
    epilogue_ns: int  # sum over epilogue spans of |e|
    spans: int


@dataclass(frozen=True, eq=False)
class Occupancy:
    """a(t), the number of SMs with a tile in flight, as a step function.

    a[i] holds on [t_ns[i], t_ns[i + 1]); the last value (0 once every tile is done) holds to T1.
    """

    t_ns: np.ndarray  # int64, strictly increasing, t_ns[0] == T0
    a: np.ndarray  # int64
    integral_sm_ns: int  # ∫ a(t) dt over [T0, T1], in SM·ns
    mean: float  # integral / (P * D)


@dataclass(frozen=True)
class TailWave:
    """The last partial wave of tiles (all None/0 when the run has no tile-tagged spans)."""

    tiles: int  # distinct tile ids
    waves: float  # tiles / P
    wave_quantization_bound: float | None  # (ceil(waves) - waves) / ceil(waves)
    t_first_idle_ns: int | None  # min over SMs that ran tiles of the end of their last tile
    length_ns: int | None  # T1 - t_first_idle
    fraction: float | None  # length / D
    occupancy: float | None  # mean of a(t) / P over [t_first_idle, T1]; None when length is 0


@dataclass(frozen=True, eq=False)
class LoadBalance:
    """Tiles and finish times per SM. Tile counts range over all P SMs (an SM that ran no tile,
    recorded or not, counts 0); finish times over the SMs that ran tiles."""

    tiles_min: int
    tiles_median: float
    tiles_max: int
    sms_with_tiles: int
    finish_min_ns: int | None
    finish_max_ns: int | None
    finish_spread_ns: int | None  # max - min of the SMs' finish times
    per_sm: pd.DataFrame  # sm, busy_ns, head_ns, gap_ns, tc_tail_ns, tiles, finish_ns (recorded SMs)


@dataclass(frozen=True, eq=False)
class Metrics:
    label: str
    span_count: int
    t0_ns: int  # T0: earliest start
    t1_ns: int  # T1: latest end
    duration_ns: int  # D = T1 - T0
    sm_count: int  # P: the device's SMs
    sms_recorded: int  # S: the SMs with at least one span
    tensor_core: TensorCoreIdle
    epilogue: EpilogueOverlap
    occupancy: Occupancy
    tail_wave: TailWave
    load_balance: LoadBalance
    tiles: pd.DataFrame  # per (tile, sm): start_ns, end_ns of the tile in flight on that SM
    timings: dict[str, Any]  # run.meta["timings"], passed through

    # DESIGN.md's notation.
    @property
    def T0(self) -> int:  # noqa: N802
        return self.t0_ns

    @property
    def T1(self) -> int:  # noqa: N802
        return self.t1_ns

    @property
    def D(self) -> int:  # noqa: N802
        return self.duration_ns

    @property
    def P(self) -> int:  # noqa: N802
        return self.sm_count

    @property
    def S(self) -> int:  # noqa: N802
        return self.sms_recorded

    @property
    def epilogue_overlap(self) -> float | None:
        return self.epilogue.overlap

    @property
    def mean_occupancy(self) -> float:
        return self.occupancy.mean

    def scalars(self) -> dict[str, float | int | None]:
        """The headline numbers, keyed as in scalar_specs() (what compare and the tables show)."""
        tc, tw, lb = self.tensor_core, self.tail_wave, self.load_balance
        out: dict[str, float | int | None] = {
            "duration_ns": self.duration_ns,
            "tc_busy_fraction": tc.busy_fraction,
            "tc_idle_fraction": tc.idle_fraction,
            "tc_head_fraction": tc.head_fraction,
            "tc_gap_fraction": tc.gap_fraction,
            "tc_tail_fraction": tc.tc_tail_fraction,
        }
        for group, frac in tc.gap_attribution.items():
            out[f"gap_{group}_fraction"] = frac
        out.update(
            {
                "epilogue_overlap": self.epilogue.overlap,
                "mean_occupancy": self.occupancy.mean,
                "tail_wave_ns": tw.length_ns,
                "tail_wave_fraction": tw.fraction,
                "tail_wave_occupancy": tw.occupancy,
                "tiles": tw.tiles,
                "waves": tw.waves,
                "wave_quantization_bound": tw.wave_quantization_bound,
                "tiles_per_sm_min": lb.tiles_min,
                "tiles_per_sm_median": lb.tiles_median,
                "tiles_per_sm_max": lb.tiles_max,
                "finish_spread_ns": lb.finish_spread_ns,
            }
        )
        return out

    def to_dict(self, *, tables: bool = True) -> dict[str, Any]:
        """Everything as plain JSON types (None for undefined); tables=False leaves out the
        occupancy curve, the per-SM and the per-tile tables."""
        tc = self.tensor_core
        out: dict[str, Any] = {
            "label": self.label,
            "span_count": self.span_count,
            "t0_ns": self.t0_ns,
            "t1_ns": self.t1_ns,
            "duration_ns": self.duration_ns,
            "sm_count": self.sm_count,
            "sms_recorded": self.sms_recorded,
            "tensor_core": {
                "capacity_ns": tc.capacity_ns,
                "busy_ns": tc.busy_ns,
                "idle_ns": tc.idle_ns,
                "head_ns": tc.head_ns,
                "gap_ns": tc.gap_ns,
                "tc_tail_ns": tc.tc_tail_ns,
                "busy_fraction": tc.busy_fraction,
                "idle_fraction": tc.idle_fraction,
                "head_fraction": tc.head_fraction,
                "gap_fraction": tc.gap_fraction,
                "tc_tail_fraction": tc.tc_tail_fraction,
                "gap_attribution_ns": dict(tc.gap_attribution_ns),
                "gap_attribution": tc.gap_attribution,
            },
            "epilogue": {
                "overlap": self.epilogue.overlap,
                "overlapped_ns": self.epilogue.overlapped_ns,
                "epilogue_ns": self.epilogue.epilogue_ns,
                "spans": self.epilogue.spans,
            },
            "occupancy": {"mean": self.occupancy.mean, "integral_sm_ns": self.occupancy.integral_sm_ns},
            "tail_wave": {
                "tiles": self.tail_wave.tiles,
                "waves": self.tail_wave.waves,
                "wave_quantization_bound": self.tail_wave.wave_quantization_bound,
                "t_first_idle_ns": self.tail_wave.t_first_idle_ns,
                "length_ns": self.tail_wave.length_ns,
                "fraction": self.tail_wave.fraction,
                "occupancy": self.tail_wave.occupancy,
            },
            "load_balance": {
                k: getattr(self.load_balance, k)
                for k in ("tiles_min", "tiles_median", "tiles_max", "sms_with_tiles",
                          "finish_min_ns", "finish_max_ns", "finish_spread_ns")
            },
            "timings": _jsonable(self.timings),
        }
        if tables:
            out["occupancy"]["t_ns"] = self.occupancy.t_ns.tolist()
            out["occupancy"]["a"] = self.occupancy.a.tolist()
            out["load_balance"]["per_sm"] = _frame_columns(self.load_balance.per_sm)
            out["tiles"] = _frame_columns(self.tiles)
        return out


@dataclass(frozen=True)
class ScalarSpec:
    key: str
    label: str
    unit: str  # "ns", "fraction" (shown as %), "count", "ratio"


def scalar_specs(groups: list[str] | None = None) -> tuple[ScalarSpec, ...]:
    """Labels and units of the keys Metrics.scalars() returns (one list for tables and compare)."""
    groups = gap_groups() + [UNATTRIBUTED] if groups is None else groups
    specs = [
        ScalarSpec("duration_ns", "traced duration D", "ns"),
        ScalarSpec("tc_busy_fraction", "tensor-core busy", "fraction"),
        ScalarSpec("tc_idle_fraction", "tensor-core idle", "fraction"),
        ScalarSpec("tc_head_fraction", "  head (before first MMA)", "fraction"),
        ScalarSpec("tc_gap_fraction", "  gaps (between MMAs)", "fraction"),
        ScalarSpec("tc_tail_fraction", "  tc tail (after last MMA)", "fraction"),
    ]
    specs += [ScalarSpec(f"gap_{g}_fraction", f"    gaps: {g}", "fraction") for g in groups]
    specs += [
        ScalarSpec("epilogue_overlap", "epilogue overlap", "fraction"),
        ScalarSpec("mean_occupancy", "mean occupancy", "fraction"),
        ScalarSpec("tail_wave_ns", "tail wave length", "ns"),
        ScalarSpec("tail_wave_fraction", "tail wave fraction of D", "fraction"),
        ScalarSpec("tail_wave_occupancy", "tail wave occupancy", "fraction"),
        ScalarSpec("tiles", "tiles", "count"),
        ScalarSpec("waves", "waves (tiles / P)", "ratio"),
        ScalarSpec("wave_quantization_bound", "wave-quantization bound", "fraction"),
        ScalarSpec("tiles_per_sm_min", "tiles per SM: min", "count"),
        ScalarSpec("tiles_per_sm_median", "tiles per SM: median", "count"),
        ScalarSpec("tiles_per_sm_max", "tiles per SM: max", "count"),
        ScalarSpec("finish_spread_ns", "finish-time spread", "ns"),
    ]
    return tuple(specs)


def gap_groups() -> list[str]:
    """Tag groups that gaps are attributed to, in priority order (GAP_PRIORITY, then tags.h)."""
    declared = []
    for t in tagdefs.tags():
        if t.group != MMA_GROUP and t.group not in declared:
            declared.append(t.group)
    return [g for g in GAP_PRIORITY if g in declared] + [g for g in declared if g not in GAP_PRIORITY]


# -- input ------------------------------------------------------------------------------------
@dataclass(frozen=True, eq=False)
class _Spans:
    """The spans as validated numpy columns, with SMs renumbered densely."""

    start: np.ndarray  # int64
    end: np.ndarray  # int64
    sm_ids: np.ndarray  # the distinct SM ids, sorted (S of them)
    sm_idx: np.ndarray  # per span, index into sm_ids
    tile: np.ndarray
    group: np.ndarray  # per span, index into groups
    groups: list[str]  # tag group names: MMA_GROUP first, then gap groups in priority order
    consumer: np.ndarray  # per span, bool: its role records MMA spans
    t0: int
    t1: int

    @property
    def duration(self) -> int:
        return self.t1 - self.t0

    @property
    def width(self) -> int:  # composite coordinates: x = sm_idx * width + (t - t0)
        return self.duration + 1

    @property
    def key_max(self) -> int:
        return len(self.sm_ids) * self.width - 1

    def group_code(self, name: str) -> int:
        return self.groups.index(name) if name in self.groups else -1

    def composite(self, idx: np.ndarray, t: np.ndarray) -> np.ndarray:
        return intervals.composite(self.sm_idx[idx], t[idx] - self.t0, self.width)


def _codes(column: pd.Series, names: list[str], what: str) -> tuple[np.ndarray, list[str]]:
    """(codes, category names) of a role or tag column given as categorical, names or ids."""
    if isinstance(column.dtype, pd.CategoricalDtype):
        cats = [str(c) for c in column.cat.categories]
        codes = column.cat.codes.to_numpy()
    elif column.dtype.kind in "iu":
        cats, codes = list(names), column.to_numpy().astype(np.int64)
        if codes.size and (codes.min() < 0 or codes.max() >= len(names)):
            raise GemmtraceError(f"spans hold a {what} id outside 0..{len(names) - 1}.")
    else:
        cat = pd.Categorical(column.astype(str))
        cats, codes = [str(c) for c in cat.categories], cat.codes
    if codes.size and codes.min() < 0:
        raise GemmtraceError(f"spans hold a missing or unknown {what}.")
    return codes, cats


def _prepare(spans: pd.DataFrame, tag_groups: dict[str, str] | None = None) -> _Spans:
    """Validate and index a spans table; `tag_groups` is the run's tag -> group map (Run.tag_groups;
    default gemmtrace's own tags.h)."""
    if not isinstance(spans, pd.DataFrame):
        raise GemmtraceError(f"spans must be a pandas DataFrame, not {type(spans).__name__}.")
    missing = [c for c in _REQUIRED_COLUMNS if c not in spans.columns]
    if missing:
        raise GemmtraceError(f"the spans table lacks the column(s) {', '.join(missing)}.")
    if len(spans) == 0:
        raise GemmtraceError("the run has no spans, so there is nothing to measure.")
    start = spans["start_ns"].to_numpy(np.int64)
    end = spans["end_ns"].to_numpy(np.int64)
    backwards = end < start
    if backwards.any():
        i = int(np.argmax(backwards))
        raise GemmtraceError(
            f"{int(backwards.sum())} span(s) end before they start (the first at row {i}): the trace is corrupt."
        )
    sm = spans["sm"].to_numpy()
    if sm.dtype.kind not in "iu":
        raise GemmtraceError(f"the sm column must hold integers, not {sm.dtype}.")
    if sm.min() < 0:
        raise GemmtraceError(f"spans hold a negative SM id ({int(sm.min())}).")
    t0, t1 = int(start.min()), int(end.max())
    if t1 == t0:
        raise GemmtraceError("the run's spans cover no time (T1 == T0), so no fraction of it is defined.")
    sm_ids, sm_idx = intervals.dense_index(sm)
    if len(sm_ids) * (t1 - t0 + 1) >= _MAX_COMPOSITE:
        raise GemmtraceError(f"the spans cover {t1 - t0} ns, too long a time to be one kernel's trace.")

    tag_codes, tag_cats = _codes(spans["tag"], tagdefs.tag_names(), "tag")
    role_codes, role_cats = _codes(spans["role"], tagdefs.role_names(), "role")
    declared = tagdefs.tag_groups() if tag_groups is None else tag_groups
    groups = [MMA_GROUP] + gap_groups()
    for name in tag_cats:  # tags this version does not declare get a group of their own name
        g = declared.get(name, name)
        if g not in groups:
            groups.append(g)
    lut = np.array([groups.index(declared.get(name, name)) for name in tag_cats], np.int8)
    group = lut[tag_codes]
    if MMA_ROLE in role_cats:
        consumer = role_codes == role_cats.index(MMA_ROLE)
    else:  # a kernel's own vocabulary: the roles that record MMA spans (MMA_GROUP is groups[0])
        consumer = np.isin(role_codes, np.unique(role_codes[group == 0]))
    tile = spans["tile"].to_numpy()
    if tile.dtype.kind not in "iu":
        raise GemmtraceError(f"the tile column must hold integers, not {tile.dtype}.")
    return _Spans(start, end, sm_ids, sm_idx, tile, group, groups, consumer, t0, t1)


def _device_sm_count(meta: dict, recorded: int) -> int:
    """P from the run's metadata (device.sm_count), else the SMs that recorded."""
    device = meta.get("device") if isinstance(meta, dict) else None
    p = device.get("sm_count") if isinstance(device, dict) else None
    if p is None:
        return recorded
    try:
        p = int(p)
    except (TypeError, ValueError):
        raise GemmtraceError(f"the run's device.sm_count is {p!r}, not a number.") from None
    if p < recorded:
        raise GemmtraceError(f"spans come from {recorded} SMs but the device has only {p} (device.sm_count).")
    return p


# -- the metrics ------------------------------------------------------------------------------
def compute_metrics(run) -> Metrics:
    """All of DESIGN.md section 4 for one run (a gemmtrace.trace.Run)."""
    sp = _prepare(run.spans, run.tag_groups)
    meta = run.meta if isinstance(run.meta, dict) else {}
    P = _device_sm_count(meta, len(sp.sm_ids))
    D, S = sp.duration, len(sp.sm_ids)

    mma_s, mma_e = _mma_union(sp)
    tensor_core, per_sm_tc = _tensor_core(sp, P, mma_s, mma_e)
    epilogue = _epilogue_overlap(sp, mma_s, mma_e)

    tiles_sm, tiles_id, tiles_start, tiles_end = _tile_intervals(sp)
    occ_s, occ_e = _sm_tile_union(sp, tiles_sm, tiles_start, tiles_end)
    integral = int((occ_e - occ_s).sum())
    t_rel, a = step_curve(occ_s % sp.width, occ_e % sp.width)
    occupancy = Occupancy(t_rel + sp.t0, a, integral, integral / (P * D))

    tiles_per_sm = np.bincount(tiles_sm, minlength=S).astype(np.int64)
    finish = np.full(S, np.iinfo(np.int64).min, np.int64)
    np.maximum.at(finish, tiles_sm, tiles_end)
    ran = tiles_per_sm > 0
    tail_wave = _tail_wave(sp, P, tiles_id, finish[ran], occ_s, occ_e)

    all_counts = np.concatenate((tiles_per_sm, np.zeros(P - S, np.int64)))
    per_sm = pd.DataFrame(
        {
            "sm": sp.sm_ids,
            "busy_ns": per_sm_tc["busy"],
            "head_ns": per_sm_tc["head"],
            "gap_ns": per_sm_tc["gap"],
            "tc_tail_ns": per_sm_tc["tail"],
            "tiles": tiles_per_sm,
            "finish_ns": pd.arrays.IntegerArray(np.where(ran, finish, 0), ~ran),  # NA: no tiles
        }
    )
    load_balance = LoadBalance(
        tiles_min=int(all_counts.min()),
        tiles_median=float(np.median(all_counts)),
        tiles_max=int(all_counts.max()),
        sms_with_tiles=int(ran.sum()),
        finish_min_ns=int(finish[ran].min()) if ran.any() else None,
        finish_max_ns=int(finish[ran].max()) if ran.any() else None,
        finish_spread_ns=int(finish[ran].max() - finish[ran].min()) if ran.any() else None,
        per_sm=per_sm,
    )

    order = np.lexsort((tiles_sm, tiles_id))
    tiles = pd.DataFrame(
        {
            "tile": tiles_id[order],
            "sm": sp.sm_ids[tiles_sm[order]],
            "start_ns": tiles_start[order],
            "end_ns": tiles_end[order],
        }
    )
    tiles["duration_ns"] = tiles["end_ns"] - tiles["start_ns"]
    timings = meta.get("timings")
    return Metrics(
        label=_label(run),
        span_count=len(sp.start),
        t0_ns=sp.t0,
        t1_ns=sp.t1,
        duration_ns=D,
        sm_count=P,
        sms_recorded=S,
        tensor_core=tensor_core,
        epilogue=epilogue,
        occupancy=occupancy,
        tail_wave=tail_wave,
        load_balance=load_balance,
        tiles=tiles,
        timings=dict(timings) if isinstance(timings, dict) else {},
    )


def occupancy_curve(spans: pd.DataFrame, P: int) -> tuple[np.ndarray, np.ndarray]:  # noqa: N803
    """a(t) of a spans table as a step function (t_ns, a): a[i] holds on [t_ns[i], t_ns[i + 1]).

    t_ns starts at T0 and is in the spans' time base; a never exceeds P, which must be at least
    the number of SMs in the spans.
    """
    sp = _prepare(spans)
    if int(P) < len(sp.sm_ids):
        raise GemmtraceError(f"spans come from {len(sp.sm_ids)} SMs, more than P = {P}.")
    tiles_sm, _, tiles_start, tiles_end = _tile_intervals(sp)
    occ_s, occ_e = _sm_tile_union(sp, tiles_sm, tiles_start, tiles_end)
    t_rel, a = step_curve(occ_s % sp.width, occ_e % sp.width)
    return t_rel + sp.t0, a


def _label(run) -> str:
    try:
        return str(run.label)
    except Exception:  # a run-like object without the Run helpers
        return "?"


def _mma_union(sp: _Spans) -> tuple[np.ndarray, np.ndarray]:
    """Per-SM union of the non-empty MMA spans, as one composite interval list."""
    idx = np.flatnonzero((sp.group == sp.group_code(MMA_GROUP)) & (sp.end > sp.start))
    cs, ce = sp.composite(idx, sp.start), sp.composite(idx, sp.end)
    order = intervals.argsort_keys(cs, sp.key_max)
    return intervals.union_sorted(cs[order], ce[order])


def _tensor_core(sp: _Spans, P: int, us: np.ndarray, ue: np.ndarray) -> tuple[TensorCoreIdle, dict]:  # noqa: N803
    D, S, W = sp.duration, len(sp.sm_ids), sp.width
    u_sm = us // W
    count = np.bincount(u_sm, minlength=S)
    has = count > 0
    first = np.cumsum(count) - count  # index of each SM's first union interval
    last = first + count - 1
    busy = np.zeros(S, np.int64)
    head = np.full(S, D, np.int64)  # an SM with no MMA span counts its whole D as head
    tail = np.zeros(S, np.int64)
    if has.any():
        busy[has] = np.add.reduceat(ue - us, first[has])
        head[has] = us[first[has]] - u_sm[first[has]] * W
        tail[has] = D - (ue[last[has]] - u_sm[last[has]] * W)
    gap = D - busy - head - tail

    # Gaps: between consecutive union intervals of one SM.
    same_sm = u_sm[1:] == u_sm[:-1]
    gap_s, gap_e = ue[:-1][same_sm], us[1:][same_sm]
    attribution = _attribute_gaps(sp, gap_s, gap_e)
    assert sum(attribution.values()) == int(gap.sum())

    capacity = P * D
    unrecorded = (P - S) * D  # SMs of the device with no spans: all head
    busy_ns = int(busy.sum())
    head_ns = int(head.sum()) + unrecorded
    gap_ns, tail_ns = int(gap.sum()), int(tail.sum())
    idle_ns = capacity - busy_ns
    tc = TensorCoreIdle(
        capacity_ns=capacity,
        busy_ns=busy_ns,
        idle_ns=idle_ns,
        head_ns=head_ns,
        gap_ns=gap_ns,
        tc_tail_ns=tail_ns,
        busy_fraction=busy_ns / capacity,
        idle_fraction=idle_ns / capacity,
        head_fraction=head_ns / capacity,
        gap_fraction=gap_ns / capacity,
        tc_tail_fraction=tail_ns / capacity,
        gap_attribution_ns=attribution,
    )
    return tc, {"busy": busy, "head": head, "gap": gap, "tail": tail}


def _attribute_gaps(sp: _Spans, gap_s: np.ndarray, gap_e: np.ndarray) -> dict[str, int]:
    """Split the gap intervals by the group of the consumer span covering them, by priority.

    Walk the groups in priority order: a group takes the part of the still-unattributed gaps
    that the union of its consumer spans covers; what is left at the end is unattributed.
    """
    names = [g for g in sp.groups if g != MMA_GROUP]
    out = {g: 0 for g in gap_groups()}  # undeclared groups appear only when they take gap time
    rem_s, rem_e = gap_s, gap_e
    if rem_s.size:
        idx = np.flatnonzero(sp.consumer & (sp.group != sp.group_code(MMA_GROUP)) & (sp.end > sp.start))
        cs, ce = sp.composite(idx, sp.start), sp.composite(idx, sp.end)
        order = intervals.argsort_keys(cs, sp.key_max)
        cs, ce, cg = cs[order], ce[order], sp.group[idx][order]
        present = np.bincount(cg, minlength=len(sp.groups)) > 0
        for name in names:
            code = sp.groups.index(name)
            if not present[code]:
                continue
            sel = np.flatnonzero(cg == code)
            g_s, g_e = intervals.union_sorted(cs[sel], ce[sel])
            left_s, left_e = intervals.subtract(rem_s, rem_e, g_s, g_e)
            out[name] = int((rem_e - rem_s).sum() - (left_e - left_s).sum())
            rem_s, rem_e = left_s, left_e
            if rem_s.size == 0:
                break
    out[UNATTRIBUTED] = int((rem_e - rem_s).sum())
    return out


def _epilogue_overlap(sp: _Spans, us: np.ndarray, ue: np.ndarray) -> EpilogueOverlap:
    idx = np.flatnonzero(sp.group == sp.group_code(EPILOGUE_GROUP))
    total = int((sp.end[idx] - sp.start[idx]).sum())
    overlapped = int(intervals.covered_length(us, ue, sp.composite(idx, sp.start), sp.composite(idx, sp.end)).sum())
    return EpilogueOverlap(overlapped / total if total > 0 else None, overlapped, total, int(idx.size))


def _tile_intervals(sp: _Spans) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(sm_idx, tile, start, end) of each tile in flight on each SM: the earliest start and latest
    end of the spans tagged with that tile (tile >= 0) on that SM; sorted by (sm, tile)."""
    tile_max = int(sp.tile.max())
    if tile_max < 0:
        empty = np.empty(0, np.int64)
        return empty, empty, empty, empty
    n_tiles = tile_max + 1
    key = np.where(sp.tile >= 0, sp.sm_idx * np.int64(n_tiles) + sp.tile, -1)
    keys, start, end = intervals.group_min_max(key, sp.start, sp.end)
    return keys // n_tiles, keys % n_tiles, start, end


def _sm_tile_union(sp: _Spans, tiles_sm, tiles_start, tiles_end) -> tuple[np.ndarray, np.ndarray]:
    """Per-SM union of the tiles' in-flight intervals, in composite coordinates."""
    cs = intervals.composite(tiles_sm, tiles_start - sp.t0, sp.width)
    ce = intervals.composite(tiles_sm, tiles_end - sp.t0, sp.width)
    return intervals.union(cs, ce, sp.key_max)


def step_curve(s: np.ndarray, e: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Count of covering intervals as a step function (t, a), a[i] holding on [t[i], t[i + 1]),
    from time 0 (given each SM's disjoint union, the count is a number of SMs)."""
    if s.size == 0:
        return np.zeros(1, np.int64), np.zeros(1, np.int64)
    t = np.unique(np.concatenate((s, e)))
    a = np.searchsorted(np.sort(s), t, side="right") - np.searchsorted(np.sort(e), t, side="right")
    change = np.concatenate(([True], a[1:] != a[:-1]))
    t, a = t[change], a[change].astype(np.int64)
    if t[0] > 0:
        t, a = np.concatenate(([0], t)), np.concatenate(([0], a))
    return t.astype(np.int64), a


def _tail_wave(sp: _Spans, P: int, tiles_id, finish, occ_s, occ_e) -> TailWave:  # noqa: N803
    tiles = int(np.unique(tiles_id).size)
    waves = tiles / P
    if tiles == 0:
        return TailWave(0, 0.0, None, None, None, None, None)
    full = -(-tiles // P)  # ceil(waves), in integers
    bound = (full * P - tiles) / (full * P)
    t_first_idle = int(finish.min())
    length = sp.t1 - t_first_idle
    occupancy = None
    if length > 0:
        # ∫ a(t) dt over [t_first_idle, T1]: the SM tile unions clipped to the window.
        lo = t_first_idle - sp.t0
        rel_s, rel_e = occ_s % sp.width, occ_e % sp.width
        inside = np.maximum(np.minimum(rel_e, sp.duration) - np.maximum(rel_s, lo), 0)
        occupancy = int(inside.sum()) / (P * length)
    return TailWave(tiles, waves, bound, t_first_idle, length, length / sp.duration, occupancy)


# -- JSON helpers -----------------------------------------------------------------------------
def _frame_columns(df: pd.DataFrame) -> dict[str, list]:
    out = {}
    for c in df.columns:
        col = df[c]
        if col.isna().any():
            out[c] = [None if pd.isna(v) else _jsonable(v) for v in col.tolist()]
        else:
            out[c] = col.to_numpy().tolist()
    return out


def _jsonable(o):
    if isinstance(o, dict):
        return {str(k): _jsonable(v) for k, v in o.items()}
    if isinstance(o, (list, tuple)):
        return [_jsonable(v) for v in o]
    if isinstance(o, np.integer):
        return int(o)
    if isinstance(o, (float, np.floating)):
        return None if math.isnan(o) else float(o)
    if isinstance(o, np.ndarray):
        return _jsonable(o.tolist())
    return o


# -- trace metadata ---------------------------------------------------------------------------
def metrics_metadata(metrics: Metrics, prefix: str = "metrics.") -> dict[str, str | int | float]:
    """The metrics as a flat dict of numbers and strings, for a trace's metadata (Perfetto, Chrome).

    Keys are `prefix` + the keys of Metrics.scalars(), plus the run's label, P, S, span count,
    T0/T1 and the raw ns behind the fractions; undefined values (None) are left out.
    """
    m = metrics
    flat: dict[str, Any] = {
        "label": m.label,
        "sm_count": m.sm_count,
        "sms_recorded": m.sms_recorded,
        "span_count": m.span_count,
        "t0_ns": m.t0_ns,
        "t1_ns": m.t1_ns,
        "tc_busy_ns": m.tensor_core.busy_ns,
        "tc_idle_ns": m.tensor_core.idle_ns,
        "tc_head_ns": m.tensor_core.head_ns,
        "tc_gap_ns": m.tensor_core.gap_ns,
        "tc_tail_ns": m.tensor_core.tc_tail_ns,
        "epilogue_ns": m.epilogue.epilogue_ns,
        "epilogue_overlapped_ns": m.epilogue.overlapped_ns,
        "occupancy_integral_sm_ns": m.occupancy.integral_sm_ns,
        "tail_wave_t_first_idle_ns": m.tail_wave.t_first_idle_ns,
    }
    flat.update(m.scalars())
    out: dict[str, str | int | float] = {}
    for key, value in flat.items():
        value = _jsonable(value)
        if value is None:
            continue
        out[prefix + key] = value if isinstance(value, (str, int, float)) else str(value)
    return out
