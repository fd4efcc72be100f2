// tma_intake: how fast a 64x64 tile's k-blocks reach an SM and go through its tensor cores, by how
// the cluster shares the operands (sm_90a).
//
//   nvcc -O3 -std=c++17 -gencode arch=compute_90a,code=sm_90a -o tma_intake bench/tma_intake.cu && ./tma_intake
//
// The mainloop of a 64x64 tile with 13 stages of 16 KB (A: 64 rows x 64 k, B: 64 rows x 64 k, bf16,
// 128-byte swizzle), 384 threads a CTA (a producer lane, one consumer warpgroup, one idle), on the
// operands of a 512x1024x8192 product (24 MB: they stay in L2 from one launch to the next):
// - cluster layouts: 1x1 (every CTA loads its own A and B), 2x1 (two CTAs along M: each loads half
//   of the shared B panel and multicasts it, as gemmtrace's 64x64/c2), 1x2 (along N, A shared), 2x2
//   (four CTAs: A shared along N and B along M, each operand read from L2 once for two CTAs);
// - one cluster alone (its k-loop run 8 times over) or every tile at once (128 CTAs, one wave);
// - the consumer only waiting for the data, issuing the tile's four m64n64k16 wgmma a k-block into
//   one set of accumulators (a chain of dependent wgmma, as gemmtrace's kernels), or into two sets
//   taken in turn (two chains, summed at the end);
// - with every tile at once: clusters over the tiles in row or column order, or in row order with
//   each cluster starting its k-loop at its own k-block (13 apart) and wrapping around;
// - the tensor maps' L2 promotion: 256, 128 or 64 bytes, or none (the last two with the 1x1 and 2x1
//   layouts only);
// - loads only, with 6 stages of two k-blocks: each operand's two k-blocks as two 2D boxes, or as one
//   3D box (half the TMA instructions, each twice as large);
// - the producer's form: a lone lane that waits for the stage, arms its full barrier with the bytes
//   and issues the loads (as gemmtrace's kernels); a lone lane that issues the loads first, arms the
//   barrier after them and asks whether the next stage is free before it needs it (the order
//   cuBLAS's 64x64 kernel's SASS shows); or the latter as a whole warp, one lane elected to issue;
// - the consumer's release of a stage: lane 0 of every consumer warp arriving on every CTA of the
//   cluster (as gemmtrace's kernels), or one thread of the warpgroup a CTA (as cuBLAS and CUTLASS).
// Prints per case the median over 20 launches of: the steady time a k-block takes (from the 13th
// k-block's data to the last, median and maximum over CTAs), the bytes an SM takes in a ns at that
// pace, and the launch's time by CUDA events; and how many clusters of the layout fit at once.
// (bench/NOTES.md: "What bounds a 64x64 k-block: the intake microbenchmark" and "Where cuBLAS's
// 64x64 kernel saves its L2 reads, and where its time goes".)
#include "sm90_bench.cuh"

