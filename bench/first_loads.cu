// first_loads: what a launch of persistent CTAs pays before its first TMA loads land (sm_90a).
//
//   nvcc -O3 -std=c++17 -gencode arch=compute_90a,code=sm_90a -o first_loads bench/first_loads.cu && ./first_loads
//
// 128 CTAs of 384 threads in clusters of two, 200 KB of shared memory each (the persistent kernels'
// launch), each CTA's thread 0: initialise barriers, cluster barrier, then per stage one 16 KB load
// of A (128 rows x 64 k) and 32 KB of B (256 rows x 64 k), B either as two loads of its own or as two
// halves multicast across the cluster (one issued by each CTA), then wait for the stages.
// - Patterns: "in step": every cluster at k = 0 of its own 256x256 tile of a 2048^3 product (a
//   one-wave kernel's first k-block); "spread": two 256-row panels of K = 16384, cluster c at
//   k-block 7c (stream-K segments, each at its own k offset).
// - Before the loads: nothing, 32 calls to functions spread over the code (cold code), 4 dependent
//   parameter reads, or one global read.
// - What the L2 and instruction caches hold: the same launch just ran ("warm"); 256 MB read since
//   ("after read": operands and code out of L2); that and 512 KB of other code run on every SM
//   ("cold code").
// Prints, per case, the median over launches of the median and the maximum over CTAs, in ns:
// entry to barriers ready, to the first stage's loads issued, from issue to the first stage's data
// and to every stage's. (bench/NOTES.md: "The head of a launch, in a microbenchmark".)
#include <utility>

#include "sm90_bench.cuh"

namespace {

using namespace sm90_bench;

constexpr int kCtas = 128, kStageBytes = 49152, kMaxStages = 4;

__device__ __forceinline__ uint64_t clock64() { uint64_t t; asm volatile("mov.u64 %0, %%clock64;" : "=l"(t)); return t; }
__device__ __forceinline__ bool try_wait(uint32_t bar) {
  uint32_t done;
  asm volatile("{\n .reg .pred p;\n mbarrier.try_wait.parity.shared::cta.b64 p, [%1], 0;\n selp.u32 %0, 1, 0, p;\n}"
               : "=r"(done) : "r"(bar) : "memory");
  return done != 0;
}
__device__ __forceinline__ void load(uint32_t dst, const CUtensorMap* map, uint32_t bar, int k, int row) {
  asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%3, %4}], [%2];"
               ::"r"(dst), "l"(map), "r"(bar), "r"(k), "r"(row) : "memory");
}
__device__ __forceinline__ void load_multicast(uint32_t dst, const CUtensorMap* map, uint32_t bar, int k, int row) {
  asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes.multicast::cluster"
               " [%0], [%1, {%3, %4}], [%2], %5;" ::"r"(dst), "l"(map), "r"(bar), "r"(k), "r"(row), "h"(uint16_t(3)) : "memory");
}

// 56 dependent instructions; 32 of these called in a scattered order make code the caches miss.
template <int N>
__device__ __noinline__ uint32_t code_block(uint32_t x) {
#pragma unroll
  for (int i = 0; i < 28; ++i)
    asm volatile("shf.l.wrap.b32 %0, %0, %0, 7;\n add.u32 %0, %0, %1;" : "+r"(x) : "r"(uint32_t(N * 977 + i * 131)));
  return x;
}
template <int... I>
__device__ uint32_t scattered_calls(uint32_t x, std::integer_sequence<int, I...>) {
  ((x = code_block<(I * 13) % 32>(x)), ...);
  return x;
}

struct Chain { int next[160]; };  // next[i]: the parameter to read after parameter i
struct Times { uint64_t g_entry, c_entry, c_ready, c_issued, c_first, c_all, g_end, c_end; };

