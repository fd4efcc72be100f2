"""What-if scheduling: replay a run's measured per-tile service times on P SMs under another rule.

This is a MODEL, not a measurement. It takes from the trace, for every tile, the times measured on
the CTA that served it, and replays them under a scheduling rule on another number of SMs.

Workers and units. A persistent kernel (v6-v8: fewer CTAs than tiles, one CTA per SM) schedules
its work per cluster of `launch.cluster` CTAs: the k-th tiles of the CTAs of one cluster form a
*unit*, handed out together (multicast loads keep them in step); without clusters a unit is one
tile. The worker is the cluster. A kernel with one tile per CTA (v1-v5) is scheduled by the
hardware, CTA after CTA on each SM: the worker is the SM and a unit is one tile.

What a unit costs its worker, measured per unit (times from the trace's T0):
  pace      from the unit's start (its tiles' earliest span) to the next unit's start on the same
            worker. A persistent kernel overlaps the epilogue of one tile with the mainloop of the
            next, so the pace is about a mainloop, not a tile's whole duration. A worker's last
            unit has no successor: its pace is estimated as its mainloop (start to last MMA end)
            plus the median over units with a successor of (pace - mainloop); without MMA spans, as
            its longest tile minus the median of (longest tile - pace).
  claim     the part of a dynamic scheduler's tile claim (sched_claim spans tagged with the
            tile) that held the worker up: the claim time after the previous tile's last MMA
            (all of it for a worker's first unit). Static replays drop it; dynamic replays pay it
            (or `claim_ns` per unit when given: a static run measured no claims).
  tiles     each tile's offset from the unit's start (after the claim) and its duration.
Each worker is ready when its first unit started in the trace (launch and setup).

Rules, over the run's units in its order:
  static    the u-th unit to worker u mod workers (the persistent kernels' rule: cluster c takes
            units c, c + clusters, ...; without clusters, CTA j mod grid_ctas takes tile j);
  dynamic   the next unit to the worker that frees first (an atomic tile counter; also how the
            hardware hands out CTAs, one CTA per SM).
A worker starts a unit when it frees and frees again `pace` later; the predicted kernel ends when
the last tile ends, plus the trace's own trailer (T1 - last tile end). The run's order: a static
run's k-th unit of worker c is u = c + k * workers; a dynamic run's units follow the tile counter
when its claims record the counter value in the span's kblock field, else the order they started.

Replaying a run under its own rule gives back its measured makespan exactly for static runs and,
for dynamic ones, up to the last units' estimated paces (`replay_error` says how close). Each tile
keeps its measured time whatever else runs: on the H100 a v6 tile takes 10 to 15 % longer with all
132 SMs busy than with 66, so predictions for another grid size err by about that much (see
docs/metrics.md). The loop is over units (thousands), never over spans.
"""
from __future__ import annotations

import heapq
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from ..paths import GemmtraceError
from . import intervals
from .metrics import MMA_GROUP, _device_sm_count, _jsonable, _label, _prepare, compute_metrics, step_curve

SCHEDULERS = ("static", "dynamic")
SCHEDULE_GROUP = "schedule"  # the tag group of a dynamic scheduler's tile claims (sched_claim)
MODEL_NOTE = (
    "what-if model, not a measurement: it replays the tile service times measured in this trace "
    "under each scheduling rule"
)


# -- results ----------------------------------------------------------------------------------
@dataclass(frozen=True, eq=False)
class TileService:
    """What the replay needs from a run (module docstring). Times are ns from the run's T0."""

    units: pd.DataFrame  # in the run's order: worker, start_ns, pace_ns, claim_ns, pace_measured
    tiles: pd.DataFrame  # unit (row of `units`), rank (CTA in the cluster), tile, sm, offset_ns
    #                      (from the unit's start after its claim), duration_ns, claimed (bool),
    #                      start_ns, end_ns (as recorded)
    ready_ns: np.ndarray  # per recorded worker (in worker order): its first unit's start
    cluster: int  # CTAs per worker of a persistent kernel (1 for one tile per CTA)
    persistent: bool
    scheduler: str  # the recorded schedule: static, dynamic, or hardware (one tile per CTA)
    duration_ns: int  # D of the run
    trailer_ns: int  # T1 minus the last tile's end