namespace {

using namespace sm90_bench;

constexpr int kM = 512, kN = 1024, kK = 8192, kTiles = (kM / 64) * (kN / 64);
constexpr int kStages = 13, kHalf = 4096, kTileBytes = 8192, kStageBytes = 2 * kTileBytes;
constexpr int kSmemBytes = kStages * kStageBytes + 2 * kStages * 8 + 1024;
constexpr int kSteadyFrom = kStages;  // k-blocks before the steady pace is timed

__device__ __forceinline__ bool try_wait(uint32_t bar, uint32_t parity) {
  uint32_t done;
  asm volatile("{\n .reg .pred p;\n mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n selp.u32 %0, 1, 0, p;\n}"
               : "=r"(done) : "r"(bar), "r"(parity) : "memory");
  return done != 0;
}
__device__ __forceinline__ void wait(uint32_t bar, uint32_t parity) { while (!try_wait(bar, parity)) {} }
// The producer's arrival on a full barrier, with the bytes its phase waits for.
__device__ __forceinline__ void arm(uint32_t bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(bar), "r"(bytes) : "memory");
}
__device__ __forceinline__ void arrive_on(uint32_t bar, uint32_t cta) {
  asm volatile("{\n .reg .b32 r;\n mapa.shared::cluster.u32 r, %0, %1;\n mbarrier.arrive.shared::cluster.b64 _, [r];\n}"
               ::"r"(bar), "r"(cta) : "memory");
}
__device__ __forceinline__ void load(uint32_t dst, const CUtensorMap* map, uint32_t bar, int k, int row, uint16_t mask) {
  if (mask == 0)
    asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%3, %4}], [%2];"
                 ::"r"(dst), "l"(map), "r"(bar), "r"(k), "r"(row) : "memory");
  else
    asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes.multicast::cluster"
                 " [%0], [%1, {%3, %4}], [%2], %5;" ::"r"(dst), "l"(map), "r"(bar), "r"(k), "r"(row), "h"(mask) : "memory");
}
// Thread 0: `stages` full barriers (one arrival: the producer's, with the bytes) and empty barriers
// (`empty_arrivals`: every consumer warp of the cluster, or one arrival a CTA of it with REL = 1);
// then the cluster meets, so that no peer multicasts or arrives into a barrier before it exists.
__device__ __forceinline__ void init_stages(uint32_t full0, uint32_t empty0, int stages, uint32_t empty_arrivals) {
  if (threadIdx.x == 0) {
    for (int s = 0; s < stages; ++s) {
      asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(full0 + 8 * s) : "memory");
      asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(empty0 + 8 * s), "r"(empty_arrivals) : "memory");
    }
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  }
  asm volatile("barrier.cluster.arrive.relaxed.aligned;\nbarrier.cluster.wait.acquire.aligned;" ::: "memory");
}
// A K-major 64-row operand tile in 128-byte swizzle, as wgmma reads it: 8-row groups 1024 bytes apart.
__device__ __forceinline__ uint64_t desc_sw128(uint32_t addr) {
  return uint64_t((addr & 0x3FFFF) >> 4) | (uint64_t(1) << 16) | (uint64_t(1024 >> 4) << 32) | (uint64_t(1) << 62);
}
// accumulate = 0: D = A B (the tile's first step), else D += A B.
__device__ __forceinline__ void mma_64x64x16(float (&d)[32], uint64_t a, uint64_t b, int accumulate) {
  asm volatile(
      "{\n .reg .pred p;\n setp.ne.b32 p, %34, 0;\n"
      " wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, "
      "%14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, %32, %33, p, 1, 1, 0, 0;\n}"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]),
        "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]),
        "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]),
        "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
      : "l"(a), "l"(b), "r"(accumulate));
}

struct Maps { CUtensorMap a64, a32, b64, b32; };  // each operand with a 64-row and a 32-row box
struct Times { uint64_t steady_start, end; };

