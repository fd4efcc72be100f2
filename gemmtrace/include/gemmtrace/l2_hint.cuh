// L2 eviction priorities for data that CTAs pass to each other through global memory (PTX ISA
// "createpolicy" and the .L2::cache_hint qualifier of ld and st). A stream-K partial tile is written
// by one CTA and read back by another, often tens of microseconds later, after the mainloops have
// streamed more than the L2 holds: at the default priority it has gone to DRAM and back by then.
// Written evict-last it stays; read evict-first, its lines are the first to go once it is dead.
// (Kept this way, partials take L2 from operands that concurrent tiles share: the stream-K
// scheduler keeps them only where that sharing is small; stream_k.cuh says when.)
#pragma once
#include <cstdint>

namespace gemmtrace {

__device__ __forceinline__ uint64_t l2_policy_evict_last() {
  uint64_t policy;
  asm volatile("createpolicy.fractional.L2::evict_last.b64 %0, 1.0;" : "=l"(policy));
  return policy;
}

__device__ __forceinline__ uint64_t l2_policy_evict_normal() {
  uint64_t policy;
  asm volatile("createpolicy.fractional.L2::evict_normal.b64 %0, 1.0;" : "=l"(policy));
  return policy;
}

__device__ __forceinline__ uint64_t l2_policy_evict_first() {
  uint64_t policy;
  asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(policy));
  return policy;
}

// Stores and loads cached in L2 only (as __stcg, __ldcg), with an L2 policy. Volatile, so that they
// stay in program order with the flag operations (flags.cuh) that publish and acquire the data, but
// without a memory clobber, so the loads of a batch still issue back to back.
__device__ __forceinline__ void st_cg_hint(float4* a, float4 v, uint64_t policy) {
  asm volatile("st.global.cg.L2::cache_hint.v4.f32 [%0], {%1, %2, %3, %4}, %5;" ::"l"(a), "f"(v.x), "f"(v.y), "f"(v.z),
               "f"(v.w), "l"(policy));
}

__device__ __forceinline__ float4 ld_cg_hint(const float4* a, uint64_t policy) {
  float4 v;
  asm volatile("ld.global.cg.L2::cache_hint.v4.f32 {%0, %1, %2, %3}, [%4], %5;"
               : "=f"(v.x), "=f"(v.y), "=f"(v.z), "=f"(v.w)
               : "l"(a), "l"(policy));
  return v;
}

__device__ __forceinline__ float2 ld_cg_hint(const float2* a, uint64_t policy) {
  float2 v;
  asm volatile("ld.global.cg.L2::cache_hint.v2.f32 {%0, %1}, [%2], %3;" : "=f"(v.x), "=f"(v.y) : "l"(a), "l"(policy));
  return v;
}

}  // namespace gemmtrace
