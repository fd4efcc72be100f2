"""Synthetic runs whose answers are known: a GEMM-like trace built from per-tile durations.

Used by the tests (hand-checkable metrics, what-if replay validated against a run generated with
the other scheduler), by bench/metrics_speed.py (10 million spans), and by anyone who wants to try
the analysis without a GPU. Nothing here touches a device.

The model of a kernel, per CTA (one per SM):
  persistent (v6-v8 style): a `setup` span, then for each tile the CTA serves, in order:
    dynamic only: a scheduler-role `sched_claim` span of `claim_ns`, tagged with the claimed tile;
    the mainloop: per k-block a consumer `wait_full` then `mma` span (the producer's `tma_issue`
    and `wait_empty` spans run `producer_lead_ns` ahead of it);
    the epilogue: an epilogue-role `epilogue` span that starts when the mainloop ends and overlaps
    the next tile's claim and mainloop.
  non-persistent (v1-v5 style, grid = tiles): each CTA serves one tile on the consumer warp alone
  (setup, then wait_full/mma per k-block, then the epilogue, all serialized); the hardware hands the
  next CTA (in CTA order) to the SM that frees first, `launch_gap_ns` after it frees.
Tile durations depend on the tile id only (seeded), so a static and a dynamic run made with the
same seed share them: the dynamic run is exactly what the what-if replay of the static one predicts.
"""
from __future__ import annotations

import heapq

import numpy as np

from .. import tags as tagdefs
from ..trace import Run, spans_frame