__global__ void __cluster_dims__(2, 1, 1) __launch_bounds__(384, 1)
    probe(const __grid_constant__ CUtensorMap map_a, const __grid_constant__ CUtensorMap map_b, const __grid_constant__ Chain chain,
          const int* table, Times* out, int spread, int multicast, int stages, int before) {
  extern __shared__ __align__(1024) uint8_t smem[];
  const uint32_t buf = (uint32_t(__cvta_generic_to_shared(smem)) + 1023) & ~1023u;
  const uint32_t bar0 = buf + kMaxStages * kStageBytes;
  uint32_t rank;
  asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(rank));
  uint64_t g0 = 0, c0 = 0;
  if (threadIdx.x == 0) {
    g0 = globaltimer(), c0 = clock64();
    asm volatile("prefetch.tensormap [%0];" ::"l"(&map_a) : "memory");
    asm volatile("prefetch.tensormap [%0];" ::"l"(&map_b) : "memory");
    for (int s = 0; s < kMaxStages; ++s) asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(bar0 + 8 * s) : "memory");
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  }
  asm volatile("barrier.cluster.arrive.relaxed.aligned;\nbarrier.cluster.wait.acquire.aligned;" ::: "memory");
  if (threadIdx.x == 0) {
    const uint64_t c1 = clock64();
    int extra = 0;  // always 0: keeps the work before the loads on their path
    if (before == 1) extra = int(scattered_calls(blockIdx.x, std::make_integer_sequence<int, 32>{}) & 0x10000);
    if (before == 2) extra = chain.next[chain.next[chain.next[chain.next[0]]]] & 0x10000;
    if (before == 3) extra = table[blockIdx.x] & 0x10000;
    const int cluster = int(blockIdx.x) / 2 + extra;
    // in step: the cluster's 256x256 tile of 2048^3 at k = 0; spread: a 256-row panel pair at k-block 7c
    const int a_row = spread ? int(rank) * 128 : (2 * (cluster / 8) + int(rank)) * 128;
    const int b_row = spread ? 0 : (cluster % 8) * 256;
    const int kb0 = spread ? (cluster * 7) % 240 : 0;
    for (int s = 0; s < stages; ++s) {
      const uint32_t bar = bar0 + 8 * s, stage = buf + s * kStageBytes;
      const int k = (kb0 + s) * 64;
      asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(bar), "r"(kStageBytes) : "memory");
      load(stage, &map_a, bar, k, a_row);
      if (multicast) {
        load_multicast(stage + 16384 * (1 + rank), &map_b, bar, k, b_row + int(rank) * 128);
      } else {
        load(stage + 16384, &map_b, bar, k, b_row);
        load(stage + 32768, &map_b, bar, k, b_row + 128);
      }
    }
    const uint64_t c2 = clock64();
    while (!try_wait(bar0)) {}
    const uint64_t c3 = clock64();
    for (int s = 1; s < stages; ++s)
      while (!try_wait(bar0 + 8 * s)) {}
    out[blockIdx.x] = Times{g0, c0, c1, c2, c3, clock64(), globaltimer(), clock64()};
  }
  // Leave together: no CTA's shared memory goes while its peer may still multicast into it.
  asm volatile("barrier.cluster.arrive.release.aligned;\nbarrier.cluster.wait.acquire.aligned;" ::: "memory");
}

__global__ void read_through(const float4* p, size_t n, float* sink) {
  float s = 0;
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) s += p[i].x;
  if (s == 12345.f) sink[0] = s;
}

// 512 KB of straight-line code on every SM: pushes the probe's code out of the instruction caches.
__global__ void other_code(uint32_t* sink) {
  uint32_t x = threadIdx.x;
#pragma unroll
  for (int i = 0; i < 16000; ++i) asm volatile("shf.l.wrap.b32 %0, %0, %0, 7;\n add.u32 %0, %0, %1;" : "+r"(x) : "r"(uint32_t(i * 7919)));
  if (x == 0x12345678u) sink[0] = x;
}

}  // namespace

