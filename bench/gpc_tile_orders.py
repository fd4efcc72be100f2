"""Tile orders for v10's 64x64/c2 tile built from where the GPU places its clusters, to see what
sharing operands inside a GPC does to L2 traffic and time (needs an sm_90 GPU and torch).

    nvcc -O3 -std=c++17 -gencode arch=compute_90a,code=sm_90a -o cluster_placement bench/cluster_placement.cu
    ./cluster_placement > placement.txt
    M=gpu__time_duration.sum,lts__t_bytes.sum,lrc__lts2lrc_sectors_op_read.sum
    M=$M,lrc__request_sectors_op_read_coalescing_achieved_type_hardware.sum,lrc__xbar2gpc_sectors_op_read.sum
    ncu --cache-control none --kernel-name regex:"gemm_persistent|nvjet" --metrics $M --csv python bench/gpc_tile_orders.py placement.txt

At 512x1024x8192 the tile's 64 clusters (128 CTAs, one wave) each take one tile of a 4 x 16 grid of
cluster tiles (the two CTAs share B by multicast). The orders, by position in the cluster sequence:
- row: cluster c takes tile c (the 16 clusters that share a row of A are consecutive);
- gpc-a: the clusters sorted by GPC take the tiles in row order, so the clusters of one GPC share
  one or two rows of A (two where a GPC's clusters do not fill a row, or start inside one);
- gpc-b: the same clusters take the tiles column by column, so those of one GPC share B columns.
Each order is checked against an fp32 torch product, then launched three times, then cuBLAS three
times, for the profiler to compare. (bench/NOTES.md: "Where cuBLAS's 64x64 kernel saves its L2
reads".)
"""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

M, N, K = 512, 1024, 8192
TILE_64X64_C2 = 10  # v10's tile 10 (`gemmtrace list`)


def cluster_groups(placement: Path) -> list[int]:
    for line in placement.read_text().splitlines():
        if line.startswith("cluster_group:"):
            return [int(x) for x in line.split(":", 1)[1].split()]
    raise SystemExit(f"{placement} has no 'cluster_group:' line; write it with bench/cluster_placement.cu.")


def orders(groups: list[int], rows: int, cols: int) -> dict[str, np.ndarray]:
    n = rows * cols
    if len(groups) != n:
        raise SystemExit(f"the placement lists {len(groups)} clusters; this shape has {n} cluster tiles.")
    by_group = sorted(range(n), key=lambda c: (groups[c], c))
    gpc_a, gpc_b = np.zeros(n, np.int32), np.zeros(n, np.int32)
    for p, c in enumerate(by_group):
        gpc_a[c] = p  # row order over the clusters sorted by GPC
        gpc_b[c] = (p % rows) * cols + p // rows  # column order over them
    return {"row": np.arange(n, dtype=np.int32), "gpc-a": gpc_a, "gpc-b": gpc_b}


def main() -> None:
    if len(sys.argv) != 2:
        raise SystemExit(__doc__)
    import torch

    from gemmtrace.build import build
    from gemmtrace.launch import KernelLibrary

    lib = KernelLibrary(build("v10").library, "v10")
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    plan = lib.plan(lib.args(M, N, K, variant=TILE_64X64_C2, num_sms=sms))
    rows, cols = -(-M // plan.tile_m) // plan.cluster, -(-N // plan.tile_n)
    tables = {name: torch.from_numpy(o).cuda() for name, o in orders(cluster_groups(Path(sys.argv[1])), rows, cols).items()}
    gen = torch.Generator(device="cuda").manual_seed(0)
    a = torch.randn(M, K, device="cuda", generator=gen).bfloat16()
    b = torch.randn(N, K, device="cuda", generator=gen).bfloat16()
    c = torch.empty(M, N, device="cuda", dtype=torch.bfloat16)
    ws = torch.zeros(max(plan.workspace_bytes, 1), device="cuda", dtype=torch.uint8)
    ref = a.float() @ b.float().T
    for name, table in tables.items():
        args = lib.args(M, N, K, a=a.data_ptr(), b=b.data_ptr(), c=c.data_ptr(), workspace=ws.data_ptr(),
                        stream=torch.cuda.current_stream().cuda_stream, variant=TILE_64X64_C2,
                        num_sms=sms, tile_order=table.data_ptr())
        c.fill_(float("nan"))
        lib.launch(args)
        torch.cuda.synchronize()
        err = float((c.float() - ref).norm() / ref.norm())
        if not err < 1e-2:
            raise SystemExit(f"order {name}: relative error {err:.2e}")
        for _ in range(3):
            lib.launch(args)
        torch.cuda.synchronize()
        print(f"order {name}: checked (relative error {err:.2e}), then 3 launches", flush=True)
    for _ in range(3):
        torch.mm(a, b.T)
    torch.cuda.synchronize()
    print("cuBLAS: 3 launches")


if __name__ == "__main__":
    main()