// CM x CN CTAs a cluster (rank = i + CM j: i along M, j along N). CTA (i, j) computes tile
// (CM cm + i, CN cn + j) of its cluster's block (cm, cn). With CN = 2 it loads half of its A panel
// and multicasts it to (i, 0) and (i, 1); with CM = 2 half of its B panel, to (0, j) and (1, j).
// MMA: 0 the consumer only waits, 1 one chain of wgmma, 2 two (a template argument: a run-time
// choice between accumulator sets makes ptxas fence the wgmma pipeline). PROD, the producer's form:
// 0 a lone lane, wait, arm, load; 1 a lone lane, load, arm, and the next stage's wait asked ahead; 2
// form 1 in a converged warp (one elected lane issues, so no loop around each TMA instruction).
// REL, the consumer's release of a stage: 0 lane 0 of every consumer warp arrives on every CTA of
// the cluster (as gemmtrace's kernels); 1 thread r of the warpgroup arrives on CTA r, once.
template <int CM, int CN, int MMA, int PROD = 0, int REL = 0>
__global__ void __launch_bounds__(384, 1) intake(const __grid_constant__ Maps maps, int reps, int order, Times* out, float* sink) {
  constexpr int CS = CM * CN;
  extern __shared__ __align__(1024) uint8_t smem[];
  const uint32_t buf = (uint32_t(__cvta_generic_to_shared(smem)) + 1023) & ~1023u;
  const uint32_t full0 = buf + kStages * kStageBytes, empty0 = full0 + kStages * 8;
  uint32_t rank;
  asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(rank));
  const int i = int(rank) % CM, j = int(rank) / CM;
  const int cluster = int(blockIdx.x) / CS, blocks_n = (kN / 64) / CN, blocks_m = (kM / 64) / CM;
  const int cm = order == 1 ? cluster % blocks_m : cluster / blocks_n, cn = order == 1 ? cluster / blocks_m : cluster % blocks_n;
  const int m_tile = cm * CM + i, n_tile = cn * CN + j;
  const int total = (kK / 64) * reps, kb_first = order == 2 ? (cluster * kStages) % (kK / 64) : 0;
  init_stages(full0, empty0, kStages, REL ? CS : 4 * CS);
  const int wg = int(threadIdx.x) / 128, tid = int(threadIdx.x) % 128;
  if (wg == 0 && (PROD == 2 ? tid < 32 : tid == 0)) {  // the producer lane (form 2: its warp)
    uint16_t a_mask = 0, b_mask = 0;
    for (int q = 0; q < CN && CN > 1; ++q) a_mask |= uint16_t(1u << (i + CM * q));
    for (int q = 0; q < CM && CM > 1; ++q) b_mask |= uint16_t(1u << (q + CM * j));
    bool free_ahead = PROD != 0 && try_wait(empty0, 1);  // forms 1, 2: the stage's wait asked ahead
    for (int kb = 0, s = 0, phase = 1; kb < total; ++kb) {
      if (!free_ahead) wait(empty0 + 8 * s, phase);
      const uint32_t full = full0 + 8 * s, a = buf + s * kStageBytes, b = a + kTileBytes;
      const int k = ((kb_first + kb) % (kK / 64)) * 64;
      bool issuer = true;
      if constexpr (PROD == 2) {
        __syncwarp();  // gathers the lanes, whose waits may end apart, before one is elected
        uint32_t elected;
        asm volatile("{\n .reg .pred p;\n elect.sync _|p, 0xffffffff;\n selp.u32 %0, 1, 0, p;\n}" : "=r"(elected));
        issuer = elected != 0;
      }
      if (PROD == 0) arm(full, kStageBytes);
      if (issuer) {
        if (CN == 1) load(a, &maps.a64, full, k, m_tile * 64, 0);
        else load(a + j * kHalf, &maps.a32, full, k, m_tile * 64 + j * 32, a_mask);
        if (CM == 1) load(b, &maps.b64, full, k, n_tile * 64, 0);
        else load(b + i * kHalf, &maps.b32, full, k, n_tile * 64 + i * 32, b_mask);
        // Armed after its loads: the bytes may land first (the transaction count goes below zero),
        // and the phase still waits for this arrival.
        if (PROD != 0) arm(full, kStageBytes);
      }
      if (++s == kStages) s = 0, phase ^= 1;
      if (PROD != 0) free_ahead = try_wait(empty0 + 8 * s, phase);
      if (PROD == 2) __syncwarp();
    }
  } else if (wg == 1) {  // the consumer warpgroup
    float acc[32], acc2[32];  // written by the first k-block's wgmma (accumulate = 0)
    uint64_t steady_start = 0;
    for (int kb = 0, s = 0, phase = 0; kb < total; ++kb) {
      wait(full0 + 8 * s, phase);
      if (kb == kSteadyFrom) steady_start = globaltimer();
      const int released = MMA ? (s == 0 ? kStages - 1 : s - 1) : s;
      if constexpr (MMA > 0) {
        const uint32_t a = buf + s * kStageBytes, b = a + kTileBytes;
        asm volatile("wgmma.fence.sync.aligned;" ::: "memory");
        if constexpr (MMA == 2) {  // odd k16 steps into the second set: two chains of two
#pragma unroll
          for (int k16 = 0; k16 < 4; k16 += 2) {
            mma_64x64x16(acc, desc_sw128(a + 32 * k16), desc_sw128(b + 32 * k16), kb > 0 || k16 > 0);
            mma_64x64x16(acc2, desc_sw128(a + 32 * k16 + 32), desc_sw128(b + 32 * k16 + 32), kb > 0 || k16 > 0);
          }
        } else {
#pragma unroll
          for (int k16 = 0; k16 < 4; ++k16)
            mma_64x64x16(acc, desc_sw128(a + 32 * k16), desc_sw128(b + 32 * k16), kb > 0 || k16 > 0);
        }
        asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
        asm volatile("wgmma.wait_group.sync.aligned 1;" ::: "memory");
      }
      if (REL) {
        // A wgmma is one operation of the warpgroup, so one warp's wait covers all four. With no
        // wgmma to hold them together, the warpgroup meets first: a warp left a ring behind would
        // wait on a full barrier's later phase.
        if (MMA == 0) asm volatile("bar.sync 1, 128;" ::: "memory");
        if ((MMA == 0 || kb > 0) && tid < CS) arrive_on(empty0 + 8 * released, uint32_t(tid));
      } else if ((MMA == 0 || kb > 0) && tid % 32 == 0) {
        for (int q = 0; q < CS; ++q) arrive_on(empty0 + 8 * released, uint32_t(q));
      }
      __syncwarp();
      if (++s == kStages) s = 0, phase ^= 1;
    }
    asm volatile("wgmma.wait_group.sync.aligned 0;" ::: "memory");
    // The accumulators are final only now: keep ptxas from reading them earlier (which serializes
    // every wgmma of the loop).
    for (int r = 0; r < 32; ++r) {
      asm volatile("" : "+f"(acc[r])::"memory");
      asm volatile("" : "+f"(acc2[r])::"memory");
    }
    if (tid == 0) out[blockIdx.x] = Times{steady_start, globaltimer()};
    float sum = 0;
    for (int r = 0; r < 32; ++r) sum += acc[r];
    if constexpr (MMA == 2)
      for (int r = 0; r < 32; ++r) sum += acc2[r];
    if (sum == 1.2345f) sink[0] = sum;  // keeps the accumulators
  }
  // Leave together: no CTA's shared memory goes while a peer may still write or arrive into it.
  // (Not .aligned: the producer warp's other lanes get here before its lane 0.)
  asm volatile("barrier.cluster.arrive.release;\nbarrier.cluster.wait.acquire;" ::: "memory");
}

