// Distributed shared memory: stores into a peer CTA's shared memory that complete on an mbarrier of
// that CTA (PTX ISA "st.async", "mapa"; sm_90). The receiver counts the bytes it expects with
// mbarrier_arrive_expect_tx on its own barrier; each st.async adds its bytes when it lands, so the
// receiver's wait on that barrier ends when every store has arrived and makes them visible.
#pragma once
#include <cstdint>

namespace gemmtrace {

// The address of this CTA's shared-memory location `addr` in CTA `cta_rank` of the cluster.
__device__ __forceinline__ uint32_t peer_smem_addr(uint32_t addr, uint32_t cta_rank) {
  uint32_t remote;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(remote) : "r"(addr), "r"(cta_rank));
  return remote;
}

// 16 bytes into a peer's shared memory (remote_addr from peer_smem_addr), completing 16 bytes of
// the transaction count of the peer's barrier at remote_bar (also a peer_smem_addr).
__device__ __forceinline__ void st_async_f32x4(uint32_t remote_addr, float a, float b, float c, float d, uint32_t remote_bar) {
  asm volatile("st.async.shared::cluster.mbarrier::complete_tx::bytes.v4.f32 [%0], {%1, %2, %3, %4}, [%5];" ::"r"(remote_addr),
               "f"(a), "f"(b), "f"(c), "f"(d), "r"(remote_bar)
               : "memory");
}

__device__ __forceinline__ float4 ld_shared_f32x4(uint32_t addr) {
  float4 v;
  asm volatile("ld.shared.v4.f32 {%0, %1, %2, %3}, [%4];" : "=f"(v.x), "=f"(v.y), "=f"(v.z), "=f"(v.w) : "r"(addr) : "memory");
  return v;
}

}  // namespace gemmtrace