@dataclass(frozen=True, eq=False)
class Schedule:
    """One replayed schedule. Times are ns from the run's T0."""

    scheduler: str
    sm_count: int  # P the schedule ran on
    workers: int  # CTAs (persistent; clusters x cluster size) or SMs (one tile per CTA)
    makespan_ns: int
    kernel_ms: float | None  # measured kernel time scaled by makespan / measured D (None: not recorded)
    mean_occupancy: float  # ∫ a(t) dt / (P * makespan)
    tail_t_first_idle_ns: int | None
    tail_ns: int | None
    tail_fraction: float | None
    tail_occupancy: float | None
    finish_spread_ns: int | None
    tiles_per_worker_min: int
    tiles_per_worker_max: int
    occupancy_t_ns: np.ndarray
    occupancy_a: np.ndarray
    tiles: pd.DataFrame  # tile, worker (CTA or SM slot), start_ns, end_ns

    def scalars(self) -> dict[str, Any]:
        return {
            "makespan_ns": self.makespan_ns,
            "kernel_ms": self.kernel_ms,
            "mean_occupancy": self.mean_occupancy,
            "tail_wave_ns": self.tail_ns,
            "tail_wave_fraction": self.tail_fraction,
            "tail_wave_occupancy": self.tail_occupancy,
            "finish_spread_ns": self.finish_spread_ns,
            "tiles_per_worker_min": self.tiles_per_worker_min,
            "tiles_per_worker_max": self.tiles_per_worker_max,
        }


@dataclass(frozen=True, eq=False)
class Simulation:
    label: str
    model: str  # MODEL_NOTE: say it wherever the numbers are shown
    recorded_scheduler: str
    persistent: bool
    cluster: int
    tiles: int
    recorded_sm_count: int
    recorded_workers: int  # CTAs (persistent) or SMs that ran tiles
    measured_makespan_ns: int  # D of the trace
    measured_kernel_ms: float | None
    measured: dict[str, Any]  # the trace's own values of Schedule.scalars()' keys (from its metrics)
    replay: Schedule  # the run's own rule on its own workers: checks the model against the trace
    replay_error: float  # replay.makespan / measured makespan - 1
    schedules: tuple[Schedule, ...]  # the requested what-ifs
    service: TileService

    def schedule(self, scheduler: str) -> Schedule:
        for s in self.schedules:
            if s.scheduler == scheduler:
                return s
        raise GemmtraceError(f"the simulation has no {scheduler!r} schedule.")

    def to_dict(self, *, curves: bool = False) -> dict[str, Any]:
        def one(s: Schedule) -> dict[str, Any]:
            d = {"scheduler": s.scheduler, "sm_count": s.sm_count, "workers": s.workers, **s.scalars()}
            if curves:
                d["occupancy"] = {"t_ns": s.occupancy_t_ns.tolist(), "a": s.occupancy_a.tolist()}
            return _jsonable(d)

        return {
            "label": self.label,
            "model": self.model,
            "recorded_scheduler": self.recorded_scheduler,
            "persistent": self.persistent,
            "cluster": self.cluster,
            "tiles": self.tiles,
            "recorded_sm_count": self.recorded_sm_count,
            "recorded_workers": self.recorded_workers,
            "measured_makespan_ns": self.measured_makespan_ns,
            "measured_kernel_ms": self.measured_kernel_ms,
            "measured": _jsonable(self.measured),
            "replay": one(self.replay),
            "replay_error": self.replay_error,
            "schedules": [one(s) for s in self.schedules],
        }