// Loads only, two k-blocks a stage (6 stages of 32 KB): each operand's two k-blocks as two 2D boxes
// (BOX3 = 0) or as one 3D box over (k, row, k-block) (BOX3 = 1: half the TMA instructions, each
// twice as large). CM = 2 shares B as above. (Wait-only: the 3D box's smem layout, k-block-major
// within each half of B, is not the one wgmma would read for CM = 2; the bytes are the same.)
template <int CM, int BOX3>
__global__ void __launch_bounds__(384, 1) intake_pairs(const __grid_constant__ Maps maps, const __grid_constant__ Maps maps3,
                                                       Times* out) {
  constexpr int kPairStages = 6, kPairBytes = 2 * kStageBytes;
  extern __shared__ __align__(1024) uint8_t smem[];
  const uint32_t buf = (uint32_t(__cvta_generic_to_shared(smem)) + 1023) & ~1023u;
  const uint32_t full0 = buf + kPairStages * kPairBytes, empty0 = full0 + kPairStages * 8;
  uint32_t rank;
  asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(rank));
  const int i = int(rank), cluster = int(blockIdx.x) / CM, blocks_n = kN / 64;
  const int m_tile = (cluster / blocks_n) * CM + i, n_tile = cluster % blocks_n;
  constexpr int total = kK / 64 / 2;  // pairs of k-blocks
  init_stages(full0, empty0, kPairStages, 4 * CM);
  const int wg = int(threadIdx.x) / 128, tid = int(threadIdx.x) % 128;
  if (wg == 0 && tid == 0) {
    const uint16_t b_mask = CM > 1 ? uint16_t(3) : uint16_t(0);
    for (int p = 0, s = 0, phase = 1; p < total; ++p) {
      wait(empty0 + 8 * s, phase);
      const uint32_t full = full0 + 8 * s, a = buf + s * kPairBytes, b = a + 2 * kTileBytes;
      arm(full, kPairBytes);
      const CUtensorMap* bmap = CM == 1 ? &maps3.b64 : &maps3.b32;
      const int b_row = n_tile * 64 + (CM == 1 ? 0 : i * 32), b_off = CM == 1 ? 0 : i * kHalf;
      if (BOX3) {
        asm volatile("cp.async.bulk.tensor.3d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {0, %3, %4}], [%2];"
                     ::"r"(a), "l"(&maps3.a64), "r"(full), "r"(m_tile * 64), "r"(2 * p) : "memory");
        const uint32_t dst = b + 2 * b_off;  // this CTA's two k-blocks of its half, together
        if (CM == 1)
          asm volatile("cp.async.bulk.tensor.3d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {0, %3, %4}], [%2];"
                       ::"r"(dst), "l"(bmap), "r"(full), "r"(b_row), "r"(2 * p) : "memory");
        else
          asm volatile("cp.async.bulk.tensor.3d.shared::cluster.global.mbarrier::complete_tx::bytes.multicast::cluster"
                       " [%0], [%1, {0, %3, %4}], [%2], %5;" ::"r"(dst), "l"(bmap), "r"(full), "r"(b_row), "r"(2 * p), "h"(b_mask)
                       : "memory");
      } else {
        for (int h = 0; h < 2; ++h) {
          const int k = (2 * p + h) * 64;
          load(a + h * kTileBytes, &maps.a64, full, k, m_tile * 64, 0);
          load(b + h * kTileBytes + b_off, CM == 1 ? &maps.b64 : &maps.b32, full, k, b_row, b_mask);
        }
      }
      if (++s == kPairStages) s = 0, phase ^= 1;
    }
  } else if (wg == 1) {
    uint64_t steady_start = 0;
    for (int p = 0, s = 0, phase = 0; p < total; ++p) {
      wait(full0 + 8 * s, phase);
      if (p == kPairStages) steady_start = globaltimer();
      if (tid % 32 == 0)
        for (int q = 0; q < CM; ++q) arrive_on(empty0 + 8 * s, uint32_t(q));
      __syncwarp();
      if (++s == kPairStages) s = 0, phase ^= 1;
    }
    if (tid == 0) out[blockIdx.x] = Times{steady_start, globaltimer()};
  }
  asm volatile("barrier.cluster.arrive.release;\nbarrier.cluster.wait.acquire;" ::: "memory");
}

