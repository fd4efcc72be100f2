"""Export speed: time the Perfetto and Chrome exports of a large synthetic run, in spans per second.

The run looks like a persistent warp-specialized GEMM on an H100 (132 SMs, one CTA each): a
producer warp (wait_empty, tma_issue per k-block), two consumer warpgroups taking tiles in turn
(wait_full and an MMA per k-block, the MMAs pipelined so each crosses the next, then an epilogue),
and a scheduler warp (sched_claim per tile); times in 32 ns steps, as %globaltimer gives them, so
many spans are zero-length and many touch. Spans are stored as the decoder returns them: region by
region (one region per recording warp), each in the order its warp recorded them, as spans end
(--shuffle stores them in random order instead).

    python bench/export_speed.py                      # 10,000,000 spans, both formats, 3 runs each
    python bench/export_speed.py --output bench/results/<date>-cpu-export-speed.json
    python bench/export_speed.py --spans 1000000 --repeat 1 --shuffle
    python bench/export_speed.py --zlib               # Chrome gzip through zlib even if isal is installed
"""
from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from gemmtrace import Run  # noqa: E402
from gemmtrace.bench import cpu_name  # noqa: E402
from gemmtrace.export import FORMATS, export  # noqa: E402
from gemmtrace.tags import role_names, tag_names  # noqa: E402
from gemmtrace.trace import spans_frame  # noqa: E402

SMS = 132
KBLOCKS = 32
TICK = 32  # ns: the H100's %globaltimer step
SPANS_PER_TILE = 4 * KBLOCKS + 2  # producer 2K, consumer 2K + epilogue, scheduler 1