# -- measuring the service times ----------------------------------------------------------------
def tile_services(run) -> TileService:
    """Units, their pace and claim, their tiles, the workers' ready times and the run's order."""
    spans = run.spans
    sp = _prepare(spans, run.tag_groups)
    meta = run.meta if isinstance(run.meta, dict) else {}
    launch = meta.get("launch") if isinstance(meta.get("launch"), dict) else {}
    n_tiles_meta = _positive_int(launch.get("tiles"))
    grid_meta = _positive_int(launch.get("grid_ctas"))

    tile = sp.tile.astype(np.int64)
    ok = tile >= 0
    if n_tiles_meta is not None:
        ok &= tile < n_tiles_meta  # a claim past the last tile (the counter ran out) serves no tile
    if not ok.any():
        raise GemmtraceError("the run has no spans tagged with a tile, so there are no tile times to replay.")
    cta = spans["cta"].to_numpy().astype(np.int64) if "cta" in spans.columns else np.zeros(tile.size, np.int64)
    kblock = spans["kblock"].to_numpy().astype(np.int64) if "kblock" in spans.columns else np.full(tile.size, -1)
    sm = sp.sm_ids[sp.sm_idx].astype(np.int64)
    n_tiles = int(tile[ok].max()) + 1

    # A persistent kernel has CTAs that serve several tiles (or a grid smaller than the tiles).
    cta_keys, _, _ = intervals.group_min_max(np.where(ok, cta * n_tiles + tile, -1), sp.start, sp.end)
    persistent = bool(np.bincount(cta_keys // n_tiles).max() > 1) or (
        grid_meta is not None and n_tiles_meta is not None and grid_meta < n_tiles_meta
    )
    cluster = (_positive_int(launch.get("cluster")) or 1) if persistent else 1
    slot_ids, slot_idx = intervals.dense_index(cta if persistent else sm)  # a CTA, or an SM

    # One item per (slot, tile): the tile in flight there, and what the replay needs of it.
    key = np.where(ok, slot_idx * n_tiles + tile, -1)
    keys, start, end = intervals.group_min_max(key, sp.start, sp.end)

    def per_item(rows: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(min lo, max hi) over each item's rows selected by `rows`; -1 for items with none."""
        k, vlo, vhi = intervals.group_min_max(np.where(rows, key, -1), lo, hi)
        out_lo, out_hi = np.full(keys.size, -1, np.int64), np.full(keys.size, -1, np.int64)
        at = np.searchsorted(keys, k)
        out_lo[at], out_hi[at] = vlo, vhi
        return out_lo, out_hi

    claims = ok & (sp.group == sp.group_code(SCHEDULE_GROUP))
    _, last_mma = per_item(sp.group == sp.group_code(MMA_GROUP), sp.start, sp.end)
    claim_start, claim_end = per_item(claims, sp.start, sp.end)
    counter, _ = per_item(claims & (kblock >= 0), kblock, kblock)  # the counter value, when recorded
    _, sm_of = per_item(ok, sm, sm)

    # Items per slot in start order; k = the item's step on its slot.
    order = np.lexsort((keys % n_tiles, start, keys // n_tiles))
    keys, start, end, last_mma, claim_start, claim_end, counter, sm_of = (
        a[order] for a in (keys, start, end, last_mma, claim_start, claim_end, counter, sm_of)
    )
    slot, t = keys // n_tiles, keys % n_tiles
    n = keys.size
    first_on_slot = np.ones(n, bool)
    first_on_slot[1:] = slot[1:] != slot[:-1]
    slot_start = np.flatnonzero(first_on_slot)
    step = np.arange(n) - np.repeat(slot_start, np.diff(np.append(slot_start, n)))
    # The claim time that held the slot up: after the previous tile's last MMA on it.
    prev_mma = np.where(first_on_slot, -1, np.roll(last_mma, 1))
    held_from = np.where(prev_mma >= 0, np.maximum(claim_start, prev_mma), claim_start)
    item_claim = np.where(claim_start >= 0, np.maximum(claim_end - held_from, 0), 0)

    # Units: the step-k items of the CTAs of one cluster (one item without clusters).
    raw_slot = slot_ids[slot]
    worker_raw = raw_slot // cluster if persistent else raw_slot
    rank = raw_slot % cluster if persistent else np.zeros(n, np.int64)
    worker_ids, worker = intervals.dense_index(worker_raw)
    n_steps = int(step.max()) + 1
    unit_keys, unit_of = np.unique(worker * n_steps + step, return_inverse=True)
    n_units = unit_keys.size
    u_worker, u_step = unit_keys // n_steps, unit_keys % n_steps

    def unit_reduce(fn, values, empty):
        out = np.full(n_units, empty, np.int64)
        fn.at(out, unit_of, values)
        return out

    u_start = unit_reduce(np.minimum, start, np.iinfo(np.int64).max)
    u_claim = np.minimum(unit_reduce(np.maximum, item_claim, 0), unit_reduce(np.maximum, end, 0) - u_start)
    u_mma = unit_reduce(np.maximum, last_mma, -1)
    u_end = unit_reduce(np.maximum, end, np.iinfo(np.int64).min)
    u_counter = unit_reduce(np.minimum, np.where(counter >= 0, counter, np.iinfo(np.int64).max), np.iinfo(np.int64).max)
    # Units are sorted by (worker, step): the next unit of a worker is the next row.
    u_first = np.ones(n_units, bool)
    u_first[1:] = u_worker[1:] != u_worker[:-1]
    has_next = np.append(~u_first[1:], False)
    pace = np.zeros(n_units, np.int64)
    pace[:-1] = np.where(has_next[:-1], u_start[1:] - u_start[:-1], 0)
    mainloop = np.where(u_mma >= 0, u_mma - u_start, -1)
    pace[~has_next] = _estimate_pace(pace, u_end - u_start, mainloop, has_next)
    u_claim = np.minimum(u_claim, np.where(has_next, pace, u_claim))
    ready = u_start[u_first] - sp.t0  # one per worker, in worker order

    recorded = _recorded_scheduler(meta, sp, persistent)
    if recorded == "static":
        workers = (grid_meta // cluster if grid_meta else int(worker_ids.max()) + 1)
        unit_order = np.lexsort((u_worker, u_step * workers + worker_ids[u_worker]))  # u = c + k * workers
    elif (u_counter < np.iinfo(np.int64).max).all() and np.unique(u_counter).size == n_units:
        unit_order = np.argsort(u_counter, kind="stable")  # the claims recorded the tile counter's values
    else:
        unit_order = np.lexsort((u_worker, u_start))  # the order the units started in
    position = np.empty(n_units, np.int64)
    position[unit_order] = np.arange(n_units)

    # Who is in flight during a claim: the CTAs whose claim spans were tagged with the tile, or,
    # in a unit that recorded none (a static run replayed as dynamic), its first CTA.
    claimed = claim_start >= 0
    unit_claimed = unit_reduce(np.maximum, claimed.astype(np.int64), 0) > 0
    min_rank = unit_reduce(np.minimum, rank, np.iinfo(np.int64).max)
    claimed |= ~unit_claimed[unit_of] & (rank == min_rank[unit_of])
    work_from = u_start[unit_of] + u_claim[unit_of]
    item_work_start = np.maximum(start, work_from)
    units = pd.DataFrame(
        {
            "worker": u_worker,
            "start_ns": u_start - sp.t0,
            "pace_ns": pace,
            "claim_ns": u_claim,
            "pace_measured": has_next,
        }
    ).iloc[unit_order].reset_index(drop=True)
    tiles = pd.DataFrame(
        {
            "unit": position[unit_of],
            "rank": rank,
            "tile": t,
            "sm": sm_of,
            "offset_ns": item_work_start - work_from,
            "duration_ns": end - item_work_start,
            "claimed": claimed,
            "start_ns": start - sp.t0,
            "end_ns": end - sp.t0,
        }
    ).sort_values(["unit", "rank"], kind="stable").reset_index(drop=True)
    trailer = sp.t1 - int(end.max())
    return TileService(units, tiles, ready, cluster, persistent, recorded, sp.duration, trailer)


def _estimate_pace(pace, longest, mainloop, has_next) -> np.ndarray:
    """Pace of each worker's last unit (module docstring), learned from the units with a successor."""
    last = ~has_next
    est = longest[last].astype(np.int64).copy()
    if not has_next.any():
        return est  # one unit per worker: no overlap to learn from
    with_mma = has_next & (mainloop >= 0)
    use_mma = last & (mainloop >= 0)
    if with_mma.any():
        lead = int(np.median(pace[with_mma] - mainloop[with_mma]))
        est = np.where(use_mma[last], mainloop[last] + lead, est)
    rest = last & ~use_mma
    if rest.any():
        overlap = int(np.median(longest[has_next] - pace[has_next]))
        est = np.where(rest[last], longest[last] - overlap, est)
    return np.maximum(est, 0)


def _recorded_scheduler(meta: dict, sp, persistent: bool) -> str:
    if not persistent:
        return "hardware"
    sched = meta.get("scheduler")
    if sched in SCHEDULERS:
        return str(sched)
    code = sp.group_code(SCHEDULE_GROUP)
    return "dynamic" if code >= 0 and bool((sp.group == code).any()) else "static"


def _positive_int(v) -> int | None:
    if isinstance(v, bool):
        return None
    try:
        i = int(v)
    except (TypeError, ValueError):
        return None
    return i if i > 0 else None


# -- replay -----------------------------------------------------------------------------------
def replay(service: TileService, scheduler: str, workers: int, *, claim_ns: int | None = None) -> pd.DataFrame:
    """Each tile of service.tiles under `scheduler` on `workers` workers: tile, slot (the CTA,
    worker * cluster + rank, or the SM), start_ns, end_ns (in flight, claim included)."""
    if scheduler not in SCHEDULERS:
        raise GemmtraceError(f"unknown scheduler {scheduler!r}; choose from {', '.join(SCHEDULERS)}.")
    if workers < 1:
        raise GemmtraceError(f"a replay needs at least one worker, not {workers}.")
    units = service.units
    measured_claim = units["claim_ns"].to_numpy(np.int64)
    claim = np.zeros_like(measured_claim)
    if scheduler == "dynamic":
        claim = measured_claim if claim_ns is None else np.full_like(measured_claim, int(claim_ns))
    pace = units["pace_ns"].to_numpy(np.int64) - measured_claim + claim
    worker, start = _assign(scheduler, pace, _ready(service, workers))

    tiles = service.tiles
    u = tiles["unit"].to_numpy()
    work = start[u] + claim[u] + tiles["offset_ns"].to_numpy(np.int64)
    end = work + tiles["duration_ns"].to_numpy(np.int64)
    # A tile whose CTA made the claim is in flight from the claim on; the others from their work.
    in_flight = np.where(tiles["claimed"].to_numpy(), np.minimum(start[u], work), work)
    slot = worker[u] * service.cluster + tiles["rank"].to_numpy()
    return pd.DataFrame({"tile": tiles["tile"].to_numpy(), "slot": slot, "start_ns": in_flight, "end_ns": end})


def _assign(scheduler: str, pace: np.ndarray, ready: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(worker, start) of each unit, in order, under the rule."""
    n, workers = pace.size, ready.size
    if scheduler == "static":
        worker = np.arange(n) % workers
        # Per worker, its units in order: start = ready + the paces of the units before it.
        order = np.argsort(worker, kind="stable")
        p = pace[order]
        before = np.cumsum(p) - p
        w_sorted = worker[order]
        first = np.ones(n, bool)
        first[1:] = w_sorted[1:] != w_sorted[:-1]
        base = np.repeat(before[first], np.diff(np.append(np.flatnonzero(first), n)))
        start = np.empty(n, np.int64)
        start[order] = ready[w_sorted] + before - base
        return worker, start
    worker = np.empty(n, np.int64)
    start = np.empty(n, np.int64)
    heap = [(int(ready[i]), i) for i in range(workers)]
    heapq.heapify(heap)
    for j, pj in enumerate(pace.tolist()):  # a loop over units: each goes to the earliest free worker
        t, i = heap[0]
        worker[j], start[j] = i, t
        heapq.heapreplace(heap, (t + pj, i))
    return worker, start


def _ready(service: TileService, workers: int) -> np.ndarray:
    """Ready times of `workers` workers: the recorded ones in worker order, then their median."""
    r = np.asarray(service.ready_ns, np.int64)
    if workers <= r.size:
        return r[:workers]
    return np.concatenate((r, np.full(workers - r.size, int(np.median(r)), np.int64)))


def _schedule(service: TileService, scheduler: str, sm_count: int, workers: int, measured_ms: float | None,
              claim_ns: int | None = None) -> Schedule:
    placed = replay(service, scheduler, workers, claim_ns=claim_ns)
    slot = placed["slot"].to_numpy()
    start, end = placed["start_ns"].to_numpy(), placed["end_ns"].to_numpy()
    slots = workers * service.cluster
    makespan = int(end.max()) + service.trailer_ns
    width = makespan + 1
    us, ue = intervals.union(intervals.composite(slot, start, width), intervals.composite(slot, end, width),
                             slots * width - 1)
    t, a = step_curve(us % width, ue % width)
    integral = int((ue - us).sum())
    counts = np.bincount(slot, minlength=slots)
    finish = np.full(slots, -1, np.int64)
    np.maximum.at(finish, slot, end)
    done = finish[counts > 0]
    t_first_idle = int(done.min())
    tail = makespan - t_first_idle
    tail_occ = None
    if tail > 0:
        inside = np.maximum(np.minimum(ue % width, makespan) - np.maximum(us % width, t_first_idle), 0)
        tail_occ = int(inside.sum()) / (sm_count * tail)
    d = service.duration_ns
    return Schedule(
        scheduler=scheduler,
        sm_count=sm_count,
        workers=slots,
        makespan_ns=makespan,
        kernel_ms=measured_ms * makespan / d if (measured_ms and d) else None,
        mean_occupancy=integral / (sm_count * makespan) if makespan else 0.0,
        tail_t_first_idle_ns=t_first_idle,
        tail_ns=tail,
        tail_fraction=tail / makespan if makespan else None,
        tail_occupancy=tail_occ,
        finish_spread_ns=int(done.max() - done.min()),
        tiles_per_worker_min=int(counts.min()),
        tiles_per_worker_max=int(counts.max()),
        occupancy_t_ns=t,
        occupancy_a=a,
        tiles=placed.rename(columns={"slot": "worker"}),
    )


def workers_for(service: TileService, recorded_sm_count: int, sm_count: int) -> int:
    """How many workers (clusters, or SMs for one tile per CTA) a launch on `sm_count` SMs gets:
    a persistent grid that filled the device (or was cut to the units) fills the new one the same
    way, one CTA per SM; a grid the user limited stays limited."""
    if not service.persistent:
        return sm_count
    c = service.cluster
    recorded = len(service.ready_ns)
    n_units = len(service.units)
    fits = max(sm_count // c, 1)
    if recorded >= min(recorded_sm_count // c, n_units):
        return min(fits, n_units)
    return min(recorded, fits)


def simulate(run, sms: int | None = None, schedulers=SCHEDULERS, *, workers: int | None = None,
             claim_ns: int | None = None, metrics=None) -> Simulation:
    """Predict makespan, occupancy and tail of `run`'s tiles under each scheduler on `sms` SMs.

    sms: the SM count to replay on (default: the run's device). workers: CTAs of a persistent
    kernel (default: what its grid rule gives on `sms` SMs; whole clusters). claim_ns: what a
    dynamic claim costs each unit (default: as measured; zero for a run that made no claims).
    metrics: the run's compute_metrics(run), when the caller has it already (saves computing it twice).
    """
    schedulers = tuple(schedulers)
    bad = [s for s in schedulers if s not in SCHEDULERS]
    if bad or not schedulers:
        raise GemmtraceError(f"unknown scheduler {bad[0] if bad else ''!r}; choose from {', '.join(SCHEDULERS)}.")
    if claim_ns is not None and claim_ns < 0:
        raise GemmtraceError(f"the claim time must not be negative, not {claim_ns} ns.")
    service = tile_services(run)
    meta = run.meta if isinstance(run.meta, dict) else {}
    recorded_p = _device_sm_count(meta, int(run.spans["sm"].nunique()))
    p = recorded_p if sms is None else int(sms)
    if p < 1:
        raise GemmtraceError(f"the SM count must be positive, not {sms}.")
    c = service.cluster
    if workers is None:
        n_workers = workers_for(service, recorded_p, p)
    else:
        if workers < 1 or workers % c:
            raise GemmtraceError(f"the CTA count must be a positive multiple of the cluster size {c}, not {workers}.")
        n_workers = workers // c
    if n_workers * c > p:
        raise GemmtraceError(f"{n_workers * c} CTAs do not fit on {p} SMs (one CTA per SM).")
    from .compare import read_timing

    measured_ms = read_timing(meta).kernel_ms
    own = "static" if service.scheduler == "static" else "dynamic"
    replayed = _schedule(service, own, recorded_p, len(service.ready_ns), measured_ms)
    schedules = tuple(_schedule(service, s, p, n_workers, measured_ms, claim_ns) for s in schedulers)
    d = service.duration_ns
    m = metrics if metrics is not None else compute_metrics(run)
    per_slot = service.tiles.groupby(service.tiles["sm"]).size()
    measured = {
        "makespan_ns": d,
        "kernel_ms": measured_ms,
        "mean_occupancy": m.occupancy.mean,
        "tail_wave_ns": m.tail_wave.length_ns,
        "tail_wave_fraction": m.tail_wave.fraction,
        "tail_wave_occupancy": m.tail_wave.occupancy,
        "finish_spread_ns": m.load_balance.finish_spread_ns,
        "tiles_per_worker_min": int(per_slot.min()),
        "tiles_per_worker_max": int(per_slot.max()),
    }
    return Simulation(
        label=_label(run),
        model=MODEL_NOTE,
        recorded_scheduler=service.scheduler,
        persistent=service.persistent,
        cluster=c,
        tiles=len(service.tiles),
        recorded_sm_count=recorded_p,
        recorded_workers=len(service.ready_ns) * c,
        measured_makespan_ns=d,
        measured_kernel_ms=measured_ms,
        measured=measured,
        replay=replayed,
        replay_error=replayed.makespan_ns / d - 1.0,
        schedules=schedules,
        service=service,
    )


__all__ = ["MODEL_NOTE", "SCHEDULERS", "Schedule", "Simulation", "TileService", "replay", "simulate", "tile_services",
           "workers_for"]