// The same rows as a 3D tensor {64 k, rows, K / 64 k-blocks} (strides: a row, 128 bytes a k-block):
// a box {64, box_rows, 2} is two k-blocks' 2D boxes, one after the other in shared memory.
CUtensorMap kblocks_map(EncodeTiled encode, void* p, int rows, int box_rows) {
  CUtensorMap m;
  const cuuint64_t dims[3] = {64, cuuint64_t(rows), cuuint64_t(kK / 64)}, strides[2] = {cuuint64_t(kK) * 2, 128};
  const cuuint32_t box[3] = {64, cuuint32_t(box_rows), 2}, elem[3] = {1, 1, 1};
  if (encode(&m, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 3, p, dims, strides, box, elem, CU_TENSOR_MAP_INTERLEAVE_NONE,
             CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) != CUDA_SUCCESS) {
    std::printf("encoding a 3D tensor map failed\n");
    std::exit(1);
  }
  return m;
}

const char* const kWork[] = {"wait", "wgmma", "wgmma x2"};
const char* const kOrder[] = {"-", "row", "column", "row, k 13c"};
const char* const kForm[] = {"", "  (producer: load, arm, next wait ahead)", "  (producer: the same, a converged warp)"};
const char* const kRelease = "  (release: one thread of the warpgroup a CTA)";

