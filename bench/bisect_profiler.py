"""Attribute a persistent kernel's profiler overhead: compile variants of
gemmtrace/kernels/sm90/persistent_gemm.cuh with parts of the recording removed (as v6, row order), and
time each variant's profiled build against its plain build in one process, twice per shape. Needs a
GPU; writes bisect.json in the current folder.

    python3 bench/bisect_profiler.py [MxNxK ...]      (default: 8192^3 and 4096^3)

The variants are made by text substitution of the lines named below; if the kernel changes so that
one is missing, the script stops at the assertion that names it. Generated files go to
gemmtrace/kernels/sm90/_bisect_* (ignored by git)."""
import json, sys, dataclasses
from pathlib import Path
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from gemmtrace import registry
from gemmtrace.paths import KERNELS_DIR
from gemmtrace.runner import RunOptions, run_kernel

K = KERNELS_DIR / "sm90"
src = (K / "persistent_gemm.cuh").read_text()
MMA_REC = "rec.record_span(Tag::MMA, mma_start, retired, tile, kb - 1);"
MMA_CLK = "const uint32_t retired = rec.now();"
TMA_REC = "t = rec.record(Tag::TMA_ISSUE, wait_to, tile, kb);"
STS = ('if (lane == 0 && warp % 4 == wg) asm volatile("st.shared.v4.u32 [%0], {%1, %2, %3, %4};" :: "r"(sched_smem + 16 * cw), '
       '"r"(mma_start), "r"(retired), "r"(tile), "r"(uint32_t(kb)));')
for s in (MMA_REC, MMA_CLK, TMA_REC):
    assert s in src, s
variants = {
    "full": [],
    "no_mma_rec": [(MMA_REC, "")],
    "no_mma_rec_clk": [(MMA_REC, ""), (MMA_CLK, "const uint32_t retired = uint32_t(it);")],
    "no_tma_rec": [(TMA_REC, "")],
    "mma_rec_sts": [(MMA_REC, STS)],
    "no_kblock_rec": [(MMA_REC, ""), (MMA_CLK, "const uint32_t retired = uint32_t(it);"), (TMA_REC, "")],
}
src = src.replace("constexpr int kPipelineBytes = 1024 +", "constexpr int kPipelineBytes = 1024 + 64 +")
main = (K / "v6_persistent.cu").read_text()
names = []
for name, reps in variants.items():
    s = src
    for a, b in reps:
        s = s.replace(a, b)
    (K / f"_bisect_{name}.cuh").write_text(s)
    (K / f"_bisect_{name}.cu").write_text(main.replace('#include "persistent_gemm.cuh"', f'#include "_bisect_{name}.cuh"'))
    kname = f"b_{name}"
    registry.KERNELS[kname] = dataclasses.replace(registry.KERNELS["v6"], name=kname, source=f"sm90/_bisect_{name}.cu")
    names.append(kname)
out = {}
shapes = [tuple(int(x) for x in s.split("x")) for s in sys.argv[1:]] or [(8192, 8192, 8192), (4096, 4096, 4096)]
for shape in shapes:
    for rep in range(2):
        for kname in names:
            r = run_kernel(RunOptions(kernel=kname, shape=shape, iters=60, check=(rep == 0)))[0]
            key = f"{kname} {shape[0]}x{shape[1]}x{shape[2]} rep{rep}"
            out[key] = dict(plain_ms=r.kernel_ms, profiled_ms=r.profiled_ms, cublas_ms=r.cublas_ms, overhead=r.overhead)
            print(f"{key:40s} plain {r.kernel_ms:.4f} prof {r.profiled_ms:.4f} overhead {100*r.overhead:+.2f}% cublas% {100*r.pct_of_cublas:.1f}", flush=True)
Path("bisect.json").write_text(json.dumps(out, indent=1))
print("wrote bisect.json")