def tile_durations(tiles: int, kblocks: int, *, kblock_ns: int = 400, epilogue_ns: int = 1500,
                   jitter: float = 0.2, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """(k-block duration, epilogue duration) per tile id, in ns, seeded by `seed` alone."""
    rng = np.random.default_rng(seed)
    kb = np.round(kblock_ns * (1 + jitter * rng.uniform(-1, 1, tiles))).astype(np.int64)
    epi = np.round(epilogue_ns * (1 + jitter * rng.uniform(-1, 1, tiles))).astype(np.int64)
    return np.maximum(kb, 2), np.maximum(epi, 1)


def synthetic_run(
    *,
    sms: int = 8,
    tiles: int = 20,
    kblocks: int = 4,
    scheduler: str = "static",
    persistent: bool = True,
    cluster: int = 1,
    device_sms: int | None = None,
    kblock_ns: int = 400,
    epilogue_ns: int = 1500,
    jitter: float = 0.2,
    claim_ns: int = 100,
    setup_ns: int = 300,
    launch_skew_ns: int = 200,
    launch_gap_ns: int = 500,
    producer_lead_ns: int = 0,
    wait_fraction: float = 0.1,
    timer_step_ns: int = 0,
    with_producer: bool = True,
    seed: int = 0,
) -> Run:
    """A run of `tiles` tiles on `sms` SMs (CTAs for persistent kernels, SM slots otherwise).

    Persistent kernels work in clusters of `cluster` CTAs: unit u is the tiles u * cluster + r
    (r < cluster), CTA c * cluster + r of cluster c serves tile u * cluster + r, and a cluster
    starts its next unit when the slowest of its mainloops ends (multicast keeps them in step).
    Static: unit u goes to cluster u mod clusters. Dynamic (and non-persistent, where a unit is one
    tile and the worker an SM): the next unit goes to the worker that frees first, ties to the
    lowest index; under dynamic scheduling the cluster's rank-0 CTA claims each unit first. The CTA
    w runs on SM (w * 5) mod device_sms when that is coprime to 5, so SM ids differ from CTA ids.
    """
    if scheduler not in ("static", "dynamic"):
        raise ValueError(f"scheduler must be static or dynamic, not {scheduler!r}")
    C = int(cluster) if persistent else 1
    if C < 1 or sms % C:
        raise ValueError(f"sms ({sms}) must be a multiple of the cluster size ({cluster})")
    P = int(device_sms or sms)
    rng = np.random.default_rng(seed + 1)
    kb_ns, epi_ns = tile_durations(tiles, kblocks, kblock_ns=kblock_ns, epilogue_ns=epilogue_ns,
                                   jitter=jitter, seed=seed)
    mainloop = kb_ns * kblocks
    workers = sms // C
    ready = setup_ns + rng.integers(0, launch_skew_ns + 1, workers)  # per worker: first unit may start
    claim = claim_ns if (persistent and scheduler == "dynamic") else 0
    unit_of_tile = np.arange(tiles) // C
    n_units = int(unit_of_tile[-1]) + 1
    unit_mainloop = np.zeros(n_units, np.int64)
    np.maximum.at(unit_mainloop, unit_of_tile, mainloop)

    # The schedule: a loop over units (thousands), not spans.
    u_worker = np.empty(n_units, np.int64)
    u_begin = np.empty(n_units, np.int64)  # the unit's first span (the claim, or the mainloops)
    if persistent and scheduler == "static":
        free = ready.copy()
        for u in range(n_units):
            w = u % workers
            u_worker[u], u_begin[u] = w, free[w]
            free[w] += unit_mainloop[u]
    else:
        heap = [(int(ready[w]) if persistent else 0, w) for w in range(workers)]
        heapq.heapify(heap)
        for u in range(n_units):
            t, w = heapq.heappop(heap)
            u_worker[u], u_begin[u] = w, t
            if persistent:
                busy = claim + int(unit_mainloop[u])
            else:
                busy = setup_ns + int(mainloop[u] + epi_ns[u]) + launch_gap_ns
            heapq.heappush(heap, (t + busy, w))
    worker = u_worker[unit_of_tile]
    begin = u_begin[unit_of_tile]
    rank = np.arange(tiles) % C
    pre = setup_ns if not persistent else 0
    m0 = begin + claim + pre  # mainloop start
    m1 = m0 + mainloop  # mainloop end = epilogue start
    sm_of_worker = (np.arange(sms) * 5) % P if np.gcd(P, 5) == 1 else np.arange(sms)
    cta_of_tile = worker * C + rank if persistent else np.arange(tiles)

    columns = ("cta", "role", "tag", "tile", "kblock", "start", "end", "warp")
    cols: dict[str, list[np.ndarray]] = {k: [] for k in columns}
    role_id = {n: i for i, n in enumerate(tagdefs.role_names())}
    tag_id = {n: i for i, n in enumerate(tagdefs.tag_names())}

    def add(cta, role, tag, tile, kblock, start, end, warp):
        n = len(start)
        cols["cta"].append(np.broadcast_to(cta, n))
        cols["role"].append(np.full(n, role_id[role], np.int8))
        cols["tag"].append(np.full(n, tag_id[tag], np.int8))
        cols["tile"].append(np.broadcast_to(tile, n))
        cols["kblock"].append(np.broadcast_to(kblock, n))
        cols["start"].append(np.asarray(start, np.int64))
        cols["end"].append(np.asarray(end, np.int64))
        cols["warp"].append(np.full(n, warp))

    consumer_warp, producer_warp, epilogue_warp, sched_warp = (0, 4, 8, 9) if persistent else (0, 0, 0, 0)
    # Setup: once per CTA (persistent, no tile), or per CTA-tile (non-persistent, tagged with it).
    if persistent:
        cta_ready = np.repeat(ready, C)
        add(np.arange(sms), "consumer", "setup", -1, -1, cta_ready - setup_ns, cta_ready, consumer_warp)
    else:
        add(cta_of_tile, "consumer", "setup", np.arange(tiles), -1, begin, begin + setup_ns, consumer_warp)
    if claim:
        # Rank 0 claims for its cluster, recording the tile counter's value (the unit) in the kblock field.
        lead = np.flatnonzero(rank == 0)
        add(cta_of_tile[lead], "scheduler", "sched_claim", lead, unit_of_tile[lead], begin[lead], begin[lead] + claim,
            sched_warp)
    # The mainloop, k-block by k-block.
    t_idx = np.repeat(np.arange(tiles), kblocks)
    k_idx = np.tile(np.arange(kblocks), tiles)
    kb_start = m0[t_idx] + k_idx * kb_ns[t_idx]
    kb_wait = np.floor(kb_ns[t_idx] * wait_fraction).astype(np.int64)
    kb_end = kb_start + kb_ns[t_idx]
    add(cta_of_tile[t_idx], "consumer", "wait_full", t_idx, k_idx, kb_start, kb_start + kb_wait, consumer_warp)
    add(cta_of_tile[t_idx], "consumer", "mma", t_idx, k_idx, kb_start + kb_wait, kb_end, consumer_warp)
    if with_producer and persistent:
        # The producer runs ahead of the consumer, but never before its tile was claimed.
        p0 = np.maximum(kb_start - producer_lead_ns, begin[t_idx] + claim)
        issue = np.maximum(kb_wait // 2, 1)
        add(cta_of_tile[t_idx], "producer", "wait_empty", t_idx, k_idx, p0, p0 + issue, producer_warp)
        add(cta_of_tile[t_idx], "producer", "tma_issue", t_idx, k_idx, p0 + issue, p0 + 2 * issue, producer_warp)
    if persistent:
        add(cta_of_tile, "epilogue", "epilogue", np.arange(tiles), -1, m1, m1 + epi_ns, epilogue_warp)
    else:
        add(cta_of_tile, "consumer", "epilogue", np.arange(tiles), -1, m1, m1 + epi_ns, consumer_warp)

    cat = {k: np.concatenate(v) for k, v in cols.items()}
    # Persistent: CTA w is worker w. Non-persistent: every row carries its tile, served by one CTA.
    sm = sm_of_worker[cat["cta"]] if persistent else sm_of_worker[worker[cat["tile"]]]
    start, end = cat["start"], cat["end"]
    if timer_step_ns > 1:
        start = start // timer_step_ns * timer_step_ns
        end = end // timer_step_ns * timer_step_ns
    t0 = int(start.min())
    region_key = cat["cta"].astype(np.int64) * 16 + cat["warp"]
    region = np.unique(region_key, return_inverse=True)[1]
    # Rows as a decoded buffer holds them: region by region, each in time order.
    order = np.lexsort((cat["end"], start, region))
    spans = spans_frame(sm=sm[order], cta=cat["cta"][order], warp=cat["warp"][order], region=region[order],
                        role=cat["role"][order], tag=cat["tag"][order], tile=cat["tile"][order],
                        kblock=cat["kblock"][order], start_ns=start[order] - t0, end_ns=end[order] - t0)
    d_ns = int(end.max() - t0)
    grid = sms if persistent else tiles
    meta = {
        "kernel": "synthetic",
        "idea": "synthetic trace (gemmtrace.analysis.synthetic)",
        "shape": {"M": 128 * tiles, "N": 128, "K": 64 * kblocks},
        "scheduler": scheduler,
        "order": "row",
        "launch": {"grid_ctas": grid, "cluster": C, "tiles": tiles, "tile": [128, 128, 64]},
        "device": {"name": "synthetic", "sm_count": P},
        "timings": {"kernel_ms": d_ns * 1e-6, "kernel_ms_p25": d_ns * 0.995e-6, "kernel_ms_p75": d_ns * 1.005e-6},
        "synthetic": {"seed": seed, "makespan_ns": d_ns},
    }
    return Run(spans=spans, meta=meta)