// alone: one cluster, its k-loop 8 times over; else every tile at once (order: 0 row, 1 column, 2
// row with each cluster's k-loop starting at its own k-block).
template <int CM, int CN, int MMA, int PROD = 0, int REL = 0>
void run_case(const Maps& maps, bool alone, int order, const char* promo, Times* out, float* sink) {
  constexpr int CS = CM * CN, mma = MMA;
  const auto kernel = intake<CM, CN, MMA, PROD, REL>;
  CK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmemBytes));
  CK(cudaFuncSetAttribute(kernel, cudaFuncAttributeNonPortableClusterSizeAllowed, 1));
  const int ctas = alone ? CS : kTiles, reps = alone ? 8 : 1;
  cudaLaunchConfig_t cfg = {};
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeClusterDimension;
  attr[0].val.clusterDim.x = CS, attr[0].val.clusterDim.y = 1, attr[0].val.clusterDim.z = 1;
  cfg.gridDim = dim3(ctas), cfg.blockDim = dim3(384), cfg.dynamicSmemBytes = kSmemBytes, cfg.attrs = attr, cfg.numAttrs = 1;
  int fits = 0;
  CK(cudaOccupancyMaxActiveClusters(&fits, kernel, &cfg));
  cudaEvent_t e0, e1;
  CK(cudaEventCreate(&e0));
  CK(cudaEventCreate(&e1));
  std::vector<Times> host(ctas);
  std::vector<double> kb_med, kb_max, launch_us;
  const int total = (kK / 64) * reps;
  for (int it = 0; it < 23; ++it) {
    CK(cudaEventRecord(e0));
    CK(cudaLaunchKernelEx(&cfg, kernel, maps, reps, order, out, sink));
    CK(cudaEventRecord(e1));
    CK(cudaDeviceSynchronize());
    if (it < 3) continue;  // warm-up: the operands come into L2
    float ms = 0;
    CK(cudaEventElapsedTime(&ms, e0, e1));
    CK(cudaMemcpy(host.data(), out, ctas * sizeof(Times), cudaMemcpyDeviceToHost));
    std::vector<double> per_kb;
    for (const Times& t : host) per_kb.push_back(double(t.end - t.steady_start) / (total - kSteadyFrom));
    kb_med.push_back(median(per_kb));
    kb_max.push_back(*std::max_element(per_kb.begin(), per_kb.end()));
    launch_us.push_back(ms * 1e3);
  }
  const double ns = median(kb_med);
  std::printf("%dx%d  %-5s %-8s %-10s %-4s %8d %8.1f %8.1f %8.1f %10.2f%s\n", CM, CN, alone ? "alone" : "all", kWork[mma],
              kOrder[alone ? 0 : order + 1], promo, fits, ns, median(kb_max), kStageBytes / ns, median(launch_us), REL ? kRelease : kForm[PROD]);
  CK(cudaEventDestroy(e0));
  CK(cudaEventDestroy(e1));
}

