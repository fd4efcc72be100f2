// Thread-block cluster helpers (PTX ISA "barrier.cluster", "%cluster_ctarank").
#pragma once
#include <cstdint>

namespace gemmtrace {

__device__ __forceinline__ uint32_t cluster_ctarank() {
  uint32_t r;
  asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(r));
  return r;
}

// This cluster's index in the grid and the number of clusters (1-D grids). Volatile reads: a kernel
// that splits its registers (setmaxnreg) can re-read them after the split instead of carrying them
// across it, which ptxas would otherwise spill.
__device__ __forceinline__ uint32_t cluster_index() {
  uint32_t r;
  asm volatile("mov.u32 %0, %%clusterid.x;" : "=r"(r));
  return r;
}
__device__ __forceinline__ uint32_t cluster_count() {
  uint32_t r;
  asm volatile("mov.u32 %0, %%nclusterid.x;" : "=r"(r));
  return r;
}

// Every thread of every CTA in the cluster arrives and waits: orders barrier initialisation before
// peers use it, and keeps a CTA's shared memory alive until its peers are done with it.
__device__ __forceinline__ void cluster_sync() {
  asm volatile("barrier.cluster.arrive.release.aligned;\nbarrier.cluster.wait.acquire.aligned;" ::: "memory");
}

// The barrier after mbarrier initialisation: the initialising thread's fence.mbarrier_init
// (mbarrier_init_fence) already releases the inits to the cluster, so the arrive can be relaxed and
// need not wait for every earlier memory operation. The release form cost the persistent kernels
// about 0.5 us at the start of every launch on the H100 (their setup span: 0.7 against 0.2 us).
// In two halves, work that needs nobody's initialisation can run between them while the barrier
// completes (the persistent kernels set up their recorders there).
__device__ __forceinline__ void cluster_arrive_after_init() { asm volatile("barrier.cluster.arrive.relaxed.aligned;" ::: "memory"); }
__device__ __forceinline__ void cluster_wait() { asm volatile("barrier.cluster.wait.acquire.aligned;" ::: "memory"); }
__device__ __forceinline__ void cluster_sync_after_init() {
  cluster_arrive_after_init();
  cluster_wait();
}

// Synchronize `threads` threads (a multiple of 32) on named barrier `id` (1..15; 0 is __syncthreads).
__device__ __forceinline__ void named_barrier_sync(uint32_t id, uint32_t threads) {
  asm volatile("bar.sync %0, %1;" ::"r"(id), "r"(threads) : "memory");
}

}  // namespace gemmtrace
