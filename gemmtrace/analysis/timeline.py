"""What each warp role of each SM does over time, binned for plotting (the report's timeline).

A run may hold millions of spans, far more than a browser can draw as rectangles. The timeline is
therefore a grid: one row per (SM, role) that recorded, `bins` equal time bins over [T0, T1], and in
each cell the tag group that covered most of the bin, or idle when the row's spans together cover
less than half of it. Coverage is exact (interval unions measured at the bin edges), so a cell
never shows a group that was not there; only its resolution is coarse. Vectorized like metrics.py.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from . import intervals
from .metrics import _codes, _prepare
from .. import tags as tagdefs

IDLE = "idle"
MIN_BIN_NS = 32  # no finer than %globaltimer's step on H100: a bin never holds less than a tick


@dataclass(frozen=True, eq=False)
class RoleTimeline:
    sm: np.ndarray  # per row: SM id
    role: list[str]  # per row: role name
    edges_ns: np.ndarray  # bins + 1 edges, relative to T0
    states: list[str]  # state names: IDLE first, then tag groups
    state: np.ndarray  # rows x bins, int8 index into states
    busy: np.ndarray  # rows x bins, float32: fraction of the bin covered by any span of the row

    @property
    def row_labels(self) -> list[str]:
        return [f"SM {s} {r}" for s, r in zip(self.sm.tolist(), self.role)]


def role_timeline(spans, bins: int = 600, tag_groups: dict[str, str] | None = None) -> RoleTimeline:
    """Bin a spans table into an (SM, role) x time grid of dominant tag groups (module docstring);
    `tag_groups` is the run's tag -> group map (default gemmtrace's own)."""
    sp = _prepare(spans, tag_groups)
    role_codes, role_cats = _codes(spans["role"], tagdefs.role_names(), "role")
    n_roles = len(role_cats)
    bins = int(max(1, min(bins, -(-sp.duration // MIN_BIN_NS))))
    row_key = sp.sm_idx.astype(np.int64) * n_roles + role_codes
    row_ids, row = intervals.dense_index(row_key)
    n_rows = row_ids.size
    width = sp.duration + 1
    edges = np.round(np.linspace(0, sp.duration, bins + 1)).astype(np.int64)
    bin_len = np.diff(edges).astype(np.float64)
    grid_edges = (np.arange(n_rows, dtype=np.int64)[:, None] * width + edges[None, :]).reshape(-1)
    key_max = n_rows * width - 1

    cs = intervals.composite(row, sp.start - sp.t0, width)
    ce = intervals.composite(row, sp.end - sp.t0, width)
    order = intervals.argsort_keys(cs, key_max)
    cs, ce, group = cs[order], ce[order], sp.group[order]

    def coverage(sel: np.ndarray) -> np.ndarray:
        us, ue = intervals.union_sorted(cs[sel], ce[sel])
        if us.size == 0:
            return np.zeros((n_rows, bins))
        f = intervals.measure_before(us, ue, grid_edges).reshape(n_rows, bins + 1)
        return np.diff(f, axis=1) / bin_len

    present = np.flatnonzero(np.bincount(group, minlength=len(sp.groups)))
    per_group = np.stack([coverage(group == g) for g in present]) if present.size else np.zeros((0, n_rows, bins))
    busy = coverage(np.ones(cs.size, bool))
    state = np.zeros((n_rows, bins), np.int8)
    if present.size:
        state = (np.argmax(per_group, axis=0) + 1).astype(np.int8)
        state[busy < 0.5] = 0
    return RoleTimeline(
        sm=sp.sm_ids[row_ids // n_roles],
        role=[role_cats[i] for i in (row_ids % n_roles).tolist()],
        edges_ns=edges,
        states=[IDLE] + [sp.groups[g] for g in present.tolist()],
        state=state,
        busy=busy.astype(np.float32),
    )