template <int CM, int BOX3>
void run_pairs(const Maps& maps, const Maps& maps3, bool alone, Times* out) {
  const auto kernel = intake_pairs<CM, BOX3>;
  const int smem = 6 * 2 * kStageBytes + 12 * 8 + 1024;
  CK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
  const int ctas = alone ? CM : kTiles;
  cudaLaunchConfig_t cfg = {};
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeClusterDimension;
  attr[0].val.clusterDim.x = CM, attr[0].val.clusterDim.y = 1, attr[0].val.clusterDim.z = 1;
  cfg.gridDim = dim3(ctas), cfg.blockDim = dim3(384), cfg.dynamicSmemBytes = smem, cfg.attrs = attr, cfg.numAttrs = 1;
  std::vector<Times> host(ctas);
  std::vector<double> kb_med, kb_max;
  const int pairs = kK / 64 / 2;
  for (int it = 0; it < 23; ++it) {
    CK(cudaLaunchKernelEx(&cfg, kernel, maps, maps3, out));
    CK(cudaDeviceSynchronize());
    if (it < 3) continue;
    CK(cudaMemcpy(host.data(), out, ctas * sizeof(Times), cudaMemcpyDeviceToHost));
    std::vector<double> per_kb;
    for (const Times& t : host) per_kb.push_back(double(t.end - t.steady_start) / (2.0 * (pairs - 6)));
    kb_med.push_back(median(per_kb));
    kb_max.push_back(*std::max_element(per_kb.begin(), per_kb.end()));
  }
  const double ns = median(kb_med);
  std::printf("%dx1  %-5s %-22s %8.1f %8.1f %8.1f\n", CM, alone ? "alone" : "all", BOX3 ? "one 3D box (32 KB)" : "two 2D boxes each",
              ns, median(kb_max), kStageBytes / ns);
}

// One case in each of the producer's three forms, L2 promotion 256.
template <int CM, int CN, int MMA>
void run_forms(const Maps& maps, bool alone, int order, Times* out, float* sink) {
  run_case<CM, CN, MMA, 0>(maps, alone, order, "256", out, sink);
  run_case<CM, CN, MMA, 1>(maps, alone, order, "256", out, sink);
  run_case<CM, CN, MMA, 2>(maps, alone, order, "256", out, sink);
}

// One case with each of the consumer's two releases, row order, L2 promotion 256.
template <int CM, int CN, int MMA>
void run_releases(const Maps& maps, bool alone, Times* out, float* sink) {
  run_case<CM, CN, MMA, 0, 0>(maps, alone, 0, "256", out, sink);
  run_case<CM, CN, MMA, 0, 1>(maps, alone, 0, "256", out, sink);
}

template <int CM, int CN>
void run_layout(const Maps& maps, const char* promo, bool orders, Times* out, float* sink) {
  run_case<CM, CN, 0>(maps, true, 0, promo, out, sink);
  run_case<CM, CN, 1>(maps, true, 0, promo, out, sink);
  run_case<CM, CN, 2>(maps, true, 0, promo, out, sink);
  for (int order : {0, 1, 2})
    if (orders || order == 0) {
      run_case<CM, CN, 0>(maps, false, order, promo, out, sink);
      run_case<CM, CN, 1>(maps, false, order, promo, out, sink);
      run_case<CM, CN, 2>(maps, false, order, promo, out, sink);
    }
}

}  // namespace

