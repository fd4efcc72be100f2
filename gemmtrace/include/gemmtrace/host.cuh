// Host side shared by every kernel library: the C ABI that gemmtrace/launch.py calls through ctypes,
// tensor-map encoding through the runtime's driver entry points (no -lcuda), and error messages.
#pragma once
#include <cuda.h>  // types of the driver API only; nothing links libcuda
#include <cuda_runtime.h>

#include <cstdarg>
#include <cstdint>
#include <cstdio>

#include "debug.cuh"
#include "profiler.cuh"

// Mirrors gemmtrace/launch.py's GtArgs: keep the two in step.
struct GtArgs {
  const void* a;  // (M, K) bf16, row-major
  const void* b;  // (N, K) bf16, row-major
  void* c;        // (M, N) bf16, row-major
  int64_t m, n, k;
  uint32_t* prof_data;  // profiler buffer, sized from gt_plan (ignored when profile == 0)
  uint32_t prof_capacity;
  int32_t profile;             // 1: launch the profiled build
  int32_t sched;               // 0 static, 1 dynamic (persistent kernels)
  int32_t order;               // 0 row, 1 snake, 2 hilbert (persistent kernels)
  int32_t* tile_counter;       // dynamic scheduling: global counter(s), zeroed by the host once
  gemmtrace::HangReport* hang_report;  // debug builds: host-mapped report of an expired wait
  void* stream;                // cudaStream_t
  int32_t num_sms;
  int32_t max_ctas;            // persistent kernels: 0 = one per SM (or cluster); else a cap
  const int32_t* tile_order;   // persistent kernels: the tile (or cluster tile) ids in visiting order;
                               // needed for any order but row (require_order_table)
  int32_t debug_fault;         // debug builds: 1 = the producer drops its first load (tests bounded waits)
  int32_t variant;             // kernels with several builds of one idea (v10's tiles): 0 = its rule picks
  void* workspace;             // GtPlan::workspace_bytes of device memory, zeroed once (null when 0 bytes)
};

// What the host needs to size buffers and describe the launch. Mirrors launch.py's GtPlan.
struct GtPlan {
  int32_t grid_ctas;           // CTAs launched
  int32_t regions_per_cta;     // recording warps per CTA
  int32_t records_per_region;  // spans one recording warp may write (default buffer)
  int32_t block_threads;
  int32_t smem_bytes;
  int32_t tile_m, tile_n, tile_k;
  int32_t stages;
  int32_t cluster;  // CTAs per cluster along M (sharing B by multicast)
  int32_t tiles;    // output tiles
  int32_t variant;  // the build that runs (v10: 1 + its tile's index in the family); 0 for the others
  int64_t workspace_bytes;  // device memory the kernel needs in GtArgs::workspace (0: none)
  int32_t split_k;  // CTAs of a cluster that split each tile's k-loop (v10's /kN tiles); 1 (or 0): none
};

namespace gemmtrace::host {

inline int fail(char* err, int errlen, const char* fmt, ...) {
  if (err && errlen > 0) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, size_t(errlen), fmt, ap);
    va_end(ap);
  }
  return 1;
}

// A tile order other than row order (GtArgs.order 1 snake, 2 Hilbert) reaches a kernel as the table
// the host builds (gemmtrace/tile_order.py). Without it the kernel would walk row order while its
// plan (v10's tail split) assumed the order asked for: refused here, for the kernels that read one.
inline int require_order_table(const GtArgs* args, char* err, int errlen) {
  if (args->order != 0 && args->tile_order == nullptr)
    return fail(err, errlen, "tile order %s needs its table in GtArgs.tile_order (gemmtrace.tile_order.tile_order builds it)",
                args->order == 1 ? "snake" : args->order == 2 ? "hilbert" : "(unknown)");
  return 0;
}

inline int check_cuda(cudaError_t e, const char* what, char* err, int errlen) {
  if (e == cudaSuccess) return 0;
  return fail(err, errlen, "%s failed: %s (%s)", what, cudaGetErrorString(e), cudaGetErrorName(e));
}

