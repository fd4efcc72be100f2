// mbarrier wrappers (PTX ISA "Parallel Synchronization and Communication Instructions: mbarrier").
#pragma once
#include <cstdint>

#include "debug.cuh"

namespace gemmtrace {

__device__ __forceinline__ uint32_t smem_addr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

__device__ __forceinline__ void mbarrier_init(uint32_t bar, uint32_t arrivals) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(bar), "r"(arrivals) : "memory");
}

// Make barrier initialisation visible to the async proxy (TMA) and, for clusters, to peer CTAs.
__device__ __forceinline__ void mbarrier_init_fence() {
  asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
}

__device__ __forceinline__ void mbarrier_arrive_expect_tx(uint32_t bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(bar), "r"(bytes) : "memory");
}

__device__ __forceinline__ void mbarrier_arrive(uint32_t bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(bar) : "memory");
}

// Arrive on the barrier at the same smem offset in CTA `cta_rank` of the cluster. Default semantics
// (release at CTA scope), as CUTLASS's ClusterBarrier::arrive(cta_id): what orders this warp's
// finished wgmma reads before the peer's next TMA write is the barrier itself; a .release.cluster
// arrive costs a cluster-scope fence per k-block.
__device__ __forceinline__ void mbarrier_arrive_cluster(uint32_t bar, uint32_t cta_rank) {
  asm volatile(
      "{\n .reg .b32 remote;\n mapa.shared::cluster.u32 remote, %0, %1;\n"
      " mbarrier.arrive.shared::cluster.b64 _, [remote];\n}" ::"r"(bar),
      "r"(cta_rank)
      : "memory");
}

__device__ __forceinline__ bool mbarrier_try_wait(uint32_t bar, uint32_t parity) {
  uint32_t done;
  asm volatile(
      "{\n .reg .pred p;\n mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n selp.u32 %0, 1, 0, p;\n}"
      : "=r"(done)
      : "r"(bar), "r"(parity)
      : "memory");
  return done != 0;
}

// try_wait with acquire at cluster scope: for barriers a peer CTA arrives on after writing into
// this CTA's shared memory (release.cluster on the other side), so those writes are visible.
__device__ __forceinline__ bool mbarrier_try_wait_cluster(uint32_t bar, uint32_t parity) {
  uint32_t done;
  asm volatile(
      "{\n .reg .pred p;\n mbarrier.try_wait.parity.acquire.cluster.shared::cta.b64 p, [%1], %2;\n selp.u32 %0, 1, 0, p;\n}"
      : "=r"(done)
      : "r"(bar), "r"(parity)
      : "memory");
  return done != 0;
}

// Arrive on the barrier at the same offset in CTA `cta_rank`, releasing this thread's earlier
// writes (st.shared::cluster included) at cluster scope: the peer's acquire wait then sees them.
__device__ __forceinline__ void mbarrier_arrive_release_cluster(uint32_t bar, uint32_t cta_rank) {
  asm volatile(
      "{\n .reg .b32 remote;\n mapa.shared::cluster.u32 remote, %0, %1;\n"
      " mbarrier.arrive.release.cluster.shared::cluster.b64 _, [remote];\n}" ::"r"(bar),
      "r"(cta_rank)
      : "memory");
}

// Store a 32-bit value at the same shared-memory offset in CTA `cta_rank` of the cluster.
__device__ __forceinline__ void st_shared_cluster(uint32_t addr, uint32_t cta_rank, int32_t value) {
  asm volatile(
      "{\n .reg .b32 remote;\n mapa.shared::cluster.u32 remote, %0, %1;\n st.shared::cluster.s32 [remote], %2;\n}" ::"r"(addr),
      "r"(cta_rank), "r"(value)
      : "memory");
}

// Wait with no bound, in debug builds too: for a wait that outlasts a bounded one elsewhere only
// when that other wait never ends, so the bounded wait's report names the cause (a CTA draining
// its peers' arrives before it leaves waits on consumers that wait on data).
__device__ __forceinline__ void mbarrier_wait_unbounded(uint32_t bar, uint32_t parity) {
  while (!mbarrier_try_wait(bar, parity)) {
  }
}

// Wait until the barrier's phase with the given parity has completed. kClusterScope: acquire at
// cluster scope, for barriers a peer CTA completes after writing into this CTA's shared memory.
// In debug builds (GEMMTRACE_DEBUG) the wait is bounded: on expiry it reports `site` and stops
// the kernel.
template <bool kClusterScope = false>
__device__ __forceinline__ void mbarrier_wait(uint32_t bar, uint32_t parity, const WaitSite& site) {
  auto ready = [&] { return kClusterScope ? mbarrier_try_wait_cluster(bar, parity) : mbarrier_try_wait(bar, parity); };
#ifdef GEMMTRACE_DEBUG
  const uint64_t t0 = debug_clock_ns();
  while (!ready()) {
    if (debug_clock_ns() - t0 > GEMMTRACE_WAIT_TIMEOUT_NS) debug_report_hang(site, bar, parity);
  }
#else
  (void)site;
  while (!ready()) {
  }
#endif
}

}  // namespace gemmtrace
