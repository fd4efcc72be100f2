"""Attribute a persistent kernel's profiler overhead: compile variants of
gemmtrace/kernels/sm90/persistent_gemm.cuh with parts of the recording removed, and time each
variant's profiled build against its plain build in one process, twice per shape. Needs a GPU;
writes bisect.json (or --out) in the current folder.

    python3 bench/bisect_profiler.py [--kernel v6] [--tile N] [--order snake] [MxNxK ...]   (default: 8192^3 and 4096^3)

--kernel: any kernel built on persistent_gemm.cuh (v6 to v10); --tile: a tile of v10's family, as
`gemmtrace list` numbers them (default: the rule's choice); --order: the tile order (default row; v10's
rule weighs the tail split under snake only, as `best` runs it). The variants are made by text
substitution of the lines named below, in persistent_gemm.cuh or (the fix-up's records, v9 and v10
only) stream_k.cuh; if the kernel changes so that one is missing, the script stops at the assertion
that names it. Generated files go to gemmtrace/kernels/sm90/_bisect_* (ignored by git)."""
import argparse
import dataclasses
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from gemmtrace import registry
from gemmtrace.cli import parse_shape
from gemmtrace.paths import KERNELS_DIR
from gemmtrace.runner import RunOptions, run_kernel

K = KERNELS_DIR / "sm90"
MMA_REC = "rec.record_span(Tag::MMA, mma_start, t, tile, kb0);"
TMA_REC = "t = rec.record(Tag::TMA_ISSUE, t, tile, kb0);"
EPILOGUE_REC = "if (p == T::kPanels - 1) rec.record(Tag::EPILOGUE, epi_start, uint32_t(prev_m) * grid_n + prev_n);"
# The serial stream-K fix-up's records (stream_k.cuh): the partial's store, the wait for the partners'
# flags and the reduce of their partials (with the poll after it; both stored after the reduce loop).
PUBLISH_REC = "t = rec.record(Tag::PARTIAL_STORE, t, tile, uint32_t(unit.kb_begin));"
WAIT_PARTIAL_REC = "rec.record_span(Tag::WAIT_PARTIAL, t, wait_end, tile, first_kb);"
REDUCE_REC = "t = rec.record(Tag::REDUCE, wait_end, tile, first_kb);\n    rec.poll();"
# The waits' records (each with its poll), recorded only when a wait outlasts mbarrier.try_wait's
# suspension, and the polls after each unit's records. (Removing the wait records together with the
# spans makes ptxas spill in the 128x256 tiles, which would time the spill.)
WAIT_EMPTY_REC = "            rec.record(Tag::WAIT_EMPTY, from, tile, kb);\n            rec.poll();  // it waited anyway\n"
WAIT_FULL_REC = "          rec.record(Tag::WAIT_FULL, from, tile, kb);\n          rec.poll();  // it waited anyway\n"
TMA_POLL = (TMA_REC + "\n        rec.poll();\n", TMA_REC + "\n")
MMA_POLL = (MMA_REC + "\n        rec.poll();\n", MMA_REC + "\n")
# The recorder compiled in but never initialised (a condition false at run time): what the recording
# code costs by being there, apart from running.
INIT = "    if (warp % 4 == wg)\n      rec.init("
INIT_NEVER = "    if (warp % 4 == wg && prof.capacity == 0xFFFFFFFFu)\n      rec.init("
# Each substitution: (file, old, new), file "persistent" or "stream_k".
VARIANTS = {
    "full": [],
    "no_unit_rec": [("persistent", MMA_REC, ""), ("persistent", TMA_REC, "")],
    "no_epilogue_rec": [("persistent", EPILOGUE_REC, "")],
    "no_fixup_rec": [("stream_k", PUBLISH_REC, ""), ("stream_k", WAIT_PARTIAL_REC, ""), ("stream_k", REDUCE_REC, "")],
    "no_wait_empty_rec": [("persistent", WAIT_EMPTY_REC, "")],
    "no_wait_full_rec": [("persistent", WAIT_FULL_REC, "")],
    "no_unit_poll": [("persistent",) + TMA_POLL, ("persistent",) + MMA_POLL],
    "init_never": [("persistent", INIT, INIT_NEVER)],
}
# every span but setup and the waits: what is left is the recorder's fixed cost per launch
VARIANTS["no_span_rec"] = VARIANTS["no_unit_rec"] + VARIANTS["no_epilogue_rec"] + VARIANTS["no_fixup_rec"]


def make_variants(kernel: str) -> dict[str, str]:
    """Write each variant's copy of the kernel; returns variant -> registered kernel name."""
    spec = registry.get(kernel)
    main = (KERNELS_DIR / spec.source).read_text()
    splits_k = '#include "stream_k.cuh"' in main  # v9, v10: the scheduler includes the kernel body
    texts = {"persistent": (K / "persistent_gemm.cuh").read_text(), "stream_k": (K / "stream_k.cuh").read_text()}
    for where, old, _ in (r for reps in VARIANTS.values() for r in reps):
        assert old in texts[where], old
    names = {}
    for name, reps in VARIANTS.items():
        if not splits_k and any(where == "stream_k" for where, _, _ in reps):
            continue  # no fix-up to bisect
        s = dict(texts)
        for where, a, b in reps:
            s[where] = s[where].replace(a, b)
        (K / f"_bisect_{name}.cuh").write_text(s["persistent"])
        body = main.replace('#include "persistent_gemm.cuh"', f'#include "_bisect_{name}.cuh"')
        if splits_k:
            (K / f"_bisect_stream_k_{name}.cuh").write_text(
                s["stream_k"].replace('#include "persistent_gemm.cuh"', f'#include "_bisect_{name}.cuh"'))
            body = main.replace('#include "stream_k.cuh"', f'#include "_bisect_stream_k_{name}.cuh"')
        (K / f"_bisect_{kernel}_{name}.cu").write_text(body)
        kname = f"b_{kernel}_{name}"
        registry.KERNELS[kname] = dataclasses.replace(spec, name=kname, source=f"sm90/_bisect_{kernel}_{name}.cu")
        names[name] = kname
    return names


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--kernel", default="v6")
    ap.add_argument("--tile", type=int, default=0)
    ap.add_argument("--order", default="row")
    ap.add_argument("--iters", type=int, default=60)
    ap.add_argument("--out", default="bisect.json")
    ap.add_argument("shapes", nargs="*")
    a = ap.parse_args()
    names = make_variants(a.kernel)
    shapes = [parse_shape(s) for s in a.shapes] or [(8192, 8192, 8192), (4096, 4096, 4096)]
    out = {"kernel": a.kernel, "tile": a.tile, "order": a.order, "iters": a.iters, "rows": {}}
    for shape in shapes:
        for rep in range(2):
            for name, kname in names.items():
                r = run_kernel(RunOptions(kernel=kname, shape=shape, iters=a.iters, check=(rep == 0), variant=a.tile,
                                             order=a.order))[0]
                key = f"{name} {shape[0]}x{shape[1]}x{shape[2]} rep{rep}"
                out["rows"][key] = dict(plain_ms=r.kernel_ms, profiled_ms=r.profiled_ms, cublas_ms=r.cublas_ms,
                                        overhead=r.overhead)
                print(f"{key:40s} plain {r.kernel_ms:.4f} prof {r.profiled_ms:.4f} overhead {100 * r.overhead:+.2f}% "
                      f"cublas% {100 * r.pct_of_cublas:.1f}", flush=True)
    Path(a.out).write_text(json.dumps(out, indent=1))
    print(f"wrote {a.out}")


if __name__ == "__main__":
    main()