def synthetic_run(n_spans: int, seed: int = 0, shuffle: bool = False) -> Run:
    """A run of about n_spans spans shaped like a persistent pipelined GEMM (see the module doc)."""
    rng = np.random.default_rng(seed)
    P, K = SMS, KBLOCKS  # noqa: N806
    T = max(2, round(n_spans / (P * SPANS_PER_TILE)) // 2 * 2)  # noqa: N806  tiles per SM, even
    role, tag = {n: i for i, n in enumerate(role_names())}, {n: i for i, n in enumerate(tag_names())}
    # k-block issue times: each tile's mainloop follows the previous tile's on the same SM.
    step = rng.integers(10, 16, (P, T * K)) * TICK  # ~400 ns a k-block
    kb_t = (np.cumsum(step, axis=1) + rng.integers(0, 64, (P, 1)) * TICK).reshape(P, T, K)
    tile = np.broadcast_to((np.arange(T)[None, :] * P + rng.permutation(P)[:, None])[:, :, None], (P, T, K))
    kb = np.broadcast_to(np.arange(K), (P, T, K))
    quick = rng.integers(0, 3, (P, T, K)) * TICK  # 0-2 ticks: a third of these spans are zero-length
    warps: list[dict[str, np.ndarray]] = []  # one dict of (P, n) columns per recording warp

    def warp(role_name, warp_id, events):
        """events: (tag, tile, kblock, start, end) arrays of one shape (P, ..., m), interleaved along
        the last axis into each warp's record order."""
        shape = events[0][3].shape
        cols = [np.stack([np.broadcast_to(e[i], shape) for e in events], axis=-1).reshape(P, -1) for i in range(1, 5)]
        n = cols[0].shape[1]
        tags = np.tile([tag[e[0]] for e in events], n // len(events))
        warps.append({"role": np.full((P, n), role[role_name]), "warp": np.full((P, n), warp_id),
                      "tag": np.broadcast_to(tags, (P, n)),
                      "tile": cols[0], "kblock": cols[1], "start": cols[2], "end": cols[3]})

    # Producer warp 0: wait for a free stage, then issue the k-block's TMA loads.
    we_s = kb_t - 6 * TICK
    issue = we_s + quick
    warp("producer", 0, [("wait_empty", tile, kb, we_s, issue), ("tma_issue", tile, kb, issue, issue + TICK)])
    # Consumers: warpgroup 1 (warp 4) takes even tiles, warpgroup 2 (warp 8) odd ones. Each k-block's
    # MMA retires only after the next one is issued (wgmma.wait_group 1), so consecutive MMAs cross.
    wf_e = kb_t + quick
    mma_e = np.concatenate([kb_t[:, :, 1:], kb_t[:, :, -1:] + 8 * TICK], axis=2) + 2 * TICK
    epi_s = mma_e[:, :, -1:]
    epi_e = epi_s + rng.integers(20, 40, (P, T, 1)) * TICK
    for parity, warp_id in ((0, 4), (1, 8)):
        sl = slice(parity, None, 2)
        loop = [("wait_full", tile[:, sl], kb[:, sl], kb_t[:, sl], wf_e[:, sl]),
                ("mma", tile[:, sl], kb[:, sl], wf_e[:, sl], np.maximum(mma_e[:, sl], wf_e[:, sl]))]
        # a tile's records: its k-blocks (wait_full, mma each), then its epilogue
        cols = [np.concatenate([np.stack(np.broadcast_arrays(*[e[i] for e in loop]), -1).reshape(P, T // 2, -1),
                                np.broadcast_to(v, (P, T // 2, 1))], axis=2)
                for i, v in ((1, tile[:, sl, :1]), (2, -1), (3, epi_s[:, sl]), (4, epi_e[:, sl]))]
        tags = np.concatenate([np.tile([tag["wait_full"], tag["mma"]], K), [tag["epilogue"]]])
        n = cols[0].shape[1] * cols[0].shape[2]
        warps.append({"role": np.full((P, n), role["consumer"]), "warp": np.full((P, n), warp_id),
                      "tag": np.broadcast_to(np.tile(tags, T // 2), (P, n)),
                      "tile": cols[0].reshape(P, -1), "kblock": cols[1].reshape(P, -1),
                      "start": cols[2].reshape(P, -1), "end": cols[3].reshape(P, -1)})
    # Scheduler warp 1: claim each tile just before its mainloop.
    claim = kb_t[:, :, :1] - 12 * TICK
    warp("scheduler", 1, [("sched_claim", tile[:, :, :1], -1, claim, claim + quick[:, :, :1] + TICK)])

    per_sm = {c: np.concatenate([w[c] for w in warps], axis=1) for c in warps[0]}  # (P, n): warp-major
    per_sm["region"] = np.concatenate([np.full(w["start"].shape, i) for i, w in enumerate(warps)], axis=1)
    cta = np.broadcast_to(np.arange(P)[:, None], per_sm["start"].shape)
    per_sm["region"] = per_sm["region"] + cta * len(warps)  # one region per recording warp, CTA-major
    sm = rng.permutation(P)[cta]  # CTA b ran on some SM
    flat = {c: v.reshape(-1) for c, v in per_sm.items()}
    t0 = flat["start"].min()
    # A warp records each span when it ends: the decoder returns them region by region, in end order.
    order = rng.permutation(len(flat["start"])) if shuffle else np.lexsort((flat["end"], flat["region"]))
    spans = spans_frame(
        sm=sm.reshape(-1)[order], cta=cta.reshape(-1)[order], warp=flat["warp"][order], role=flat["role"][order],
        tag=flat["tag"][order], tile=flat["tile"][order], kblock=flat["kblock"][order],
        start_ns=flat["start"][order] - t0, end_ns=flat["end"][order] - t0, region=flat["region"][order],
    )
    meta = {"kernel": "synthetic", "shape": {"M": 8192, "N": 8192, "K": 8192}, "scheduler": "static",
            "device": {"name": "synthetic H100", "sm_count": SMS}}
    return Run(spans, meta)


def counters_of(run: Run):
    """The occupancy counter the CLI exports (gemmtrace.runner.export_run): a(t) from the metrics."""
    from gemmtrace.analysis import occupancy_curve

    t, a = occupancy_curve(run.spans, run.sm_count)
    return {"SMs with a tile in flight": (t, a.astype(float))}



def deflate_backend() -> str:
    from gemmtrace import export as export_module

    return getattr(export_module._deflate, "__name__", "zlib")


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--spans", type=int, default=10_000_000, help="number of spans (about; whole tiles)")
    ap.add_argument("--formats", default=",".join(FORMATS), help="comma-separated: perfetto,chrome")
    ap.add_argument("--repeat", type=int, default=3, help="exports per format; the median is reported")
    ap.add_argument("--shuffle", action="store_true", help="store the spans in random order")
    ap.add_argument("--dir", type=Path, default=None, help="where the traces go (default: a temporary folder)")
    ap.add_argument("--output", type=Path, default=None, help="write the result as JSON here")
    ap.add_argument("--zlib", action="store_true", help="deflate with the standard library's zlib, not isal")
    args = ap.parse_args(argv)
    if args.zlib:
        import zlib

        from gemmtrace import export as export_module

        export_module._deflate = zlib

    t = time.perf_counter()
    run = synthetic_run(args.spans, shuffle=args.shuffle)
    counters = counters_of(run)
    made = time.perf_counter() - t
    n = len(run.spans)
    print(f"synthetic run: {n:,} spans on {SMS} SMs ({made:.1f} s to make, not timed)", flush=True)
    result = {
        "benchmark": "gemmtrace export speed (bench/export_speed.py)", "date": dt.date.today().isoformat(),
        "spans": n, "stored": "shuffled" if args.shuffle else "region by region, as decoded",
        "machine": {"cpu": cpu_name(), "cores": os.cpu_count(), "python": platform.python_version(),
                    "numpy": np.__version__, "deflate": deflate_backend()},
        "counters": sorted(counters or {}), "formats": {},
    }
    with tempfile.TemporaryDirectory() as tmp:
        folder = args.dir or Path(tmp)
        for fmt in args.formats.split(","):
            path = folder / ("trace.perfetto-trace" if fmt == "perfetto" else "trace.json.gz")
            times = []
            for _ in range(max(1, args.repeat)):
                t = time.perf_counter()
                export(run, path, fmt, counters=counters)
                times.append(time.perf_counter() - t)
            sec, size = statistics.median(times), path.stat().st_size
            result["formats"][fmt] = {"seconds": [round(x, 3) for x in times], "median_s": round(sec, 3),
                                      "spans_per_s": round(n / sec), "best_spans_per_s": round(n / min(times)),
                                      "bytes": size}
            print(f"{fmt:9s} median {sec:6.2f} s  {n / sec / 1e6:5.2f} M spans/s  (runs: "
                  f"{', '.join(f'{x:.2f}' for x in times)} s)  {size / 1e6:7.1f} MB", flush=True)
    if args.output:
        args.output.parent.mkdir(parents=True, exist_ok=True)
        args.output.write_text(json.dumps(result, indent=2) + "\n")
        print(f"wrote {args.output}")
    return result


if __name__ == "__main__":
    main()