int main() {
  const cudaDeviceProp prop = require_sm90("tma_intake");
  const EncodeTiled encode = tensor_map_encoder();
  void *a, *b;  // the operands' values do not matter here
  CK(cudaMalloc(&a, size_t(kM) * kK * 2));
  CK(cudaMalloc(&b, size_t(kN) * kK * 2));
  CK(cudaMemset(a, 1, size_t(kM) * kK * 2));
  CK(cudaMemset(b, 1, size_t(kN) * kK * 2));
  Times* out;
  float* sink;
  CK(cudaMalloc(&out, kTiles * sizeof(Times)));
  CK(cudaMalloc(&sink, 64));
  std::printf("%s, %d SMs; 64x64 tiles of %dx%dx%d, 13 stages of 16 KB. Medians over 20 launches.\n", prop.name,
              prop.multiProcessorCount, kM, kN, kK);
  std::printf("%-4s %-5s %-8s %-10s %-4s %8s %8s %8s %8s %10s\n", "MxN", "CTAs", "consumer", "order", "L2", "clusters", "ns/kb",
              "max", "B/ns/SM", "launch us");
  for (const auto& [promotion, name] : {std::pair{CU_TENSOR_MAP_L2_PROMOTION_L2_256B, "256"},
                                        std::pair{CU_TENSOR_MAP_L2_PROMOTION_L2_128B, "128"},
                                        std::pair{CU_TENSOR_MAP_L2_PROMOTION_L2_64B, "64"},
                                        std::pair{CU_TENSOR_MAP_L2_PROMOTION_NONE, "none"}}) {
    const Maps maps{rows_map(encode, a, kM, kK, 64, promotion), rows_map(encode, a, kM, kK, 32, promotion),
                    rows_map(encode, b, kN, kK, 64, promotion), rows_map(encode, b, kN, kK, 32, promotion)};
    const bool first = promotion == CU_TENSOR_MAP_L2_PROMOTION_L2_256B;  // the orders with one promotion only
    run_layout<1, 1>(maps, name, first, out, sink);
    run_layout<2, 1>(maps, name, first, out, sink);
    if (promotion == CU_TENSOR_MAP_L2_PROMOTION_L2_64B || promotion == CU_TENSOR_MAP_L2_PROMOTION_NONE) continue;
    run_layout<1, 2>(maps, name, first, out, sink);
    run_layout<2, 2>(maps, name, first, out, sink);
  }
  // Two k-blocks a stage, loads only: each operand's pair as two 2D boxes or one 3D box.
  std::printf("\nLoads only, 6 stages of two k-blocks (32 KB), row order, L2 promotion 256:\n");
  std::printf("%-4s %-5s %-22s %8s %8s %8s\n", "MxN", "CTAs", "loads a stage (A, B)", "ns/kb", "max", "B/ns/SM");
  const Maps maps{rows_map(encode, a, kM, kK, 64), rows_map(encode, a, kM, kK, 32), rows_map(encode, b, kN, kK, 64),
                  rows_map(encode, b, kN, kK, 32)};
  const Maps maps3{kblocks_map(encode, a, kM, 64), kblocks_map(encode, a, kM, 32), kblocks_map(encode, b, kN, 64),
                   kblocks_map(encode, b, kN, 32)};
  for (bool alone : {true, false}) {
    run_pairs<1, 0>(maps, maps3, alone, out);
    run_pairs<1, 1>(maps, maps3, alone, out);
    run_pairs<2, 0>(maps, maps3, alone, out);
    run_pairs<2, 1>(maps, maps3, alone, out);
  }
  // The producer's form, L2 promotion 256, row order (and 2x1 with each cluster at its own k).
  std::printf("\nThe producer's form (the rows without a note: wait, arm, load, as above):\n");
  run_forms<1, 1, 0>(maps, true, 0, out, sink);
  run_forms<2, 1, 0>(maps, true, 0, out, sink);
  for (int order : {0, 2}) run_forms<2, 1, 0>(maps, false, order, out, sink);
  run_forms<1, 1, 0>(maps, false, 0, out, sink);
  run_forms<2, 1, 1>(maps, false, 0, out, sink);
  // The consumer's release: every consumer warp on every CTA, or one thread of the warpgroup a CTA.
  std::printf("\nThe consumer's release (the rows without a note: every warp arrives on every CTA):\n");
  run_releases<2, 1, 0>(maps, true, out, sink);
  run_releases<2, 1, 1>(maps, true, out, sink);
  run_releases<1, 1, 1>(maps, true, out, sink);
  run_releases<2, 1, 0>(maps, false, out, sink);
  run_releases<2, 1, 1>(maps, false, out, sink);
  run_releases<1, 1, 1>(maps, false, out, sink);
  return 0;
}