int main() {
  const cudaDeviceProp prop = require_sm90("first_loads");
  const EncodeTiled encode = tensor_map_encoder();
  // Operands: 2048 x 2048 (in step) and 256 x 16384 (spread), bf16; their values do not matter here.
  void *a, *b, *pa, *pb;
  for (void** p : {&a, &b}) {
    CK(cudaMalloc(p, size_t(2048) * 2048 * 2));
    CK(cudaMemset(*p, 1, size_t(2048) * 2048 * 2));
  }
  for (void** p : {&pa, &pb}) {
    CK(cudaMalloc(p, size_t(256) * 16384 * 2));
    CK(cudaMemset(*p, 1, size_t(256) * 16384 * 2));
  }
  const CUtensorMap in_step[2] = {rows_map(encode, a, 2048, 2048, 128), rows_map(encode, b, 2048, 2048, 128)};
  const CUtensorMap spread[2] = {rows_map(encode, pa, 256, 16384, 128), rows_map(encode, pb, 256, 16384, 128)};
  const size_t flush_n = (size_t(256) << 20) / 16;
  float4* flush;
  CK(cudaMalloc(&flush, flush_n * 16));
  CK(cudaMemset(flush, 0, flush_n * 16));
  float* sink;
  CK(cudaMalloc(&sink, 64));
  int* table;
  CK(cudaMalloc(&table, kCtas * 4));
  CK(cudaMemset(table, 0, kCtas * 4));
  Chain chain{};
  chain.next[0] = 32, chain.next[32] = 64, chain.next[64] = 96, chain.next[96] = 128;  // 128 bytes apart
  Times* out;
  CK(cudaMalloc(&out, kCtas * sizeof(Times)));
  const int smem = 200 * 1024;
  CK(cudaFuncSetAttribute(probe, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
  std::vector<Times> host(kCtas);

  const char* before_name[] = {"nothing", "32 far calls", "4 dep. params", "1 global read"};
  const char* state_name[] = {"warm", "after read", "cold code"};
  std::printf("%s, %d CTAs in clusters of 2, 48 KB a stage. ns: median over 20 launches of [median | max over CTAs]\n", prop.name, kCtas);
  std::printf("%-8s %-9s %-14s %-10s %6s %15s %15s %15s %15s\n", "pattern", "B", "before loads", "caches", "stages", "entry->ready",
              "ready->issued", "issued->first", "issued->all");
  struct Case { int spread, multicast, stages, before, state; };
  std::vector<Case> cases;
  for (int spread : {0, 1})
    for (int multicast : {0, 1})
      for (int state : {0, 1})
        for (int stages : {1, 4}) cases.push_back({spread, multicast, stages, 0, state});
  for (int before : {1, 2, 3})
    for (int state : {0, 1, 2}) cases.push_back({0, 1, 1, before, state});
  cases.push_back({0, 1, 1, 0, 2});
  for (const Case& c : cases) {
    const CUtensorMap* maps = c.spread ? spread : in_step;
    std::vector<double> stat[4][2];
    for (int it = 0; it < 23; ++it) {
      if (c.state == 0) probe<<<kCtas, 384, smem>>>(maps[0], maps[1], chain, table, out, c.spread, c.multicast, c.stages, c.before);
      if (c.state == 2) other_code<<<2 * kCtas, 128>>>(reinterpret_cast<uint32_t*>(sink));
      if (c.state >= 1) read_through<<<4 * kCtas, 512>>>(flush, flush_n, sink);
      probe<<<kCtas, 384, smem>>>(maps[0], maps[1], chain, table, out, c.spread, c.multicast, c.stages, c.before);
      CK(cudaDeviceSynchronize());
      CK(cudaMemcpy(host.data(), out, kCtas * sizeof(Times), cudaMemcpyDeviceToHost));
      if (it < 3) continue;  // warm-up
      std::vector<double> v[4];
      for (const Times& t : host) {
        const double ns_per_clock = double(t.g_end - t.g_entry) / double(t.c_end - t.c_entry);
        v[0].push_back((t.c_ready - t.c_entry) * ns_per_clock);
        v[1].push_back((t.c_issued - t.c_ready) * ns_per_clock);
        v[2].push_back((t.c_first - t.c_issued) * ns_per_clock);
        v[3].push_back((t.c_all - t.c_issued) * ns_per_clock);
      }
      for (int k = 0; k < 4; ++k) stat[k][0].push_back(median(v[k])), stat[k][1].push_back(*std::max_element(v[k].begin(), v[k].end()));
    }
    std::printf("%-8s %-9s %-14s %-10s %6d", c.spread ? "spread" : "in step", c.multicast ? "multicast" : "own", before_name[c.before],
                state_name[c.state], c.stages);
    for (int k = 0; k < 4; ++k) std::printf("  %6.0f|%6.0f", median(stat[k][0]), median(stat[k][1]));
    std::printf("\n");
  }
  return 0;
}
