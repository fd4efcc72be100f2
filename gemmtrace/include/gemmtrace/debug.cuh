// Debug builds (-DGEMMTRACE_DEBUG): bounded waits that report where a kernel would have hung.
//
// A wait that expires writes one HangReport into host-mapped pinned memory (which stays readable
// after the kernel traps and the context is lost), then traps. The host prints it as one sentence:
// which role on which SM waited on which barrier for which tile.
#pragma once
#include <cstdint>

#ifndef GEMMTRACE_WAIT_TIMEOUT_NS
#define GEMMTRACE_WAIT_TIMEOUT_NS 2000000000ull  // 2 s: far beyond any healthy wait
#endif

namespace gemmtrace {

// Identifies a wait in the kernel: filled in by the caller (cheap: a few registers).
struct WaitSite {
  uint32_t role;     // gemmtrace::Role
  uint32_t barrier;  // kernel-defined barrier id (see the kernel's BarrierId enum)
  uint32_t tile;
  uint32_t kblock;
};

struct HangReport {
  uint32_t magic;  // kHangMagic once written
  uint32_t sm, cta, warp;
  uint32_t role, barrier, tile, kblock;
  uint32_t parity, smem_addr;
};
constexpr uint32_t kHangMagic = 0x48414E47u;  // "HANG"

#ifdef GEMMTRACE_DEBUG
// Set by the host launcher before each debug launch (cudaMemcpyToSymbol would need the module;
// a __device__ pointer in each kernel's translation unit is simplest).
__device__ HangReport* g_hang_report;
__device__ uint32_t g_hang_claimed;  // in device memory: atomics on host-mapped memory are not portable
// 1: producers drop their first TMA load, so consumers wait on a barrier that never completes: a
// deliberately broken launch that shows the bounded waits firing (tests/test_gpu_kernels.py).
__device__ int32_t g_debug_fault;
__device__ __forceinline__ bool debug_drop_load(int kb) { return g_debug_fault == 1 && kb == 0; }

__device__ __forceinline__ uint64_t debug_clock_ns() {
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

// The first waiter to expire writes the report and traps. The others return to their waits, which
// call again and return again until that trap ends the kernel: seen on an H100, a second waiter
// trapping at once ended the kernel while the reporter's stores were still in flight. (A wait loop
// inside this non-inlined function makes ptxas fail register allocation under setmaxnreg.)
__device__ __noinline__ void debug_report_hang(const WaitSite& site, uint32_t bar, uint32_t parity) {
  HangReport* r = g_hang_report;
  if (r == nullptr) asm volatile("trap;");
  if (atomicCAS(&g_hang_claimed, 0u, 1u) != 0u) return;
  uint32_t sm;
  asm volatile("mov.u32 %0, %%smid;" : "=r"(sm));
  r->sm = sm;
  r->cta = blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z);
  r->warp = threadIdx.x / 32;
  r->role = site.role;
  r->barrier = site.barrier;
  r->tile = site.tile;
  r->kblock = site.kblock;
  r->parity = parity;
  r->smem_addr = bar;
  __threadfence_system();  // the fields land before the magic word that says they are valid
  *reinterpret_cast<volatile uint32_t*>(&r->magic) = kHangMagic;
  __threadfence_system();
  asm volatile("trap;");
}
#else
__device__ __forceinline__ constexpr bool debug_drop_load(int) { return false; }
#endif

}  // namespace gemmtrace