using EncodeTiledFn = CUresult (*)(CUtensorMap*, CUtensorMapDataType, cuuint32_t, void*, const cuuint64_t*,
                                   const cuuint64_t*, const cuuint32_t*, const cuuint32_t*, CUtensorMapInterleave,
                                   CUtensorMapSwizzle, CUtensorMapL2promotion, CUtensorMapFloatOOBfill);

inline EncodeTiledFn encode_tiled_fn() {
  static EncodeTiledFn fn = [] {
    void* p = nullptr;
    cudaDriverEntryPointQueryResult q;
    if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &p, 12000, cudaEnableDefault, &q) != cudaSuccess ||
        q != cudaDriverEntryPointSuccess)
      p = nullptr;
    return reinterpret_cast<EncodeTiledFn>(p);
  }();
  return fn;
}

// Encode a bf16 tensor map. dims/strides are innermost first; strides in bytes for dims 1..rank-1.
inline int encode_bf16_tmap(CUtensorMap* map, const void* ptr, uint32_t rank, const uint64_t* dims,
                            const uint64_t* strides, const uint32_t* box, CUtensorMapSwizzle swizzle,
                            const char* name, char* err, int errlen) {
  EncodeTiledFn fn = encode_tiled_fn();
  if (!fn) return fail(err, errlen, "the CUDA driver does not provide cuTensorMapEncodeTiled");
  uint32_t elem_strides[5] = {1, 1, 1, 1, 1};
  // L2 promotion: 256 bytes where every row starts on a 128-byte line (a box row is then half of a
  // 256-byte block, the other half the next k-block's), 128 bytes (a box row) where rows do not.
  // There 256 cost up to a quarter of the kernel's time, most where rows also miss 32-byte sectors
  // (K = 8 mod 16): on the H100 4096x4096x4104 ran 217 us against 184 with 128 (4096^3: 174),
  // 6144x6144x1096 141 against 126 (bench/NOTES.md).
  const bool rows_on_lines = rank < 2 || strides[0] % 128 == 0;  // strides[0]: dimension 1's, the rows'
  const CUtensorMapL2promotion promotion = rows_on_lines ? CU_TENSOR_MAP_L2_PROMOTION_L2_256B : CU_TENSOR_MAP_L2_PROMOTION_L2_128B;
  CUresult r = fn(map, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, rank, const_cast<void*>(ptr), dims, strides, box,
                  elem_strides, CU_TENSOR_MAP_INTERLEAVE_NONE, swizzle, promotion, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (r != CUDA_SUCCESS) return fail(err, errlen, "encoding the tensor map of %s failed (CUresult %d)", name, int(r));
  return 0;
}

// A (rows, cols) row-major bf16 matrix as a 2-D tensor map {cols, rows} whose box is one swizzle
// atom wide: {64, box_rows} in the 128-byte swizzle, or {32, box_rows} in the 64-byte one.
inline int encode_rows(CUtensorMap* map, const void* ptr, int64_t rows, int64_t cols, uint32_t box_rows,
                       CUtensorMapSwizzle swizzle, const char* name, char* err, int errlen) {
  const uint64_t dims[2] = {uint64_t(cols), uint64_t(rows)};
  const uint64_t strides[1] = {uint64_t(cols) * 2};
  const uint32_t box[2] = {swizzle == CU_TENSOR_MAP_SWIZZLE_64B ? 32u : 64u, box_rows};
  return encode_bf16_tmap(map, ptr, 2, dims, strides, box, swizzle, name, err, errlen);
}

// 128-byte rows: operand tiles for wgmma (K-major) and C tiles for TMA stores.
inline int encode_rows_sw128(CUtensorMap* map, const void* ptr, int64_t rows, int64_t cols, uint32_t box_rows,
                             const char* name, char* err, int errlen) {
  return encode_rows(map, ptr, rows, cols, box_rows, CU_TENSOR_MAP_SWIZZLE_128B, name, err, errlen);
}

inline int check_bf16_gemm_shape(const GtArgs* args, int k_multiple, char* err, int errlen) {
  if (args->m < 1 || args->n < 1 || args->k < 1)
    return fail(err, errlen, "M, N and K must be positive (got %lld, %lld, %lld)", (long long)args->m,
                (long long)args->n, (long long)args->k);
  if (args->k % k_multiple != 0)
    return fail(err, errlen, "K must be a multiple of %d (rows of A and B must be 16-byte aligned for TMA); got K=%lld",
                k_multiple, (long long)args->k);
  if (args->m > (1ll << 31) - 1 || args->n > (1ll << 31) - 1 || args->k > (1ll << 31) - 1)
    return fail(err, errlen, "M, N and K must each be below 2^31");
  return 0;
}

// Debug builds: point the kernel's bounded waits at the host-mapped hang report before a launch,
// and pass the requested fault (if any).
inline int set_hang_report(const GtArgs* args, cudaStream_t stream, char* err, int errlen) {
#ifdef GEMMTRACE_DEBUG
  if (check_cuda(cudaMemcpyToSymbolAsync(gemmtrace::g_hang_report, &args->hang_report, sizeof(void*), 0,
                                         cudaMemcpyHostToDevice, stream),
                 "setting the hang report", err, errlen))
    return 1;
  return check_cuda(cudaMemcpyToSymbolAsync(gemmtrace::g_debug_fault, &args->debug_fault, sizeof(int32_t), 0,
                                            cudaMemcpyHostToDevice, stream),
                    "setting the debug fault", err, errlen);
#else
  (void)args, (void)stream, (void)err, (void)errlen;
  return 0;
#endif
}

inline int ceil_div(int64_t a, int64_t b) { return int((a + b - 1) / b); }

// The plan of a kernel that computes one BM x BN tile per CTA on a (N / BN, M / BM) grid (v1-v4):
// checks the shape, then sizes the profiler buffer as `spans_per_kblock` spans per k-block plus
// setup and epilogue for each of the CTA's `regions_per_cta` recording warps.
inline int one_tile_per_cta_plan(const GtArgs* args, int bm, int bn, int bk, int stages, int threads, int smem_bytes,
                                 int regions_per_cta, int spans_per_kblock, GtPlan* p, char* err, int errlen) {
  if (check_bf16_gemm_shape(args, 8, err, errlen)) return 1;
  const int grid_m = ceil_div(args->m, bm), grid_n = ceil_div(args->n, bn);
  if (grid_m > 65535) return fail(err, errlen, "M=%lld needs more than 65535 row blocks", (long long)args->m);
  *p = GtPlan{};
  p->grid_ctas = grid_m * grid_n;
  p->regions_per_cta = regions_per_cta;
  p->records_per_region = spans_per_kblock * ceil_div(args->k, bk) + 2;
  p->block_threads = threads;
  p->smem_bytes = smem_bytes;
  p->tile_m = bm, p->tile_n = bn, p->tile_k = bk;
  p->stages = stages;
  p->cluster = 1;
  p->tiles = grid_m * grid_n;
  return 0;
}

inline gemmtrace::ProfileBuffer profile_buffer(const GtArgs* args, const GtPlan& plan) {
  return gemmtrace::ProfileBuffer{args->prof_data, args->prof_capacity, uint32_t(plan.regions_per_cta)};
}

}  // namespace gemmtrace::host

// Lets the Python side check that its ctypes mirrors of GtArgs and GtPlan have the C layout.
// (Each kernel library is one translation unit, so defining it here is safe.)
extern "C" int gt_abi_sizes(int* args_bytes, int* plan_bytes) {
  *args_bytes = int(sizeof(GtArgs));
  *plan_bytes = int(sizeof(GtPlan));
  return 0;
}
