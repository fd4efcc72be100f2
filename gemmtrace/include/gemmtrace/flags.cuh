// Flags in global memory between CTAs of one grid: one group of threads publishes data, another
// (on another SM) waits for it. PTX ISA "Memory Consistency Model": the release and acquire patterns
// at gpu scope, and "Parallel Synchronization and Communication Instructions: ld, st, fence".
//
// The protocol, as the kernels use it:
//   writers: every thread stores its data; bar.sync of the group; one thread flag_release(flag, 1).
//   reader:  one thread flag_wait(flag, 1); bar.sync of the group; every thread loads the data.
// bar.sync orders the other threads' stores before the releasing thread's fence (and the acquiring
// thread's load before the other threads' loads), and causality order is transitive, so every
// reader thread sees every writer thread's data. The data itself moves by ordinary (weak) loads and
// stores in the generic proxy: no proxy fence is needed.
#pragma once
#include <cstdint>

#include "debug.cuh"

namespace gemmtrace {

// Release: fence.acq_rel.gpu then a relaxed store (the release pattern of the memory model; the
// fence also covers the writes a bar.sync ordered before this thread's fence).
__device__ __forceinline__ void flag_release(int32_t* flag, int32_t value) {
  asm volatile("fence.acq_rel.gpu;\n st.relaxed.gpu.global.s32 [%0], %1;" ::"l"(flag), "r"(value) : "memory");
}

__device__ __forceinline__ int32_t flag_load_acquire(const int32_t* flag) {
  int32_t v;
  asm volatile("ld.acquire.gpu.global.s32 %0, [%1];" : "=r"(v) : "l"(flag) : "memory");
  return v;
}

// An atomic add at gpu scope with acquire and release semantics; returns the old value. Counts
// arrivals: the release publishes what this thread (and, through bar.sync, its group) did before,
// the acquire lets the last arrival see all of it.
__device__ __forceinline__ int32_t flag_add_acq_rel(int32_t* flag, int32_t value) {
  int32_t old;
  asm volatile("atom.acq_rel.gpu.global.add.s32 %0, [%1], %2;" : "=r"(old) : "l"(flag), "r"(value) : "memory");
  return old;
}

// An add at gpu scope with release semantics, result unused: counts a publication that readers
// await with flag_wait (the release covers what this thread, and through bar.sync its group, wrote).
__device__ __forceinline__ void flag_add_release(int32_t* flag, int32_t value) {
  asm volatile("red.release.gpu.global.add.s32 [%0], %1;" ::"l"(flag), "r"(value) : "memory");
}

// Take a number from a counter that hands out 0, 1, ..., last and then starts again at 0 (atom.inc:
// the take that draws `last` leaves the counter at zero for the next launch), at gpu scope with no
// ordering. Returns the number taken; the thread runs on until something reads it. (ptxas aggregates
// an atomicAdd, or an atom.add, at a warp-uniform address across the warp, and the shuffle that
// hands out the aggregated result waits for it at once; it leaves atom.inc alone.)
__device__ __forceinline__ int32_t counter_take(int32_t* counter, int32_t last) {
  int32_t taken;
  asm volatile("atom.relaxed.gpu.global.inc.u32 %0, [%1], %2;" : "=r"(taken) : "l"(counter), "r"(last) : "memory");
  return taken;
}

// A store nobody synchronizes on (resetting a flag that only this thread reads again).
__device__ __forceinline__ void flag_store_relaxed(int32_t* flag, int32_t value) {
  asm volatile("st.relaxed.gpu.global.s32 [%0], %1;" ::"l"(flag), "r"(value) : "memory");
}

// Wait until *flag == value, with acquire semantics. In debug builds (GEMMTRACE_DEBUG) the wait is
// bounded like mbarrier_wait's: on expiry it reports `site` (the flag's low address bits in place
// of a barrier address, the awaited value in place of a parity) and stops the kernel.
__device__ __forceinline__ void flag_wait(const int32_t* flag, int32_t value, const WaitSite& site) {
#ifdef GEMMTRACE_DEBUG
  const uint64_t t0 = debug_clock_ns();
  while (flag_load_acquire(flag) != value) {
    if (debug_clock_ns() - t0 > GEMMTRACE_WAIT_TIMEOUT_NS)
      debug_report_hang(site, uint32_t(reinterpret_cast<uintptr_t>(flag)), uint32_t(value));
  }
#else
  (void)site;
  while (flag_load_acquire(flag) != value) {
  }
#endif
}

}  // namespace gemmtrace
