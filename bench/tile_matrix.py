"""Check v10's tile rule on your GPU: force every tile of its family on each shape, time each
against cuBLAS in one process (gemmtrace's runner), and report the rule's pick against the fastest
tile. This is how the rule's constants were checked (bench/results/20261123-h100-v10-tile-matrix.json).
Needs a GPU; writes tile_matrix.json (or --out) in the current folder.

    python3 bench/tile_matrix.py [--iters 20] [--out tile_matrix.json] MxNxK [MxNxK ...]
"""
import argparse
import datetime
import json
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from gemmtrace import GemmtraceError, registry
from gemmtrace.build import build
from gemmtrace.cli import parse_shape
from gemmtrace.launch import KernelLibrary
from gemmtrace.runner import RunOptions, device_meta, require_gpu, run_kernel, versions_meta


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--out", default="tile_matrix.json")
    ap.add_argument("shapes", nargs="+")
    a = ap.parse_args()
    require_gpu(registry.get("v10"))
    import torch

    tiles = registry.get("v10").tiles
    lib = KernelLibrary(build("v10").library, "v10")
    shapes = [parse_shape(text) for text in a.shapes]
    # The rule's tile for each shape (1-based), planned before the first run: a shape v10 cannot do
    # is one sentence here, not a traceback minutes into the matrix.
    picks = [lib.plan(lib.args(*shape)).variant for shape in shapes]
    rows, losses = [], []
    header = {"date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
              "device": device_meta(torch), "versions": versions_meta(torch), "iters": a.iters, "tiles": list(tiles)}
    for text, shape, picked in zip(a.shapes, shapes, picks):
        ms = {}
        for variant in range(1, len(tiles) + 1):
            r = run_kernel(RunOptions(kernel="v10", shape=shape, variant=variant, order="snake", iters=a.iters))[0]
            ms[variant] = r.kernel_ms
            rows.append(dict(M=shape[0], N=shape[1], K=shape[2], tile=tiles[variant - 1], picked=variant == picked,
                             kernel_ms=r.kernel_ms, profiled_ms=r.profiled_ms, cublas_ms=r.cublas_ms,
                             pct_of_cublas=r.pct_of_cublas,
                             rel_error=r.rel_error_plain))
            print(f"{text:>18} {tiles[variant - 1]:>11}{' (rule)' if variant == picked else '       '} "
                  f"{1e3 * r.kernel_ms:9.1f} us  {100 * r.pct_of_cublas:5.1f} % of cuBLAS", flush=True)
        fastest = min(ms, key=ms.get)
        loss = ms[picked] / ms[fastest] - 1
        losses.append(loss)
        print(f"{text:>18} rule {tiles[picked - 1]}, fastest {tiles[fastest - 1]}: the rule's pick is "
              f"{100 * loss:.1f} % slower" if loss > 0 else f"{text:>18} the rule picks the fastest tile", flush=True)
        Path(a.out).write_text(json.dumps({**header, "method": r.run.meta["timings"]["method"], "rows": rows}, indent=1))
    print(f"mean loss of the rule's pick against the fastest tile: {100 * statistics.mean(losses):.1f} %; wrote {a.out}")


if __name__ == "__main__":
    try:
        main()
    except GemmtraceError as e:
        sys.exit(f"error: {e}")
